"""The timeline: every event of a run's trace files, indexed once, any step of it read back in milliseconds.

Sources (one per rank): the trace files each reader lists for its folders (formats/base.Reader.traces, a
TraceFile each): a Chrome trace JSON (trace_view.json, MindInsight's *_timeline_display_{r}.json), the op times
MindSpore wrote as text where a rank has no JSON timeline (trace_text.py), or a file its reader reads itself (the
database export's). They are parsed block by block (trace_json.py) and each block is written, sorted by start time,
as one Parquet part of the index: memory stays bounded by the block, not the trace. A window reads only the parts
whose time range meets it, and inside them only the row groups that do (Parquet min/max statistics).

The index lives in perfkit's cache dir (cache.usable_root: never inside the run; without a usable cache, in a
temporary folder of the process, removed at exit), under
`timeline/<run>/<digest>`, where the digest covers the trace files' (path, size, mtime) and the code
that builds the index: a changed file or a new perfkit makes a new index. It is written to a
temporary folder and renamed into place, so a half-written index is never seen; an index that cannot
be read back is deleted and rebuilt; one that cannot be written in the cache (full disk, read-only) turns
the cache off (one warning) and is built in the temporary folder; failing there too is an error naming
it, with nothing left behind.

Steps: the loader's steps (one step definition for every view): the step bounds `perfkit profile` recorded
(perfkit_run.json, read by the readers that give `step_times`) where they fall on the trace's clock, else the
trace's own step markers (`ProfilerStep#N`, written by the profiler's `step()`), else the bounds its reader reads
from a step file (TraceFile.step_bounds: kernel_details.csv's Step IDs, the legacy step trace's points, the
database's STEP_TIME), else the op runs by the loader's rules (formats/steps.py: a step begins where the one
before it ended); times are µs as the trace writes them.

A warm call finds the index through a kept answer (cache.answer_entry) and cuts the window in Arrow
alone: `perfkit trace` on an indexed run never imports pandas (parallel.pyarrow_without_pandas).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core import plugins
from ..core.errors import FileFormatError, PerfkitError
from ..core.opnames import comm_kind, op_types_of
from ..core.units import NS_PER_US, US_PER_MS
from ..core.version import __version__
from . import cache
from .trace_json import MAX_WORKERS, Stats, map_blocks
from .trace_text import TEXT_TRACES, text_trace_blocks

if TYPE_CHECKING:
    import pandas as pd

    from ..core.model import Run
    from .cycles import Cycle
    from .formats.base import TraceFile

# Imported where used, not here: pandas (~0.4 s; the step fallbacks need it) and the reader registry (~0.05 s;
# trace_files needs it, and imports pandas only in its read functions): `perfkit trace` on an indexed run
# answers without either (the warm window and its export are Arrow alone), and a cold one without pandas.

# Bump when the layout of an index on disk changes; old indexes are then simply never found.
INDEX_FORMAT = 1
INDEX_FILE = "index.json"
# Row groups of this many events (a step of the benchmark trace has ~10,000): a window reads the few
# whose start times meet it, not the part.
ROW_GROUP_ROWS = 16 * 1024
# The code an index depends on: this module, the trace parsers, how the trace files are found (discovery, the
# profiler cycle chosen, the readers' traces and step bounds) and what all of it imports; installed plugins' code
# too (plugins.code_paths): their readers list traces.
PACKAGE = Path(__file__).resolve().parent
CODE = (PACKAGE.parent / "core", PACKAGE / "formats",
        *(PACKAGE / name for name in ("timeline.py", "trace_json.py", "trace_text.py", "parallel.py", "discovery.py",
                                      "cycles.py", "cache.py")))
# The kept answer "where is this run's index" (cache answers: keyed by every file under the run): a warm
# call finds its index without walking the readers' detection (which needs the reader registry).
LOCATION_QUESTION = ("timeline-index",)
STEP_MARKER = re.compile(r"ProfilerStep#(\d+)")
STEP_PREFIX = "ProfilerStep#"
# Metadata events naming and ordering the lanes (Chrome trace format).
LANE_METADATA = ("process_name", "thread_name", "process_sort_index", "thread_sort_index")
# Categories a bar is coloured by. Communication: an op whose type is a communication op's (core/opnames.comm_kind,
# the analysis' rule: the two never disagree), or any event of a communication process (lane group: HCCL's, NCCL's,
# a Communication group). Then, first match on its process or name wins:
COMMUNICATION_PROCESS = re.compile(r"hccl|hcom|communication|nccl", re.I)
CATEGORIES = (
    ("data", re.compile(r"getnext|initdata|dataset|dequeue|enqueue|minddata|memcpy|hosttodevice|h2d", re.I)),
    ("host", re.compile(r"^(python|cpu op|cann|mindspore|host)|aten::|python_function|\.py\(", re.I)),
)
# MindSpore's `CPU OP` process holds the ops the CPU runs (args.type HostCpuOps). Beside a device lane (Ascend
# Hardware, a GPU's) they are host work; in a trace with none (a CPU run) they are the run's kernels: compute.
CPU_OPS_PROCESS = "CPU OP"
DEVICE_PROCESS = re.compile(r"^(ascend hardware|ascend device|gpu device|hccl|overlap analysis)$|npu|gpu", re.I)
# `Scope Layer`: the cell scopes MindSpore draws over the ops (network-WithLossCell, Default, ...), each span
# one run of consecutive ops sharing the scope: containers, not work of their own, so they get a colour apart.
SCOPE_PROCESS = "Scope Layer"
EVENT_COLUMNS = ["rank", "process", "lane", "lane_order", "pid", "tid", "ph", "name", "cat", "category",
                 "start_us", "dur_us", "step", "shapes", "op_type", "flow_id"]


def trace_files(path: str | os.PathLike, cycle: Cycle = None) -> tuple[Path, list[TraceFile]]:
    """The run's root and its trace files, one per rank, as its readers list them (Reader.traces). `cycle`: as
    loader.load's (several profiler runs of one rank are refused without one)."""
    return trace_sources(path, cycle)[:2]


def trace_sources(path: str | os.PathLike, cycle: Cycle = None) -> tuple[Path, list[TraceFile], dict]:
    """trace_files, and the step bounds recorded beside the traces ({rank: {step: [start_us, end_us]}}, RUN_WIDE
    for a run-wide record): what readers that give `step_times` (perfkit profile's manifest) read, the loader's
    first source of steps."""
    from .cycles import chosen_cycle, inside
    from .discovery import discover
    from .formats import readers
    root, jobs, _ = discover(path, readers())
    listed = []
    recording = [(reader, folder) for reader, folder in jobs if "step_times" in reader.provides]
    for reader, folder in jobs:
        if reader.traces is None:
            continue
        try:
            listed.append((reader, folder, reader.traces(folder)))
        except Exception as exc:  # noqa: BLE001 - only a plugin's: perfkit's own traces raising is a bug to see
            if reader.plugin is None:
                raise
            raise FileFormatError(plugins.failure(reader.plugin, "listing its traces", exc), folder) from None
    runs: dict[int, list[Path]] = {}  # a unit reader's folders holding a rank's trace: each a run of it (cycles.py)
    for reader, folder, files in listed:
        if reader.unit:
            for file in files:
                runs.setdefault(file.rank, []).append(folder)
    left_out = chosen_cycle(root, runs, cycle)[0]  # schedule cycles or dynamic-profiler windows: the user picks one
    found: dict[int, TraceFile] = {}
    for _, folder, files in listed:
        if not inside(folder, left_out):
            for file in files:
                found.setdefault(file.rank, file)
    recorded = {}
    for reader, folder in recording:
        if not inside(folder, left_out):
            for rank, bounds in _recorded_bounds(reader, folder).items():
                recorded.setdefault(rank, bounds)
    if not found:
        raise FileFormatError("holds no trace file (trace_view.json, *_timeline_display_*.json, a profiler database, "
                              "or the op times as text: " + ", ".join(TEXT_TRACES) + "): profile with the timeline on "
                              "to see one", root)
    return root, [found[rank] for rank in sorted(found)], recorded


def _recorded_bounds(reader, folder: Path) -> dict[int, dict[int, list[float]]]:
    """{rank (RUN_WIDE for a run-wide record): {step: [start_us, end_us]}} of the step times a reader reads
    (epoch ns, the clock MindSpore's traces stamp in µs); {} where it has none or its files are unreadable (the
    loader says why)."""
    try:
        parts = reader.read(folder)
    except Exception:  # noqa: BLE001 - a broken record costs its steps here; `load` reports it
        return {}
    bounds = {}
    for rank, part in parts.items():
        times = part.tables.get("step_times")
        if times is None or not len(times):
            continue
        rows = times.to_pylist() if hasattr(times, "to_pylist") else times.to_dict(orient="records")
        bounds[int(rank)] = {
            int(row["step"]): [int(row["begin_ns"]) / NS_PER_US, int(row["end_ns"]) / NS_PER_US] for row in rows}
    return bounds


def run_trace_files(run: Run) -> list[TraceFile]:
    """A loaded Run's trace files: under its path, of the profiler cycle it was loaded with (meta.cycle), as its
    timeline (`window(run)`) indexes them. Raises PerfkitError when it has none."""
    return trace_files(*_source(run, None))[1]


def _source(run, cycle: Cycle) -> tuple[str | os.PathLike, Cycle]:
    """(path, cycle) of a path and its cycle, or of a loaded Run: its path and the cycle it was loaded with."""
    if hasattr(run, "meta"):
        return run.path, run.meta.cycle
    return run, cycle


# ---------------------------------------------------------------- the index on disk

def _fingerprint(path: Path) -> str:
    try:
        stat = path.stat()
    except OSError:
        return f"{path}\0-"
    return f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}"


def index_path(root: Path, files: list[TraceFile], recorded: dict | None = None) -> Path:
    """Where the index of these trace files (and these recorded step bounds) lives: in the cache, else (no cache,
    a faulty one, one inside the run) in a folder of this process's own, removed when it exits."""
    base = cache.usable_root(root) or _scratch_root()
    code = cache.code_digest(CODE + plugins.code_paths())
    digest = hashlib.sha256(f"{INDEX_FORMAT}\0{__version__}\0{code}\0{root}\0".encode())
    digest.update(json.dumps(recorded or {}, sort_keys=True).encode())
    for file in files:
        steps = _fingerprint(file.step_file) if file.step_file is not None else "-"
        digest.update(f"{file.rank}\0{_fingerprint(file.path)}\0{steps}\0".encode())
    # placed by the files' paths too: each profiler cycle of one folder (--cycle) keeps its own index
    place = hashlib.sha256("\0".join([str(root), *(str(file.path) for file in files)]).encode()).hexdigest()[:24]
    return base / "timeline" / place / digest.hexdigest()[:32]


class _NotWritten(PerfkitError):
    """An index could not be written (full disk, read-only file system): `cause` is the OSError."""

    def __init__(self, cause: OSError, folder: Path):
        super().__init__(f"cannot write the timeline index ({cause.strerror or cause}); free space or set "
                         "PERFKIT_CACHE_DIR elsewhere", folder)
        self.cause = cause


@functools.lru_cache(maxsize=1)
def _scratch_root() -> Path:
    """A temporary folder for the indexes this process builds without a cache (one per process, so that
    the dashboard builds each index once), removed at exit."""
    folder = Path(tempfile.mkdtemp(prefix="perfkit-timeline-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


@dataclass
class Index:
    """An index on disk: its folder and what index.json says (per rank: parts, lanes, steps, warnings)."""
    folder: Path
    ranks: dict[int, dict]

    @property
    def warnings(self) -> list[str]:
        return [warning for rank in self.ranks.values() for warning in rank["warnings"]]

    def steps(self, rank: int | None = None) -> list[int]:
        ranks = [rank] if rank is not None else list(self.ranks)
        return sorted({int(step) for r in ranks for step, _, _ in self.ranks[r]["steps"]})


def index(path: str | os.PathLike, progress: Callable[[str, float], None] | None = None,
          cycle: Cycle = None) -> Index:
    """The run's timeline index (of profiler cycle `cycle`, as loader.load's): read from the cache, else built
    (and stored) now.

    `progress(message, fraction)` is called while building. Raises PerfkitError when the run has no
    trace, a trace has no readable event, or the index cannot be written.
    """
    question = LOCATION_QUESTION + (() if cycle is None else ("cycle", str(cycle)))
    location = cache.answer_entry(path, question, CODE + plugins.code_paths())
    kept = cache.fetch_answer(location) if location is not None else None
    found = _fetch(Path(kept[0])) if kept is not None else None
    if found is not None:
        return found
    root, files, recorded = trace_sources(path, cycle)
    entry = index_path(root, files, recorded)
    progress = progress or (lambda message, fraction: None)
    try:
        found = _fetch(entry) or _build(entry, files, recorded, progress)
    except _NotWritten as exc:
        if entry.is_relative_to(_scratch_root()):
            raise
        cache.turn_off(exc.cause)  # the cache is optional: build in this process's own folder instead
        found = _build(index_path(root, files, recorded), files, recorded, progress)
    if location is not None:
        cache.store_answer(location, str(found.folder), 0)
    return found


def _fetch(entry: Path) -> Index | None:
    """The index at `entry`; None when absent or broken (then removed: it is rebuilt, never used)."""
    if not entry.is_dir():
        return None
    try:
        described = cache.read_json(entry / INDEX_FILE)
        if described["format"] != INDEX_FORMAT:
            raise ValueError("index format")
        ranks = {int(rank): info for rank, info in described["ranks"].items()}
        for info in ranks.values():
            for part in info["parts"]:
                if pq.ParquetFile(entry / part["file"]).metadata.num_rows != part["rows"]:
                    raise ValueError("part rows")
        cache.touch(entry / INDEX_FILE)
        return Index(entry, ranks)
    except Exception:  # noqa: BLE001 - whatever is wrong with an index, the trace files are the truth
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _build(entry: Path, files: list[TraceFile], recorded: dict, progress: Callable[[str, float], None]) -> Index:
    from .formats import RUN_WIDE
    staging = cache.staging_name(entry)
    total_bytes = sum(file.path.stat().st_size for file in files) or 1
    done_bytes = 0
    try:
        staging.mkdir(parents=True)
        ranks = {}
        for file in files:
            def advance(read_bytes: int, file=file, before=done_bytes):
                progress(f"indexing {file.path.name} of rank {file.rank}", (before + read_bytes) / total_bytes)
            ranks[file.rank] = _index_file(file, staging, advance, recorded.get(file.rank, recorded.get(RUN_WIDE)))
            done_bytes += file.path.stat().st_size
        (staging / INDEX_FILE).write_text(json.dumps({"format": INDEX_FORMAT, "ranks": ranks}))
        try:
            os.rename(staging, entry)
        except OSError:
            if not entry.is_dir():  # else another process stored the same index first: use theirs
                raise
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise _NotWritten(exc, entry.parent) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    cache.remove_siblings(entry)  # indexes of earlier versions of the run's files, builds killed midway
    cache.trim(entry.parents[2], keep={entry})  # an index counts towards $PERFKIT_CACHE_MAX_MB like a run entry
    progress("indexed", 1.0)
    found = _fetch(entry)
    if found is None:
        raise PerfkitError("the timeline index vanished right after it was written", entry)
    return found


def _index_file(file: TraceFile, staging: Path, advance: Callable[[int], None],
                recorded: dict[int, list[float]] | None = None) -> dict:
    """Parse one trace into Parquet parts under `staging`; what index.json says about its rank. `recorded`: the
    rank's recorded step bounds (µs), its steps where they fall on the trace's clock."""
    stats = Stats()
    parts, metadata, markers = [], [], []
    missing_ts = missing_dur = 0
    each = functools.partial(_index_block, staging, file.rank)
    text = file.events is None and file.path.suffix == ".txt"
    if text:  # parsed column-wise by Arrow in this process (trace_text: ~0.7 s for 50 MB)
        blocks = (each(number, table) for number, table in enumerate(text_trace_blocks(file.path, stats, advance)))
    else:  # a Chrome trace JSON, or what its reader reads itself
        blocks = (file.events or map_blocks)(file.path, each, stats, advance, workers=index_workers())
    for block in blocks:
        metadata.extend(block["metadata"])
        markers.extend(block["markers"])
        missing_ts += block["missing_ts"]
        missing_dur += block["missing_dur"]
        if block["part"] is not None:
            parts.append(block["part"])
    # Workers decode blocks ahead of the reader: a block it then re-read (an event cut in two) or never
    # reached (the JSON stops before it) may have left a part that the index does not list.
    listed = {part["file"] for part in parts}
    for stray in staging.glob(f"rank{file.rank}-*.parquet"):
        if stray.name not in listed:
            stray.unlink()
    warnings = []
    if stats.truncated_at is not None:
        warnings.append(f"{file.path}: the {'file' if text else 'JSON'} stops at byte {stats.truncated_at} "
                        f"(cut off or corrupt): the {stats.events:,} events before it are shown")
    warnings += [f"{file.path}: {note}" for note in stats.notes]
    if stats.too_deep:
        warnings.append(f"{file.path}: {stats.too_deep:,} events nested too deep to read (arrays or objects over "
                        "~1,000 levels inside each other) are left out")
    if missing_ts:
        warnings.append(f"{file.path}: {missing_ts:,} events without a time (ts) are left out")
    if text and stats.bad_values:
        warnings.append(f"{file.path}: {stats.bad_values:,} lines or runs that do not parse are left out")
    elif missing_dur or stats.bad_values:
        warnings.append(f"{file.path}: {missing_dur:,} complete events without a duration and "
                        f"{stats.bad_values:,} times that are not numbers (shown as unknown)")
    return {"source": str(file.path), "parts": parts, "lanes": _lanes(metadata),
            "steps": _steps(markers, file, [staging / part["file"] for part in parts], recorded or {},
                            _span(parts)),
            "warnings": warnings}


def _span(parts: list[dict]) -> tuple[float, float]:
    """[first start, last end] (µs) of the events of a trace's parts."""
    return (min((part["min_start"] for part in parts), default=0.0),
            max((part["max_end"] for part in parts), default=0.0))


def index_workers() -> int:
    """Processes decoding a trace's blocks at once: one per core this process may use."""
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))


def _index_block(staging: Path, rank: int, number: int, block: pa.Table) -> dict:
    """One block of a trace (in a worker process): its events sorted by start into one Parquet part;
    what the index needs from it (lane metadata, step markers, counts of events without times)."""
    # (filters only where they drop something: each copies the block)
    is_meta = pc.equal(block.column("ph"), "M").fill_null(False)
    metadata, events = [], block
    if pc.any(is_meta).as_py():
        metadata = block.filter(is_meta).select(["name", "pid", "tid", "args"]).to_pylist()
        events = block.filter(pc.invert(is_meta))
    missing_ts = events.column("ts").null_count
    if missing_ts:
        events = events.filter(pc.is_valid(events.column("ts")))
    answer = {"metadata": metadata, "markers": [], "missing_ts": missing_ts, "missing_dur": 0, "part": None}
    if not len(events):
        return answer
    complete = pc.equal(events.column("ph"), "X").fill_null(False)
    answer["missing_dur"] = pc.sum(pc.and_(complete, pc.is_null(events.column("dur"))).cast(pa.int64())).as_py() or 0
    table = _events_table(events)
    table = table.take(pc.sort_indices(table.column("start_us")))
    name = f"rank{rank}-{number:05d}.parquet"
    # Statistics of start_us alone: windows choose row groups by it; the others' cost a third of the write.
    # Dictionaries for the text columns alone: times are nearly all distinct, and looking each up cost a fifth.
    pq.write_table(table, staging / name, row_group_size=ROW_GROUP_ROWS, write_statistics=["start_us"],
                   use_dictionary=[field.name for field in table.schema if field.type == pa.string()])
    starts = table.column("start_us")
    durations = pc.fill_null(table.column("dur_us"), 0.0)
    answer["part"] = {"file": name, "rows": len(table), "min_start": pc.min(starts).as_py(),
                      "max_end": pc.max(pc.add(starts, durations)).as_py(), "max_dur": pc.max(durations).as_py()}
    is_marker = pc.and_(pc.equal(table.column("ph"), "X").fill_null(False),
                        pc.starts_with(table.column("name"), STEP_PREFIX))  # _steps matches them fully
    answer["markers"] = table.filter(is_marker).select(["name", "start_us", "dur_us"]).to_pylist()
    return answer


def _events_table(events: pa.Table) -> pa.Table:
    args = events.column("args")
    field = lambda name: pc.struct_field(args, name)  # noqa: E731
    return pa.table({
        "pid": events.column("pid"), "tid": events.column("tid"),
        "ph": events.column("ph"), "name": events.column("name"), "cat": events.column("cat"),
        "start_us": events.column("ts"), "dur_us": events.column("dur"),
        "shapes": field("shapes"), "op_type": field("op_type"),
        "flow_id": events.column("id"),
    })


def _lanes(metadata: list[dict]) -> dict:
    """{"processes": {pid: [name, sort]}, "threads": {"pid/tid": [name, sort]}} from M events."""
    processes: dict[str, list] = {}
    threads: dict[str, list] = {}
    for event in metadata:
        kind, args = event["name"], event["args"] or {}
        if kind not in LANE_METADATA:
            continue
        slot = processes.setdefault(event["pid"], [None, None]) if kind.startswith("process") else \
            threads.setdefault(f"{event['pid']}/{event['tid']}", [None, None])
        if kind.endswith("_name"):
            slot[0] = args.get("name")
        else:
            slot[1] = args.get("sort_index")
    return {"processes": processes, "threads": threads}


def _steps(markers: list[dict], file: TraceFile, parts: list[Path], recorded: dict[int, list[float]],
           span: tuple[float, float]) -> list[list]:
    """[[step, start_us, end_us], ...]: the loader's steps. The step bounds perfkit profile recorded (as the
    loader's steps take them first) where they fall on the trace's clock (the recorded steps that meet its
    events' span: a recording of another clock or process meets none), else the trace's step markers, else its
    step file (TraceFile.step_bounds), else the op runs (the loader's rules, formats/steps.py)."""
    meeting = {step: bounds for step, bounds in recorded.items() if bounds[0] < span[1] and bounds[1] > span[0]}
    if meeting:
        return sorted([step, start, end] for step, (start, end) in meeting.items())
    bounds: dict[int, list[float]] = {}
    for marker in markers:
        step = int(STEP_MARKER.fullmatch(marker["name"]).group(1)) if STEP_MARKER.fullmatch(marker["name"]) else None
        if step is None or marker["dur_us"] is None:
            continue
        start, end = marker["start_us"], marker["start_us"] + marker["dur_us"]
        known = bounds.setdefault(step, [start, end])
        known[0], known[1] = min(known[0], start), max(known[1], end)
    if not bounds:
        bounds = _step_file_bounds(file)
    if not bounds:
        bounds = _occurrence_step_bounds(parts)
    return sorted([step, start, end] for step, (start, end) in bounds.items())


def _step_file_bounds(file: TraceFile) -> dict[int, list[float]]:
    """The steps its reader reads from the trace's step file (TraceFile.step_bounds); {} where there is none."""
    if file.step_bounds is None or file.step_file is None or not file.step_file.is_file():
        return {}
    try:
        return file.step_bounds(file.step_file)
    except FileFormatError:
        return {}


def _occurrence_step_bounds(parts: list[Path]) -> dict[int, list[float]]:
    """Per step [start, end] in µs from the op runs, by the loader's rules (formats/steps.py): step k = the
    k-th run of every op when every op ran equally often (graph mode), from step k-1's last end (step 1: its
    first start) to its last end; else
    (PyNative: GPU op launches) the k-th run of the loop's marker op (steps.loop_marker) starts step k, and the
    last step ends with the last op."""
    from .formats.steps import loop_marker, marker_starts
    if not parts:
        return {}
    events = pa.concat_tables(pq.read_table(part, columns=["ph", "name", "op_type", "start_us", "dur_us"])
                              for part in parts)
    # Ops carry their type (CPU: args.type HostCpuOps); the other lanes hold cell scopes, which nest.
    events = events.filter(pc.and_(pc.equal(events.column("ph"), "X"), pc.is_valid(events.column("op_type"))))
    if not len(events):
        return {}
    events = events.to_pandas()
    runs = events.groupby("name").size()
    events["end_us"] = events["start_us"] + events["dur_us"].fillna(0.0)
    if runs.min() != runs.max():
        named = events.rename(columns={"start_us": "start"})
        found = loop_marker(named, runs)
        if found is None:
            return {}
        starts = marker_starts(named, found[0])
        ends = [*starts[1:], events["end_us"].max()]
        return {step: [float(start), float(end)] for step, (start, end) in enumerate(zip(starts, ends), start=1)}
    if runs.min() < 2:
        return {}
    events = events.sort_values("start_us", kind="stable")
    events["step"] = events.groupby("name").cumcount() + 1
    grouped = events.groupby("step").agg(start=("start_us", "min"), end=("end_us", "max"))
    # as the loader's steps (formats/steps.py): a step begins where the one before it ended, so the gap before
    # its first op (its interval: data wait, host work) is inside it; the first begins at its first op
    starts = grouped["end"].shift(1).fillna(grouped["start"])
    return {int(step): [float(start), float(end)] for step, start, end in zip(grouped.index, starts, grouped["end"])}


# ---------------------------------------------------------------- windows

def timeline(run, step: int | None = None, start_ms: float | None = None, end_ms: float | None = None,
             ranks: Iterable[int] | None = None, progress: Callable[[str, float], None] | None = None,
             cycle: Cycle = None) -> pd.DataFrame:
    """The events of one step (or of [start_ms, end_ms), ms since the trace's first event) of a run.

    `run` is a path or a loaded Run (of the profiler cycle it was loaded with); `cycle`: of a path, as
    loader.load's. One row per event overlapping the window, lanes ordered as the
    profiler orders them (process, then thread sort index), columns EVENT_COLUMNS; times in µs.
    `.attrs["warnings"]`: what was wrong in the chosen ranks' traces (cut off, events without times).
    Raises PerfkitError for a step the run does not have (naming the ones it has).
    """
    table, warnings = window(run, step, start_ms, end_ms, ranks, progress, cycle)
    events = table.to_pandas()
    events["step"] = events["step"].astype("Int64")
    events.attrs["warnings"] = warnings
    events.attrs["window_us"] = window_bounds(table)
    return events


def window(run, step: int | None = None, start_ms: float | None = None, end_ms: float | None = None,
           ranks: Iterable[int] | None = None, progress: Callable[[str, float], None] | None = None,
           cycle: Cycle = None) -> tuple[pa.Table, list[str]]:
    """As `timeline`, as an Arrow table (schema EVENTS) and the warnings: what `perfkit trace` writes,
    without importing pandas."""
    path, cycle = _source(run, cycle)
    found = index(path, progress, cycle)
    chosen = _chosen_ranks(found, ranks)
    bounds = {rank: _bounds(found, rank, step, start_ms, end_ms) for rank in chosen}
    tables = [_window(found, rank, *bounds[rank]) for rank in chosen]
    events = pa.concat_tables(tables) if tables else EVENTS.empty_table()
    if step is not None:
        events = events.set_column(events.schema.get_field_index("step"), "step",
                                   pa.array([step] * len(events), pa.int64()))
    # Sorted by rank, lane, start (Arrow's sort is stable: events starting together keep the file's order).
    events = events.sort_by([("rank", "ascending"), ("lane_order", "ascending"), ("start_us", "ascending")])
    # Each rank's window [start, end) in µs rides along in the schema's metadata (WINDOW_KEY): the figure cuts
    # events that run past a step's edges there (a scope span reaching into the next step).
    kept = {str(rank): [start, end if end != float("inf") else None] for rank, (start, end) in bounds.items()}
    events = events.replace_schema_metadata({WINDOW_KEY: json.dumps(kept)})
    return events, [warning for rank in chosen for warning in found.ranks[rank]["warnings"]]


def window_bounds(events: pa.Table) -> dict[int, tuple[float, float]]:
    """{rank: (start_us, end_us)} of a `window` table (end inf where the window is open)."""
    kept = json.loads(((events.schema.metadata or {}).get(WINDOW_KEY.encode()) or b"{}").decode())
    return {int(rank): (start, end if end is not None else float("inf")) for rank, (start, end) in kept.items()}


def _chosen_ranks(found: Index, ranks: Iterable[int] | None) -> list[int]:
    if ranks is None:
        return sorted(found.ranks)
    chosen = sorted(set(int(rank) for rank in ranks))
    unknown = [rank for rank in chosen if rank not in found.ranks]
    if unknown:
        raise PerfkitError(f"rank {unknown[0]} has no trace; ranks with one: "
                           f"{', '.join(map(str, sorted(found.ranks)))}", found.ranks[min(found.ranks)]["source"])
    return chosen


def origin_us(found: Index) -> float:
    """The earliest event start of the run: 0 ms of start_ms/end_ms."""
    return min((part["min_start"] for info in found.ranks.values() for part in info["parts"]), default=0.0)


def _bounds(found: Index, rank: int, step: int | None, start_ms: float | None,
            end_ms: float | None) -> tuple[float, float]:
    if step is not None:
        for number, start, end in found.ranks[rank]["steps"]:
            if number == step:
                return start, end
        has = found.steps(rank)
        listing = (f"it has steps {_ranges(has)}" if has else
                   "no recorded step times, no step markers in its trace, no kernel_details.csv, and its ops ran "
                   "unequally often: use start/end times instead, or mark steps (perfkit.profiling, prof.step())")
        raise PerfkitError(f"rank {rank} has no step {step}: {listing}", found.ranks[rank]["source"])
    zero = origin_us(found)
    return (zero + (start_ms or 0.0) * US_PER_MS, zero + end_ms * US_PER_MS if end_ms is not None else float("inf"))


def _ranges(steps: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    spans, first = [], None
    for index_, step in enumerate(steps):
        if first is None:
            first = step
        if index_ + 1 == len(steps) or steps[index_ + 1] != step + 1:
            spans.append(str(first) if first == step else f"{first}-{step}")
            first = None
    return ", ".join(spans)


# The columns of a window (EVENT_COLUMNS): the part's columns plus where each event is drawn.
EVENTS = pa.schema([("rank", pa.int64()), ("process", pa.string()), ("lane", pa.string()),
                    ("lane_order", pa.int64()), ("pid", pa.string()), ("tid", pa.string()), ("ph", pa.string()),
                    ("name", pa.string()), ("cat", pa.string()), ("category", pa.string()),
                    ("start_us", pa.float64()), ("dur_us", pa.float64()), ("step", pa.int64()),
                    ("shapes", pa.string()), ("op_type", pa.string()), ("flow_id", pa.string())])
assert EVENTS.names == EVENT_COLUMNS
WINDOW_KEY = "perfkit.window_us"


def _window(found: Index, rank: int, start: float, end: float) -> pa.Table:
    """Events of `rank` overlapping [start, end), schema EVENTS."""
    info = found.ranks[rank]
    tables = []
    for part in info["parts"]:
        if part["min_start"] >= end or part["max_end"] <= start:
            continue
        # An event may start before the window and reach into it: no longer than the part's longest.
        earliest = start - part["max_dur"]
        table = _row_groups_between(found.folder / part["file"], earliest, end)
        starts = table.column("start_us")
        ends = pc.add(starts, pc.fill_null(table.column("dur_us"), 0.0))
        tables.append(table.filter(pc.and_(pc.and_(pc.greater_equal(starts, earliest), pc.less(starts, end)),
                                           pc.or_(pc.greater(ends, start), pc.greater_equal(starts, start)))))
    events = pa.concat_tables(tables) if tables else None
    if events is None or not len(events):
        return EVENTS.empty_table()
    # Lanes: named and ordered once per distinct (pid, tid), then spread to the events by position.
    lane_keys = pc.binary_join_element_wise(pc.fill_null(events.column("pid"), ""),
                                            pc.fill_null(events.column("tid"), ""), "/")
    distinct = pc.unique(lane_keys).to_pylist()
    processes, threads = info["lanes"]["processes"], info["lanes"]["threads"]
    pids = [key.split("/", 1)[0] for key in distinct]
    tids = [key.split("/", 1)[1] for key in distinct]
    keys = [(_sort_key(processes.get(pid, [None, None])[1], pid), _sort_key(threads.get(key, [None, None])[1], tid))
            for key, pid, tid in zip(distinct, pids, tids)]
    order = {key: number for number, key in enumerate(sorted(set(keys)))}
    lane_of = pc.index_in(lane_keys, value_set=pa.array(distinct, pa.string()))
    process = pa.array([processes.get(pid, [None])[0] or f"process {pid}" for pid in pids], pa.string())
    lane = pa.array([threads.get(key, [None])[0] or f"thread {tid}" for key, tid in zip(distinct, tids)], pa.string())
    lane_order = pa.array([order[key] for key in keys], pa.int64())
    columns = {"rank": pa.array([rank] * len(events), pa.int64()), "process": process.take(lane_of),
               "lane": lane.take(lane_of), "lane_order": lane_order.take(lane_of),
               "step": pa.nulls(len(events), pa.int64())}
    cpu_device = not any(DEVICE_PROCESS.search(name or "") for name, _ in processes.values())
    columns["category"] = _categories(columns["process"], columns["lane"], events.column("name"), cpu_device)
    return pa.table([columns[name] if name in columns else events.column(name) for name in EVENT_COLUMNS],
                    schema=EVENTS)


def _row_groups_between(path: Path, start: float, end: float) -> pa.Table:
    """The row groups of a part (sorted by start_us) whose start times meet [start, end)."""
    part = pq.ParquetFile(path)
    column = part.schema_arrow.get_field_index("start_us")
    chosen = []
    for number in range(part.metadata.num_row_groups):
        stats = part.metadata.row_group(number).column(column).statistics
        if stats is None or not stats.has_min_max or (stats.min < end and stats.max >= start):
            chosen.append(number)
    return part.read_row_groups(chosen, use_threads=False)


def _sort_key(sort_index, fallback: str) -> tuple:
    """Sort index first (the profiler's order), then the id as a number where it is one."""
    try:
        number = float(fallback)
    except ValueError:
        number = float("nan")
    return (sort_index if sort_index is not None else float("inf"),
            number if number == number else float("inf"), str(fallback))


def _categories(process: pa.Array, lane: pa.Array, name: pa.ChunkedArray, cpu_device: bool) -> pa.Array:
    """compute / communication / data / host / scope / idle per event, decided once per distinct (process, lane,
    name). `cpu_device`: the trace has no device lane, so its CPU OP lane holds the run's kernels."""
    joined = pc.binary_join_element_wise(process, lane, pc.fill_null(name, ""), "\x1f")
    distinct = pc.unique(joined)
    decided = pa.array([_category(*key.split("\x1f", 2), cpu_device) for key in distinct.to_pylist()], pa.string())
    return decided.take(pc.index_in(joined, value_set=distinct))


def _category(process: str, lane: str, name: str, cpu_device: bool) -> str:
    if process == "Overlap Analysis":  # its lanes say what they are
        return "communication" if lane.startswith("Communication") else "compute" if lane == "Computing" else "idle"
    if process == SCOPE_PROCESS:
        return "scope"
    if comm_kind(op_types_of([name])[0]) is not None or COMMUNICATION_PROCESS.search(process):
        return "communication"
    for category, pattern in CATEGORIES:
        if category == "host" and cpu_device and process == CPU_OPS_PROCESS:
            continue  # a CPU run's kernels: compute unless their name says communication or data
        if pattern.search(name) or pattern.search(process):
            return category
    return "compute"


# ---------------------------------------------------------------- export

_EXPORT_TID = re.compile(r"-?[0-9]{1,18}")


def chrome_trace(events: pa.Table) -> list[dict]:
    """A Chrome trace (the JSON array Perfetto and chrome://tracing open) of a window (schema EVENTS): each
    rank's processes side by side as processes named "rank R: <process>", lanes as threads, events sorted by
    time."""
    if not len(events):
        return []
    rows = {name: events.column(name).to_pylist() for name in EVENT_COLUMNS}
    process_ids: dict[tuple, int] = {}
    thread_ids: dict[tuple, int] = {}
    metadata = []
    for rank, process, pid, lane, tid, lane_order in sorted(
            set(zip(rows["rank"], rows["process"], rows["pid"], rows["lane"], rows["tid"], rows["lane_order"])),
            key=lambda lane_: (lane_[0], lane_[5], str(lane_[2]), str(lane_[4]))):
        if (rank, pid) not in process_ids:
            number = process_ids[(rank, pid)] = len(process_ids) + 1
            metadata += [{"ph": "M", "name": "process_name", "pid": number, "tid": 0,
                          "args": {"name": f"rank {rank}: {process}"}},
                         {"ph": "M", "name": "process_sort_index", "pid": number, "tid": 0,
                          "args": {"sort_index": number}}]
        number = process_ids[(rank, pid)]
        # a tid the export's integers can hold (JSON readers take 64 bits; a trace may carry 400 digits)
        numeric = tid is not None and _EXPORT_TID.fullmatch(tid) is not None
        thread = thread_ids[(rank, pid, tid)] = int(tid) if numeric else lane_order
        metadata += [{"ph": "M", "name": "thread_name", "pid": number, "tid": thread, "args": {"name": lane}},
                     {"ph": "M", "name": "thread_sort_index", "pid": number, "tid": thread,
                      "args": {"sort_index": lane_order}}]
    body = []
    for row in sorted(range(len(events)), key=rows["start_us"].__getitem__):  # stable: ties keep lane order
        rank, pid, tid, ph = rows["rank"][row], rows["pid"][row], rows["tid"][row], rows["ph"][row]
        event = {"ph": ph, "name": rows["name"][row], "pid": process_ids[(rank, pid)],
                 "tid": thread_ids[(rank, pid, tid)], "ts": rows["start_us"][row]}
        if rows["cat"][row] is not None:
            event["cat"] = rows["cat"][row]
        if ph == "X":
            event["dur"] = rows["dur_us"][row] if rows["dur_us"][row] is not None else 0.0
        if rows["flow_id"][row] is not None:
            event["id"] = rows["flow_id"][row]
            if ph == "f":
                event["bp"] = "e"
        args = {key: value for key, value in (("shapes", rows["shapes"][row]), ("type", rows["op_type"][row]))
                if value is not None}
        if args:
            event["args"] = args
        body.append(event)
    return metadata + body


def write_window(events: pa.Table, target: str | os.PathLike, fmt: str = "json") -> Path:
    """Write a window (`window`'s table) as a Chrome trace JSON or a Parquet table; the path written."""
    target = Path(target)
    try:
        if fmt == "parquet":
            pq.write_table(events, target)
        else:
            import orjson
            target.write_bytes(orjson.dumps(chrome_trace(events)))
    except OSError as exc:
        raise PerfkitError(f"cannot write ({exc.strerror or exc})", target) from None
    return target


# `perfkit.timeline(run, step=N)` is the window function, and `perfkit.io.timeline.index` etc. stay reachable
# (imported lazily by perfkit/__init__.py, so `summary` never loads it).

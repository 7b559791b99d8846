"""Op timelines that MindSpore writes as text, as Chrome trace events for the timeline index.

For a rank whose folder has no JSON trace (trace_view.json, *_timeline_display_{r}.json), the timeline
index reads one of these (docs/formats.md), device ops preferred to host ops (TEXT_TRACES):

- `output_timeline_data_{r}.txt` (legacy Ascend): the header `op_name, stream_id, start_time(ms),
  duration(ms)`, then one line per op run, `full_op_name,stream_id,start_ms,dur_ms`. Written by
  OPComputeTimeParser (mindspore/python/mindspore/profiler/parser/optime_parser.py,
  TIMELINE_FILE_COLUMN_TITLE), from the device's cycle counter: the same clock as the 10 ns ticks of
  step_trace_raw_{r}_detail_time.csv. MindSpore's PyNative profiler writes the same file with a host
  thread index in the stream column.
- `gpu_op_execute_timestamp_{r}.txt` and `cpu_op_execute_timestamp_{r}.txt` (the latter under FRAMEWORK/
  in the new layout): one line per op, `full_op_name;GpuOps;start,dur start,dur ` and
  `full_op_name;HostCpuOps;start,dur,tid start,dur,tid `, each run followed by a space
  (DataSaver::WriteOpTimestamp, mindspore/ccsrc/profiler/device/data_saver.cc). Starts are ns. CPU
  durations are ms (CpuTimelineGenerator.load_cpu_op_data multiplies them by 1000 for its µs timeline;
  trace_view.json of the same run has the same runs in µs). GPU durations are µs: GPUProfiler::
  OpDataProducerEnd (mindspore/ccsrc/plugin/device/gpu/hal/profiler/gpu_profiling.cc) stores
  cudaEventElapsedTime's ms * kTimeUnit (1000, gpu_profiling.h), or host ns / kTimeUnit, and
  GpuTimelineGenerator (mindspore/python/mindspore/profiler/parser/cpu_gpu_timeline_generator.py) puts
  them into its µs timeline unchanged, with ts = start / 1000.

Each op run becomes a complete event ("X", ts and dur in µs, args.op_type set: the CPU file's own type
HostCpuOps, as trace_view.json has it, else the op type from the name); each lane gets Chrome "M" events
(process_name, thread_name, thread_sort_index) in the first table that holds one of its runs.

The file is read in chunks of whole lines and each chunk is parsed column-wise by Arrow (split on the
separators, each time column cast at once; only where that cast fails does a regular expression pick
out the numbers), so memory is bounded by a chunk (or by the longest line, one op's runs) and no
Python object is made per run: ~0.7 s and ~80 MB above the interpreter for a 50 MB CPU file of 1.6
million runs here. What does not parse is skipped and counted in `stats.bad_values` (a line without its
fields, a run or row with a field too many or too few, or a time that is not a finite number >= 0); a
last line without its newline is cut: `stats.truncated_at` is where the unread part starts (a runs line
keeps the runs before its last space, each of which is complete). `stats.events` counts op runs.

No pandas here: the timeline's fast path (perfkit trace) must not import it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..core.errors import FileFormatError
from ..core.files import open_regular
from ..core.units import BYTES_PER_MB, NS_PER_US, US_PER_MS
from .trace_json import Stats, chrome_events

# Glob patterns of a rank folder's text timelines, in order of preference for a rank (device ops first).
TEXT_TRACES = ("output_timeline_data_*.txt", "gpu_op_execute_timestamp_*.txt",
               "cpu_op_execute_timestamp_*.txt", "FRAMEWORK/cpu_op_execute_timestamp_*.txt")
RANK_IN_NAME = re.compile(r"_(\d+)\.txt$")
CHUNK_BYTES = 2 * BYTES_PER_MB  # of whole lines parsed at a time (~65,000 CPU runs; measured fastest, ~80 MB peak)
# A start in ns (an unsigned 64-bit integer: at most 19 digits always fits) and a time as C++'s ostream
# or Python writes a float; anything else (signs, nan, inf, text) is a bad value.
INTEGER = r"^\d{1,19}$"
DECIMAL = r"^(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$"
LEGACY_HEADER = "op_name"  # first column of the header line of output_timeline_data


@dataclass(frozen=True)
class TextLayout:
    """One kind of text timeline: how its lines split and what its lanes are called."""
    prefix: str          # file name up to the rank
    pid: str             # the one process its ops are in
    process: str         # that process's name
    lane: str            # a lane's name, from its id
    runs: bool           # one line per op with its runs (`name;type;run run ...`), else one line per run
    run_fields: int = 0  # fields of a run (runs layouts)
    dur_us: float = 1.0  # µs per unit of a run's duration (runs layouts; output_timeline_data is all ms)
    own_type: bool = False  # the line's type field is the op type (else the type comes from the name)


LEGACY_ASCEND = TextLayout("output_timeline_data_", "device", "Ascend device", "Stream {}", runs=False)
GPU = TextLayout("gpu_op_execute_timestamp_", "device", "GPU device", "{}", runs=True, run_fields=2)
CPU = TextLayout("cpu_op_execute_timestamp_", "host", "CPU OP", "Thread {}", runs=True, run_fields=3,
                 dur_us=US_PER_MS, own_type=True)
LAYOUTS = (LEGACY_ASCEND, GPU, CPU)


def text_traces(folder: Path) -> dict[int, Path]:
    """Rank -> the text timeline to read for it in `folder` (the first of TEXT_TRACES that it has)."""
    found: dict[int, Path] = {}
    for pattern in TEXT_TRACES:
        for path in sorted(folder.glob(pattern)):
            rank = RANK_IN_NAME.search(path.name)
            if rank and path.is_file():
                found.setdefault(int(rank.group(1)), path)
    return found


def _layout_of(path: Path) -> TextLayout:
    for layout in LAYOUTS:
        if path.name.startswith(layout.prefix):
            return layout
    raise FileFormatError("is not a text timeline perfkit knows (" + ", ".join(TEXT_TRACES) + ")", path)


def text_trace_blocks(path: Path, stats: Stats | None = None,
                      progress: Callable[[int], None] | None = None) -> Iterator[pa.Table]:
    """The op runs of the text timeline at `path`, one table (schema trace_json.OUTPUT) per chunk of
    lines that holds any, in file order; `progress(bytes read so far)` after each chunk.

    Raises FileFormatError when the file holds no readable op run at all.
    """
    stats = stats if stats is not None else Stats()
    layout = _layout_of(path)
    lanes: set[str] = set()  # lanes whose M events are out
    try:
        with open_regular(path) as file:
            for start, lines, end in _line_chunks(file):
                if end is None:  # a last line without its newline: cut off
                    end, kept = start + len(lines), _complete_part(lines, layout)
                    if lines[len(kept):].strip():
                        stats.truncated_at = start + len(kept)
                    lines = kept
                columns = _parse(lines, layout, stats)
                if columns is not None:
                    stats.events += len(columns["ts"])
                    yield _events(columns, layout, lanes)
                if progress is not None:
                    progress(end)
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    if not stats.events:
        cut = f", and it is cut off at byte {stats.truncated_at}" if stats.truncated_at is not None else ""
        raise FileFormatError(f"holds no readable op run ({stats.bad_values:,} lines or runs that do not parse"
                              f"{cut})", path)


def _line_chunks(file) -> Iterator[tuple[int, bytes, int | None]]:
    """(start offset, bytes, end offset) of chunks of about CHUNK_BYTES of whole lines (a longer line
    whole), each without its last newline; then (start, bytes, None) for a last line without its newline."""
    start, pending = 0, bytearray()
    while True:
        data = file.read(CHUNK_BYTES)
        if not data:
            break
        pending += data
        newline = pending.rfind(b"\n")
        if newline < 0:  # one line longer than a chunk: read on
            continue
        yield start, bytes(pending[:newline]), start + newline + 1
        start += newline + 1
        del pending[:newline + 1]
    if pending.strip():
        yield start, bytes(pending), None


def _complete_part(line: bytes, layout: TextLayout) -> bytes:
    """What a cut-off last line holds for sure: the runs before its last space (each run is written
    with a space after it); nothing of a one-run line, whose last number may have lost digits."""
    if not layout.runs:
        return b""
    return line[:max(line.rfind(b" "), 0)]


def _parse(data: bytes, layout: TextLayout, stats: Stats) -> dict[str, pa.Array] | None:
    """name, lane, ts, dur (µs), op_type of the runs in `data` (whole lines); None when there is none."""
    try:  # as bytes, checked to be UTF-8 by Arrow: a Python str of the chunk would cost ten times more
        text = pa.array([data], pa.large_binary()).cast(pa.large_string())
    except pa.ArrowInvalid:
        text = pa.array([data.decode("utf-8", "replace")], pa.large_string())
    lines = pc.ascii_trim_whitespace(pc.list_flatten(pc.split_pattern(text, "\n")))
    lines = lines.filter(pc.not_equal(lines, ""))
    if not len(lines):
        return None
    columns = _runs(lines, layout, stats) if layout.runs else _rows(lines, stats)
    return columns if len(columns["ts"]) else None


def _runs(lines: pa.Array, layout: TextLayout, stats: Stats) -> dict[str, pa.Array]:
    """`name;type;run run ...` lines: one row per run."""
    parts = _with_fields(pc.split_pattern(lines, ";", max_splits=2), 3, stats)
    names, types = pc.list_element(parts, 0), pc.list_element(parts, 1)
    tokens = pc.ascii_split_whitespace(pc.list_element(parts, 2))
    line_of, runs = pc.list_parent_indices(tokens), pc.list_flatten(tokens)
    kept = pc.not_equal(runs, "")  # what the split leaves at the ends of a line
    fields = pc.split_pattern(runs.filter(kept), ",")
    whole = pc.equal(pc.list_value_length(fields), layout.run_fields)
    fields, line_of = _with_fields(fields, layout.run_fields, stats), line_of.filter(kept).filter(whole)
    ts = ns_to_us(_numbers(pc.list_element(fields, 0), pa.uint64()))
    dur_us = _times(pc.list_element(fields, 1), layout.dur_us)
    good = pc.and_(pc.is_valid(ts), pc.is_valid(dur_us))
    if layout.run_fields > 2:  # the run's own lane (CPU: its thread)
        lanes = pc.list_element(fields, 2)
        good = pc.and_(good, pc.not_equal(lanes, ""))
    else:  # the line's type is its lane, as MindSpore's GPU timeline shows it
        lanes = types.take(line_of)
    stats.bad_values += _count_false(good)
    line_of = line_of.filter(good)
    op_types = types if layout.own_type else _op_types(names)
    return {"name": names.take(line_of), "lane": lanes.filter(good), "ts": ts.filter(good),
            "dur": dur_us.filter(good), "op_type": op_types.take(line_of)}


def _rows(lines: pa.Array, stats: Stats) -> dict[str, pa.Array]:
    """`name,stream,start_ms,dur_ms` lines (output_timeline_data): one row per line; the header skipped."""
    fields = pc.split_pattern(lines, ",")
    fields = fields.filter(pc.not_equal(pc.ascii_trim_whitespace(pc.list_element(fields, 0)), LEGACY_HEADER))
    fields = _with_fields(fields, 4, stats)
    name, stream, start, dur = (pc.ascii_trim_whitespace(pc.list_element(fields, i)) for i in range(4))
    ts, dur_us = _times(start, US_PER_MS), _times(dur, US_PER_MS)
    good = pc.and_(pc.and_(pc.is_valid(ts), pc.is_valid(dur_us)),
                   pc.and_(pc.not_equal(name, ""), pc.not_equal(stream, "")))
    stats.bad_values += _count_false(good)
    name = name.filter(good)
    return {"name": name, "lane": stream.filter(good), "ts": ts.filter(good), "dur": dur_us.filter(good),
            "op_type": _op_types(name)}


def _with_fields(lists: pa.Array, fields: int, stats: Stats) -> pa.Array:
    """The split lines (or runs) of exactly `fields` fields; the others counted as bad."""
    whole = pc.equal(pc.list_value_length(lists), fields)
    stats.bad_values += _count_false(whole)
    return lists.filter(whole)


def _count_false(mask: pa.Array) -> int:
    return len(mask) - (pc.sum(mask.cast(pa.int64())).as_py() or 0)


def _numbers(values: pa.Array, kind: pa.DataType) -> pa.Array:
    """Strings of numbers as `kind`; null where a string is not one (INTEGER or DECIMAL)."""
    try:  # the whole column at once, as a file that is not broken has it
        return pc.cast(values, kind)
    except pa.ArrowInvalid:  # some are not numbers (or not of `kind`): only those that look like one
        ok = pc.match_substring_regex(values, INTEGER if pa.types.is_integer(kind) else DECIMAL)
        return pc.cast(pc.if_else(ok, values, pa.scalar(None, values.type)), kind)


def _times(values: pa.Array, unit_us: float) -> pa.Array:
    """Decimal strings as float64 µs; null where one is not a number, or not a finite one >= 0 (the cast
    takes "nan", "inf" and "-1")."""
    numbers = _numbers(values, pa.float64())
    usable = pc.and_(pc.is_finite(numbers), pc.greater_equal(numbers, 0.0))
    numbers = pc.if_else(usable, numbers, pa.scalar(None, pa.float64()))
    return pc.multiply(numbers, unit_us) if unit_us != 1.0 else numbers


def ns_to_us(ns: pa.Array) -> pa.Array:
    """ns as float64 µs, to the nearest float: ns since the epoch (~1.8e18) are beyond float64's 53
    bits, so the whole µs (exact below 2**53) and the ns left over are converted apart."""
    whole_us = pc.divide(ns, NS_PER_US)  # integer division
    rest_ns = pc.subtract(ns, pc.multiply(whole_us, NS_PER_US))
    return pc.add(whole_us.cast(pa.float64()), pc.divide(rest_ns.cast(pa.float64()), float(NS_PER_US)))


def _op_types(names: pa.Array) -> pa.Array:
    """`Default/net/conv1-Conv2d/Conv2D-op13` -> `Conv2D` (as core/opnames.op_types_of, column-wise)."""
    base = pc.replace_substring_regex(names, r"^.*/", "")
    return pc.replace_substring_regex(base, r"-op\d+$", "")


def _events(columns: dict[str, pa.Array], layout: TextLayout, lanes: set[str]) -> pa.Table:
    """The runs as complete events, after M events for the lanes not seen before (and the process, the
    first time)."""
    return chrome_events(layout.pid, layout.process, layout.lane, columns["lane"].cast(pa.string()),
                           columns["name"], columns["ts"], columns["dur"], columns["op_type"], named=lanes)

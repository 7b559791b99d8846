"""MindSpore <= 2.2 GPU output, flat in one folder (docs/formats.md §1, GPU rows).

Op types and ops from `gpu_op_type_info_{r}.csv` / `gpu_op_detail_info_{r}.csv` (µs), steps from
`step_trace_profiling_{r}.txt` as MindSpore's GpuDataSaver writes it, in one of two shapes:
  - per marker op (`WriteStepTrace`): lines fp_start, bp_end, iter_end, then one per communication op,
    each `op_name start,end start,end ...`, one pair per step, in 10 ns ticks;
  - per step (`WriteStepTraceAsyncLaunchKernel`, async kernel launch): one line per step,
    `iter_start_op,ts fp_op,ts bp_end_op,ts iter_end_op,ts [comm_op,start,end ...]`, in ns.
Step bounds follow MindSpore's GpuStepTraceParser: in the per-marker shape a step starts where the
previous one ended (the first at its fp start); bp is the bp_end op's end. Where the step trace has no steps
(PyNative), the op launches in `gpu_op_execute_timestamp_{r}.txt` (`name;GpuOps;start_ns,dur_us ...`) mark
them (formats/steps.py). `profiler_info_{r}.json` gives the MindSpore version and mode.
The MindData files in the same folder are read by minddata.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ...core.errors import FileFormatError
from ...core.opnames import op_passes, op_types_of
from ...core.units import NS_PER_MS, TICKS_PER_MS, US_PER_MS
from ..discovery import has_match
from . import legacy
from .base import Parts, Reader
from .files import guarded, ranks_in, read_csv, read_text, with_folder_notes
from .legacy import read_profiler_info
from .steps import longest_call_ms, read_execute_timestamps, shortest_call_ms

if TYPE_CHECKING:
    import pandas as pd

TYPE_FILE = "gpu_op_type_info_{}.csv"
DETAIL_FILE = "gpu_op_detail_info_{}.csv"
STEP_FILE = "step_trace_profiling_{}.txt"
TIMESTAMP_FILE = "gpu_op_execute_timestamp_{}.txt"
PROFILER_INFO_FILE = "profiler_info_{}.json"
RANK_PATTERNS = ("gpu_op_type_info_*.csv", "gpu_op_detail_info_*.csv", "step_trace_profiling_*.txt")
# DataSaver::WriteOpTimestamp, op_side "gpu": `start,duration`, the duration in µs (steps.read_execute_timestamps)
GPU_EXECUTION_FIELDS = ("start_ns", "dur_us")

# Header aliases, {canonical: accepted headers}; times in these files are µs, shares 0-1.
TYPE_COLUMNS = {
    "type": ("op_type",),
    "count": ("type_occurrences",),
    "total_us": ("total_time(us)",),
    "file_share": ("total_proportion",),
}
DETAIL_COLUMNS = {
    "side": ("op_side",),
    "type": ("op_type",),
    "name": ("op_full_name",),
    "count": ("op_occurrences",),
    "total_us": ("op_total_time(us)",),
    "avg_us": ("op_avg_time(us)",),
}
TYPE_TYPES = {"type": pa.string(), "count": pa.float64(), "total_us": pa.float64(), "file_share": pa.float64()}
DETAIL_TYPES = {"side": pa.string(), "type": pa.string(), "name": pa.string(), "count": pa.float64(),
                "total_us": pa.float64(), "avg_us": pa.float64()}
# Per-marker lines, in the order GpuDataSaver writes them; more lines are communication ops.
FP_LINE, BP_LINE, ITER_END_LINE = 0, 1, 2
MARKER_LINES = 3
# Per-step fields: iter_start, fp_start, bp_end, iter_end, then communication ops.
STEP_MARKER_FIELDS = 4


def detect(folder: Path) -> bool:
    return has_match(folder, RANK_PATTERNS)


def read(folder: Path) -> dict[int, Parts]:
    notes: list[str] = []
    ranks = ranks_in(folder, RANK_PATTERNS, notes)
    if not ranks:
        raise FileFormatError(notes[0] if notes else "holds GPU profiler files without a rank in their names", folder)
    return with_folder_notes({rank: _read_rank(folder, rank) for rank in ranks}, notes)


def _read_rank(folder: Path, rank: int) -> Parts:
    parts = Parts(meta={"device": "GPU", "layout": "gpu"})

    def load(pattern, reader):
        return guarded(parts, folder / pattern.format(rank), reader)

    op_types = load(TYPE_FILE, lambda p: read_csv(p, TYPE_COLUMNS, ("type", "total_us"), TYPE_TYPES,
                                                  parts.warnings))
    details = load(DETAIL_FILE, lambda p: read_csv(p, DETAIL_COLUMNS, ("name", "avg_us"), DETAIL_TYPES,
                                                   parts.warnings))
    steps = load(STEP_FILE, _read_steps)
    info = load(PROFILER_INFO_FILE, lambda p: read_profiler_info(p, parts.warnings))
    if info:
        parts.meta.update(info)
    if steps is None:
        # PyNative runs leave the step trace empty; every op launch is still recorded: loader derives the
        # steps from them (formats/steps.py, as for CPU), and says so.
        events = load(TIMESTAMP_FILE, lambda p: read_execute_timestamps(p, parts.warnings, GPU_EXECUTION_FIELDS))
        if events is not None:
            parts.tables["op_events"] = events
            parts.warnings.append(f"{STEP_FILE.format(rank)} has no steps: steps come from "
                                  f"{TIMESTAMP_FILE.format(rank)}")
    if op_types is None and details is None and steps is None and "op_events" not in parts.tables:
        names = ", ".join(p.format(rank) for p in (TYPE_FILE, DETAIL_FILE, STEP_FILE))
        raise FileFormatError(f"has none of {names} readable ({'; '.join(parts.warnings)})", folder)
    if op_types is not None:
        op_types = op_types[op_types["type"].notna()].copy()
        op_types["total_ms"] = op_types.pop("total_us") / US_PER_MS
        if "count" not in op_types:
            op_types["count"] = 1
        parts.tables["op_types"] = op_types
    if details is not None:
        parts.tables["ops"] = _ops(details)
        if "op_events" in parts.tables:
            parts.tables["ops"]["max_ms"] = parts.tables["ops"]["name"].map(longest_call_ms(parts.tables["op_events"]))
            parts.tables["ops"]["min_ms"] = parts.tables["ops"]["name"].map(shortest_call_ms(parts.tables["op_events"]))
    if steps is not None:
        parts.tables["steps"] = steps
        parts.meta["step_source"] = "step_trace"
    return parts


def _ops(details: pd.DataFrame) -> pd.DataFrame:
    ops = details[details["name"].notna()].copy()
    ops["count"] = ops["count"].fillna(1) if "count" in ops else 1
    ops["avg_ms"] = ops.pop("avg_us") / US_PER_MS
    ops["total_ms"] = (ops.pop("total_us") / US_PER_MS if "total_us" in ops
                       else ops["avg_ms"] * ops["count"])
    if "type" not in ops:
        ops["type"] = op_types_of(ops["name"].tolist())
    ops["pass"] = op_passes(ops["name"])
    return ops.drop(columns="side", errors="ignore")


def _read_steps(path: Path) -> pd.DataFrame:
    lines = [line.split() for line in read_text(path).splitlines() if line.strip()]
    try:
        if "," in lines[0][0]:
            return _steps_per_step(lines)
        return _steps_per_marker(lines)
    except (ValueError, IndexError) as exc:
        raise FileFormatError(f"is not a step trace MindSpore writes ({exc})", path) from None


def _steps_per_marker(lines: list[list[str]]) -> pd.DataFrame:
    if len(lines) < MARKER_LINES:
        raise ValueError(f"{len(lines)} line(s), fp_start, bp_end and iter_end lines needed")
    pairs = [np.array([[int(v) for v in pair.split(",")] for pair in line[1:]], dtype="int64").reshape(-1, 2)
             for line in lines]
    steps = min(len(p) for p in pairs)
    if steps == 0:
        raise ValueError("no step timestamps")
    fp = pairs[FP_LINE][:steps, 0]
    bp = pairs[BP_LINE][:steps, 1]
    end = pairs[ITER_END_LINE][:steps, 1]
    start = np.concatenate([fp[:1], end[:-1]])
    comm = sum((p[:steps, 1] - p[:steps, 0] for p in pairs[MARKER_LINES:]), np.zeros(steps, dtype="int64"))
    # the per-marker step trace counts 10 ns ticks; the per-step (async launch) one ns
    return _frame(start, fp, bp, end, comm if len(pairs) > MARKER_LINES else None, TICKS_PER_MS)


def _steps_per_step(lines: list[list[str]]) -> pd.DataFrame:
    start, fp, bp, end, comm = [], [], [], [], []
    for fields in lines:
        if len(fields) < STEP_MARKER_FIELDS:
            raise ValueError(f"a line with {len(fields)} field(s), {STEP_MARKER_FIELDS} markers needed")
        marks = [int(field.rsplit(",", 1)[1]) for field in fields[:STEP_MARKER_FIELDS]]
        start.append(marks[0]), fp.append(marks[1]), bp.append(marks[2]), end.append(marks[3])
        durations = [int(e) - int(s) for s, e in (f.split(",")[-2:] for f in fields[STEP_MARKER_FIELDS:])]
        comm.append(sum(durations))
    has_comm = any(len(fields) > STEP_MARKER_FIELDS for fields in lines)
    return _frame(*(np.array(v, dtype="int64") for v in (start, fp, bp, end)),
                  np.array(comm, dtype="int64") if has_comm else None, NS_PER_MS)


def _frame(start, fp, bp, end, comm, ticks_per_ms: float) -> pd.DataFrame:
    import pandas as pd
    steps = pd.DataFrame({"step": np.arange(1, len(start) + 1),
                          "interval_ms": (fp - start) / ticks_per_ms,
                          "fwd_bwd_ms": (bp - fp) / ticks_per_ms,
                          "tail_ms": (end - bp) / ticks_per_ms,
                          "total_ms": (end - start) / ticks_per_ms})
    if comm is not None:
        steps["comm_ms"] = comm / ticks_per_ms
    return steps


# The timeline: MindInsight's gpu_timeline_display_{r}.json, else gpu_op_execute_timestamp_{r}.txt, as legacy.traces
# finds them.
READER = Reader(name="gpu", provides=frozenset({"steps", "op_types", "ops", "op_events"}), detect=detect, read=read,
                looks_for="gpu_op_*", ops_cover_device=True, traces=legacy.traces)

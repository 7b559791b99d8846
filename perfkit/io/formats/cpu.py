"""MindSpore's CPU profiler output: `{host}_{pid}_{ts}_ascend_ms/FRAMEWORK/cpu_op_*` (docs/formats.md §2).

No step trace is written on CPU. This reader gives op types, ops (with input shapes from
`cpu_framework_{r}.txt`) and every op execution as "op_events", from which `load` derives the
steps (see steps.py), with the step times `perfkit profile` recorded when there are some.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ...core.errors import FileFormatError
from ...core.opnames import op_passes
from ..discovery import has_match
from . import ascend_ms
from .base import Parts, Reader, TraceFile
from .files import guarded, ranks_in, read_csv, read_text, with_folder_notes
from .steps import longest_call_ms, read_execute_timestamps, shortest_call_ms, with_first_step_time

if TYPE_CHECKING:
    import pandas as pd

FRAMEWORK_DIR = "FRAMEWORK"
TYPE_FILE = "cpu_op_type_info_{}.csv"
DETAIL_FILE = "cpu_op_detail_info_{}.csv"
TIMESTAMP_FILE = "cpu_op_execute_timestamp_{}.txt"
CPU_EXECUTION_FIELDS = ("start_ns", "dur_ms", "tid")  # DataSaver::WriteOpTimestamp, op_side "cpu"
SHAPE_FILE = "cpu_framework_{}.txt"

# Header aliases, {canonical: accepted headers}; times are ms and percent a 0-1 fraction.
TYPE_COLUMNS = {
    "type": ("op_type",),
    "count": ("type_occurrences",),
    "total_ms": ("total_compute_time", "total_time(ms)"),
    "file_share": ("percent", "total_proportion"),
}
DETAIL_COLUMNS = {
    "type": ("op_type",),
    "op_name": ("op_name",),
    "name": ("full_op_name",),
    "count": ("op_occurrences",),
    "total_ms": ("op_total_time(ms)",),
    "avg_ms": ("op_avg_time(ms)",),
}
TYPE_TYPES = {"type": pa.string(), "count": pa.float64(), "total_ms": pa.float64(), "file_share": pa.float64()}
DETAIL_TYPES = {"type": pa.string(), "op_name": pa.string(), "name": pa.string(), "count": pa.float64(),
                "total_ms": pa.float64(), "avg_ms": pa.float64()}
# `input_3:[64, 3, 7, 7]`, `input_6:NoShape`, `input_2:[]`
SHAPE_FIELD = re.compile(r"^input_\d+:(.*)$")


def detect(folder: Path) -> bool:
    return has_match(os.path.join(folder, FRAMEWORK_DIR), ("cpu_op_type_info_*.csv",))


def folder_rank(folder: Path) -> int | None:
    """The rank a CPU profiler folder's FRAMEWORK/cpu_op_type_info_{r}.csv names (CPU folders have no
    profiler_info); None unless it names exactly one."""
    ranks = ranks_in(folder / FRAMEWORK_DIR, (TYPE_FILE.format("*"),), [])  # read() says what is refused
    return ranks[0] if len(ranks) == 1 else None


def read(folder: Path) -> dict[int, Parts]:
    framework = folder / FRAMEWORK_DIR
    notes: list[str] = []
    ranks = ranks_in(framework, (TYPE_FILE.format("*"),), notes)
    if not ranks:
        raise FileFormatError(notes[0] if notes else "holds cpu_op_type_info files without a rank in their names",
                              framework)
    return with_folder_notes({rank: _read_rank(framework, rank) for rank in ranks}, notes)


def _read_rank(framework: Path, rank: int) -> Parts:
    # Dataset sink mode does not exist on CPU (MindSpore falls back to feed), so the device tells it.
    parts = Parts(meta={"device": "CPU", "layout": "cpu", "data_mode": "feed"})

    def load(pattern, reader):
        return guarded(parts, framework / pattern.format(rank), reader)

    op_types = load(TYPE_FILE, lambda p: read_csv(p, TYPE_COLUMNS, ("type", "count", "total_ms"),
                                                  TYPE_TYPES, parts.warnings))
    details = load(DETAIL_FILE, lambda p: read_csv(p, DETAIL_COLUMNS, ("type", "name", "count", "total_ms"),
                                                   DETAIL_TYPES, parts.warnings))
    events = load(TIMESTAMP_FILE, lambda p: read_execute_timestamps(p, parts.warnings, CPU_EXECUTION_FIELDS))
    shapes = load(SHAPE_FILE, lambda p: _read_shapes(p, parts.warnings))
    if op_types is None and details is None and events is None:
        raise FileFormatError(f"has no readable {TYPE_FILE.format(rank)}, {DETAIL_FILE.format(rank)} or "
                              f"{TIMESTAMP_FILE.format(rank)} (" + "; ".join(parts.warnings) + ")", framework)
    if op_types is not None:
        op_types = op_types[op_types["type"].notna()]
        parts.tables["op_types"] = op_types
    names = details["name"] if details is not None else events["name"] if events is not None else None
    mode = _mode_from_names(names) if names is not None else None
    if mode:
        parts.meta["mode"] = mode
    if details is not None:
        ops = _ops(details, events, shapes, SHAPE_FILE.format(rank), parts.warnings)
        if mode == "pynative":
            # `Default/BiasAdd-op0` and a bare `ReluGrad`: the names say nothing about the pass, but an optimizer
            # update's type (`Default/SGD-op3`, `Default/ApplyMomentum-op2`) says it is the optimizer's
            ops["pass"] = ops["pass"].where(ops["pass"] == "optimizer", "other")
            parts.warnings.append("op names carry no cell scopes (PyNative mode): forward/backward split unknown")
        parts.tables["ops"] = ops
    if events is not None:
        parts.tables["op_events"] = events
    return parts


def _mode_from_names(names: pd.Series) -> str | None:
    """Graph mode names kernels by cell scope (`Default/network-.../Conv2D-op0`, `Gradients/...`);
    PyNative (MindSpore 2.10) writes `Default/Conv2D-op0` or a bare `ReluGrad`. Seen on real runs of
    both modes; a run with neither shape of name says nothing."""
    import pandas as pd
    unique = pd.Series(names.dropna().unique()).astype("string")
    if not len(unique):
        return None
    if (unique.str.startswith("Gradients/") | (unique.str.count("/") >= 2)).any():
        return "graph"
    return "pynative"


def _read_shapes(path: Path, warnings: list[str]) -> pd.DataFrame:
    """`op_type;op_name;graph_id;input_1:[shape];...` -> op_name, shapes ("16,3,64,64;64,3,7,7"), in file order.

    The file has one line per op execution, in execution order; `op_name` (e.g. `Conv2D-op0`) is
    not unique, so lines are matched to executions by order (see `_ops`).
    """
    import pandas as pd
    op_names: list[str] = []
    shapes: list[str] = []
    bad_lines = 0
    for line in read_text(path).splitlines():
        fields = line.rstrip(";").split(";")
        if len(fields) < 3:
            bad_lines += line.strip() != ""
            continue
        if not fields[1]:
            continue  # PyNative writes `;;graph_id;` for ops it runs without a kernel name
        inputs = []
        for field in fields[3:]:
            match = SHAPE_FIELD.match(field.strip())
            shape = match.group(1).strip() if match else ""
            inputs.append(shape[1:-1].replace(" ", "") if shape.startswith("[") and shape.endswith("]") else "")
        op_names.append(fields[1])
        shapes.append(";".join(inputs))
    if bad_lines:
        warnings.append(f"{path.name}: skipped {bad_lines} malformed line(s)")
    if not op_names:
        raise FileFormatError("has no op records", path)
    return pd.DataFrame({"op_name": op_names, "input_shapes": shapes})


def _ops(details: pd.DataFrame, events: pd.DataFrame | None, shapes: pd.DataFrame | None, shape_file: str,
         warnings: list[str]) -> pd.DataFrame:
    ops = details[details["name"].notna()].copy()
    ops["pass"] = op_passes(ops["name"])
    if shapes is not None:
        ops["input_shapes"] = ops["name"].map(_shapes_by_full_name(events, shapes, shape_file, warnings))
    if events is not None:
        ops["max_ms"] = ops["name"].map(longest_call_ms(events))
        ops["min_ms"] = ops["name"].map(shortest_call_ms(events))
    return ops.drop(columns="op_name")


def _shapes_by_full_name(events: pd.DataFrame | None, shapes: pd.DataFrame, shape_file: str,
                         warnings: list[str]) -> pd.Series:
    """full_op_name -> shapes. The n-th framework line with op_name X is the n-th execution (by start
    time) of an op whose full name ends in X; short names whose counts disagree are left out."""
    import pandas as pd
    if events is None:
        warnings.append(f"input shapes not attached: {shape_file} lines are matched to op executions, "
                        f"and the execution timestamps are missing")
        return pd.Series(dtype="string")
    ordered = events.sort_values("start_ns", kind="stable")
    full = ordered["name"].astype("string")
    executions = pd.DataFrame({"name": full.to_numpy(), "op_name": full.str.rsplit("/", n=1).str[-1].to_numpy()})
    executions["occurrence"] = executions.groupby("op_name", sort=False).cumcount()
    lines = shapes.assign(occurrence=shapes.groupby("op_name", sort=False).cumcount())
    line_counts = lines.groupby("op_name").size()
    execution_counts = executions.groupby("op_name").size()
    agree = execution_counts.eq(line_counts.reindex(execution_counts.index)).loc[lambda s: s].index
    if len(agree) < len(execution_counts):
        warnings.append(f"input shapes not attached for {len(execution_counts) - len(agree)} op name(s) whose "
                        f"{shape_file} lines do not match their executions one to one")
    matched = executions[executions["op_name"].isin(agree)]
    joined = matched.merge(lines, on=["op_name", "occurrence"], how="inner")
    return joined.drop_duplicates("name").set_index("name")["input_shapes"]


def traces(folder: Path) -> list[TraceFile]:
    """The rank's trace_view.json (the rank its FRAMEWORK files name: a CPU folder has no profiler_info), else its
    op times as text (FRAMEWORK/cpu_op_execute_timestamp_{r}.txt). No step file: the trace's step markers or its op
    runs give the steps."""
    def rank() -> int:
        named = folder_rank(folder)
        return named if named is not None else ascend_ms.read_profiler_info(folder, Parts())
    return ascend_ms.rank_traces(folder, rank)


# CPU steps come from the op timestamps (formats/steps.py): no step file to read alone.
READER = Reader(name="cpu", provides=frozenset({"op_types", "ops", "op_events"}), detect=detect, read=read,
                looks_for="FRAMEWORK/cpu_op_*", ops_cover_device=True, traces=traces, finish=with_first_step_time)

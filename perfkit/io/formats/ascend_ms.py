"""MindSpore >= 2.3 `*_ascend_ms` folders (and torch_npu `*_ascend_pt`, which share the layout).

The folder holds `profiler_info_{r}.json` and `ASCEND_PROFILER_OUTPUT/` with the analysed tables
read here: `step_trace_time.csv` (steps), `op_statistic.csv` (op types), `kernel_details.csv`
(ops, and the forward/backward split of each step when kernel names carry scopes) and
`dataset.csv` (sink evidence). `trace_view.json` is not read into the Run: it can be gigabytes and
everything perfkit needs is in the tables; it is the rank's trace for the timeline (`traces`), whose steps, where
the trace marks none, are the Step IDs of kernel_details.csv (`kernel_step_bounds_us`).
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.errors import FileFormatError
from ...core.opnames import op_passes, trim_type_separator
from ...core.units import US_PER_MS
from ..discovery import has_match
from .base import Parts, Reader, TraceFile
from .files import guarded, json_object, rank_of, read_csv_table
from .integers import RANK, STEP, checked, whole, wholes
from .stages import stages_from_count, stages_from_pp_groups
from .tables import string_codes, strings_at

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
STEP_TRACE = "step_trace_time.csv"
KERNELS = "kernel_details.csv"
OP_STATISTIC = "op_statistic.csv"
DATASET = "dataset.csv"
DATA_FILES = (STEP_TRACE, KERNELS, OP_STATISTIC)
TRACE_VIEW = "trace_view.json"

# Header aliases, {canonical: accepted headers}; every time column is µs.
STEP_TRACE_COLUMNS = {
    "step": ("Step",),
    "computing": ("Computing",),
    "comm_exposed": ("Communication(Not Overlapped)",),
    "comm_overlapped": ("Overlapped",),
    "comm": ("Communication",),
    "free": ("Free",),
    "bubble": ("Bubble",),
    "preparing": ("Preparing",),  # absent before CANN 8 / MindSpore 2.3
}
KERNEL_COLUMNS = {
    "step": ("Step ID", "Step Id"),  # MindSpore / torch_npu
    "name": ("Name",),
    "type": ("Type",),
    "start_us": ("Start Time(us)",),  # a string ending in a TAB
    "duration_us": ("Duration(us)",),
    "input_shapes": ("Input Shapes",),
    "input_dtypes": ("Input Data Types",),
}
OP_STATISTIC_COLUMNS = {
    "type": ("OP Type",),
    "count": ("Count",),
    "total_us": ("Total Time(us)",),
    "ratio_pct": ("Ratio(%)",),
}
DATASET_COLUMNS = {"operation": ("Operation",), "stage": ("Stage",)}

CATEGORY = pa.dictionary(pa.int32(), pa.string())
STEP_TRACE_TYPES = {name: pa.float64() for name in STEP_TRACE_COLUMNS}
KERNEL_TYPES = {"step": pa.float64(), "name": CATEGORY, "type": CATEGORY, "start_us": pa.string(),
                "duration_us": pa.float64(), "input_shapes": CATEGORY, "input_dtypes": CATEGORY}
OP_STATISTIC_TYPES = {"type": pa.string(), "count": pa.float64(), "total_us": pa.float64(),
                      "ratio_pct": pa.float64()}
DATASET_TYPES = {"operation": pa.string(), "stage": pa.string()}

# Ops whose input dtype says what precision the network computes in (AMP casts exactly these).
PRECISION_OP_TYPES = re.compile(r"^(Conv2D|Conv3D|MatMul|BatchMatMul|BNTraining|BNInfer|BatchNorm)")
NORM_OP_TYPES = re.compile(r"^(BNTraining|BNInfer|BatchNorm)")
# float16 and bfloat16 are kept apart: AMP advice and the precision shown differ between them.
FLOAT16_DTYPES = {"FLOAT16", "DT_FLOAT16", "FP16"}
BFLOAT16_DTYPES = {"BF16", "BFLOAT16", "DT_BF16", "DT_BFLOAT16"}
FLOAT32_DTYPES = {"FLOAT", "FLOAT32", "DT_FLOAT", "FP32"}
# dataset.csv stages run by the device-queue thread, which exists only in dataset sink mode.
SINK_STAGES = {"PushToAscend", "WaitForAscend"}
SINK_OP_TYPES = {"GetNext", "GetNextFromQueue", "DynamicGetNext"}
# HCCL's collective tasks in kernel_details.csv (Accelerator Core HCCL), which op_statistic.csv leaves out.
COLLECTIVE_TYPE_PREFIX = "hcom_"
METADATA = "profiler_metadata.json"
PROFILER_INFO = "profiler_info*.json"
PROFILER_INFO_NAME = re.compile(fnmatch.translate(PROFILER_INFO))
CONTEXT_MODES = {0: "graph", 1: "pynative", "graph": "graph", "graph_mode": "graph",
                 "pynative": "pynative", "pynative_mode": "pynative"}


def detect(folder: Path) -> bool:
    output = os.path.join(folder, OUTPUT_DIR)  # text, not Paths: asked of every folder of a 4,096-rank tree
    return has_match(output, DATA_FILES) and any(os.path.isfile(os.path.join(output, name)) for name in DATA_FILES)


def read(folder: Path) -> dict[int, Parts]:
    output = folder / OUTPUT_DIR
    parts = Parts(meta={"device": "Ascend", "layout": "ascend_ms", "framework": _framework(folder), "export": "text"})
    rank = read_profiler_info(folder, parts)
    _read_metadata(folder, parts)

    def load(name, aliases, required, types):
        return guarded(parts, output / name, lambda p: read_csv_table(p, aliases, required, types, parts.warnings))

    kernel_table = load(KERNELS, KERNEL_COLUMNS, ("name", "type", "start_us", "duration_us"), KERNEL_TYPES)
    op_statistic = load(OP_STATISTIC, OP_STATISTIC_COLUMNS, ("type", "count", "total_us"), OP_STATISTIC_TYPES)
    step_trace = load(STEP_TRACE, STEP_TRACE_COLUMNS, ("step", "computing", "free"), STEP_TRACE_TYPES)
    if kernel_table is None and op_statistic is None and step_trace is None:
        raise FileFormatError("has no readable step_trace_time.csv, kernel_details.csv or op_statistic.csv ("
                              + "; ".join(parts.warnings) + ")", output)
    kernels = _Kernels(kernel_table, output / KERNELS) if kernel_table is not None else None
    if kernels is not None and kernels.types_from_names:
        parts.warnings.append(f"{KERNELS}: {LEVEL0_TYPES_NOTE}")
    if kernels is not None:
        parts.tables["ops"] = _ops(kernels)
        parts.meta.update(_precision(kernels, mindspore="ms_version" in parts.meta))
    if op_statistic is not None:
        parts.tables["op_types"] = _op_types_from_statistic(op_statistic, kernels)
    elif kernels is not None:
        parts.tables["op_types"] = _op_types_from_kernels(kernels)
    if step_trace is not None:
        parts.tables["steps"] = _steps(step_trace, kernels, parts.warnings)
        parts.meta["step_source"] = "step_trace_time"
    dataset = load(DATASET, DATASET_COLUMNS, ("stage",), DATASET_TYPES)
    parts.meta["data_mode"] = data_mode(dataset, kernels)
    return {rank: parts}


def read_steps(folder: Path) -> dict[int, Parts]:
    """Only the steps, from step_trace_time.csv alone: for questions across many ranks (slow ranks),
    where reading every kernel table would cost 15 ms a rank. fwd_bwd_ms and tail_ms need the
    kernels and stay unknown. With the profiler_info and metadata JSON, the rank's cluster-level read."""
    return read_steps_many([folder])[0]


def read_steps_many(folders: list[Path]) -> list[dict[int, Parts]]:
    """read_steps of each of `folders` (a worker's task of a large run's cluster-level read): their step tables
    made at once (_step_tables), each folder's a slice of one table."""
    read = []
    for folder in folders:
        parts = Parts(meta={"device": "Ascend", "layout": "ascend_ms", "framework": _framework(folder),
                            "export": "text"})
        rank = read_profiler_info(folder, parts)
        _read_metadata(folder, parts)
        trace = guarded(parts, os.path.join(folder, OUTPUT_DIR, STEP_TRACE),  # text: a Path a file costs 5 µs a rank
                        lambda p, warnings=parts.warnings: read_csv_table(
                            p, STEP_TRACE_COLUMNS, ("step", "computing", "free"), STEP_TRACE_TYPES, warnings))
        read.append((rank, parts, None if trace is None else _trace_arrays(trace)))
    tables = _step_tables([trace for _, _, trace in read], [parts.warnings for _, parts, _ in read])
    for (_, parts, _), table in zip(read, tables):
        if table is not None:
            parts.tables["steps"] = table
    return [{rank: parts} for rank, parts, _ in read]


def _step_tables(traces: list[dict[str, np.ndarray] | None], warnings: list[list[str]]) -> list[pa.Table | None]:
    """The steps table (step_times, fwd_bwd_ms and tail_ms unknown) of each step file's columns (None: no file).
    The files with one set of columns whose every row has a step are made one table, each file's rows a slice of
    it: per file, step_times' numpy and the table's set-up cost more than reading the file. Any other file (a row
    without a step or whose step is no step: its rows dropped and said) alone, its warnings on its own list."""
    groups: dict[object, list[int]] = {}
    for index, trace in enumerate(traces):
        if trace is not None:
            steps = trace["step"]
            together = not np.isnan(steps).any() and wholes(steps, STEP)[1].all()
            groups.setdefault(tuple(trace) if together else index, []).append(index)
    tables: list[pa.Table | None] = [None] * len(traces)
    for members in groups.values():
        columns = {name: np.concatenate([traces[index][name] for index in members]) for name in traces[members[0]]}
        times = step_times(columns, STEP_TRACE, warnings[members[0]])  # a group says nothing: every row is kept
        unknown = np.full(len(times["step"]), np.nan)
        table = pa.table({**times, "fwd_bwd_ms": unknown, "tail_ms": unknown})
        if len(members) == 1:
            tables[members[0]] = table
            continue
        offset = 0
        for index in members:
            rows = len(traces[index]["step"])
            tables[index] = table.slice(offset, rows)
            offset += rows
    return tables


def _framework(folder: Path) -> str:
    """torch_npu names its folders `*_ascend_pt`, MindSpore `*_ascend_ms`: the layout is shared, the API is not."""
    return "torch_npu" if folder.name.endswith("_ascend_pt") else "mindspore"


def _read_metadata(folder: str | os.PathLike, parts: Parts) -> None:
    """Pipeline stages from profiler_metadata.json's parallel_group_info (torch_npu/Megatron runs)."""
    path = os.path.join(folder, METADATA)
    if not os.path.isfile(path):
        return
    metadata = json_object(parts, path)
    stages = stages_from_pp_groups(metadata.get("parallel_group_info")) if isinstance(metadata, dict) else None
    if stages:
        parts.meta["pipeline_stages"] = stages


def read_profiler_info(folder: str | os.PathLike, parts: Parts) -> int:
    """The rank (file name, else rank_id inside, else 0), and ms_version / mode where the file has them."""
    try:  # the names, not pathlib's glob or Paths: a tenth of a millisecond a rank of a cluster-level read
        names = [name for name in sorted(os.listdir(folder)) if PROFILER_INFO_NAME.fullmatch(name)]
    except OSError:
        names = []
    if not names:
        return 0
    if len(names) > 1:
        parts.warnings.append(f"several profiler_info files ({', '.join(names)}); using {names[0]}")
    info = _profiler_info_object(parts, os.path.join(folder, names[0]))
    named_rank = rank_of(names[0])
    if not isinstance(info, dict):
        if info is not None:
            parts.warnings.append(f"skipped {names[0]}: not a JSON object")
        return named_rank if named_rank is not None else 0
    nested = [value for value in info.values() if isinstance(value, dict)]
    # rank_id is -1 in some single-device runs: that says nothing (and -1 is the run-wide key)
    rank_ids = [scope["rank_id"] for scope in [info, *nested] if type(scope.get("rank_id")) is int]
    rank_id = next((rank for rank in rank_ids if whole(rank, RANK) is not None), None)
    if rank_id is None and any(rank != -1 for rank in rank_ids):
        parts.warnings.append(f"{names[0]}: rank_id {rank_ids[0]} is not a rank (a whole number 0-{RANK.high:,}): "
                              "rank 0 assumed")
    rank = named_rank if named_rank is not None else rank_id if rank_id is not None else 0
    if isinstance(info.get("ms_version"), str) and info["ms_version"]:
        parts.meta["ms_version"] = info["ms_version"]
    stage_num = next((scope["stage_num"] for scope in [info, *nested] if "stage_num" in scope), None)
    rank_size = next((scope["rank_size"] for scope in [info, *nested] if "rank_size" in scope), None)
    stages = stages_from_count(stage_num, rank_size, [rank])
    if stages:
        parts.meta["pipeline_stages"] = stages
    mode = next((scope["context_mode"] for scope in [info, *nested] if "context_mode" in scope), None)
    if isinstance(mode, str):
        mode = mode.strip().lower()
    if type(mode) in (int, str) and CONTEXT_MODES.get(mode):
        parts.meta["mode"] = CONTEXT_MODES[mode]
    return rank


# The last profiler_info files decoded, by (path, size, mtime, ctime, inode): (the object, the warnings and sources it
# added). The ascend_ms and the communication reader both read a rank's: decoded once. A worker's task of a large run
# reads all its folders with one reader, then with the other (read_cluster_many): up to a task's folders (at most 64,
# parallel.MAX_FOLDERS_PER_TASK) lie between the two reads of one file.
_INFO_DECODED: dict[tuple, tuple] = {}
INFO_KEPT = 128


def _profiler_info_object(parts: Parts, path: str) -> dict | None:
    """json_object of a profiler_info file, decoded once for the file as it is on disk (its size, times and inode:
    a rewritten file is decoded again); what it said is said again on `parts`."""
    try:
        stat = os.stat(path)
    except OSError:
        return json_object(parts, path)
    key = (path, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino)
    kept = _INFO_DECODED.get(key)
    if kept is None:
        warned, read = len(parts.warnings), len(parts.sources)
        kept = (json_object(parts, path), parts.warnings[warned:], parts.sources[read:])
        if len(_INFO_DECODED) >= INFO_KEPT:
            _INFO_DECODED.clear()
        _INFO_DECODED[key] = kept
        return kept[0]
    parts.warnings += kept[1]
    parts.sources += kept[2]
    return kept[0]


class _Kernels:
    """kernel_details.csv as numpy arrays, strings as codes into their distinct values.

    Every per-rank question (ops, passes, spans, precision) is asked of the few thousand distinct
    names and types, then spread to the rows by code: a cluster run reads hundreds of these tables,
    and pandas' fixed cost per groupby was most of the read.
    """

    def __init__(self, table: pa.Table, path: Path):
        try:
            start = pc.cast(pc.utf8_trim_whitespace(table.column("start_us")), pa.float64())  # text ending in a TAB
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            raise FileFormatError("has a Start Time(us) that is not a number", path) from None
        keep = pc.and_(pc.is_valid(table.column("name")), pc.is_valid(table.column("duration_us")))
        if not pc.any(keep).as_py():
            raise FileFormatError("has no kernel with a name and a duration", path)
        table = table.set_column(table.column_names.index("start_us"), "start_us", start)
        if not pc.all(keep).as_py():  # usually every row has both: no copy of millions of rows then
            table = table.filter(keep)
        # float64 keeps epoch µs to about 0.25 µs, far below the ms the model reports
        self.start_us = _floats(table.column("start_us"))
        self.duration_us = _floats(table.column("duration_us"))
        self.step = _floats(table.column("step")) if "step" in table.column_names else None
        self.name, self.names = string_codes(table.column("name"))
        self.type, self.types = string_codes(table.column("type"))
        # Level0 collects no op type (`N/A` in every row): the type is in the kernel name (docs/formats.md §3)
        self.types_from_names = untyped(self.types.to_pylist())  # the distinct types: a handful
        if self.types_from_names:
            derived = pa.array([type_from_kernel_name(name) for name in self.names.to_pylist()])
            codes, self.types = string_codes(pa.chunked_array([derived]))
            self.type = codes[self.name]
        trimmed = trim_type_separator(self.types)
        if not pc.all(pc.equal(trimmed, self.types)).as_py():  # `hcom_allReduce_` -> hcom_allReduce
            codes, self.types = string_codes(pa.chunked_array([trimmed]))
            self.type = np.where(self.type >= 0, codes[np.maximum(self.type, 0)], -1)
        self.strings = {column: string_codes(table.column(column))
                        for column in ("input_shapes", "input_dtypes") if column in table.column_names}
        self.name_passes = op_passes(self.names)  # per distinct name

    def passes(self) -> np.ndarray:
        """forward / backward / other per row."""
        return self.name_passes[self.name]

    def fetches(self) -> np.ndarray:
        """Per row: whether the kernel is the dataset fetch (GetNext) of sink mode."""
        per_type = np.append(pc.is_in(self.types, pa.array(sorted(SINK_OP_TYPES))).to_numpy(zero_copy_only=False),
                             False)
        return per_type[self.type]  # code -1 (no type) picks the trailing False


# A Level0 kernel name: `Conv2D1`, `trans_TransData_0`, `aclnnInplaceRelu_Relu_Relu`,
# `aclnnMaxPool2dWithMask_MaxPoolWithArgmaxV1AiCore_MaxPoolWithArgmaxV1`, `hcom_allReduce__586_0_1`.
TRAILING_IDS = re.compile(r"(_+\d+)+$")
TRAILING_NUMBER = re.compile(r"(?<![Vv])\d+$")  # `Conv2D1` -> Conv2D; `MatMulV2` keeps its version


# Said where a table's op types are taken from its kernel names (the text and the database export alike).
LEVEL0_TYPES_NOTE = ("no op types (Level0 collection): types derived from kernel names "
                     "(`Conv2D1` -> Conv2D, `aclnnInplaceRelu_Relu_Relu` -> Relu)")


def untyped(types) -> bool:
    """Whether a kernel table's op types say nothing (Level0 writes `N/A` in every row)."""
    return all(value is None or value != value or value == "N/A" for value in types)


def type_from_kernel_name(name: str) -> str:
    """The op type a Level0 kernel name carries: its last `_` part, without the id appended to it."""
    stem = TRAILING_IDS.sub("", name)
    last = next((part for part in reversed(stem.split("_")) if part), stem)
    return TRAILING_NUMBER.sub("", last) or last


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    return column.to_numpy().astype(np.float64, copy=False)


def _first_valid(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Per group 0..groups-1: the first of its `values` codes that is not -1 (no value), else -1.

    np.minimum.at over row numbers, not np.unique: no sort of millions of rows.
    """
    valid_rows = np.flatnonzero(values >= 0)
    first = np.full(groups, len(valid_rows), dtype=np.int64)
    np.minimum.at(first, group[valid_rows], np.arange(len(valid_rows)))
    found = first < len(valid_rows)
    result = np.full(groups, -1, dtype=np.int64)
    result[found] = values[valid_rows[first[found]]]
    return result


def _unquoted(values: pa.Array) -> pa.Array:
    """Shapes are written as `"32,3,224,224"` with the quotes inside the cell."""
    return pc.utf8_trim(pc.utf8_trim_whitespace(values.cast(pa.string())), characters='"')


def _ops(kernels: _Kernels) -> pa.Table:
    """One row per kernel name, in order of first appearance, as pandas' groupby(sort=False) gives it."""
    import pandas as pd
    groups = len(kernels.names)
    ids = pd.unique(kernels.name)  # in order of appearance, by hashing (no sort)
    count = np.bincount(kernels.name, minlength=groups)[ids]
    total_ms = np.bincount(kernels.name, weights=np.nan_to_num(kernels.duration_us), minlength=groups)[ids] / US_PER_MS
    return pa.table({
        "name": strings_at(ids, kernels.names),
        "count": count.astype(np.int64),
        "type": strings_at(_first_valid(kernels.name, kernels.type, groups)[ids], kernels.types),
        **{column: strings_at(_first_valid(kernels.name, codes, groups)[ids], _unquoted(distinct))
           for column, (codes, distinct) in kernels.strings.items()},
        "total_ms": total_ms,
        "avg_ms": total_ms / count,
        "pass": kernels.name_passes[ids],
    })


def _op_types_from_statistic(statistic: pa.Table, kernels: _Kernels | None) -> pa.Table:
    """One row per type: op_statistic.csv splits a type by core (AI_CORE / AI_VECTOR_CORE). It counts the
    compute tasks only; the HCCL collectives kernel_details.csv lists beside them (`hcom_*`: on msinsight_level1
    hcom_allReduce, its largest kernel) are added from the kernels, as where op_statistic.csv is absent, with no
    file_share (the file does not count them)."""
    import pandas as pd
    codes, types = string_codes(statistic.column("type"))
    typed = codes >= 0
    ids = pd.unique(codes[typed])

    def per_type(column: str) -> np.ndarray:  # a sum skipping unknown values, as pandas' sum does
        values = np.nan_to_num(_floats(statistic.column(column))[typed])
        return np.bincount(codes[typed], weights=values, minlength=len(types))[ids]

    total_ms = per_type("total_us") / US_PER_MS
    columns = {"type": strings_at(ids, types), "total_ms": total_ms, "count": per_type("count")}
    ratio = statistic.column("ratio_pct") if "ratio_pct" in statistic.column_names else None
    if ratio is not None and typed.any() and pc.any(pc.is_valid(ratio.filter(pa.array(typed)))).as_py():
        columns["file_share"] = per_type("ratio_pct") / 100.0
    frame = pa.table(columns)
    if kernels is None:
        return frame
    beside = _op_types_from_kernels(kernels)
    collective = pc.and_(pc.starts_with(beside.column("type"), COLLECTIVE_TYPE_PREFIX),
                         pc.invert(pc.is_in(beside.column("type"), frame.column("type").combine_chunks())))
    beside = beside.filter(pc.fill_null(collective, False))
    # as pandas' concat: a column only one side has is unknown on the other; counts become floats
    return pa.concat_tables([frame, beside], promote_options="permissive") if beside.num_rows else frame


def _op_types_from_kernels(kernels: _Kernels) -> pa.Table:
    import pandas as pd
    typed = kernels.type >= 0
    ids = pd.unique(kernels.type[typed])
    groups = len(kernels.types)
    total_ms = np.bincount(kernels.type[typed], weights=np.nan_to_num(kernels.duration_us[typed]),
                           minlength=groups)[ids] / US_PER_MS
    return pa.table({"type": strings_at(ids, kernels.types), "total_ms": total_ms,
                     "count": np.bincount(kernels.type[typed], minlength=groups)[ids]})


def step_times(trace: dict[str, np.ndarray], file_name: str, warnings: list[str]) -> dict[str, np.ndarray]:
    """step_trace_time.csv columns ({name: array}) in ms, with the old step trace's total and interval. A row
    without a step is left out; one whose step is no step (`inf`, `1e300`, -1: formats/integers.py) too, said.

    numpy, not pandas: a cluster question runs this once per rank, hundreds of times.
    """
    step = trace["step"].astype(np.float64)
    written = np.flatnonzero(~np.isnan(step))
    has_step = np.zeros(len(step), bool)
    has_step[written] = checked(step[written], STEP, file_name, "Step", warnings, rows=written + 2)[1]
    missing = np.full(int(has_step.sum()), np.nan)
    ms = {column: trace[column].astype(np.float64)[has_step] / US_PER_MS if column in trace else missing
          for column in STEP_TRACE_COLUMNS if column != "step"}
    preparing = np.nan_to_num(ms["preparing"], nan=0.0)
    return {
        "step": step[has_step].astype("int64"),
        "computing_ms": ms["computing"], "comm_exposed_ms": ms["comm_exposed"],
        "comm_overlapped_ms": ms["comm_overlapped"], "comm_ms": ms["comm"], "free_ms": ms["free"],
        "bubble_ms": ms["bubble"], "preparing_ms": ms["preparing"],
        "total_ms": ms["computing"] + np.nan_to_num(ms["comm_exposed"], nan=0.0) + ms["free"] + preparing,
        # Free + Preparing is what the old step trace called the interval: the device idle, waiting.
        "interval_ms": ms["free"] + preparing,
    }


def _trace_arrays(trace: pa.Table) -> dict[str, np.ndarray]:
    return {name: _floats(trace.column(name)) for name in trace.column_names}


def _steps(trace: pa.Table, kernels: _Kernels | None, warnings: list[str]) -> pa.Table:
    """Step times with the forward/backward span from kernel scopes where named."""
    times = step_times(_trace_arrays(trace), STEP_TRACE, warnings)
    spans = _forward_backward_spans(kernels, times["step"]) if kernels is not None else None
    if spans is None:
        times["fwd_bwd_ms"] = times["computing_ms"] + np.nan_to_num(times["comm_exposed_ms"], nan=0.0)
        times["tail_ms"] = np.full(len(times["step"]), np.nan)
        warnings.append("fwd/bwd/tail split unavailable: kernel names carry no Default/ or Gradients/ scope, "
                        "so fwd_bwd_ms is Computing + Communication(Not Overlapped) and tail_ms is unknown")
    else:
        times["fwd_bwd_ms"] = spans
        times["tail_ms"] = np.clip(times["total_ms"] - times["interval_ms"] - spans, 0.0, None)
    return pa.table(times)


def _forward_backward_spans(kernels: _Kernels, steps: np.ndarray) -> np.ndarray | None:
    """Per step: last backward kernel end - first forward kernel start, in ms; None without scopes."""
    passes = kernels.passes()
    # GetNext sits under Default/ but is the data fetch the interval covers, not forward compute
    # (MindSpore's own step trace starts fp at the first op after GetNext).
    forward, backward = (passes == "forward") & ~kernels.fetches(), passes == "backward"
    if not forward.any() or not backward.any():
        return None
    if len(steps) == 1 or kernels.step is None:
        step_of = np.full(len(kernels.start_us), float(steps[0]))  # one step row covers every kernel
    else:
        step_of = kernels.step
    first_forward = _per_step(step_of[forward], kernels.start_us[forward], np.minimum, steps)
    last_backward = _per_step(step_of[backward], (kernels.start_us + kernels.duration_us)[backward], np.maximum,
                              steps)
    return (last_backward - first_forward) / US_PER_MS


def _per_step(step_of: np.ndarray, values: np.ndarray, reduce: np.ufunc, steps: np.ndarray) -> np.ndarray:
    """reduce(values) of each step in `steps` (NaN for a step without values); values of a step not in
    `steps`, or of none, are left out."""
    ids, step_index = np.unique(steps, return_inverse=True)  # a few step rows, not the kernels
    position = np.minimum(np.searchsorted(ids, step_of), len(ids) - 1)
    matched = ids[position] == step_of  # never for NaN
    reduced = np.full(len(ids), np.inf if reduce is np.minimum else -np.inf)
    reduce.at(reduced, position[matched], values[matched])
    has_values = np.bincount(position[matched], minlength=len(ids)) > 0
    return np.where(has_values, reduced, np.nan)[step_index]


def _precision(kernels: _Kernels, mindspore: bool) -> dict:
    """compute_dtype from the first input dtype of conv/matmul/batch-norm kernels; AMP level where it is plain."""
    import pandas as pd
    if "input_dtypes" not in kernels.strings:
        return {}
    dtype_codes, dtypes = kernels.strings["input_dtypes"]
    known = (kernels.type >= 0) & (dtype_codes >= 0)
    pairs = pd.unique(kernels.type[known].astype(np.int64) * len(dtypes) + dtype_codes[known])
    types = kernels.types.to_pylist()
    upper_dtypes = pc.utf8_upper(_unquoted(dtypes)).to_pylist()
    return precision_of([(types[op_type], upper_dtypes[dtype])
                         for op_type, dtype in zip((pairs // len(dtypes)).tolist(), (pairs % len(dtypes)).tolist())],
                        mindspore)


def precision_of(type_dtypes: list[tuple[str, str]], mindspore: bool) -> dict:
    """compute_dtype (and AMP level) from distinct (op type, upper-case input dtypes `A;B`) pairs."""
    precision = [(bool(NORM_OP_TYPES.match(op_type)), dtypes.split(";")[0]) for op_type, dtypes in type_dtypes
                 if PRECISION_OP_TYPES.match(op_type)]
    if not precision:
        return {}
    fp16 = np.array([dtype in FLOAT16_DTYPES for _, dtype in precision])
    bf16 = np.array([dtype in BFLOAT16_DTYPES for _, dtype in precision])
    single = np.array([dtype in FLOAT32_DTYPES for _, dtype in precision])
    kinds = [name for name, seen in (("float16", fp16), ("bfloat16", bf16), ("float32", single)) if seen.any()]
    if not kinds:
        return {}
    is_norm = np.array([norm for norm, _ in precision])
    result = {"compute_dtype": kinds[0] if len(kinds) == 1 else "mixed"}
    if mindspore:
        # MindSpore AMP: O0 keeps everything fp32, O3 casts everything (batch norm too) to fp16;
        # O1 and O2 differ in lists the dtypes alone cannot tell apart, so they stay unnamed.
        if single.all():
            result["amp_level"] = "O0"
        elif fp16.all() and is_norm.any():  # O3 casts to float16; bfloat16 is a custom AMP dtype
            result["amp_level"] = "O3"
    return result


def data_mode(dataset: pa.Table | None, kernels: _Kernels | None) -> str | None:
    """"sink" when device-side data stages or GetNext kernels show it; feed mode leaves no sure trace."""
    if dataset is not None and pc.any(pc.is_in(dataset.column("stage"), pa.array(sorted(SINK_STAGES)))).as_py():
        return "sink"
    if kernels is not None and kernels.fetches().any():
        return "sink"
    return None


# ---------------------------------------------------------------- the timeline (perfkit/io/timeline.py)

def traces(folder: Path) -> list[TraceFile]:
    """The rank's trace_view.json, else the op times MindSpore wrote as text (trace_text); steps from kernel_details.csv
    where the trace marks none."""
    return rank_traces(folder, lambda: read_profiler_info(folder, Parts()), folder / OUTPUT_DIR / KERNELS,
                       kernel_step_bounds_us)


def rank_traces(folder: Path, rank: Callable[[], int], step_file: Path | None = None,
                step_bounds: Callable[[Path], dict[int, list[float]]] | None = None) -> list[TraceFile]:
    """A profiler folder's trace_view.json as its rank's trace (`rank()`: the folder's rank); the text timelines
    (trace_text) of the ranks it leaves, as theirs. The CPU layout's folders are laid out as this one's."""
    from ..trace_text import text_traces  # the timeline's reader (msgspec): loading a Run never needs it

    found = text_traces(folder)
    view = folder / OUTPUT_DIR / TRACE_VIEW
    if view.is_file():
        found[rank()] = view
    return [TraceFile(number, path, folder, step_file, step_bounds) for number, path in sorted(found.items())]


def kernel_step_bounds_us(path: Path) -> dict[int, list[float]]:
    """Per Step ID: [first kernel start, last kernel end] in µs, from kernel_details.csv."""
    import pandas as pd
    import pyarrow.csv as pacsv
    try:
        names = pacsv.open_csv(path).schema.names
        step = next(name for name in names if name.lower() == "step id")
        columns = [step, "Start Time(us)", "Duration(us)"]
        table = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
            include_columns=columns, column_types={step: pa.string(), "Start Time(us)": pa.string(),
                                                   "Duration(us)": pa.string()}))
    except (StopIteration, pa.ArrowException, OSError):
        return {}
    steps = pd.to_numeric(pd.Series(table.column(step).to_numpy(zero_copy_only=False)), errors="coerce")
    start = pd.to_numeric(pd.Series(pc.utf8_trim_whitespace(table.column("Start Time(us)")).to_numpy(
        zero_copy_only=False)), errors="coerce")
    dur = pd.to_numeric(pd.Series(table.column("Duration(us)").to_numpy(zero_copy_only=False)), errors="coerce")
    frame = pd.DataFrame({"step": steps, "start": start, "end": start + dur.fillna(0.0)}).dropna()
    grouped = frame.groupby("step").agg(start=("start", "min"), end=("end", "max"))
    return {int(step): [float(row.start), float(row.end)] for step, row in grouped.iterrows()}


READER = Reader(name="ascend_ms", provides=frozenset({"steps", "op_types", "ops"}),
                detect=detect, read=read, read_steps=read_steps, read_cluster=read_steps,
                read_cluster_many=read_steps_many,
                cluster_files=(PROFILER_INFO, METADATA, f"{OUTPUT_DIR}/{STEP_TRACE}"),
                looks_for="ASCEND_PROFILER_OUTPUT/ text export", ops_cover_device=True, traces=traces)

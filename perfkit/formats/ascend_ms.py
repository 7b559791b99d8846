"""MindSpore >= 2.3 `*_ascend_ms` folders (and torch_npu `*_ascend_pt`, which share the layout).

The folder holds `profiler_info_{r}.json` and `ASCEND_PROFILER_OUTPUT/` with the analysed tables
read here: `step_trace_time.csv` (steps), `op_statistic.csv` (op types), `kernel_details.csv`
(ops, and the forward/backward split of each step when kernel names carry scopes) and
`dataset.csv` (sink evidence). `trace_view.json` is never read: it can be gigabytes and
everything perfkit needs is in the tables.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import FileFormatError
from .base import Parts, guarded, op_passes, rank_of, read_csv, read_csv_table, read_json_object

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
STEP_TRACE = "step_trace_time.csv"
KERNELS = "kernel_details.csv"
OP_STATISTIC = "op_statistic.csv"
DATASET = "dataset.csv"
DATA_FILES = (STEP_TRACE, KERNELS, OP_STATISTIC)
US_PER_MS = 1000.0

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
FLOAT16_DTYPES = {"FLOAT16", "DT_FLOAT16", "FP16", "BF16", "BFLOAT16", "DT_BF16"}
FLOAT32_DTYPES = {"FLOAT", "FLOAT32", "DT_FLOAT", "FP32"}
# dataset.csv stages run by the device-queue thread, which exists only in dataset sink mode.
SINK_STAGES = {"PushToAscend", "WaitForAscend"}
SINK_OP_TYPES = {"GetNext", "GetNextFromQueue", "DynamicGetNext"}
CONTEXT_MODES = {0: "graph", 1: "pynative", "graph": "graph", "graph_mode": "graph",
                 "pynative": "pynative", "pynative_mode": "pynative"}


def detect(folder: Path) -> bool:
    output = folder / OUTPUT_DIR
    return output.is_dir() and any((output / name).is_file() for name in DATA_FILES)


def read(folder: Path) -> dict[int, Parts]:
    output = folder / OUTPUT_DIR
    parts = Parts(meta={"device": "Ascend", "layout": "ascend_ms"})
    rank = _read_profiler_info(folder, parts)

    def load(name, aliases, required, types):
        return guarded(parts, output / name, lambda p: read_csv(p, aliases, required, types, parts.warnings))

    kernels = load(KERNELS, KERNEL_COLUMNS, ("name", "type", "start_us", "duration_us"), KERNEL_TYPES)
    op_statistic = load(OP_STATISTIC, OP_STATISTIC_COLUMNS, ("type", "count", "total_us"), OP_STATISTIC_TYPES)
    step_trace = load(STEP_TRACE, STEP_TRACE_COLUMNS, ("step", "computing", "free"), STEP_TRACE_TYPES)
    if kernels is None and op_statistic is None and step_trace is None:
        raise FileFormatError("has no readable step_trace_time.csv, kernel_details.csv or op_statistic.csv ("
                              + "; ".join(parts.warnings) + ")", output)
    if kernels is not None:
        kernels = _prepare_kernels(kernels, output / KERNELS)
        parts.tables["ops"] = _ops(kernels)
        parts.meta.update(_precision(kernels, mindspore="ms_version" in parts.meta))
    if op_statistic is not None:
        parts.tables["op_types"] = _op_types_from_statistic(op_statistic)
    elif kernels is not None:
        parts.tables["op_types"] = _op_types_from_kernels(kernels)
    if step_trace is not None:
        parts.tables["steps"] = _steps(step_trace, kernels, parts.warnings)
        parts.meta["step_source"] = "step_trace_time"
    dataset = load(DATASET, DATASET_COLUMNS, ("stage",), DATASET_TYPES)
    parts.meta["data_mode"] = _data_mode(dataset, kernels)
    return {rank: parts}


def read_steps(folder: Path) -> dict[int, Parts]:
    """Only the steps, from step_trace_time.csv alone: for questions across many ranks (slow ranks),
    where reading every kernel table would cost 50 ms a rank. fwd_bwd_ms and tail_ms need the
    kernels and stay unknown."""
    parts = Parts(meta={"device": "Ascend", "layout": "ascend_ms"})
    rank = _read_profiler_info(folder, parts)
    trace = guarded(parts, folder / OUTPUT_DIR / STEP_TRACE,
                    lambda p: read_csv_table(p, STEP_TRACE_COLUMNS, ("step", "computing", "free"), STEP_TRACE_TYPES,
                                             parts.warnings))
    if trace is not None:
        times = _step_times({name: trace.column(name).to_numpy(zero_copy_only=False)
                             for name in trace.column_names})
        unknown = np.full(len(times["step"]), np.nan)
        parts.tables["steps"] = pd.DataFrame({**times, "fwd_bwd_ms": unknown, "tail_ms": unknown})
    return {rank: parts}


def _read_profiler_info(folder: Path, parts: Parts) -> int:
    """The rank (file name, else rank_id inside, else 0), and ms_version / mode where the file has them."""
    files = sorted(folder.glob("profiler_info*.json"))
    if not files:
        return 0
    if len(files) > 1:
        parts.warnings.append(f"several profiler_info files ({', '.join(f.name for f in files)}); "
                              f"using {files[0].name}")
    path = files[0]
    info = guarded(parts, path, read_json_object)
    named_rank = rank_of(path.name)
    if not isinstance(info, dict):
        if info is not None:
            parts.warnings.append(f"skipped {path.name}: not a JSON object")
        return named_rank if named_rank is not None else 0
    nested = [value for value in info.values() if isinstance(value, dict)]
    # rank_id is -1 in some single-device runs: that says nothing (and -1 is the run-wide key)
    rank_id = next((scope["rank_id"] for scope in [info, *nested]
                    if type(scope.get("rank_id")) is int and scope["rank_id"] >= 0), None)
    if isinstance(info.get("ms_version"), str) and info["ms_version"]:
        parts.meta["ms_version"] = info["ms_version"]
    mode = next((scope["context_mode"] for scope in [info, *nested] if "context_mode" in scope), None)
    if isinstance(mode, str):
        mode = mode.strip().lower()
    if type(mode) in (int, str) and CONTEXT_MODES.get(mode):
        parts.meta["mode"] = CONTEXT_MODES[mode]
    if named_rank is not None:
        return named_rank
    return rank_id if rank_id is not None else 0



def _prepare_kernels(kernels: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Numeric start times (the column is text ending in a TAB) and rows with a name and a duration."""
    try:
        start = pc.cast(pc.utf8_trim_whitespace(pa.array(kernels["start_us"].array, type=pa.string())), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        raise FileFormatError("has a Start Time(us) that is not a number", path) from None
    # float64 keeps epoch µs to about 0.25 µs, far below the ms the model reports
    kernels = kernels.assign(start_us=start.to_numpy(zero_copy_only=False))
    kernels = kernels[kernels["name"].notna() & kernels["duration_us"].notna()]
    if not len(kernels):
        raise FileFormatError("has no kernel with a name and a duration", path)
    return kernels


def _per_category(column: pd.Series, function, missing) -> np.ndarray:
    """function(distinct values) spread back to the rows: kernel tables repeat a few thousand names
    and types over millions of rows."""
    categorical = column.astype("category")
    per_value = np.append(function(categorical.cat.categories), np.array([missing], dtype=object))
    return per_value[categorical.cat.codes.to_numpy()]  # code -1 (no value) picks the trailing `missing`


def _pass_codes(names: pd.Series) -> np.ndarray:
    return _per_category(names, op_passes, "other")


def _is_fetch(types: pd.Series) -> np.ndarray:
    return _per_category(types, lambda distinct: distinct.isin(SINK_OP_TYPES), False).astype(bool)


def _strip_quotes(series: pd.Series) -> pd.Series:
    """Shapes are written as `"32,3,224,224"` with the quotes inside the cell."""
    return series.astype("string").str.strip().str.strip('"')


def _ops(kernels: pd.DataFrame) -> pd.DataFrame:
    columns = {"total_us": ("duration_us", "sum"), "count": ("duration_us", "size"), "type": ("type", "first")}
    for optional in ("input_shapes", "input_dtypes"):
        if optional in kernels:
            columns[optional] = (optional, "first")
    ops = kernels.groupby("name", observed=True, sort=False).agg(**columns).reset_index()
    ops["total_ms"] = ops["total_us"] / US_PER_MS
    ops["avg_ms"] = ops["total_ms"] / ops["count"]
    ops["pass"] = _pass_codes(ops["name"])
    for optional in ("input_shapes", "input_dtypes"):
        if optional in ops:
            ops[optional] = _strip_quotes(ops[optional])
    ops["name"] = ops["name"].astype("string")
    ops["type"] = ops["type"].astype("string")
    return ops.drop(columns="total_us")


def _op_types_from_statistic(statistic: pd.DataFrame) -> pd.DataFrame:
    """One row per type: op_statistic.csv splits a type by core (AI_CORE / AI_VECTOR_CORE)."""
    statistic = statistic[statistic["type"].notna()]
    columns = {"total_us": ("total_us", "sum"), "count": ("count", "sum")}
    if "ratio_pct" in statistic and statistic["ratio_pct"].notna().any():
        columns["ratio_pct"] = ("ratio_pct", "sum")
    types = statistic.groupby("type", sort=False).agg(**columns).reset_index()
    types["total_ms"] = types["total_us"] / US_PER_MS
    if "ratio_pct" in types:
        types["share"] = types["ratio_pct"] / 100.0
    else:
        total = types["total_ms"].sum()
        types["share"] = types["total_ms"] / total if total > 0 else np.nan
    return types[["type", "total_ms", "count", "share"]]


def _op_types_from_kernels(kernels: pd.DataFrame) -> pd.DataFrame:
    types = (kernels.groupby("type", observed=True, sort=False)
             .agg(total_us=("duration_us", "sum"), count=("duration_us", "size")).reset_index())
    types["total_ms"] = types["total_us"] / US_PER_MS
    total = types["total_ms"].sum()
    types["share"] = types["total_ms"] / total if total > 0 else np.nan
    types["type"] = types["type"].astype("string")
    return types[["type", "total_ms", "count", "share"]]


def _step_times(trace: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """step_trace_time.csv columns ({name: array}) in ms, with the old step trace's total and interval.

    numpy, not pandas: a cluster question runs this once per rank, hundreds of times.
    """
    step = trace["step"].astype(np.float64)
    has_step = ~np.isnan(step)
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


def _steps(trace: pd.DataFrame, kernels: pd.DataFrame | None, warnings: list[str]) -> pd.DataFrame:
    """Step times with the forward/backward span from kernel scopes where named."""
    steps = pd.DataFrame(_step_times({name: trace[name].to_numpy(dtype=np.float64, na_value=np.nan)
                                      for name in trace.columns}))
    spans = _forward_backward_spans(kernels, steps["step"]) if kernels is not None else None
    if spans is None:
        steps["fwd_bwd_ms"] = steps["computing_ms"] + steps["comm_exposed_ms"].fillna(0.0)
        steps["tail_ms"] = np.nan
        warnings.append("fwd/bwd/tail split unavailable: kernel names carry no Default/ or Gradients/ scope, "
                        "so fwd_bwd_ms is Computing + Communication(Not Overlapped) and tail_ms is unknown")
    else:
        steps["fwd_bwd_ms"] = spans.to_numpy()
        steps["tail_ms"] = (steps["total_ms"] - steps["interval_ms"] - steps["fwd_bwd_ms"]).clip(lower=0.0)
    return steps


def _forward_backward_spans(kernels: pd.DataFrame, steps: pd.Series) -> pd.Series | None:
    """Per step: last backward kernel end - first forward kernel start, in ms; None without scopes."""
    passes = _pass_codes(kernels["name"])
    # GetNext sits under Default/ but is the data fetch the interval covers, not forward compute
    # (MindSpore's own step trace starts fp at the first op after GetNext).
    fetch = _is_fetch(kernels["type"])
    forward, backward = (passes == "forward") & ~fetch, passes == "backward"
    if not forward.any() or not backward.any():
        return None
    if len(steps) == 1 or "step" not in kernels:
        step_of = pd.Series(steps.iloc[0], index=kernels.index)  # one step row covers every kernel
    else:
        step_of = kernels["step"]
    start = kernels["start_us"]
    end = start + kernels["duration_us"]
    first_forward = start[forward].groupby(step_of[forward]).min()
    last_backward = end[backward].groupby(step_of[backward]).max()
    span_ms = (last_backward - first_forward) / US_PER_MS
    return steps.map(span_ms).astype("float64")


def _precision(kernels: pd.DataFrame, mindspore: bool) -> dict:
    """compute_dtype from the first input dtype of conv/matmul/batch-norm kernels; AMP level where it is plain."""
    if "input_dtypes" not in kernels:
        return {}
    pairs = kernels.groupby(["type", "input_dtypes"], observed=True).size().reset_index()[["type", "input_dtypes"]]
    pairs = pairs[pairs["type"].astype("string").str.match(PRECISION_OP_TYPES)]
    if not len(pairs):
        return {}
    first_dtype = _strip_quotes(pairs["input_dtypes"]).str.split(";").str[0].str.upper()
    half = first_dtype.isin(FLOAT16_DTYPES).to_numpy()
    single = first_dtype.isin(FLOAT32_DTYPES).to_numpy()
    if not half.any() and not single.any():
        return {}
    is_norm = pairs["type"].astype("string").str.match(NORM_OP_TYPES).to_numpy()
    if half.any() and single.any():
        result = {"compute_dtype": "mixed"}
    else:
        result = {"compute_dtype": "float16" if half.any() else "float32"}
    if mindspore:
        # MindSpore AMP: O0 keeps everything fp32, O3 casts everything (batch norm too) to fp16;
        # O1 and O2 differ in lists the dtypes alone cannot tell apart, so they stay unnamed.
        if single.all():
            result["amp_level"] = "O0"
        elif half.all() and is_norm.any():
            result["amp_level"] = "O3"
    return result


def _data_mode(dataset: pd.DataFrame | None, kernels: pd.DataFrame | None) -> str | None:
    """"sink" when device-side data stages or GetNext kernels show it; feed mode leaves no sure trace."""
    if dataset is not None and dataset["stage"].isin(SINK_STAGES).any():
        return "sink"
    if kernels is not None and _is_fetch(kernels["type"]).any():
        return "sink"
    return None

"""MindSpore <= 2.2 Ascend output: every file flat in one folder (docs/formats.md §1).

Op types and ops come from the `aicore_intermediate_{r}_*` files, input shapes and dtypes from
`framework_raw_{r}.csv`, steps from `step_trace_raw_{r}_detail_time.csv`. The MindData files in
the same folder are read by minddata.py; this reader only looks at their names for the data mode.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.opnames import comm_kind, op_passes, op_types_of
from ...core.units import TICKS_PER_MS, TICKS_PER_US
from ..discovery import has_match
from .base import Parts, Reader, TraceFile
from .files import (
    csv_header,
    guarded,
    is_real_number,
    rank_of,
    ranks_in,
    read_csv,
    read_json_object,
    read_text,
    with_folder_notes,
)
from .integers import RANK, STEP, checked, whole
from .stages import stages_from_cluster_file

if TYPE_CHECKING:
    import pandas as pd

TYPE_FILE = "aicore_intermediate_{}_type.csv"
DETAIL_FILE = "aicore_intermediate_{}_detail.csv"
FRAMEWORK_FILE = "framework_raw_{}.csv"
STEP_FILE = "step_trace_raw_{}_detail_time.csv"
# MindSpore's HCCL parser (mindspore/profiler/parser/hccl_parser.py; MindInsight's ClusterHcclAnalyser reads it):
# per step, communication_cost (ms on the links of each op's main stream: SDMA Reduce Inline + Memcpy, RDMA
# sends), wait_cost (ms of Notify Wait: waiting for the peer ranks), link_info and, per op (named as in the step
# trace), `[step, cost ms, wait ms, link_info]` in communication_operator_cost. The last row (`-`) is the average.
HCCL_FILE = "hccl_raw_{}.csv"
# MindSpore's cluster analysis of a model- or pipeline-parallel run, one row per step (ms):
# `ascend_cluster_analyse_{parallel mode}_{stages}_{rank count}_{rank}.csv`.
CLUSTER_FILE = "ascend_cluster_analyse_*_{}.csv"
PROFILER_INFO_FILE = "profiler_info_{}.json"
# Files whose rank makes a rank of this layout (the MindData ones belong to minddata.py).
RANK_PATTERNS = ("aicore_intermediate_*_type.csv", "aicore_intermediate_*_detail.csv",
                 "step_trace_raw_*_detail_time.csv", "framework_raw_*.csv")
DETECT_PATTERNS = RANK_PATTERNS + ("ascend_timeline_display_*.json",)
SINK_PATTERNS = ("device_queue_profiling_*.txt", "minddata_aicpu_*.txt")
FEED_PATTERNS = ("dataset_iterator_profiling_*.txt",)

# Header aliases, {canonical: accepted headers, newest first}. Times are ms.
TYPE_COLUMNS = {
    "type": ("op_type", "kernel_type"),
    "total_ms": ("execution_time", "total_time"),
    "count": ("execution_frequency",),
    "percent": ("percent",),
}
DETAIL_COLUMNS = {
    "name": ("full_op_name", "full_kernel_name", "full_op_time", "full_kernel_time"),
    "avg_ms": ("execution_time", "task_duration"),
    "count": ("execution_frequency",),
}
FRAMEWORK_COLUMNS = {
    "name": ("full_op_name", "full_kernel_name"),
    "op_type": ("op_type", "kernel_type"),
    "op_info": ("op_info",),
}
STEP_COLUMNS = {
    "step": ("step_num",),
    "start": ("start_point",),
    "end": ("end_point",),
    "total": ("total",),
    "interval": ("iteration_interval",),
    "fwd_bwd": ("fp_and_bp", "fp"),
    "tail": ("tail",),
    "bp": ("bp_point",),
    "fp": ("fp_point",),
}
HCCL_COLUMNS = {"step": ("step_num",), "transit_ms": ("communication_cost",), "wait_ms": ("wait_cost",),
                "links": ("link_info",), "ops": ("communication_operator_cost",)}
HCCL_TYPES = {"step": pa.string(), "transit_ms": pa.float64(), "wait_ms": pa.float64(), "links": pa.string(),
              "ops": pa.string()}
# link_info (of a step, and of each op in communication_operator_cost): {"src-dst": {"SDMA" | "RDMA": [time ms,
# size KB, bandwidth KB/s(, RDMA: wait ms)]}}, KB = bytes / 1e3 (hccl_parser's _calculate_sdma_link_info and
# _calculate_adma_link_info). A step's lists are its ops' lists summed, bandwidths too: the bandwidth is taken
# as size / time, never from the field. The ranks are HCCL's task ranks (in-card copies, 0xffffffff, written
# as the card's own: src == dst, read as LOCAL); SDMA is the on-server link (HCCS or PCIE: the file does not say).
HCCL_LINK_TYPES = ("SDMA", "RDMA")
HCCL_KB_PER_MB = 1e3
# The row of a step whose file has no per-op column: all of the step's communication, kind unknown.
HCCL_STEP_ROW = "all communication ops of the step"
# Cluster-analyse columns -> steps columns. communication_alone_time is communication not overlapped by
# computation (MindInsight's "communication alone"); receive_alone_time is pipeline stages' receive wait.
CLUSTER_COLUMNS = {
    "computing_ms": ("computation",),
    "comm_exposed_ms": ("communication_alone_time",),
    "comm_receive_ms": ("receive_alone_time",),
    "comm_collective_ms": ("collective_communication_time",),
}
TYPE_TYPES = {"type": pa.string(), "total_ms": pa.float64(), "count": pa.float64(), "percent": pa.float64()}
DETAIL_TYPES = {"name": pa.string(), "avg_ms": pa.float64(), "count": pa.float64()}
# op_type and op_info repeat over the ops of repeated layers: read as categories, each distinct
# op_info is parsed once (1M framework rows, 105 distinct op_info).
FRAMEWORK_TYPES = {"name": pa.string(), "op_type": pa.dictionary(pa.int32(), pa.string()),
                   "op_info": pa.dictionary(pa.int32(), pa.string())}

# The last step-trace row is the average over steps, marked by one of these step numbers.
AVERAGE_STEP_MARKS = ("-", "0")
# 1.x writes percent 0-100, 2.0-2.2 a 0-1 fraction: fractions of one run cannot sum past 1
# (1.5 leaves room for rounding in files that list every type).
PERCENT_SUM_THRESHOLD = 1.5
# Communication columns: `stream_{sid}_{idx}_{Op}` / old `stream_10_parallel_{i}` / GPU
# `stream_ops_*`, each with a `_start_point` and `_end_point` column.
COMM_PREFIX = "stream_"
START_SUFFIX = "_start_point"
END_SUFFIX = "_end_point"

# Op types whose input dtype is the compute dtype, and the BatchNorm family (kept in fp32 by O2).
COMPUTE_TYPES = {"Conv2D", "MatMul", "BatchMatMul", "Conv2DBackpropInput", "Conv2DBackpropFilter"}
BATCHNORM_PREFIXES = ("BatchNorm", "BNTraining", "BNInfer")
# (compute dtypes seen, batchnorm dtypes seen or None when the net has no BatchNorm) ->
# (compute_dtype, amp_level), MindSpore's AMP levels: O0 all fp32, O2 fp16 but BatchNorm fp32, O3 all fp16.
AMP_BY_DTYPES = {
    (frozenset({"float32"}), frozenset({"float32"})): ("float32", "O0"),
    (frozenset({"float32"}), None): ("float32", "O0"),
    (frozenset({"float16"}), frozenset({"float32"})): ("mixed", "O2"),
    (frozenset({"float16", "float32"}), frozenset({"float32"})): ("mixed", "O2"),
    (frozenset({"float16"}), frozenset({"float16"})): ("float16", "O3"),
    (frozenset({"float16"}), None): ("float16", None),
    (frozenset({"float16", "float32"}), None): ("mixed", None),
}
# profiler_info context_mode: MindSpore's GRAPH_MODE = 0, PYNATIVE_MODE = 1.
CONTEXT_MODES = {0: "graph", 1: "pynative", "0": "graph", "1": "pynative",
                 "graph": "graph", "pynative": "pynative", "GRAPH_MODE": "graph", "PYNATIVE_MODE": "pynative"}


def detect(folder: Path) -> bool:
    return has_match(folder, DETECT_PATTERNS)


def read(folder: Path) -> dict[int, Parts]:
    notes: list[str] = []
    ranks = ranks_in(folder, RANK_PATTERNS, notes)
    if not ranks and notes:
        raise FileFormatError(notes[0], folder)
    if not ranks:
        return {}  # only a timeline: nothing in the model comes from it
    data_mode, stages = _data_mode(folder), stages_from_cluster_file(folder, ranks)
    return with_folder_notes({rank: _read_rank(folder, rank, data_mode, stages) for rank in ranks}, notes)


def read_steps(folder: Path) -> dict[int, Parts]:
    """Only the steps, from the step trace files alone: for questions across many ranks."""
    result = {}
    for path in sorted(folder.glob(STEP_FILE.format("*"))):
        rank = rank_of(path.name)
        if rank is None:
            continue
        parts = Parts(meta={"device": "Ascend", "layout": "legacy"})
        steps = guarded(parts, path, lambda p: _read_steps(p, parts.warnings))
        if steps is not None:
            steps = _with_cluster_times(steps, folder, rank, parts)
            parts.tables["steps"] = steps
        result[rank] = parts
    return result


def _data_mode(folder: Path) -> str | None:
    if has_match(folder, SINK_PATTERNS):
        return "sink"
    if has_match(folder, FEED_PATTERNS):
        return "feed"
    return None


def _read_rank(folder: Path, rank: int, data_mode: str | None, stages: list[list[int]] | None) -> Parts:
    parts = Parts(meta={"device": "Ascend", "layout": "legacy", "data_mode": data_mode, "framework": "mindspore",
                        "pipeline_stages": stages})

    def load(pattern, reader):
        return guarded(parts, folder / pattern.format(rank), reader)

    op_types = load(TYPE_FILE, lambda p: _read_types(p, parts.warnings))
    details = load(DETAIL_FILE, lambda p: read_csv(p, DETAIL_COLUMNS, ("name", "avg_ms"), DETAIL_TYPES,
                                                   parts.warnings))
    framework = load(FRAMEWORK_FILE, lambda p: _read_framework(p, parts.warnings))
    steps = load(STEP_FILE, lambda p: _read_steps(p, parts.warnings))
    spans = guarded(Parts(), folder / STEP_FILE.format(rank), _comm_spans) if steps is not None else None
    hccl = load(HCCL_FILE, lambda p: _read_hccl(p, spans or {}, parts.warnings))
    comm_ops, comm_links = hccl if hccl is not None else (_comm_ops_of_spans(spans or {}), None)
    info = load(PROFILER_INFO_FILE, lambda p: read_profiler_info(p, parts.warnings))
    if op_types is None and details is None and framework is None and steps is None and comm_ops is None:
        names = ", ".join(p.format(rank) for p in (TYPE_FILE, DETAIL_FILE, FRAMEWORK_FILE, STEP_FILE, HCCL_FILE))
        raise FileFormatError(f"has none of {names} readable for rank {rank} ("
                              + "; ".join(parts.warnings) + ")", folder)
    if op_types is not None:
        parts.tables["op_types"] = op_types
    if details is not None:
        parts.tables["ops"] = _ops(details, framework)
    if framework is not None:
        parts.meta.update(_precision(framework))
    if comm_ops is not None:
        parts.tables["comm_ops"] = comm_ops
    if comm_links is not None and len(comm_links):
        parts.tables["comm_links"] = comm_links
    if steps is not None:
        parts.tables["steps"] = _with_cluster_times(steps, folder, rank, parts)
        parts.meta["step_source"] = "step_trace"
    if info:
        parts.meta.update(info)
    return parts


def _read_types(path: Path, warnings: list[str]) -> pd.DataFrame:
    import pandas as pd
    frame = read_csv(path, TYPE_COLUMNS, ("type", "total_ms"), TYPE_TYPES, warnings)
    frame = frame[frame["type"].notna()].copy()
    # The file's percent divides by MindSpore's total AI Core time (model.SCHEMA, op_types); kept as
    # file_share, while share (of the listed types' summed time) is model.table's.
    percent = frame["percent"] if "percent" in frame else pd.Series(np.nan, index=frame.index)
    frame["file_share"] = percent / 100.0 if percent.sum() > PERCENT_SUM_THRESHOLD else percent
    if "count" not in frame:
        frame["count"] = 1
    return frame.drop(columns="percent", errors="ignore")


def _read_framework(path: Path, warnings: list[str]) -> pd.DataFrame:
    import pandas as pd
    frame = read_csv(path, FRAMEWORK_COLUMNS, ("name", "op_info"), FRAMEWORK_TYPES, warnings)
    frame = frame[frame["name"].notna()]
    op_info = frame["op_info"].astype("category")
    parsed = [_inputs(info) for info in op_info.cat.categories] + [(None, None)]  # code -1: no op_info
    codes = op_info.cat.codes.to_numpy()
    shapes = np.array([shapes for shapes, _ in parsed], dtype=object)[codes]
    dtypes = np.array([dtypes for _, dtypes in parsed], dtype=object)[codes]
    op_type = frame["op_type"] if "op_type" in frame else op_types_of(frame["name"].tolist())
    return pd.DataFrame({"name": frame["name"].to_numpy(), "op_type": np.asarray(op_type, dtype=object),
                         "input_shapes": shapes, "input_dtypes": dtypes})


def _inputs(op_info: str | None) -> tuple[str | None, str | None]:
    """op_info JSON -> ("32,3,224,224;64,3,7,7", "float16;float16") over input_0, input_1, ..."""
    try:
        info = boundedjson.loads(op_info) if op_info else {}
    except boundedjson.JSONError:
        return None, None
    if not isinstance(info, dict):
        return None, None
    keys = sorted((k for k, v in info.items() if re.fullmatch(r"input_\d+", k) and isinstance(v, dict)),
                  key=lambda k: int(k[len("input_"):]))
    if not keys:
        return None, None
    shapes = ";".join(str(info[k].get("shape", "")) for k in keys)
    dtypes = ";".join(_dtype(info[k].get("data_type", "")) for k in keys)
    return shapes, dtypes


def _dtype(data_type: str) -> str:
    """`NUMBER_TYPE_FLOAT16` -> `float16`; `UNKNOWN` stays as written, lower-cased."""
    return data_type.removeprefix("NUMBER_TYPE_").lower()


def _precision(framework: pd.DataFrame) -> dict:
    """compute_dtype / amp_level from the first-input dtypes of compute and BatchNorm ops."""
    first = framework["input_dtypes"].fillna("").str.replace(r";.*$", "", regex=True)  # vectorized split()[0]
    known = first.isin(["float16", "float32"])
    types = framework["op_type"].fillna("")
    compute = frozenset(first[known & types.isin(COMPUTE_TYPES)])
    batchnorm = frozenset(first[known & types.str.startswith(BATCHNORM_PREFIXES)])
    if not compute:
        return {}
    compute_dtype, amp_level = AMP_BY_DTYPES.get((compute, batchnorm or None), (None, None))
    return {"compute_dtype": compute_dtype, "amp_level": amp_level}


def _ops(details: pd.DataFrame, framework: pd.DataFrame | None) -> pd.DataFrame:
    ops = details[details["name"].notna()].copy()
    ops["count"] = ops["count"].fillna(1) if "count" in ops else 1
    ops["total_ms"] = ops["avg_ms"] * ops["count"]
    names = ops["name"].tolist()  # plain str: iterating an Arrow-backed column costs 3 us per item
    ops["type"] = op_types_of(names)
    ops["pass"] = op_passes(ops["name"])
    if framework is not None:
        # The first framework row of each op name, through one dict of plain str: pandas'
        # drop_duplicates + merge hashed the million Arrow strings twice (3 s).
        framework_names = framework["name"].tolist()
        first_row = dict(zip(reversed(framework_names), range(len(framework_names) - 1, -1, -1)))
        rows = np.fromiter((first_row.get(name, -1) for name in names), dtype=np.int64, count=len(names))
        matched = rows >= 0
        for column in ("input_shapes", "input_dtypes"):
            values = np.full(len(names), None, dtype=object)
            values[matched] = framework[column].to_numpy(dtype=object)[rows[matched]]
            ops[column] = values
    return ops


def _step_rows(path: Path, warnings: list[str]) -> tuple[pd.DataFrame, dict[str, str | None], pd.Series]:
    """(the step rows as text, STEP_COLUMNS -> the file's header, step numbers): the average row at the end
    and step 0 dropped, a row whose step is no step (formats/integers.py) left out with a warning."""
    import pandas as pd
    text = read_text(path)
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, skip_blank_lines=True, on_bad_lines="skip")
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise FileFormatError(f"cannot be parsed ({str(exc).splitlines()[0][:200]})", path) from None
    frame.columns = [str(c).strip() for c in frame.columns]
    by_key = {c.casefold(): c for c in frame.columns}
    found = {canonical: next((by_key[n] for n in names if n in by_key), None)
             for canonical, names in STEP_COLUMNS.items()}
    missing = [STEP_COLUMNS[c][0] for c in ("step", "total", "fwd_bwd") if found[c] is None]
    if missing:
        raise FileFormatError(f"lacks column(s) {', '.join(missing)} (header: {', '.join(frame.columns)[:200]})",
                              path)
    marks = frame[found["step"]].fillna("").str.strip()
    if len(frame) and marks.iloc[-1] in AVERAGE_STEP_MARKS:
        frame, marks = frame.iloc[:-1], marks.iloc[:-1]
    numbers, known = checked(marks, STEP, path.name, found["step"], warnings, rows=frame.index + 2)
    step = pd.Series(numbers, index=frame.index)
    frame = frame[known & (numbers > 0)]
    if not len(frame):
        raise FileFormatError("has no step rows (only a header or the average row)", path)
    return frame, found, step


def step_bounds_us(path: Path) -> dict[int, list[float]]:
    """Per step, [start_point, end_point] in µs: the device clock output_timeline_data_{r}.txt's op times are
    on (the timeline of a legacy run without its JSON timeline, perfkit/io/timeline.py)."""
    import pandas as pd
    frame, found, step = _step_rows(path, [])  # the load has said what the rows lack
    if found["start"] is None or found["end"] is None:
        return {}
    start = pd.to_numeric(frame[found["start"]].str.strip(), errors="coerce") / TICKS_PER_US
    end = pd.to_numeric(frame[found["end"]].str.strip(), errors="coerce") / TICKS_PER_US
    known = start.notna() & end.notna() & (end >= start)
    return {int(number): [float(first), float(last)]
            for number, first, last in zip(step[frame.index][known], start[known], end[known])}


def _read_steps(path: Path, warnings: list[str]) -> pd.DataFrame:
    """One row per step in ms; the average row at the end is dropped."""
    import pandas as pd
    frame, found, step = _step_rows(path, warnings)

    def ticks(column: str | None) -> pd.Series:  # step trace times are 10 ns ticks
        if column is None:
            return pd.Series(np.nan, index=frame.index)
        return pd.to_numeric(frame[column].str.strip(), errors="coerce")

    def ms(column: str | None) -> pd.Series:
        return ticks(column) / TICKS_PER_MS

    steps = pd.DataFrame({"step": step[frame.index].astype("int64"), "interval_ms": ms(found["interval"]),
                          "fwd_bwd_ms": ms(found["fwd_bwd"]), "tail_ms": ms(found["tail"]),
                          "total_ms": ms(found["total"])})
    starts = [c for c in frame.columns if c.startswith(COMM_PREFIX) and c.endswith(START_SUFFIX)
              and c[:-len(START_SUFFIX)] + END_SUFFIX in frame.columns]
    if starts:
        intervals = [(ticks(c), ticks(c[:-len(START_SUFFIX)] + END_SUFFIX)) for c in starts]
        steps["comm_ms"] = _covered_ticks(intervals, ticks(found["start"]), ticks(found["end"])) / TICKS_PER_MS
        if found["bp"] is not None:  # where the communication lies: the tail after backward (the ledger's optimizer)
            steps["comm_tail_ms"] = _covered_ticks(intervals, ticks(found["bp"]), ticks(found["end"])) / TICKS_PER_MS
        if found["bp"] is not None and found["fp"] is not None:
            # where no communication lies inside forward+backward, none of it overlaps compute: all of it is exposed
            inside = _covered_ticks(intervals, ticks(found["fp"]), ticks(found["bp"]))
            steps["comm_exposed_ms"] = steps["comm_ms"].where(inside == 0)
    # MindSpore's average row is the mean of steps 2..n: the first step is its warm-up (steady.steady_steps)
    steps["warmup"] = steps["step"] == steps["step"].min()
    incomplete = steps[["fwd_bwd_ms", "total_ms"]].isna().any(axis=1)
    if incomplete.any():
        warnings.append(f"{path.name}: skipped {int(incomplete.sum())} step row(s) with missing or non-numeric "
                        f"times (truncated or malformed)")
        steps = steps[~incomplete]
    if not len(steps):
        raise FileFormatError("has no complete step rows", path)
    return steps.reset_index(drop=True)


def _comm_spans(path: Path) -> dict[tuple[int, str], tuple[float, float]]:
    """{(step, communication op column): (its start, its ms) in that step} of a step trace, ms on the device's
    10 ns tick counter."""
    import pandas as pd
    frame, _, step = _step_rows(path, [])  # the same file as _read_steps, which says what its rows lack
    spans = {}
    for start in (c for c in frame.columns if c.startswith(COMM_PREFIX) and c.endswith(START_SUFFIX)):
        name = start[:-len(START_SUFFIX)]
        if name + END_SUFFIX not in frame.columns:
            continue
        begin = pd.to_numeric(frame[start].str.strip(), errors="coerce")
        end = pd.to_numeric(frame[name + END_SUFFIX].str.strip(), errors="coerce")
        for number, first, ms in zip(step[frame.index], begin / TICKS_PER_MS, (end - begin) / TICKS_PER_MS):
            if ms >= 0:
                spans[(int(number), name)] = (float(first), float(ms))
    return spans


def _comm_ops_of_spans(spans: dict[tuple[int, str], tuple[float, float]]) -> pd.DataFrame | None:
    """comm_ops of a rank without hccl_raw: each communication op of the step trace with its start and elapse,
    transfer and wait unknown (perfkit/analysis/comm_split.py estimates them where ranks' clocks agree)."""
    import pandas as pd
    if not spans:
        return None
    rows = [(step, name, comm_kind(name.rpartition("_")[2]), ms, start)
            for (step, name), (start, ms) in spans.items()]
    frame = pd.DataFrame(rows, columns=["step", "name", "kind", "elapse_ms", "start_ms"])
    return frame[frame["kind"].notna()].assign(transit_ms=np.nan, wait_ms=np.nan, synchronization_ms=np.nan)


def _read_hccl(path: Path, spans: dict[tuple[int, str], tuple[float, float]], warnings: list[str]
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(comm_ops, comm_links) from hccl_raw_{r}.csv. comm_ops: one row per op and step with its transfer
    (communication_cost) and wait (wait_cost) ms, its elapse the op's span in the step trace (`spans`, NA where
    the step trace does not place it); a file without the per-op column gives one row per step. comm_links: each
    op's link_info (a step's where its ops' cells are not JSON), HCCL_LINK_TYPES' lists as link rows. The
    average row is left out, a step written twice is read once; a value that is no non-negative number, or a
    cell or entry that is not what hccl_parser writes, is unknown or skipped, counted in one warning per problem."""
    import pandas as pd
    frame = read_csv(path, HCCL_COLUMNS, ("step", "transit_ms", "wait_ms"), HCCL_TYPES, warnings)
    average = frame["step"].str.strip().isin(AVERAGE_STEP_MARKS)
    frame = frame[~average]
    numbers, known = checked(frame["step"], STEP, path.name, HCCL_COLUMNS["step"][0], warnings,
                             rows=frame.index + 2)
    steps = pd.Series(numbers, index=frame.index)
    frame, steps = frame[known & (numbers > 0)], steps[known & (numbers > 0)]
    if not len(frame):
        raise FileFormatError("has no step rows (only a header or the average row)", path)
    problems: Counter = Counter()
    repeated = steps.duplicated()
    if repeated.any():
        problems["step rows written twice, the first one read"] += int(repeated.sum())
        frame, steps = frame[~repeated], steps[~repeated]

    def measured(value, what: str) -> float:
        if not (is_real_number(value) and value >= 0):
            problems[f"{what} not a non-negative number, treated as unknown"] += 1
            return np.nan
        return float(value)

    rows, links = [], []
    cells = (frame[column] if column in frame else [None] * len(frame) for column in ("ops", "links"))
    for step, transit, wait, cell, link_cell in zip(steps, frame["transit_ms"], frame["wait_ms"],
                                                    *cells):
        ops = _json_cell(cell) if cell is not None else None
        if cell is not None and not isinstance(ops, dict):
            problems["communication_operator_cost cells that are not a JSON object, step totals used"] += 1
        if not isinstance(ops, dict):
            rows.append((step, HCCL_STEP_ROW, None, np.nan, measured(transit, "communication_cost"),
                         measured(wait, "wait_cost")))
            if link_cell is not None:
                links += _hccl_links(step, HCCL_STEP_ROW, _json_cell(link_cell), measured, problems)
            continue
        for name, value in ops.items():
            cost = value if isinstance(value, list) and len(value) >= 3 else [None] * 3
            rows.append((step, name, comm_kind(name.rpartition("_")[2]), spans.get((step, name), (0, np.nan))[1],
                         measured(cost[1], "op cost"), measured(cost[2], "op wait")))
            if len(cost) >= 4:
                links += _hccl_links(step, name, cost[3], measured, problems)
    for what, count in problems.items():
        warnings.append(f"{path.name}: {what} ({count})")
    ops = pd.DataFrame(rows, columns=["step", "name", "kind", "elapse_ms", "transit_ms", "wait_ms"]).assign(
        synchronization_ms=np.nan)
    return ops, pd.DataFrame(links, columns=["step", "name", "src", "dst", "link_type", "size_mb", "transit_ms",
                                             "bandwidth_gb_s"])


def _hccl_links(step: int, name: str, info: object, measured, problems: Counter) -> list[tuple]:
    """comm_links rows of one link_info object (HCCL_LINK_TYPES); what is not [time ms, size KB, ...] under a
    "src-dst" key is counted in `problems` and skipped."""
    if not isinstance(info, dict):
        problems["link_info cells that are not a JSON object, skipped"] += 1
        return []
    rows = []
    for pair, by_type in info.items():
        src, dash, dst = str(pair).partition("-")
        src, dst = whole(src, RANK), whole(dst, RANK)
        if not (dash and src is not None and dst is not None) or not isinstance(by_type, dict):
            problems["link_info entries not written as \"src-dst\": {type: [...]}, skipped"] += 1
            continue
        for link_type, values in by_type.items():
            if link_type not in HCCL_LINK_TYPES or not isinstance(values, list) or len(values) < 2:
                problems["link_info lists not SDMA/RDMA [time ms, size KB, ...], skipped"] += 1
                continue
            transit_ms, size_mb = measured(values[0], "link time"), measured(values[1], "link size") / HCCL_KB_PER_MB
            bandwidth = size_mb / transit_ms if transit_ms > 0 else np.nan  # MB per ms is GB per s
            rows.append((step, name, src, dst, "LOCAL" if src == dst else link_type, size_mb, transit_ms,
                         bandwidth))
    return rows


def _json_cell(text: str):
    try:
        return boundedjson.loads(text)
    except (boundedjson.JSONError, TypeError):
        return None


def _covered_ticks(intervals: list[tuple[pd.Series, pd.Series]], step_start: pd.Series,
                   step_end: pd.Series) -> np.ndarray:
    """Per step, the time inside the step covered by at least one of the (start, end) interval columns.

    Communication ops on parallel streams overlap: their durations added up exceed the step (283.9 ms of
    communication in a 181.0 ms step on a 4-rank run), their union cannot. Missing or reversed intervals
    count as empty; a missing step bound leaves that side unclipped.
    """
    starts = np.column_stack([start.to_numpy(dtype=np.float64) for start, _ in intervals])
    ends = np.column_stack([end.to_numpy(dtype=np.float64) for _, end in intervals])
    lower = step_start.to_numpy(dtype=np.float64)[:, None]
    upper = step_end.to_numpy(dtype=np.float64)[:, None]
    starts = np.where(np.isnan(lower), starts, np.fmax(starts, lower))
    ends = np.where(np.isnan(upper), ends, np.fmin(ends, upper))
    empty = np.isnan(starts) | np.isnan(ends) | (ends <= starts)
    starts, ends = np.where(empty, -np.inf, starts), np.where(empty, -np.inf, ends)
    order = np.argsort(starts, axis=1)
    starts, ends = np.take_along_axis(starts, order, axis=1), np.take_along_axis(ends, order, axis=1)
    # an interval adds only what lies beyond the furthest end of the intervals that started before it
    reach = np.maximum.accumulate(np.hstack([np.full((len(ends), 1), -np.inf), ends[:, :-1]]), axis=1)
    with np.errstate(invalid="ignore"):
        added = ends - np.maximum(starts, reach)
    return np.where(empty | ~(added > 0), 0.0, added).sum(axis=1)


def _read_cluster(path: Path, warnings: list[str]) -> pd.DataFrame:
    """The cluster-analyse file's time columns; none for a data-parallel file (it repeats the step trace's
    split, in ticks)."""
    import pandas as pd
    header = {name.strip().casefold() for name in csv_header(path)}
    if not any(name in header for names in CLUSTER_COLUMNS.values() for name in names):
        return pd.DataFrame()
    return read_csv(path, CLUSTER_COLUMNS, (), {column: pa.float64() for column in CLUSTER_COLUMNS}, warnings)


def _with_cluster_times(steps: pd.DataFrame, folder: Path, rank: int, parts: Parts) -> pd.DataFrame:
    """The steps with MindSpore's per-step computation / communication-alone / receive / collective times from
    the rank's cluster-analyse file, where one is present (model- and pipeline-parallel runs). A value above
    the step's total cannot be a part of that step: it is left out, with a warning naming the file."""
    for path in sorted(folder.glob(CLUSTER_FILE.format(rank))):
        frame = guarded(parts, path, lambda p: _read_cluster(p, parts.warnings))
        if frame is None or not len(frame.columns):
            continue
        if len(frame) != len(steps):
            parts.warnings.append(f"{path.name}: {len(frame)} row(s) for {len(steps)} step(s) in "
                                  f"{STEP_FILE.format(rank)}: not used")
            continue
        steps = steps.sort_values("step").reset_index(drop=True)
        total = steps["total_ms"].to_numpy()
        refused = []
        for column in (c for c in CLUSTER_COLUMNS if c in frame):
            values = frame[column].to_numpy(dtype=np.float64, na_value=np.nan)
            above = values > total
            if above.any():
                refused.append(f"{CLUSTER_COLUMNS[column][0]} {values[above][0]:.1f} ms")
                values = np.where(above, np.nan, values)
            steps[column] = values
        if refused:
            parts.warnings.append(f"{path.name}: above the step's total ({total[0]:.1f} ms in step "
                                  f"{int(steps['step'].iloc[0])}): " + ", ".join(refused) + "; not used")
    return steps


def read_profiler_info(path: Path, warnings: list[str]) -> dict:
    """ms_version and mode from `profiler_info_{r}.json` (legacy Ascend and GPU write the same keys)."""
    info = read_json_object(path, warnings)
    meta = {}
    if info.get("ms_version"):
        meta["ms_version"] = str(info["ms_version"])
    mode = CONTEXT_MODES.get(info.get("context_mode"))
    if mode:
        meta["mode"] = mode
    return meta


# ---------------------------------------------------------------- the timeline (perfkit/io/timeline.py)

# MindInsight's JSON timelines, Ascend's and GPU's (the GPU layout's folders hold the second, gpu.py).
TIMELINE_DISPLAYS = ("ascend_timeline_display_*.json", "gpu_timeline_display_*.json")


def traces(folder: Path) -> list[TraceFile]:
    """Each rank's JSON timeline (TIMELINE_DISPLAYS, the first found), else its op times as text (trace_text); the
    steps of output_timeline_data_{r}.txt from the step trace, whose points are on the same device clock."""
    from ..trace_text import LEGACY_ASCEND, text_traces  # the timeline's reader: loading a Run never needs it

    found = text_traces(folder)
    displays: dict[int, Path] = {}
    for pattern in TIMELINE_DISPLAYS:
        for path in sorted(folder.glob(pattern)):
            displays.setdefault(rank_of(path.name) or 0, path)
    found.update(displays)
    return [TraceFile(rank, path, folder, folder / STEP_FILE.format(rank), step_bounds_us)
            if path.name.startswith(LEGACY_ASCEND.prefix) else TraceFile(rank, path, folder)
            for rank, path in sorted(found.items())]


READER = Reader(name="legacy", provides=frozenset({"steps", "op_types", "ops", "comm_ops", "comm_links"}),
                detect=detect, read=read, read_steps=read_steps,
                looks_for="aicore_intermediate_*, step_trace_raw_*", traces=traces)

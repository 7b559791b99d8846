"""The database export of MindSpore (`Profiler(export_type=[ExportType.Db])`) and torch_npu: SQLite files in
`ASCEND_PROFILER_OUTPUT/` instead of, or beside, the CSV/JSON tables that `ascend_ms` reads.

Files (docs/formats.md §3; the torch_npu guide "ascend_pytorch_profiler_{Rank_ID}.db数据" / "analysis.db数据"):
  ascend_mindspore_profiler_{r}.db / ascend_pytorch_profiler_{r}.db (no `_{r}` on a single card):
    STEP_TIME(id, startNs, endNs)              one row per profiled step, host-side bounds, ns since the epoch
    TASK(startNs, endNs, globalTaskId, …)      every device task, ns; compute, communication and runtime tasks
    COMPUTE_TASK_INFO(globalTaskId, name, opType, inputShapes, inputDataTypes, …)
                                               the compute kernels among the tasks; strings are STRING_IDS ids
    STRING_IDS(id, value)                      every string of the file
    COMMUNICATION_OP(opName, startNs, endNs, groupName, opType, waitNs, …)   one row per collective/p2p op, ns
    MEMORY_RECORD(component, timestamp, totalAllocated, totalReserved, totalActive, streamPtr, deviceId)
                                               the framework allocator over time: ns, bytes; component an id
    OP_MEMORY(name, size, allocationTime, releaseTime, duration, streamPtr, deviceId, …)   bytes, ns
    NPU_MODULE_MEM(moduleId, timestampNs, totalReserved, deviceId)   bytes per CANN module (ENUM_MODULE names)
    OVERLAP_ANALYSIS(startNs, endNs, type)     device busy intervals (not read: analysis.db has their sums)
    META_DATA(name, value)                     SCHEMA_VERSION, ENV_VARIABLES (a JSON object), user metadata
    NPU_INFO(id, name)                         the chip, e.g. Ascend910B
    RANK_DEVICE_MAP(rankId, deviceId)          -1 where unknown
  analysis.db (multi-card runs with communication):
    StepTraceTime(step, computing, communication_not_overlapped, overlapped, communication, free, stage,
                  bubble, communication_not_overlapped_and_exclude_receive, preparing)
                  = step_trace_time.csv. The guide says ms; the values are µs (the fixture's computing 8903.431
                  equals its OVERLAP_ANALYSIS computing intervals, 8.903431 ms), as in the CSV.
    CommAnalyzerTime(hccl_op_name, group_name, start_timestamp µs, elapse/transit/wait/synchronization/
                     idle_time ms, step "step50", type collective/p2p)       = communication.json
    CommAnalyzerBandwidth(hccl_op_name, transport_type, transit_size MB, transit_time ms, bandwidth GB/s, …)
    CommAnalyzerMatrix(src_rank, dst_rank, transport_type, transit_size MB, transit_time ms, bandwidth GB/s,
                       step, op_name, …)                                    = communication_matrix.json

Read here: steps (STEP_TIME's bounds for the total, StepTraceTime for its split and the exposed
communication, MindSpore's Default/ and Gradients/ kernel scopes for the forward+backward span of each
STEP_TIME window, as the CSV reader does per Step ID), op types and ops (TASK joined with COMPUTE_TASK_INFO,
aggregated inside SQLite: a 2-million kernel run never crosses into Python row by row; COMMUNICATION_OP's ops join
the ops table as the communication rows of kernel_details.csv do), memory (MEMORY_RECORD, NPU_MODULE_MEM,
OP_MEMORY) and communication (analysis.db's CommAnalyzer*, else MindSpore's communication_analyzer.db with the same
tables, else COMMUNICATION_OP's op times without their transfer/wait split) as the memory and communication readers
give them from the CSV/JSON twins, and meta. Level0 writes `N/A` for every op type: the types are then taken from
the kernel names by the text export's rule (ascend_ms.type_from_kernel_name). The files and `Database` are in
db_files.py; the timeline of a rank with no trace_view.json (PYTORCH_API, CANN_API, TASK, COMMUNICATION_OP) in
db_timeline.py.

Every file is opened read-only and immutable (`mode=ro&immutable=1`): SQLite then takes no lock and
writes nothing, no journal, WAL or shared-memory file beside it. The price: a `-wal` file left by a
profiler that did not close the database is not read; that is said in a warning. Where a folder holds the
text export too, `ascend_ms` reads it and this reader stands aside (meta `export` says which was read).
"""

from __future__ import annotations

import os
import re
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.opnames import op_passes, trim_type_separator
from ...core.units import BYTES_PER_MB, NS_PER_MS, US_PER_MS
from ..discovery import has_match, walk
from . import ascend_ms, communication, db_timeline, memory
from .base import Parts, Reader
from .db_files import (
    ANALYSIS_DB,
    COMM_ANALYZER_DB,
    OUTPUT_DIR,
    PROFILER_DBS,
    SQLITE_ERRORS,
    Database,
    database_files,
    database_rank,
    open_database,
    quoted,
    unreadable,
)
from .files import guarded, read_csv_table
from .integers import RANK, checked

if TYPE_CHECKING:
    import pandas as pd

LAYOUT = "ascend_db"


def detect(folder: Path) -> bool:
    """A rank folder whose ASCEND_PROFILER_OUTPUT/ holds the database export and not the text one."""
    output = os.path.join(folder, OUTPUT_DIR)
    return has_match(output, PROFILER_DBS + (ANALYSIS_DB, COMM_ANALYZER_DB)) and not ascend_ms.detect(folder)


def _opened(path: Path | None, parts: Parts) -> Database | None:
    if path is None:
        return None
    try:
        database = Database(path, parts.warnings)
    except FileFormatError as exc:
        parts.warnings.append(f"skipped {path.name}: {exc.message}")
        return None
    parts.sources.append(str(path))
    return database

def _framework(folder: Path, profiler_path: Path | None) -> str:
    """torch_npu writes ascend_pytorch_profiler_{r}.db in `*_ascend_pt` folders; MindSpore its own name."""
    torch = folder.name.endswith("_ascend_pt") or (profiler_path is not None
                                                    and profiler_path.name.startswith("ascend_pytorch_profiler"))
    return "torch_npu" if torch else "mindspore"


# ---------------------------------------------------------------- reading

def read(folder: Path) -> dict[int, Parts]:
    parts = Parts(meta={"device": "Ascend", "layout": LAYOUT, "export": "db"})
    profiler_path, analysis_path = database_files(folder, parts)
    parts.meta["framework"] = _framework(folder, profiler_path)
    profiler, analysis = _opened(profiler_path, parts), _opened(analysis_path, parts)
    scoped, kernels = False, None
    try:
        rank = database_rank(folder, profiler_path, profiler, parts)
        if profiler is not None:
            parts.meta.update(_valued(parts, profiler, "META_DATA/NPU_INFO", lambda: _meta(profiler)) or {})
            kernels = _valued(parts, profiler, "TASK/COMPUTE_TASK_INFO", lambda: _kernels(profiler))
            if kernels is not None:
                parts.tables["ops"], parts.tables["op_types"] = kernels
                parts.meta.update(_precision(kernels[0], "ms_version" in parts.meta))
                scoped = {"forward", "backward"} <= set(kernels[0]["pass"])
            else:
                parts.warnings.append(f"{profiler.path.name}: no kernels (TASK or COMPUTE_TASK_INFO absent, "
                                      "unreadable, or no task of TASK names a kernel): op tables unknown")
        parts.tables["steps"] = _valued(parts, profiler or analysis, "STEP_TIME/StepTraceTime",
                                        lambda: _steps(profiler, analysis, parts, scoped))
        if profiler is not None:
            parts.tables.update(_valued(parts, profiler, "MEMORY_RECORD/OP_MEMORY/NPU_MODULE_MEM",
                                        lambda: _memory(profiler)) or {})
        parts.tables.update(_communication_tables(parts, profiler, analysis, folder / OUTPUT_DIR / COMM_ANALYZER_DB))
        if parts.tables["steps"] is not None:
            parts.meta["step_source"] = "step_trace_time" if analysis is not None else "step_time"
        dataset = guarded(parts, folder / OUTPUT_DIR / ascend_ms.DATASET, lambda p: read_csv_table(
            p, ascend_ms.DATASET_COLUMNS, ("stage",), ascend_ms.DATASET_TYPES, parts.warnings))
        sink = ascend_ms.data_mode(dataset, None) if dataset is not None else None
        sink = sink or ("sink" if kernels is not None and kernels[0]["type"].isin(ascend_ms.SINK_OP_TYPES).any()
                        else None)
        if sink:  # dataset.csv's device-side stages or GetNext kernels, as the text export tells it
            parts.meta["data_mode"] = sink
    finally:
        _close(profiler, analysis)
    if not any(frame is not None and len(frame) for frame in parts.tables.values()):
        raise FileFormatError("holds no readable profiler database (" + "; ".join(parts.warnings) + ")",
                              folder / OUTPUT_DIR)
    parts.tables = {name: frame for name, frame in parts.tables.items() if frame is not None}
    return {rank: parts}


def read_steps(folder: Path) -> dict[int, Parts]:
    """Only the steps (STEP_TIME and StepTraceTime: a few rows), for questions across many ranks."""
    parts = Parts(meta={"device": "Ascend", "layout": LAYOUT, "export": "db"})
    profiler_path, analysis_path = database_files(folder, parts)
    profiler, analysis = _opened(profiler_path, parts), _opened(analysis_path, parts)
    try:
        rank = database_rank(folder, profiler_path, profiler, parts)
        steps = _valued(parts, profiler or analysis, "STEP_TIME/StepTraceTime", lambda: _steps(profiler, analysis, parts))
    finally:
        _close(profiler, analysis)
    if steps is not None:
        parts.tables["steps"] = steps
    return {rank: parts}


def _close(*databases: Database | None) -> None:
    for database in databases:
        if database is not None:
            database.close()


# SQLite does not enforce column types: a byte rotted inside a page can leave text or a real where the
# schema says INTEGER, and arithmetic on it fails in pandas. That part of the file is skipped, named.
VALUE_ERRORS = (TypeError, ValueError, ArithmeticError)


def _valued(parts: Parts, database: Database | None, tables: str, compute):
    if database is None:
        return compute()
    try:
        return compute()
    except VALUE_ERRORS as exc:
        parts.warnings.append(f"{database.path.name}: skipped {tables}: values of an unexpected type "
                              f"({str(exc)[:120]}; the file is damaged?)")
        return None


def _precision(ops: pd.DataFrame, mindspore: bool) -> dict:
    """compute_dtype (and AMP level) as the CSV reader finds them, from each op's type and input dtypes."""
    if "input_dtypes" not in ops:
        return {}
    known = ops[["type", "input_dtypes"]].dropna().drop_duplicates()
    return ascend_ms.precision_of(list(zip(known["type"], known["input_dtypes"].str.upper())), mindspore)


def _meta(database: Database) -> dict:
    meta: dict = {}
    rows = database.frame("META_DATA")
    if rows is not None:
        values = dict(zip(rows["name"], rows["value"]))
        try:
            env = boundedjson.loads(values.get("ENV_VARIABLES") or "{}")
        except (TypeError, boundedjson.JSONError):
            env = None
            database.warnings.append(f"{database.path.name}: META_DATA ENV_VARIABLES is not JSON; left out")
        if isinstance(env, dict):
            meta["env"] = {str(k): str(v) for k, v in env.items() if v not in (None, "")}
    chips = database.frame("NPU_INFO")
    if chips is not None and len(chips) and "name" in chips:
        meta["chip"] = str(chips["name"].iloc[0])
    return meta


def _kernels(database: Database) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """(ops, op_types) from TASK ⋈ COMPUTE_TASK_INFO, grouped inside SQLite; COMMUNICATION_OP adds its ops and
    their types."""
    import pandas as pd
    task, info = database.columns("TASK"), database.columns("COMPUTE_TASK_INFO")
    if not task or not info:
        return None
    optional = [c for c in ("input_shapes", "input_dtypes") if c in info]
    # One min() aggregate: SQLite takes the bare columns (type, shapes, dtypes) from the name's first kernel.
    select = ", ".join([f'c.{quoted(info["name"])}', f'min(t.{quoted(task["start_ns"])})', "count(*)",
                        f'sum(t.{quoted(task["end_ns"])} - t.{quoted(task["start_ns"])})',
                        f'c.{quoted(info["type"])}'] + [f"c.{quoted(info[c])}" for c in optional])
    sql = (f'SELECT {select} FROM "TASK" t JOIN "COMPUTE_TASK_INFO" c '
           f'ON c.{quoted(info["task"])} = t.{quoted(task["task"])} '
           f'WHERE t.rowid BETWEEN ? AND ? GROUP BY c.{quoted(info["name"])}')
    chunks = _task_chunks(database)
    if chunks is None:
        return None
    if len(chunks) == 1:
        rows = database.query("TASK", sql, chunks[0])
    else:
        rows = _parallel_rows(database, sql, chunks)
    if not rows:  # unreadable, or no task joins a kernel (a TASK whose ids are all NULL)
        return None
    columns = ["name", "first_ns", "count", "total_ns", "type"] + optional
    kernels = pd.DataFrame.from_records(rows, columns=columns).sort_values("first_ns", kind="stable")
    if len(chunks) > 1:  # a name's kernels in several chunks: its sums added, its first kernel's strings kept
        sums = kernels.groupby("name", sort=False)[["count", "total_ns"]].sum()
        kernels = kernels.drop_duplicates("name").drop(columns=["count", "total_ns"]).join(sums, on="name")[columns]
    for column in ["name", "type"] + optional:
        kernels[column] = database.strings(kernels[column])
    for column in optional:
        kernels[column] = kernels[column].str.strip().str.strip('"')  # shapes are written quoted, as in the CSV
    # Level0: the type is in the kernel name, as in the CSV (a database without STRING_IDS has neither)
    if ascend_ms.untyped(kernels["type"].unique()) and kernels["name"].notna().any():
        kernels["type"] = [ascend_ms.type_from_kernel_name(name) if isinstance(name, str) else None
                           for name in kernels["name"]]
        database.warnings.append(f"{database.path.name}: COMPUTE_TASK_INFO: {ascend_ms.LEVEL0_TYPES_NOTE}")
    ops = pd.concat([kernels, _communication_ops(database)], ignore_index=True).sort_values("first_ns", kind="stable")
    # the collectives count among the op types, as in kernel_details.csv of the text export
    types = (ops.groupby("type", sort=False, dropna=True)[["count", "total_ns"]].sum()
             .sort_values("total_ns", ascending=False).reset_index())
    total = types["total_ns"].sum()
    op_types = pd.DataFrame({"type": types["type"], "total_ms": types["total_ns"] / NS_PER_MS,
                             "count": types["count"], "share": types["total_ns"] / total if total > 0 else np.nan})
    ops["total_ms"] = ops["total_ns"] / NS_PER_MS
    ops["avg_ms"] = ops["total_ms"] / ops["count"]
    ops["pass"] = op_passes(ops["name"])
    return ops.drop(columns=["first_ns", "total_ns"]).reset_index(drop=True), op_types


# TASK holds every device task, about three per compute kernel: a 2-million kernel rank has 6 million rows,
# whose join with COMPUTE_TASK_INFO is most of the read. Rowid ranges of this many rows are joined and
# grouped on threads of their own (sqlite3 lets go of the GIL while SQLite works), one connection each.
TASK_ROWS_PER_CHUNK = 1_000_000
MAX_THREADS = 4


def _task_chunks(database: Database) -> list[tuple[int, int]] | None:
    """Rowid ranges of TASK, one per thread."""
    # one min() or max() per statement: SQLite reads it off the rowid tree's end; both in one scan every row
    bounds = [database.query("TASK", f'SELECT {end}(rowid) FROM "TASK"') for end in ("min", "max")]
    if None in bounds:
        return None
    (low,), (high,) = (rows[0] for rows in bounds)
    if low is None:
        return [(0, -1)]
    count = max(1, min(MAX_THREADS, os.cpu_count() or 1, (high - low + 1) // TASK_ROWS_PER_CHUNK))
    edges = np.linspace(low, high + 1, count + 1).astype(np.int64)
    return [(int(a), int(b) - 1) for a, b in zip(edges[:-1], edges[1:])]


def _parallel_rows(database: Database, sql: str, chunks: list[tuple[int, int]]) -> list[tuple] | None:
    from concurrent.futures import ThreadPoolExecutor

    def chunk_rows(bounds: tuple[int, int]) -> list[tuple]:
        with closing(open_database(database.path)) as connection:
            connection.text_factory = database.connection.text_factory
            return connection.execute(sql, bounds).fetchall()

    try:
        with ThreadPoolExecutor(len(chunks)) as pool:
            return [row for rows in pool.map(chunk_rows, chunks) for row in rows]
    except (*SQLITE_ERRORS, FileFormatError) as exc:
        why = exc.message if isinstance(exc, FileFormatError) else unreadable(exc)
        database.warnings.append(f"{database.path.name}: skipped table TASK: {why}")
        return None


def _communication_ops(database: Database) -> pd.DataFrame | None:
    """COMMUNICATION_OP per op name, as kernel_details.csv lists collectives among the kernels."""
    import pandas as pd
    found = database.columns("COMMUNICATION_OP", ("name", "start_ns", "end_ns", "type"))
    if not found:
        return None
    type_column = f', {quoted(found["type"])}' if "type" in found else ", NULL"
    rows = database.query("COMMUNICATION_OP", f'SELECT {quoted(found["name"])}, min({quoted(found["start_ns"])}), '
                          f'count(*), sum({quoted(found["end_ns"])} - {quoted(found["start_ns"])}){type_column} '
                          f'FROM "COMMUNICATION_OP" GROUP BY {quoted(found["name"])}')
    if not rows:
        return None
    ops = pd.DataFrame.from_records(rows, columns=["name", "first_ns", "count", "total_ns", "type"])
    ops["name"] = database.strings(ops["name"])
    ops["type"] = _communication_types(database.strings(ops["type"]), ops["name"])
    return ops


def _communication_types(types: list, names: pd.Series) -> pd.Series:
    """COMMUNICATION_OP's op types, `hcom_allReduce_` -> hcom_allReduce; Level0 writes `N/A` there: the type
    is then the op name less its ids (`hcom_allReduce__576_0_1` -> hcom_allReduce)."""
    named = [ascend_ms.TRAILING_IDS.sub("", name) if isinstance(name, str) else None for name in names]
    if ascend_ms.untyped(types):
        types = named
    return trim_type_separator(pa.array(types, type=pa.string(), from_pandas=True)).to_pandas()


# Bytes per element of ENUM_HCCL_DATA_TYPE's names (COMMUNICATION_OP.count counts elements); a type not here
# (N/A, INVALID_TYPE) leaves the op's size unknown.
HCCL_DATA_TYPE_BYTES = {"INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BFP16": 2, "INT32": 4,
                        "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8, "INT128": 16}
# The MB of msprof's communication files (CommAnalyzerBandwidth's transit_size: an 8-rank allReduce of
# 16,388,000 bytes moves 28.65 "MB", 7/4 of its payload in decimal MB).
COMM_BYTES_PER_MB = 1e6


def _comm_ops_from_op_table(database: Database) -> pd.DataFrame | None:
    """comm_ops from COMMUNICATION_OP, where no communication analysis (CommAnalyzerTime) was written: one row
    per op execution with its start (epoch ms) and elapse time, its wait where the table has waitNs, its
    payload (count x the data type's bytes) as size_mb, its transfer time unknown; its step the STEP_TIME
    window its start falls in. An op that ends before it starts is said and its time left unknown."""
    import pandas as pd
    found = database.columns("COMMUNICATION_OP")
    if not found:
        return None
    columns = ["name", "start_ns", "end_ns"] + [c for c in ("type", "group", "wait_ns", "count", "data_type")
                                                if c in found]
    rows = database.query("COMMUNICATION_OP", f'SELECT {", ".join(quoted(found[c]) for c in columns)} '
                          'FROM "COMMUNICATION_OP"')
    if not rows:
        return None
    table = pd.DataFrame.from_records(rows, columns=columns)
    names = pd.Series(database.strings(table["name"]), dtype="string")
    types = _communication_types(database.strings(table["type"]) if "type" in table else [None] * len(table),
                                 names)
    start, end = (pd.to_numeric(table[c], errors="coerce") for c in ("start_ns", "end_ns"))
    backwards = int((end < start).sum())
    if backwards:
        database.warnings.append(f"{database.path.name}: COMMUNICATION_OP: {backwards} op(s) end before they "
                                 "start; their time is unknown")
    elapse = ((end - start) / NS_PER_MS).where(end >= start)
    from ...core.opnames import comm_kind
    return pd.DataFrame({
        "step": _step_of(database, start), "name": names,
        "kind": [comm_kind(str(t if isinstance(t, str) else n)) for t, n in zip(types, names)],
        "group": pd.Series(database.strings(table["group"]), dtype="string") if "group" in table else None,
        "elapse_ms": elapse, "transit_ms": np.nan,
        "wait_ms": pd.to_numeric(table["wait_ns"], errors="coerce") / NS_PER_MS if "wait_ns" in table else np.nan,
        "synchronization_ms": np.nan, "size_mb": _payload_mb(database, table),
        "start_ms": (start / NS_PER_MS).where(end >= start)})


def _payload_mb(database: Database, ops: pd.DataFrame) -> pd.Series | float:
    """Each op's payload in MB: its element count times its data type's bytes (ENUM_HCCL_DATA_TYPE); NaN where
    either is unknown or not positive."""
    import pandas as pd
    types = database.enum("ENUM_HCCL_DATA_TYPE")
    if "count" not in ops or "data_type" not in ops or types is None:
        return np.nan
    width = pd.to_numeric(ops["data_type"], errors="coerce").map(
        {key: HCCL_DATA_TYPE_BYTES.get(name) for key, name in types.items()})
    count = pd.to_numeric(ops["count"], errors="coerce")
    return (count * pd.to_numeric(width, errors="coerce") / COMM_BYTES_PER_MB).where(count > 0)


def _step_of(database: Database, start_ns: pd.Series) -> pd.Series:
    """The STEP_TIME step each start falls in (start <= t < end), NA outside every step or without STEP_TIME."""
    import pandas as pd
    bounds = database.step_bounds()
    steps = pd.Series(pd.NA, index=start_ns.index, dtype="Int64")
    if bounds is None:
        return steps
    for step, first, last in zip(bounds["step"], bounds["start_ns"], bounds["end_ns"]):
        steps[(start_ns >= first) & (start_ns < last)] = int(step)
    return steps


def _steps(profiler: Database | None, analysis: Database | None, parts: Parts,
           scoped: bool = False) -> pd.DataFrame | None:
    """StepTraceTime's split (µs) with STEP_TIME's bounds as the total; either alone where the other is absent.
    `scoped`: kernel names carry MindSpore's Default/ and Gradients/ scopes, so forward+backward is a span."""
    import pandas as pd
    bounds = profiler.step_bounds() if profiler is not None else None
    split = analysis.frame("StepTraceTime") if analysis is not None else None
    if split is not None:
        split = split.assign(step=_step_numbers(split["step"]))
        trace = {column: split[column].to_numpy(dtype=np.float64, na_value=np.nan)
                 for column in split.columns if column != "device"}
        steps = pd.DataFrame(ascend_ms.step_times(trace, f"{analysis.path.name}: StepTraceTime", parts.warnings))
    elif bounds is not None:
        steps = pd.DataFrame({"step": bounds["step"], "interval_ms": np.nan})
    else:
        return None
    if bounds is not None and len(bounds):
        wall_ms = pd.Series((bounds["end_ns"] - bounds["start_ns"]).to_numpy() / NS_PER_MS,
                            index=bounds["step"])
        steps["total_ms"] = steps["step"].map(wall_ms).fillna(steps.get("total_ms", np.nan))
    spans = _spans(profiler) if scoped and bounds is not None else None
    if spans:
        steps["fwd_bwd_ms"] = steps["step"].map(spans)
        steps["tail_ms"] = np.clip(steps["total_ms"] - steps["interval_ms"] - steps["fwd_bwd_ms"], 0.0, None)
    else:  # the CSV reader's fallback
        exposed = steps["comm_exposed_ms"].fillna(0.0) if "comm_exposed_ms" in steps else 0.0
        steps["fwd_bwd_ms"] = steps.get("computing_ms", np.nan) + exposed
        steps["tail_ms"] = np.nan
        parts.warnings.append("fwd/bwd/tail split unavailable: kernel names carry no Default/ or Gradients/ scope, "
                              "so fwd_bwd_ms is Computing + Communication(Not Overlapped) where analysis.db gives "
                              "them and tail_ms is unknown")
    return steps


# opnames.op_passes's rule as SQL (the kernels stay in SQLite): backward kernels are named under Gradients/,
# forward ones under Default/ but not its optimizer; GetNext is the data fetch the interval covers, not
# forward compute (ascend_ms.SINK_OP_TYPES). GLOB, not LIKE: LIKE ignores case.
SPAN_EDGES = {
    "forward": ("min", "start_ns", "n.value GLOB 'Default/*' AND n.value NOT GLOB '*/optimizer*' AND "
                "coalesce(k.value, '') NOT IN (" + ", ".join(f"'{t}'" for t in sorted(ascend_ms.SINK_OP_TYPES)) + ")"),
    "backward": ("max", "end_ns", "n.value GLOB 'Gradients/*'"),
}


def _spans(database: Database) -> dict[int, float] | None:
    """Per STEP_TIME step: last backward kernel end − first forward kernel start, in ms (a kernel belongs to
    the step its start falls in); None where a step lacks either."""
    step, task, info = database.columns("STEP_TIME"), database.columns("TASK"), database.columns("COMPUTE_TASK_INFO")
    if not (step and task and info and database.columns("STRING_IDS")):  # STRING_IDS(id, value): as named
        return None
    edges = {}
    for scope, (reduce, column, condition) in SPAN_EDGES.items():
        rows = database.query("TASK", (
            f'SELECT s.{quoted(step["step"])}, {reduce}(t.{quoted(task[column])}) FROM "STEP_TIME" s '
            f'JOIN "TASK" t ON t.{quoted(task["start_ns"])} >= s.{quoted(step["start_ns"])} '
            f'AND t.{quoted(task["start_ns"])} < s.{quoted(step["end_ns"])} '
            f'JOIN "COMPUTE_TASK_INFO" c ON c.{quoted(info["task"])} = t.{quoted(task["task"])} '
            f'JOIN "STRING_IDS" n ON n.id = c.{quoted(info["name"])} '
            f'LEFT JOIN "STRING_IDS" k ON k.id = c.{quoted(info["type"])} WHERE {condition} '
            f'GROUP BY s.{quoted(step["step"])}'))
        if not rows:
            return None
        edges[scope] = dict(rows)
    return {step_id: (edges["backward"][step_id] - start) / NS_PER_MS
            for step_id, start in edges["forward"].items() if step_id in edges["backward"]} or None


# ---------------------------------------------------------------- memory and communication (issue 15 tables)

def _memory(database: Database) -> dict[str, pd.DataFrame]:
    """{"memory", "op_memory"} as the memory reader gives them from the CSV twins: MB, epoch ms (its finish,
    memory.on_run_clock, puts every rank on the run's clock), components by name (CANN modules as
    `CANN/<module>`), devices as `NPU:<id>`. MEMORY_RECORD is the framework allocator over time, NPU_MODULE_MEM
    the reserved memory per CANN module, OP_MEMORY one row per op's block (released_at NA when it outlived
    the profile)."""
    import pandas as pd
    result = {}
    record, module = database.frame("MEMORY_RECORD"), database.frame("NPU_MODULE_MEM")
    frames = []
    if record is not None:
        frames.append(pd.DataFrame({
            "time_ms": _ms(record["time_ns"]),
            **{f"{kind}_mb": _mb(record.get(f"{kind}_bytes")) for kind in ("allocated", "reserved", "active")},
            "component": database.strings(record["component"]) if "component" in record else None,
            "device": _devices(record.get("device"))}))
    if module is not None:
        by_id = database.enum("ENUM_MODULE") or {}
        frames.append(pd.DataFrame({
            "time_ms": _ms(module["time_ns"]), "allocated_mb": np.nan, "reserved_mb": _mb(module["reserved_bytes"]),
            "active_mb": np.nan, "component": memory.MODULE_PREFIX + module["module"].map(by_id).astype("string"),
            "device": _devices(module.get("device"))}))
    if frames:
        result["memory"] = pd.concat(frames, ignore_index=True)
    blocks = database.frame("OP_MEMORY")
    if blocks is not None:
        result["op_memory"] = pd.DataFrame({
            "name": database.strings(blocks["name"]), "size_mb": _mb(blocks["size_bytes"]),
            "allocated_at_ms": _ms(blocks.get("allocated_ns")), "released_at_ms": _ms(blocks.get("released_ns")),
            "duration_ms": _ms(blocks.get("duration_ns")),
            "stream": blocks["stream"].astype("string") if "stream" in blocks else None,
            "device": _devices(blocks.get("device"))})
    return result


def _ms(ns: pd.Series | None) -> pd.Series | float:
    import pandas as pd
    return np.nan if ns is None else pd.to_numeric(ns, errors="coerce") / NS_PER_MS


def _mb(size: pd.Series | None) -> pd.Series | float:
    import pandas as pd
    return np.nan if size is None else pd.to_numeric(size, errors="coerce") / BYTES_PER_MB


def _devices(ids: pd.Series | None) -> pd.Series | None:
    """deviceId 0 -> "NPU:0", as the CSV files' Device Type column writes it."""
    import pandas as pd
    if ids is None:
        return None
    numbers = pd.to_numeric(ids, errors="coerce").astype("Int64").astype("string")
    return "NPU:" + numbers


def _communication(analysis: Database) -> dict[str, pd.DataFrame]:
    """{"comm_ops", "comm_links"} as the communication reader gives them from the JSON twins.
    comm_ops: CommAnalyzerTime, its size the MB over every known link type but the sums (SDMA) from
    CommAnalyzerBandwidth, which repeats an op's link type once per packet-size bucket (counted once here).
    comm_links: CommAnalyzerMatrix; where it holds per-op-type totals (`allreduce-total`) only those, so no
    byte is counted twice; else the op's own name."""
    import pandas as pd
    result = {}
    times = analysis.frame("CommAnalyzerTime")
    if times is not None:
        named = times["name"].notna().to_numpy()
        if not named.all():  # an op without a name is no op a view or a rule can name
            analysis.warnings.append(f"{analysis.path.name}: CommAnalyzerTime: {int((~named).sum())} row(s) without "
                                     "an op name (hccl_op_name NULL) left out")
            times = times[named].reset_index(drop=True)
    if times is not None and len(times):
        sizes = analysis.frame("CommAnalyzerBandwidth", ("name", "step", "link_type", "size_mb"))
        if sizes is not None and "link_type" in sizes:
            counted = sizes[sizes["link_type"].isin(communication.LINK_TYPES)
                            & ~sizes["link_type"].isin(communication.SUM_LINK_TYPES)]
            per_link = counted.drop_duplicates(["name", "step", "link_type"])
            total = per_link.assign(size_mb=pd.to_numeric(per_link["size_mb"], errors="coerce")) \
                .groupby(["name", "step"], dropna=False)["size_mb"].sum()
            times = times.join(total, on=["name", "step"])
        times["step"] = _step_numbers(times.get("step"))
        times["kind"] = times.get("kind", pd.Series(dtype="string")).str.lower()
        if "start_us" in times:
            times["start_ms"] = pd.to_numeric(times.pop("start_us"), errors="coerce") / US_PER_MS
        result["comm_ops"] = times
    links = analysis.frame("CommAnalyzerMatrix")
    if links is not None:
        totals = links["name"].astype("string").str.match(communication.PER_TYPE_TOTAL.pattern).fillna(False)
        if totals.any():
            links = links[totals]
        elif "op_name" in links:
            links = links.assign(name=links["op_name"].where(links["op_name"].astype("string") != "", links["name"]))
        src, known_src = checked(links["src"].tolist(), RANK, analysis.path.name, "CommAnalyzerMatrix.src_rank",
                                 analysis.warnings)
        dst, known_dst = checked(links["dst"].tolist(), RANK, analysis.path.name, "CommAnalyzerMatrix.dst_rank",
                                 analysis.warnings)
        known = known_src & known_dst
        result["comm_links"] = links[known].assign(step=_step_numbers(links.get("step")), src=src[known],
                                                   dst=dst[known])
    return result


def _communication_tables(parts: Parts, profiler: Database | None, analysis: Database | None,
                          analyzer_path: Path) -> dict[str, pd.DataFrame]:
    """comm_ops and comm_links from the communication analysis: analysis.db's CommAnalyzer* tables (torch_npu),
    else communication_analyzer.db's (MindSpore); where neither has CommAnalyzerTime, the ops' times from
    the profiler database's COMMUNICATION_OP (transfer and wait unknown)."""
    tables: dict[str, pd.DataFrame] = {}
    if analysis is not None:
        tables = _valued(parts, analysis, "CommAnalyzer*", lambda: _communication(analysis)) or {}
    if "comm_ops" not in tables and os.path.lexists(analyzer_path):
        analyzer = _opened(analyzer_path, parts)
        if analyzer is not None:
            try:
                tables = {**(_valued(parts, analyzer, "CommAnalyzer*", lambda: _communication(analyzer)) or {}),
                          **tables}
            finally:
                analyzer.close()
    if "comm_ops" not in tables and profiler is not None:
        ops = _valued(parts, profiler, "COMMUNICATION_OP", lambda: _comm_ops_from_op_table(profiler))
        if ops is not None:
            tables["comm_ops"] = ops
    return tables


def _step_numbers(steps: pd.Series | None) -> pd.Series | float:
    """"step50" -> 50."""
    import pandas as pd
    if steps is None:
        return np.nan
    return pd.to_numeric(steps.astype("string").str.extract(r"(\d+)\s*$", expand=False), errors="coerce")


# ---------------------------------------------------------------- the timeline (perfkit/io/timeline.py)

# Rows turned into timeline events at a time: memory stays bounded by the chunk, not the table.

# ---------------------------------------------------------------- raw, unanalysed data

RAW_DEPTH = 3  # PROF_ folders sit in the run folder or one or two levels below a parent of ranks


# CANN's own database export (`msprof --export=on --type=db`): device tasks without the framework's steps
MSPROF_DB = re.compile(r"^msprof_.*\.db$")


def raw_data_hint(root: Path) -> str | None:
    """When `root` holds raw CANN profiling data and no analysed output: one sentence saying so and the command
    that analyses it; None otherwise."""
    for folder, entries in walk(root, RAW_DEPTH):
        names = [entry.name for entry in entries]
        msprof = [name for name in names if MSPROF_DB.match(name) and (folder / name).is_file()]
        if msprof:
            where = os.path.relpath(folder / msprof[0], root)
            return (f"holds CANN's msprof database ({where}, `msprof --type=db` output), not a framework profiler's "
                    f"analysed output: it has the device's tasks but no training steps; analyse the collection "
                    f"with msprof-analyze, whose cluster_analysis_output/ perfkit reads: "
                    f"msprof-analyze cluster -d {folder}")
        raw = [name for name in names if name.startswith("PROF_") and _is_raw_cann(folder / name)]
        if not raw:
            continue
        where = os.path.relpath(folder / raw[0], root)
        if folder.name.endswith("_ascend_pt"):
            command = f"python -c \"from torch_npu.profiler.profiler import analyse; analyse('{folder}')\""
        elif folder.name.endswith("_ascend_ms") or any(n.startswith("profiler_info") for n in names):
            command = f"python -c \"from mindspore.profiler import Profiler; Profiler.offline_analyse('{folder}')\""
        else:
            command = (f"if MindSpore's Profiler wrote it, python -c \"from mindspore.profiler import Profiler; "
                       f"Profiler.offline_analyse('{folder}')\"; a bare msprof collection: "
                       f"msprof --export=on --output={folder / raw[0]}")
        return (f"holds raw CANN profiling data ({where}), not analysed profiler output; analyse it first: "
                f"{command}")
    return None


def _is_raw_cann(prof: Path) -> bool:
    """A PROF_* folder of msprof/CANN: device_{id}/data, host/data, mindstudio_profiler_output/ or msprof_*.json."""
    try:
        entries = list(os.scandir(prof))
    except OSError:
        return False
    return any(entry.is_dir() and (entry.name.startswith("device_") or entry.name in ("host",
                                                                                      "mindstudio_profiler_output"))
               or entry.name.startswith("msprof_") for entry in entries)


READER = Reader(name=LAYOUT, provides=frozenset({"steps", "op_types", "ops", "memory", "op_memory", "comm_ops",
                                                 "comm_links"}), detect=detect, read=read, read_steps=read_steps,
                looks_for="ASCEND_PROFILER_OUTPUT/ database export", raw_data_hint=raw_data_hint,
                traces=db_timeline.traces)

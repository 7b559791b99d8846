"""The database export of MindSpore (`Profiler(export_type=[ExportType.Db])`) and torch_npu: SQLite files in
`ASCEND_PROFILER_OUTPUT/` instead of, or beside, the CSV/JSON tables that `ascend_ms` reads.

Files (formats.md §3; the torch_npu guide "ascend_pytorch_profiler_{Rank_ID}.db数据" / "analysis.db数据"):
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
STEP_TIME window, as the CSV reader does per Step ID), op types and ops (TASK joined with COMPUTE_TASK_INFO, aggregated inside SQLite: a 2-million
kernel run never crosses into Python row by row; COMMUNICATION_OP's ops join the ops table as the
communication rows of kernel_details.csv do), memory (MEMORY_RECORD, NPU_MODULE_MEM, OP_MEMORY) and
communication (analysis.db's CommAnalyzer*, else MindSpore's communication_analyzer.db with the same tables, else
COMMUNICATION_OP's op times without their transfer/wait split) as the memory and communication readers give them
from the CSV/JSON twins, and meta. Level0 writes `N/A` for every op type: the types are then taken from the kernel
names by the text export's rule (ascend_ms.type_from_kernel_name). The timeline (perfkit/io/timeline.py) of a rank with no trace_view.json is built from
PYTORCH_API, CANN_API, TASK (named through COMPUTE_TASK_INFO / COMMUNICATION_TASK_INFO) and COMMUNICATION_OP
(map_timeline), its steps from the ProfilerStep#N calls, else STEP_TIME.

Every file is opened read-only and immutable (`mode=ro&immutable=1`): SQLite then takes no lock and
writes nothing, no journal, WAL or shared-memory file beside it. The price: a `-wal` file left by a
profiler that did not close the database is not read; that is said in a warning. Where a folder holds the
text export too, `ascend_ms` reads it and this reader stands aside (meta `export` says which was read).
"""

from __future__ import annotations

import os
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.files import open_regular
from ...core.units import BYTES_PER_MB, NS_PER_MS, NS_PER_US, US_PER_MS
from . import ascend_ms, communication, memory
from .base import Parts, Reader, guarded, has_match, op_passes, rank_of, read_csv_table, trim_type_separator, walk_names

LAYOUT = "ascend_db"
OUTPUT_DIR = ascend_ms.OUTPUT_DIR
PROFILER_DBS = ("ascend_mindspore_profiler*.db", "ascend_pytorch_profiler*.db")
ANALYSIS_DB = "analysis.db"
# MindSpore's database export: msprof's communication analysis, the CommAnalyzer* tables of analysis.db
COMM_ANALYZER_DB = "communication_analyzer.db"
# The longest STRING_IDS value read (op names, types, shapes: real ones are under 1,000 characters).
MAX_STRING = 4096

# Column aliases per table, {canonical: accepted column names}; the first name is the one the files of
# SCHEMA_VERSION 1.0.0 use. Units: ns and bytes in the profiler database, as noted in analysis.db.
COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {
    "STEP_TIME": {"step": ("id",), "start_ns": ("startNs",), "end_ns": ("endNs",)},
    "TASK": {"start_ns": ("startNs",), "end_ns": ("endNs",), "task": ("globalTaskId",), "stream": ("streamId",),
             "task_type": ("taskType",)},
    "COMMUNICATION_TASK_INFO": {"task": ("globalTaskId",), "name": ("name",)},
    "PYTORCH_API": {"start_ns": ("startNs",), "end_ns": ("endNs",), "thread": ("globalTid",), "name": ("name",),
                    "input_shapes": ("inputShapes",)},
    "CANN_API": {"start_ns": ("startNs",), "end_ns": ("endNs",), "thread": ("globalTid",), "name": ("name",)},
    "COMPUTE_TASK_INFO": {"task": ("globalTaskId",), "name": ("name",), "type": ("opType",),
                          "input_shapes": ("inputShapes",), "input_dtypes": ("inputDataTypes",)},
    "STRING_IDS": {"id": ("id",), "value": ("value",)},
    "COMMUNICATION_OP": {"name": ("opName",), "start_ns": ("startNs",), "end_ns": ("endNs",),
                         "type": ("opType",), "group": ("groupName",), "wait_ns": ("waitNs",),
                         "count": ("count",), "data_type": ("dataType",)},
    "ENUM_HCCL_DATA_TYPE": {"id": ("id",), "name": ("name",)},
    "META_DATA": {"name": ("name",), "value": ("value",)},
    "NPU_INFO": {"device": ("id",), "name": ("name",)},
    "RANK_DEVICE_MAP": {"rank": ("rankId",), "device": ("deviceId",)},
    "SESSION_TIME_INFO": {"start_ns": ("startTimeNs",)},
    "MEMORY_RECORD": {"component": ("component",), "time_ns": ("timestamp", "timestampNs"),
                      "allocated_bytes": ("totalAllocated",), "reserved_bytes": ("totalReserved",),
                      "active_bytes": ("totalActive",), "stream": ("streamPtr",), "device": ("deviceId",)},
    "OP_MEMORY": {"name": ("name",), "size_bytes": ("size",), "allocated_ns": ("allocationTime",),
                  "released_ns": ("releaseTime",), "duration_ns": ("duration",), "stream": ("streamPtr",),
                  "device": ("deviceId",)},
    "NPU_MODULE_MEM": {"module": ("moduleId",), "time_ns": ("timestampNs",), "reserved_bytes": ("totalReserved",),
                       "device": ("deviceId",)},
    "ENUM_MODULE": {"id": ("id",), "name": ("name",)},
    # analysis.db: µs (StepTraceTime), ms / MB / GB/s (CommAnalyzer*)
    "StepTraceTime": {"step": ("step",), "computing": ("computing",),
                      "comm_exposed": ("communication_not_overlapped",), "comm_overlapped": ("overlapped",),
                      "comm": ("communication",), "free": ("free",), "bubble": ("bubble",),
                      "preparing": ("preparing",), "device": ("deviceId",)},
    "CommAnalyzerTime": {"name": ("hccl_op_name",), "group": ("group_name",), "elapse_ms": ("elapse_time",),
                         "transit_ms": ("transit_time",), "wait_ms": ("wait_time",),
                         "synchronization_ms": ("synchronization_time",), "step": ("step",), "kind": ("type",),
                         "start_us": ("start_timestamp",)},
    "CommAnalyzerBandwidth": {"name": ("hccl_op_name",), "step": ("step",), "link_type": ("transport_type",),
                              "size_mb": ("transit_size",)},
    "CommAnalyzerMatrix": {"src": ("src_rank",), "dst": ("dst_rank",), "link_type": ("transport_type",),
                           "size_mb": ("transit_size",), "transit_ms": ("transit_time",),
                           "bandwidth_gb_s": ("bandwidth",), "step": ("step",), "name": ("hccl_op_name",),
                           "op_name": ("op_name",), "group": ("group_name",)},
}
# Tables that read others: a database holding the one without the other was cut short or edited (the export
# writes them together), and what needs the missing one is left out, said once per file.
COMPANIONS = {
    "TASK": ("STRING_IDS",),
    "COMPUTE_TASK_INFO": ("TASK", "STRING_IDS"),
    "COMMUNICATION_OP": ("STRING_IDS",),
    "CommAnalyzerTime": ("CommAnalyzerBandwidth",),
}
# Columns a table is useless without; the others are read where present.
REQUIRED = {
    "STEP_TIME": ("step", "start_ns", "end_ns"),
    "TASK": ("start_ns", "end_ns", "task"),
    "COMPUTE_TASK_INFO": ("task", "name", "type"),
    "STRING_IDS": ("id", "value"),
    "COMMUNICATION_OP": ("name", "start_ns", "end_ns"),
    "COMMUNICATION_TASK_INFO": ("task", "name"),
    "PYTORCH_API": ("start_ns", "end_ns", "name"),
    "CANN_API": ("start_ns", "end_ns", "name"),
    "StepTraceTime": ("step", "computing", "free"),
    "MEMORY_RECORD": ("time_ns", "allocated_bytes"),
    "OP_MEMORY": ("name", "size_bytes"),
    "NPU_MODULE_MEM": ("module", "time_ns", "reserved_bytes"),
    "CommAnalyzerTime": ("name", "elapse_ms"),
    "CommAnalyzerMatrix": ("name", "src", "dst", "size_mb", "transit_ms"),
}


def detect(folder: Path) -> bool:
    """A rank folder whose ASCEND_PROFILER_OUTPUT/ holds the database export and not the text one."""
    output = folder / OUTPUT_DIR
    return has_match(output, PROFILER_DBS + (ANALYSIS_DB, COMM_ANALYZER_DB)) and not ascend_ms.detect(folder)


class Database:
    """One SQLite file opened read-only and immutable; problems become warnings naming it and the table."""

    def __init__(self, path: Path, warnings: list[str]):
        self.path, self.warnings = path, warnings
        self.connection = _open(path)
        # text is UTF-8 by the schema; a damaged page may hold any bytes: those become U+FFFD, never an exception
        self.connection.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            self.tables = {name for (name,) in self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except SQLITE_ERRORS as exc:
            self.connection.close()
            raise FileFormatError(_why(exc), path) from None
        orphans = {table: [c for c in companions if c not in self.tables]
                   for table, companions in COMPANIONS.items() if table in self.tables}
        missing = sorted({companion for lacking in orphans.values() for companion in lacking})
        if missing:
            readers = ", ".join(table for table, lacking in orphans.items() if lacking)
            warnings.append(f"{path.name}: lacks table(s) {', '.join(missing)} that {readers} refer to (a database "
                            "with tables missing); what needs them is left out")
        self._strings: dict[int, str] | None = None
        self._string_arrays: tuple[pa.Array, pa.Array] | None = None  # (ids, values) for string_column
        wal = path.with_name(path.name + "-wal")
        if wal.is_file() and wal.stat().st_size:
            warnings.append(f"{path.name}: {wal.name} holds {wal.stat().st_size} bytes the profiler did not merge "
                            "into the database (it was not closed); they are not read")

    def close(self) -> None:
        self.connection.close()

    def columns(self, table: str, wanted: Iterable[str] | None = None) -> dict[str, str] | None:
        """{canonical: actual column} of `table` for the `wanted` canonical names (default all known); None,
        with a warning, when the table lacks a required column (a schema perfkit does not know); None,
        silently, when the table is absent (the profiler did not collect it)."""
        if table not in self.tables:
            return None
        try:
            actual = {row[1].casefold(): row[1] for row in self.connection.execute(f'PRAGMA table_info("{table}")')}
        except SQLITE_ERRORS as exc:
            self.warnings.append(f"{self.path.name}: skipped table {table}: {_why(exc)}")
            return None
        aliases = COLUMNS[table]
        found = {canonical: next((actual[n.casefold()] for n in names if n.casefold() in actual), None)
                 for canonical, names in aliases.items() if wanted is None or canonical in wanted}
        missing = [aliases[c][0] for c in REQUIRED.get(table, ()) if c in found and found[c] is None]
        if missing:
            self.warnings.append(f"{self.path.name}: skipped table {table}: lacks column(s) {', '.join(missing)} "
                                 f"(columns: {', '.join(actual.values())[:200]})")
            return None
        return {canonical: column for canonical, column in found.items() if column is not None}

    def query(self, table: str, sql: str, parameters: tuple = ()) -> list[tuple] | None:
        """Rows of `sql`; None, with a warning naming the table, when SQLite cannot read them."""
        try:
            return self.connection.execute(sql, parameters).fetchall()
        except SQLITE_ERRORS as exc:
            self.warnings.append(f"{self.path.name}: skipped table {table}: {_why(exc)}")
            return None

    def frame(self, table: str, wanted: Iterable[str] | None = None) -> pd.DataFrame | None:
        """The `wanted` canonical columns of a whole (small) table; None where absent or unreadable."""
        found = self.columns(table, wanted)
        if not found:
            return None
        names = list(found)
        rows = self.query(table, f'SELECT {", ".join(_quoted(found[c]) for c in names)} FROM "{table}"')
        return None if rows is None else pd.DataFrame.from_records(rows, columns=names)

    def string_column(self, ids: pa.Array) -> pa.Array:
        """STRING_IDS values of an int64 array of ids, as an Arrow string array (null where none)."""
        import pyarrow.compute as pc
        if self._string_arrays is None:
            self.strings(())
            pairs = [(key, value) for key, value in self._strings.items()  # a damaged page may hold other types
                     if type(key) is int and -2**63 <= key < 2**63 and isinstance(value, str)]  # noqa: E721
            self._string_arrays = (pa.array([key for key, _ in pairs], pa.int64()),
                                   pa.array([value for _, value in pairs], pa.string()))
        keys, values = self._string_arrays
        return values.take(pc.index_in(ids, value_set=keys))

    def strings(self, ids: Iterable) -> list[str | None]:
        """STRING_IDS values of `ids` (None for an id without a string), each at most MAX_STRING characters:
        cut by SQLite, so that a longer one is never read whole (three 20 MB names made the timeline copy
        20 MB into every event of those ops: 3.9 GB and 21 s for a 4,000-event trace); the cut is said once."""
        if self._strings is None:
            found = self.columns("STRING_IDS")
            rows = self.query("STRING_IDS", f'SELECT {_quoted(found["id"])}, substr({_quoted(found["value"])}, 1, '
                              f'{MAX_STRING + 1}) FROM STRING_IDS') if found else None
            self._strings = dict(rows or ())
            long = [key for key, value in self._strings.items() if isinstance(value, str) and len(value) > MAX_STRING]
            for key in long:
                self._strings[key] = self._strings[key][:MAX_STRING] + "…"
            if long:
                self.warnings.append(f"{self.path.name}: STRING_IDS: {len(long)} string(s) longer than "
                                     f"{MAX_STRING:,} characters cut there (no op name or shape is that long)")
        return [self._strings.get(i) for i in ids]


def _open(path: Path) -> sqlite3.Connection:
    """Read-only and immutable: no lock taken, nothing written beside the file, whatever else holds it."""
    try:
        with open_regular(path) as handle:  # a FIFO under the name would block SQLite's open for ever
            head = handle.read(16)
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    if not head:
        raise FileFormatError("is empty", path)
    if head != b"SQLite format 3\x00":
        raise FileFormatError("is not an SQLite database (wrong header)", path)
    uri = "file:" + _uri_path(path) + "?mode=ro&immutable=1"
    try:
        return sqlite3.connect(uri, uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise FileFormatError(f"cannot be opened ({exc})", path) from None


def _uri_path(path: Path) -> str:
    from urllib.parse import quote
    return quote(str(path.resolve()), safe="/")


# SQLite's own errors, and its message about a damaged schema, whose bytes Python cannot decode.
SQLITE_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)


def _why(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "cannot be read (its schema is damaged: not UTF-8 text)"
    text = str(exc)
    if "malformed" in text or "not a database" in text:
        return f"cannot be read ({text}: cut off or overwritten?)"
    return f"cannot be read ({text})"


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


# ---------------------------------------------------------------- finding the files

def _files(folder: Path, parts: Parts) -> tuple[Path | None, Path | None]:
    """(profiler database, analysis.db) of a rank folder; a second profiler database is said and left."""
    output = folder / OUTPUT_DIR
    found = sorted(path for pattern in PROFILER_DBS for path in output.glob(pattern))
    if len(found) > 1:
        parts.warnings.append(f"several profiler databases ({', '.join(p.name for p in found)}); using {found[0].name}")
    analysis = output / ANALYSIS_DB
    # a name that is no file (a FIFO, a folder) is opened and refused with a warning, not passed over
    return (found[0] if found else None), (analysis if os.path.lexists(analysis) else None)


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


def _rank(folder: Path, profiler: Path | None, database: Database | None, parts: Parts) -> int:
    """profiler_info_{r}.json as ascend_ms reads it, else the database's name, else RANK_DEVICE_MAP, else 0."""
    if any(folder.glob("profiler_info*.json")):
        return ascend_ms.read_profiler_info(folder, parts)
    named = rank_of(profiler.name.replace(".db", ".csv")) if profiler else None
    if named is not None:
        return named
    mapped = database.frame("RANK_DEVICE_MAP") if database else None
    ranks = pd.to_numeric(mapped["rank"], errors="coerce") if mapped is not None and "rank" in mapped else None
    if ranks is not None and len(ranks) and ranks.iloc[0] >= 0:  # -1: not set
        return int(ranks.iloc[0])
    return 0


def _framework(folder: Path, profiler_path: Path | None) -> str:
    """torch_npu writes ascend_pytorch_profiler_{r}.db in `*_ascend_pt` folders; MindSpore its own name."""
    torch = folder.name.endswith("_ascend_pt") or (profiler_path is not None
                                                    and profiler_path.name.startswith("ascend_pytorch_profiler"))
    return "torch_npu" if torch else "mindspore"


# ---------------------------------------------------------------- reading

def read(folder: Path) -> dict[int, Parts]:
    parts = Parts(meta={"device": "Ascend", "layout": LAYOUT, "export": "db"})
    profiler_path, analysis_path = _files(folder, parts)
    parts.meta["framework"] = _framework(folder, profiler_path)
    profiler, analysis = _opened(profiler_path, parts), _opened(analysis_path, parts)
    scoped, kernels = False, None
    try:
        rank = _rank(folder, profiler_path, profiler, parts)
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
    profiler_path, analysis_path = _files(folder, parts)
    profiler, analysis = _opened(profiler_path, parts), _opened(analysis_path, parts)
    try:
        rank = _rank(folder, profiler_path, profiler, parts)
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
    task, info = database.columns("TASK"), database.columns("COMPUTE_TASK_INFO")
    if not task or not info:
        return None
    optional = [c for c in ("input_shapes", "input_dtypes") if c in info]
    # One min() aggregate: SQLite takes the bare columns (type, shapes, dtypes) from the name's first kernel.
    select = ", ".join([f'c.{_quoted(info["name"])}', f'min(t.{_quoted(task["start_ns"])})', "count(*)",
                        f'sum(t.{_quoted(task["end_ns"])} - t.{_quoted(task["start_ns"])})',
                        f'c.{_quoted(info["type"])}'] + [f"c.{_quoted(info[c])}" for c in optional])
    sql = (f'SELECT {select} FROM "TASK" t JOIN "COMPUTE_TASK_INFO" c '
           f'ON c.{_quoted(info["task"])} = t.{_quoted(task["task"])} '
           f'WHERE t.rowid BETWEEN ? AND ? GROUP BY c.{_quoted(info["name"])}')
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
        with closing(_open(database.path)) as connection:
            connection.text_factory = database.connection.text_factory
            return connection.execute(sql, bounds).fetchall()

    try:
        with ThreadPoolExecutor(len(chunks)) as pool:
            return [row for rows in pool.map(chunk_rows, chunks) for row in rows]
    except (*SQLITE_ERRORS, FileFormatError) as exc:
        why = exc.message if isinstance(exc, FileFormatError) else _why(exc)
        database.warnings.append(f"{database.path.name}: skipped table TASK: {why}")
        return None


def _communication_ops(database: Database) -> pd.DataFrame | None:
    """COMMUNICATION_OP per op name, as kernel_details.csv lists collectives among the kernels."""
    found = database.columns("COMMUNICATION_OP", ("name", "start_ns", "end_ns", "type"))
    if not found:
        return None
    type_column = f', {_quoted(found["type"])}' if "type" in found else ", NULL"
    rows = database.query("COMMUNICATION_OP", f'SELECT {_quoted(found["name"])}, min({_quoted(found["start_ns"])}), '
                          f'count(*), sum({_quoted(found["end_ns"])} - {_quoted(found["start_ns"])}){type_column} '
                          f'FROM "COMMUNICATION_OP" GROUP BY {_quoted(found["name"])}')
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
    found = database.columns("COMMUNICATION_OP")
    if not found:
        return None
    columns = ["name", "start_ns", "end_ns"] + [c for c in ("type", "group", "wait_ns", "count", "data_type")
                                                if c in found]
    rows = database.query("COMMUNICATION_OP", f'SELECT {", ".join(_quoted(found[c]) for c in columns)} '
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
    types = database.frame("ENUM_HCCL_DATA_TYPE")
    if "count" not in ops or "data_type" not in ops or types is None:
        return np.nan
    width = pd.to_numeric(ops["data_type"], errors="coerce").map(
        dict(zip(pd.to_numeric(types["id"], errors="coerce"), types["name"].map(HCCL_DATA_TYPE_BYTES))))
    count = pd.to_numeric(ops["count"], errors="coerce")
    return (count * pd.to_numeric(width, errors="coerce") / COMM_BYTES_PER_MB).where(count > 0)


def _step_of(database: Database, start_ns: pd.Series) -> pd.Series:
    """The STEP_TIME step each start falls in (start <= t < end), NA outside every step or without STEP_TIME."""
    bounds = database.frame("STEP_TIME")
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
    bounds = profiler.frame("STEP_TIME") if profiler is not None else None
    split = analysis.frame("StepTraceTime") if analysis is not None else None
    if split is not None:
        split = split.assign(step=_step_numbers(split["step"]))
        trace = {column: split[column].to_numpy(dtype=np.float64, na_value=np.nan)
                 for column in split.columns if column != "device"}
        steps = pd.DataFrame(ascend_ms.step_times(trace))
    elif bounds is not None:
        steps = pd.DataFrame({"step": bounds["step"], "interval_ms": np.nan})
    else:
        return None
    if bounds is not None and len(bounds):
        wall_ms = pd.Series((bounds["end_ns"] - bounds["start_ns"]).to_numpy() / NS_PER_MS,
                            index=bounds["step"].astype("int64"))
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


# base.op_passes's rule as SQL (the kernels stay in SQLite): backward kernels are named under Gradients/,
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
            f'SELECT s.{_quoted(step["step"])}, {reduce}(t.{_quoted(task[column])}) FROM "STEP_TIME" s '
            f'JOIN "TASK" t ON t.{_quoted(task["start_ns"])} >= s.{_quoted(step["start_ns"])} '
            f'AND t.{_quoted(task["start_ns"])} < s.{_quoted(step["end_ns"])} '
            f'JOIN "COMPUTE_TASK_INFO" c ON c.{_quoted(info["task"])} = t.{_quoted(task["task"])} '
            f'JOIN "STRING_IDS" n ON n.id = c.{_quoted(info["name"])} '
            f'LEFT JOIN "STRING_IDS" k ON k.id = c.{_quoted(info["type"])} WHERE {condition} '
            f'GROUP BY s.{_quoted(step["step"])}'))
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
        names = database.frame("ENUM_MODULE")
        by_id = dict(zip(names["id"], names["name"])) if names is not None else {}
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
    return np.nan if ns is None else pd.to_numeric(ns, errors="coerce") / NS_PER_MS


def _mb(size: pd.Series | None) -> pd.Series | float:
    return np.nan if size is None else pd.to_numeric(size, errors="coerce") / BYTES_PER_MB


def _devices(ids: pd.Series | None) -> pd.Series | None:
    """deviceId 0 -> "NPU:0", as the CSV files' Device Type column writes it."""
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
    result = {}
    times = analysis.frame("CommAnalyzerTime")
    if times is not None:
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
        result["comm_links"] = links.assign(step=_step_numbers(links.get("step")),
                                            src=pd.to_numeric(links["src"], errors="coerce"),
                                            dst=pd.to_numeric(links["dst"], errors="coerce"))
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
    if steps is None:
        return np.nan
    return pd.to_numeric(steps.astype("string").str.extract(r"(\d+)\s*$", expand=False), errors="coerce")


# ---------------------------------------------------------------- the timeline (perfkit/io/timeline.py)

# Rows turned into timeline events at a time: memory stays bounded by the chunk, not the table.
TIMELINE_ROWS_PER_CHUNK = 250_000
# A globalTid is the process id in its upper 32 bits and the thread id in its lower ones (TASK's globalPid
# is the same process: 13471134862269421 >> 32 = 3136493 in the fixture).
TID_BITS = 32
# The event tables, as trace_view.json lays the same events out: (table, lane pid, process name, its order).
TIMELINE_LANES = {"PYTORCH_API": ("framework", "Python", 0), "CANN_API": ("cann", "CANN", 1),
                  "TASK": ("device", "Ascend Hardware", 2), "COMMUNICATION_OP": ("hccl", "HCCL", 3)}


def step_bounds_us(path: Path) -> dict[int, list[float]]:
    """Per step, [start, end] in µs from STEP_TIME (the timeline's steps where no ProfilerStep event marks them)."""
    database = Database(path, [])
    try:
        bounds = database.frame("STEP_TIME")
    finally:
        database.close()
    if bounds is None:
        return {}
    # int(): an int64 ns near 1.7e18 is not exact as a float; Python's int / int rounds once, correctly
    return {int(step): [int(start) / NS_PER_US, int(end) / NS_PER_US]
            for step, start, end in zip(bounds["step"], bounds["start_ns"], bounds["end_ns"])
            if pd.notna(start) and pd.notna(end) and end >= start}


def db_traces(folder: Path) -> dict[int, Path]:
    """{rank: profiler database} of a folder the database reader claims: the timeline source of a rank without
    a trace_view.json (the database export writes no JSON timeline)."""
    profiler, _ = _files(folder, Parts())
    return {} if profiler is None else {_rank(folder, profiler, None, Parts()): profiler}


def map_timeline(path: Path, each, stats, progress=None, workers: int = 1) -> Iterator:
    """`each(chunk number, events)` for each chunk of rows of a profiler database's event tables, the events
    as Chrome trace events (schema trace_json.OUTPUT; `stats` a trace_json.Stats), in `workers` forked
    processes as trace_json.map_blocks does a trace's blocks; `progress(bytes)` after each chunk, the file's
    size times the share of rows done. For the timeline index (perfkit/io/timeline.py).

    Lanes as trace_view.json has them: framework calls (PYTORCH_API, whose ProfilerStep#N rows are the step
    markers) and CANN API calls per thread, device tasks per stream (TASK, named by COMPUTE_TASK_INFO or
    COMMUNICATION_TASK_INFO where they name the task, else by its task type; op_type the compute op's type,
    else the task type), communication ops per group (COMMUNICATION_OP); ns become µs. Flow links
    (connectionId) are not drawn. Raises FileFormatError when the file holds none of these tables or no
    readable row.
    """
    from ..parallel import map_ahead
    database = Database(path, stats.notes)
    try:
        queries = {table: _timeline_sql(database, table) for table in TIMELINE_LANES}
        queries = {table: sql for table, sql in queries.items() if sql is not None}
        if not queries:
            raise FileFormatError("holds no timeline table (" + ", ".join(TIMELINE_LANES) + ")", path)
        chunks = [(table, sql, first, first + TIMELINE_ROWS_PER_CHUNK - 1) for table, sql in queries.items()
                  for first in range(1, _max_rowid(database, table) + 1, TIMELINE_ROWS_PER_CHUNK)]
    finally:
        database.close()
    calls = ((path, *chunk, number, each) for number, chunk in enumerate(chunks))
    for number, (_, answer) in enumerate(map_ahead(_timeline_chunk, calls, workers if len(chunks) > 1 else 1)):
        events, notes, result = answer
        stats.events += events
        stats.notes += [note for note in notes if note not in stats.notes]
        if events:
            yield result
        if progress is not None:
            progress(int(path.stat().st_size * (number + 1) / len(chunks)))
    if not stats.events:
        why = "; ".join(stats.notes) or ", ".join(TIMELINE_LANES) + " are empty"
        raise FileFormatError(f"holds no readable timeline event ({why})", path)


def _timeline_chunk(path: Path, table: str, sql: str, first: int, last: int, number: int,
                    each) -> tuple[int, list, Any]:
    """(events, warnings, each(number, events)) for the rows `sql` (_timeline_sql) selects from `table` with
    rowids first..last (in a worker process: a connection of its own)."""
    notes: list[str] = []
    database = Database(path, notes)
    try:
        rows = database.query(table, sql, (first, last))
        if not rows:
            return 0, notes, None
        return len(rows), notes, each(number, _timeline_table(database, table, rows))
    finally:
        database.close()


def _timeline_sql(database: Database, table: str) -> str | None:
    """SELECT start_ns, dur_ns, lane, name id, op type id, shapes id (rows of a rowid range) for `table`."""
    found = database.columns(table)
    if not found:
        return None
    start, end = (f't.{_quoted(found[c])}' for c in ("start_ns", "end_ns"))
    times = f"CAST({start} AS INTEGER), CAST({end} AS INTEGER) - CAST({start} AS INTEGER)"
    where = f'FROM "{table}" t {{joins}} WHERE t.rowid BETWEEN ? AND ?'
    if table in ("PYTORCH_API", "CANN_API"):
        thread = f'CAST(t.{_quoted(found["thread"])} AS INTEGER)' if "thread" in found else "0"
        shapes = f't.{_quoted(found["input_shapes"])}' if "input_shapes" in found else "NULL"
        return f'SELECT {times}, {thread}, t.{_quoted(found["name"])}, NULL, {shapes} ' + where.format(joins="")
    if table == "COMMUNICATION_OP":
        group = f't.{_quoted(found["group"])}' if "group" in found else "NULL"
        kind = f't.{_quoted(found["type"])}' if "type" in found else "NULL"
        return f'SELECT {times}, {group}, t.{_quoted(found["name"])}, {kind}, NULL ' + where.format(joins="")
    compute, comm = database.columns("COMPUTE_TASK_INFO"), database.columns("COMMUNICATION_TASK_INFO")
    task_type = f't.{_quoted(found["task_type"])}' if "task_type" in found else "NULL"
    stream = f't.{_quoted(found["stream"])}' if "stream" in found else "NULL"
    names, types, shapes, joins = [], [task_type], "NULL", []
    if compute:
        joins.append(f'LEFT JOIN "COMPUTE_TASK_INFO" c ON c.{_quoted(compute["task"])} = t.{_quoted(found["task"])}')
        names.append(f'c.{_quoted(compute["name"])}')
        types.insert(0, f'c.{_quoted(compute["type"])}')
        shapes = f'c.{_quoted(compute["input_shapes"])}' if "input_shapes" in compute else "NULL"
    if comm:  # one name per task (a task may have several rows)
        joins.append(f'LEFT JOIN (SELECT {_quoted(comm["task"])} AS task, min({_quoted(comm["name"])}) AS name '
                     f'FROM "COMMUNICATION_TASK_INFO" GROUP BY 1) m ON m.task = t.{_quoted(found["task"])}')
        names.append("m.name")
    name = f"coalesce({', '.join(names + [task_type])})"
    kind = f"coalesce({', '.join(types)})"
    return f"SELECT {times}, {stream}, {name}, {kind}, {shapes} " + where.format(joins=" ".join(joins))


def _max_rowid(database: Database, table: str) -> int:
    rows = database.query(table, f'SELECT max(rowid) FROM "{table}"')
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def _timeline_table(database: Database, table: str, rows: list[tuple]) -> pa.Table:
    """Rows of _timeline_sql as OUTPUT events, after the M events naming their process and lanes (each chunk
    names its own: chunks are made apart, and a name said twice is the same name). Column-wise in Arrow: a
    6-million task rank is 24 chunks of this."""
    import pyarrow.compute as pc

    from ..trace_json import chrome_events
    from ..trace_text import ns_to_us
    pid, process, order = TIMELINE_LANES[table]
    start_ns, dur_ns, lane, names, kinds, shapes = (_column(values) for values in zip(*rows))
    if table in ("PYTORCH_API", "CANN_API"):
        tids, lane_format = pc.cast(pc.bit_wise_and(pc.fill_null(lane, 0), (1 << TID_BITS) - 1), pa.string()), "Thread {}"
    elif table == "COMMUNICATION_OP":
        tids, lane_format = pc.fill_null(database.string_column(lane), "communication"), "{}"
    else:
        tids, lane_format = pc.cast(lane, pa.string()), "Stream {}"
    return chrome_events(pid, process, lane_format, tids, database.string_column(names), ns_to_us(start_ns),
                           ns_to_us(dur_ns), database.string_column(kinds),
                           pc.utf8_trim(pc.utf8_trim_whitespace(database.string_column(shapes)), '"'),
                           process_order=order)


def _column(values: tuple) -> pa.Array:
    """One column of SQLite's rows: integers as int64 (a value of another type, from a damaged page, null)."""
    try:
        return pa.array(values, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return pa.array([value if type(value) is int and -2**63 <= value < 2**63 else None  # noqa: E721
                         for value in values], pa.int64())


# ---------------------------------------------------------------- raw, unanalysed data

RAW_DEPTH = 3  # PROF_ folders sit in the run folder or one or two levels below a parent of ranks


# CANN's own database export (`msprof --export=on --type=db`): device tasks without the framework's steps
MSPROF_DB = re.compile(r"^msprof_.*\.db$")


def raw_data_hint(root: Path) -> str | None:
    """When `root` holds raw CANN profiling data and no analysed output: one sentence saying so and the command
    that analyses it; None otherwise."""
    for folder, names in walk_names(root, RAW_DEPTH):
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
                looks_for="ASCEND_PROFILER_OUTPUT/ database export", raw_data_hint=raw_data_hint)

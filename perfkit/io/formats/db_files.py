"""The database export's files (the tables are described in db.py): where a rank folder's profiler database and
analysis.db are, which rank they hold, and `Database`, one SQLite file opened read-only and immutable, whose
problems become warnings naming it and the table. Shared by the reader (db.py) and its timeline (db_timeline.py).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import pyarrow as pa

from ...core.errors import FileFormatError
from ...core.files import open_regular
from . import ascend_ms
from .base import Parts
from .files import rank_of
from .integers import ID, RANK, STEP, checked, whole

if TYPE_CHECKING:
    import pandas as pd

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


class Database:
    """One SQLite file opened read-only and immutable; problems become warnings naming it and the table."""

    def __init__(self, path: Path, warnings: list[str]):
        self.path, self.warnings = path, warnings
        self.connection = open_database(path)
        # text is UTF-8 by the schema; a damaged page may hold any bytes: those become U+FFFD, never an exception
        self.connection.text_factory = lambda raw: raw.decode("utf-8", "replace")
        try:
            self.tables = {name for (name,) in self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        except SQLITE_ERRORS as exc:
            self.connection.close()
            raise FileFormatError(unreadable(exc), path) from None
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
            self.warnings.append(f"{self.path.name}: skipped table {table}: {unreadable(exc)}")
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
            self.warnings.append(f"{self.path.name}: skipped table {table}: {unreadable(exc)}")
            return None

    def frame(self, table: str, wanted: Iterable[str] | None = None) -> pd.DataFrame | None:
        """The `wanted` canonical columns of a whole (small) table; None where absent or unreadable."""
        import pandas as pd
        found = self.columns(table, wanted)
        if not found:
            return None
        names = list(found)
        rows = self.query(table, f'SELECT {", ".join(quoted(found[c]) for c in names)} FROM "{table}"')
        return None if rows is None else pd.DataFrame.from_records(rows, columns=names)

    def enum(self, table: str) -> dict[int, str] | None:
        """{id: name} of an ENUM_* table; a row whose id is no whole number is left out, said once naming the table
        (pandas cannot look names up by ids that are not numbers). None where the table is absent or unreadable."""
        names = self.frame(table)
        if names is None:
            return None
        ids, known = checked(names["id"].tolist(), ID, self.path.name, f"{table}.id", self.warnings)
        return dict(zip(ids[known].tolist(), names["name"][known]))

    def step_bounds(self) -> pd.DataFrame | None:
        """STEP_TIME (step, start_ns, end_ns); a row whose id is no step (formats/integers.py: `inf`, 1e300, -1,
        text) left out, said once. None where the table is absent or unreadable."""
        bounds = self.frame("STEP_TIME")
        if bounds is None:
            return None
        steps, known = checked(bounds["step"].tolist(), STEP, self.path.name, "STEP_TIME.id", self.warnings)
        return bounds[known].assign(step=steps[known]).reset_index(drop=True)

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
            rows = self.query("STRING_IDS", f'SELECT {quoted(found["id"])}, substr({quoted(found["value"])}, 1, '
                              f'{MAX_STRING + 1}) FROM STRING_IDS') if found else None
            self._strings = dict(rows or ())
            long = [key for key, value in self._strings.items() if isinstance(value, str) and len(value) > MAX_STRING]
            for key in long:
                self._strings[key] = self._strings[key][:MAX_STRING] + "…"
            if long:
                self.warnings.append(f"{self.path.name}: STRING_IDS: {len(long)} string(s) longer than "
                                     f"{MAX_STRING:,} characters cut there (no op name or shape is that long)")
        return [self._strings.get(i) for i in ids]


def open_database(path: Path) -> sqlite3.Connection:
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


def unreadable(exc: Exception) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "cannot be read (its schema is damaged: not UTF-8 text)"
    text = str(exc)
    if "malformed" in text or "not a database" in text:
        return f"cannot be read ({text}: cut off or overwritten?)"
    return f"cannot be read ({text})"


def quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def database_files(folder: Path, parts: Parts) -> tuple[Path | None, Path | None]:
    """(profiler database, analysis.db) of a rank folder; a second profiler database is said and left."""
    output = folder / OUTPUT_DIR
    found = sorted(path for pattern in PROFILER_DBS for path in output.glob(pattern))
    if len(found) > 1:
        parts.warnings.append(f"several profiler databases ({', '.join(p.name for p in found)}); using {found[0].name}")
    analysis = output / ANALYSIS_DB
    # a name that is no file (a FIFO, a folder) is opened and refused with a warning, not passed over
    return (found[0] if found else None), (analysis if os.path.lexists(analysis) else None)


def database_rank(folder: Path, profiler: Path | None, database: Database | None, parts: Parts) -> int:
    """profiler_info_{r}.json as ascend_ms reads it, else the database's name, else RANK_DEVICE_MAP, else 0."""
    if any(folder.glob("profiler_info*.json")):
        return ascend_ms.read_profiler_info(folder, parts)
    named = rank_of(profiler.name.replace(".db", ".csv")) if profiler else None
    if named is not None:
        return named
    mapped = database.frame("RANK_DEVICE_MAP") if database else None
    if mapped is None or "rank" not in mapped or not len(mapped):
        return 0
    value = mapped["rank"].iloc[0]
    rank = whole(value, RANK)
    if rank is None and not (isinstance(value, (int, float)) and value == -1):  # -1: not set
        parts.warnings.append(f"{profiler.name}: RANK_DEVICE_MAP's rankId {value!r:.40} is not a rank (a whole number "
                              f"0-{RANK.high:,}): rank 0 assumed")
    return rank if rank is not None else 0

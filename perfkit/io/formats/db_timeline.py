"""The timeline of the database export (perfkit/io/timeline.py): a rank's profiler database as its trace file
(`traces`), its event tables read in chunks of rows as Chrome trace events (`map_timeline`), and its steps from
STEP_TIME where no ProfilerStep#N call marks them (`step_bounds_us`).

A rank with no trace_view.json has its timeline built from PYTORCH_API, CANN_API, TASK (named through
COMPUTE_TASK_INFO / COMMUNICATION_TASK_INFO) and COMMUNICATION_OP, as trace_view.json lays the same events out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from ...core.errors import FileFormatError
from ...core.units import NS_PER_US
from .base import Parts, TraceFile
from .db_files import Database, database_files, database_rank, quoted

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
        bounds = database.step_bounds()
    finally:
        database.close()
    if bounds is None:
        return {}
    # int(): an int64 ns near 1.7e18 is not exact as a float; Python's int / int rounds once, correctly
    return {int(step): [int(start) / NS_PER_US, int(end) / NS_PER_US]
            for step, start, end in zip(bounds["step"], bounds["start_ns"], bounds["end_ns"])
            if type(start) is int and type(end) is int and end >= start}  # a REAL inf or a text is no time


def traces(folder: Path) -> list[TraceFile]:
    """The rank's profiler database of a folder the database reader claims, as its trace (the database export writes
    no JSON timeline): read by map_timeline, its steps from STEP_TIME where no ProfilerStep#N call marks them."""
    profiler, _ = database_files(folder, Parts())
    if profiler is None:
        return []
    return [TraceFile(database_rank(folder, profiler, None, Parts()), profiler, folder, step_file=profiler,
                      step_bounds=step_bounds_us, events=map_timeline)]


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
    start, end = (f't.{quoted(found[c])}' for c in ("start_ns", "end_ns"))
    times = f"CAST({start} AS INTEGER), CAST({end} AS INTEGER) - CAST({start} AS INTEGER)"
    where = f'FROM "{table}" t {{joins}} WHERE t.rowid BETWEEN ? AND ?'
    if table in ("PYTORCH_API", "CANN_API"):
        thread = f'CAST(t.{quoted(found["thread"])} AS INTEGER)' if "thread" in found else "0"
        shapes = f't.{quoted(found["input_shapes"])}' if "input_shapes" in found else "NULL"
        return f'SELECT {times}, {thread}, t.{quoted(found["name"])}, NULL, {shapes} ' + where.format(joins="")
    if table == "COMMUNICATION_OP":
        group = f't.{quoted(found["group"])}' if "group" in found else "NULL"
        kind = f't.{quoted(found["type"])}' if "type" in found else "NULL"
        return f'SELECT {times}, {group}, t.{quoted(found["name"])}, {kind}, NULL ' + where.format(joins="")
    compute, comm = database.columns("COMPUTE_TASK_INFO"), database.columns("COMMUNICATION_TASK_INFO")
    task_type = f't.{quoted(found["task_type"])}' if "task_type" in found else "NULL"
    stream = f't.{quoted(found["stream"])}' if "stream" in found else "NULL"
    names, types, shapes, joins = [], [task_type], "NULL", []
    if compute:
        joins.append(f'LEFT JOIN "COMPUTE_TASK_INFO" c ON c.{quoted(compute["task"])} = t.{quoted(found["task"])}')
        names.append(f'c.{quoted(compute["name"])}')
        types.insert(0, f'c.{quoted(compute["type"])}')
        shapes = f'c.{quoted(compute["input_shapes"])}' if "input_shapes" in compute else "NULL"
    if comm:  # one name per task (a task may have several rows)
        joins.append(f'LEFT JOIN (SELECT {quoted(comm["task"])} AS task, min({quoted(comm["name"])}) AS name '
                     f'FROM "COMMUNICATION_TASK_INFO" GROUP BY 1) m ON m.task = t.{quoted(found["task"])}')
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
        tids = pc.cast(pc.bit_wise_and(pc.fill_null(lane, 0), (1 << TID_BITS) - 1), pa.string())
        lane_format = "Thread {}"
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

"""Chrome trace JSON arrays (`trace_view.json`, `*_timeline_display_{r}.json`) as Arrow tables, block by block.

Not a Run reader (so not under formats/, the reader registry): only the timeline index
(perfkit/io/timeline.py) reads traces, so `summary` stays fast, and `perfkit trace` never needs pandas.

Why not one `orjson.loads`: a 1 GB trace holds ~5 million events, and building a Python dict for each
takes ~25 s and 7.6 GB (benchmarks/results/timeline.txt). Instead the file is cut into blocks of
~16 MB between two events (`},{`, spaces allowed), and each block is decoded by msgspec into small
structs holding only the fields the timeline uses (every other key is skipped without building an
object), then turned into Arrow columns. Blocks are independent, so the index decodes them in forked
worker processes, one per core (map_blocks); memory is bounded by the blocks in flight, not the trace.
This takes two thirds of the CPU of the design it replaced (~13 s per GB against ~20 s for each block
rewritten one event a line for Arrow's JSON reader), and needs no type guessing: msgspec takes `ts` as a number
or a string of µs, and ids as numbers or strings, event by event.

A block msgspec rejects (NaN, a field of an unexpected JSON type, bytes that are not UTF-8, a cut that
fell inside an event because `},{` appeared in a nested list or a string, a cut-off file) is halved
between events until the piece at fault is ~1 MB, and that piece is read event by event with the
standard library's decoder, which accepts NaN and says where the JSON stops. An event cut in two by a
wrong block boundary is re-read whole with the next block.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Optional, Union

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..core import boundedjson
from ..core.errors import FileFormatError
from ..core.files import open_regular
from ..core.units import BYTES_PER_MB
from .parallel import map_ahead

BLOCK_BYTES = 16 * BYTES_PER_MB
# A block msgspec rejects is halved down to this size before the standard library decodes it.
SLOW_BYTES = BYTES_PER_MB
HEAD_BYTES = BYTES_PER_MB  # where the opening `[` must be
PROBE_BYTES = BYTES_PER_MB  # read at a time when looking for the gap between two events
# Between two events: `},{`, with the spaces or newlines a writer may put around the comma (bounded, so
# that a probe can overlap the previous one by GAP_BYTES and never miss a gap split across two reads).
EVENT_GAP = re.compile(rb"\}[ \t\r\n]{0,32},[ \t\r\n]{0,32}\{")
GAP_BYTES = 67
# Worker processes decoding blocks: one per core, at most this many (each holds ~8x a block in memory:
# the bytes, the decoded structs, the columns).
MAX_WORKERS = 4
# args that the timeline shows or needs, each the first of its keys that the event has (not null): lane
# names and order (M events), shapes, op type (CPU ops: type; device tasks: Task Type).
ARGS = {"name": (("name",), pa.string()), "sort_index": (("sort_index",), pa.int64()),
        "shapes": (("Input Shapes", "Input Dims"), pa.string()), "op_type": (("type", "Task Type"), pa.string())}
# What every block comes out as, whatever the file spelled.
OUTPUT = pa.schema([("ph", pa.string()), ("name", pa.string()), ("cat", pa.string()), ("pid", pa.string()),
                    ("tid", pa.string()), ("ts", pa.float64()), ("dur", pa.float64()), ("id", pa.string()),
                    ("args", pa.struct([(key, kind) for key, (_, kind) in ARGS.items()]))])

# The decoded shape of an event: only these keys become Python objects, the rest are skipped. gc=False:
# millions of them, never in a reference cycle, so the garbage collector need not track them.
class _Args(msgspec.Struct, gc=False, frozen=True):
    """The keys of ARGS: strings as any JSON value (a list of shapes becomes its JSON text); an integer arg
    as an integer only (another type sends the block to the slow path, which drops it)."""
    name: Any = None
    sort_index: Optional[int] = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_shapes: Any = msgspec.field(default=None, name="Input Shapes")
    task_type: Any = msgspec.field(default=None, name="Task Type")
    type: Any = None


NO_ARGS = _Args()


class _Event(msgspec.Struct, gc=False):
    ph: Optional[str] = None
    name: Optional[str] = None
    cat: Optional[str] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    ts: Union[float, str, None] = None   # a JSON integer comes as a float
    dur: Union[float, str, None] = None
    id: Union[int, str, None] = None
    args: _Args = NO_ARGS


_DECODER = msgspec.json.Decoder(list[_Event])


@dataclass
class Stats:
    """What the parse found wrong, for one warning line per file."""
    events: int = 0
    slow_blocks: int = 0
    slow_bytes: int = 0          # bytes decoded by the standard library, not msgspec
    bad_values: int = 0          # ts/dur that are not numbers (strings such as "abc", NaN)
    too_deep: int = 0            # events nested too deep to decode, skipped
    truncated_at: Optional[int] = None  # byte offset where the JSON stops, for a cut-off file
    notes: list = field(default_factory=list)  # other warnings about the file, whole sentences

    def add(self, other: Stats) -> None:
        self.events += other.events
        self.slow_blocks += other.slow_blocks
        self.slow_bytes += other.slow_bytes
        self.bad_values += other.bad_values
        self.too_deep += other.too_deep
        self.notes += other.notes


def chrome_events(pid: str, process: str, lane_format: str, tids: pa.Array, names: pa.Array,
                    starts_us: pa.Array, durations_us: pa.Array, op_types: pa.Array, shapes: pa.Array | None = None,
                    process_order: int | None = None, named: set[str] | None = None) -> pa.Table:
    """Complete ("X") events of one process in OUTPUT's schema, for the timelines that are not Chrome traces
    (trace_text.py, formats/db.py), after the M events a Chrome trace names its lanes with: the process
    (and its order), and each lane of `tids` (named `lane_format.format(tid)`, ordered by the tid where it is
    a number). `named`: the lanes earlier tables of the same file named, skipped (the process too), and
    updated here; None: name them all."""
    named = set() if named is None else named
    metadata = []
    if not named:
        metadata.append(("process_name", None, process, None))
        if process_order is not None:
            metadata.append(("process_sort_index", None, None, process_order))
    for tid in pc.unique(tids).to_pylist():
        if tid not in named:
            named.add(tid)
            number = int(tid) if tid is not None and tid.isdecimal() and len(tid) < 19 else None
            metadata += [("thread_name", tid, lane_format.format(tid) if tid is not None else None, None),
                         ("thread_sort_index", tid, None, number)]
    count = len(starts_us)
    no_text = pa.nulls(count, pa.string())
    runs = pa.Table.from_arrays([
        pa.repeat(pa.scalar("X"), count), names.cast(pa.string()), no_text, pa.repeat(pa.scalar(pid), count),
        tids, starts_us, durations_us, no_text,
        pa.StructArray.from_arrays([no_text, pa.nulls(count, pa.int64()), no_text if shapes is None else shapes,
                                    op_types.cast(pa.string())], fields=list(OUTPUT.field("args").type)),
    ], schema=OUTPUT)
    meta = pa.Table.from_pylist([
        {"ph": "M", "name": kind, "cat": None, "pid": pid, "tid": tid, "ts": None, "dur": None, "id": None,
         "args": {"name": name, "sort_index": sort_index, "shapes": None, "op_type": None}}
        for kind, tid, name, sort_index in metadata], schema=OUTPUT)
    return pa.concat_tables([meta, runs])


def read_blocks(path: Path, stats: Stats | None = None,
                progress: Callable[[int], None] | None = None) -> Iterator[pa.Table]:
    """The events of the trace at `path`, one Arrow table (schema OUTPUT) per block of the file, in file
    order; `progress(bytes read so far)` after each block. Errors as map_blocks."""
    return map_blocks(path, _table, stats, progress)


def _table(number: int, table: pa.Table) -> pa.Table:
    return table


def map_blocks(path: Path, each: Callable[[int, pa.Table], Any], stats: Stats | None = None,
               progress: Callable[[int], None] | None = None, workers: int = 1) -> Iterator:
    """`each(block number, events)` for each block of the trace at `path` that holds events, in file
    order; with `workers` > 1 (and a trace of several blocks), blocks are decoded and `each` run in that
    many forked processes: `each` must then be picklable (a module-level function or a partial of one)
    and its result too.

    Raises FileFormatError when the file is not a JSON array or holds no event at all; a file cut off
    after some events gives those, with `stats.truncated_at` set.
    """
    stats = stats if stats is not None else Stats()
    with open_regular(path) as file:
        size = os.fstat(file.fileno()).st_size
        first = _array_start(file, size, path)
        if workers > 1 and (size - first <= BLOCK_BYTES or "fork" not in multiprocessing.get_all_start_methods()):
            workers = 1
        results = _decoded(_spans(file, first, size), path, each, workers)
        carry = None  # where the bytes that the last block left unread start (an event cut by a wrong gap)
        try:
            for number, ((start, end, last), decoded) in enumerate(results):
                base = start
                if carry is not None:  # decoded from `start` on, which is inside an event: decode it again
                    base = carry
                    decoded = _decode(_body(file, carry, end, last), number, each)
                found, used, length, value = decoded
                stats.add(found)
                if found.events:
                    yield value
                if progress is not None:
                    progress(end)
                if used >= length:
                    carry = None
                elif last or not found.events:  # broken here, not merely a wrong cut: stop
                    stats.truncated_at = base + used
                    break
                else:
                    carry = _next_event(file, base + used, size)
        finally:
            results.close()
    if not stats.events and stats.truncated_at is not None:
        raise FileFormatError(f"is not valid JSON from byte {stats.truncated_at} on, and holds no whole event", path)


def _read_at(file: BinaryIO, offset: int, size: int) -> bytes:
    file.seek(offset)
    return file.read(size)


def _array_start(file: BinaryIO, size: int, path: Path) -> int:
    """The offset just after the opening `[`."""
    head = _read_at(file, 0, HEAD_BYTES)
    start = len(head) - len(head.lstrip())
    if head[start:start + 1] != b"[":
        what = "is empty" if not head.strip() else "is not a JSON array of trace events"
        raise FileFormatError(what, path)
    return start + 1


def _spans(file: BinaryIO, first: int, size: int) -> Iterator[tuple[int, int, bool]]:
    """(start, end, last) of the file's blocks: from `first` on, about BLOCK_BYTES each, each cut at the
    first gap between two events after that; the last runs to the end of the file."""
    start = first
    while True:
        gap = _next_gap(file, start + BLOCK_BYTES, size)
        if gap is None:
            yield start, size, True
            return
        yield start, gap[0], False
        start = gap[1]


def _next_gap(file: BinaryIO, offset: int, size: int) -> tuple[int, int] | None:
    """(end of the event before, start of the event after) of the first gap between events at or after
    `offset`; None when there is none before the end of the file."""
    while offset < size:
        window = _read_at(file, offset, PROBE_BYTES)
        found = EVENT_GAP.search(window)
        if found:
            return offset + found.start() + 1, offset + found.end() - 1
        if offset + len(window) >= size:
            return None
        offset += len(window) - GAP_BYTES
    return None


def _next_event(file: BinaryIO, offset: int, size: int) -> int:
    """`offset` moved past the comma and spaces before the next event."""
    while offset < size:
        window = _read_at(file, offset, 4096)
        skipped = len(window) - len(window.lstrip(b" \t\r\n,"))
        offset += skipped
        if skipped < len(window):
            break
    return offset


def _body(file: BinaryIO, start: int, end: int, last: bool) -> bytearray:
    """`[` + the file's bytes [start, end) + `]`, read in place (a block is decoded as one JSON array, and
    a copy of 16 MB costs as much as a tenth of its decoding); for the last block without the closing `]`."""
    array = bytearray(end - start + 2)
    file.seek(start)
    read = file.readinto(memoryview(array)[1:-1])
    if last:
        body = bytes(array[1:read + 1]).rstrip()
        return bytearray(b"[" + (body[:-1] if body.endswith(b"]") else body) + b"]")
    del array[read + 1:-1]  # the file shrank while read
    array[0], array[-1] = ord("["), ord("]")
    return array


def _decoded(spans: Iterator[tuple[int, int, bool]], path: Path, each: Callable, workers: int) -> Iterator:
    """(span, _decode's answer for its bytes) for each span, in order; `workers` forked processes decode
    ahead of the caller (fork: they start in milliseconds with perfkit imported and never re-run the user's
    __main__; Arrow resets its thread pools in a forked child)."""
    calls = ((path, start, end, last, number, each) for number, (start, end, last) in enumerate(spans))
    for (_, start, end, last, _, _), answer in map_ahead(_decode_span, calls, workers):
        yield (start, end, last), answer


def _decode_span(path: Path, start: int, end: int, last: bool, number: int, each: Callable) -> tuple:
    with open_regular(path) as file:
        return _decode(_body(file, start, end, last), number, each)


def _decode(array: bytearray, number: int, each: Callable) -> tuple[Stats, int, int, Any]:
    """(what was found, bytes of the events decoded, bytes of events in `array` (a JSON array: `[` + events
    + `]`), each(number, events) or None)."""
    stats = Stats()
    try:
        with boundedjson.default_recursion_limit():
            table, used = _fast(array, stats), len(array) - 2
    except _REJECTED:
        table, used = _halves(bytes(array[1:-1]), stats)
    stats.events = len(table)
    return stats, used, len(array) - 2, each(number, table) if len(table) else None


# What msgspec raises for a block it cannot take: ValidationError (a value of a type the structs do not
# take) is a DecodeError; bytes that are not UTF-8 a ValueError.
_REJECTED = (msgspec.DecodeError, ValueError, RecursionError)


def _parsed(body: bytes, stats: Stats) -> tuple[pa.Table, int]:
    """(events of `body`, bytes of it they span): by msgspec, else by halves of `body` (cut between
    events) down to SLOW_BYTES, which the standard library decodes; so one odd event costs ~1 MB of slow
    decoding, not a block."""
    try:
        with boundedjson.default_recursion_limit():
            return _fast(b"[" + body + b"]", stats), len(body)
    except _REJECTED:
        return _halves(body, stats)


def _halves(body: bytes, stats: Stats) -> tuple[pa.Table, int]:
    """As _parsed, for a `body` that msgspec rejected."""
    gap = EVENT_GAP.search(body, len(body) // 2) if len(body) > SLOW_BYTES else None
    if gap is None:
        return _slow(body, stats)
    middle = gap.start() + 1
    left, used = _parsed(body[:middle], stats)
    if used < middle:  # the left half stops early (a cut inside an event, or broken JSON): go on from there
        return left, used
    start = gap.end() - 1
    right, right_used = _parsed(body[start:], stats)
    return pa.concat_tables([left, right]), start + right_used


def _fast(array: bytes | bytearray, stats: Stats) -> pa.Table:
    """`array` (a JSON array of events) through msgspec, into the columns of OUTPUT."""
    events = _DECODER.decode(array)
    # One list comprehension per field: the fastest way found to turn structs into columns (~4 ms per
    # 100,000 events; operator.attrgetter and msgspec.structs.astuple + zip are 2-10x slower).
    args = [event.args for event in events]
    arg_values = ([arg.name for arg in args], [arg.sort_index for arg in args],
                  [arg.input_dims if arg.input_shapes is None else arg.input_shapes for arg in args],
                  [arg.task_type if arg.type is None else arg.type for arg in args])
    arg_columns = [_arg_column(values, kind) for values, (_, kind) in zip(arg_values, ARGS.values())]
    columns = {
        "ph": _text_column([event.ph for event in events]),
        "name": _text_column([event.name for event in events]),
        "cat": _text_column([event.cat for event in events]),
        "pid": _text_column([event.pid for event in events]),
        "tid": _text_column([event.tid for event in events]),
        "ts": _time_column([event.ts for event in events], stats),
        "dur": _time_column([event.dur for event in events], stats),
        "id": _text_column([event.id for event in events]),
        "args": pa.StructArray.from_arrays(arg_columns, fields=list(OUTPUT.field("args").type)),
    }
    return pa.table(columns, schema=OUTPUT)


_CONVERSION_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError)


def _text_column(values: list) -> pa.Array:
    """Strings as they are, numbers (pids, ids) as their text: as _row does."""
    try:
        return pa.array(values, pa.string())
    except _CONVERSION_ERRORS:
        pass
    try:
        return pa.array(values, pa.int64()).cast(pa.string())
    except _CONVERSION_ERRORS:  # both (flow ids are numbers and strings in one file)
        return pa.array([value if value is None or type(value) is str else str(value)  # noqa: E721
                         for value in values], pa.string())


def _time_column(values: list, stats: Stats) -> pa.Array:
    """Numbers or strings of numbers as float64; what is not a finite number null (and counted)."""
    try:
        numbers = pa.array(values, pa.float64())
    except _CONVERSION_ERRORS:
        try:
            numbers = pc.cast(pa.array(values, pa.string()), pa.float64())
        except _CONVERSION_ERRORS:  # both kinds, or a string that is not a number: one by one
            numbers = pa.array([_float(value, stats) for value in values], pa.float64())
    finite = pc.is_finite(numbers)  # null where null; false for NaN and infinities ("nan" strings parse)
    bad = pc.sum(pc.invert(finite).cast(pa.int64())).as_py() or 0
    if bad:
        stats.bad_values += bad
        numbers = pc.if_else(finite, numbers, pa.scalar(None, pa.float64()))
    return numbers


def _arg_column(values: list, kind: pa.DataType) -> pa.Array:
    """An arg as _arg gives it: strings as they are, other JSON values as their JSON text; integers."""
    try:
        return pa.array(values, kind)
    except _CONVERSION_ERRORS:
        return pa.array([_arg(value, kind) for value in values], kind)


def _float(value, stats: Stats) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        stats.bad_values += 1
        return None
    if math.isnan(number) or math.isinf(number):
        stats.bad_values += 1
        return None
    return number


def _slow(body: bytes, stats: Stats) -> tuple[pa.Table, int]:
    """(events of `body` decoded one by one, bytes of `body` they span): stops where the JSON does. Through
    perfkit's bounded decoder: a number out of range is a bad value; an event nested too deep to decode is
    skipped to the next gap after it between two events (counted), where there is one."""
    stats.slow_blocks += 1
    stats.slow_bytes += len(body)
    text = body.decode("utf-8", errors="surrogateescape")
    counts = boundedjson.Counts()
    rows: list[dict] = []
    position, end, parsed_chars = 0, len(text), 0
    while position < end:
        while position < end and text[position] in " \t\r\n,":
            position += 1
        if position >= end:
            parsed_chars = end
            break
        try:
            event, position = boundedjson.decode_value(text, position, counts)
        except boundedjson.TooDeep:
            gap = _AFTER_VALUE.search(text, position)
            if gap is None:
                break
            stats.too_deep += 1
            position = gap.end() - 1
            parsed_chars = position
            continue
        except boundedjson.JSONError:
            break
        parsed_chars = position
        if isinstance(event, dict):
            rows.append(_row(event, stats))
    stats.bad_values += counts.numbers
    used = len(text[:parsed_chars].encode("utf-8", errors="surrogateescape"))
    return pa.Table.from_pylist(rows, schema=OUTPUT), used


# The end of a value in a list of events and the start of the next event: where decoding resumes after an
# event too deep to decode (an array ends in `]`, an object in `}`).
_AFTER_VALUE = re.compile(r"[\]}][ \t\r\n]*,[ \t\r\n]*\{")


def _row(event: dict, stats: Stats) -> dict:
    """One event as a row of OUTPUT."""
    row = {name: _text(event.get(name)) for name in ("ph", "name", "cat", "pid", "tid", "id")}
    row["ts"], row["dur"] = _float(event.get("ts"), stats), _float(event.get("dur"), stats)
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    row["args"] = {name: _arg(next((args[key] for key in keys if args.get(key) is not None), None), kind)
                   for name, (keys, kind) in ARGS.items()}
    return row


def _text(value) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return str(value)
    if value.isascii():
        return value
    # bytes that are not UTF-8 were decoded as surrogates (to keep offsets exact): U+FFFD from here on
    return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _arg(value, kind: pa.DataType):
    if value is None:
        return None
    if pa.types.is_integer(kind):
        return value if isinstance(value, int) and not isinstance(value, bool) and -2**63 <= value < 2**63 else None
    if isinstance(value, str):
        return _text(value)
    try:
        return _text(json.dumps(value, ensure_ascii=False))
    except RecursionError:  # decoded near the recursion limit, then encoded from a deeper stack
        return None

"""Chrome trace JSON arrays (`trace_view.json`, `*_timeline_display_{r}.json`) as Arrow tables, block by block.

Not a Run reader: only the timeline index (perfkit/timeline.py) reads traces, so `summary` stays fast.

Why not one `orjson.loads`: a 1 GB trace holds ~5 million events, and building a Python dict for each
takes ~20 s and several GB (benchmarks/results/timeline.txt). Instead each block of the file (64 MB,
cut after an event) is rewritten as newline-delimited JSON, one event a line, and parsed by Arrow's
JSON reader (C++, multi-threaded) straight into columns, keeping only the fields the timeline uses:

- events are split where one object ends and the next begins (`},{` or `}, {`); raw newlines are
  whitespace (JSON strings cannot hold them) and become spaces first;
- Arrow needs one type per field, but writers differ (`ts` is a string of µs in trace_view.json and a
  number in the legacy files, flow `id`s are numbers and strings in one file): the types are taken from
  the file's first block, and a field seen both ways has its string form renamed (`"id": "7"` ->
  `"id~": "7"`) so that each spelling has its own column.

A block the fast path cannot parse (a `},{` inside a nested list or a string, a type the first block did
not show, NaN, a cut-off file) is halved between events until the piece at fault is ~1 MB, and that piece
is read event by event with the standard library's decoder, which accepts NaN and says where the JSON
stops. Its types then join the sampled ones.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from ..errors import FileFormatError

BLOCK_BYTES = 64 * 1024 * 1024
# The first block is read the slow way to learn the file's field types: small, so that costs ~0.1 s.
FIRST_BLOCK_BYTES = 4 * 1024 * 1024
# Fields whose JSON type depends on the writer (number or string).
VARIANT_FIELDS = ("ts", "dur", "pid", "tid", "id")
STRING_FORM = "~"  # suffix of the renamed string spelling of a variant field
# args that the timeline shows or needs: lane names and order (M events), shapes, op type.
ARGS = {"name": pa.string(), "sort_index": pa.int64(), "Input Dims": pa.string(), "Input Shapes": pa.string(),
        "Task Type": pa.string(), "type": pa.string(), "fullname": pa.string(), "op_full_name": pa.string()}
FIXED = {"ph": pa.string(), "name": pa.string(), "cat": pa.string()}
# What every block comes out as, whatever the file spelled.
OUTPUT = pa.schema([("ph", pa.string()), ("name", pa.string()), ("cat", pa.string()), ("pid", pa.string()),
                    ("tid", pa.string()), ("ts", pa.float64()), ("dur", pa.float64()), ("id", pa.string()),
                    ("args", pa.struct([(key, kind) for key, kind in ARGS.items()]))])
SEPARATORS = (b"},{", b"}, {")
# A block Arrow cannot parse is halved down to this size before the standard library decodes it.
SLOW_BYTES = 1024 * 1024
SAMPLE_BYTES = 64 * 1024  # where a block's spelling (spaces after `,` and `:`) is read from
NEWLINES = bytes.maketrans(b"\r\n", b"  ")
BETWEEN_EVENTS = frozenset(b" \t\r\n,")


@dataclass
class Stats:
    """What the parse found wrong, for one warning line per file."""
    events: int = 0
    slow_blocks: int = 0
    slow_bytes: int = 0          # bytes decoded by the standard library, not Arrow
    bad_values: int = 0          # ts/dur that are not numbers (strings such as "abc", NaN)
    truncated_at: int | None = None  # byte offset where the JSON stops, for a cut-off file
    kinds: dict[str, set[str]] = field(default_factory=lambda: {name: set() for name in VARIANT_FIELDS})


def read_blocks(path: Path, stats: Stats | None = None,
                progress: Callable[[int], None] | None = None) -> Iterator[pa.Table]:
    """The events of the trace at `path`, one Arrow table (schema OUTPUT) per block of the file;
    `progress(bytes read so far)` after each block.

    Raises FileFormatError when the file is not a JSON array or holds no event at all; a file cut off
    after some events gives those, with `stats.truncated_at` set.
    """
    stats = stats if stats is not None else Stats()
    with open(path, "rb") as file:
        head = file.read(FIRST_BLOCK_BYTES)
        start = len(head) - len(head.lstrip())
        if head[start:start + 1] != b"[":
            what = "is empty" if not head.strip() else "is not a JSON array of trace events"
            raise FileFormatError(what, path)
        buffer, offset, at_end, hungry = head[start + 1:], start + 1, False, False
        while True:
            limit = BLOCK_BYTES if _typed(stats) else FIRST_BLOCK_BYTES
            if not at_end and (hungry or len(buffer) < limit):
                more = file.read(BLOCK_BYTES)
                at_end, hungry = not more, False
                buffer += more
                continue
            table, used = _block(buffer, at_end, stats, offset, limit)
            if used == 0 and not at_end:  # no event ends in the buffer (one event longer than a block)
                hungry = True
                continue
            if table is not None and table.num_rows:
                stats.events += table.num_rows
                yield table
            if progress is not None:
                progress(offset + used)
            while used < len(buffer) and buffer[used] in BETWEEN_EVENTS:  # the comma before the next event
                used += 1
            buffer, offset = buffer[used:], offset + used
            if (at_end and not buffer) or stats.truncated_at is not None:
                break
    if not stats.events and stats.truncated_at is not None:
        raise FileFormatError(f"is not valid JSON from byte {stats.truncated_at} on, and holds no whole event", path)


def _typed(stats: Stats) -> bool:
    return any(stats.kinds.values())


def _block(buffer: bytes, file_read: bool, stats: Stats, offset: int, limit: int) -> tuple[pa.Table | None, int]:
    """(events of the complete objects in about the first `limit` bytes of `buffer`, bytes consumed; 0 when
    no event ends in it). Where the JSON breaks off, `stats.truncated_at` is set and the events before it
    are returned. `file_read`: the buffer holds the rest of the file."""
    cut = max(buffer.rfind(separator, 0, limit) for separator in SEPARATORS)
    if cut < 0:
        cut = max(buffer.rfind(separator) for separator in SEPARATORS)
    last = file_read and (len(buffer) <= limit or cut < 0)
    if last:
        body = buffer.rstrip()
        if body.endswith(b"]"):
            body = body[:-1]
    elif cut < 0:
        return None, 0
    else:
        body = buffer[:cut + 1]
    table, parsed = _parsed(body, stats) if _typed(stats) else _slow(body, stats)
    if parsed < len(body.rstrip()) and (last or not table.num_rows):
        stats.truncated_at = offset + parsed  # broken here, not merely a wrong cut: stop
    return table, (len(buffer) if last else parsed)


def _parsed(body: bytes, stats: Stats) -> tuple[pa.Table, int]:
    """(events of `body`, bytes of it they span): by Arrow, else by halves of `body` (cut between events)
    down to SLOW_BYTES, which the standard library decodes; so one odd event costs ~1 MB of slow decoding,
    not 64, and the types it shows serve the pieces after it."""
    try:
        return _fast(body, stats), len(body)
    except (pa.ArrowInvalid, ValueError):
        pass
    middle = max(body.rfind(separator, 0, len(body) // 2) for separator in SEPARATORS) \
        if len(body) > SLOW_BYTES else -1
    if middle <= 0:
        return _slow(body, stats)
    left, used = _parsed(body[:middle + 1], stats)
    if used < middle + 1:  # the left half stops early (a cut inside an event, or broken JSON): go on from there
        return left, used
    start = middle + 1
    while start < len(body) and body[start] in BETWEEN_EVENTS:
        start += 1
    right, right_used = _parsed(body[start:], stats)
    return pa.concat_tables([left, right]), start + right_used


def _fast(body: bytes, stats: Stats) -> pa.Table:
    """`body` (whole events separated by commas) through Arrow's JSON reader."""
    # Writers differ in spacing (json.dumps: `}, {` and `": `; orjson: neither; MindInsight: `},{` and `": `);
    # each full pass over 64 MB costs ~0.1 s, so only the spelling the block's start uses is rewritten. A
    # block that mixes them fails in Arrow and is read the slow way.
    sample = body[:SAMPLE_BYTES]
    if b"\n" in body:
        body = body.translate(NEWLINES)
    separators = [separator for separator in SEPARATORS if separator in sample] or SEPARATORS
    for separator in separators:
        body = body.replace(separator, b"}\n{")
    colon = b'": ' if b'": ' in sample else b'":'
    fields = dict(FIXED)
    for name, kinds in stats.kinds.items():
        numbers = kinds - {"str"}
        if not kinds:  # not seen yet: a string, or the block fails and the slow path learns its type
            fields[name] = pa.string()
        if numbers:
            fields[name] = pa.int64() if numbers == {"int"} else pa.float64()
        if "str" in kinds:
            fields[name + STRING_FORM if numbers else name] = pa.string()
            if numbers:
                body = body.replace(f'"{name}'.encode() + colon + b'"', f'"{name}{STRING_FORM}'.encode() + colon + b'"')
    fields["args"] = pa.struct(list(ARGS.items()))
    schema = pa.schema(list(fields.items()))
    table = pj.read_json(io.BytesIO(body), parse_options=pj.ParseOptions(explicit_schema=schema,
                                                                         unexpected_field_behavior="ignore"))
    return _normalized(table, stats)


def _normalized(table: pa.Table, stats: Stats) -> pa.Table:
    """Columns of OUTPUT from the fields as Arrow read them (numbers, strings or both)."""
    columns = {}
    for name in ("ph", "name", "cat"):
        columns[name] = table.column(name)
    for name in VARIANT_FIELDS:
        kind = OUTPUT.field(name).type
        parts = [table.column(spelling) for spelling in (name, name + STRING_FORM) if spelling in table.column_names]
        values = [_as_float(part, stats) if pa.types.is_floating(kind) else pc.cast(part, pa.string())
                  for part in parts]
        column = values[0] if len(values) == 1 else pc.coalesce(*values)
        columns[name] = column if column.type == kind else pc.cast(column, kind)
    columns["args"] = table.column("args")
    return pa.table(columns, schema=OUTPUT)


def _as_float(column: pa.ChunkedArray, stats: Stats) -> pa.ChunkedArray:
    """Numbers as float64; strings parsed; what is not a finite number null (and counted)."""
    try:
        numbers = pc.cast(column, pa.float64())
    except pa.ArrowInvalid:  # some string is not a number: parse one by one
        numbers = pa.chunked_array([pa.array([_float(value, stats) for value in column.to_pylist()], pa.float64())])
    finite = pc.is_finite(numbers)  # null where null; false for NaN and infinities (Arrow reads NaN too)
    bad = pc.sum(pc.invert(finite).cast(pa.int64())).as_py() or 0
    if bad:
        stats.bad_values += bad
        numbers = pc.if_else(finite, numbers, pa.scalar(None, pa.float64()))
    return numbers


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
    """(events of `body` decoded one by one, bytes of `body` they span): stops where the JSON does."""
    stats.slow_blocks += 1
    stats.slow_bytes += len(body)
    text = body.decode("utf-8", errors="surrogateescape")
    decoder = json.JSONDecoder()
    rows: list[dict] = []
    position, end, parsed_chars = 0, len(text), 0
    while position < end:
        while position < end and text[position] in " \t\r\n,":
            position += 1
        if position >= end:
            parsed_chars = end
            break
        try:
            event, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            break
        parsed_chars = position
        if isinstance(event, dict):
            rows.append(_row(event, stats))
    used = len(text[:parsed_chars].encode("utf-8", errors="surrogateescape"))
    return pa.Table.from_pylist(rows, schema=OUTPUT), used


def _row(event: dict, stats: Stats) -> dict:
    """One event as a row of OUTPUT; records the JSON types of the variant fields for the fast path."""
    row = {"ph": _text(event.get("ph")), "name": _text(event.get("name")), "cat": _text(event.get("cat"))}
    for name in VARIANT_FIELDS:
        value = event.get(name)
        if value is not None:
            stats.kinds[name].add("str" if isinstance(value, str) else "int" if isinstance(value, int)
                                  and not isinstance(value, bool) else "float")
        if name in ("ts", "dur"):
            row[name] = _float(value, stats)
        else:
            row[name] = _text(value)
    args = event.get("args")
    args = args if isinstance(args, dict) else {}
    row["args"] = {key: _arg(args.get(key), kind) for key, kind in ARGS.items()}
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
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return _text(value) if isinstance(value, str) else _text(json.dumps(value, ensure_ascii=False))

"""The one JSON decoder for every JSON text perfkit reads (profiler files, cells holding JSON, its own
manifests and cache descriptions), with bounds a hostile or damaged file cannot get past:

- nesting: the C decoder recurses once per level and raises RecursionError (not a ValueError) at the
  interpreter's recursion limit (~1,000 levels less the caller's stack; no profiler writes more than ~10):
  that is caught and said. A scan for the depth first would cost more than the decode (tried: 2-3x).
- numbers: an integer outside int64, a float that overflows to infinity (`9e999`), and the non-standard
  `NaN` / `Infinity` literals become None (unknown): the model's columns are int64 and finite floats,
  and Python's int would otherwise carry a 400-digit value as far as the first cast.
- strings: a lone UTF-16 surrogate escape (`"\\ud800"`) becomes U+FFFD: such a str cannot be written
  as UTF-8 (the cache, an export, the terminal raise UnicodeEncodeError).

Each change is counted; `notes` words them for the one warning the caller gives, naming the file.
The number hooks cost ~17 % over the plain C decoder (8.5 MB: 0.62 s against 0.53 s); the walk over the
strings runs only when the text holds a surrogate escape.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from typing import Any

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

_SPACE = re.compile(r"[ \t\n\r]*")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class JSONError(ValueError):
    """Not JSON, or JSON past the bounds; `message` is a phrase for `FileFormatError(message, path)`."""

    def __init__(self, message: str, position: int | None = None):
        super().__init__(message)
        self.message, self.position = message, position


class TooDeep(JSONError):
    """A value nested past the decoder's recursion limit; `position`: where the value starts."""

    def __init__(self, position: int):
        super().__init__("is nested too deep to read (arrays or objects over ~1,000 levels inside each other)",
                         position)


class Counts:
    """What the decoder changed, to be said once per file."""

    def __init__(self) -> None:
        self.numbers = 0
        self.surrogates = 0

    def notes(self) -> list[str]:
        notes = []
        if self.numbers:
            notes.append(f"{self.numbers} number(s) out of range or not finite read as unknown")
        if self.surrogates:
            notes.append(f"{self.surrogates} string(s) with a lone UTF-16 surrogate, replaced by U+FFFD")
        return notes


def loads(text: str, counts: Counts | None = None) -> Any:
    """`text` decoded within the bounds above; raises JSONError where it is not JSON or nested too deep."""
    value = _plain(text) if len(text) >= PLAIN_MIN_CHARS else _NOT_PLAIN
    if value is not _NOT_PLAIN:
        return value
    counts = counts if counts is not None else Counts()
    value, end = decode_value(text, 0, counts)
    if text[end:].strip():
        raise JSONError(f"is not valid JSON (extra data at character {end})", end)
    return value


# orjson decodes ~3x faster than json with the number hooks (a cluster run reads a 100 KB communication.json per
# rank: 0.8 ms instead of 2.2 with the check below). Where orjson accepts a text, its value is json's, except for
# what the bounds change: orjson refuses NaN, Infinity, numbers that overflow a double and lone surrogates (those
# texts go to the bounded decoder, which says them), but keeps integers up to 2**64 - 1 and makes larger ones floats,
# and nests to 1,024 levels. So its value is taken only when every integer fits int64, every float is below 2**63
# in magnitude (no integer past int64 hides in it) and nothing nests deeper than PLAIN_DEPTH; else the bounded
# decoder reads the text.
PLAIN_DEPTH = 100
# Shorter texts (a job description, a manifest, a profiler_info file) are decoded by json alone: the gain is
# microseconds, and the profiler's start-up hook (perfkit/profiler/attach.py) stays standard library only.
PLAIN_MIN_CHARS = 4096
_NOT_PLAIN = object()


def _plain(text: str) -> Any:
    """orjson's value of `text` where it is the bounded decoder's, else _NOT_PLAIN."""
    import orjson

    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _NOT_PLAIN
    return value if _within_bounds(value) else _NOT_PLAIN


def needs_no_bounds(raw: bytes) -> bool:
    """Whether the JSON text `raw` is one whose value `loads` gives unchanged, with nothing counted and no
    TooDeep: no backslash (so no escape and no lone surrogate); no number with 19 digits or more before its
    point or with an exponent of 3 digits or more (so no integer past int64, none that a decoder makes a float
    past u64, no float past a double: any such number has one or the other); nesting at most PLAIN_DEPTH
    levels. False also where the bytes cannot tell (such digits inside a string, a bracket inside a string).
    The text must be JSON: NaN and Infinity, which json takes, are the caller's decoder's to refuse (msgspec
    and orjson do), as is a text that is not UTF-8.

    For a reader that decodes a file its own way, into only the fields it uses (msgspec; formats/communication.py,
    a file per rank of a cluster): the bounds of the whole text, as `loads` keeps them, read off the bytes by
    numpy and bytes.translate in ~0.15 ms per 100 KB, where a walk over the decoded value (`_within_bounds`) costs
    ~0.4 ms and needs every value built. Where it says False the caller decodes the text with `loads`."""
    return len(raw) >= _SHORTEST_SCANNED and b"\\" not in raw and _numbers_bounded(raw) and _nesting_bounded(raw)


# needs_no_bounds reads texts shorter than this as unbounded (the 19-digit windows below need room; such a text
# is decoded in microseconds anyway).
_SHORTEST_SCANNED = 64
_EXPONENT_PAST_99 = re.compile(rb"[eE][-+]?[0-9]{3}")
_SCRATCH = threading.local()
_SCRATCH_BYTES = 1 << 22  # a longer text gets arrays of its own, so that a thread keeps at most 3 x 4 MB


def _numbers_bounded(raw: bytes) -> bool:
    """No number in `raw` with 19 digits before its point or 3 in its exponent (those in strings count too)."""
    import numpy as np

    text = np.frombuffer(raw, np.uint8)
    n = text.size
    digit, one, two = _scratch(n)
    np.less(np.subtract(text, ord("0"), out=one.view(np.uint8)), 10, out=digit)
    # an exponent's e follows a digit (in JSON nothing else does outside strings); each such e read exactly
    np.equal(np.bitwise_or(text, 0x20, out=one.view(np.uint8)), ord("e"), out=two)
    np.logical_and(two[1:], digit[:-1], out=one[1:])
    if one[1:].any():
        if any(_EXPONENT_PAST_99.match(raw, at) for at in np.flatnonzero(one[1:]) + 1):
            return False
    # 19 digits in a row from each position, by doubling: runs of 2, 4, 8, 16, then 16 here and 16 three on
    np.logical_and(digit[:n - 1], digit[1:], out=one[:n - 1])
    np.logical_and(one[:n - 3], one[2:n - 1], out=two[:n - 3])
    np.logical_and(two[:n - 7], two[4:n - 3], out=one[:n - 7])
    np.logical_and(one[:n - 15], one[8:n - 7], out=two[:n - 15])
    np.logical_and(two[:n - 18], two[3:n - 15], out=one[:n - 18])
    if one[0]:
        return False
    # ... where a run starts (no digit before) after a byte that may stand before a number's first digit: a
    # minus, [, or one up to ':' but a point (a fraction's digits) -- which counts a few that may not ('"')
    m = n - 19
    np.greater(one[1:m + 1], digit[:m], out=two[:m])
    np.less_equal(text[:m], ord(":"), out=one[:m])
    np.not_equal(text[:m], ord("."), out=digit[:m])
    np.logical_and(one[:m], digit[:m], out=one[:m])
    np.equal(text[:m], ord("["), out=digit[:m])
    np.logical_or(one[:m], digit[:m], out=one[:m])
    np.logical_and(two[:m], one[:m], out=two[:m])
    return not two[:m].any()


def _scratch(n: int):
    """Three bool arrays of `n` for the calling thread, kept between calls: fresh 100 KB temporaries on every
    call make glibc give the memory back and fault it in again (~180 page faults a call, costing more than the
    scan itself)."""
    import numpy as np

    if n > _SCRATCH_BYTES:
        return np.empty((3, n), np.bool_)
    buffers = getattr(_SCRATCH, "buffers", None)
    if buffers is None or buffers.shape[1] < n:
        buffers = _SCRATCH.buffers = np.empty((3, max(n, 1 << 17)), np.bool_)
    return buffers[:, :n]


def _nesting_bounded(raw: bytes) -> bool:
    """`raw` (with no backslash) nests at most PLAIN_DEPTH levels, and no string in it holds a bracket."""
    import numpy as np

    # Quotes and brackets alone, in order. Without backslashes every quote opens or closes a string, in turn;
    # where no string holds a bracket each string is two neighbouring quotes here, so every run of quotes is of
    # even length (and the first string that holds one ends a run of odd length with its opening quote): then
    # the brackets are the structure's.
    marks = raw.translate(None, _NOT_QUOTE_OR_BRACKET)
    if marks.count(b'""') * 2 != marks.count(b'"'):
        return False
    # '[' 0x5B and '{' 0x7B have bit 1 set, ']' 0x5D and '}' 0x7D not: each +1 opens a level, -1 closes one
    levels = (np.frombuffer(marks.translate(None, b'"'), np.int8) & 2) - 1
    return levels.size == 0 or int(np.cumsum(levels, dtype=np.int32).max()) <= PLAIN_DEPTH


_NOT_QUOTE_OR_BRACKET = bytes(c for c in range(256) if c not in b'"[]{}')


def _within_bounds(value: Any) -> bool:
    """Whether every number of `value` is one the bounded decoder keeps as it is and it nests at most PLAIN_DEPTH
    levels (a walk level by level, the containers alone queued)."""
    level = [[value]]
    for _ in range(PLAIN_DEPTH + 1):
        deeper = []
        for container in level:
            for item in (container.values() if type(container) is dict else container):
                kind = type(item)
                if kind is dict or kind is list:
                    deeper.append(item)
                elif kind is int:
                    if not INT64_MIN <= item <= INT64_MAX:
                        return False
                elif kind is float and not -2.0**63 < item < 2.0**63:
                    return False
        if not deeper:
            return True
        level = deeper
    return False


def decode_value(text: str, position: int, counts: Counts) -> tuple[Any, int]:
    """(the JSON value starting at `position` of `text`, after spaces; where it ends): json's raw_decode
    with the number and string bounds, for a text of many values read one by one (a trace's events).
    A value nested too deep raises JSONError whose `position` is the value's start."""
    start = _SPACE.match(text, position).end()
    with default_recursion_limit():
        try:
            value, end = _decoder(counts).raw_decode(text, start)
        except json.JSONDecodeError as exc:
            raise JSONError(f"is not valid JSON ({exc.msg} at line {exc.lineno}; cut off mid-write?)", exc.pos) \
                from None
        except RecursionError:
            raise TooDeep(start) from None
        if _SURROGATE_ESCAPE.search(text, start, end):
            try:
                value = _without_lone_surrogates(value, counts)
            except RecursionError:
                raise TooDeep(start) from None
    return value, end


# The nesting bound is the interpreter's default recursion limit. A library that raised the limit for its own
# ends (hypothesis does while it runs a test) would otherwise let 5,000-deep values through.
DEFAULT_RECURSION_LIMIT = 1000


@contextlib.contextmanager
def default_recursion_limit():
    """Within it, nesting is bounded at the default recursion limit (json, msgspec and orjson recurse per level)."""
    raised = sys.getrecursionlimit()
    if raised <= DEFAULT_RECURSION_LIMIT:
        yield
        return
    try:
        sys.setrecursionlimit(DEFAULT_RECURSION_LIMIT)
    except RecursionError:  # this call is already deeper than the default: keep the raised limit
        yield
        return
    try:
        yield
    finally:
        sys.setrecursionlimit(raised)


def _decoder(counts: Counts) -> json.JSONDecoder:
    def unknown(_token: str) -> None:
        counts.numbers += 1
        return None

    def integer(token: str) -> int | None:
        if len(token) < 19:
            return int(token)
        if len(token) > 20:  # also keeps int() from Python's 4,300-digit limit (a ValueError)
            return unknown(token)
        value = int(token)
        return value if INT64_MIN <= value <= INT64_MAX else unknown(token)

    def real(token: str) -> float | None:
        value = float(token)
        return value if value - value == 0 else unknown(token)  # inf - inf is nan

    return json.JSONDecoder(parse_int=integer, parse_float=real, parse_constant=unknown)


def _without_lone_surrogates(value: Any, counts: Counts) -> Any:
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value):
            counts.surrogates += 1
            return _LONE_SURROGATE.sub("\ufffd", value)
        return value
    if isinstance(value, list):
        return [_without_lone_surrogates(item, counts) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(key, counts): _without_lone_surrogates(item, counts)
                for key, item in value.items()}
    return value

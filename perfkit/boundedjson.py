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
import sys
import re
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
    counts = counts if counts is not None else Counts()
    value, end = decode_value(text, 0, counts)
    if text[end:].strip():
        raise JSONError(f"is not valid JSON (extra data at character {end})", end)
    return value


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

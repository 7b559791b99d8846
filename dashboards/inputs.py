"""Every value a browser sends the dashboard passes here, the one place that checks it, before a callback
uses it (issue 25: a step of `1e400` reached `int()` in a Timeline callback: OverflowError, a 500).

The request body itself is bounded in app.py (_bounded_requests): at most MAX_BODY_BYTES, decoded by
perfkit's bounded JSON decoder, which makes a number no int64 or finite float holds (`1e400`, `Infinity`,
a 30-digit integer) None and answers 400 to a body nested too deep. What reaches a callback is then JSON
within bounds, but of any type: these functions take what they need from it or give None.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1
_INTEGER = re.compile(r"[+-]?[0-9]{1,19}")  # longer is out of int64's range anyway
# Longer query strings and texts are cut: a URL or a search box never needs more.
MAX_TEXT = 2000


def integer(value: Any, low: int = INT64_MIN, high: int = INT64_MAX) -> int | None:
    """`value` as an int in [low, high] when it is one (an int, or a string of one); None otherwise. A
    bool, a float (1.0, inf) or a number out of range is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        if not _INTEGER.fullmatch(value.strip()):
            return None
        value = int(value)
    if not isinstance(value, int):
        return None
    return value if low <= value <= high else None


def run_index(value: Any, count: int) -> int | None:
    """A run index from a callback input, or None when it is not one of the loaded runs."""
    return integer(value, 0, count - 1)


def query_value(search: Any, key: str, default: str) -> str:
    """One value of the URL's query string (`?run=1`), `default` when absent or unreadable."""
    if not isinstance(search, str):
        return default
    return parse_qs(search[:MAX_TEXT].lstrip("?")).get(key, [default])[0]


def text(value: Any) -> str:
    """A text input (a search box), "" when it is none, cut at MAX_TEXT."""
    return value[:MAX_TEXT] if isinstance(value, str) else ""

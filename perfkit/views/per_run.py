"""`once_per_run`: a view's value computed once per loaded Run and forgotten with it.

A page draws several panels from the same summary, and on big runs one call costs seconds (summarize over 256
ranks ~1 s, the advisor over a million op rows ~6 s). The memo holds each Run weakly: a value must not hold its
Run (views.summary.Summary, which does, is made afresh around the memoized dict), or the Run would never be freed.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

from ..core.model import Run

_MEMO: dict[tuple, tuple[weakref.ref, Any]] = {}


def once_per_run(compute: Callable[[Run], Any]) -> Callable[[Run], Any]:
    """`compute(run)`, computed once per loaded run and forgotten with it. A run whose tables are replaced is
    computed afresh."""
    def cached(run: Run):
        key = (compute.__module__, compute.__name__, id(run), *run.table_versions())
        hit = _MEMO.get(key)
        if hit is not None and hit[0]() is run:
            return hit[1]
        value = compute(run)
        # the memo bound now: at interpreter exit a run may outlive the module's globals
        _MEMO[key] = (weakref.ref(run, lambda _ref, key=key, memo=_MEMO: memo.pop(key, None)), value)
        return value
    cached.__doc__ = compute.__doc__
    cached.__name__ = compute.__name__
    return cached

"""`perfkit profile`: train the seed's ResNet-50, or the user's own script, under the MindSpore profiler and
write a run folder; `perfkit.profiling`/`perfkit.StepTimer` for profiling from inside a script.

The only part of perfkit that uses MindSpore, and only inside the processes it profiles: importing this
package does not import MindSpore. Its names load on first use (the user's script imports this package at
start-up under `perfkit profile -- …`, and should not pay for the launcher's imports).
"""

from __future__ import annotations

import importlib

_LAZY = {name: "launch" for name in ("AMP_LEVELS", "DEVICE_CHOICES", "MODES", "ProfileOutcome", "ProfileRequest",
                                     "parse_env", "profile")}
_LAZY.update({"ScriptRequest": "script", "profile_script": "script", "profiling": "api", "StepTimer": "api"})

__all__ = [*_LAZY, "report"]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def report(outcome) -> str:
    """What to print when a run is done: its summary, the advisor's findings and how to open the dashboard.

    A run stopped at once may hold no profiler files yet; that is said, not raised.
    """
    from ..advisor import advise
    from ..core.errors import PerfkitError
    from ..io.loader import load
    from ..render.advice import advice_text
    from ..render.text import summary_text
    from ..views.summary import summarize

    try:
        run = load(outcome.folder)
    except PerfkitError as exc:
        if outcome.status == "ok":
            raise
        return f"nothing to summarise: {exc}"
    return "\n\n".join([summary_text(summarize(run)), advice_text(advise(run)),
                         f"open the dashboard:  perfkit dash {outcome.folder}"])

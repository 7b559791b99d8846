"""`perfkit profile`: train the seed's ResNet-50 under the MindSpore profiler and write a run folder.

The only part of perfkit that uses MindSpore, and only inside the training process it starts
(perfkit/profiler/train.py): importing this package does not import MindSpore.
"""

from __future__ import annotations

from .launch import AMP_LEVELS, DEVICE_CHOICES, MODES, ProfileOutcome, ProfileRequest, parse_env, profile

__all__ = ["profile", "ProfileRequest", "ProfileOutcome", "parse_env", "report", "DEVICE_CHOICES", "AMP_LEVELS",
           "MODES"]


def report(outcome: ProfileOutcome) -> str:
    """What to print when a run is done: its summary, the advisor's findings and how to open the dashboard.

    A run stopped at once may hold no profiler files yet; that is said, not raised.
    """
    from .. import load
    from ..advisor import advise
    from ..advisor.render import advice_text
    from ..analysis import summarize
    from ..errors import PerfkitError
    from ..render import summary_text

    try:
        run = load(outcome.folder)
    except PerfkitError as exc:
        if outcome.status == "ok":
            raise
        return f"nothing to summarise: {exc}"
    return "\n\n".join([summary_text(summarize(run)), advice_text(advise(run)),
                         f"open the dashboard:  perfkit dash {outcome.folder}"])

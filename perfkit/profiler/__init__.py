"""`perfkit profile`: train the seed's ResNet-50, or the user's own script, under the MindSpore profiler and
write a run folder; `perfkit.profiling`/`perfkit.StepTimer` for profiling from inside a script.

The only part of perfkit that uses MindSpore, and only inside the processes it profiles: importing this
package imports neither MindSpore nor the launcher (the user's script imports the package at start-up under
`perfkit profile -- …`, and should not pay for the launcher's imports). Callers import the module they use:
profiler.launch (the built-in run), profiler.script (the user's script), profiler.api (`perfkit.profiling`,
`perfkit.StepTimer`), profiler.repeat (`--repeat`).
"""

from __future__ import annotations


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

"""perfkit's public API: one function per question, each a view of one loaded Run.

>>> run = perfkit.load("profiler_v1")          # doctest: +SKIP
>>> perfkit.summarize(run)["bound"]             # doctest: +SKIP
>>> perfkit.advise(run).findings[0].action      # doctest: +SKIP

Importing it imports pandas and the readers, never plotly, Dash or MindSpore: the figures are imported by the
views that draw them (perfkit.show, the report, the dashboard), MindSpore only inside a profiled process.
"""

from __future__ import annotations

from typing import Collection, Sequence

from .advisor import Advice, advise
from .analysis.cells import cells
from .analysis.ledger import ledger
from .analysis.representatives import representative_ranks
from .core.errors import DeviceError, FileFormatError, LayoutError, PerfkitError
from .core.model import Meta, Run
from .io import loader
from .io.loader import load_steps
from .io.timeline import timeline
from .profiler.api import profiling, step_timer_class
from .views.compare import Comparison
from .views.compare import compare as compare_runs
from .views.summary import summarize

__all__ = ["load", "load_steps", "Run", "Meta", "summarize", "advise", "Advice", "compare", "ledger", "cells",
           "timeline", "show", "profiling", "StepTimer", "PerfkitError", "LayoutError", "FileFormatError",
           "DeviceError"]


def load(path, dask=None, cycle=None, ranks: Collection[int] | str | None = None) -> Run:
    """Read a MindSpore profiler folder into a `Run` (io/loader.py: `dask`, `cycle`). `ranks`: whose op-level tables
    (kernels, op types, memory, Cells) to read, every rank's step, communication and metadata tables being read:
    None, every rank's in a run of at most 16 ranks and the representative ranks of a larger one (the slowest,
    fastest and median of each pipeline stage and the ranks a slow-rank finding names:
    analysis/representatives.py); "all", every rank's; or those ranks. `run.meta.op_ranks` names them where they
    are not all."""
    chosen = representative_ranks if ranks is None else None if ranks == "all" else ranks
    return loader.load(path, dask, cycle, chosen)


def compare(run_a: Run, run_b: Run, repeats_a: Sequence[Run] = (), repeats_b: Sequence[Run] = ()
            ) -> Comparison | dict:
    """Run B relative to run A: the `perfkit compare --format json` dict (docs/compare.md), which also knows its
    two runs (`.runs`). `repeats_a`/`repeats_b`: more runs of each side (`perfkit profile --repeat`), which the
    noise verdict then measures the spread of. A PyTorch reference and its MindSpore port (either order) give the
    migration view's dict instead, as `perfkit compare` prints it (docs/migration.md)."""
    from .views.migration import compare_across
    across = compare_across([run_a, *repeats_a], [run_b, *repeats_b])
    if across is not None:
        return across
    return Comparison(compare_runs(run_a, run_b, repeats_a, repeats_b), (run_a, run_b))


def show(value) -> None:
    """Display a Run, a summary, an Advice or a comparison in Jupyter, as the report shows it."""
    from .render.notebook import show as display
    display(value)


def __getattr__(name: str):
    # StepTimer subclasses MindSpore's Callback: made on first use, so that the API imports no MindSpore.
    if name == "StepTimer":
        return step_timer_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

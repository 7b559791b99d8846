"""perfkit: read MindSpore profiler output, explain where training time goes, and say what to change.

The public names are perfkit.api's (docs/api.md), imported on first use (PEP 562), so `import perfkit` costs
nothing: a warm `perfkit summary` answers from the cache without importing pandas (perfkit/io/cache.py).
"""

from __future__ import annotations

import importlib
import sys

from .core.version import __version__

PUBLIC = frozenset({"load", "load_steps", "Run", "Meta", "summarize", "advise", "Advice", "compare", "ledger",
                    "cells", "timeline", "show", "profiling", "StepTimer", "PerfkitError", "LayoutError",
                    "FileFormatError", "DeviceError"})

__all__ = [*sorted(PUBLIC), "__version__"]


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'perfkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(".api", __name__), name)
    if name != "StepTimer":
        globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


# How Jupyter shows perfkit's results, as the report does: (module, class) -> render/notebook.py's (html, text)
# functions. Registered with IPython's formatters by name, so that no class imports the renderer (which sits
# above it) and nothing is imported until a result is displayed.
NOTEBOOK_DISPLAY = {("perfkit.core.model", "Run"): ("run_html", "run_text"),
                    ("perfkit.advisor", "Advice"): ("advice_html", "advice_text"),
                    ("perfkit.views.summary", "Summary"): ("summary_html", "summary_plain"),
                    ("perfkit.views.compare", "Comparison"): ("comparison_html", "comparison_plain")}


def _register_notebook_display() -> None:
    """Register NOTEBOOK_DISPLAY with the running IPython (a Jupyter kernel); nothing outside IPython."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is None:
        return
    formatters = shell.display_formatter.formatters

    def shown(function: str):
        return lambda value, *printer: getattr(importlib.import_module(".render.notebook", __name__),
                                               function)(value, *printer)

    for (module, name), (html, text) in NOTEBOOK_DISPLAY.items():
        formatters["text/html"].for_type_by_name(module, name, shown(html))
        formatters["text/plain"].for_type_by_name(module, name, shown(text))


_register_notebook_display()

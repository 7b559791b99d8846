"""perfkit: read MindSpore profiler output, explain where training time goes, and say what to change.

The public names are imported on first use (PEP 562), so `import perfkit` costs nothing: a warm
`perfkit summary` answers from the cache without importing pandas (perfkit/cache.py, answers).
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

# public name -> module that defines it
_PUBLIC = {
    "load": "loader", "load_steps": "loader",
    "Run": "model", "Meta": "model",
    # summarize (summary.py) and compare return their JSON dicts, which also show themselves in Jupyter (notebook.py)
    "summarize": "notebook", "show": "notebook",
    "advise": "advisor",
    "compare": "notebook",
    "PerfkitError": "errors", "LayoutError": "errors", "FileFormatError": "errors", "DeviceError": "errors",
    # profiling from inside a script; StepTimer imports MindSpore when first looked up (it subclasses its Callback)
    "profiling": "profiler.api", "StepTimer": "profiler.api",
}

__all__ = [*_PUBLIC, "timeline", "ledger", "cells", "__version__"]


def __getattr__(name: str):
    if name in ("timeline", "ledger", "cells"):  # modules callable: perfkit.timeline(run, step=N), perfkit.cells(run)
        return importlib.import_module(f".{name}", __name__)
    if name not in _PUBLIC:
        raise AttributeError(f"module 'perfkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


# Shown in Jupyter as the report shows them (perfkit/notebook.py): (module, class) -> notebook's (html, text) functions.
# Summary and Comparison (perfkit.summarize's and perfkit.compare's results) carry _repr_html_ themselves; Run and
# Advice cannot: model.py and advisor/ importing notebook.py, which renders through them, would close an import
# cycle. They are registered with IPython's display formatters by name instead, from here, where every other part
# of perfkit is reached lazily too.
NOTEBOOK_DISPLAY = {("perfkit.model", "Run"): ("run_html", "run_text"),
                    ("perfkit.advisor", "Advice"): ("advice_html", "advice_text")}


def _register_notebook_display() -> None:
    """Register NOTEBOOK_DISPLAY with the running IPython (a Jupyter kernel); nothing outside IPython."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is None:
        return
    formatters = shell.display_formatter.formatters

    def shown(function: str):
        return lambda value, *printer: getattr(importlib.import_module(".notebook", __name__), function)(value, *printer)

    for (module, name), (html, text) in NOTEBOOK_DISPLAY.items():
        formatters["text/html"].for_type_by_name(module, name, shown(html))
        formatters["text/plain"].for_type_by_name(module, name, shown(text))


class _Package(types.ModuleType):
    """`perfkit.compare` is the function, though perfkit/compare.py is a submodule of the same name: Python sets
    a package's attribute to each submodule it loads (any `from .compare import …` in perfkit would have made
    `perfkit.compare` the module). That one assignment is refused, so the name stays the public function;
    `import perfkit.compare` and `from perfkit.compare import …` still find the module (sys.modules)."""

    def __setattr__(self, name: str, value) -> None:
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
_register_notebook_display()

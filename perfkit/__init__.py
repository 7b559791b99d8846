"""perfkit: read MindSpore profiler output, explain where training time goes, and say what to change.

The public names are imported on first use (PEP 562), so `import perfkit` costs nothing: a warm
`perfkit summary` answers from the cache without importing pandas (perfkit/cache.py, answers).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> module that defines it
_PUBLIC = {
    "load": "loader", "load_steps": "loader",
    "Run": "model", "Meta": "model",
    "summarize": "summary",
    "advise": "advisor",
    "compare": "compare",
    "PerfkitError": "errors", "LayoutError": "errors", "FileFormatError": "errors", "DeviceError": "errors",
    # profiling from inside a script; StepTimer imports MindSpore when first looked up (it subclasses its Callback)
    "profiling": "profiler.api", "StepTimer": "profiler.api",
}

__all__ = [*_PUBLIC, "timeline", "__version__"]


def __getattr__(name: str):
    if name == "timeline":  # the module, callable as perfkit.timeline(run, step=N); it reads traces, summary never
        return importlib.import_module(".timeline", __name__)
    if name not in _PUBLIC:
        raise AttributeError(f"module 'perfkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

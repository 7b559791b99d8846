"""perfkit: read MindSpore profiler output, explain where training time goes, and say what to change."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import DeviceError, FileFormatError, LayoutError, PerfkitError
from .model import Meta, Run
from .formats import load
from .analysis import summarize
from .advisor import advise
from .compare import compare

__all__ = ["load", "Run", "Meta", "summarize", "advise", "compare", "PerfkitError", "LayoutError", "FileFormatError",
           "DeviceError", "__version__"]

# Profiling from inside a script (perfkit/profiler/api.py), loaded on first use: StepTimer subclasses
# MindSpore's Callback, and `import perfkit` must not import MindSpore.
_PROFILER_NAMES = ("profiling", "StepTimer")
__all__ += list(_PROFILER_NAMES)


def __getattr__(name: str):
    if name in _PROFILER_NAMES:
        from .profiler import api
        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

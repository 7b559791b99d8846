"""perfkit: read MindSpore profiler output, explain where training time goes, and say what to change."""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import DeviceError, FileFormatError, LayoutError, PerfkitError
from .model import Meta, Run
from .formats import load
from .analysis import summarize
from .advisor import advise
from .compare import compare



def __getattr__(name: str):
    """`perfkit.timeline(run, step=N)`: imported on first use (it reads traces; summary never needs it)."""
    if name == "timeline":
        import importlib
        return importlib.import_module(".timeline", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["load", "timeline", "Run", "Meta", "summarize", "advise", "compare", "PerfkitError", "LayoutError", "FileFormatError",
           "DeviceError", "__version__"]

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

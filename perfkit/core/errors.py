"""perfkit's error types. The CLI turns each into one line on stderr and exit code 2."""

from __future__ import annotations

import os


class PerfkitError(Exception):
    """A failure the user can cause and fix: bad path, broken file, missing device, unknown layout."""

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        self.path = os.fspath(path) if path is not None else None
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)

    def __reduce__(self):  # raised in a worker process of a parallel read, it crosses back intact
        return type(self), (self.message, self.path)


class LayoutError(PerfkitError):
    """The folder holds no profiler files perfkit knows, or several runs that cannot be told apart."""


class FileFormatError(PerfkitError):
    """A file is empty, truncated, not UTF-8, or has columns perfkit cannot map."""


class DeviceError(PerfkitError):
    """The requested device is not usable by the installed MindSpore."""


class PluginError(PerfkitError):
    """An installed plugin's reader, panel or rule raised: said in one line naming the plugin, the rest goes on."""

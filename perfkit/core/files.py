"""Opening the files of a run for reading: only regular files.

A FIFO, a character device or a socket under a profiler file's name (a copy made by a tool that recreates
special files, a name taken by another program) would block `open()` forever waiting for a writer, or
stream without end. Such a file is opened without blocking (O_NONBLOCK: opening a FIFO then returns at
once), checked with fstat on the open descriptor (no gap between the check and the read in which the
name could change), and refused with a FileFormatError naming it; a regular file is returned in blocking
mode, as open() would give it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import FileFormatError

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def open_regular(path: Path | str) -> BinaryIO:
    """`path` opened for binary reading; FileFormatError where it cannot be read or is no regular file."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise FileFormatError(f"is {kind}, not a file: not read", path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


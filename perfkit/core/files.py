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
    descriptor, _ = _regular_descriptor(path)
    try:
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_regular(path: Path | str, most: int | None = None) -> bytes:
    """The bytes of `path` (the first `most` of them, where given) as open_regular(path).read() gives them, read
    without a file object: a cluster's small files are read thousands at a time, and the object's set-up (an
    ioctl, two seeks and a stat of its own) cost more than reading the bytes. Errors as open_regular's; OSError
    where the read itself fails."""
    descriptor, status = _regular_descriptor(path)
    try:
        chunks, read = [], 0
        while most is None or read < most:  # to the end, past the size the stat gave: a file still being written
            wanted = status.st_size + 1 - read if read <= status.st_size else 1 << 16
            chunk = os.read(descriptor, wanted if most is None else min(wanted, most - read))
            if not chunk:
                break
            chunks.append(chunk)
            read += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(descriptor)


def _regular_descriptor(path: Path | str) -> tuple[int, os.stat_result]:
    """A descriptor of `path` opened for reading without blocking (a FIFO would block the open), and its fstat;
    FileFormatError where it cannot be opened or is no regular file (then nothing is left open)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            kind = next((name for test, name in _KINDS if test(status.st_mode)), "not a regular file")
            raise FileFormatError(f"is {kind}, not a file: not read", path)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor, status


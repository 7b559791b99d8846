"""What every layout reader returns, and the small parsing helpers they share.

A reader module has `detect(dir) -> bool` (cheap: file names only) and
`read(dir) -> dict[int, Parts]` (one `Parts` per rank found in that folder).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from ..errors import FileFormatError


@dataclass
class Parts:
    """A reader's contribution to one rank of a Run.

    `tables` maps schema table names (see model.SCHEMA) to DataFrames without the rank column;
    it may also hold intermediate tables that `load` combines across readers:
      - "op_events": name, start_ns (int64, epoch ns), dur_ms — one row per op execution;
      - "step_times": step, begin_ns, end_ns — step wall-clock bounds recorded by `perfkit profile`.
    `meta` holds Meta field values the files tell; `sources` the files read (for messages).
    """

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


RANK_SUFFIX = re.compile(r"_(\d+)(?:_[a-z_]+)?\.(?:csv|txt|json)$")


def rank_of(file_name: str) -> int | None:
    """The rank in a file name such as `aicore_intermediate_3_type.csv` or `framework_raw_0.csv`."""
    match = RANK_SUFFIX.search(file_name)
    return int(match.group(1)) if match else None


def read_text(path: Path) -> str:
    """A whole text file, with the user-facing errors for the usual ways it is broken."""
    try:
        raw = path.read_bytes()
    except PermissionError:
        raise FileFormatError("cannot be read (permission denied)", path) from None
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    if not raw.strip():
        raise FileFormatError("is empty", path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", path) from None


def guarded(parts: Parts, path: Path, reader: Callable[[Path], Any]) -> Any:
    """Run `reader(path)`; a broken file becomes a warning on `parts` and None, so the rest still loads."""
    try:
        result = reader(path)
    except FileFormatError as exc:
        parts.warnings.append(f"skipped {path.name}: {exc.message}")
        return None
    parts.sources.append(str(path))
    return result


def op_pass(full_name: str) -> str:
    """forward / backward / other from an op's full scope name.

    MindSpore puts backward kernels under `Gradients/` and forward ones under `Default/`;
    optimizer updates live under `Default/optimizer-*` and are neither.
    """
    if full_name.startswith("Gradients/"):
        return "backward"
    if full_name.startswith("Default/"):
        return "other" if "/optimizer" in full_name or full_name.startswith("Default/optimizer") else "forward"
    return "other"


def op_type_of(full_name: str) -> str:
    """`Default/net/conv1-Conv2d/Conv2D-op13` -> `Conv2D`."""
    return re.sub(r"-op\d+$", "", full_name.rsplit("/", 1)[-1])

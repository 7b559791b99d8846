"""Repeats of one setting on disk: `perfkit profile --repeat N` writes OUTPUT/repeat_1..N, and `perfkit compare`
reads a folder holding them as that many runs of one side."""

from __future__ import annotations

import re
from pathlib import Path

REPEAT_NAME = "repeat_{}"
REPEAT_FOLDER = re.compile(r"repeat_(\d+)")


def repeat_folder(output: str | Path, index: int) -> Path:
    """Where `perfkit profile --repeat` writes repeat `index` (from 1) of the series in `output`."""
    return Path(output) / REPEAT_NAME.format(index)


def repeat_folders(path: str | Path) -> list[str]:
    """The runs a compare side names: a folder's repeat_1..N subfolders, in order, else the folder itself."""
    folder = Path(path)
    repeats = sorted((child for child in folder.iterdir() if child.is_dir() and REPEAT_FOLDER.fullmatch(child.name)),
                     key=lambda child: int(REPEAT_FOLDER.fullmatch(child.name).group(1))) if folder.is_dir() else []
    return [str(repeat) for repeat in repeats] or [str(path)]

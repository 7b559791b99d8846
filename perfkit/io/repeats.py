"""Repeats of one setting on disk: `perfkit profile --repeat N` writes OUTPUT/repeat_1..N, and `perfkit compare`
reads a folder holding them as that many runs of one side; the dashboard groups the runs it was given the same way
(`repeat_series`), so its Compare page judges what `perfkit compare` and `perfkit tune` judge."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

REPEAT_NAME = "repeat_{}"
REPEAT_FOLDER = re.compile(r"repeat_(\d+)")
# A file beside a repeat folder that records that run (`perfkit tune` writes repeat_1.log, repeat_1.applied.json):
# the shell's TUNEDIR/*/repeat_* names them too.
REPEAT_RECORD = re.compile(r"(repeat_\d+)\..+")


def repeat_folder(output: str | Path, index: int) -> Path:
    """Where `perfkit profile --repeat` writes repeat `index` (from 1) of the series in `output`."""
    return Path(output) / REPEAT_NAME.format(index)


def repeat_folders(path: str | Path) -> list[str]:
    """The runs a compare side names: a folder's repeat_1..N subfolders, in order, else the folder itself."""
    folder = Path(path)
    repeats = sorted((child for child in folder.iterdir() if child.is_dir() and REPEAT_FOLDER.fullmatch(child.name)),
                     key=lambda child: int(REPEAT_FOLDER.fullmatch(child.name).group(1))) if folder.is_dir() else []
    return [str(repeat) for repeat in repeats] or [str(path)]


def repeat_series(paths: Sequence[str | Path]) -> list[list[int]]:
    """The positions of `paths` grouped into series: the repeat_N folders of one parent folder (one `perfkit profile
    --repeat` series, one side of a compare, as `repeat_folders` reads a side) form one group, in the order of their
    first position; any other path is a group of its own."""
    groups: dict[object, list[int]] = {}
    for position, path in enumerate(paths):
        folder = Path(os.path.normpath(str(path)))
        key = folder.parent if REPEAT_FOLDER.fullmatch(folder.name) else position
        groups.setdefault(key, []).append(position)
    return list(groups.values())


def run_folders(paths: Sequence[str | Path]) -> list[str]:
    """The runs a view of several runs (`perfkit dash`, `perfkit report`) shows for the paths given: each folder,
    a folder of repeat_N folders as its repeats (`repeat_folders`), a repeat's record file (REPEAT_RECORD) left out
    where its run folder is beside it."""
    runs = []
    for path in paths:
        record = REPEAT_RECORD.fullmatch(Path(path).name)
        if record and Path(path).is_file() and (Path(path).parent / record.group(1)).is_dir():
            continue
        runs += repeat_folders(path)
    return runs

"""Repeats of one setting on disk: `perfkit profile --repeat N` writes OUTPUT/repeat_1..N, and `perfkit compare`
reads a folder holding them as that many runs of one side (those that failed left out, and named); the dashboard
groups the runs it was given the same way (`repeat_series`), so its Compare page judges what `perfkit compare` and
`perfkit tune` judge."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from ..core import boundedjson
from .formats.manifest import MANIFEST

REPEAT_NAME = "repeat_{}"
# ASCII digits only: `\d` also takes other scripts' digits, which no repeat folder name has
REPEAT_FOLDER = re.compile(r"repeat_([0-9]{1,9})")
# A file beside a repeat folder that records that run (`perfkit tune` writes repeat_1.log, repeat_1.applied.json):
# the shell's TUNEDIR/*/repeat_* names them too.
REPEAT_RECORD = re.compile(r"(repeat_[0-9]{1,9})\..+")


def repeat_folder(output: str | Path, index: int) -> Path:
    """Where `perfkit profile --repeat` writes repeat `index` (from 1) of the series in `output`."""
    return Path(output) / REPEAT_NAME.format(index)


def repeat_folders(path: str | Path) -> list[str]:
    """The runs a compare side names: a folder's repeat_1..N subfolders, in order, else the folder itself."""
    folder = Path(path)
    repeats = sorted((child for child in folder.iterdir() if child.is_dir() and REPEAT_FOLDER.fullmatch(child.name)),
                     key=lambda child: int(REPEAT_FOLDER.fullmatch(child.name).group(1))) if folder.is_dir() else []
    return [str(repeat) for repeat in repeats] or [str(path)]


def usable_repeats(path: str | Path) -> tuple[list[str], list[str]]:
    """repeat_folders(path) without the repeats whose manifest says they failed, and a line naming each of those
    (why it failed); where every repeat failed, all of them (reading them says why each is unusable)."""
    folders = repeat_folders(path)
    failed = {folder: _failure(Path(folder)) for folder in folders} if len(folders) > 1 else {}
    kept = [folder for folder in folders if failed.get(folder) is None]
    if not kept:
        return folders, []
    return kept, [f"{folder}: this repeat failed ({error}): compared without it"
                  for folder, error in failed.items() if error is not None]


def _failure(folder: Path) -> str | None:
    """The error of a repeat whose manifest records it failed; None for any other (read as usual)."""
    try:
        manifest = boundedjson.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("status") != "failed":
        return None
    error = manifest.get("error")
    return str(error)[:300] if error else "status failed"


def repeats_hint(path: str | Path) -> str | None:
    """What to say of a folder of repeats given where one run is read (it holds several runs of rank 0)."""
    folders = repeat_folders(path)
    if len(folders) < 2 or folders == [str(path)]:
        return None
    first = Path(folders[0]).name
    return (f"holds {len(folders)} repeats of `perfkit profile --repeat` ({first}..{Path(folders[-1]).name}), "
            f"runs of one setting: compare them with another setting by `perfkit compare {path} OTHER`, or read "
            f"one: {Path(path) / first}")


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


def run_folders(paths: Sequence[str | Path]) -> tuple[list[str], list[str]]:
    """The runs `perfkit dash` shows for the paths given, and a line for
    each repeat left out: each folder, a folder of repeat_N folders as the repeats `perfkit compare` reads
    (`usable_repeats`), a repeat's record file (REPEAT_RECORD) left out where its run folder is beside it."""
    runs, left_out = [], []
    for path in paths:
        record = REPEAT_RECORD.fullmatch(Path(path).name)
        if record and Path(path).is_file() and (Path(path).parent / record.group(1)).is_dir():
            continue
        kept, failed = usable_repeats(path)
        runs += kept
        left_out += failed
    return runs, left_out

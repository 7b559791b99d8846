"""The run folder `perfkit profile` writes, and its manifest perfkit_run.json.

The manifest is the contract with perfkit/formats/manifest.py: it is written with status
"running" before training starts and replaced atomically at the end, so a run that was killed
still says so. Step times are epoch ns from time.time_ns(), the clock MindSpore's CPU profiler
stamps its ops with.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

MANIFEST = "perfkit_run.json"
TRAIN_LOG = "train.log"
MINDDATA_DIR = "md"
STATUSES = ("running", "ok", "interrupted", "failed")
VERSIONED = re.compile(r"^(?P<stem>.*?)(?P<number>\d+)$")


def next_free(requested: str | os.PathLike) -> Path:
    """`requested` if it does not exist yet, else the next free name counting up its trailing number.

    profiler_v1 -> profiler_v2, profiler_v3, ...; a name without a number gets `_2`, `_3`, ...
    """
    path = Path(requested).expanduser()
    if not path.exists():
        return path
    match = VERSIONED.match(path.name)
    stem, number = (match["stem"], int(match["number"])) if match else (path.name + "_", 1)
    while True:
        number += 1
        candidate = path.with_name(f"{stem}{number}")
        if not candidate.exists():
            return candidate


def claim(requested: str | os.PathLike) -> Path:
    """Create and return the next free run folder; mkdir without exist_ok so two runs never share one."""
    while True:
        folder = next_free(requested)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # another run took it between the check and the mkdir
        return folder


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Replace folder/perfkit_run.json atomically: readers never see half a manifest."""
    if manifest["status"] not in STATUSES:
        raise ValueError(f"unknown manifest status {manifest['status']!r}")
    target = folder / MANIFEST
    staging = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    staging.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(staging, target)


def read_manifest(folder: Path) -> dict[str, Any]:
    return json.loads((folder / MANIFEST).read_text())


def update_manifest(folder: Path, **changes: Any) -> dict[str, Any]:
    manifest = {**read_manifest(folder), **changes}
    write_manifest(folder, manifest)
    return manifest


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")

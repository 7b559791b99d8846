"""The run folder `perfkit profile` writes, and its manifest perfkit_run.json.

The manifest is the contract with perfkit/io/formats/manifest.py: it is written with status
"running" before training starts, rewritten after each profiled step (a killed run keeps its step
times) and replaced atomically at the end, so a run that was killed still says so. Step times
are epoch ns from time.time_ns(), the clock MindSpore's CPU profiler stamps its ops with.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import shlex
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core import boundedjson
from ..io.formats.manifest import MANIFEST, STATUSES

TRAIN_LOG = "train.log"
# MindSpore's profiler analysis output under `perfkit profile -- …` (its "Parsing: [###…]" progress bar, drawn by
# a child process): kept out of the script's output, which is the user's.
ANALYSIS_LOG = "analysis.log"
MINDDATA_DIR = "md"
# Write errors that mean the disk (or the quota, or `ulimit -f`) is full: the user's to fix, not a bug.
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
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
    if "host" not in manifest:  # what the run's CPU could do (its MFU: perfkit.analysis.cells.utilisation) and
        # how busy the machine was as the run started (compare's noise floor: perfkit.analysis.statistics)
        from ..analysis.flops import host_cpu_facts
        manifest["host"] = {**(host_cpu_facts() or {}), **host_load()}
    target = folder / MANIFEST
    staging = folder / f".{MANIFEST}.{os.getpid()}.tmp"
    try:
        staging.write_text(json.dumps(manifest, indent=2) + "\n")
        os.replace(staging, target)
    except OSError as exc:
        staging.unlink(missing_ok=True)  # a full disk must not also leave a half-written staging file
        raise OSError(exc.errno, exc.strerror, str(target)) from exc


def host_load() -> dict[str, Any]:
    """The machine's load average (1, 5, 15 min) and its logical CPUs; {} where the system does not tell."""
    try:
        return {"load_average": [round(value, 2) for value in os.getloadavg()], "logical_cpus": os.cpu_count()}
    except (OSError, AttributeError):  # no load average on this system
        return {}


def read_manifest(folder: Path) -> dict[str, Any]:
    return boundedjson.loads((folder / MANIFEST).read_text())


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def write_error(exc: OSError) -> str:
    """`no space left on device: /run/perfkit_run.json`: what went wrong and where, in one line."""
    reason = (exc.strerror or str(exc)).lower()
    return f"{reason}: {exc.filename}" if exc.filename else reason


def script_manifest(command: list[str], env: dict[str, str], script: Path | None, ranks: int | None) -> dict[str, Any]:
    """The manifest of a run of the user's own script, before it starts: what ran, where, with what.

    `ranks` is None when the launcher decides (a user's msrun command); the rank folders then tell.
    """
    from ..core.version import __version__

    return {
        "perfkit_version": __version__,
        "mindspore_version": _installed_version("mindspore"),
        "python_version": platform.python_version(),
        "device": None,
        "rank": 0 if ranks == 1 else None,
        "rank_size": ranks,
        "status": "running",
        "error": None,
        "config": {},
        "used": {},
        "notes": [],
        "synthetic_data": None,
        "env": dict(env),
        "steps": [],
        "step_timer": None,
        "started_at": now_iso(),
        "finished_at": None,
        "command": shlex.join(command),
        "cwd": os.getcwd(),
        "script": str(script.resolve()) if script is not None else None,
        "git": git_state(script.resolve().parent if script is not None else Path.cwd()),
    }


def _installed_version(package: str) -> str | None:
    """The installed version, read from the package metadata (importing MindSpore takes seconds)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git_state(folder: Path) -> dict[str, Any] | None:
    """{"commit", "dirty"} of the git repository holding `folder`; None outside one (or without git)."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    changes = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": None if changes is None else bool(changes)}

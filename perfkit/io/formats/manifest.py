"""`perfkit_run.json`, the manifest `perfkit profile` writes next to the profiler output.

It records what the files cannot tell: the MindSpore version, the mode, sink/feed, the AMP level,
whether the data was synthetic, the run's status, and each profiled step's wall-clock bounds
(epoch ns from time.time_ns(), the clock MindSpore's CPU profiler stamps its ops with), which
steps.py turns into the step split on CPU. A manifest with `"rank": null` is the top level of a
multi-rank run: its facts hold for every rank (key formats.RUN_WIDE).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..discovery import has_match
from .base import RUN_WIDE, Parts, Reader
from .files import json_object

if TYPE_CHECKING:
    import pandas as pd

# The manifest's vocabulary, shared with perfkit/profiler/ (which writes what this module reads).
MANIFEST = "perfkit_run.json"
DEVICES = ("Ascend", "GPU", "CPU")  # perfkit profile --device auto tries them in this order
# incomplete: the run ended as it should (exit 0) but the profiler left no op data (the script ended without
# MindSpore's analysis: os._exit, a kill the script did not see); the split of its steps is unknown.
STATUSES = ("running", "ok", "interrupted", "failed", "incomplete")
AMP_LEVELS = ("O0", "O1", "O2", "O3")
MODES = ("graph", "pynative")


def detect(folder: Path) -> bool:
    return has_match(folder, (MANIFEST,)) and (folder / MANIFEST).is_file()


def read(folder: Path) -> dict[int, Parts]:
    path = folder / MANIFEST
    parts = Parts()
    manifest = json_object(parts, path)
    if manifest is None:
        return {RUN_WIDE: parts}
    problems: list[str] = []
    rank = _field(manifest, "rank", int, problems)
    meta: dict[str, Any] = {
        "device": _choice(manifest, "device", DEVICES, problems),
        "ms_version": _field(manifest, "mindspore_version", str, problems),
        "status": _choice(manifest, "status", STATUSES, problems),
        "synthetic_data": _field(manifest, "synthetic_data", bool, problems),
        "memory_capacity_mb": _field(manifest, "memory_capacity_mb", float, problems),
        "env": _mapping(manifest, "env", problems, values=str),
        "config": _mapping(manifest, "config", problems),
        "host": _mapping(manifest, "host", problems),
        "script": _field(manifest, "script", str, problems),
    }
    used = _mapping(manifest, "used", problems)
    sink = _field(used, "sink", bool, problems, where="used.")
    meta["data_mode"] = None if sink is None else ("sink" if sink else "feed")
    meta["amp_level"] = _choice(used, "amp_level", AMP_LEVELS, problems, where="used.")
    meta["mode"] = _choice(used, "mode", MODES, problems, where="used.")
    parts.meta = {key: value for key, value in meta.items() if value not in (None, {})}
    step_times = _step_times(manifest.get("steps"), problems)
    if len(step_times):
        parts.tables["step_times"] = step_times
        parts.meta["step_source"] = "recorded_step_times"
    parts.warnings += [f"{MANIFEST}: {problem} (ignored)" for problem in problems]
    status_note = _status_warning(meta["status"], manifest.get("error"), step_times)
    if status_note:
        parts.warnings.append(status_note)
    return {RUN_WIDE if rank is None else rank: parts}



def _field(data: dict, key: str, kind: type, problems: list[str], where: str = "") -> Any:
    value = data.get(key)
    # bool is an int in Python; a rank of `true` is as wrong as one of "0"
    if value is None or (isinstance(value, kind) and (kind is bool or not isinstance(value, bool))):
        return value
    problems.append(f"{where}{key} should be {kind.__name__}, found {value!r}")
    return None


def _choice(data: dict, key: str, allowed: tuple[str, ...], problems: list[str], where: str = "") -> str | None:
    value = _field(data, key, str, problems, where)
    if value is None:
        return None
    match = next((choice for choice in allowed if choice.lower() == value.lower()), None)
    if match is None:
        problems.append(f"{where}{key} should be one of {', '.join(allowed)}, found {value!r}")
    return match


def _mapping(data: dict, key: str, problems: list[str], values: type | None = None) -> dict:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        problems.append(f"{key} should be an object, found {type(value).__name__}")
        return {}
    if values is not None:
        return {str(k): v for k, v in value.items() if isinstance(v, values)}
    return value


def _step_times(steps: Any, problems: list[str]) -> pd.DataFrame:
    """Valid {"step", "begin_ns", "end_ns"} entries; a bad entry is dropped, not the whole list."""
    import pandas as pd
    if steps is None:
        return pd.DataFrame(columns=["step", "begin_ns", "end_ns"])
    if not isinstance(steps, list):
        problems.append(f"steps should be a list, found {type(steps).__name__}")
        steps = []
    rows = []
    for index, entry in enumerate(steps):
        valid = (isinstance(entry, dict)
                 and all(isinstance(entry.get(k), int) and not isinstance(entry.get(k), bool)
                         for k in ("step", "begin_ns", "end_ns"))
                 and entry["end_ns"] > entry["begin_ns"])
        if valid:
            rows.append((entry["step"], entry["begin_ns"], entry["end_ns"]))
        else:
            problems.append(f"steps[{index}] is not {{step, begin_ns < end_ns}} integers: {entry!r}"[:200])
    return pd.DataFrame(rows, columns=["step", "begin_ns", "end_ns"]).astype("int64")


def _status_warning(status: str | None, error: Any, step_times: pd.DataFrame) -> str | None:
    if status in (None, "ok"):
        return None
    reached = (f"data up to step {int(step_times['step'].max())}" if len(step_times)
               else "no profiled step was completed")
    if status == "failed":
        return f"run failed ({error}): {reached}" if error else f"run failed: {reached}"
    if status == "running":
        return f"run was still running (or was killed) when read: {reached}"
    if status == "incomplete":
        return f"run incomplete ({error}): {reached}" if error else f"run incomplete: {reached}"
    return f"run was interrupted: {reached}"


def raw_data_hint(root: Path) -> str | None:
    """A folder holding only perfkit's manifest: the run recorded no step and MindSpore wrote no profile there."""
    if detect(root) and not any(path.name != MANIFEST for path in root.iterdir()):
        return ("holds no profile: its perfkit_run.json records no profiled step and MindSpore's profiler wrote no "
                "files here (did the script use MindSpore? the manifest's notes say)")
    return None


READER = Reader(name="manifest", provides=frozenset({"step_times"}), detect=detect, read=read, unit=False,
                looks_for=MANIFEST, raw_data_hint=raw_data_hint)

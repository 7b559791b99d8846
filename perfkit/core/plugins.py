"""Readers, panels and rules from installed packages, through entry points (as pytest and sqlite-utils take
their plugins).

A package declares them in its pyproject.toml; each entry point names one object or a sequence of them:

    [project.entry-points."perfkit.readers"]
    mylayout = "mypkg.layout:READER"        # a perfkit.io.formats.base.Reader
    [project.entry-points."perfkit.panels"]
    mychart = "mypkg.charts:PANELS"         # a perfkit.views.panels.Panel, or a sequence of them

A plugin that cannot be imported, or names something else, costs one warning naming it (`problems`); the rest
loads. Nothing is imported before a group is asked for, and `perfkit summary` answering from the cache asks
for none: it only needs `code_paths`, which finds the plugins' files without importing them, so that a kept
answer or a cached Run is stale once a plugin's code changes, as when perfkit's own does.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

GROUPS = ("perfkit.readers", "perfkit.panels", "perfkit.rules")
READERS, PANELS, RULES = GROUPS


def _entry_point_files() -> list[Path]:
    """The entry_points.txt of every installed distribution that declares a perfkit group: one directory
    listing per sys.path folder (about 1 ms), so that without plugins importlib.metadata (40 ms of imports)
    is never loaded on the warm path."""
    found = []
    for folder in sys.path:
        try:
            entries = list(os.scandir(folder or "."))
        except OSError:
            continue
        for entry in entries:
            if entry.name.endswith((".dist-info", ".egg-info")):
                path = Path(entry.path) / "entry_points.txt"
                try:
                    if b"[perfkit." in path.read_bytes():
                        found.append(path)
                except OSError:
                    continue
    return found


def entry_points(group: str) -> list:
    """The installed entry points of `group` (importlib.metadata's), by name."""
    if not _entry_point_files():
        return []
    from importlib.metadata import entry_points as installed
    return sorted(installed(group=group), key=lambda point: point.name)


def code_paths() -> tuple[Path, ...]:
    """Every plugin's declaration and the top-level package or module its entry points name, found without
    importing them (importlib.util.find_spec of a top-level name imports nothing)."""
    import importlib.util

    files = _entry_point_files()
    paths = list(files)
    for group in GROUPS if files else ():
        for point in entry_points(group):
            try:
                spec = importlib.util.find_spec(point.module.partition(".")[0])
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.submodule_search_locations:
                paths += [Path(location) for location in spec.submodule_search_locations]
            elif spec is not None and spec.origin and os.path.isfile(spec.origin):
                paths.append(Path(spec.origin))
    return tuple(sorted(set(paths)))


@functools.lru_cache(maxsize=None)
def load(group: str, kind: type) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """(the objects of type `kind` the entry points of `group` name, in entry point name order; one warning
    for each plugin that could not be imported or named something else). Imported once per process."""
    objects: list[Any] = []
    problems: list[str] = []
    for point in entry_points(group):
        where = f"{point.name} = {point.value}"
        try:
            loaded = point.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop perfkit: it is said instead
            problems.append(failure(f"{where} ({group})", "importing it", exc) + "; left out")
            continue
        items = loaded if isinstance(loaded, (list, tuple)) else [loaded]
        wrong = [item for item in items if not isinstance(item, kind)]
        if wrong:
            problems.append(f"plugin {where} ({group}) names an object of type {type(wrong[0]).__name__}, not a "
                            f"{kind.__name__} or a sequence of them; left out")
            continue
        objects += [(item, where) for item in items]
    return tuple(objects), tuple(problems)


def failure(where: str, action: str, exc: Exception) -> str:
    """One line for a plugin that raised while perfkit used it."""
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"plugin {where}: {action} raised {type(exc).__name__}" + (f": {detail}" if detail else "")


def describe(point) -> str:
    """`name (module, from distribution version)`: how a warning names a plugin."""
    dist = getattr(point, "dist", None)
    source = f", from {dist.name} {dist.version}" if dist is not None else ""
    return f"{point.name} ({point.value}{source})"


def fingerprint(group: str) -> tuple[str, ...]:
    """What a kept answer depends on in `group` beside the plugins' code (code_paths): each plugin's name,
    module and distribution version."""
    return tuple(describe(point) for point in entry_points(group))


def import_entry(point) -> tuple[Any, str | None]:
    """(the loaded object, None), or (None, why it failed): a plugin that cannot be imported is one warning
    naming it, never a traceback. For groups whose import registers objects itself (`perfkit.rules`)."""
    try:
        return point.load(), None
    except Exception as error:  # noqa: BLE001 - any error in someone else's import is reported, not raised
        return None, f"failed to import {point.value}: {type(error).__name__}: {error}"

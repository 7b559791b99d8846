"""Readers, panels and rules from installed packages, through entry points (as pytest and sqlite-utils take
their plugins).

A package declares them in its pyproject.toml; a reader's or a panel's entry point names one object or a
sequence of them, a rule's names a module whose import registers its rules (perfkit/advisor/registry.py):

    [project.entry-points."perfkit.readers"]
    mylayout = "mypkg.layout:READER"        # a perfkit.io.formats.base.Reader
    [project.entry-points."perfkit.panels"]
    mychart = "mypkg.charts:PANELS"         # a perfkit.views.panel.Panel, or a sequence of them
    [project.entry-points."perfkit.rules"]
    myrules = "mypkg.rules"

`load` is the one loader of the three groups: a plugin that cannot be imported or gives something else, or a
thing it gives whose name is taken, costs one Problem naming it (`plugin <name>: <reason>`, the one wording of a
broken plugin: `refusal`, `failure`), never a traceback; the rest loads. Nothing is imported before a group is
asked for, and `perfkit summary` answering from the cache asks for none: it only needs `code_paths`, which finds
the plugins' files without importing them, so that a kept answer or a cached Run is stale once a plugin's code
changes, as when perfkit's own does.
"""

from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

GROUPS = ("perfkit.readers", "perfkit.panels", "perfkit.rules")
READERS, PANELS, RULES = GROUPS


# The entry_points.txt files found, by sys.path when they were looked for (forget() looks again): a cold answer
# asked 3-5 times (the readers, the cache's code paths, the panels, the rules), ~4 ms a scan.
_FOUND: dict[tuple[str, ...], tuple[Path, ...]] = {}


def _entry_point_files() -> list[Path]:
    """The entry_points.txt of every installed distribution that declares a perfkit group: one directory
    listing per sys.path folder (about 1 ms), so that without plugins importlib.metadata (40 ms of imports)
    is never loaded on the warm path; looked for once per sys.path."""
    where = tuple(sys.path)
    if where not in _FOUND:
        _FOUND[where] = tuple(_scanned(where))
    return list(_FOUND[where])


def _scanned(where: tuple[str, ...]) -> list[Path]:
    """The entry_points.txt declaring a perfkit group in the folders `where`."""
    found = []
    for folder in where:
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


@dataclass(frozen=True)
class Problem:
    """Why an installed plugin, or one thing it gives, is not used: said as `plugin <name>: <reason>`, the one
    wording of a broken plugin (a reader's, a panel's or a rule's)."""

    plugin: str   # describe(point): the entry point, its module and its distribution
    reason: str

    def __str__(self) -> str:
        return refusal(self.plugin, self.reason)


@dataclass(frozen=True)
class Loaded:
    """What `load` found in a group: the usable objects with the plugin each came from, and the problems."""

    items: tuple[tuple[Any, str], ...]
    problems: tuple[Problem, ...]


def _named(point) -> Any:
    """What an entry point names: the object, or a sequence of them (readers' and panels' plugins)."""
    return point.load()


_IMPORTED: dict[tuple[str, str, str], tuple[Any, Exception | None]] = {}
_IMPORTING = threading.RLock()  # the dashboard serves requests in threads: each plugin is imported once


def load(group: str, kind: type, noun: str, key: Callable[[Any], str], taken: Iterable[str] = (),
         refuse: Callable[[Any], str | None] = lambda item: None, give: Callable[[Any], Any] = _named,
         how: str = "") -> Loaded:
    """The plugins of `group` (in entry point name order), each imported once per process: `give(point)` is what
    a plugin gives (default: the object or sequence of objects it names), and each must be a `kind`. A plugin
    that cannot be imported or gives something else is left out; of what it gives, a `noun` whose `key` is
    `taken` (perfkit's own, or an earlier plugin's) or that `refuse` says why not to use is left out. Each is
    one Problem; nothing raises. `how`: how a plugin gives a `noun`, said where it gives none or another type."""
    how = how or f"names a {kind.__module__}.{kind.__qualname__} or a sequence of them"
    taken = set(taken)
    items: list[tuple[Any, str]] = []
    problems: list[Problem] = []
    for point in entry_points(group):
        plugin = describe(point)
        given, error = _imported(group, point, give)
        if error is not None:
            problems.append(Problem(plugin, failure_reason("importing it", error) + "; left out"))
            continue
        objects = list(given) if isinstance(given, (list, tuple)) else [given]
        wrong = next((item for item in objects if not isinstance(item, kind)), None)
        if wrong is not None or not objects:
            gave = f"an object of type {type(wrong).__name__}" if wrong is not None else f"no {noun}"
            problems.append(Problem(plugin, f"gives {gave} (a {noun} plugin {how}); left out"))
            continue
        for item in objects:
            reason = f"{noun} {key(item)!r} is taken" if key(item) in taken else refuse(item)
            if reason:
                problems.append(Problem(plugin, f"{reason}; left out"))
                continue
            taken.add(key(item))
            items.append((item, plugin))
    return Loaded(tuple(items), tuple(problems))


def _imported(group: str, point, give: Callable[[Any], Any]) -> tuple[Any, Exception | None]:
    """(what `give(point)` returned, None) or (None, what it raised), once per process and entry point."""
    with _IMPORTING:
        where = (group, point.name, point.value)
        if where not in _IMPORTED:
            try:
                _IMPORTED[where] = (give(point), None)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop perfkit: it is said instead
                _IMPORTED[where] = (None, exc)
        return _IMPORTED[where]


def forget() -> None:
    """Forget what this process found and imported of its plugins (tests install and remove them)."""
    with _IMPORTING:
        _IMPORTED.clear()
        _FOUND.clear()


def failure_reason(action: str, exc: Exception) -> str:
    """`<action> raised <type>: <its first line>`: what a plugin's code did where perfkit called it."""
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{action} raised {type(exc).__name__}" + (f": {detail}" if detail else "")


def refusal(plugin: str, reason: str) -> str:
    """One line for a plugin perfkit cannot use, or not wholly: `plugin <name>: <reason>`."""
    return f"plugin {plugin}: {reason}"


def failure(plugin: str, action: str, exc: Exception) -> str:
    """One line for a plugin that raised while perfkit used it."""
    return refusal(plugin, failure_reason(action, exc))


def describe(point) -> str:
    """`name = module:object from distribution version`: how every line about a plugin names it."""
    dist = getattr(point, "dist", None)
    return f"{point.name} = {point.value}" + (f" from {dist.name} {dist.version}" if dist is not None else "")


def fingerprint(group: str) -> tuple[str, ...]:
    """What a kept answer depends on in `group` beside the plugins' code (code_paths): each plugin's name,
    module and distribution version."""
    return tuple(describe(point) for point in entry_points(group))

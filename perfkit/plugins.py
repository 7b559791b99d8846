"""Extensions from installed packages, found through entry points as pytest and sqlite-utils find theirs.

A package extends perfkit by declaring an entry point in one of perfkit's groups (`perfkit.rules`: see
perfkit/advisor/registry.py for what its module must do). This module lists them and imports them; it imports
neither pandas nor the advisor, so that the CLI can key a kept answer on the installed plugins cheaply.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points
from typing import Any

RULES_GROUP = "perfkit.rules"


def installed(group: str) -> list[EntryPoint]:
    """The entry points of `group` in the installed packages on sys.path now, by name."""
    return sorted(entry_points(group=group), key=lambda entry: (entry.name, entry.value))


def describe(entry: EntryPoint) -> str:
    """`name (module, from distribution version)`: how a warning names a plugin."""
    dist = getattr(entry, "dist", None)
    source = f", from {dist.name} {dist.version}" if dist is not None else ""
    return f"{entry.name} ({entry.value}{source})"


def fingerprint(group: str) -> tuple[str, ...]:
    """What a kept answer depends on in `group`: each plugin's name, module and distribution version.
    A plugin's code edited without a new version is not seen (PERFKIT_NO_CACHE=1 while writing one)."""
    return tuple(describe(entry) for entry in installed(group))


def load(entry: EntryPoint) -> tuple[Any, str | None]:
    """(the loaded object, None), or (None, why it failed): a plugin that cannot be imported is one warning
    naming it, never a traceback."""
    try:
        return entry.load(), None
    except Exception as error:  # noqa: BLE001 - any error in someone else's import is reported, not raised
        return None, f"failed to import {entry.value}: {type(error).__name__}: {error}"

"""Placeholder: being written. detect() finds nothing yet."""

from __future__ import annotations

from pathlib import Path

from .base import Parts


def detect(folder: Path) -> bool:
    return False


def read(folder: Path) -> dict[int, Parts]:
    return {}

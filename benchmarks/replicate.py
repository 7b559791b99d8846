"""Building blocks for `generate.py`: turn a real fixture's rows into many, fast.

A fixture file is parsed once into a `%`-format template where the fields that change between
copies (step id, start time, duration, op number) are `%s` slots; each copy is then one C-level
`template % values` call, so millions of rows cost seconds, not minutes.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
from pathlib import Path
from typing import Callable, Iterator, Sequence

WRITE_BUFFER = 16 * 1024 * 1024  # large writes: the generator is I/O bound once templates are built


def micros_to_thousandths(text: str) -> int:
    """'1736408883704643.212' (µs, up to 3 decimals, maybe a trailing TAB) -> 1736408883704643212.

    Integers, because a float64 cannot hold 16 digits before and 3 after the point.
    """
    whole, _, frac = text.strip().partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def thousandths_to_micros(value: int) -> str:
    return f"{value // 1000}.{value % 1000:03d}"


def csv_line(row: Sequence[str]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(row)
    return buffer.getvalue()


class RowTemplate:
    """Rows of a CSV block with some columns left as slots.

    `slots` maps a column index to a function (row_index, *copy_args) -> str; `render(*args)`
    returns the whole block's text for one copy.
    """

    SLOT = "\x00"

    def __init__(self, rows: list[list[str]], slots: dict[int, Callable[..., str]]):
        self.rows = rows
        self.slots = sorted(slots.items())
        lines = []
        for row in rows:
            templated = list(row)
            for index, _ in self.slots:
                templated[index] = self.SLOT
            lines.append(csv_line(templated).replace("%", "%%").replace(self.SLOT, "%s"))
        self.template = "".join(lines)

    def render(self, *args) -> str:
        values = [fill(i, *args) for i in range(len(self.rows)) for _, fill in self.slots]
        return self.template % tuple(values)


def read_csv_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))
    return rows[0], rows[1:]


@contextlib.contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """Write a run into `<target>.partial`, then rename: a run folder either is complete or absent.

    An interrupted earlier attempt leaves only the `.partial` folder, which is wiped and redone.
    """
    partial = target.with_name(target.name + ".partial")
    if partial.exists():
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    yield partial
    os.replace(partial, target)


def copy_files(source: Path, target: Path, skip: set[str] = frozenset()) -> None:
    """Copy the files of `source` (not sub-folders) except `skip`; content only, so copies are writable."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in sorted(source.iterdir()):
        if entry.is_file() and entry.name not in skip:
            shutil.copyfile(entry, target / entry.name)


def open_text(path: Path):
    return open(path, "w", encoding="utf-8", newline="", buffering=WRITE_BUFFER)

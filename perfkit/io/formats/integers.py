"""Ranks, steps, ids, counts and sizes read from files: the one bounded parser of every whole number a reader
takes from a file's name, cells or JSON values (docs/robustness.md, issue 38).

A value that no rank or step can be -- not a number, not finite, fractional, negative, or past its kind's bound --
is never cast: numpy casts `inf` with IntCastingNaNError, `1e300` or a 30-digit integer to -9223372036854775808,
and -1 is the loader's key for every rank (base.RUN_WIDE). `whole` answers None for it; `checked` drops such rows
and says so once per file and column, naming the rows and their values.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np


class Kind(NamedTuple):
    """What a whole number is, as a warning names it ("a rank"), and the largest value it may have (the least is 0)."""
    noun: str
    high: int


# A rank is below MAX_RANK: the largest training clusters have ~10^5 devices. A larger "rank" (a rank_size of
# 99,999,999 in a file name) would make every rank-sized loop and allocation unbounded.
MAX_RANK = 1_048_575  # 2**20 - 1
# Steps, ids, counts and sizes: whole numbers a float64 holds exactly (a column is often read as floats first).
MAX_WHOLE = 2**53 - 1

RANK = Kind("a rank", MAX_RANK)
STEP = Kind("a step", MAX_WHOLE)
ID = Kind("an id", MAX_WHOLE)
COUNT = Kind("a count", MAX_WHOLE)
# Python's int() refuses text past 4,300 digits (a ValueError of its own); anything past this is out of range.
_LONGEST_DIGITS = 20


def whole(value: Any, kind: Kind = COUNT) -> int | None:
    """`value` (an int, a float, or text such as "12", "12.0", "1e3") as an int in 0..kind.high; None where it is
    not such a number (bool, None, non-finite, fractional, negative, too large, not a number)."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return None
    if isinstance(value, (int, np.integer)):
        number = int(value)
        return number if 0 <= number <= kind.high else None
    if isinstance(value, (float, np.floating)):
        number = float(value)
        return int(number) if math.isfinite(number) and number.is_integer() and 0 <= number <= kind.high else None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        text = value.strip()
        if not text.isascii():  # int() and float() read other scripts' digits; no profiler writes them
            return None
        if text.isdigit():
            return whole(int(text), kind) if len(text) <= _LONGEST_DIGITS else None
        try:
            return whole(float(text), kind)
        except ValueError:
            return None
    return None


def wholes(values: Any, kind: Kind) -> tuple[np.ndarray, np.ndarray]:
    """(the values as int64, 0 where not kept; which are whole numbers of `kind`) for a column (numpy, pandas,
    Arrow or a list)."""
    array = _array(values)
    if array.dtype.kind in "iu":
        keep = (array >= 0) & (array <= kind.high)
        return np.where(keep, array, 0).astype(np.int64), keep
    if array.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            keep = np.isfinite(array) & (array >= 0) & (array <= kind.high) & (np.floor(array) == array)
        return np.where(keep, array, 0).astype(np.int64), keep
    numbers = [whole(value, kind) for value in array]
    keep = np.fromiter((number is not None for number in numbers), bool, len(numbers))
    return np.fromiter((number or 0 for number in numbers), np.int64, len(numbers)), keep


# Rows named in a warning; the count says how many more.
NAMED_ROWS = 5


def checked(values: Any, kind: Kind, file_name: str, column: str, warnings: list[str],
            rows: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """`wholes` of a column of `file_name`, with one warning naming the rows not kept (their 1-based number among
    the data rows, or `rows`' labels) and their values; the caller drops those rows."""
    array = _array(values)
    numbers, keep = wholes(array, kind)
    if not keep.all():
        bad = np.flatnonzero(~keep)
        labels = [rows[i] if rows is not None else i + 1 for i in bad[:NAMED_ROWS]]
        shown = ", ".join(f"{label} ({_shown(array[i])})" for label, i in zip(labels, bad[:NAMED_ROWS]))
        more = f" and {len(bad) - NAMED_ROWS} more" if len(bad) > NAMED_ROWS else ""
        warnings.append(f"{file_name}: {column} of row(s) {shown}{more} is not {kind.noun} (a whole number "
                        f"0-{kind.high:,}): {'that row' if len(bad) == 1 else 'those rows'} left out")
    return numbers, keep


def _array(values: Any) -> np.ndarray:
    """A column (numpy, pandas, Arrow or a list) as a numpy array; a list as objects, each value as it was."""
    import pandas as pd
    if isinstance(values, list):
        return np.asarray(values, dtype=object) if values else np.zeros(0, object)
    if type(values).__module__.startswith("pyarrow"):
        return values.to_numpy(zero_copy_only=False)
    return values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)


def _shown(value: Any) -> str:
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= 24 else text[:21] + "..."

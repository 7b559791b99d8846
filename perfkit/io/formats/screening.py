"""Screening of a reader's tables: the one check of every number that crosses into the model (`screened`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from .base import Parts
from .tables import Table, column_names, float_columns, is_arrow, rows_where, with_column


def screened(result: dict[int, Parts]) -> dict[int, Parts]:
    """A reader's result without values no measurement can have, each change said in a warning: the one
    check of every number that crosses into the model.

    A number the schema's column cannot hold (infinite, NaN spelled in a file, an integer outside int64 such
    as a 23-digit step id) becomes unknown. A negative or infinite duration is a broken file, not a
    measurement: it becomes unknown too (op types left without a time are dropped). A step or op row written
    twice is dropped (REPEATABLE); steps without a total are said. Applied to each reader's result before it
    is cached, so a warm load warns as the cold one did. numpy on each column: a cluster question screens
    hundreds of small step tables.
    """
    for rank, parts in result.items():
        for name, frame in list(parts.tables.items()):
            if frame is None:
                continue
            frame = _representable(frame, name, rank, parts.warnings)
            names = column_names(frame)
            times = [c for c in names if str(c).endswith("_ms")]
            if times:
                block = float_columns(frame, times)  # one conversion for every time column
                bad = np.isinf(block) | (block < 0)
                for position in np.flatnonzero(bad.any(axis=0)):
                    column, column_bad = times[position], bad[:, position]
                    parts.warnings.append(f"rank {rank}: {name}.{column}: {int(column_bad.sum())} negative or "
                                          "infinite values treated as unknown")
                    frame = with_column(frame, column, np.where(column_bad, np.nan, block[:, position]))
            if name == "op_types" and "total_ms" in names:
                timed = ~np.isnan(float_columns(frame, ["total_ms"])[:, 0])
                if not timed.all():
                    parts.warnings.append(f"rank {rank}: op_types: dropped {int((~timed).sum())} op type(s) "
                                          "without a total time")
                    frame = rows_where(frame, timed)
            if "input_shapes" in names:
                _say_unbounded_shapes(frame, name, rank, parts.warnings)
            if name in REPEATABLE and REPEATABLE[name].key in names and _repeats(frame, REPEATABLE[name].key):
                frame = _without_repeated_rows(frame, name, rank, parts.warnings)
            if name == "steps" and "step" in names:
                untimed = int(np.isnan(float_columns(frame, ["total_ms"])).sum()) if "total_ms" in names else 0
                if untimed:
                    parts.warnings.append(f"rank {rank}: steps: {untimed} step(s) without a total time are left out "
                                          "of step means")
            parts.tables[name] = frame
    return result


def screened_many(results: list) -> list:
    """`screened` of each of `results` ({rank: Parts}; anything else, a reader's error, passes as it is), the many
    small Arrow tables of a worker's task looked at together: a result is screened on its own only where one of its
    tables holds what screened changes or says (_flagged), or is not a plain Arrow table; every other result is
    what screened would give, untouched. Screened one by one, a large run's thousands of step and communication
    tables cost as much as reading their files."""
    import pyarrow as pa

    alone: set[int] = set()
    groups: dict[tuple, list[tuple[int, Table]]] = {}
    for index, result in enumerate(results):
        if not isinstance(result, dict):
            continue
        for parts in result.values():
            for name, frame in parts.tables.items():
                if frame is None:
                    continue
                if type(frame) is not pa.Table or "input_shapes" in frame.column_names:
                    alone.add(index)
                else:
                    groups.setdefault((name, frame.schema), []).append((index, frame))
    for (name, _), members in groups.items():
        lengths = np.array([frame.num_rows for _, frame in members])
        flagged = _flagged(pa.concat_tables([frame for _, frame in members]), name, np.cumsum(lengths))
        alone.update(members[position][0] for position in np.flatnonzero(flagged))
    return [screened(result) if index in alone else result for index, result in enumerate(results)]


def _flagged(frame: Table, name: str, ends: np.ndarray) -> np.ndarray:
    """Of the tables gathered in `frame` (the k-th one's rows end at ends[k]), those that hold a value screened
    changes or a row it says something of: a value its schema column cannot hold (_representable), a negative or
    infinite time, an op type without a time, a step without a total, or a repeated key (REPEATABLE)."""
    from ...core.model import SCHEMA
    import pyarrow as pa

    names = column_names(frame)
    bad = np.zeros(frame.num_rows, bool)
    for column, dtype in SCHEMA.get(name, {}).items():
        if column in names and dtype in ("int64", "Int64", "float64") and not column.endswith("_ms") \
                and pa.types.is_floating(frame.schema.field(column).type):
            numbers = frame.column(column).to_numpy()
            with np.errstate(invalid="ignore"):
                past = (np.abs(numbers) >= 2.0**63) | (np.floor(numbers) != numbers) if dtype != "float64" else False
                bad |= np.isinf(numbers) | (past & ~np.isnan(numbers))
    times = [c for c in names if str(c).endswith("_ms")]
    if times:
        block = float_columns(frame, times)
        bad |= (np.isinf(block) | (block < 0)).any(axis=1)
    if (name == "op_types" or name == "steps") and "total_ms" in names:
        bad |= np.isnan(float_columns(frame, ["total_ms"])[:, 0])
    flagged = np.zeros(len(ends), bool)
    flagged[np.searchsorted(ends, np.flatnonzero(bad), side="right")] = True
    if name in REPEATABLE and REPEATABLE[name].key in names:
        flagged |= _repeated_within(frame.column(REPEATABLE[name].key), ends)
    return flagged


def _repeated_within(keys, ends: np.ndarray) -> np.ndarray:
    """Per gathered table (rows ending at `ends`), whether a value of its `keys` is in more than one of its rows
    (an unknown value counts as one value, as _repeats has it)."""
    import pyarrow as pa

    if not (pa.types.is_integer(keys.type) or pa.types.is_floating(keys.type)):
        starts = np.concatenate([[0], ends[:-1]])
        return np.array([_repeats(pa.table({"key": keys.slice(start, end - start)}), "key")
                         for start, end in zip(starts, ends)], bool)
    values = keys.to_numpy().astype(np.float64)
    member = np.repeat(np.arange(len(ends)), np.diff(ends, prepend=0))
    order = np.lexsort((values, member))
    values, member = values[order], member[order]
    same = (member[1:] == member[:-1]) & ((values[1:] == values[:-1]) | (np.isnan(values[1:]) & np.isnan(values[:-1])))
    flagged = np.zeros(len(ends), bool)
    flagged[member[1:][same]] = True
    return flagged


def _representable(frame: Table, name: str, rank: int, warnings: list[str]) -> Table:
    """`frame` with each value of its schema's numeric columns that the column's type cannot hold (past int64, a
    fraction in an integer column, not finite) made unknown (NA), counted in a warning per column; `*_ms` columns
    are left to screened's duration check (which also refuses negatives). Object columns (tables built from JSON)
    are checked value by value, numeric ones with numpy; an Arrow table's columns are typed, and only its floats can hold such values."""
    from ...core.model import SCHEMA
    arrow = is_arrow(frame)
    names = column_names(frame)
    for column, dtype in SCHEMA.get(name, {}).items():
        if not arrow and column in names and dtype == "string" and frame[column].dtype == object:
            frame = _text_column(frame, column, name, rank, warnings)
        if column not in names or dtype not in ("int64", "Int64", "float64") or column.endswith("_ms"):
            continue
        integer = dtype != "float64"
        if arrow:
            import pyarrow as pa
            if not pa.types.is_floating(frame.schema.field(column).type):
                continue
            values = frame.column(column).to_numpy()
        else:
            values = frame[column]
        if values.dtype == object:
            bad = np.fromiter((not _holds(value, integer) for value in values), bool, len(values))
        elif pd.api.types.is_float_dtype(values.dtype):
            numbers = values if arrow else values.to_numpy(dtype=np.float64, na_value=np.nan)
            with np.errstate(invalid="ignore"):
                past = (np.abs(numbers) >= 2.0**63) | (np.floor(numbers) != numbers) if integer else False
                bad = np.isinf(numbers) | (past & ~np.isnan(numbers))
        else:
            continue
        if bad.any():
            warnings.append(f"rank {rank}: {name}.{column}: {int(bad.sum())} value(s) "
                            f"{'not whole numbers in the int64 range' if integer else 'not finite'} treated as unknown")
            frame = (with_column(frame, column, np.where(bad, np.nan, values)) if arrow else
                     frame.assign(**{column: values.where(~bad, None if values.dtype == object else np.nan)}))
    return frame


def _say_unbounded_shapes(frame: Table, name: str, rank: int, warnings: list[str]) -> None:
    """Shapes whose dimensions no tensor has (`1e400`, `inf`) are read as unknown by op_work.parse_shapes; said here,
    once per table, since their op's work (FLOPs) is then unknown."""
    from ...core.op_work import MAX_DIM, unbounded_shapes
    if is_arrow(frame):
        import pyarrow.compute as pc
        column = frame.column("input_shapes")
        distinct = pc.unique(column.combine_chunks().dictionary if hasattr(column.type, "value_type")
                             else column).to_pylist()
    else:
        distinct = frame["input_shapes"].dropna().unique().tolist()
    count = unbounded_shapes(distinct)
    if count:
        warnings.append(f"rank {rank}: {name}.input_shapes: {count} shape(s) with a dimension that is not a number "
                        f"up to {MAX_DIM:,} read as unknown (the op's work is unknown)")


def _text_column(frame: pd.DataFrame, column: str, name: str, rank: int, warnings: list[str]) -> pd.DataFrame:
    """A text column whose cells may be bytes (a BLOB in a damaged database): those decoded, U+FFFD for
    what is not UTF-8, and counted."""
    values = frame[column]
    raw = np.fromiter((isinstance(value, (bytes, bytearray)) for value in values), bool, len(values))
    if not raw.any():
        return frame
    warnings.append(f"rank {rank}: {name}.{column}: {int(raw.sum())} value(s) stored as bytes, not text, read as "
                    "UTF-8 (U+FFFD where they are not)")
    return frame.assign(**{column: [bytes(value).decode("utf-8", "replace") if is_raw else value
                                    for value, is_raw in zip(values, raw)]})


def _holds(value: Any, integer: bool) -> bool:
    """Whether a column of int64 (`integer`) or float64 can hold `value`; None, NA and text are left to
    model.table, which makes what is not a number unknown."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return True
    if isinstance(value, (int, np.integer)):
        return -2**63 <= int(value) < 2**63 if integer else abs(int(value)) < 2**1023
    return np.isnan(value) or (np.isfinite(value) and (not integer or abs(value) < 2.0**63
                                                       and float(value).is_integer()))


class Keyed(NamedTuple):
    """A table with one row per value of `key`: what its rows are (`noun`) and how its key is named."""
    key: str
    noun: str
    key_named: str


REPEATABLE = {"steps": Keyed("step", "step", "step id"), "ops": Keyed("name", "op", "op name")}


def _repeats(frame: Table, key: str) -> bool:
    """Whether a value of `key` is in more than one row (unknown values count as one value)."""
    if is_arrow(frame):
        import pyarrow.compute as pc
        return pc.count_distinct(frame.column(key), mode="all").as_py() < frame.num_rows
    return bool(frame[key].duplicated().any())


def _without_repeated_rows(frame: Table, name: str, rank: int, warnings: list[str]) -> Table:
    """A row written twice (a copied line, a re-run appended) would count twice in every mean and total:
    identical copies are dropped; a key repeated with other values is kept and said."""
    if is_arrow(frame):  # rare: compared row by row in pandas, given back as Arrow
        import pyarrow as pa
        return pa.Table.from_pandas(_without_repeated_rows(frame.to_pandas(), name, rank, warnings),
                                    preserve_index=False)
    key, noun, key_named = REPEATABLE[name]

    def first_keys(rows: pd.Series) -> str:
        return ", ".join(str(value) for value in frame.loc[rows, key].unique()[:5])

    copies = frame.duplicated(keep="first")
    if copies.any():
        warnings.append(f"rank {rank}: {name}: dropped {int(copies.sum())} duplicated {noun} row(s) "
                        f"({noun} {first_keys(copies)})")
        frame = frame[~copies]
    repeated = frame[key].duplicated(keep=False)
    if repeated.any():
        warnings.append(f"rank {rank}: {name}: {key_named}(s) {first_keys(repeated)} appear more than once with "
                        f"different values; each row counts as one {noun}")
    return frame

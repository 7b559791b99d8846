"""A reader's table, pandas or Arrow (Parts.tables), and the few operations readers, screening and the loader
need of either."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# A reader's table: pandas, or Arrow where a reader runs once per rank of hundreds (base.Parts).
Table = Union["pd.DataFrame", "pa.Table"]


def column_names(table: Table) -> list[str]:
    return list(table.column_names) if is_arrow(table) else list(table.columns)


def is_arrow(table) -> bool:
    return type(table).__module__.startswith("pyarrow")


def as_pandas(table: Table) -> pd.DataFrame:
    """A reader's table as a DataFrame (for the few steps that need one rank's table in pandas)."""
    return table.to_pandas() if is_arrow(table) else table


def with_column(table: Table, name: str, values) -> Table:
    """`table` with column `name` (added where absent) holding `values` (a numpy or pandas array)."""
    if is_arrow(table):
        import pyarrow as pa
        values = pa.array(values)
        if name in table.column_names:
            return table.set_column(table.column_names.index(name), name, values)
        return table.append_column(name, values)
    return table.assign(**{name: values})


def rows_where(table: Table, keep: np.ndarray) -> Table:
    """The rows of `table` where `keep` (a boolean array) is True."""
    if is_arrow(table):
        import pyarrow as pa
        return table.filter(pa.array(keep))
    return table[keep]


def float_columns(frame: Table, columns: list[str]) -> np.ndarray:
    """`columns` of `frame` as a 2-D float array; a value that is not a number (or none) is NaN. An all-numeric
    frame (a step table) converts in one call: selecting columns by a list of names costs more than the data."""
    import pandas as pd
    if is_arrow(frame):
        import pyarrow as pa
        return np.column_stack([
            frame.column(c).to_numpy().astype(np.float64, copy=False)
            if pa.types.is_floating(frame.schema.field(c).type) or pa.types.is_integer(frame.schema.field(c).type)
            else pd.to_numeric(pd.Series(frame.column(c).to_numpy(zero_copy_only=False)), errors="coerce")
            .to_numpy(dtype=np.float64, na_value=np.nan) for c in columns])
    if all(_numeric(t) for t in frame.dtypes):
        positions = [frame.columns.get_loc(c) for c in columns]
        return frame.to_numpy(dtype=np.float64, na_value=np.nan)[:, positions]
    return np.column_stack([(frame[c] if _numeric(frame[c].dtype) else pd.to_numeric(frame[c], errors="coerce"))
                            .to_numpy(dtype=np.float64, na_value=np.nan) for c in columns])


def _numeric(dtype) -> bool:
    import pandas as pd
    return pd.api.types.is_float_dtype(dtype) or pd.api.types.is_integer_dtype(dtype)


def string_codes(column: "pa.ChunkedArray") -> tuple[np.ndarray, "pa.Array"]:
    """(code per row, -1 where there is no value; the distinct values) of a string column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    array = column.combine_chunks()
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    indices = array.indices if array.null_count == 0 else pc.fill_null(array.indices, -1)
    return indices.to_numpy(zero_copy_only=False), array.dictionary


def strings_at(codes: np.ndarray, distinct: "pa.Array") -> "pa.Array":
    """Values by code (-1: no value, null), as text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.take(distinct, pa.array(codes, mask=codes < 0)).cast(pa.string())

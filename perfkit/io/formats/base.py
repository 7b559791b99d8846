"""The reader protocol, what every reader returns, and the small parsing helpers readers share.

Each layout module under perfkit/io/formats/ declares one `Reader` (`READER = Reader(...)` at its end) and
perfkit/io/formats/__init__.py lists them in priority order. The loader (perfkit/io/loader.py) only talks to
readers through this protocol.
"""

from __future__ import annotations

import contextvars
import fnmatch
import functools
import math
import os
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Sequence, Union

import numpy as np
import pandas as pd

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.files import open_regular
from ...core.units import BYTES_PER_MB


@dataclass
class Parts:
    """A reader's contribution to one rank of a Run (or, keyed RUN_WIDE, to every rank).

    `tables` maps schema table names (see model.SCHEMA) to tables without the rank column: pandas DataFrames,
    or pyarrow Tables, which the loader keeps as Arrow until it has every rank's piece of a table and then
    makes one DataFrame of them all (a reader that runs once per rank of a cluster gives Arrow: thousands of
    small DataFrames, each built, screened and concatenated on its own, cost more than the bytes they hold).
    It may also hold the INTERMEDIATE_TABLES that a derivation (formats.DERIVATIONS) turns into a schema table.
    A RUN_WIDE Parts' table with a `rank` column is split by it; one without goes to every rank of the run.
    `meta` holds Meta field values the files tell; `sources` the files read (for messages).
    """

    tables: dict[str, "Table"] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


RUN_WIDE = -1  # Parts key for facts that hold for every rank (a top-level perfkit_run.json)

# Tables a reader may give besides the schema's (model.SCHEMA), which a derivation turns into a schema table,
# with their columns:
INTERMEDIATE_TABLES: dict[str, tuple[str, ...]] = {
    "op_events": ("name", "start_ns", "dur_ms"),    # one row per op execution; start_ns: int64 epoch ns
    "step_times": ("step", "begin_ns", "end_ns"),   # step wall-clock bounds recorded by `perfkit profile`
}


@dataclass
class Reader:
    """One on-disk layout: which folders are its own, and how to read them.

    `detect(folder)` must be cheap (file names only): discovery runs every reader's detect on every folder
    of a 256-rank tree. `read(folder)` returns {rank: Parts} for the ranks found there (RUN_WIDE for facts
    that hold for every rank). `read_steps(folder)`, where a layout can give its steps from one small
    file, answers cross-rank questions (`perfkit ranks`) without reading every kernel table; layouts
    without it are loaded whole for those questions.

    Where two sources give a rank the same table, the loader takes, in this order: the table of the
    reader first in priority (formats.readers(): perfkit's registry order, then installed plugins) among
    those that do not merely fill it; the table a derivation makes (steps from op events or recorded step
    times); the table of a reader that `fills` it. A table that replaces what another reader gave or what a
    derivation would make from another reader's tables is said in a warning: never silently.
    """

    name: str                                   # the layout's name, Meta.layout of the runs it reads
    provides: frozenset[str]                    # the tables its Parts may hold (schema or INTERMEDIATE_TABLES)
    detect: Callable[[Path], bool]
    read: Callable[[Path], "dict[int, Parts]"]
    read_steps: Callable[[Path], "dict[int, Parts]"] | None = None
    # A unit reader's folder is a rank's main data: two of its folders for one rank are two runs, not one.
    # The others (dataset profiling, perfkit's manifest) add to a rank whichever folder they sit in.
    unit: bool = True
    # Called once per rank with all of that rank's tables, from every reader, to finish this reader's
    # tables in place where they need another reader's (memory samples put on the clock of the steps
    # perfkit profile recorded).
    finish: Callable[[dict], None] | None = None
    # Tables of `provides` this reader gives only where nothing else does (see the class doc): step totals
    # from a training log must not replace the steps, with their split, that a profiler's op events give.
    fills: frozenset[str] = frozenset()
    # What the loader says when nothing under a path is read: the files this reader looks for ...
    looks_for: str = ""
    # ... and, asked of every reader, a sentence about what the folder holds instead and how to make it
    # readable (raw CANN data: the command that analyses it), or None.
    raw_data_hint: Callable[[Path], str | None] | None = None
    # Whether its op tables hold every op the device ran, so that step time no op covers is device idle (the
    # ledger's gaps). Legacy Ascend's aicore_intermediate files hold AI Core ops only: AI CPU time would read as idle.
    ops_cover_device: bool = False
    # The installed package it comes from ("entry point name = module:attribute"), None for perfkit's own.
    plugin: str | None = None

    def __repr__(self) -> str:  # shown in test ids and messages; the functions' reprs say nothing
        return f"Reader({self.name})"

    @property
    def label(self) -> str:
        """The reader as messages name it."""
        return f"the {self.name} reader" + (f" (plugin {self.plugin})" if self.plugin else "")


@dataclass(frozen=True)
class Derivation:
    """A schema table the loader makes for a rank that no reader gave it, from the rank's other tables.

    `derive(rank, tables)` gets the rank's tables when any of `needs` is among them and returns
    (the table or None, Meta field values, warnings). Among the values, `no_op_data: True` says the table holds
    totals the profiler's op data could not split: the loader marks such a run `incomplete`.
    """

    table: str
    needs: tuple[str, ...]
    derive: Callable[[int, "dict[str, pd.DataFrame]"], "tuple[pd.DataFrame | None, dict[str, Any], list[str]]"]


RANK_SUFFIX = re.compile(r"_(\d+)(?:_[a-z_]+)?\.(?:csv|txt|json)$")


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
            if name in REPEATABLE and REPEATABLE[name].key in names and _repeats(frame, REPEATABLE[name].key):
                frame = _without_repeated_rows(frame, name, rank, parts.warnings)
            if name == "steps" and "step" in names:
                untimed = int(np.isnan(float_columns(frame, ["total_ms"])).sum()) if "total_ms" in names else 0
                if untimed:
                    parts.warnings.append(f"rank {rank}: steps: {untimed} step(s) without a total time are left out "
                                          "of step means")
            parts.tables[name] = frame
    return result


# A reader's table, pandas or Arrow (Parts.tables); the few operations screening and the loader need of either.
Table = Union[pd.DataFrame, "pa.Table"]


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


def _representable(frame: Table, name: str, rank: int, warnings: list[str]) -> Table:
    """`frame` with each value of its schema's numeric columns that the column's type cannot hold made
    unknown (NA), counted in a warning per column; `*_ms` columns are left to screened's duration check
    (which also refuses negatives). Object columns (tables built from JSON) are checked value by value,
    numeric ones with numpy; an Arrow table's columns are typed, and only its floats can hold such values."""
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
            bad = np.isinf(numbers) | ((np.abs(numbers) >= 2.0**63) if integer else False)
        else:
            continue
        if bad.any():
            warnings.append(f"rank {rank}: {name}.{column}: {int(bad.sum())} value(s) "
                            f"{'out of the int64 range' if integer else 'not finite'} treated as unknown")
            frame = (with_column(frame, column, np.where(bad, np.nan, values)) if arrow else
                     frame.assign(**{column: values.where(~bad, None if values.dtype == object else np.nan)}))
    return frame


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
    return np.isnan(value) or (np.isfinite(value) and (not integer or abs(value) < 2.0**63))


def float_columns(frame: Table, columns: list[str]) -> np.ndarray:
    """`columns` of `frame` as a 2-D float array; a value that is not a number (or none) is NaN. An all-numeric
    frame (a step table) converts in one call: selecting columns by a list of names costs more than the data."""
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


def is_real_number(value: Any) -> bool:
    """Whether a decoded JSON value is a finite number (True and False are ints to Python, not numbers here)."""
    return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and math.isfinite(value))


def _numeric(dtype) -> bool:
    return pd.api.types.is_float_dtype(dtype) or pd.api.types.is_integer_dtype(dtype)


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


def trim_type_separator(types):
    """Op types (a pyarrow string array) without a trailing `_`. HCCL writes a collective's type as its kernel
    name less the ids (`hcom_allReduce__586_0_1` -> `hcom_allReduce_`, in kernel_details.csv and the database's
    COMMUNICATION_OP alike): the `_` is the separator before the ids, not part of the type."""
    import pyarrow.compute as pc
    return pc.utf8_rtrim(types, characters="_")


def rank_of(file_name: str) -> int | None:
    """The rank in a file name such as `aicore_intermediate_3_type.csv` or `framework_raw_0.csv`."""
    match = RANK_SUFFIX.search(file_name)
    return int(match.group(1)) if match else None


def ranks_in(folder: Path, patterns: Iterable[str]) -> list[int]:
    """The ranks named by the files of `folder` that match any of the glob `patterns`, sorted."""
    return sorted({rank for pattern in patterns for path in folder.glob(pattern)
                   if (rank := rank_of(path.name)) is not None})


def has_match(folder: Path, patterns: Iterable[str]) -> bool:
    """Whether an entry of `folder` matches one of the glob `patterns`: one directory listing for all
    patterns, and within `listings_kept()` one for all readers (discovery runs every reader's detect on every
    folder of a 4,096-rank tree: ~17 questions a folder)."""
    kept = _LISTINGS.get()
    place = os.fspath(folder)  # a str key: hashing a Path rebuilds its parts, tens of thousands of times here
    names = kept.get(place) if kept is not None else None
    if names is None:
        try:
            names = frozenset(entry.name for entry in os.scandir(place))
        except OSError:
            names = frozenset()
        if kept is not None:
            kept[place] = names
    literal, globbed = _split_patterns(tuple(patterns))
    if not names.isdisjoint(literal):
        return True
    return globbed is not None and any(globbed.match(name) for name in names)


@functools.lru_cache(maxsize=256)
def _split_patterns(patterns: tuple[str, ...]) -> tuple[frozenset[str], re.Pattern | None]:
    """(the patterns that are plain file names, one regex for the rest): most detect patterns name one file,
    a set lookup; fnmatch.filter once per pattern and folder was a third of discovering a 4,096-rank run.
    Case-sensitive, as fnmatch is on POSIX."""
    literal = frozenset(pattern for pattern in patterns if not GLOB_CHARACTERS.search(pattern))
    globbed = [pattern for pattern in patterns if pattern not in literal]
    return literal, (re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in globbed))
                     if globbed else None)


GLOB_CHARACTERS = re.compile(r"[*?\[]")
_LISTINGS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("perfkit_listings", default=None)


@contextmanager
def listings_kept():
    """has_match lists each folder once inside this block (one discovery: the tree does not change under it)."""
    token = _LISTINGS.set({})
    try:
        yield
    finally:
        _LISTINGS.reset(token)


def walk_names(root: Path, depth: int):
    """(folder, entry names) under root to `depth`, breadth first, not following symlinks, not entering
    PROF_* folders (raw CANN data)."""
    queue = [(root, 0)]
    while queue:
        folder, level = queue.pop(0)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        yield folder, [entry.name for entry in entries]
        if level < depth:
            queue += [(Path(entry.path), level + 1) for entry in entries
                      if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("PROF_")]


def read_text(path: Path) -> str:
    """A whole text file, with the user-facing errors for the usual ways it is broken."""
    try:
        with open_regular(path) as handle:
            raw = handle.read()
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    if not raw.strip():
        raise FileFormatError("is empty", path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", path) from None


def read_json_object(path: Path, warnings: list[str]) -> dict:
    """A JSON file whose top level is an object, through the bounded decoder (perfkit/core/boundedjson.py): a
    file cut off mid-write or nested too deep is a FileFormatError; what the decoder changed (numbers out
    of range, lone surrogates) is one warning naming the file."""
    counts = boundedjson.Counts()
    try:
        data = boundedjson.loads(read_text(path), counts)
    except boundedjson.JSONError as exc:
        raise FileFormatError(exc.message, path) from None
    if not isinstance(data, dict):
        raise FileFormatError(f"is not a JSON object (found {type(data).__name__})", path)
    if counts.notes():
        warnings.append(f"{path.name}: " + "; ".join(counts.notes()))
    return data


def json_object(parts: Parts, path: Path) -> dict | None:
    """`read_json_object` through `guarded`: None, with a warning, where the file is broken."""
    return guarded(parts, path, lambda p: read_json_object(p, parts.warnings))


def is_readable_file(parts: Parts, path: Path) -> bool:
    """Whether `path` is a file to read. A name that is there but is no file (a symlink loop, a dangling
    link, a folder, a FIFO) is said in a warning, never passed over in silence: what open_regular finds."""
    if path.is_file():
        return True
    if os.path.lexists(path):
        try:
            open_regular(path).close()
            why = "not a readable file"  # it became one since is_file: read it next time
        except FileFormatError as exc:
            why = exc.message
        parts.warnings.append(f"skipped {path.name}: {why}")
    return False


def guarded(parts: Parts, path: Path, reader: Callable[[Path], Any]) -> Any:
    """Run `reader(path)`; a broken file becomes a warning on `parts` and None, so the rest still loads.
    An absent file is None, one that is there but no file a warning too (`is_readable_file`)."""
    if not is_readable_file(parts, path):
        return None
    try:
        result = reader(path)
    except FileFormatError as exc:
        parts.warnings.append(f"skipped {path.name}: {exc.message}")
        return None
    parts.sources.append(str(path))
    return result


def op_passes(full_names: Sequence[str] | pd.Series | pd.Index) -> np.ndarray:
    """forward / backward / other for each op full scope name.

    MindSpore puts backward kernels under `Gradients/` and forward ones under `Default/`;
    optimizer updates live under `Default/optimizer-*` and are neither. Arrow's string kernels:
    a legacy or GPU detail table holds a million distinct names, a cluster run hundreds of small
    tables, where pandas' str accessor costs more per call than the names.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pc.fill_null(pa.array(full_names, type=pa.string(), from_pandas=True), "")
    backward = pc.starts_with(names, "Gradients/").to_numpy(zero_copy_only=False)
    forward = pc.and_(pc.starts_with(names, "Default/"),
                      pc.invert(pc.match_substring(names, "/optimizer"))).to_numpy(zero_copy_only=False)
    return np.select([backward, forward], ["backward", "forward"], "other").astype(object)


def op_types_of(full_names: Iterable[str]) -> list[str]:
    """`Default/net/conv1-Conv2d/Conv2D-op13` -> `Conv2D`, for each name.

    str.rpartition instead of a regex: 0.5 s instead of 3 s over a million names.
    """
    types = []
    for name in full_names:
        base = name.rpartition("/")[2]
        head, separator, number = base.rpartition("-op")
        types.append(head if separator and number.isdecimal() else base)
    return types


# Arrow's reader threads pay off only on big files; a cluster run reads hundreds of small ones, one per
# worker process and core (kernel_details.csv of 1.3 MB: 6.3 ms on one thread, 4.3 ms on two, and
# the second core is another worker's).
THREADED_CSV_BYTES = 8 * BYTES_PER_MB
# A file read on one thread is parsed as one block (Arrow's default is 1 MiB): a 1.3 MB kernel_details.csv
# otherwise comes in two chunks, each with its own dictionaries of names, types and shapes, which are then
# unified. Bounded: only files below THREADED_CSV_BYTES are read so; bigger ones keep Arrow's blocks.
SINGLE_BLOCK_SLACK = 1024


def _read_csv_arrow(path: Path, parse_options, convert_options):
    """pyarrow's parse of `path`. A file below THREADED_CSV_BYTES goes through Arrow's streaming reader as one
    block (the same table: its types are inferred from that block, which is the whole file): pyarrow's
    read_csv starts a thread for every file even with use_threads=False, ~0.1-0.2 ms a file, and a rank of a
    cluster run is six small CSV files (op_statistic.csv: 0.10 ms instead of 0.20)."""
    import pyarrow.csv as pacsv

    size = path.stat().st_size
    if size > THREADED_CSV_BYTES:
        return pacsv.read_csv(path, read_options=pacsv.ReadOptions(use_threads=True), parse_options=parse_options,
                              convert_options=convert_options)
    return pacsv.open_csv(path, read_options=pacsv.ReadOptions(use_threads=False, block_size=size + SINGLE_BLOCK_SLACK),
                          parse_options=parse_options, convert_options=convert_options).read_all()


# Cells that mean "no value" in the profilers' CSV files.
CSV_NULLS = ["", "N/A", "NA", "null", "None"]


def csv_header(path: Path) -> list[str]:
    """The header row of a CSV file, with the usual errors for an empty or non-UTF-8 file."""
    import csv
    try:
        with open_regular(path) as handle:
            first = handle.readline()
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    if not first.strip():
        raise FileFormatError("is empty", path)
    try:
        line = first.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"is not UTF-8 text (byte 0x{first[exc.start]:02x} at offset {exc.start})", path) from None
    try:
        return next(csv.reader([line.rstrip("\r\n")]))
    except csv.Error as exc:  # e.g. a header line over csv's 128 KiB field limit: not a profiler CSV
        raise FileFormatError(f"has an unparsable header line ({exc})", path) from None


def read_csv(path: Path, aliases: dict[str, tuple[str, ...]], required: tuple[str, ...],
             types: dict[str, Any], warnings: list[str]) -> pd.DataFrame:
    """`read_csv_table` as a DataFrame."""
    return read_csv_table(path, aliases, required, types, warnings).to_pandas()


def read_csv_table(path: Path, aliases: dict[str, tuple[str, ...]], required: tuple[str, ...],
                   types: dict[str, Any], warnings: list[str]):
    """The columns of a CSV file named in `aliases` ({canonical: accepted headers}), renamed to canonical,
    as a pyarrow Table (for readers that run once per rank of hundreds, where pandas' overhead dominates).

    Read with pyarrow, only the wanted columns: kernel tables reach millions of rows. Rows with the
    wrong number of cells (a file cut off mid-write) are skipped and counted in `warnings`.
    `types` maps canonical names to pyarrow types; a missing required column, a file without rows,
    non-UTF-8 text or unparsable values raise FileFormatError naming the file.
    """
    import pyarrow as pa
    import pyarrow.csv as pacsv

    header = csv_header(path)
    by_key = {name.strip().casefold(): name for name in header}
    found: dict[str, str] = {}
    for canonical, names in aliases.items():
        for name in names:
            if name.casefold() in by_key:
                found[canonical] = by_key[name.casefold()]
                break
    missing = [canonical for canonical in required if canonical not in found]
    if missing:
        wanted = ", ".join(aliases[c][0] for c in missing)
        raise FileFormatError(f"lacks column(s) {wanted} (header: {', '.join(header)[:200]})", path)
    skipped: list[int] = []

    def skip_row(row) -> str:
        skipped.append(row.actual_columns)
        return "skip"

    try:
        with _quiet_undecodable_rows():
            table = _read_csv_arrow(
                path,
                parse_options=pacsv.ParseOptions(invalid_row_handler=skip_row, newlines_in_values=False),
                convert_options=pacsv.ConvertOptions(
                    include_columns=list(found.values()),
                    column_types={found[c]: t for c, t in types.items() if c in found},
                    null_values=CSV_NULLS, strings_can_be_null=True, quoted_strings_can_be_null=True))
    except pa.ArrowInvalid as exc:
        bad_byte = _first_non_utf8(path)
        if bad_byte is not None:
            raise FileFormatError(f"is not UTF-8 text (at byte offset {bad_byte})", path) from None
        raise FileFormatError(f"cannot be parsed ({str(exc).splitlines()[0][:200]})", path) from None
    if skipped:
        warnings.append(f"{path.name}: skipped {len(skipped)} row(s) with the wrong number of cells "
                        f"(truncated or malformed)")
    if table.num_rows == 0:
        raise FileFormatError("has a header but no rows", path)
    return table.rename_columns([next(c for c, actual in found.items() if actual == name)
                                 for name in table.column_names])


@contextmanager
def _quiet_undecodable_rows():
    """pyarrow decodes a malformed row's text before it calls invalid_row_handler; non-UTF-8 bytes make
    that raise inside pyarrow, which Python prints on stderr as "Exception ignored ... UnicodeDecodeError"
    (a traceback to the user's eye). The read then fails and read_csv reports the file as not UTF-8."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if not isinstance(unraisable.exc_value, UnicodeDecodeError):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous


def _first_non_utf8(path: Path, chunk_size: int = 1 << 24) -> int | None:
    """Offset of the first byte that is not UTF-8, read in chunks (only called once parsing failed)."""
    import codecs
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open_regular(path) as handle:
        while chunk := handle.read(chunk_size):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                return offset + exc.start
            offset += len(chunk)
    return None


# ---------------------------------------------------------------------------------------------------------
# Pipeline stages: which global ranks run each stage, from what a run's files say about its parallel layout.

# MindInsight's cluster file: ascend_cluster_analyse_{parallel_mode}_{stage_num}_{rank_size}_{rank_id}.csv
# (its ParallelAnalyser reads the name's parts 3-5 this way).
CLUSTER_FILE = re.compile(r"^ascend_cluster_analyse_([a-z]+-parallel)_(\d+)_(\d+)_(\d+)\.csv$")


def stages_from_count(stage_num: Any, rank_size: Any) -> list[list[int]] | None:
    """MindSpore's placement: rank r runs stage r // (rank_size / stage_num) (MindInsight's
    get_within_stage_communication_rate). None where the numbers do not describe a layout."""
    if type(stage_num) is not int or type(rank_size) is not int or stage_num < 1 or rank_size < stage_num:
        return None
    per_stage = rank_size / stage_num
    return [[rank for rank in range(rank_size) if int(rank // per_stage) == stage] for stage in range(stage_num)]


def stages_from_cluster_file(folder: Path) -> list[list[int]] | None:
    """Stages from a legacy cluster file's name, when its parallel mode is pipeline-parallel."""
    for path in sorted(folder.glob("ascend_cluster_analyse_*.csv")):
        match = CLUSTER_FILE.match(path.name)
        if match and match.group(1) == "pipeline-parallel":
            return stages_from_count(int(match.group(2)), int(match.group(3)))
    return None


def stages_from_pp_groups(group_info: Any) -> list[list[int]] | None:
    """Stages from profiler_metadata.json's parallel_group_info: each `pp` group lists one global rank per
    stage, in stage order; a rank's file names only its own groups (load merges the ranks' answers)."""
    if not isinstance(group_info, dict):
        return None
    groups = [entry.get("global_ranks") for entry in group_info.values()
              if isinstance(entry, dict) and entry.get("group_name") == "pp"]
    groups = [g for g in groups if isinstance(g, list) and g and all(type(r) is int for r in g)]
    if not groups:
        return None
    return [sorted({group[stage] for group in groups if stage < len(group)})
            for stage in range(max(len(g) for g in groups))]


def merged_stages(first: list[list[int]], second: list[list[int]]) -> list[list[int]]:
    """Two ranks' views of the stages, as one (each rank's metadata knows its own pp groups)."""
    length = max(len(first), len(second))
    return [sorted(set(first[s] if s < len(first) else []) | set(second[s] if s < len(second) else []))
            for s in range(length)]


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

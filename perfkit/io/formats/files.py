"""The files readers read: ranks in file names, whole text and JSON files, CSV tables, each with the user-facing
errors for the usual ways a file is broken, and `guarded`, which turns a broken file into a warning."""

from __future__ import annotations

import math
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.files import open_regular, read_regular
from ...core.units import BYTES_PER_MB
from .base import Parts
from .integers import RANK, whole

if TYPE_CHECKING:
    import pandas as pd

RANK_SUFFIX = re.compile(r"_(\d+)(?:_[a-z_]+)?\.(?:csv|txt|json)$")


def rank_of(file_name: str) -> int | None:
    """The rank in a file name such as `aicore_intermediate_3_type.csv` or `framework_raw_0.csv`; None where the
    name has none or its number is no rank (formats/integers.py: a 20-digit "rank" is not one)."""
    match = RANK_SUFFIX.search(file_name)
    return whole(match.group(1), RANK) if match else None


def ranks_in(folder: Path, patterns: Iterable[str], warnings: list[str]) -> list[int]:
    """The ranks named by the files of `folder` that match any of the glob `patterns`, sorted; a file whose name's
    number is no rank is said in `warnings` and not read."""
    ranks, refused = set(), []
    for path in sorted({path for pattern in patterns for path in folder.glob(pattern)}):
        rank = rank_of(path.name)
        if rank is not None:
            ranks.add(rank)
        elif RANK_SUFFIX.search(path.name):
            refused.append(path.name)
    if refused:
        warnings.append(f"skipped {', '.join(refused[:5])}{' and more' if len(refused) > 5 else ''}: the number in "
                        f"the name is not a rank (a whole number 0-{RANK.high:,})")
    return sorted(ranks)


def with_folder_notes(result: dict[int, Parts], warnings: list[str]) -> dict[int, Parts]:
    """`result` with what was said of the whole folder (`warnings`) once, first on its first rank."""
    if result and warnings:
        result[min(result)].warnings[:0] = warnings
    return result


def is_real_number(value: Any) -> bool:
    """Whether a decoded JSON value is a finite number (True and False are ints to Python, not numbers here)."""
    return not isinstance(value, bool) and (isinstance(value, int) or isinstance(value, float) and math.isfinite(value))


def read_text(path: str | os.PathLike, first_line: bool = False) -> str:
    """A whole text file (or its first line), with the user-facing errors for the usual ways it is broken."""
    try:
        if first_line:
            with open_regular(path) as handle:
                raw = handle.readline()
        else:
            raw = read_regular(path)
    except OSError as exc:
        raise FileFormatError(f"cannot be read ({exc.strerror or exc})", path) from None
    if not raw.strip():
        raise FileFormatError("is empty", path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileFormatError(f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})", path) from None


def read_json_object(path: str | os.PathLike, warnings: list[str]) -> dict:
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
        warnings.append(f"{os.path.basename(path)}: " + "; ".join(counts.notes()))
    return data


def json_object(parts: Parts, path: str | os.PathLike) -> dict | None:
    """`read_json_object` through `guarded`: None, with a warning, where the file is broken."""
    return guarded(parts, path, lambda p: read_json_object(p, parts.warnings))


def is_readable_file(parts: Parts, path: str | os.PathLike) -> bool:
    """Whether `path` is a file to read. A name that is there but is no file (a symlink loop, a dangling
    link, a folder, a FIFO) is said in a warning, never passed over in silence: what open_regular finds."""
    if os.path.isfile(path):
        return True
    if os.path.lexists(path):
        try:
            open_regular(path).close()
            why = "not a readable file"  # it became one since is_file: read it next time
        except FileFormatError as exc:
            why = exc.message
        parts.warnings.append(f"skipped {os.path.basename(path)}: {why}")
    return False


def guarded(parts: Parts, path: str | os.PathLike, reader: Callable[[str | os.PathLike], Any]) -> Any:
    """Run `reader(path)`; a broken file becomes a warning on `parts` and None, so the rest still loads.
    An absent file is None, one that is there but no file a warning too (`is_readable_file`)."""
    if not is_readable_file(parts, path):
        return None
    try:
        result = reader(path)
    except FileFormatError as exc:
        parts.warnings.append(f"skipped {os.path.basename(path)}: {exc.message}")
        return None
    parts.sources.append(os.fspath(path))
    return result


# Arrow's reader threads pay off only on big files; a cluster run reads hundreds of small ones, one per
# worker process and core (kernel_details.csv of 1.3 MB: 6.3 ms on one thread, 4.3 ms on two, and
# the second core is another worker's).
THREADED_CSV_BYTES = 8 * BYTES_PER_MB
# A file read on one thread is parsed as one block (Arrow's default is 1 MiB): a 1.3 MB kernel_details.csv
# otherwise comes in two chunks, each with its own dictionaries of names, types and shapes, which are then
# unified. Bounded: only files below THREADED_CSV_BYTES are read so; bigger ones keep Arrow's blocks.
SINGLE_BLOCK_SLACK = 1024


def _read_csv_arrow(path: str | os.PathLike, parse_options, convert_options):
    """pyarrow's parse of `path`. A file below THREADED_CSV_BYTES goes through Arrow's streaming reader as one
    block (the same table: its types are inferred from that block, which is the whole file): pyarrow's
    read_csv starts a thread for every file even with use_threads=False, ~0.1-0.2 ms a file, and a rank of a
    cluster run is six small CSV files (op_statistic.csv: 0.10 ms instead of 0.20)."""
    import pyarrow.csv as pacsv

    size = os.stat(path).st_size
    if size > THREADED_CSV_BYTES:
        return pacsv.read_csv(path, read_options=pacsv.ReadOptions(use_threads=True), parse_options=parse_options,
                              convert_options=convert_options)
    return pacsv.open_csv(path, read_options=pacsv.ReadOptions(use_threads=False, block_size=size + SINGLE_BLOCK_SLACK),
                          parse_options=parse_options, convert_options=convert_options).read_all()


# Cells that mean "no value" in the profilers' CSV files.
CSV_NULLS = ["", "N/A", "NA", "null", "None"]


def csv_header(path: str | os.PathLike) -> list[str]:
    """The header row of a CSV file, with the usual errors for an empty or non-UTF-8 file."""
    import csv
    line = read_text(path, first_line=True)
    try:
        return next(csv.reader([line.rstrip("\r\n")]))
    except csv.Error as exc:  # e.g. a header line over csv's 128 KiB field limit: not a profiler CSV
        raise FileFormatError(f"has an unparsable header line ({exc})", path) from None


def read_csv(path: str | os.PathLike, aliases: dict[str, tuple[str, ...]], required: tuple[str, ...],
             types: dict[str, Any], warnings: list[str]) -> pd.DataFrame:
    """`read_csv_table` as a DataFrame."""
    return read_csv_table(path, aliases, required, types, warnings).to_pandas()


def read_csv_table(path: str | os.PathLike, aliases: dict[str, tuple[str, ...]], required: tuple[str, ...],
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
    if all(types.get(canonical) == pa.float64() for canonical in found):
        table = _small_float_table(path, header, found)
        if table is not None:
            return table
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
        warnings.append(f"{os.path.basename(path)}: skipped {len(skipped)} row(s) with the wrong number of cells "
                        f"(truncated or malformed)")
    if table.num_rows == 0:
        raise FileFormatError("has a header but no rows", path)
    return table.rename_columns([next(c for c, actual in found.items() if actual == name)
                                 for name in table.column_names])


# A CSV file of numbers this small (a rank's step_trace_time.csv: 0.3 KB) is parsed here when it is plainly written
# (_small_float_table): Arrow's set-up for a file, ~0.4 ms, was the most of a 4,096-rank run's read of each rank.
SMALL_CSV_BYTES = 16 * 1024
# A cell both parsers read as the same double: a plain decimal number, at most 17 significant digits and an exponent
# of two digits (Arrow and Python both round correctly; nothing here overflows, is a NaN spelled out or has a sign
# Arrow may refuse).
PLAIN_NUMBER = re.compile(r"-?[0-9]{1,17}(?:\.[0-9]{1,17})?(?:[eE][-+]?[0-9]{1,2})?")


def _small_float_table(path: str | os.PathLike, header: list[str], found: dict[str, str]):
    """The table read_csv_table's Arrow parse gives of a small CSV file whose wanted columns are all float64,
    parsed without Arrow; None, for Arrow to parse it, where the file is anything but plainly written: not ASCII,
    quoted, a lone CR, a blank line, a row of another width, a repeated header, a cell neither a PLAIN_NUMBER nor
    one of CSV_NULLS, or no row at all (Arrow's path then says what is wrong, as it always did)."""
    import pyarrow as pa

    try:
        if os.stat(path).st_size > SMALL_CSV_BYTES:
            return None
        raw = read_regular(path, SMALL_CSV_BYTES + 1)
    except (OSError, FileFormatError):
        return None
    if len(raw) > SMALL_CSV_BYTES or not raw.isascii() or b'"' in raw:
        return None
    text = raw.decode("ascii").replace("\r\n", "\n")
    lines = text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
    if "\r" in text or len(lines) < 2 or lines[0].split(",") != header or len(set(header)) != len(header):
        return None
    at = [header.index(name) for name in found.values()]
    width = len(header)
    columns: list[list] = [[] for _ in at]
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) != width or not line:
            return None
        for column, index in zip(columns, at):
            cell = cells[index]
            if cell in CSV_NULLS:
                column.append(None)
            elif PLAIN_NUMBER.fullmatch(cell):
                column.append(float(cell))
            else:
                return None
    rows = len(lines) - 1  # one array of every value sliced into columns: Arrow's set-up per array is most of it
    values = pa.array([value for column in columns for value in column], pa.float64())
    return pa.Table.from_arrays([values.slice(index * rows, rows) for index in range(len(columns))],
                                names=list(found))


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


def _first_non_utf8(path: str | os.PathLike, chunk_size: int = 1 << 24) -> int | None:
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

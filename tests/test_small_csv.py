"""A small CSV file of numbers (a rank's step_trace_time.csv) is parsed without Arrow (formats/files.py:
_small_float_table) into the very table, warnings and errors Arrow's parse gives, on the real step files and on
every hostile way to write one; a file it does not parse plainly goes to Arrow."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pyarrow as pa
import pytest

from perfkit.core.errors import FileFormatError
from perfkit.io.formats import files
from perfkit.io.formats.ascend_ms import STEP_TRACE_COLUMNS, STEP_TRACE_TYPES
from perfkit.io.formats.legacy import CLUSTER_COLUMNS

FIXTURES = Path(__file__).parent / "fixtures"
STEP_FILES = sorted(FIXTURES.glob("new_format/*/*/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"))
REQUIRED = ("step", "computing", "free")
# The hostile values of test_robustness_numbers (HOSTILE_NUMBERS), and the spellings of a number the two parsers
# might read apart.
HOSTILE = ["inf", "-inf", "nan", "Infinity", "1e300", "1e400", "-1", "-2", "1.5", "1" * 30, "-" + "1" * 25,
           str(2**63 - 1), str(-2**63), str(2**53 + 1), "99999999", "x", "", "0x10", "\u0661", "NaN", "N/A", "None",
           "null", "+1", ".5", "5.", " 7", "7 ", "1e5", "1E-5", "1e-320", "0.1000000000000000055511151231257827",
           "-0", "1_000", "12345678901234567", "1.2345678901234567e99"]


def read(path: Path, arrow: bool, aliases=STEP_TRACE_COLUMNS, types=STEP_TRACE_TYPES, required=REQUIRED):
    """(table, warnings) of read_csv_table, or the error it raised; through Arrow alone where `arrow`."""
    warnings: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        if arrow:
            patch.setattr(files, "SMALL_CSV_BYTES", -1)
        try:
            return files.read_csv_table(path, aliases, required, types, warnings), warnings
        except FileFormatError as exc:
            return exc.message, warnings


def assert_same(path: Path, **how) -> None:
    plain, arrow = read(path, False, **how), read(path, True, **how)
    if isinstance(arrow[0], pa.Table):
        assert isinstance(plain[0], pa.Table), (path.read_bytes()[:300], plain)
        assert plain[0].schema == arrow[0].schema, (plain[0], arrow[0])
        for column in arrow[0].column_names:  # repr: NaN is NaN, -0.0 is not 0.0, None (null) is neither
            assert [repr(v) for v in plain[0].column(column).to_pylist()] == \
                   [repr(v) for v in arrow[0].column(column).to_pylist()]
    else:
        assert plain[0] == arrow[0]
    assert plain[1] == arrow[1]


def test_real_step_files_are_read_without_arrow_into_arrows_table(monkeypatch):
    assert len(STEP_FILES) >= 4
    for path in STEP_FILES:
        assert_same(path)
    monkeypatch.setattr(files, "_read_csv_arrow", lambda *args, **kwargs: pytest.fail("Arrow parsed a plain file"))
    for path in STEP_FILES:
        table, warnings = read(path, False)
        assert isinstance(table, pa.Table) and table.num_rows >= 1 and not warnings


def _with_cell(path: Path, out: Path, column: str, row: int, value: str) -> Path:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    rows[1 + row % (len(rows) - 1)][rows[0].index(column)] = value
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    out.write_text(buffer.getvalue())
    return out


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_cells_read_as_arrow_reads_them(tmp_path, value):
    for number, path in enumerate(STEP_FILES[:2]):
        header = next(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
        for column in header:
            assert_same(_with_cell(path, tmp_path / f"{number}_{header.index(column)}.csv", column, 0, value))


PLAIN = FIXTURES / "new_format/msinsight_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"


def _shapes(text: str) -> dict[str, bytes]:
    header, row = text.rstrip("\n").split("\n")
    return {
        "crlf": f"{header}\r\n{row}\r\n".encode(),
        "lone_cr": f"{header}\r{row}\n".encode(),
        "no_final_newline": f"{header}\n{row}".encode(),
        "blank_line": f"{header}\n\n{row}\n".encode(),
        "blank_end": f"{header}\n{row}\n\n".encode(),
        "header_only": f"{header}\n".encode(),
        "short_row": f"{header}\n{row}\n{row.rsplit(',', 1)[0]}\n".encode(),
        "long_row": f"{header}\n{row},1\n".encode(),
        "quoted": f"{header}\n\"{row.split(',')[0]}\",{row.split(',', 1)[1]}\n".encode(),
        "bom": b"\xef\xbb\xbf" + f"{header}\n{row}\n".encode(),
        "latin1": f"{header}\n{row}\n".encode() + "caf\u00e9,1\n".encode("latin-1"),
        "spaced_header": f"{header.replace(',', ', ')}\n{row}\n".encode(),
        "repeated_header": f"{header},Step\n{row},1\n".encode(),
        "two_rows": f"{header}\n{row}\n{row}\n".encode(),
        "row_of_nulls": f"{header}\n{','.join(['N/A'] * len(row.split(',')))}\n".encode(),
        "big": f"{header}\n".encode() + f"{row}\n".encode() * 200,
    }


@pytest.mark.parametrize("shape", sorted(_shapes(PLAIN.read_text())))
def test_hostile_shapes_read_as_arrow_reads_them(tmp_path, shape):
    path = tmp_path / "step_trace_time.csv"
    path.write_bytes(_shapes(PLAIN.read_text())[shape])
    assert_same(path)


def test_other_float_tables_read_as_arrow_reads_them(tmp_path):
    path = tmp_path / "cluster.csv"
    path.write_text("step,computation,communication_alone_time,receive_alone_time,collective_communication_time\n"
                    "1,10.5,2,N/A,0\n2,11.25,,3e2,1\n")
    types = {column: pa.float64() for column in CLUSTER_COLUMNS}
    assert_same(path, aliases=CLUSTER_COLUMNS, types=types, required=())
    assert read(path, False, aliases=CLUSTER_COLUMNS, types=types, required=())[0].num_rows == 2

"""The memory reader on the real fixtures, checked against the raw files read here with the csv module."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.analysis.measures import FRAMEWORK_COMPONENTS, framework_memory, memory_peaks
from perfkit.io.formats import memory as memory_reader
from perfkit.io.formats.files import read_csv_table
from perfkit.io.formats.tables import as_pandas
from perfkit.views.summary import summarize

OUTPUT = "ASCEND_PROFILER_OUTPUT"
LEVEL1 = FIXTURE_RUNS["new_level1"]
RANK_FOLDERS = {0: LEVEL1 / "rank0_ascend_pt", 1: LEVEL1 / "rank1_ascend_pt"}
# A real MindSpore 2.10 CPU run with profile_memory=True (tests/runs/cpu_2_10_memory/SOURCE.txt).
CPU_MEMORY_RUN = REPO / "tests/runs/cpu_2_10_memory"


pytestmark = pytest.mark.usefixtures("uncached")


def raw_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return [{key: value.strip() for key, value in row.items()} for row in csv.DictReader(handle)]


def number(text: str) -> float | None:
    return float(text) if text.strip() else None


@pytest.fixture(scope="module")
def level1():
    return perfkit.load(LEVEL1)


def test_peak_is_the_framework_allocators_max_of_memory_record(level1):
    peaks = memory_peaks(level1)
    for rank, folder in RANK_FOLDERS.items():
        rows = raw_rows(folder / OUTPUT / "memory_record.csv")
        framework = [row for row in rows if row["Component"] == "PTA+GE"]  # torch_npu's allocator with GE's
        assert framework, "the fixture changed"
        assert peaks[rank]["peak_allocated_mb"] == max(float(row["Total Allocated(MB)"]) for row in framework)
        assert peaks[rank]["peak_reserved_mb"] == max(float(row["Total Reserved(MB)"]) for row in framework)
        assert peaks[rank]["capacity_mb"] is None  # the files do not say it
    overall = summarize(level1)["memory"]
    assert overall["peak_allocated_mb"] == max(entry["peak_allocated_mb"] for entry in peaks.values())


def test_every_sample_is_read_with_empty_cells_unknown_not_zero(level1):
    for rank, folder in RANK_FOLDERS.items():
        rows = raw_rows(folder / OUTPUT / "memory_record.csv")
        modules = raw_rows(folder / OUTPUT / "npu_module_mem.csv")
        samples = level1.memory[level1.memory["rank"] == rank]
        assert len(samples) == len(rows) + len(modules)
        app = samples[samples["component"] == "APP"]
        raw_app = [row for row in rows if row["Component"] == "APP"]
        assert len(app) == len(raw_app) and all(row["Total Allocated(MB)"] == "" for row in raw_app)
        assert app["allocated_mb"].isna().all()  # the process total has no allocated figure: unknown, not 0
        assert (samples["component"].str.startswith("CANN/")).sum() == len(modules)
        # time since the rank's first sample, from the µs timestamps (which end in a TAB)
        stamps = [float(row["Timestamp(us)"]) for row in rows + modules]
        first = min(stamps)
        assert samples["time_ms"].min() == 0.0
        assert samples["time_ms"].max() == pytest.approx((max(stamps) - first) / 1000, abs=1e-3)


def test_operator_memory_sizes_in_mb_and_open_blocks_unknown(level1):
    for rank, folder in RANK_FOLDERS.items():
        rows = raw_rows(folder / OUTPUT / "operator_memory.csv")
        blocks = level1.op_memory[level1.op_memory["rank"] == rank]
        assert len(blocks) == len(rows)
        assert blocks["size_mb"].sum() == pytest.approx(sum(float(row["Size(KB)"]) for row in rows) / 1024)
        assert blocks["released_at_ms"].isna().sum() == sum(row["Release Time(us)"] == "" for row in rows)
        released = [row for row in rows if row["Duration(us)"]]
        assert blocks["duration_ms"].dropna().sum() == pytest.approx(
            sum(float(row["Duration(us)"]) for row in released) / 1000)


def test_framework_samples_are_each_ranks_first_listed_allocator_in_any_row_order(level1):
    """Ranks out of order, one rank with only GE (the least inclusive allocator), one with none listed: each rank
    keeps the samples of the first FRAMEWORK_COMPONENTS entry it has, in rank order, as a row-by-row check says."""
    memory = level1.memory
    rank1 = memory[memory["rank"] == 1]
    only_ge = rank1[rank1["component"] == "PTA+GE"].assign(rank=7, component="GE")
    unlisted = rank1.head(5).assign(rank=3, component="APP")
    mixed = pd.concat([only_ge, memory, unlisted]).iloc[::-1].reset_index(drop=True)  # rank 7 first, rows reversed
    samples = framework_memory(dataclasses.replace(level1, memory=mixed))

    chosen = {rank: next((name for name in FRAMEWORK_COMPONENTS if name in set(rows["component"])), None)
              for rank, rows in mixed.groupby("rank")}
    expected = mixed[[chosen[rank] == component for rank, component in zip(mixed["rank"], mixed["component"])]]
    assert chosen == {0: "PTA+GE", 1: "PTA+GE", 3: None, 7: "GE"}
    pd.testing.assert_frame_equal(samples, expected.sort_values("rank", kind="stable").reset_index(drop=True))
    assert memory_peaks(dataclasses.replace(level1, memory=mixed))[7]["peak_allocated_mb"] == \
        rank1.loc[rank1["component"] == "PTA+GE", "allocated_mb"].max()


def test_memory_record_with_its_own_header_variant_2023():
    """msinsight_2023 rank 0's memory_record.csv has no Total Active / Stream Ptr columns."""
    run = perfkit.load(FIXTURE_RUNS["new_2023"])
    rows = raw_rows(FIXTURE_RUNS["new_2023"] / "test_rank_0" / OUTPUT / "memory_record.csv")
    pta_ge = [float(row["Total Allocated(MB)"]) for row in rows if row["Component"] == "PTA+GE"]
    assert memory_peaks(run)[0]["peak_allocated_mb"] == max(pta_ge)
    assert run.memory.loc[run.memory["rank"] == 0, "active_mb"].isna().all()


def test_cpu_memory_record_bytes_and_ns(tmp_path):
    run = perfkit.load(CPU_MEMORY_RUN)
    path = next(CPU_MEMORY_RUN.rglob("cpu_ms_memory_record_0.txt"))
    rows = raw_rows(path)
    assert len(run.memory) == len(rows)
    assert set(run.memory["component"]) == {"MindSpore"} and set(run.memory["device"]) == {"CPU"}
    peak_bytes = max(int(row["Total Allocated(Byte)"]) for row in rows)
    assert memory_peaks(run)[0]["peak_allocated_mb"] == pytest.approx(peak_bytes / 2**20)
    assert memory_peaks(run)[0]["peak_reserved_mb"] == pytest.approx(
        max(int(row["Total Reserved(Byte)"]) for row in rows) / 2**20)


def test_cpu_memory_is_on_the_run_clock_with_steps_from_the_manifest():
    """perfkit profile's step times (epoch ns) place each sample in its step; time 0 is the run's start."""
    run = perfkit.load(CPU_MEMORY_RUN)
    import json
    manifest = json.loads((CPU_MEMORY_RUN / "perfkit_run.json").read_text())
    steps = manifest["steps"]
    stamps = [int(row["Timestamp(ns)"]) for row in raw_rows(next(CPU_MEMORY_RUN.rglob("cpu_ms_memory_record_0.txt")))]
    origin = min(min(stamps), min(step["begin_ns"] for step in steps))
    expected = [next((step["step"] for step in steps if step["begin_ns"] <= stamp < step["end_ns"]), None)
                for stamp in sorted(stamps)]
    assert run.memory["step"].astype(object).where(run.memory["step"].notna(), None).tolist() == expected
    assert run.memory["time_ms"].tolist() == pytest.approx([(stamp - origin) / 1e6 for stamp in sorted(stamps)],
                                                           abs=1e-3)
    assert run.meta.memory_capacity_mb == manifest["memory_capacity_mb"]


def test_empty_cell_negative_and_nan_sizes(tmp_path):
    """Crafted from the real file (no real file has a negative size): empty is unknown and silent, a negative
    or NaN size is unknown and said, never a number."""
    source = RANK_FOLDERS[0] / OUTPUT / "memory_record.csv"
    lines = source.read_bytes().decode().splitlines(keepends=True)
    header = lines[0].rstrip("\r\n").split(",")
    pta = [i for i, line in enumerate(lines) if line.startswith("PTA,")]

    def with_cell(index, column, value):
        cells = lines[index].rstrip("\r\n").split(",")
        cells[header.index(column)] = value
        lines[index] = ",".join(cells) + "\r\n"

    with_cell(pta[0], "Total Allocated(MB)", "")
    with_cell(pta[1], "Total Allocated(MB)", "-12.5")
    with_cell(pta[2], "Total Reserved(MB)", "nan")
    folder = tmp_path / OUTPUT
    folder.mkdir()
    (folder / "memory_record.csv").write_text("".join(lines))
    result = memory_reader.read(tmp_path)
    parts = result[0]
    samples = as_pandas(parts.tables["memory"])
    assert samples["allocated_mb"].isna().sum() == sum(1 for l in lines[1:] if l.split(",")[2] == "") + 1
    assert (samples["allocated_mb"].dropna() >= 0).all() and (samples["reserved_mb"].dropna() >= 0).all()
    assert any("memory_record.csv" in w and "negative or NaN allocated" in w for w in parts.warnings), parts.warnings
    assert any("memory_record.csv" in w and "negative or NaN reserved" in w for w in parts.warnings), parts.warnings
    assert not any("unknown" in w and "empty" in w for w in parts.warnings)


def test_timestamps_out_of_order_are_sorted_and_said(tmp_path):
    source = RANK_FOLDERS[0] / OUTPUT / "memory_record.csv"
    lines = source.read_bytes().decode().splitlines(keepends=True)
    folder = tmp_path / OUTPUT
    folder.mkdir()
    (folder / "memory_record.csv").write_text(lines[0] + "".join(reversed(lines[1:])))
    parts = memory_reader.read(tmp_path)[0]
    times = as_pandas(parts.tables["memory"])["time_ms"]
    assert times.is_monotonic_increasing
    assert any("memory_record.csv" in w and "out of time order" in w for w in parts.warnings), parts.warnings
    # the pristine file is in order within each component: nothing said
    assert not any("out of time order" in w for w in perfkit.load(LEVEL1).warnings)


def test_timestamps_that_are_no_numbers_or_empty(tmp_path):
    """The Arrow cast of the timestamps fails on a cell that is no number: the slower parse names it."""
    source = RANK_FOLDERS[0] / OUTPUT / "memory_record.csv"
    lines = source.read_bytes().decode().splitlines(keepends=True)
    header = lines[0].rstrip("\r\n").split(",")
    column = header.index("Timestamp(us)")

    def with_time(line: str, value: str) -> str:
        cells = line.rstrip("\r\n").split(",")
        cells[column] = value
        return ",".join(cells) + "\n"

    lines[3], lines[5], lines[7] = with_time(lines[3], "abc"), with_time(lines[5], ""), with_time(lines[7], "\t")
    folder = tmp_path / OUTPUT
    folder.mkdir()
    (folder / "memory_record.csv").write_text("".join(lines))
    parts = memory_reader.read(tmp_path)[0]
    kept = [row for index, row in enumerate(raw_rows(source)) if index not in (2, 4, 6)]
    samples = as_pandas(parts.tables["memory"])
    assert len(samples) == len(kept)
    assert sorted(samples["time_ms"].tolist()) == pytest.approx(sorted(float(row["Timestamp(us)"]) / 1000
                                                                       for row in kept))
    assert any("1 timestamp value(s) that are not numbers" in w for w in parts.warnings), parts.warnings
    assert any("skipped 3 row(s) without a timestamp" in w for w in parts.warnings), parts.warnings


def test_memory_tables_survive_the_cache(cache_dir, monkeypatch):
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)
    cold = perfkit.load(LEVEL1)
    warm = perfkit.load(LEVEL1)
    for name in ("memory", "op_memory", "comm_ops", "comm_links"):
        pd.testing.assert_frame_equal(getattr(cold, name), getattr(warm, name))
    assert any(cache_dir.rglob("memory.parquet"))


# ---- the reader's cheaper paths (issue 28): each checked against the raw rows read here with the csv module

def _samples_expected(path: Path, prefix: str = "") -> list[tuple]:
    """(time ms, allocated, reserved, active, component, device) of a memory_record / npu_module_mem file: rows
    without a time dropped, the rest in stable time order; a negative or NaN size unknown (None), as an empty one."""
    def size(row, column):
        value = number(row.get(column) or "")
        return None if value is None or math.isnan(value) or value < 0 or math.isinf(value) else value

    rows = [row for row in raw_rows(path) if row["Timestamp(us)"]]
    rows.sort(key=lambda row: float(row["Timestamp(us)"]))
    return [(float(row["Timestamp(us)"]) / 1000, size(row, "Total Allocated(MB)"), size(row, "Total Reserved(MB)"),
             size(row, "Total Active(MB)"), prefix + row["Component"] if row["Component"] else None,
             (row.get("Device Type") or row.get("Device")) or None) for row in rows]


def _samples_read(table) -> list[tuple]:
    frame = as_pandas(table)
    columns = ["time_ms", "allocated_mb", "reserved_mb", "active_mb", "component", "device"]
    return [tuple(None if isinstance(value, float) and math.isnan(value) else value for value in row)
            for row in frame[columns].astype(object).where(frame[columns].notna(), None).itertuples(index=False)]


def _backwards(path: Path) -> int:
    """Rows whose next row of the same component (in file order) is earlier."""
    last: dict[str, float] = {}
    count = 0
    for row in raw_rows(path):
        if row["Timestamp(us)"]:
            stamp = float(row["Timestamp(us)"])
            count += row["Component"] in last and stamp < last[row["Component"]]
            last[row["Component"]] = stamp
    return count


def _edit(lines: list[str], index: int, header: list[str], column: str, value: str) -> None:
    cells = lines[index].rstrip("\r\n").split(",")
    cells[header.index(column)] = value
    lines[index] = ",".join(cells) + "\n"


def test_both_sample_files_in_one_table_each_in_its_own_time_order(tmp_path):
    """memory_record (out of time order across components, as real files are) and a shuffled npu_module_mem go
    into one table, each file's rows sorted on their own; empty components and devices stay unknown, and the
    empty, negative and NaN cells of one size column are told apart. Crafted from the level-1 rank 0 files."""
    import random

    folder = tmp_path / OUTPUT
    folder.mkdir()
    record = (RANK_FOLDERS[0] / OUTPUT / "memory_record.csv").read_text().splitlines(keepends=True)
    header = record[0].rstrip("\r\n").split(",")
    pta = [i for i, line in enumerate(record) if line.startswith("PTA,")]
    _edit(record, pta[0], header, "Total Allocated(MB)", "-3.5")
    _edit(record, pta[1], header, "Total Allocated(MB)", "nan")
    _edit(record, pta[2], header, "Component", "")
    (folder / "memory_record.csv").write_text("".join(record))
    modules = (RANK_FOLDERS[0] / OUTPUT / "npu_module_mem.csv").read_text().splitlines(keepends=True)
    body = modules[1:]
    random.Random(28).shuffle(body)
    module_header = modules[0].rstrip("\r\n").split(",")
    _edit(body, 3, module_header, "Device", "")
    (folder / "npu_module_mem.csv").write_text(modules[0] + "".join(body))

    parts = memory_reader.read(tmp_path)[0]
    expected = (_samples_expected(folder / "memory_record.csv")
                + _samples_expected(folder / "npu_module_mem.csv", prefix="CANN/"))
    assert _samples_read(parts.tables["memory"]) == expected
    empty_allocated = sum(1 for row in raw_rows(folder / "memory_record.csv") if row["Total Allocated(MB)"] == "")
    assert empty_allocated > 0  # the APP rows: unknown, and not said
    assert "memory_record.csv: 2 negative or NaN allocated value(s) treated as unknown" in parts.warnings
    backwards = _backwards(folder / "npu_module_mem.csv")
    assert f"npu_module_mem.csv: {backwards} row(s) out of time order; sorted by time" in parts.warnings
    assert not any("memory_record.csv" in w and "out of time order" in w for w in parts.warnings), parts.warnings


def test_a_time_that_is_no_number_reads_the_file_again_and_says_each_fault_once(tmp_path):
    """Times are parsed by the CSV read; a cell that is no number makes the file read again with times as text:
    the row with the wrong number of cells is said once, not once per read."""
    lines = (RANK_FOLDERS[0] / OUTPUT / "memory_record.csv").read_text().splitlines(keepends=True)
    header = lines[0].rstrip("\r\n").split(",")
    _edit(lines, 4, header, "Timestamp(us)", "12:00:01")
    lines[9] = ",".join(lines[9].split(",")[:3]) + "\n"  # cut short
    folder = tmp_path / OUTPUT
    folder.mkdir()
    (folder / "memory_record.csv").write_text("".join(lines))
    parts = memory_reader.read(tmp_path)[0]
    kept = [line for index, line in enumerate(lines) if index not in (4, 9)]
    (tmp_path / "kept.csv").write_text("".join(kept))
    assert _samples_read(parts.tables["memory"]) == _samples_expected(tmp_path / "kept.csv")
    assert parts.warnings.count("memory_record.csv: skipped 1 row(s) with the wrong number of cells "
                                "(truncated or malformed)") == 1, parts.warnings
    assert "memory_record.csv: 1 timestamp value(s) that are not numbers treated as unknown" in parts.warnings
    assert "memory_record.csv: skipped 1 row(s) without a timestamp" in parts.warnings


def test_a_size_that_is_no_number_skips_the_file_once(tmp_path):
    lines = (RANK_FOLDERS[0] / OUTPUT / "memory_record.csv").read_text().splitlines(keepends=True)
    _edit(lines, 5, lines[0].rstrip("\r\n").split(","), "Total Reserved(MB)", "lots")
    folder = tmp_path / OUTPUT
    folder.mkdir()
    (folder / "memory_record.csv").write_text("".join(lines))
    parts = memory_reader.read(tmp_path)[0]
    assert "memory" not in parts.tables
    skipped = [w for w in parts.warnings if w.startswith("skipped memory_record.csv: cannot be parsed")]
    assert len(skipped) == 1 and "'lots'" in skipped[0], parts.warnings


def test_a_file_read_in_several_blocks_keeps_each_rows_component(tmp_path):
    """Past the single-block size Arrow reads a file in blocks, each with its own dictionary of component names:
    the APP rows first, then the others, so that the blocks' dictionaries differ."""
    lines = (RANK_FOLDERS[0] / OUTPUT / "memory_record.csv").read_text().splitlines(keepends=True)
    app = [line for line in lines[1:] if line.startswith("APP,")]
    others = [line for line in lines[1:] if not line.startswith("APP,")]
    copies = 130
    folder = tmp_path / OUTPUT
    folder.mkdir()
    path = folder / "memory_record.csv"
    path.write_text(lines[0] + "".join(app * copies) + "".join(others * copies))
    table = read_csv_table(path, memory_reader.MEMORY_RECORD_COLUMNS, (), memory_reader.TYPES, [])
    assert table.column("component").num_chunks > 1, "the file must come in several blocks for this test"
    parts = memory_reader.read(tmp_path)[0]
    assert _samples_read(parts.tables["memory"]) == _samples_expected(path)
    assert f"memory_record.csv: {_backwards(path)} row(s) out of time order; sorted by time" in parts.warnings


def test_a_file_of_malformed_rows_only_is_said_once(tmp_path):
    """Such a file fails the first read too (no rows): the rows it skipped are said once, with the file."""
    lines = (RANK_FOLDERS[0] / OUTPUT / "memory_record.csv").read_text().splitlines(keepends=True)
    folder = tmp_path / OUTPUT
    folder.mkdir()
    (folder / "memory_record.csv").write_text(lines[0] + "".join(",".join(line.split(",")[:3]) + "\n"
                                                                 for line in lines[1:6]))
    parts = memory_reader.read(tmp_path)[0]
    assert parts.warnings == ["memory_record.csv: skipped 5 row(s) with the wrong number of cells (truncated or "
                              "malformed)", "skipped memory_record.csv: has a header but no rows"]

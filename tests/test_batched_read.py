"""Many ranks read as one: the readers a cluster runs once per rank (ascend_ms, memory, communication) give Arrow
tables, and the loader makes one DataFrame per table for the whole run (assembly's _concatenated). The Run must be
the one the per-rank path makes, where each rank's tables are DataFrames concatenated by pandas: the path every
pandas reader (and a plugin's) still takes."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURE_RUNS, REPO

from perfkit.io import loader
from perfkit.io.assembly import assemble
from perfkit.io.discovery import discover
from perfkit.io.formats import readers
from perfkit.io.formats.base import Parts
from perfkit.io.formats.tables import as_pandas, is_arrow

sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402

OUTPUT = "ASCEND_PROFILER_OUTPUT"
RANKS = 6


def generated_run(folder: Path) -> Path:
    """A generated multi-rank run (benchmarks/generate.py, made from a real torch_npu rank) whose ranks differ
    where the pieces' columns or types can: rank 1's op_statistic.csv without its Ratio(%) column (no
    file_share there), rank 2's communication ops without a group, rank 4 without memory files."""
    run = folder / "run"
    generate.generate_cluster(run, ranks=RANKS, steps=3, slow_ranks=(3,))
    statistic = run / "rank1_ascend_pt" / OUTPUT / "op_statistic.csv"
    with statistic.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    with statistic.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, [name for name in rows[0] if name != "Ratio(%)"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    communication = run / "rank2_ascend_pt" / OUTPUT / "communication.json"
    data = json.loads(communication.read_text())
    for kinds in data.values():
        for kind, ops in kinds.items():
            kinds[kind] = {name.partition("@")[0]: info for name, info in ops.items()}
    communication.write_text(json.dumps(data))
    for name in ("memory_record.csv", "npu_module_mem.csv", "operator_memory.csv"):
        (run / "rank4_ascend_pt" / OUTPUT / name).unlink()
    return run


def per_rank(results: list) -> list:
    """The readers' results with every table a DataFrame of its own rank (the per-rank path)."""
    return [result if isinstance(result, Exception) else
            {rank: Parts(tables={name: as_pandas(table) for name, table in parts.tables.items()},
                         meta=parts.meta, warnings=parts.warnings, sources=parts.sources)
             for rank, parts in result.items()}
            for result in results]


def read(run: Path):
    root, jobs, _ = discover(run, readers())
    return root, jobs, [loader._read_folder(reader.name, str(folder)) for reader, folder in jobs]


def assert_same_run(expected, got) -> None:
    assert got.meta == expected.meta
    assert got.warnings == expected.warnings
    for name, frame in expected.tables().items():
        pd.testing.assert_frame_equal(got.tables()[name], frame, check_exact=True, obj=name)


def test_the_run_made_once_per_table_is_the_run_made_rank_by_rank(tmp_path):
    root, jobs, results = read(generated_run(tmp_path))
    readers = {reader.name for reader, _ in jobs}
    assert readers == {"ascend_ms", "memory", "communication"}
    # the cluster's readers give Arrow: no DataFrame is built per rank
    assert all(is_arrow(table) for result in results for parts in result.values() for table in parts.tables.values())
    batched = assemble(root, jobs, results)
    assert_same_run(assemble(root, jobs, per_rank(results)), batched)
    assert batched.ranks == list(range(RANKS))
    assert set(batched.memory["rank"]) == set(range(RANKS)) - {4}
    # the columns the ranks' pieces differ in: unknown where a rank's file does not tell, as pandas' concat makes them
    statistic_share = batched.op_types.dropna(subset=["file_share"]).groupby("rank").size()
    assert 1 not in statistic_share.index and set(statistic_share.index) == set(range(RANKS)) - {1}
    assert batched.comm_ops.loc[batched.comm_ops["rank"] == 2, "group"].isna().all()
    assert batched.comm_ops.loc[batched.comm_ops["rank"] != 2, "group"].notna().all()


def test_the_numbers_are_the_files_numbers(tmp_path):
    """Independently of perfkit: each rank's step totals and op-type times from its raw files (csv module)."""
    run = generated_run(tmp_path)
    root, jobs, results = read(run)
    batched = assemble(root, jobs, results)
    for rank in range(RANKS):
        output = run / f"rank{rank}_ascend_pt" / OUTPUT
        with (output / "step_trace_time.csv").open(newline="") as handle:
            trace = list(csv.DictReader(handle))
        expected = [(float(row["Computing"]) + float(row["Communication(Not Overlapped)"]) + float(row["Free"])
                     + float(row.get("Preparing") or 0)) / 1000 for row in trace]
        got = batched.steps.loc[batched.steps["rank"] == rank].sort_values("step")["total_ms"].tolist()
        assert got == pytest.approx(expected)
        with (output / "op_statistic.csv").open(newline="") as handle:
            statistic = list(csv.DictReader(handle))
        totals: dict[str, float] = {}
        for row in statistic:
            totals[row["OP Type"]] = totals.get(row["OP Type"], 0.0) + float(row["Total Time(us)"]) / 1000
        types = batched.op_types[(batched.op_types["rank"] == rank) & batched.op_types["type"].isin(totals)]
        assert dict(zip(types["type"], types["total_ms"])) == pytest.approx(totals)


def test_a_run_mixing_arrow_and_pandas_pieces_is_the_same(tmp_path):
    """Ranks of one table given partly as Arrow, partly as DataFrames (a plugin's reader beside perfkit's): the
    pieces are concatenated by pandas, and the Run is the same."""
    root, jobs, results = read(generated_run(tmp_path))
    mixed = [per_rank([result])[0] if index % 2 else result for index, result in enumerate(results)]
    assert_same_run(assemble(root, jobs, results), assemble(root, jobs, mixed))


def test_a_fixture_run_is_the_same_either_way():
    """The real two-rank msinsight run (kernel types with hcom collectives, communication matrix, memory)."""
    root, jobs, results = read(FIXTURE_RUNS["new_level1"])
    assert {reader.name for reader, _ in jobs} >= {"ascend_ms", "memory", "communication"}
    assert_same_run(assemble(root, jobs, per_rank(results)), assemble(root, jobs, results))


def test_a_kernel_file_above_arrows_block_is_read_as_one_chunk(tmp_path):
    """A file read on one thread is parsed as one block: Arrow's default 1 MiB blocks cut a generated rank's
    1.3 MB kernel_details.csv in two chunks, each with its own dictionaries of names and types (unified after,
    at a cost); the values are those of Arrow's default read."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    from perfkit.io.formats import ascend_ms
    from perfkit.io.formats.files import read_csv_table

    run = tmp_path / "run"
    generate.generate_cluster(run, ranks=1, steps=20, slow_ranks=())
    path = run / "rank0_ascend_pt" / OUTPUT / ascend_ms.KERNELS
    assert path.stat().st_size > 1 << 20  # above Arrow's default block
    table = read_csv_table(path, ascend_ms.KERNEL_COLUMNS, (), ascend_ms.KERNEL_TYPES, [])
    assert {column.num_chunks for column in table.columns} == {1}
    default = pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(
        include_columns=["Name", "Duration(us)"], column_types={"Name": pa.string()}))
    assert table.column("name").cast(pa.string()).to_pylist() == default.column("Name").to_pylist()
    assert table.column("duration_us").to_pylist() == default.column("Duration(us)").to_pylist()


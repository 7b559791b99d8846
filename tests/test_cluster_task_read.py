"""A worker's task of a large run read at once (issue 39): the readers that read many folders at once
(Reader.read_cluster_many: ascend_ms's step files, the communication files) and the screening of all their tables at
once (screening.screened_many) give each folder exactly what reading and screening it alone gives, on the real
fixtures and on a generated cluster whose ranks are damaged where the shared path must step aside."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from conftest import FIXTURE_RUNS
from test_batched_read import OUTPUT, generated_run

from perfkit.apps.cli import _json
from perfkit.io import loader
from perfkit.io.discovery import discover
from perfkit.io.formats import ascend_ms, readers
from perfkit.io.formats.base import Parts
from perfkit.io.formats.screening import screened, screened_many

STEP_FILE = "step_trace_time.csv"


def cluster_jobs(run) -> list[tuple[str, str]]:
    """(reader name, folder) of every job the cluster-level read takes, as load orders them."""
    _, jobs, _ = discover(run, readers())
    return [(reader.name, str(folder)) for reader, folder in jobs if loader._cluster_read(reader) != "skip"]


def assert_same_results(alone: list, together: list) -> None:
    assert len(alone) == len(together)
    for one, other in zip(alone, together):
        if isinstance(one, Exception):
            assert type(other) is type(one) and str(other) == str(one)
            continue
        assert sorted(one) == sorted(other)
        for rank in one:
            assert other[rank].meta == one[rank].meta
            assert other[rank].warnings == one[rank].warnings
            assert other[rank].sources == one[rank].sources
            assert sorted(other[rank].tables) == sorted(one[rank].tables)
            for name, table in one[rank].tables.items():
                expected = table if isinstance(table, pd.DataFrame) else table.to_pandas()
                got = other[rank].tables[name]
                got = got if isinstance(got, pd.DataFrame) else got.to_pandas()
                pd.testing.assert_frame_equal(got, expected, check_exact=True, obj=f"rank {rank} {name}")


@pytest.mark.parametrize("fixture", sorted(FIXTURE_RUNS))
def test_a_task_of_a_real_run_reads_as_each_folder_alone(fixture):
    arguments = cluster_jobs(FIXTURE_RUNS[fixture])
    alone = [loader._read_cluster_folder(*job) for job in arguments]
    assert_same_results(alone, loader._read_cluster_folders(arguments))


def damaged_run(tmp_path):
    """generated_run's six ranks, four of them damaged where a task's shared tables must not be used: rank 0's step
    file with a step that is no step (`inf`), rank 1's with a row without a step, rank 3's with a step written
    twice (screening drops the copy), rank 5's communication.json with a negative time (not a plain file)."""
    run = generated_run(tmp_path)

    def step_file(rank):
        return run / f"rank{rank}_ascend_pt" / OUTPUT / STEP_FILE

    def rows(rank):
        return step_file(rank).read_text().splitlines()

    lines = rows(0)
    step_file(0).write_text("\n".join(lines + ["inf" + lines[1][lines[1].index(","):]]) + "\n")
    lines = rows(1)
    step_file(1).write_text("\n".join(lines + [lines[1][lines[1].index(","):]]) + "\n")
    lines = rows(3)
    step_file(3).write_text("\n".join(lines + [lines[1]]) + "\n")
    communication = run / "rank5_ascend_pt" / OUTPUT / "communication.json"
    data = json.loads(communication.read_text())
    op = next(info for kinds in data.values() for ops in kinds.values() for info in ops.values())
    op["Communication Time Info"]["Wait Time(ms)"] = -1.0
    communication.write_text(json.dumps(data))
    return run


def test_a_task_of_damaged_ranks_reads_as_each_folder_alone(tmp_path, monkeypatch):
    arguments = cluster_jobs(damaged_run(tmp_path))
    assert {name for name, _ in arguments} == {"ascend_ms", "communication"}
    alone = [loader._read_cluster_folder(*job) for job in arguments]
    said = [warning for result in alone for parts in result.values() for warning in parts.warnings]
    assert any("not a step" in warning for warning in said)  # the damage is what a reader says
    assert any("duplicated step row" in warning for warning in said)
    assert any("Wait Time(ms) not a non-negative number" in warning for warning in said)
    calls = []
    monkeypatch.setattr(ascend_ms, "step_times", lambda *args: calls.append(1) or step_times(*args))
    together = loader._read_cluster_folders(arguments)
    assert_same_results(alone, together)
    # the four clean step files (ranks 2-5) made one table; ranks 0 and 1, whose rows are dropped, alone
    assert len(calls) == 3


step_times = ascend_ms.step_times


def steps_table(step=(1, 2), total=(10.0, 12.0), computing=(5.0, 6.0)) -> pa.Table:
    return pa.table({"step": pa.array(step, pa.int64()), "computing_ms": pa.array(computing, pa.float64()),
                     "total_ms": pa.array(total, pa.float64())})


def results_of(tables: list[pa.Table]) -> list:
    return [{rank: Parts(tables={"steps": table})} for rank, table in enumerate(tables)]


def test_screened_many_screens_alone_only_the_results_screening_changes_or_speaks_of():
    tables = [steps_table(), steps_table(computing=(-1.0, 6.0)), steps_table(step=(1, 1)),
              steps_table(total=(10.0, math.nan)), steps_table(computing=(math.inf, 6.0)), steps_table(step=(3, 4)),
              steps_table(step=(1, 2), total=(1.0, 2.0))]
    expected = [screened(result) for result in results_of(tables)]
    got = screened_many(results_of(tables) + [ValueError("a folder's error passes")])
    assert isinstance(got[-1], ValueError)
    assert [parts.warnings for result in got[:-1] for parts in result.values()] == \
        [parts.warnings for result in expected for parts in result.values()]
    assert [len(parts.warnings) for result in got[:-1] for parts in result.values()] == [0, 1, 1, 1, 1, 0, 0]
    for rank, (one, other) in enumerate(zip(expected, got)):
        pd.testing.assert_frame_equal(other[rank].tables["steps"].to_pandas(), one[rank].tables["steps"].to_pandas())
    for rank in (0, 5, 6):  # clean: the very table read, untouched
        assert got[rank][rank].tables["steps"] is tables[rank]


def test_screened_many_finds_a_name_repeated_within_one_table_only():
    ops = [pa.table({"name": ["a", "b"], "type": ["T", "T"], "total_ms": [1.0, 2.0]}),
           pa.table({"name": ["a", "a"], "type": ["T", "T"], "total_ms": [1.0, 2.0]}),
           pa.table({"name": ["b", "c"], "type": ["T", "T"], "total_ms": [1.0, 2.0]})]
    results = [{rank: Parts(tables={"ops": table})} for rank, table in enumerate(ops)]
    got = screened_many(results)
    assert [len(result[rank].warnings) for rank, result in enumerate(got)] == [0, 1, 0]
    assert "appear more than once" in got[1][1].warnings[0]


@pytest.mark.parametrize("payload", [
    {"ranks": [0, 1], "empty": [], "nothing": {}, "nested": {"a": [[], {}], "b": None}},
    [1.0, 1e-05, 1e300, -0.0, 0.1 + 0.2, 12345678901234567890, True, "é\u2028\"\\", float("nan")],
])
def test_the_json_answer_is_indented_as_the_standard_library_indents_it(payload):
    finite = json.loads(json.dumps(payload).replace("NaN", "null"))
    assert _json(payload) == json.dumps(finite, indent=2)

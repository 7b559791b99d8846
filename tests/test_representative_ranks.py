"""A large run's first answer reads op-level tables (kernels, op types, memory, Cells) of its representative ranks
only (issue 39): per pipeline stage the slowest, fastest and median rank by step time, plus the slow ranks (the
farthest out of many); every
view says which ranks its op-level numbers cover; `--rank`, `--all-ranks` and `--dask` give the numbers an
in-process full read gives for the same ranks; a run of at most 16 ranks is read whole, as before.

The run is made here from the real torch_npu rank (tests/fixtures/new_format/msinsight_level1 rank 0): 40 ranks in
two pipeline stages of 20, each rank's step_trace_time.csv the fixture's row scaled by a factor of its own (ranks
7 and 12 far slower); the expected ranks are computed from those files with the csv module.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURES

import perfkit
from perfkit.advisor import advise
from perfkit.analysis import representatives
from perfkit.analysis.cluster import of_run
from perfkit.apps.cli import main
from perfkit.io import loader
from perfkit.io.dask_ingest import Target
from perfkit.views.summary import summarize

SOURCE = FIXTURES / "new_format" / "msinsight_level1" / "rank0_ascend_pt"
OUTPUT = "ASCEND_PROFILER_OUTPUT"
COPIED = ("kernel_details.csv", "op_statistic.csv", "communication.json", "memory_record.csv")
RANKS, STAGES, STEPS = 40, 2, 3
SLOW = {7: 1.5, 12: 1.4}
# step_trace_time.csv: a step's total is these columns' sum (MindSpore's Computing + exposed communication + Free +
# Preparing), all scaled alike here
TOTAL_COLUMNS = ("Computing", "Communication(Not Overlapped)", "Free", "Preparing")

pytestmark = pytest.mark.usefixtures("uncached")


def factor(rank: int) -> float:
    """Each rank's own step time factor: distinct, within 2 % but for the slow ranks."""
    return SLOW.get(rank, 1.0 + 0.001 * ((rank * 7) % 20))


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    return built(tmp_path_factory.mktemp("ranks40"), factor)


def built(root: Path, factor) -> Path:
    """RANKS rank folders in STAGES stages, rank r's steps the fixture's scaled by factor(r)."""
    with open(SOURCE / OUTPUT / "step_trace_time.csv", newline="") as handle:
        header, row = list(csv.reader(handle))[:2]
    info = json.loads((SOURCE / "profiler_info_0.json").read_text())
    for rank in range(RANKS):
        folder = root / f"rank{rank}_ascend_pt"
        (folder / OUTPUT).mkdir(parents=True)
        for name in COPIED:
            shutil.copy(SOURCE / OUTPUT / name, folder / OUTPUT / name)
        (folder / f"profiler_info_{rank}.json").write_text(
            json.dumps({**info, "rank_id": rank, "stage_num": STAGES, "rank_size": RANKS}))
        with open(folder / OUTPUT / "step_trace_time.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            for step in range(1, STEPS + 1):
                writer.writerow([step] + [repr(float(value) * factor(rank)) for value in row[1:]])
    return root


def stage_representatives(totals: dict[int, float]) -> set[int]:
    """Each stage's fastest, median and slowest rank by mean step total, ties by rank."""
    chosen = set()
    per_stage = RANKS // STAGES
    for stage in range(STAGES):
        by_time = sorted((totals[rank], rank) for rank in range(stage * per_stage, (stage + 1) * per_stage))
        chosen |= {by_time[0][1], by_time[(len(by_time) - 1) // 2][1], by_time[-1][1]}
    return chosen


def step_totals(root: Path) -> dict[int, float]:
    """Each rank's mean step total (µs) from its step_trace_time.csv."""
    totals = {}
    for rank in range(RANKS):
        with open(root / f"rank{rank}_ascend_pt" / OUTPUT / "step_trace_time.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        totals[rank] = sum(sum(float(row[column]) for column in TOTAL_COLUMNS) for row in rows) / len(rows)
    return totals


def expected_representatives(root: Path) -> list[int]:
    # the highest and lowest rank of the communication finding: rank 7 and stage 0's fastest, chosen already
    return sorted(stage_representatives(step_totals(root)) | set(SLOW))


@pytest.fixture(scope="module")
def full(run_folder):
    return loader.load(run_folder)


@pytest.fixture(scope="module")
def first(run_folder):
    return perfkit.load(run_folder)


def test_the_representative_ranks_are_each_stage_extremes_median_and_slow_ranks(run_folder, full, first):
    expected = expected_representatives(run_folder)
    assert first.meta.op_ranks == expected
    assert sorted(first.op_types["rank"].unique()) == expected
    assert sorted(first.ops["rank"].unique()) == expected
    assert sorted(first.memory["rank"].unique()) == expected
    assert sorted(first.cells["rank"].unique()) == expected
    assert of_run(full).slow == sorted(SLOW)  # what the full read calls slow is among them
    assert full.meta.op_ranks is None


def test_of_many_slow_ranks_the_farthest_out_are_read(tmp_path):
    """15 of stage 0's 20 ranks slow (factors 1.30-1.44): of them the SLOW_RANKS_READ slowest, not all 15."""
    root = built(tmp_path, lambda rank: 1.3 + 0.01 * rank if rank < 15 else factor(rank))
    slowest = sorted(range(15), key=lambda rank: -rank)[:representatives.SLOW_RANKS_READ]
    assert of_run(loader.load(root)).slow == list(range(15))
    assert perfkit.load(root).meta.op_ranks == sorted(stage_representatives(step_totals(root)) | set(slowest))


def test_every_rank_keeps_its_cluster_level_tables_and_slow_ranks_agree(full, first):
    assert first.ranks == full.ranks == list(range(RANKS))
    assert first.meta.pipeline_stages == full.meta.pipeline_stages
    columns = ["rank", "step", "total_ms", "computing_ms", "comm_exposed_ms", "free_ms", "preparing_ms"]
    pd.testing.assert_frame_equal(first.steps[columns], full.steps[columns])
    pd.testing.assert_frame_equal(first.comm_ops, full.comm_ops)
    assert of_run(first).slow == of_run(full).slow
    assert of_run(first).per_rank[["rank", "total_ms", "compute_ms", "communication_ms", "idle_ms"]].equals(
        of_run(full).per_rank[["rank", "total_ms", "compute_ms", "communication_ms", "idle_ms"]])
    assert summarize(first)["slow_ranks"] == summarize(full)["slow_ranks"] == advise_slow(first) == sorted(SLOW)


def advise_slow(run) -> list[int]:
    """The ranks advise's slow_rank findings name."""
    return sorted({rank for finding in advise(run).findings if finding.id == "slow_rank"
                   for rank in finding.claim.ranks})


def test_asked_ranks_have_the_full_reads_numbers(run_folder, full):
    asked = perfkit.load(run_folder, ranks=[25, 3])
    assert asked.meta.op_ranks == [3, 25]
    for name in ("op_types", "ops", "memory", "op_memory", "cells", "op_passes"):
        mine = getattr(asked, name).reset_index(drop=True)
        theirs = getattr(full, name)
        pd.testing.assert_frame_equal(mine, theirs[theirs["rank"].isin([3, 25])].reset_index(drop=True),
                                      check_categorical=False)
    everything = perfkit.load(run_folder, ranks="all")
    assert everything.meta.op_ranks is None
    pd.testing.assert_frame_equal(everything.op_types, full.op_types)


def invoke(*args: str):
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


def test_rank_and_all_ranks_on_the_command_line(run_folder, full):
    code, output = invoke("summary", "--format", "json", "--rank", "25", str(run_folder))
    assert code == 0
    summary = json.loads(output)
    assert summary["op_ranks"] == {"ranks": [25], "of": RANKS}
    assert summary["op_types"] == json.loads(json.dumps(summarize(full.rank(25))["op_types"]))
    code, output = invoke("summary", "--format", "json", "--all-ranks", str(run_folder))
    assert code == 0 and "op_ranks" not in json.loads(output)
    assert json.loads(output)["op_types"] == json.loads(json.dumps(summarize(full)["op_types"]))
    code, output = invoke("summary", "--rank", "99", str(run_folder))
    assert code == 2 and output.strip().count("\n") == 0 and "no rank 99 in this run (its 40 ranks: 0 to 39)" in output
    code, output = invoke("summary", "--rank", "3", "--all-ranks", str(run_folder))
    assert code == 2 and "not both" in output


def test_every_view_says_which_ranks_its_op_level_numbers_cover(run_folder, tmp_path):
    covered = ", ".join(map(str, expected_representatives(run_folder))) + f" of {RANKS}"
    code, text = invoke("summary", str(run_folder))
    assert code == 0
    assert f"op-level numbers (op types, memory, Cells): ranks {covered}" in text
    assert f"op types (top 10 of" in text and f"; ranks {covered})" in text
    code, output = invoke("summary", "--format", "json", str(run_folder))
    assert json.loads(output)["op_ranks"] == {"ranks": expected_representatives(run_folder), "of": RANKS}
    code, output = invoke("advise", "--format", "json", str(run_folder))
    assert json.loads(output)["op_ranks"] == {"ranks": expected_representatives(run_folder), "of": RANKS}
    code, text = invoke("advise", str(run_folder))
    assert f"op-level numbers (op types, memory, Cells): ranks {covered}" in text
    code, markdown = invoke("advise", "--format", "markdown", str(run_folder))
    assert f"Op-level numbers (op types, memory, Cells): ranks {covered}" in markdown
    report = tmp_path / "report.html"
    code, _ = invoke("report", "-o", str(report), str(run_folder))
    assert code == 0 and f"(op types, memory, Cells: ranks {covered})" in report.read_text()
    from perfkit.dashboards.layout import run_page
    page = run_page("/", perfkit.load(run_folder), 0)
    assert f"op-level numbers (op types, memory, Cells): ranks {covered}" in page[0].children


def test_a_run_of_at_most_16_ranks_is_read_whole(run_folder, tmp_path):
    small = tmp_path / "small"
    for rank in range(loader.SMALL_RUN_RANKS):
        shutil.copytree(run_folder / f"rank{rank}_ascend_pt", small / f"rank{rank}_ascend_pt")
    run = perfkit.load(small)
    assert run.meta.op_ranks is None and sorted(run.op_types["rank"].unique()) == list(range(16))
    code, output = invoke("summary", "--format", "json", str(small))
    assert code == 0 and "op_ranks" not in json.loads(output)


def assert_same_run(expected, got) -> None:
    assert got.meta == expected.meta and got.warnings == expected.warnings
    for name, frame in expected.tables().items():
        pd.testing.assert_frame_equal(got.tables()[name], frame, check_exact=True, obj=name)


def test_through_dask_the_same_ranks_are_read(run_folder, full, first, tmp_path):
    pytest.importorskip("distributed")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from local_dask import LocalCluster

    cluster = LocalCluster(tmp_path / "cluster")
    try:
        target = Target(cluster.address, str(tmp_path / "storage"))
        assert_same_run(first, perfkit.load(run_folder, dask=target))
        assert_same_run(perfkit.load(run_folder, ranks=[25]), perfkit.load(run_folder, dask=target, ranks=[25]))
        assert_same_run(full, perfkit.load(run_folder, dask=target, ranks="all"))
    finally:
        cluster.stop()


def test_the_cache_keeps_what_was_read(run_folder, cache_dir, monkeypatch):
    """A second question is the kept answer; the Run's entry holds the representative ranks' tables and says so."""
    from perfkit.io import cache
    stored = []
    original = cache.store_read_answer
    monkeypatch.setattr(cache, "store_read_answer", lambda *args: stored.append(args) or original(*args))
    first_answer = invoke("summary", "--format", "json", str(run_folder))  # its Run's entry written as it ends
    assert invoke("summary", "--format", "json", str(run_folder)) == first_answer and len(stored) == 1
    monkeypatch.setattr(loader, "_load_op_ranks", lambda *args: pytest.fail("read again, not from the cache"))
    warm = perfkit.load(run_folder)
    assert warm.meta.op_ranks == expected_representatives(run_folder)
    assert sorted(warm.op_types["rank"].unique()) == expected_representatives(run_folder)

"""perfkit.analysis.cluster: the slow-rank answer on generated multi-rank runs, checked against the raw CSVs."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.analysis import cluster
from perfkit.analysis.cluster import SLOW_RANK_SPREAD
from perfkit.analysis.steady import steady_steps
from perfkit.core.errors import LayoutError
from perfkit.io.formats import READERS

sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402

RANKS = 8
SLOW = 5


@pytest.fixture(scope="module")
def one_slow(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("cluster") / "run"
    generate.generate_cluster(run, ranks=RANKS, steps=4, slow_ranks=(SLOW,))
    return run


def raw_step_means(run: Path, column: str) -> dict[int, float]:
    """rank -> mean of a step_trace_time.csv column in ms, read with the csv module."""
    means = {}
    for rank in range(RANKS):
        path = run / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
        values = [float(row[column]) for row in csv.DictReader(path.open())]
        means[rank] = sum(values) / len(values) / 1000
    return means


def test_names_the_slow_rank(one_slow, cache_dir):
    answer = cluster.slow_ranks(one_slow)
    assert answer.slow == [SLOW]
    assert answer.per_rank["rank"].tolist() == list(range(RANKS))
    assert answer.per_rank["steps"].tolist() == [4] * RANKS
    computing = raw_step_means(one_slow, "Computing")
    assert answer.per_rank.set_index("rank")["compute_ms"].to_dict() == pytest.approx(computing)
    (finding,) = [f for f in answer.findings if f["dimension"] == "compute_ms"]
    mean_step = answer.per_rank["total_ms"].mean()
    assert finding["spread"] == pytest.approx((max(computing.values()) - min(computing.values())) / mean_step)
    assert finding["spread"] > SLOW_RANK_SPREAD
    assert finding["ranks"] == [SLOW] and finding["max_rank"] == SLOW
    # the others waited for it: the slow rank is the one with the least communication
    exposed = raw_step_means(one_slow, "Communication(Not Overlapped)")
    assert answer.per_rank.set_index("rank")["communication_ms"].to_dict() == pytest.approx(exposed)
    waiting = [f for f in answer.findings if f["dimension"] == "communication_ms"]
    assert all(f["min_rank"] == SLOW and not f["rank_is_slow"] for f in waiting)


def test_answer_is_the_ledgers_split_per_rank(one_slow, cache_dir):
    """`perfkit ranks` shows the numbers the summary's bound and the Ranks page show: the ledger's roll-up."""
    from perfkit.analysis.ledger import rank_parts
    run = perfkit.load(one_slow)
    per_rank = cluster.slow_ranks(one_slow).per_rank.set_index("rank")
    parts = rank_parts(run).set_index("rank")
    for part in ("compute", "communication", "pipeline", "data", "host", "unknown"):
        assert per_rank[f"{part}_ms"].tolist() == pytest.approx(parts[part].tolist())
    assert per_rank["idle_ms"].tolist() == pytest.approx((parts["data"] + parts["host"] + parts["unknown"]).tolist())
    assert per_rank["total_ms"].tolist() == pytest.approx(run.steps.groupby("rank")["total_ms"].mean().tolist())


def test_cpu_ranks_name_their_communication(cache_dir):
    """CPU steps have no communication file: each step's exposed AllReduce time comes from its op executions, and
    `ranks` shows it (it said "unknown" while `summary` counted half the step as communication)."""
    answer = cluster.slow_ranks(REPO / "sample_runs" / "cpu_ranks2")
    run = perfkit.load(REPO / "sample_runs" / "cpu_ranks2")
    assert answer.per_rank["rank"].tolist() == run.ranks == [0, 1]
    assert answer.per_rank["total_ms"].tolist() == pytest.approx(
        run.steps.groupby("rank")["total_ms"].mean().tolist())
    # each steady step's own AllReduce time with no compute op running (measured from the op executions; the
    # numbers are checked against the raw files in test_run_structures), never above the AllReduce op time
    steady = steady_steps(run.steps)
    assert answer.per_rank["communication_ms"].tolist() == pytest.approx(
        steady.groupby("rank")["comm_exposed_ms"].mean().tolist())
    allreduce = run.op_types[run.op_types["type"].str.contains("AllReduce")].groupby("rank")["total_ms"].sum()
    assert (answer.per_rank["communication_ms"] > 0).all()
    assert (steady.groupby("rank")["comm_exposed_ms"].sum() <= allreduce).all()


def test_balanced_cluster_has_no_slow_rank(tmp_path, cache_dir):
    run = tmp_path / "run"
    generate.generate_cluster(run, ranks=6, steps=3, slow_ranks=())
    answer = cluster.slow_ranks(run)
    assert answer.slow == [] and answer.findings == []
    assert len(answer.per_rank) == 6


def test_run_without_step_times_is_a_layout_error(cache_dir):
    with pytest.raises(LayoutError, match="per-step times"):
        cluster.slow_ranks(FIXTURE_RUNS["minddata_job1"])


def test_ranks_command_names_the_slow_rank(one_slow, cache_dir):
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    text = CliRunner().invoke(main, ["ranks", str(one_slow)])
    assert text.exit_code == 0, text.output
    assert f"slow: {SLOW}" in text.output and f"highest: rank {SLOW}" in text.output
    payload = CliRunner().invoke(main, ["ranks", str(one_slow), "--format", "json"])
    assert json.loads(payload.output) == json.loads(json.dumps(cluster.slow_ranks(one_slow).to_dict()))
    missing = CliRunner().invoke(main, ["ranks", str(one_slow / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_summary_names_the_slow_rank_its_step_total_hides(one_slow, cache_dir):
    """In lockstep the slow rank's step total matches the others': the summary still names it, as `ranks` does."""
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    summary = perfkit.summarize(perfkit.load(one_slow))
    assert summary["slow_ranks"] == cluster.slow_ranks(one_slow).slow == [SLOW]
    text = CliRunner().invoke(main, ["summary", str(one_slow)]).output
    assert f"slow ranks {SLOW} (" in text
    single = perfkit.summarize(perfkit.load(one_slow / f"rank{SLOW}_ascend_pt"))
    assert single["slow_ranks"] == []

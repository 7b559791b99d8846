"""msprof-analyze's cluster_analysis_output/ read as a cluster run (tests/runs/msinsight_cluster_analysis: real
output of a 16-rank, 2-stage job from msinsight's test data). Numbers against csv/json read here."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO

import perfkit
from perfkit.analysis.cluster import of_run
from perfkit.apps.cli import main

RUN = REPO / "tests" / "runs" / "msinsight_cluster_analysis"
OUTPUT = RUN / "cluster_analysis_output"


pytestmark = pytest.mark.usefixtures("uncached")


@pytest.fixture(scope="module")
def run():
    return perfkit.load(RUN)


def step_rows() -> list[dict]:
    with open(OUTPUT / "cluster_step_trace_time.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_rank_and_its_step_split(run):
    rows = [row for row in step_rows() if row["Type"] == "rank"]
    assert run.ranks == sorted(int(row["Index"]) for row in rows) == list(range(16))
    assert run.meta.layout == "cluster_analysis"
    steps = run.steps.set_index("rank")
    for row in rows:
        rank = int(row["Index"])
        assert steps.at[rank, "step"] == int(row["Step"])
        assert steps.at[rank, "computing_ms"] == pytest.approx(float(row["Computing"]) / 1e3, rel=1e-12)
        assert steps.at[rank, "comm_exposed_ms"] == pytest.approx(float(row["Communication(Not Overlapped)"]) / 1e3)
        assert steps.at[rank, "bubble_ms"] == pytest.approx(float(row["Bubble"]) / 1e3, rel=1e-12)
        # msprof-analyze's Stage column is the rank's step less its bubble (computing + exposed + free - bubble)
        assert steps.at[rank, "total_ms"] == pytest.approx((float(row["Stage"]) + float(row["Bubble"])) / 1e3,
                                                           rel=1e-6)


def test_the_stages_are_the_stage_rows(run):
    stages = [[int(r) for r in row["Index"].strip("()").split(",")] for row in step_rows() if row["Type"] == "stage"]
    assert run.meta.pipeline_stages == stages == [list(range(8)), list(range(8, 16))]


def test_slow_ranks_are_judged_within_each_stage(run):
    """Stage 1's steps are ~90 ms longer than stage 0's: no rank is slow for being in stage 1."""
    answer = of_run(run)
    stage_of = {rank: number for number, ranks in enumerate(run.meta.pipeline_stages) for rank in ranks}
    assert {tuple(finding["group"]) for finding in answer.findings} <= {tuple(range(8)), tuple(range(8, 16))}
    # within each stage the ranks meet at collectives and compute alike (Computing spreads 0.4 % and 0.1 % of the
    # stage's mean step, from the csv here): their steps differ by what they wait, so no rank is the culprit
    # (a step-total spread of 5-6.5 % named ranks 7 and 11 before; they wait, they do not hold the others up)
    rows = [row for row in step_rows() if row["Type"] == "rank"]
    for stage in set(stage_of.values()):
        mine = [row for row in rows if stage_of[int(row["Index"])] == stage]
        computing = [float(row["Computing"]) for row in mine]
        mean_step = sum(float(row["Stage"]) for row in mine) / len(mine)
        assert (max(computing) - min(computing)) / mean_step < 0.05
    assert answer.slow == []


def test_communication_ops_and_links_per_rank(run):
    data = json.loads((OUTPUT / "cluster_communication.json").read_text())
    expected = {(int(rank), op.partition("@")[0]): info["Communication Time Info"]["Elapse Time(ms)"]
                for group in data.values() for ops in group.values() for op, ranks in ops.items()
                if op != "Total Op Info" for rank, info in ranks.items()}
    got = {(int(r.rank), r.name): r.elapse_ms for r in run.comm_ops.itertuples()}
    assert got == pytest.approx(expected, rel=1e-12)
    kinds = run.comm_ops.groupby("name")["kind"].unique()
    assert list(kinds["hcom_send__822_0"]) == ["p2p"] and list(kinds["hcom_broadcast__483_0"]) == ["collective"]
    matrix = json.loads((OUTPUT / "cluster_communication_matrix.json").read_text())
    links = [(int(pair.partition("-")[0]), link["Transit Size(MB)"])
             for group in matrix.values() for ops in group.values() for op, pairs in ops.items()
             if op != "Total Op Info" for pair, link in pairs.items()]
    got_links = sorted(zip(run.comm_links["src"], run.comm_links["size_mb"]))
    assert [src for src, _ in got_links] == [src for src, _ in sorted(links)]
    assert [mb for _, mb in got_links] == pytest.approx([mb for _, mb in sorted(links)], rel=1e-12)
    assert (run.comm_links["rank"] == run.comm_links["src"]).all()  # each link under its source rank


def test_ranks_command_lists_every_rank_and_its_slow_ones(run):
    result = CliRunner().invoke(main, ["ranks", str(RUN), "--format", "json"])
    assert result.exit_code == 0, result.stderr
    answer = json.loads(result.stdout)
    assert sorted(entry["rank"] for entry in answer["per_rank"]) == list(range(16))
    assert answer["slow_ranks"] == of_run(run).slow == []  # the stages' ranks compute alike (test above)


def _copy(tmp_path: Path, *leave_out: str) -> Path:
    folder = tmp_path / "cluster_analysis_output"
    shutil.copytree(OUTPUT, folder, ignore=shutil.ignore_patterns(*leave_out) if leave_out else None)
    return folder


def test_without_its_step_file_the_rest_loads_with_one_warning(tmp_path):
    folder = _copy(tmp_path, "cluster_step_trace_time.csv")
    partial = perfkit.load(folder)
    assert not len(partial.steps) and len(partial.comm_ops) and len(partial.comm_links)
    said = [w for w in partial.warnings if "cluster_step_trace_time.csv" in w]
    assert said == ["no cluster_step_trace_time.csv in cluster_analysis_output: the ranks' step times are unknown"]


def test_a_step_file_without_its_columns_is_named_and_the_rest_loads(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "cluster_step_trace_time.csv"
    path.write_text(path.read_text().replace("Computing", "Compute", 1))
    partial = perfkit.load(folder)
    assert not len(partial.steps) and len(partial.comm_ops)
    said = [w for w in partial.warnings if "cluster_step_trace_time.csv" in w]
    assert len(said) == 1 and "lacks column(s) Computing" in said[0]


def test_a_broken_communication_file_is_named_and_the_steps_load(tmp_path):
    folder = _copy(tmp_path)
    (folder / "cluster_communication.json").write_text('{"p2p": {"step2": ')
    partial = perfkit.load(folder)
    assert len(partial.steps) == 16 and not len(partial.comm_ops)
    assert len([w for w in partial.warnings if "skipped cluster_communication.json" in w]) == 1


def test_negative_times_are_unknown_and_said(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "cluster_step_trace_time.csv"
    rows = list(csv.reader(path.open(newline="")))
    rows[1][3] = "-5"  # rank 0's Computing
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    partial = perfkit.load(folder)
    assert partial.steps.set_index("rank").loc[0, "computing_ms"] != partial.steps.set_index("rank").loc[0, "computing_ms"]
    assert [w for w in partial.warnings if "computing_ms" in w and "negative" in w]

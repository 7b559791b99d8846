"""Legacy Ascend hccl_raw_{r}.csv (tests/runs/mindinsight_cluster_propose: a real 4-rank, 2-stage pipeline job) and
the step trace's communication columns placing communication outside forward+backward. Numbers are checked
against csv/json read here."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

import perfkit
from perfkit.advisor import advise
from perfkit.ledger import bound
from perfkit.model import Run

from conftest import FIXTURE_RUNS, REPO

RUN = REPO / "tests" / "runs" / "mindinsight_cluster_propose"
RANKS = (0, 1, 2, 3)
TICKS_PER_MS = 1e5


pytestmark = pytest.mark.usefixtures("uncached")


@pytest.fixture(scope="module")
def run():
    return perfkit.load(RUN)


def hccl_rows(rank: int, root: Path = RUN) -> list[dict]:
    with open(root / f"hccl_raw_{rank}.csv", newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["step_num"].isdigit()]


def step_trace(rank: int) -> tuple[list[str], list[list[str]]]:
    with open(RUN / f"step_trace_raw_{rank}_detail_time.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    return rows[0], [row for row in rows[1:] if row[0].isdigit()]


@pytest.mark.parametrize("rank", RANKS)
def test_every_op_of_every_step_with_its_cost_and_wait(run, rank):
    ops = run.comm_ops[run.comm_ops["rank"] == rank]
    expected = {(int(row["step_num"]), name): (cost, wait)
                for row in hccl_rows(rank)
                for name, (_, cost, wait, _) in json.loads(row["communication_operator_cost"]).items()}
    got = {(int(r.step), r.name): (r.transit_ms, r.wait_ms) for r in ops.itertuples()}
    assert got.keys() == expected.keys()
    assert all(got[key] == pytest.approx(expected[key], rel=1e-12) for key in expected)
    kinds = {name.rpartition("_")[2].split("-")[0]: kind for (_, name), kind in zip(got, ops["kind"])}
    assert kinds == {"AllReduce": "collective", "Send": "p2p", "Receive": "p2p"}


@pytest.mark.parametrize("rank", RANKS)
def test_the_ops_costs_add_up_to_the_files_step_totals(run, rank):
    """An independent check of the reading: the per-op costs of a step sum to the file's step columns."""
    ops = run.comm_ops[run.comm_ops["rank"] == rank]
    for row in hccl_rows(rank):
        mine = ops[ops["step"] == int(row["step_num"])]
        assert mine["transit_ms"].sum() == pytest.approx(float(row["communication_cost"]), rel=1e-9)
        assert mine["wait_ms"].sum() == pytest.approx(float(row["wait_cost"]), rel=1e-9)


def test_elapse_is_the_ops_span_in_the_step_trace(run):
    header, rows = step_trace(0)
    ops = run.comm_ops[run.comm_ops["rank"] == 0].set_index(["step", "name"])
    for row in rows:
        for position in range(9, len(header), 3):
            name = header[position]
            if (int(row[0]), name) in ops.index:
                ms = (int(row[position + 2]) - int(row[position + 1])) / TICKS_PER_MS
                assert ops.at[(int(row[0]), name), "elapse_ms"] == pytest.approx(ms, rel=1e-12)
    # hccl_raw_0 has a step 6 the step trace does not: its ops' elapse is unknown, not invented
    assert ops.loc[6, "elapse_ms"].isna().all()


def test_stage_0_waits_on_its_receives_the_pipeline_bound(run):
    result = bound(run)
    assert result.kind == "pipeline"
    findings = {f.id: f for f in advise(run).findings}
    assert findings["pipeline_stage_imbalance"].severity == "high"
    # stage 0's Receive wait per step, from hccl_raw itself (steps 2..5, the steady ones)
    wait = [sum(cost[2] for name, cost in json.loads(row["communication_operator_cost"]).items() if "Receive" in name)
            for row in hccl_rows(0) if 2 <= int(row["step_num"]) <= 5]
    assert min(wait) > 160.0  # of ~179 ms steps


def test_comm_wait_compares_the_ranks_of_one_stage_only(run):
    [finding] = [f for f in advise(run).findings if f.id == "comm_wait"]
    assert set(k for k in finding.evidence if k.endswith("_wait_ratio")) == {"rank0_wait_ratio", "rank1_wait_ratio"}
    assert "every rank of its pipeline stage waits about as much" in finding.title and finding.target is None


def test_comm_wait_ignores_point_to_point_waits(run):
    p2p_only = Run(path=run.path, meta=run.meta,
                   **{**run.tables(), "comm_ops": run.comm_ops[run.comm_ops["kind"] == "p2p"].reset_index(drop=True)})
    advice = advise(p2p_only)
    assert "comm_wait" not in {f.id for f in advice.findings}
    assert advice.not_checked["comm_wait"] == "no collective communication op with transit or wait time"


def test_communication_after_backward_is_exposed_not_overlap_unknown():
    """mindspore_ut: rank 6's AllReduce starts after bp_point in both steps: the step trace places it."""
    path = FIXTURE_RUNS["legacy_ut"]
    legacy = perfkit.load(path)
    with open(path / "step_trace_raw_6_detail_time.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["step_num"].isdigit()]
    for row, (_, step) in zip(rows, legacy.steps.iterrows()):
        spans = [(int(row[c]), int(row[c[:-len("_start_point")] + "_end_point"]))
                 for c in row if c.startswith("stream_") and c.endswith("_start_point")]
        assert all(start >= int(row["bp_point"]) for start, _ in spans)
        assert step["comm_exposed_ms"] == pytest.approx(sum(e - s for s, e in spans) / TICKS_PER_MS, rel=1e-12)
    assert bound(legacy).labels["communication"] == "collective communication (exposed)"


def test_communication_inside_forward_backward_stays_overlap_unknown(run):
    assert run.steps["comm_exposed_ms"].isna().all()
    assert "overlap with compute unknown" in bound(run).labels["communication"]


def _copy(tmp_path: Path, rank: int = 0) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    for name in (f"hccl_raw_{rank}.csv", f"step_trace_raw_{rank}_detail_time.csv"):
        shutil.copy(RUN / name, folder)
    return folder


def test_a_missing_column_skips_the_file_with_one_warning(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "hccl_raw_0.csv"
    path.write_text(path.read_text().replace("wait_cost", "waiting", 1))
    broken = perfkit.load(folder)
    assert len(broken.steps) == 5 and not len(broken.comm_ops)
    said = [w for w in broken.warnings if "hccl_raw_0.csv" in w]
    assert len(said) == 1 and "lacks column(s) wait_cost" in said[0]


def test_negative_values_and_broken_cells_are_unknown_and_said(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "hccl_raw_0.csv"
    rows = list(csv.reader(open(path, newline="")))
    ops = json.loads(rows[1][4])
    first = next(iter(ops))
    ops[first][1] = -1.0
    rows[1][4] = json.dumps(ops)
    rows[2][4] = '{"stream_41_0_AllReduce-op4582": [1, 0.5'  # cut off
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    broken = perfkit.load(folder)
    ops_table = broken.comm_ops
    assert ops_table.loc[(ops_table["step"] == 1) & (ops_table["name"] == first), "transit_ms"].isna().all()
    step2 = ops_table[ops_table["step"] == 2]
    assert len(step2) == 1 and step2["transit_ms"].iloc[0] == pytest.approx(float(rows[2][1]))
    said = [w for w in broken.warnings if w.startswith("hccl_raw_0.csv")]
    assert said == ["hccl_raw_0.csv: op cost not a non-negative number, treated as unknown (1)",
                    "hccl_raw_0.csv: communication_operator_cost cells that are not a JSON object, step totals used (1)"]

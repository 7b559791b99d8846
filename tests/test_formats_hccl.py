"""Legacy Ascend hccl_raw_{r}.csv (tests/runs/mindinsight_cluster_propose: a real 4-rank, 2-stage pipeline job) and
the step trace's communication columns placing communication outside forward+backward. Numbers are checked
against csv/json read here."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor import advise
from perfkit.analysis.ledger import bound
from perfkit.core.model import Run

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
    # the ops come from the step trace's streams instead: timed, their transfer and wait not measured
    assert len(broken.steps) == 5 and len(broken.comm_ops) and broken.comm_ops["transit_ms"].isna().all()
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


# ---------------------------------------------------------------------------------------------------------
# link_info: {"src-dst": {"SDMA" | "RDMA": [time ms, size KB, bandwidth KB/s, ...]}} (MindSpore's hccl_parser)


def expected_links(rank: int, root: Path = RUN) -> list[tuple]:
    """(step, op, src, dst, link type, MB, ms) of every op's link_info, read here from the csv's JSON."""
    rows = []
    for row in hccl_rows(rank, root):
        for name, (_, _, _, links) in json.loads(row["communication_operator_cost"]).items():
            for pair, by_type in links.items():
                src, dst = (int(part) for part in pair.split("-"))
                for link_type, (time_ms, size_kb, *_) in by_type.items():
                    rows.append((int(row["step_num"]), name, src, dst, "LOCAL" if src == dst else link_type,
                                 size_kb / 1e3, time_ms))
    return rows


@pytest.mark.parametrize("rank", RANKS)
def test_every_ops_link_info_is_a_link_row(run, rank):
    links = run.comm_links[run.comm_links["rank"] == rank]
    got = sorted((int(r.step), r.name, r.src, r.dst, r.link_type, r.size_mb, r.transit_ms)
                 for r in links.itertuples())
    expected = sorted(expected_links(rank))
    assert len(got) == len(expected) > 0
    assert [g[:5] for g in got] == [e[:5] for e in expected]
    assert [v for g in got for v in g[5:]] == pytest.approx([v for e in expected for v in e[5:]], rel=1e-12)
    # bandwidth is size / time (MB/ms = GB/s): the file's field, KB/s, agrees on an op's own list
    known = links[links["transit_ms"] > 0]
    assert known["bandwidth_gb_s"].to_numpy() == pytest.approx((known["size_mb"] / known["transit_ms"]).to_numpy())


@pytest.mark.parametrize("rank", RANKS)
def test_the_ops_links_add_up_to_the_steps_link_info(rank):
    """Independent of perfkit: MindSpore wrote each step's link_info as the sum of its ops' lists."""
    summed = {}
    for step, _, src, dst, link_type, size_mb, time_ms in expected_links(rank):
        key = (step, f"{src}-{dst}")
        time, size = summed.get(key, (0.0, 0.0))
        summed[key] = (time + time_ms, size + size_mb * 1e3)
    for row in hccl_rows(rank):
        for pair, by_type in json.loads(row["link_info"]).items():
            ((time_ms, size_kb, *_),) = by_type.values()
            assert summed[(int(row["step_num"]), pair)] == pytest.approx((time_ms, size_kb), rel=1e-9)


def test_sdma_links_are_the_runs_network_links(run):
    from perfkit.analysis.measures import communication_by_rank
    slowest = communication_by_rank(run)[0]["slowest_link"]
    network = [row for row in expected_links(0) if row[4] != "LOCAL"]
    pairs = {}
    for _, _, src, dst, link_type, size_mb, time_ms in network:
        size, time = pairs.get((src, dst, link_type), (0.0, 0.0))
        pairs[(src, dst, link_type)] = (size + size_mb, time + time_ms)
    worst = min(pairs, key=lambda key: pairs[key][0] / pairs[key][1])
    assert (slowest["src"], slowest["dst"], slowest["link_type"]) == worst
    assert slowest["bandwidth_gb_s"] == pytest.approx(pairs[worst][0] / pairs[worst][1], rel=1e-9)


def test_broken_link_info_is_said_once_per_problem_and_the_rest_loads(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "hccl_raw_0.csv"
    rows = list(csv.reader(open(path, newline="")))
    ops = json.loads(rows[1][4])
    first, second, third = list(ops)[:3]
    ops[first][3] = {"1-0": {"SDMA": [-0.5, 4.096, 1.0]}}      # a negative time
    ops[second][3] = {"one-zero": {"SDMA": [0.1, 4.096, 1.0]}}  # not "src-dst"
    ops[third][3] = {"1-0": {"SDMA": "fast"}}                   # not a list
    rows[1][4] = json.dumps(ops)
    rows[2][4] = "not json"                                     # step 2: the step's own link_info is read
    rows[3][3] = "{broken"                                      # step 3's link_info: its ops' are read
    rows.insert(4, rows[3])                                     # step 3 written twice
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    broken = perfkit.load(folder)
    said = [w for w in broken.warnings if "hccl_raw_0.csv" in w]
    assert sorted(said) == sorted([
        "hccl_raw_0.csv: step rows written twice, the first one read (1)",
        "hccl_raw_0.csv: link time not a non-negative number, treated as unknown (1)",
        'hccl_raw_0.csv: link_info entries not written as "src-dst": {type: [...]}, skipped (1)',
        "hccl_raw_0.csv: link_info lists not SDMA/RDMA [time ms, size KB, ...], skipped (1)",
        "hccl_raw_0.csv: communication_operator_cost cells that are not a JSON object, step totals used (1)"])
    links = broken.comm_links
    bad = links[(links["step"] == 1) & (links["name"] == first)]
    assert len(bad) == 1 and bad["transit_ms"].isna().all() and bad["bandwidth_gb_s"].isna().all()
    assert not len(links[(links["step"] == 1) & links["name"].isin([second, third])])
    step2 = links[links["step"] == 2]
    expected = json.loads(rows[2][3])
    assert set(step2["name"]) == {"all communication ops of the step"}
    assert sorted(zip(step2["src"], step2["dst"])) == sorted(tuple(map(int, p.split("-"))) for p in expected)
    assert len(links[links["step"] == 3]) == len([r for r in expected_links(0) if r[0] == 3])
    assert len(broken.steps) == 5 and len(broken.comm_ops)


def test_a_file_without_link_columns_loads_without_links(tmp_path):
    folder = _copy(tmp_path)
    path = folder / "hccl_raw_0.csv"
    rows = [row[:3] for row in csv.reader(open(path, newline=""))]
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    loaded = perfkit.load(folder)
    assert not len(loaded.comm_links) and len(loaded.comm_ops) == len(hccl_rows(0))  # the step totals
    assert not [w for w in loaded.warnings if "hccl_raw_0.csv" in w]

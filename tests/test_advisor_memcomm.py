"""The memory and communication rules (memory_headroom, memory_fragmentation, slow_link, comm_wait): each fires
on a real run and stays silent on another, with its numbers recomputed here from the raw files."""

from __future__ import annotations

import csv
import json
import statistics

import broken
import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor import advise

CPU_MEMORY_RUN = REPO / "tests/runs/cpu_2_10_memory"
OUTPUT = "ASCEND_PROFILER_OUTPUT"


pytestmark = pytest.mark.usefixtures("uncached")


def findings(run, rule_id: str):
    advice = advise(run)
    return [f for f in advice.findings if f.id == rule_id], advice.not_checked.get(rule_id)


@pytest.fixture(scope="module")
def level1():
    return perfkit.load(FIXTURE_RUNS["new_level1"])


@pytest.fixture(scope="module")
def run_2023():
    return perfkit.load(FIXTURE_RUNS["new_2023"])


def cpu_memory_rows():
    path = next(CPU_MEMORY_RUN.rglob("cpu_ms_memory_record_0.txt"))
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# ---- memory_headroom


def test_memory_headroom_fires_with_the_batch_that_fits_on_a_real_cpu_run():
    run = perfkit.load(CPU_MEMORY_RUN)
    [finding], _ = findings(run, "memory_headroom")
    manifest = json.loads((CPU_MEMORY_RUN / "perfkit_run.json").read_text())
    allocated = [int(row["Total Allocated(Byte)"]) / 2**20 for row in cpu_memory_rows()]
    peak, static = max(allocated), min(allocated)
    capacity = manifest["memory_capacity_mb"]
    factor = (0.9 * capacity - static) / (peak - static)
    assert finding.evidence["batch_size"] == manifest["config"]["batch_size"] == 8
    assert finding.evidence["batch_size_that_fits"] == int(8 * factor)
    assert f"dataset.batch({int(8 * factor)}" in finding.action
    assert finding.evidence["peak_allocated_mb"] == round(peak, 1)


def test_memory_headroom_silent_when_the_peak_uses_half_the_capacity(tmp_path):
    """Crafted: the real CPU run with a recorded capacity of 1.5x its peak reserved memory (no real run is that
    tight on memory)."""
    run_dir = broken.copy_run(CPU_MEMORY_RUN, tmp_path / "run")
    manifest = json.loads((run_dir / "perfkit_run.json").read_text())
    reserved = max(int(row["Total Reserved(Byte)"]) for row in cpu_memory_rows()) / 2**20
    manifest["memory_capacity_mb"] = 1.5 * reserved
    (run_dir / "perfkit_run.json").write_text(json.dumps(manifest))
    found, why = findings(perfkit.load(run_dir), "memory_headroom")
    assert found == [] and why is None


def test_memory_headroom_not_checked_without_a_capacity(level1):
    found, why = findings(level1, "memory_headroom")
    assert found == [] and "capacity unknown" in why


# ---- memory_fragmentation


def test_memory_fragmentation_fires_on_a_4_gb_gap(run_2023):
    [finding], _ = findings(run_2023, "memory_fragmentation")
    with open(FIXTURE_RUNS["new_2023"] / "test_rank_0" / OUTPUT / "memory_record.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["Component"] == "PTA+GE"]
    allocated = max(float(row["Total Allocated(MB)"]) for row in rows)
    reserved = max(float(row["Total Reserved(MB)"]) for row in rows)
    assert finding.evidence["gap_mb"] == round(reserved - allocated, 1) and reserved - allocated > 1024
    assert finding.target == "rank 0"
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in finding.action  # a torch_npu (PTA) run


def test_memory_fragmentation_silent_on_a_small_gap(level1):
    found, why = findings(level1, "memory_fragmentation")
    assert found == [] and why is None


# ---- slow_link


def test_slow_link_fires_on_the_slow_hccs_transfers_of_2023(run_2023):
    [finding], _ = findings(run_2023, "slow_link")
    # recomputed from the matrix: HCCS transfers of at least 16 MB, each against 0.8 x the median of them all
    hccs = []
    for rank, folder in ((0, "test_rank_0"), (1, "test_rank_1")):
        matrix = json.loads((FIXTURE_RUNS["new_2023"] / folder / OUTPUT / "communication_matrix.json").read_text())
        for kind in matrix["step2"].values():
            for op, links in kind.items():
                if op == "Total Op Info":
                    continue
                hccs += [link["Bandwidth(GB/s)"] for link in links.values()
                         if link["Transport Type"] == "HCCS" and link["Transit Size(MB)"] >= 16]
    median = statistics.median(hccs)
    slow = sorted(value for value in hccs if value < 0.8 * median or value < 0.8 * 18.0)
    assert finding.evidence["slow_links"] == len(slow) == 4
    assert finding.evidence["worst_bandwidth_gb_s"] == round(slow[0], 3)
    assert finding.evidence["median_bandwidth_gb_s"] == round(median, 3)
    assert "hcom_allGather__483_3" in finding.action


def test_slow_link_silent_when_links_run_alike(level1):
    found, why = findings(level1, "slow_link")
    assert found == [] and why is None


# ---- comm_wait


def test_comm_wait_names_the_rank_the_others_wait_for(level1):
    [finding], _ = findings(level1, "comm_wait")
    totals = {rank: json.loads((FIXTURE_RUNS["new_level1"] / f"rank{rank}_ascend_pt" / OUTPUT
                                / "communication.json").read_text())["step50"]["collective"]["Total Op Info"]
              for rank in (0, 1)}
    ratios = {rank: total["Communication Time Info"]["Wait Time Ratio"] for rank, total in totals.items()}
    assert ratios[0] > 0.5 and ratios[0] - ratios[1] > 0.2  # rank 0 waits, rank 1 does not
    assert finding.target == "rank 1"
    assert finding.evidence["rank0_wait_ratio"] == pytest.approx(ratios[0], abs=1e-3)
    assert finding.evidence["wait_ms_per_step"] == pytest.approx(
        totals[0]["Communication Time Info"]["Wait Time(ms)"], abs=1e-3)
    # the command compares the run's own rank folders, no placeholders
    rank1, rank0 = (FIXTURE_RUNS["new_level1"].resolve() / f"rank{rank}_ascend_pt" for rank in (1, 0))
    assert f"perfkit compare {rank1} {rank0}" in finding.action and "_DIR" not in finding.action


def test_rank_folders_are_the_folders_holding_one_rank_alone(tmp_path):
    import shutil
    assert perfkit.load(FIXTURE_RUNS["new_level1"]).meta.rank_folders == {"0": "rank0_ascend_pt", "1": "rank1_ascend_pt"}
    assert perfkit.load(FIXTURE_RUNS["new_level1_rank0"]).meta.rank_folders == {}  # the run is the rank
    assert perfkit.load(FIXTURE_RUNS["legacy_run_2"]).meta.rank_folders == {}  # ranks' files side by side
    copy = shutil.copytree(FIXTURE_RUNS["new_level1"], tmp_path / "run with space")
    run = perfkit.load(copy)
    [finding], _ = findings(run, "comm_wait")
    assert f"perfkit compare '{copy.resolve() / 'rank1_ascend_pt'}' '{copy.resolve() / 'rank0_ascend_pt'}'" \
        in finding.action  # quoted for the shell


def test_comm_wait_says_the_slow_rank_was_not_profiled_when_all_wait(run_2023):
    [finding], _ = findings(run_2023, "comm_wait")
    assert finding.target is None and "not profiled" in finding.title
    assert "2, 3, 4, 5, 6, 7, 8, 9" in finding.action  # the peers in the matrix that have no folder here


def test_comm_wait_silent_on_the_rank_that_does_not_wait(level1):
    found, why = findings(level1.rank(1), "comm_wait")
    assert found == [] and why is None

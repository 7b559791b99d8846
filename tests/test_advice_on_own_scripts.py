"""Issue 37's advice on users' own scripts, on the real CPU runs made for it (tests/runs/cpu_2_10_*, their
SOURCE.txt): advice that fits the host that ran the run (item 3, 11), a slow train callback explained (item 4), the
straggler named in every view and its waiters not (item 5), float16 on a CPU (item 11). Every number checked is
computed here from the raw files (perfkit_run.json, cpu_op_type_info / cpu_op_execute_timestamp, MindData's
pipeline profile) with json and csv; host facts come from the run's manifest, faked explicitly where a test needs
another host."""

from __future__ import annotations

import csv
import json
import shutil
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.advisor import advise
from perfkit.analysis.cluster import of_run
from perfkit.apps.cli import main
from perfkit.core.host import capped_workers, recorded_cpus

RUNS = Path(__file__).resolve().parent / "runs"


def run_dir(name: str) -> Path:
    return RUNS / f"cpu_2_10_{name}"


def manifest(folder: Path) -> dict:
    return json.loads((folder / "perfkit_run.json").read_text())


def findings(folder: Path, rule_id: str) -> list:
    return [finding for finding in advise(perfkit.load(folder)).findings if finding.id == rule_id]


def with_host(tmp_path: Path, name: str, host: dict | None) -> Path:
    """A copy of the run whose manifest records `host` (None: no host facts), written with json as a manifest
    of another machine would be."""
    folder = tmp_path / name
    shutil.copytree(run_dir(name), folder)
    data = manifest(folder)
    if host is None:
        data.pop("host", None)
    else:
        data["host"] = host
    (folder / "perfkit_run.json").write_text(json.dumps(data))
    return folder


def op_type_rows(folder: Path) -> list[dict]:
    return [row for path in sorted(folder.rglob("cpu_op_type_info_*.csv")) for row in csv.DictReader(path.open())]


def step_bounds(folder: Path) -> list[tuple[int, int]]:
    return [(step["begin_ns"], step["end_ns"]) for step in manifest(folder)["steps"]]


def op_intervals(folder: Path) -> list[tuple[str, int, int]]:
    """(op name, start ns, end ns) of every op execution in cpu_op_execute_timestamp_*.txt
    (`name;HostCpuOps;start_ns,duration_ms,0 start_ns,duration_ms,0 ...`)."""
    found = []
    for path in folder.rglob("cpu_op_execute_timestamp_*.txt"):
        for line in path.read_text().splitlines():
            name, _, calls = line.split(";", 2)
            for call in calls.split():
                start, duration, _ = call.split(",")
                found.append((name, int(start), int(start) + int(float(duration) * 1e6)))
    return found


# --- item 3: dataset workers within the host's CPUs ------------------------------------------------------

def map_workers(folder: Path) -> int:
    pipeline = json.loads(next(folder.rglob("pipeline_profiling_*.json")).read_text())
    return next(op["num_workers"] for op in pipeline["op_info"] if op["op_type"] == "MapOp")


def test_capped_workers_is_the_cpu_count_or_what_was_asked():
    assert capped_workers(4, 2) == 2 and capped_workers(4, 8) == 4 and capped_workers(4, None) == 4
    assert capped_workers(0, 2) == 1
    assert recorded_cpus({"cpus": 8, "cores": 4})[0] == 8 and recorded_cpus({"cores": 4})[0] == 4
    assert recorded_cpus({})[0] is None and recorded_cpus(None)[0] is None


def test_data_bound_at_the_cpu_limit_says_the_limit_is_reached():
    """The map runs 2 workers on a host whose manifest records 2 CPUs: 4 would crash the script."""
    folder = run_dir("data_bound")
    cpus, workers = manifest(folder)["host"]["cpus"], map_workers(folder)
    assert workers >= cpus
    (finding,) = findings(folder, "dataset_workers")
    assert finding.target == "Map" and finding.evidence["workers"] == workers
    assert finding.evidence["host_cpus"] == cpus
    assert "CPU limit is reached" in finding.action and "num_parallel_workers=" not in finding.action
    assert finding.change is None


def test_data_bound_on_a_larger_host_doubles_within_its_cpus(tmp_path):
    """The same run, its manifest saying 8 CPUs, then 3: 2 -> 4 workers, then 3 (the most that host allows);
    doubling the workers at most halves a data-bound step, so the gain is 50 % (the wait is ~97 % of each step:
    step times from the manifest against the op time per step from cpu_op_type_info)."""
    raw = manifest(run_dir("data_bound"))
    step_ms = statistics.mean((end - begin) / 1e6 for begin, end in step_bounds(run_dir("data_bound"))[1:])
    op_ms = sum(float(row["total_compute_time"]) for row in op_type_rows(run_dir("data_bound"))) / len(raw["steps"])
    assert op_ms / step_ms < 0.5  # the wait share is above a half: the cap, not the wait, bounds the gain
    (finding,) = findings(with_host(tmp_path, "data_bound", {**raw["host"], "cpus": 8}), "dataset_workers")
    assert finding.action.startswith("dataset.map(operations=..., num_parallel_workers=4)")
    assert finding.est_gain_pct == pytest.approx(50.0)
    (finding,) = findings(with_host(tmp_path / "three", "data_bound", {**raw["host"], "cpus": 3}), "dataset_workers")
    assert finding.action.startswith("dataset.map(operations=..., num_parallel_workers=3) (3: the most MindSpore")
    assert finding.est_gain_pct == pytest.approx(100 * (1 - 2 / 3), abs=0.01)


def test_data_bound_without_host_facts_says_so(tmp_path):
    (finding,) = findings(with_host(tmp_path, "data_bound", None), "dataset_workers")
    assert "num_parallel_workers=4" in finding.action and "records no host facts" in finding.action


# --- item 4: a slow train callback --------------------------------------------------------------------------

def between_steps_ms(folder: Path, from_first_op: bool = False) -> float:
    """Mean over the steady steps (all but the compiling first) of the step time no op covers, from the raw
    files: perfkit_run.json's step bounds (or, `from_first_op`, the step's first op start to its end) less the
    union of the op executions that start in each step."""
    ops = op_intervals(folder)
    idle = []
    for begin, end in step_bounds(folder)[1:]:
        mine = sorted((op for op in ops if begin <= op[1] < end), key=lambda op: op[1])
        start_at = mine[0][1] if from_first_op else begin
        covered, reach = 0, start_at
        for _, start, stop in mine:
            stop = min(stop, end)
            if stop > reach:
                covered += stop - max(start, reach)
                reach = stop
        idle.append((end - start_at - covered) / 1e6)
    return statistics.mean(idle)


def test_slow_callback_is_host_work_between_steps():
    folder = run_dir("slow_callback")
    step_ms = statistics.mean((end - begin) / 1e6 for begin, end in step_bounds(folder)[1:])
    idle_ms = between_steps_ms(folder)
    assert idle_ms > 0.5 * step_ms  # the callback's 100 ms against ~50 ms of ops
    advice = advise(perfkit.load(folder))
    (finding,) = [f for f in advice.findings if f.id == "host_loop"]
    assert finding.severity == "high"
    assert finding.evidence["host_loop_ms"] == pytest.approx(idle_ms, abs=1.0)
    assert finding.evidence["host_loop_share_pct"] == pytest.approx(100 * idle_ms / step_ms, abs=1.0)
    assert f"{100 * idle_ms / step_ms:.0f} % of each step is host work between steps" in finding.title
    assert "callbacks" in finding.action and "Timeline" in finding.action
    # no other finding takes that time: not launch-bound, not an optimizer tail, not sink mode (CPU)
    assert not {"host_bound", "tail", "sink_mode"} & set(advice.ids())


def test_feed_mode_interval_on_cpu_is_the_loop_not_a_transfer():
    from perfkit.analysis.ledger import ledger
    frame = ledger(perfkit.load(run_dir("slow_callback")))
    assert "host_transfer" not in set(frame["cause"]) and "host_loop" in set(frame["cause"])


# --- item 5: the straggler, not its waiters ---------------------------------------------------------------

def last_at_first_allreduce(folder: Path) -> list[int]:
    """Per steady step, the rank that starts the step's first AllReduce (AllReduce-op2) last, from each rank's
    cpu_op_execute_timestamp (its k-th execution is step k)."""
    starts = {}
    for rank in range(4):
        line = next(line for line in next((folder / f"rank_{rank}").rglob("cpu_op_execute_timestamp_*.txt"))
                    .read_text().splitlines() if line.startswith("Default/grad_reducer-DistributedGradReducer/"
                                                               "AllReduce-op2;"))
        starts[rank] = [int(call.split(",")[0]) for call in line.split(";", 2)[2].split()]
    steps = len(starts[0])
    return [max(range(4), key=lambda rank: starts[rank][k]) for k in range(1, steps)]


def test_straggler_is_named_in_every_view():
    folder = run_dir("straggler4")
    late = set(last_at_first_allreduce(folder))
    assert late == {2}  # rank 2 sleeps before each step: last at every steady step's first AllReduce
    run = perfkit.load(folder)
    assert of_run(run).slow == [2]
    advice = advise(run)
    communication = next(f for f in advice.findings if f.id == "communication")
    assert communication.target == "rank 2" and communication.evidence["late_rank"] == 2
    assert "not profiled" not in communication.action and "Rank 2 arrives last" in communication.action
    assert communication.evidence["rank2_caused_wait_pct"] > 90
    assert [f.target for f in advice.findings if f.id == "slow_rank"] == ["rank 2"]
    ranks = CliRunner().invoke(main, ["ranks", str(folder)])
    assert ranks.exit_code == 0 and "slow: 2 " in ranks.output
    summary = json.loads(CliRunner().invoke(main, ["summary", str(folder), "--format", "json"]).output)
    assert summary["slow_ranks"] == [2]
    from perfkit.views.figures.ranks import rank_rows
    table = rank_rows(run)
    assert table.loc[table["slow"] == "yes", "rank"].tolist() == [2]


# --- item 11: one ISA advice from the recorded host; float16 on CPU ----------------------------------------

def isa_actions(folder: Path) -> list[str]:
    return [f.action for f in advise(perfkit.load(folder)).findings if "ONEDNN_MAX_CPU_ISA=" in f.action]


def test_isa_advice_on_the_avx512_host_is_one_cap():
    folder = run_dir("amp_o0_avx512")
    assert "avx512f" in manifest(folder)["host"]["flags"]
    actions = isa_actions(folder)
    assert len(actions) >= 2 and all("ONEDNN_MAX_CPU_ISA=AVX2" in action for action in actions)
    assert not any("best ISA" in f.action for f in advise(perfkit.load(folder)).findings)


def test_isa_advice_follows_the_recorded_host(tmp_path):
    host = manifest(run_dir("amp_o0_avx512"))["host"]
    avx2_only = with_host(tmp_path, "amp_o0_avx512", {**host, "flags": ["fma", "avx2"]})
    assert isa_actions(avx2_only) == []
    assert all(f.change is None for f in findings(avx2_only, "kernel_efficiency"))
    unknown = with_host(tmp_path / "unknown", "amp_o0_avx512", None)
    assert all("if the host has AVX-512 and the run did not cap the ISA" in action for action in isa_actions(unknown))
    # a run that set the cap already is told nothing about the ISA
    assert manifest(run_dir("amp_o0"))["env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert isa_actions(run_dir("amp_o0")) == []


def test_a_run_without_convolutions_is_told_nothing_of_the_isa(tmp_path):
    """The cap avoids oneDNN's reference convolutions: a compute-bound MLP (MatMul, no Conv op in its raw op types)
    on an uncapped AVX-512 host, or on an unknown host, gets no ISA advice; its compute finding keeps the rest."""
    name = "speedpair/layers2/repeat_1"
    folder = run_dir(name)
    types = {row["op_type"] for row in op_type_rows(folder)}
    assert "MatMul" in types and not any(op_type.startswith("Conv") for op_type in types)
    avx512_host = manifest(run_dir("amp_o0_avx512"))["host"]
    for host in (avx512_host, None):
        moved = with_host(tmp_path / str(host is None), name, host)
        found = advise(perfkit.load(moved)).findings
        assert "compute_bound" in {finding.id for finding in found}
        assert isa_actions(moved) == []
        assert all(finding.change is None or finding.change.name != "ONEDNN_MAX_CPU_ISA" for finding in found)


def test_reference_convolutions_are_told_by_the_host_peak_alone(tmp_path):
    """A user's jit loop whose only convolution is a 3-channel first layer (no input gradient: no fast group to
    compare with) on an uncapped AVX-512 host: Conv2D and its filter gradient run at ~0.06 GFLOP/s, a few
    hundredths of a percent of the host's peak. Rates computed here from cpu_op_detail_info and the layer's shapes
    (conv 3->16, 3x3, same padding, batch 32 at 32x32: 2 * 32 * 16 * 32 * 32 * 3 * 3 * 3 FLOP a call); the peak
    from the recorded host (2 cores x 2,600 MHz x 16 float32 lanes x 2 (FMA) x 2 FMA units)."""
    folder = run_dir("jit_refconv")
    host = manifest(folder)["host"]
    assert "avx512f" in host["flags"] and "ONEDNN_MAX_CPU_ISA" not in manifest(folder)["env"]
    peak = host["cores"] * host["cpu_mhz"] * 1e6 * 16 * 2 * 2 / 1e9
    call_flops = 2 * 32 * 16 * 32 * 32 * 3 * 3 * 3
    rows = [row for path in folder.rglob("cpu_op_detail_info_*.csv") for row in csv.DictReader(path.open())]
    expected = {f"{row['op_type']} 3x3": int(row["op_occurrences"]) * call_flops / float(row["op_total_time(ms)"]) / 1e6
                for row in rows if row["op_type"].startswith("Conv2D")}
    assert set(expected) == {"Conv2D 3x3", "Conv2DBackpropFilter 3x3"}
    found = {f.target: f for f in findings(folder, "kernel_efficiency")}
    assert set(found) == set(expected)
    for target, rate in expected.items():
        assert rate / peak < 0.005
        assert found[target].severity == "high" and found[target].evidence["gflops_per_s"] == pytest.approx(rate,
                                                                                                            abs=1e-3)
        assert found[target].evidence["peak_gflops_per_s"] == pytest.approx(peak, abs=0.05)
        assert "ONEDNN_MAX_CPU_ISA=AVX2" in found[target].action and found[target].change.value == "AVX2"
    # the same files on a host without AVX-512, or with the cap set, get no such finding
    assert findings(with_host(tmp_path, "jit_refconv", {**host, "flags": ["fma", "avx2"]}), "kernel_efficiency") == []
    capped = with_host(tmp_path / "capped", "jit_refconv", host)
    data = manifest(capped)
    data["env"] = {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    (capped / "perfkit_run.json").write_text(json.dumps(data))
    assert findings(capped, "kernel_efficiency") == []


@pytest.mark.parametrize("name", ["amp_o2", "amp_o3"])
def test_float16_on_cpu_is_told_o0_is_faster(name):
    casts = [row for row in op_type_rows(run_dir(name)) if row["op_type"] == "Cast"]
    assert casts
    o0 = statistics.mean((e - b) / 1e6 for b, e in step_bounds(run_dir("amp_o0"))[1:])
    mine = statistics.mean((e - b) / 1e6 for b, e in step_bounds(run_dir(name))[1:])
    assert mine > 2 * o0  # the premise: O0 is faster on this CPU
    (finding,) = findings(run_dir(name), "amp_level")
    assert "O0 is faster on CPU" in finding.title and finding.change.value == "O0"
    assert finding.evidence["cast_calls_per_step"] == int(casts[0]["execution_frequency(per-step)"])
    summary = json.loads(CliRunner().invoke(main, ["summary", str(run_dir(name)), "--format", "json"]).output)
    assert summary["meta"]["amp_level"].startswith("O1-O3")


def test_float32_on_cpu_reads_o0_and_gets_no_amp_finding():
    assert not [row for row in op_type_rows(run_dir("amp_o0")) if row["op_type"] == "Cast"]
    advice = advise(perfkit.load(run_dir("amp_o0")))
    assert "amp_level" not in advice.ids() and "amp_level" in advice.not_checked
    summary = json.loads(CliRunner().invoke(main, ["summary", str(run_dir("amp_o0")), "--format", "json"]).output)
    assert summary["meta"]["amp_level"].startswith("O0")


def test_short_gaps_between_ops_stay_launch_gaps():
    """The O2 run's steps have ~100 op calls and a few ms with no op running inside them: well under 1 ms a call
    (launches, not Python between steps), so the ledger keeps them host_launch; only the feed-mode interval is the
    loop's."""
    from perfkit.analysis.ledger import steady_means
    folder = run_dir("amp_o2")
    calls = sum(int(row["execution_frequency(per-step)"]) for row in op_type_rows(folder))
    gaps_ms = between_steps_ms(folder, from_first_op=True)
    assert 0 < gaps_ms < 1.0 * calls
    means = steady_means(perfkit.load(folder)).mean()
    assert means["host_launch"] == pytest.approx(gaps_ms, abs=0.5)
    assert findings(folder, "host_loop")[0].evidence["host_loop_ms"] == pytest.approx(means["host_loop"], abs=0.01)


@pytest.mark.parametrize("a, b, casts_a, casts_b", [("amp_o0", "amp_o2", "0", "54"), ("amp_o2", "amp_o3", "54", "45")])
def test_compare_lists_the_precision_the_ops_show(a, b, casts_a, casts_b):
    """Runs that record no AMP level differ in it by their Cast ops (0, 54 and 45 a step: cpu_op_type_info's
    per-step frequency); compare lists that difference, as summary shows the level."""
    for name, expected in ((a, casts_a), (b, casts_b)):
        rows = [row for row in op_type_rows(run_dir(name)) if row["op_type"] == "Cast"]
        assert sum(int(row["execution_frequency(per-step)"]) for row in rows) == int(expected)
    result = CliRunner().invoke(main, ["compare", str(run_dir(a)), str(run_dir(b)), "--format", "json"])
    differences = {row["setting"]: (row["a"], row["b"]) for row in json.loads(result.output)["differences"]}
    level = {"0": "O0"}
    assert differences["amp_level"] == (f"{level.get(casts_a, 'O1-O3')} (from ops: {casts_a} Cast a step)",
                                        f"{level.get(casts_b, 'O1-O3')} (from ops: {casts_b} Cast a step)")


# --- a user's own profiler in a custom loop: the step time no file explains -----------------------------------

OWN_SCHEDULE = RUNS / "cpu_2_10_own_schedule"


def largest_gap_ms(folder: Path) -> float:
    """The longest time no op runs between two op executions of cpu_op_execute_timestamp_*.txt (start ns,
    duration ms per call)."""
    calls = sorted((int(start) / 1e6, float(duration))
                   for path in folder.rglob("cpu_op_execute_timestamp_*.txt") for line in path.open()
                   for start, duration, _ in (call.split(",") for call in line.strip().split(";")[2].split()))
    gaps, end = [], calls[0][0] + calls[0][1]
    for start, duration in calls[1:]:
        gaps.append(start - end)
        end = max(end, start + duration)
    return max(gaps)


def test_the_gap_no_file_explains_is_said_with_how_to_tell_its_cause():
    cycle = sorted(OWN_SCHEDULE.glob("*_ascend_ms"))[1]
    found = findings(cycle, "idle_unexplained")
    assert len(found) == 1
    finding = found[0]
    assert finding.evidence["unknown_ms"] == pytest.approx(largest_gap_ms(cycle), abs=0.01)
    assert finding.evidence["unknown_share_pct"] > 80 and finding.severity == "medium"
    assert finding.est_gain_pct is None and "custom loop" in finding.action and ".asnumpy()" in finding.action
    text = CliRunner().invoke(main, ["advise", str(OWN_SCHEDULE), "--cycle", "2"]).output.splitlines()
    # advise starts with the run panel every terminal answer starts with, the cycle it read included
    assert text[0] == f"run      {OWN_SCHEDULE}   profiler cycle 2 (--cycle)"
    assert text[1] == "layout   cpu   device CPU   ranks [0]" and text[2].startswith("mode     graph")


def test_a_gap_with_a_known_cause_is_not_unexplained(monkeypatch):
    assert findings(run_dir("slow_callback"), "host_loop") and not findings(run_dir("slow_callback"),
                                                                            "idle_unexplained")
    # where sink_mode words the step interval as the batch transfer, the gap is its finding alone
    from perfkit.advisor.rules import steps
    cycle = sorted(OWN_SCHEDULE.glob("*_ascend_ms"))[1]
    monkeypatch.setattr(steps, "sink_mode_applies", lambda run: True)
    assert findings(cycle, "idle_unexplained") == []

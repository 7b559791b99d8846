"""Run structures perfkit had never seen (issue 23), on real MindSpore 2.10 CPU runs made by tests/scripts/diag_runs.py:
several profiler cycles or windows of one rank, msrun's CPU ranks, steady steps on one cycle, a PyNative custom loop.
Expected numbers are computed here from the raw files with plain csv/json."""

from __future__ import annotations

import csv
import json
import re
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.apps.cli import main

RUNS = Path(__file__).resolve().parent / "runs"
REPEAT2 = RUNS / "cpu_2_10_repeat2"
DYNAMIC = RUNS / "cpu_2_10_dynamic"
MSRUN2 = RUNS / "cpu_2_10_msrun2"
PYNATIVE_LOOP = RUNS / "cpu_2_10_pynative_loop"


def _one(pattern: str, under: Path) -> Path:
    found = sorted(under.glob(pattern))
    assert len(found) == 1, found
    return found[0]


# ---------------------------------------------------------------- several cycles / windows of one rank

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


COMMANDS = {
    "summary": lambda run, tmp: ["summary", str(run)],
    "advise": lambda run, tmp: ["advise", str(run)],
    "ranks": lambda run, tmp: ["ranks", str(run)],
    "compare": lambda run, tmp: ["compare", str(run), str(run)],
    "trace": lambda run, tmp: ["trace", str(run), "--step", "2", "-o", str(tmp / "t.json")],
    "report": lambda run, tmp: ["report", str(run), "-o", str(tmp / "r.html")],
    "dash": lambda run, tmp: ["dash", str(run), "--port", str(free_port())],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("run, first, second, own", [
    # the cycles lie side by side beside SOURCE.txt (as beside perfkit_run.json): passing one would leave that out
    (REPEAT2, "vm_5942_20261124202935871_ascend_ms", "vm_5942_20261124202937099_ascend_ms", None),
    # the later window sorts first as text ("start12" < "start3"): the order named is the profiling order; each
    # window has a folder of its own, which is the one to pass
    (DYNAMIC, "rank0_start3_stop4/vm_6077_20261124202944069_ascend_ms",
     "rank0_start12_stop13/vm_6077_20261124202948979_ascend_ms", "rank0_start12_stop13"),
], ids=["repeat2", "dynamic"])
def test_every_command_refuses_several_cycles_of_one_rank_alike(command, run, first, second, own, tmp_path,
                                                               cache_dir):
    result = CliRunner().invoke(main, COMMANDS[command](run, tmp_path))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    message = result.output.strip().splitlines()[-1]
    assert (f"holds several runs for rank 0, in profiling order: 1) {first}, 2) {second}; choose one with --cycle N "
            "(1-2, or last)") in message
    if own is None:
        assert "pass its folder" not in message
    else:
        assert message.endswith(f"or pass its folder (e.g. {run / own})")
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "r.html").exists()


CYCLES = {REPEAT2: ["vm_5942_20261124202935871_ascend_ms", "vm_5942_20261124202937099_ascend_ms"],
          DYNAMIC: ["rank0_start3_stop4/vm_6077_20261124202944069_ascend_ms",
                    "rank0_start12_stop13/vm_6077_20261124202948979_ascend_ms"]}


def steady_step_mean_ms(folder: Path) -> float:
    """The mean of steps 2..n from the raw op launches (step k ends at its last op's end; step 1's start is unknown)."""
    steps = graph_steps(raw_executions(folder, 0))
    ends = {number: max(e for _, _, e in ops) for number, ops in steps.items()}
    totals = [(ends[n] - ends[n - 1]) / 1e6 for n in steps if n > 1]
    return sum(totals) / len(totals)


@pytest.mark.parametrize("run", [REPEAT2, DYNAMIC], ids=["repeat2", "dynamic"])
def test_summary_reads_the_chosen_cycle(run, cache_dir):
    """--cycle N reads the N-th run in profiling order (the dynamic windows: "start3" first though "start12" sorts
    first as text), `last` the last; each answer is that folder's, kept apart in the answer cache."""
    means = {}
    for number, choice in ((1, "1"), (2, "2"), (2, "last"), (1, "1")):  # the second "1": from the answer cache
        folder = run / CYCLES[run][number - 1]
        result = CliRunner().invoke(main, ["summary", str(run), "--cycle", choice, "--format", "json"])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.output)
        assert summary["meta"]["cycle"] == number
        assert summary["steps"]["total_ms"] == pytest.approx(steady_step_mean_ms(folder), abs=1e-3)
        alone = json.loads(CliRunner().invoke(main, ["summary", str(folder), "--format", "json"]).output)
        assert summary["steps"] == alone["steps"] and summary["op_types"] == alone["op_types"]
        means[number] = summary["steps"]["total_ms"]
    assert means[1] != means[2]  # the cycles differ: the choice is seen
    assert perfkit.load(run, cycle="last").meta.rank_folders == {"0": CYCLES[run][1]}
    text = CliRunner().invoke(main, ["summary", str(run), "--cycle", "last"]).output
    assert text.splitlines()[0] == f"run      {run}   profiler cycle 2 (--cycle)"
    for view in (["ranks"], ["summary", "--by", "cell"]):  # every text answer says the cycle it read alike
        text = CliRunner().invoke(main, [*view, str(run), "--cycle", "last"]).output
        assert text.splitlines()[0] == f"run      {run}   profiler cycle 2 (--cycle)", view
    from perfkit.views.lines import run_heading
    from perfkit.views.summary import summarize
    # the run panel's heading on the dashboard's Overview and in the report
    assert run_heading(summarize(perfkit.load(run, cycle=1))) == f"{run} · profiler cycle 1 (--cycle)"


@pytest.mark.parametrize("run", [REPEAT2, DYNAMIC], ids=["repeat2", "dynamic"])
def test_trace_exports_the_chosen_cycle(run, tmp_path, cache_dir):
    for number in (1, 2):
        out = tmp_path / f"c{number}.json"
        result = CliRunner().invoke(main, ["trace", str(run), "--cycle", str(number), "--step", "2", "-o", str(out)])
        assert result.exit_code == 0, result.output
        exported = json.loads(out.read_text())
        exported = exported["traceEvents"] if isinstance(exported, dict) else exported
        stamps = [float(e["ts"]) for e in exported if e.get("ph") == "X"]
        chosen, other = (_trace_ts_range(run / CYCLES[run][index]) for index in (number - 1, 2 - number))
        assert stamps and chosen[0] <= min(stamps) and max(stamps) <= chosen[1]
        assert max(stamps) < other[0] or min(stamps) > other[1]  # none of the other cycle's events
    # a Run loaded with a cycle keeps it: its timeline (the dashboard's page) is of that cycle too
    from perfkit.io.timeline import timeline
    events = timeline(perfkit.load(run, cycle=1), step=2)
    low, high = _trace_ts_range(run / CYCLES[run][0])
    assert len(events) and events["start_us"].min() >= low - 1 and events["start_us"].max() <= high + 1


def test_findings_link_to_their_ops_on_the_timeline_of_the_chosen_cycle(cache_dir):
    """A finding's link to its ops on the Timeline page (views.numbers.timeline_links) is looked up on the loaded run,
    of the cycle it was loaded with: under --cycle N the link is there and opens that cycle's trace, the one in the
    run's own folder (meta.rank_folders), where the step it names holds the finding's ops."""
    from perfkit.io.timeline import run_trace_files, timeline
    from perfkit.views.numbers import findings, op_target, timeline_links
    for number in (1, 2):
        run = perfkit.load(REPEAT2, cycle=number)
        files = run_trace_files(run)
        assert [(file.rank, file.folder) for file in files] == [(0, REPEAT2 / CYCLES[REPEAT2][number - 1])]
        assert files[0].folder == REPEAT2 / run.meta.rank_folders["0"]
        linked = [(finding, link) for finding, link in zip(findings(run).items, timeline_links(run)) if link]
        assert [finding.rule for finding, _ in linked] == ["compute_bound"]
        finding, link = linked[0]
        events = timeline(run, step=int(link.query["step"]))
        low, high = _trace_ts_range(files[0].folder)
        assert events["start_us"].min() >= low - 1 and events["start_us"].max() <= high + 1
        assert op_target(run, link.query["op"]).matches(events).sum() > 0


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_takes_cycle_and_names_the_runs_when_out_of_range(command, tmp_path, cache_dir):
    result = CliRunner().invoke(main, COMMANDS[command](REPEAT2, tmp_path) + ["--cycle", "3"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"perfkit: error: {REPEAT2}: has no profiler run 3 for rank 0 (--cycle): it holds "
                                    f"1) {CYCLES[REPEAT2][0]}, 2) {CYCLES[REPEAT2][1]}; choose 1-2 or last")
    if command != "dash":  # dash serves until stopped
        result = CliRunner().invoke(main, COMMANDS[command](REPEAT2, tmp_path) + ["--cycle", "last"])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize("choice", ["\u0661", "\uff12", " 1", "1_0", "-1", "1.0", "inf"])
def test_a_cycle_is_ascii_digits_or_last(choice, cache_dir):
    """Python's int() takes Arabic-Indic and full-width digits, spaces and underscores: --cycle does not."""
    result = CliRunner().invoke(main, ["summary", str(REPEAT2), "--cycle", choice])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{choice!r} is neither a number (1, 2, ... in profiling order) nor 'last'" in result.output


@pytest.mark.parametrize("choice", ["0", "2"])
def test_a_cycle_a_folder_of_one_run_lacks_is_one_line(choice, cache_dir):
    folder = REPEAT2 / CYCLES[REPEAT2][0]
    result = CliRunner().invoke(main, ["summary", str(folder), "--cycle", choice])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert (f"has no profiler run {choice} for rank 0 (--cycle): it holds 1) {folder.name}; choose 1 or last"
            in result.output)
    assert CliRunner().invoke(main, ["summary", str(folder), "--cycle", "1"]).exit_code == 0


def _trace_ts_range(folder: Path) -> tuple[float, float]:
    events = json.loads((folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())
    stamps = [float(e["ts"]) for e in events if e.get("ph") == "X"]
    return min(stamps), max(stamps)


@pytest.mark.parametrize("window", ["rank0_start3_stop4", "rank0_start12_stop13"])
def test_one_window_is_chosen_by_its_folder(window, tmp_path, cache_dir):
    folder = _one("vm_*_ascend_ms", DYNAMIC / window)
    out = tmp_path / "w.json"
    result = CliRunner().invoke(main, ["trace", str(folder), "--step", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    exported = json.loads(out.read_text())
    exported = exported["traceEvents"] if isinstance(exported, dict) else exported
    stamps = [float(e["ts"]) for e in exported if e.get("ph") == "X"]
    low, high = _trace_ts_range(folder)
    assert stamps and low <= min(stamps) and max(stamps) <= high  # that window's events, not the other's
    summary = CliRunner().invoke(main, ["summary", str(folder), "--format", "json"])
    assert summary.exit_code == 0, summary.output
    assert json.loads(summary.output)["ranks"] == [0]


# ---------------------------------------------------------------- raw files, read independently

def raw_executions(folder: Path, rank: int) -> list[tuple[str, int, float]]:
    """(full op name, start ns, duration ms) of every execution in FRAMEWORK/cpu_op_execute_timestamp_{rank}.txt."""
    rows = []
    for line in (folder / "FRAMEWORK" / f"cpu_op_execute_timestamp_{rank}.txt").read_text().splitlines():
        name, _, runs = line.split(";", 2)
        for run in runs.split():
            start, dur, _ = run.split(",")
            rows.append((name, int(start), float(dur)))
    return rows


def union_ms(intervals: list[tuple[int, int]]) -> float:
    covered, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered / 1e6


def graph_steps(executions) -> dict[int, list[tuple[str, int, int]]]:
    """Graph mode: the k-th execution of every op is step k (each kernel runs once a step)."""
    seen: dict[str, int] = {}
    steps: dict[int, list] = {}
    for name, start, dur in sorted(executions, key=lambda row: row[1]):
        seen[name] = seen.get(name, 0) + 1
        steps.setdefault(seen[name], []).append((name, start, start + round(dur * 1e6)))
    return steps


# ---------------------------------------------------------------- msrun: CPU ranks and their communication

def test_msrun_cpu_ranks_are_their_file_suffixes_and_trace_labels_rank_1(tmp_path, cache_dir):
    run = perfkit.load(MSRUN2)
    assert run.ranks == [0, 1]
    assert {rank: folder.split("/")[0] for rank, folder in run.meta.rank_folders.items()} == {"0": "rank_0", "1": "rank_1"}
    out = tmp_path / "r1.json"
    result = CliRunner().invoke(main, ["trace", str(MSRUN2 / "rank_1"), "--step", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    exported = json.loads(out.read_text())
    exported = exported["traceEvents"] if isinstance(exported, dict) else exported
    processes = {e["args"]["name"] for e in exported if e.get("ph") == "M" and e.get("name") == "process_name"}
    assert processes and all(name.startswith("rank 1: ") for name in processes), processes


def test_msrun_communication_is_measured_per_step_and_read_by_every_view(cache_dir):
    run = perfkit.load(MSRUN2)
    expected = {}
    for rank in (0, 1):
        steps = graph_steps(raw_executions(_one("vm_*_ascend_ms", MSRUN2 / f"rank_{rank}"), rank))
        # steady steps: 2..n (step 1's start is unknown); exposed = AllReduce time with no other op running
        exposed = [union_ms([(s, e) for _, s, e in ops]) - union_ms([(s, e) for n, s, e in ops if "AllReduce" not in n])
                   for number, ops in steps.items() if number > 1]
        expected[rank] = sum(exposed) / len(exposed)
    parts = perfkit.analysis.ledger.rank_parts(run).set_index("rank")
    for rank, ms in expected.items():
        assert parts.at[rank, "communication"] == pytest.approx(ms, abs=1e-3)
        assert parts.at[rank, "compute"] > 0  # the step's own compute ops, not the run's AllReduce spread over it
    summary = perfkit.summarize(run)
    assert summary["communication"]["collective_ms"] == pytest.approx(sum(expected.values()) / 2, abs=1e-3)
    assert summary["bound"]["labels"]["communication"] == "collective communication (exposed)"
    ranks = json.loads(CliRunner().invoke(main, ["ranks", str(MSRUN2), "--format", "json"]).output)
    assert ranks and "unknown" not in json.dumps(ranks.get("slow_ranks", []))
    per_rank = {entry["rank"]: entry for entry in ranks["ranks"]} if "ranks" in ranks else None
    if per_rank is not None:
        for rank, ms in expected.items():
            assert per_rank[rank]["communication_ms"] == pytest.approx(ms, abs=1e-3)


# ---------------------------------------------------------------- one cycle: the bound on the steady steps

@pytest.mark.parametrize("folder", [
    _one("vm_*_ascend_ms", DYNAMIC / "rank0_start12_stop13"), _one("vm_*_ascend_ms", DYNAMIC / "rank0_start3_stop4"),
    REPEAT2 / "vm_5942_20261124202935871_ascend_ms", REPEAT2 / "vm_5942_20261124202937099_ascend_ms"],
    ids=["window12", "window3", "cycle1", "cycle2"])
def test_one_cycle_compute_is_the_steady_steps_own_op_time(folder, cache_dir):
    run = perfkit.load(folder)
    steps = graph_steps(raw_executions(folder, 0))
    ends = {number: max(e for _, _, e in ops) for number, ops in steps.items()}
    steady = [number for number in steps if number > 1]  # step 1 starts at an unknown time
    totals = [(ends[n] - ends[n - 1]) / 1e6 for n in steady]
    busy = [union_ms([(s, e) for _, s, e in steps[n]]) for n in steady]
    parts = perfkit.analysis.ledger.rank_parts(run).iloc[0]
    assert parts["total"] == pytest.approx(sum(totals) / len(totals), abs=1e-3)
    assert parts["compute"] == pytest.approx(sum(busy) / len(busy), abs=1e-3)  # not the run's op time per step
    ledger = perfkit.ledger(run)
    for number, total in zip(steady, totals):  # the identity: every ms of the step attributed once
        assert ledger.loc[ledger["step"] == number, "ms"].sum() == pytest.approx(total, abs=1e-6)


# ---------------------------------------------------------------- PyNative custom loop

def test_pynative_custom_loop_gets_graph_mode_with_its_evidence(cache_dir):
    run = perfkit.load(PYNATIVE_LOOP)
    assert run.meta.mode == "pynative"
    advice = perfkit.advise(run)
    found = [f for f in advice.findings if f.id == "graph_mode"]
    assert len(found) == 1 and found[0].severity == "high", advice.findings
    finding = found[0]
    assert "GRAPH_MODE" in finding.action and "@ms.jit" in finding.action
    assert finding.to_dict()["change"] == {"knob": "mode", "value": "graph"}  # what `perfkit tune` can apply
    # independently: per op, the time above its fastest call, over the profiled steps, of the op time
    executions = raw_executions(_one("vm_*_ascend_ms", PYNATIVE_LOOP), 0)
    by_name: dict[str, list[float]] = {}
    for name, _, dur in executions:
        by_name.setdefault(name, []).append(dur)
    timed = {n: d for n, d in by_name.items() if len(d) >= 2}
    above = sum(sum(d) - len(d) * min(d) for d in timed.values())
    assert finding.evidence["op_time_above_fastest_call_pct"] == pytest.approx(
        100 * above / sum(sum(d) for d in timed.values()), abs=0.01)
    op_ms = sum(sum(d) for d in timed.values())
    losing = [n for n in timed if sum(timed[n]) - len(timed[n]) * min(timed[n]) >= 0.01 * op_ms]
    worst = max(losing, key=lambda n: max(timed[n]) / min(timed[n]))  # the widest spread among them
    assert finding.evidence["slowest_call_ms"] == pytest.approx(max(timed[worst]), abs=1e-3)
    assert worst.rsplit("/", 1)[-1] in finding.title
    bound = perfkit.analysis.ledger.bound(run)
    assert "dispatch" in bound.labels["compute"]  # op time is not called device compute without saying so
    assert any("dispatch waits" in line for line in bound.evidence)


@pytest.mark.parametrize("folder", [REPEAT2 / "vm_5942_20261124202937099_ascend_ms", MSRUN2],
                         ids=["graph_cycle", "graph_msrun"])
def test_graph_mode_is_silent_on_graph_runs(folder, cache_dir):
    run = perfkit.load(folder)
    assert run.meta.mode == "graph"
    advice = perfkit.advise(run)
    assert "graph_mode" not in [f.id for f in advice.findings] and "graph_mode" in advice.passed


# ---------------------------------------------------------------- GPU PyNative: the loop's marker op

def test_gpu_pynative_steps_are_marked_by_the_loops_op_not_a_set_up_call(tmp_path):
    """Shaped like the real MindSpore 2.2.14 GPU PyNative run of issue 23 (19 ops: the first launched once before
    the loop, the others 14, 15, 30 or 60 times; 15 iterations of ~154 ms; its file is not public), its counts
    from the issue written in the structure of MindSpore's own writer (test_diagnosis_rules.gpu_pynative says
    which, and what was searched)."""
    from test_diagnosis_rules import GPU_EPOCH_NS, gpu_pynative
    iterations, step_ns = 15, 154_000_000
    per_step = {f"Default/Op{k}-op{k}": 1 for k in range(1, 9)}  # 8 ops once a step (the first is the marker)
    per_step |= {f"Default/Twice{k}-op{10 + k}": 2 for k in range(5)} | {f"Default/Four{k}-op{20 + k}": 4
                                                                           for k in range(4)}
    calls: dict[str, list[tuple[int, float]]] = {"Default/Setup-op0": [(GPU_EPOCH_NS - 30_000_000, 0.2)]}
    for step in range(iterations):
        offset = 1_000_000  # the marker first, then the others, 0.4 ms apart
        for name, times in per_step.items():
            for _ in range(times):
                calls.setdefault(name, []).append((GPU_EPOCH_NS + step * step_ns + offset, 0.3))
                offset += 400_000
        if step:  # one op skipped in the first iteration: 14 runs
            calls.setdefault("Default/Skip-op30", []).append((GPU_EPOCH_NS + step * step_ns + 150_000_000, 0.1))
    assert len(calls) == 19 and sorted({len(c) for c in calls.values()}) == [1, 14, 15, 30, 60]
    run = perfkit.load(gpu_pynative(tmp_path / "gpu", calls=calls))
    assert len(run.steps) == iterations
    marker = sorted(start for start, _ in calls["Default/Op1-op1"])
    expected = [(b - a) / 1e6 for a, b in zip(marker, marker[1:])]
    assert run.steps["total_ms"].iloc[:-1].tolist() == pytest.approx(expected)
    assert expected == pytest.approx([step_ns / 1e6] * (iterations - 1))
    assert any("Default/Op1-op1 marks the steps" in w and "1 op run(s) before its first run" in w
               for w in run.warnings), run.warnings


@pytest.mark.parametrize("folder", [REPEAT2 / "vm_5942_20261124202937099_ascend_ms", MSRUN2],
                         ids=["cycle2", "msrun2"])
def test_op_type_shares_are_of_the_steady_steps_like_the_step_means(folder, cache_dir):
    """The first step (start unknown: left out of the step means) is left out of the op-type shares too."""
    run = perfkit.load(folder)
    expected: dict[str, float] = {}
    for unit in sorted(folder.glob("**/FRAMEWORK")):
        rank = int(next(unit.glob("cpu_op_type_info_*.csv")).stem.rsplit("_", 1)[-1])
        for number, ops in graph_steps(raw_executions(unit.parent, rank)).items():
            if number == 1:
                continue
            for name, start, end in ops:
                op_type = re.sub(r"-op\d+$", "", name.rsplit("/", 1)[-1])
                expected[op_type] = expected.get(op_type, 0.0) + (end - start) / 1e6
    shares = perfkit.summarize(run)["op_types"]
    total = sum(expected.values())
    assert {item["type"] for item in shares} == set(expected)
    for item in shares:
        assert item["total_ms"] == pytest.approx(expected[item["type"]], abs=1e-3)
        assert item["share"] == pytest.approx(expected[item["type"]] / total, abs=1e-6)
    # and they differ from the file's totals over every profiled step (which count step 1)
    assert sum(item["total_ms"] for item in shares) < run.op_types["total_ms"].sum()


def test_each_rank_reads_its_own_chosen_cycle(tmp_path, cache_dir):
    """Two ranks, each with two cycles: the real repeat=2 run as rank 0 and, its cpu_op_*_0 files renamed to _1
    (the CPU rank is the file suffix), as rank 1 (msrun with a repeating schedule writes this)."""
    import shutil
    for rank in (0, 1):
        shutil.copytree(REPEAT2, tmp_path / "run" / f"rank_{rank}")
    for file in (tmp_path / "run" / "rank_1").glob("*/FRAMEWORK/*_0.*"):
        file.rename(file.with_name(file.name.replace("_0.", "_1.")))
    run = perfkit.load(tmp_path / "run", cycle=2)
    assert run.ranks == [0, 1] and run.meta.cycle == 2
    assert run.meta.rank_folders == {str(rank): f"rank_{rank}/{CYCLES[REPEAT2][1]}" for rank in (0, 1)}
    expected = steady_step_mean_ms(REPEAT2 / CYCLES[REPEAT2][1])
    means = perfkit.analysis.ledger.rank_parts(run).set_index("rank")["total"]
    assert means.to_dict() == pytest.approx({0: expected, 1: expected}, abs=1e-3)
    out = tmp_path / "t.json"
    result = CliRunner().invoke(main, ["trace", str(tmp_path / "run"), "--cycle", "1", "--step", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    exported = json.loads(out.read_text())
    exported = exported["traceEvents"] if isinstance(exported, dict) else exported
    low, high = _trace_ts_range(REPEAT2 / CYCLES[REPEAT2][0])
    processes = {e["args"]["name"].split(":")[0] for e in exported if e.get("name") == "process_name"}
    assert processes == {"rank 0", "rank 1"}
    assert all(low <= float(e["ts"]) <= high for e in exported if e.get("ph") == "X")


def test_last_over_ranks_with_different_numbers_of_cycles_reads_each_ranks_last_everywhere(tmp_path, cache_dir):
    """Rank 0 holds two cycles (the real repeat=2 run), rank 1 one (that run's first cycle, its cpu_op_*_0 files
    renamed to _1): --cycle last reads cycle 2 of rank 0 and cycle 1 of rank 1. The Run says "last", not one rank's
    number: its timeline (the dashboard's page) chose again by that number, read rank 1's "cycle 2" and failed."""
    import shutil

    from perfkit.io.timeline import timeline
    shutil.copytree(REPEAT2, tmp_path / "run" / "rank_0")
    shutil.copytree(REPEAT2 / CYCLES[REPEAT2][0], tmp_path / "run" / "rank_1" / CYCLES[REPEAT2][0])
    for file in (tmp_path / "run" / "rank_1").glob("*/FRAMEWORK/*_0.*"):
        file.rename(file.with_name(file.name.replace("_0.", "_1.")))
    run = perfkit.load(tmp_path / "run", cycle="last")
    assert run.meta.cycle == "last"
    assert run.meta.rank_folders == {"0": f"rank_0/{CYCLES[REPEAT2][1]}", "1": f"rank_1/{CYCLES[REPEAT2][0]}"}
    means = perfkit.analysis.ledger.rank_parts(run).set_index("rank")["total"]
    assert means.to_dict() == pytest.approx({rank: steady_step_mean_ms(REPEAT2 / CYCLES[REPEAT2][cycle])
                                             for rank, cycle in ((0, 1), (1, 0))}, abs=1e-3)
    events = timeline(run, step=2)
    for rank, cycle in ((0, 1), (1, 0)):
        low, high = _trace_ts_range(REPEAT2 / CYCLES[REPEAT2][cycle])
        starts = events.loc[events["rank"] == rank, "start_us"]
        assert len(starts) and starts.min() >= low - 1 and starts.max() <= high + 1, rank
    text = CliRunner().invoke(main, ["summary", str(tmp_path / "run"), "--cycle", "last"]).output
    assert text.splitlines()[0] == f"run      {tmp_path / 'run'}   profiler cycle last (--cycle)"
    assert perfkit.load(tmp_path / "run", cycle=1).meta.cycle == 1  # every rank's first: one number


def test_compare_puts_two_cycles_of_one_folder_side_by_side(cache_dir):
    """compare run run --cycle 1 --cycle-b 2 is the two cycles' folders compared; --cycle alone is the same run."""
    first, second = (str(REPEAT2 / name) for name in CYCLES[REPEAT2])
    by_cycles = CliRunner().invoke(main, ["compare", str(REPEAT2), str(REPEAT2), "--cycle", "1", "--cycle-b", "2",
                                          "--format", "json"])
    assert by_cycles.exit_code == 0, by_cycles.output
    by_folders = CliRunner().invoke(main, ["compare", first, second, "--format", "json"])
    cycles, folders = json.loads(by_cycles.output), json.loads(by_folders.output)
    assert (cycles["cycle_a"], cycles["cycle_b"]) == (1, 2)
    for key in ("a", "b", "verdict", "step_deltas_ms", "op_type_deltas"):
        assert cycles[key] == folders[key], key
    assert cycles["a"]["total_ms"] == pytest.approx(steady_step_mean_ms(REPEAT2 / CYCLES[REPEAT2][0]), abs=1e-3)
    assert cycles["b"]["total_ms"] == pytest.approx(steady_step_mean_ms(REPEAT2 / CYCLES[REPEAT2][1]), abs=1e-3)
    text = CliRunner().invoke(main, ["compare", str(REPEAT2), str(REPEAT2), "--cycle", "1", "--cycle-b", "last"]).output
    assert text.splitlines()[:2] == [f"A  {REPEAT2}, profiler cycle 1", f"B  {REPEAT2}, profiler cycle 2"]
    same = json.loads(CliRunner().invoke(main, ["compare", str(REPEAT2), str(REPEAT2), "--cycle", "2",
                                                "--format", "json"]).output)
    assert same["verdict"]["kind"] == "same run"


@pytest.mark.parametrize("cycle", [None, "1", "last"])
def test_a_cycle_never_pairs_the_ranks_of_two_launches(cycle, tmp_path, cache_dir):
    """Two real runs side by side: a one-rank PyNative loop (process 6638) and the 2-rank msrun run (processes 7675
    and 7711). Rank 0 was profiled by two processes: cycle 1 of each rank would be the loop's rank 0 beside msrun's
    rank 1. Every choice is refused, naming the two runs' own folders; each run reads alone."""
    import shutil
    runs = tmp_path / "runs"
    shutil.copytree(PYNATIVE_LOOP, runs / "loop")
    shutil.copytree(MSRUN2, runs / "msrun2")
    before = sorted((p.relative_to(runs), p.stat().st_size) for p in runs.rglob("*"))
    arguments = ["summary", str(runs)] + ([] if cycle is None else ["--cycle", cycle])
    result = CliRunner().invoke(main, arguments)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    message = result.output.strip()
    assert len(message.splitlines()) == 1, message
    loop_folder = _one("vm_*_ascend_ms", PYNATIVE_LOOP).name
    msrun_folder = _one("vm_*_ascend_ms", MSRUN2 / "rank_0").name
    assert (f"holds the runs of separate launches: rank 0 has runs of 2 (1) loop/{loop_folder}, "
            f"2) msrun2/rank_0/{msrun_folder}); a --cycle number would pair one launch's ranks with another's, so "
            "none is read: pass the folder of one run (loop, msrun2)") in message
    assert sorted((p.relative_to(runs), p.stat().st_size) for p in runs.rglob("*")) == before
    assert perfkit.load(runs / "msrun2").ranks == [0, 1]
    assert perfkit.load(runs / "loop").ranks == [0]


def test_a_long_list_of_runs_is_named_by_its_ends(tmp_path, cache_dir):
    """A folder of 40 windows of one process is refused in one short line: the first and last five, and a count."""
    import shutil
    source = _one("vm_*_ascend_ms", PYNATIVE_LOOP)
    for index in range(40):
        shutil.copytree(source, tmp_path / "run" / source.name.replace("202955811", f"{202955811 + index * 1000}"))
    result = CliRunner().invoke(main, ["summary", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    message = result.output.strip()
    assert "holds several runs for rank 0, in profiling order: 1) " in message
    assert ", ... (30 more), 36) " in message and "40) " in message and ", 6) " not in message
    assert "choose one with --cycle N (1-40, or last)" in message and len(message) < 1000


def test_msprof_analyze_output_beside_the_ranks_it_summarises_is_not_a_second_run(tmp_path, cache_dir):
    """What `msprof-analyze cluster -d DIR` leaves: DIR/cluster_analysis_output/ beside the rank folders it was
    made from (tests/raw/msprof_analyze_level1: real msprof-analyze 26.2 output of the real 2-rank fixture). The
    ranks are read from their own folders, the summary is left out in one warning, and every number is the rank
    folders' alone; passed itself, the summary still reads."""
    import shutil
    fixture = Path(__file__).resolve().parent / "fixtures" / "new_format" / "msinsight_level1"
    made = Path(__file__).resolve().parent / "raw" / "msprof_analyze_level1" / "cluster_analysis_output"
    shutil.copytree(fixture, tmp_path / "job")
    shutil.copytree(made, tmp_path / "job" / "cluster_analysis_output")
    result = CliRunner().invoke(main, ["summary", str(tmp_path / "job"), "--format", "json"])
    assert result.exit_code == 0, result.output
    both = json.loads(result.output)
    alone = json.loads(CliRunner().invoke(main, ["summary", str(fixture), "--format", "json"]).output)
    assert both["warnings"][0] == ("cluster_analysis_output: not read: msprof-analyze's summary of the rank folders "
                                   "beside it; the ranks' own folders are")
    assert both["warnings"][1:] == alone["warnings"]
    for key in set(both) - {"run", "path", "warnings"}:
        assert both[key] == alone[key], key
    # the summary's own numbers, from its csv: the same compute per rank as the rank folders give
    with open(made / "cluster_step_trace_time.csv", newline="") as handle:
        computing = {int(row["Index"]): float(row["Computing"]) / 1000 for row in csv.DictReader(handle)
                     if row["Type"] == "rank"}
    summary_only = perfkit.load(tmp_path / "job" / "cluster_analysis_output")
    assert summary_only.ranks == [0, 1]
    assert summary_only.steps.set_index("rank")["computing_ms"].to_dict() == pytest.approx(computing, abs=1e-6)
    ranks = perfkit.load(tmp_path / "job")
    assert ranks.meta.layout != summary_only.meta.layout


def _windows(tmp_path: Path, processes: dict[str, int]) -> list[Path]:
    """Copies of the real PyNative loop's profiler folder as windows of processes {pid: count}, named as
    MindSpore names them ({host}_{pid}_{start}_ascend_ms), starts a second apart, in profiling order."""
    import shutil
    source = _one("vm_*_ascend_ms", PYNATIVE_LOOP)
    made, second = [], 0
    for pid, count in processes.items():
        for _ in range(count):
            folder = tmp_path / "run" / f"vm_{pid}_20261124{203000000 + second * 1000}_ascend_ms"
            shutil.copytree(source, folder)
            made.append(folder)
            second += 1
    return made


def test_the_chosen_window_alone_is_read(tmp_path, cache_dir):
    """40 windows of one process, all but the 7th with a broken op table: --cycle 7 reads the 7th alone (the
    others' folders are not even opened: 3,000 windows were 3,000 reads before one was chosen) and gives its
    numbers, as passing its folder does; without --cycle the refusal names all 40; --cycle last reads the 40th
    (broken: its file is named)."""
    windows = _windows(tmp_path, {"4242": 40})
    for number, folder in enumerate(windows, 1):
        if number != 7:
            _one("FRAMEWORK/cpu_op_type_info_0.csv", folder).write_text("not,a\ncsv")
    from perfkit.io.cycles import unread_cycles
    from perfkit.io.discovery import discover
    from perfkit.io.formats import readers
    _, jobs, _ = discover(tmp_path / "run", readers())
    read, unread = unread_cycles(jobs, 7)
    assert {folder for _, folder in read} == {folder for _, folder in jobs if windows[6] in (folder, *folder.parents)}
    assert sorted(unread) == [windows[6]] and sorted(unread[windows[6]]) == sorted(set(windows) - {windows[6]})
    run = perfkit.load(tmp_path / "run", cycle=7)
    alone = perfkit.load(windows[6])
    assert run.meta.cycle == 7 and not any("cpu_op_type_info" in warning for warning in run.warnings)
    assert run.steps["total_ms"].tolist() == alone.steps["total_ms"].tolist()
    assert run.op_types["total_ms"].tolist() == alone.op_types["total_ms"].tolist()
    with pytest.raises(perfkit.LayoutError, match=r"1-40, or last"):
        perfkit.load(tmp_path / "run")
    last = perfkit.load(tmp_path / "run", cycle="last")
    assert any(windows[-1].name in warning for warning in last.warnings)


@pytest.mark.parametrize("cycle, index", [(2, 1), (3, 2), (4, 3)])
def test_one_rank_of_two_processes_numbers_its_runs_across_them(cycle, index, tmp_path, cache_dir):
    """One rank profiled by two processes (two launches into one folder), two windows each: cycle N is the Nth
    in profiling order over both, whether or not reading one window per process found it (the 4th is read
    again in full)."""
    windows = _windows(tmp_path, {"4242": 2, "4343": 2})
    for number, folder in enumerate(windows):
        steps = _one("FRAMEWORK/cpu_op_execute_timestamp_0.txt", folder)
        if number != index:  # a distinct content per window: its number of lines
            steps.write_text("\n".join(steps.read_text().splitlines()[:-(number + 1) * 3]) + "\n")
    run = perfkit.load(tmp_path / "run", cycle=cycle)
    assert run.meta.cycle == cycle
    assert run.meta.rank_folders == {"0": windows[index].name}

"""Issue 37, your own script under `perfkit profile`: a step under @ms.jit in a PyNative context is a compiled step,
a PyNative loop without step markers is told what its op timestamps hold and how to mark its steps, and the
command's own output (which options it took, the batch size, MindSpore's progress bar, the built-in run's steps
and its oneDNN ISA on an AVX-512 host).

The real runs are tests/runs/cpu_2_10_jit_loop and cpu_2_10_unmarked_loop (made by tests/scripts/run_*.py); the
numbers checked are computed here from their raw files with the csv and json modules.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from profile_helpers import PERFKIT

import perfkit
from perfkit.apps.cli import main
from perfkit.profiler import api as profiler_api
from perfkit.profiler.launch import ISA_CAP, ISA_ENV, ProfileRequest, Supervisor, isa_cap

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "tests" / "scripts"
RUNS = REPO / "tests" / "runs"
JIT_LOOP, UNMARKED_LOOP = RUNS / "cpu_2_10_jit_loop", RUNS / "cpu_2_10_unmarked_loop"
JIT_BATCH = 16  # tests/scripts/run_jit_loop.py: data.batch(16)


def framework_file(run: Path, pattern: str) -> Path:
    (found,) = run.glob(f"*_ascend_ms/FRAMEWORK/{pattern}")
    return found


def op_executions(run: Path) -> dict[str, list[float]]:
    """Op name -> the durations (ms) of its executions, from MindSpore's op timestamps file
    (`name;HostCpuOps;start_ns,dur_ms,tid start_ns,dur_ms,tid …`)."""
    executions = {}
    for line in framework_file(run, "cpu_op_execute_timestamp_*.txt").read_text().splitlines():
        name, _, records = line.split(";", 2)
        executions[name] = [float(record.split(",")[1]) for record in records.split()]
    return executions


def op_names(run: Path) -> list[str]:
    with open(framework_file(run, "cpu_op_detail_info_*.csv"), newline="") as handle:
        return [row["full_op_name"] for row in csv.DictReader(handle)]


# ---- item 1: a step under @ms.jit in a PyNative context ---------------------------------------------------------

def test_the_jit_step_run_is_graph_mode_and_not_told_to_compile_its_step():
    recorded = json.loads((JIT_LOOP / "perfkit_run.json").read_text())
    assert recorded["used"] == {"mode": "graph", "context_mode": "pynative", "jit_functions": ["train_step"]}
    # what the files show: the backward kernels carry graph mode's `Gradients/` scope, every op ran once a step
    names = op_names(JIT_LOOP)
    assert any(name.startswith("Gradients/Default/Grad_Conv2D/") for name in names)
    runs = {len(durations) for durations in op_executions(JIT_LOOP).values()}
    assert len(runs) == 1
    run = perfkit.load(JIT_LOOP)
    assert run.meta.mode == "graph"
    assert "graph_mode" not in {finding.id for finding in perfkit.advise(run).findings}


def test_the_script_s_jit_functions_make_the_mode_graph_and_mindspore_s_own_do_not(monkeypatch):
    """PyNative runs MindSpore's optimizer update under its own @jit (tests/runs/cpu_2_10_unmarked_loop's process
    compiled `mindspore.nn.optim.momentum.construct`): that is not the step compiled."""
    import types

    root = "/site-packages/mindspore"
    fake_ms = types.SimpleNamespace(GRAPH_MODE=0, PYNATIVE_MODE=1, __file__=f"{root}/__init__.py",
                                    get_context=lambda key: 1)
    optimizer = f"mindspore.nn.optim.momentum.construct.{root}/nn/optim/momentum.py.190.1795858350055659008train.1.0"
    step = "__main__.train_step./home/me/train.py.49.1795858343400202240.0"
    monkeypatch.setattr(profiler_api, "_jit_compiled", lambda: {optimizer})
    assert profiler_api.used_mode(fake_ms) == {"mode": "pynative", "context_mode": "pynative", "jit_functions": []}
    monkeypatch.setattr(profiler_api, "_jit_compiled", lambda: {optimizer, step})
    assert profiler_api.used_mode(fake_ms) == {"mode": "graph", "context_mode": "pynative",
                                               "jit_functions": ["train_step"]}
    fake_ms.get_context = lambda key: 0
    monkeypatch.setattr(profiler_api, "_jit_compiled", set)
    assert profiler_api.used_mode(fake_ms)["mode"] == "graph"


# ---- item 2: a PyNative loop without step markers ---------------------------------------------------------------

def test_an_unmarked_pynative_loop_is_told_what_its_op_timestamps_hold_and_how_to_mark_steps():
    run = perfkit.load(UNMARKED_LOOP)
    assert run.meta.mode == "pynative" and not len(run.steps)
    assert not any("record step times with `perfkit profile`" in warning for warning in run.warnings)
    assert any("prof.step()" in warning for warning in run.warnings)
    (finding,) = [finding for finding in perfkit.advise(run).findings if finding.id == "graph_mode"]
    assert finding.severity == "medium" and finding.est_gain_pct is None
    assert "with perfkit.profiling() as prof:" in finding.action and "prof.step()" in finding.action
    # the numbers, from the op timestamps file: ops called at least twice (a fastest call to compare with)
    timed = {name: durations for name, durations in op_executions(UNMARKED_LOOP).items() if len(durations) >= 2}
    op_ms = sum(sum(durations) for durations in timed.values())
    above_ms = sum(sum(durations) - len(durations) * min(durations) for durations in timed.values())
    assert finding.evidence["op_ms"] == pytest.approx(op_ms, abs=0.01)
    assert finding.evidence["op_calls"] == sum(len(durations) for durations in timed.values())
    assert finding.evidence["op_time_above_fastest_call_pct"] == pytest.approx(100 * above_ms / op_ms, abs=0.01)
    with open(framework_file(UNMARKED_LOOP, "cpu_op_type_info_*.csv"), newline="") as handle:
        by_type = {row["op_type"]: float(row["total_compute_time"]) for row in csv.DictReader(handle)}
    top_type = max(by_type, key=by_type.get)
    assert finding.target == top_type
    assert finding.evidence[f"{top_type}_share_pct"] == pytest.approx(100 * by_type[top_type] / sum(by_type.values()),
                                                                      abs=0.05)


def test_the_unmarked_run_says_it_was_pynative_and_records_its_batch_size():
    recorded = json.loads((UNMARKED_LOOP / "perfkit_run.json").read_text())
    assert recorded["used"] == {"mode": "pynative", "context_mode": "pynative", "jit_functions": []}
    assert recorded["step_timer"] is None and "prof.step()" in recorded["notes"][0]


# ---- item 13: the command's own output ---------------------------------------------------------------------------

@pytest.mark.mindspore
def test_a_jit_loop_under_the_command_records_graph_mode_its_batch_and_keeps_mindspore_s_progress_out(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([*PERFKIT, "profile", "--output", "runs/jit", "--", "python",
                           str(SCRIPTS / "run_jit_loop.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "runs" / "jit"
    recorded = json.loads((folder / "perfkit_run.json").read_text())
    assert recorded["used"]["mode"] == "graph" and recorded["used"]["jit_functions"] == ["train_step"]
    assert recorded["config"]["batch_size"] == JIT_BATCH
    assert perfkit.load(folder).meta.mode == "graph"
    assert "Parsing:" not in done.stdout + done.stderr and "Parsing:" in (folder / "analysis.log").read_text()
    assert done.stderr.splitlines()[0] == (f"perfkit: profiling `python {SCRIPTS / 'run_jit_loop.py'}` (everything "
                                           "after `--` is the script's); perfkit's own options: --output runs/jit")


def test_the_command_says_which_options_it_took_and_that_the_rest_are_the_script_s(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([*PERFKIT, "profile", "--env", "A=1", "--output", "out", "--", sys.executable, "-c", "pass",
                           "--steps", "3"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.stderr.splitlines()[0] == (
        f"perfkit: profiling `{sys.executable} -c pass --steps 3` (everything after `--` is the script's); "
        "perfkit's own options: --env A=1 --output out")


def test_the_top_level_help_shows_how_to_profile_your_own_script():
    shown = CliRunner().invoke(main, ["--help"]).output
    assert "perfkit profile -- python train.py" in shown


def test_the_built_in_run_prints_a_line_per_step_where_the_bar_cannot_draw(tmp_path, monkeypatch):
    said = []
    supervisor = Supervisor(ProfileRequest(steps=2, warmup=1), tmp_path, tmp_path, said.append)
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    with click.progressbar(length=3, label="compiling (warmup)", file=sys.stderr) as supervisor.training_bar:
        supervisor._absorb([{"rank": 0, "event": "training", "total": 3},
                            {"rank": 0, "event": "warmup", "done": 1, "total": 3},
                            {"rank": 0, "event": "step", "done": 2, "total": 3},
                            {"rank": 0, "event": "step", "done": 3, "total": 3}])
    assert [line.rsplit(" ", 2)[0] for line in said] == [
        "perfkit: step 1/3 (warmup, compiles the graph)", "perfkit: step 2/3 (profiled)", "perfkit: step 3/3 (profiled)"]
    assert all(line.endswith(" s") for line in said)


AVX512_HOST = {"cpu_model": "Xeon", "vendor": "GenuineIntel", "cpu_mhz": 2600.0, "cores": 2,
               "flags": ["fma", "avx2", "avx512f"]}


def test_the_built_in_run_caps_onednn_at_avx2_on_an_avx512_host_unless_told_otherwise(monkeypatch):
    monkeypatch.delenv(ISA_ENV, raising=False)
    capped, notes = isa_cap(ProfileRequest(), AVX512_HOST)
    assert capped == {ISA_ENV: ISA_CAP} and len(notes) == 1 and "AVX-512" in notes[0]
    assert isa_cap(ProfileRequest(), {**AVX512_HOST, "flags": ["fma", "avx2"]}) == ({}, [])
    assert isa_cap(ProfileRequest(env={ISA_ENV: "AVX512_CORE"}), AVX512_HOST) == ({}, [])
    assert isa_cap(ProfileRequest(device="Ascend"), AVX512_HOST) == ({}, [])
    assert isa_cap(ProfileRequest(), None) == ({}, [])
    monkeypatch.setenv(ISA_ENV, "AVX512_CORE")
    assert isa_cap(ProfileRequest(), AVX512_HOST) == ({}, [])


def test_a_ctrl_c_d_custom_loop_loads_as_interrupted_with_the_steps_it_recorded():
    """tests/runs/cpu_2_10_interrupted: SIGINT to `perfkit profile` after 3 recorded steps, passed on to the script."""
    recorded = json.loads((RUNS / "cpu_2_10_interrupted" / "perfkit_run.json").read_text())
    assert recorded["status"] == "interrupted" and recorded["error"] is None
    run = perfkit.load(RUNS / "cpu_2_10_interrupted")
    assert run.meta.status == "interrupted"
    assert sorted(run.steps["step"]) == [step["step"] for step in recorded["steps"]]
    wall_ms = [(step["end_ns"] - step["begin_ns"]) / 1e6 for step in recorded["steps"]]
    assert list(run.steps.sort_values("step")["total_ms"]) == pytest.approx(wall_ms, rel=1e-6)
    assert any("interrupted" in warning for warning in run.warnings)


def test_mindspore_s_analysis_output_goes_to_the_run_folder_s_log_and_the_output_comes_back(tmp_path, capfd):
    with profiler_api._output_to(tmp_path / "analysis.log"):
        os.write(1, b"[42] Parsing: [####] 1/2\n")
        os.write(2, b"[42] Parsing: [########] 2/2\n")
    os.write(1, b"the script's own line\n")
    assert (tmp_path / "analysis.log").read_text() == "[42] Parsing: [####] 1/2\n[42] Parsing: [########] 2/2\n"
    shown = capfd.readouterr()
    assert shown.out == "the script's own line\n" and shown.err == ""
    with profiler_api._output_to(tmp_path / "no such folder" / "analysis.log"):  # cannot be written: left as is
        os.write(1, b"still shown\n")
    assert capfd.readouterr().out == "still shown\n"

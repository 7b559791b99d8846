"""`perfkit profile -- python train.py` and `perfkit.profiling`: the user's own scripts (tests/scripts/), run
unchanged on the CPU with real MindSpore (a 16-32-4 network, 4 batches of 2), each run in its own temporary
folder as the working directory.

Step times are checked against what the script's process recorded (perfkit_run.json) and against MindSpore's
own op timestamps file, read here line by line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from profile_helpers import PERFKIT, WAIT_SECONDS, manifest, wait_for_recorded_step

import perfkit
from perfkit.apps.cli import main

SCRIPTS = Path(__file__).resolve().parent / "scripts"
REPO = SCRIPTS.parents[1]
MODEL_TRAIN = str(SCRIPTS / "model_train.py")
CUSTOM_LOOP = str(SCRIPTS / "custom_loop.py")
BATCHES = 4                    # tests/scripts/common.py: TINY_BATCHES
STEP_SUM_TOLERANCE = 0.05      # the bound: loaded steps add up to the recorded step times within 5 %


def run(cwd: Path, *command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(cwd / "cache")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def profile(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run(cwd, *PERFKIT, "profile", *args)


def recorded_ms(folder: Path) -> list[float]:
    return [(step["end_ns"] - step["begin_ns"]) / 1e6 for step in manifest(folder)["steps"]]


def op_starts(folder: Path) -> list[int]:
    """Start (epoch ns) of every op execution, from MindSpore's own timestamps file."""
    (timestamps,) = folder.glob("*_ascend_ms/FRAMEWORK/cpu_op_execute_timestamp_*.txt")
    return [int(record.split(",")[0]) for line in timestamps.read_text().splitlines()
            for record in line.split(";", 2)[2].split()]


def assert_steps_add_up(folder: Path, rank: int = 0) -> perfkit.Run:
    """The folder loads; its steps are the recorded ones, their parts add up to them, op types are there."""
    loaded = perfkit.load(folder)
    steps = loaded.steps[loaded.steps["rank"] == rank].sort_values("step")
    wall = recorded_ms(folder)
    assert len(steps) == len(wall) > 0
    assert steps["total_ms"].sum() == pytest.approx(sum(wall), rel=STEP_SUM_TOLERANCE)
    parts = steps["interval_ms"] + steps["fwd_bwd_ms"] + steps["tail_ms"]
    assert list(parts) == pytest.approx(wall, rel=STEP_SUM_TOLERANCE)
    assert {"MatMul", "ReLU", "BiasAdd"} <= set(loaded.op_types["type"])
    return loaded


@pytest.fixture(scope="module")
def model_train(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("model_train")
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    done = profile(cwd, "--env", "PERFKIT_TEST_MARK=1", "--output", "runs/a", "--", "python", MODEL_TRAIN)
    return cwd, done, head.strip()


@pytest.mark.mindspore
def test_a_model_train_script_is_profiled_unchanged(model_train):
    cwd, done, head = model_train
    assert done.returncode == 0, done.stderr
    assert "trained" in done.stdout  # the script's own output passes through
    folder = cwd / "runs" / "a"
    recorded = manifest(folder)
    assert recorded["status"] == "ok" and recorded["step_timer"] == "Model.train callback"
    assert recorded["command"] == f"python {MODEL_TRAIN}" and recorded["cwd"] == str(cwd)
    assert recorded["env"] == {"PERFKIT_TEST_MARK": "1"}
    assert recorded["device"] == "CPU" and recorded["mindspore_version"] == perfkit_mindspore_version()
    assert recorded["git"]["commit"] == head
    assert len(recorded["steps"]) == BATCHES
    # every op MindSpore timed after the script started training falls inside a recorded step
    starts = op_starts(folder)
    first_begin = recorded["steps"][0]["begin_ns"]
    in_steps = [start for start in starts if any(s["begin_ns"] <= start < s["end_ns"] for s in recorded["steps"])]
    assert in_steps == [start for start in starts if start >= first_begin]
    assert_steps_add_up(folder)
    assert (folder / "md" / "pipeline_profiling_0.json").is_file()
    assert "perfkit dash" in done.stdout
    assert_no_profiler_noise(done.stderr)


def assert_no_profiler_noise(stderr: str) -> None:
    """MindSpore's warnings about perfkit's use of its profiler, harmless (api.HARMLESS_PROFILER_WARNINGS), are
    kept out; the stderr is perfkit's lines and the script's own."""
    from perfkit.profiler.api import HARMLESS_PROFILER_WARNINGS
    for message in (*HARMLESS_PROFILER_WARNINGS, "Incorrect schedule"):
        assert message not in stderr
    assert not [line for line in stderr.splitlines() if line.startswith("[WARNING] ME")], stderr


def perfkit_mindspore_version() -> str:
    from importlib import metadata
    return metadata.version("mindspore")


@pytest.mark.mindspore
def test_a_custom_loop_with_the_api_is_profiled_unchanged(tmp_path):
    # The script's own perfkit.profiling("elsewhere") gives way to the command's run folder.
    done = profile(tmp_path, "--output", "runs/loop", "--", "python", CUSTOM_LOOP, "--output", "elsewhere")
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "runs" / "loop"
    assert not (tmp_path / "elsewhere").exists()
    recorded = manifest(folder)
    assert recorded["status"] == "ok" and recorded["step_timer"] == "perfkit.profiling"
    assert len(recorded["steps"]) == BATCHES - 1  # skip_first=1 in the script
    assert_steps_add_up(folder)


@pytest.mark.mindspore
def test_the_api_alone_writes_a_run_folder_with_its_schedule(tmp_path):
    done = run(tmp_path, sys.executable, CUSTOM_LOOP, "--output", "runs/exp1")
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "runs" / "exp1"
    recorded = manifest(folder)
    assert recorded["status"] == "ok" and recorded["step_timer"] == "perfkit.profiling"
    assert len(recorded["steps"]) == BATCHES - 1
    assert recorded["config"]["batch_size"] == 2  # common.py tiny_dataset's .batch(2), from the dataset iterated
    # MindSpore's schedule skipped the first step: every op it timed lies in a recorded step, and each step
    # ran the same graph
    steps = recorded["steps"]
    starts = op_starts(folder)
    per_step = [sum(step["begin_ns"] <= start < step["end_ns"] for start in starts) for step in steps]
    assert sum(per_step) == len(starts) and len(set(per_step)) == 1
    assert_steps_add_up(folder)
    assert (folder / "md" / "pipeline_profiling_0.json").is_file()
    assert_no_profiler_noise(done.stderr)  # a scheduled profiler, the skipped step its warmup


@pytest.mark.mindspore
def test_a_script_failing_inside_model_train_is_told_so(tmp_path):
    """A MindSpore dataset error raised inside Model.train, before its first step: the run is failed with that
    error, and perfkit does not claim the script never called Model.train."""
    done = profile(tmp_path, "--output", "runs/bad", "--", "python", MODEL_TRAIN, "--bad-data")
    assert done.returncode == 1
    assert "Cannot batch tensors with different shapes" in done.stderr  # MindSpore's own message, passed through
    assert "neither Model.train nor perfkit.profiling" not in done.stderr
    assert "perfkit: warning: the script failed inside Model.train before its first step ended" in done.stderr
    recorded = manifest(tmp_path / "runs" / "bad")
    assert recorded["status"] == "failed" and recorded["error"].startswith("RuntimeError: Exception thrown from "
                                                                           "dataset pipeline")
    assert recorded["steps"] == [] and recorded["step_timer"] == "Model.train callback"


@pytest.mark.mindspore
def test_step_timer_times_model_train_once_even_under_the_command(tmp_path):
    alone = run(tmp_path, sys.executable, MODEL_TRAIN, "--step-timer")
    assert alone.returncode == 0, alone.stderr
    assert f"timed {BATCHES} steps" in alone.stdout
    done = profile(tmp_path, "--output", "runs/timer", "--", "python", MODEL_TRAIN, "--step-timer")
    assert done.returncode == 0, done.stderr
    # the script's own StepTimer records into the run; perfkit adds none of its own
    assert f"timed {BATCHES} steps" in done.stdout
    assert len(manifest(tmp_path / "runs" / "timer")["steps"]) == BATCHES


@pytest.mark.mindspore
def test_a_script_exiting_3_makes_perfkit_exit_3_after_saving(tmp_path):
    done = profile(tmp_path, "--output", "runs/exit3", "--", "python", MODEL_TRAIN, "--exit", "3")
    assert done.returncode == 3
    assert "trained" in done.stdout
    folder = tmp_path / "runs" / "exit3"
    last = done.stderr.strip().splitlines()[-1]
    assert "exit code 3" in last and "runs/exit3" in last
    recorded = manifest(folder)
    assert recorded["status"] == "failed" and recorded["error"] == "the script exited with code 3"
    loaded = assert_steps_add_up(folder)
    assert loaded.meta.status == "failed"


@pytest.mark.mindspore
def test_an_error_the_script_recovers_from_leaves_an_ok_run_with_no_error(tmp_path):
    """An exception printed through sys.excepthook while the script trains on (an extension module's PyErr_Print)
    is not the run's error: the script ended well."""
    done = profile(tmp_path, "--output", "runs/recovered", "--", "python", MODEL_TRAIN, "--recovered-error")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ImportError: a module that was compiled using NumPy 1.x" in done.stderr  # the user still sees it
    recorded = manifest(tmp_path / "runs" / "recovered")
    assert recorded["status"] == "ok" and recorded["error"] is None
    assert perfkit.load(tmp_path / "runs" / "recovered").meta.status == "ok"


@pytest.mark.mindspore
def test_a_crashing_script_shows_its_traceback_and_leaves_a_loadable_failed_run(tmp_path):
    done = profile(tmp_path, "--output", "runs/crash", "--", "python", MODEL_TRAIN, "--crash")
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "RuntimeError: the user's bug at step 3" in done.stderr
    folder = tmp_path / "runs" / "crash"
    recorded = manifest(folder)
    assert recorded["status"] == "failed" and recorded["error"] == "RuntimeError: the user's bug at step 3"
    # the crash came in step 3's callbacks, before perfkit's: steps 1 and 2 were recorded
    assert len(recorded["steps"]) == 2
    loaded = assert_steps_add_up(folder)
    assert loaded.meta.status == "failed"
    assert any("run failed (RuntimeError: the user's bug at step 3)" in warning for warning in loaded.warnings)


@pytest.mark.mindspore
def test_ctrl_c_is_passed_on_and_the_profile_so_far_is_kept(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([*PERFKIT, "profile", "--output", "runs/stop", "--", "python", MODEL_TRAIN,
                                "--epochs", "100000"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    folder = tmp_path / "runs" / "stop"
    wait_for_recorded_step(folder, process)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=WAIT_SECONDS)
    assert process.returncode == 130, stderr
    assert "passed on to the script" in stderr and "interrupted" in stderr.strip().splitlines()[-1]
    recorded = manifest(folder)
    assert recorded["status"] == "interrupted"
    assert 0 < len(recorded["steps"]) < 100000 * BATCHES
    loaded = assert_steps_add_up(folder)
    assert loaded.meta.status == "interrupted"
    assert (folder / "md" / "pipeline_profiling_0.json").is_file()  # MindData's profile was saved too


@pytest.mark.mindspore
def test_a_script_that_os_exits_mid_training_is_incomplete_with_its_bound_unknown(tmp_path):
    """Issue 25: os._exit(0) at step 2 skips atexit, so MindSpore's profiler never analyses what it recorded.
    Was: exit 0, status ok, "compute-bound 100 %" from step totals alone."""
    done = profile(tmp_path, "--output", "runs/exit", "--", "python", MODEL_TRAIN, "--os-exit-at", "2")
    assert done.returncode == 0, done.stderr  # the script's
    assert "perfkit: incomplete: runs/exit holds the step times only" in done.stderr
    assert "bound    unknown (the profiler wrote no op data" in done.stdout and "100.0 %" not in done.stdout
    recorded = manifest(tmp_path / "runs" / "exit")
    assert recorded["status"] == "incomplete" and "left no op data" in recorded["error"]
    loaded = perfkit.load(tmp_path / "runs" / "exit")
    assert loaded.meta.status == "incomplete" and loaded.steps["fwd_bwd_ms"].isna().all()
    assert perfkit.summarize(loaded)["bound"]["kind"] == "unknown"


@pytest.mark.parametrize("code", [0, 4])
def test_a_script_that_never_imports_mindspore_says_so_and_exits_as_it_did(tmp_path, code):
    """Issue 25: was exit 2 (though the script exited 0) with "found only files perfkit does not read:
    perfkit_run.json" while that file is among what perfkit looks for."""
    (tmp_path / "plain.py").write_text(f"import sys\nprint('no MindSpore here')\nsys.exit({code})\n")
    done = profile(tmp_path, "--output", "runs/plain", "--", "python", "plain.py")
    assert done.returncode == code, done.stderr
    assert "no MindSpore here" in done.stdout
    assert "your script did not use MindSpore (it never imported it)" in done.stderr
    assert f"runs/plain holds only perfkit_run.json (the script did not use MindSpore); exit code {code}" in done.stderr
    assert "does not read" not in done.stderr and "MindSpore's profiler wrote nothing" not in done.stderr
    assert manifest(tmp_path / "runs" / "plain")["status"] == ("ok" if code == 0 else "failed")


@pytest.mark.mindspore
def test_a_script_without_model_train_nor_the_api_loads_from_op_timestamps_next_to_an_existing_folder(tmp_path):
    existing = tmp_path / "runs" / "plain"
    existing.mkdir(parents=True)
    (existing / "mine.txt").write_text("keep")
    done = profile(tmp_path, "--output", "runs/plain", "--", "python", CUSTOM_LOOP, "--no-api")
    assert done.returncode == 0, done.stderr
    assert (existing / "mine.txt").read_text() == "keep" and list(existing.iterdir()) == [existing / "mine.txt"]
    folder = tmp_path / "runs" / "plain_2"
    assert f"runs/plain exists (never overwritten): writing to runs/plain_2" in done.stderr
    assert "perfkit: warning: the script called neither Model.train nor perfkit.profiling" in done.stderr
    recorded = manifest(folder)
    assert recorded["status"] == "ok" and recorded["step_timer"] is None and recorded["steps"] == []
    loaded = perfkit.load(folder)
    assert loaded.meta.step_source == "op_timestamps"
    # graph mode runs each kernel once per step: as many steps as batches, each with the same op count
    assert len(loaded.steps) == BATCHES
    assert len(op_starts(folder)) % BATCHES == 0


@pytest.mark.mindspore
def test_two_ranks_of_a_data_parallel_script(tmp_path):
    done = profile(tmp_path, "--ranks", "2", "--output", "runs/dp2", "--", "python", MODEL_TRAIN, "--data-parallel")
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "runs" / "dp2"
    top = manifest(folder)
    assert (top["rank"], top["rank_size"], top["status"]) == (None, 2, "ok")
    for rank in (0, 1):
        recorded = manifest(folder / f"rank_{rank}")
        assert (recorded["rank"], recorded["status"], recorded["step_timer"]) == (rank, "ok", "Model.train callback")
        assert len(recorded["steps"]) == BATCHES
        assert list((folder / f"rank_{rank}").glob(f"*_ascend_ms/FRAMEWORK/cpu_op_type_info_{rank}.csv"))
    loaded = perfkit.load(folder)
    assert loaded.ranks == [0, 1]
    for rank in (0, 1):
        assert_steps_add_up(folder / f"rank_{rank}", rank)


@pytest.mark.parametrize("args, problem", [
    (["--"], "no command after `--`"),
    (["--", "no-such-command-perfkit"], "command not found: no-such-command-perfkit"),
    (["--", "python", "missing_train.py", "--epochs", "1"], "script not found: missing_train.py"),
    (["--ranks", "2", "--", "msrun", "--worker_num=2", MODEL_TRAIN], "--ranks N needs a `python script.py"),
    (["--batch-size", "8", "--", "python", MODEL_TRAIN], "--batch-size: for the built-in ResNet-50 run only"),
])
def test_bad_commands_are_one_line_exit_2_and_leave_no_folder(tmp_path, monkeypatch, args, problem):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["profile", "--output", "out", *args])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and problem in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_profiling_names_do_not_import_mindspore():
    code = ("import sys, perfkit; perfkit.profiling; from perfkit.profiler.api import profiling; "
            "assert 'mindspore' not in sys.modules, 'mindspore imported'; "
            "assert 'StepTimer' in perfkit.__all__ and 'profiling' in perfkit.__all__")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_start_up_hook_loads_only_the_standard_library():
    # it runs in every profiled script's process (and msrun's) before the script; perfkit's readers wait
    # for `import mindspore`
    code = ("import sys; import perfkit.profiler.attach; "
            "assert not {'pandas', 'numpy', 'click', 'mindspore'} & set(sys.modules), 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_the_step_log_skips_the_first_steps_and_numbers_the_rest_from_1():
    from perfkit.profiler.api import StepLog
    log = StepLog(skip_first=1)
    for _ in range(3):
        log.begin()
        log.end()
    assert [step["step"] for step in log.recorded] == [1, 2]
    assert all(step["begin_ns"] <= step["end_ns"] for step in log.recorded)
    assert json.loads(json.dumps(log.recorded)) == log.recorded  # what the manifest stores

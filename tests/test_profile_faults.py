"""`perfkit profile` under faults: signals during training and during the analysis, kill -9 of perfkit,
a full disk, a file size limit. Each case trains for real (32x32 images, batch 8) and checks what a user is promised: the
data collected so far is kept, perfkit_run.json says what happened, the exit code is not 0, and no
process of the run is left behind.

A signal "during the analysis" is made deterministic by freezing (SIGSTOP) the rank's process group as
soon as MindSpore's profiler logs that its analysis began: the analysis of a two-step run takes about
a second, too short to hit reliably otherwise.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner
from profile_helpers import (
    LONG_STEPS,
    PERFKIT,
    SMALL_FLAGS,
    WAIT_SECONDS,
    assert_nothing_left,
    manifest,
    process_tree,
    training_process,
    wait_for_profiler_start,
    wait_for_recorded_step,
)

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError
from perfkit.profiler import cifar

# Room for perfkit_run.json and train.log, not for MindSpore's profile (about 1 MB for two steps).
SMALL_DISK = "64k"
FILE_SIZE_LIMIT = 64 * 1024
# A stop "at once" must not wait for the step or the analysis to end.
PROMPT_SECONDS = 10


class Profiling:
    """`perfkit profile` running in the background, its stderr collected line by line as it comes."""

    def __init__(self, out: Path, *flags: str, **popen):
        self.out = out
        self.process = subprocess.Popen([*PERFKIT, "profile", *flags, "--output", str(out)], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, **popen)
        self.lines: list[str] = []
        self.seen: list[psutil.Process] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stderr), daemon=True)
        self.reader.start()

    def wait_for_line(self, text: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not any(text in line for line in self.lines):
            assert self.process.poll() is None or self.reader.is_alive(), "".join(self.lines)
            assert time.monotonic() < deadline, f"no {text!r} on stderr: {''.join(self.lines)}"
            time.sleep(0.05)

    def tree(self) -> list[psutil.Process]:
        """process_tree of the command, remembered so that kill() reaches processes it orphaned."""
        self.seen = process_tree(self.process)
        return self.seen

    def kill(self) -> None:
        """Leave nothing behind when a test fails half way (a frozen or orphaned rank included)."""
        alive = [] if self.process.returncode is not None else self.tree()
        for process in {*alive, *self.seen}:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        self.process.wait()

    def finish(self) -> tuple[int, str, str]:
        """Exit code, stdout and stderr once the command has ended."""
        stdout = self.process.stdout.read()
        returncode = self.process.wait(timeout=WAIT_SECONDS)
        self.reader.join()
        return returncode, stdout, "".join(self.lines)


def freeze_in_analysis(run: Profiling) -> psutil.Process:
    """SIGSTOP the training process's group once MindSpore's analysis has begun; return the process."""
    child = training_process(run.process, rank=0)
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        logs = list(run.out.glob("*_ascend_ms/logs/profiler_*.log"))
        if logs and "CpuProfiler analyse" in logs[0].read_text():
            os.killpg(child.pid, signal.SIGSTOP)
            return child
        assert run.process.poll() is None, run.finish()
        time.sleep(0.02)
    pytest.fail("the profiler's analysis never began")


@pytest.fixture
def profiling():
    """start(out, *flags, **popen) -> a Profiling; whatever it started is killed when the test ends."""
    started: list[Profiling] = []

    def start(out: Path, *flags: str, **popen) -> Profiling:
        started.append(Profiling(out, *flags, **popen))
        return started[-1]

    yield start
    for run in started:
        run.kill()


@pytest.fixture(scope="module", autouse=True)
def synthetic_data():
    """The synthetic CIFAR-10 cache, made here: under a file size limit the run could not write it."""
    cifar.synthetic()


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs of that size (unmounted afterwards); skips where mounting is not allowed."""
    mounted = []

    def mount(size: str) -> Path:
        disk = tmp_path / f"disk{len(mounted)}"
        disk.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no mount command: the small-tmpfs full-disk case needs one (the ulimit -f case still runs)")
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN): {result.stderr.strip()} "
                        "(the ulimit -f case still runs)")
        mounted.append(disk)
        return disk

    yield mount
    for disk in mounted:
        subprocess.run(["umount", str(disk)], check=True)


def training_past_its_first_step(profiling, out: Path):
    """A long profiled run started and past its first recorded step: (run, its training process, the
    process tree as it is while training)."""
    run = profiling(out, *SMALL_FLAGS[2:], "--steps", LONG_STEPS)
    child = training_process(run.process, rank=0)
    wait_for_profiler_start(out, run.process)
    tree = run.tree()
    wait_for_recorded_step(out, run.process)
    return run, child, tree


def stop_twice(run, first: signal.Signals, answer: str, second: signal.Signals):
    """Send `first`, wait until perfkit answers it with the line `answer`, send `second`: perfkit's
    (returncode, stdout, stderr), which must come within PROMPT_SECONDS of the second signal."""
    run.process.send_signal(first)
    run.wait_for_line(answer)
    run.process.send_signal(second)
    stopped = time.monotonic()
    result = run.finish()
    assert time.monotonic() - stopped < PROMPT_SECONDS
    return result


@pytest.mark.mindspore
def test_sigterm_during_training_stops_after_the_step_and_keeps_a_loadable_run(tmp_path, profiling):
    out = tmp_path / "run"
    run, child, tree = training_past_its_first_step(profiling, out)
    run.process.send_signal(signal.SIGTERM)  # what `kill PID` and job schedulers send
    returncode, stdout, stderr = run.finish()
    assert returncode == 128 + signal.SIGTERM, stderr
    assert "SIGTERM: stopping training" in stderr and "Traceback" not in stderr
    recorded = manifest(out)
    assert recorded["status"] == "interrupted" and recorded["error"] is None
    assert 0 < len(recorded["steps"]) < int(LONG_STEPS)
    loaded = perfkit.load(out)
    assert loaded.meta.status == "interrupted" and len(loaded.steps) == len(recorded["steps"])
    assert "perfkit dash" in stdout
    assert not child.is_running()
    assert_nothing_left(tree, out)


@pytest.mark.mindspore
def test_a_second_sigterm_during_training_stops_at_once_and_keeps_the_step_times(tmp_path, profiling):
    out = tmp_path / "run"
    run, _, tree = training_past_its_first_step(profiling, out)
    returncode, stdout, stderr = stop_twice(run, signal.SIGTERM, "SIGTERM: stopping training", signal.SIGTERM)
    assert returncode == 128 + signal.SIGTERM, stderr
    assert "stopping at once, during training" in stderr and "Traceback" not in stderr
    recorded = manifest(out)
    assert recorded["status"] == "interrupted"
    assert "during training" in recorded["error"]
    assert recorded["steps"]  # recorded as they came, so they survive the kill
    loaded = perfkit.load(out)  # and make a loadable run on their own
    assert loaded.meta.status == "interrupted"
    assert loaded.steps["step"].tolist() == [step["step"] for step in recorded["steps"]]
    assert_nothing_left(tree, out)


@pytest.mark.mindspore
def test_kill_9_of_perfkit_stops_its_training_process_which_keeps_an_interrupted_run(tmp_path, profiling):
    out = tmp_path / "run"
    run, child, tree = training_past_its_first_step(profiling, out)
    scratch = Path(child.cmdline()[-1]).parent  # perfkit's temporary folder: the job and the progress files
    assert scratch.name.startswith("perfkit-profile-") and scratch.is_dir()
    run.process.kill()  # no handler can run: the kernel tells the orphaned training process
    returncode, _, _ = run.finish()
    assert returncode == -signal.SIGKILL
    child.wait(timeout=WAIT_SECONDS)
    assert not scratch.exists()  # the training process removed it, as perfkit could not
    recorded = manifest(out)
    assert recorded["status"] == "interrupted"
    assert 0 < len(recorded["steps"]) < int(LONG_STEPS)
    assert perfkit.load(out).meta.status == "interrupted"
    assert_nothing_left(tree, out)


@pytest.mark.mindspore
def test_sigint_during_the_analysis_lets_it_finish_and_marks_the_run_interrupted(tmp_path, profiling):
    out = tmp_path / "run"
    run = profiling(out, *SMALL_FLAGS)
    child = freeze_in_analysis(run)
    tree = run.tree()
    run.wait_for_line("analysing profile")
    run.process.send_signal(signal.SIGINT)
    run.wait_for_line("SIGINT: training is done, finishing the analysis")
    os.killpg(child.pid, signal.SIGCONT)
    returncode, stdout, stderr = run.finish()
    assert returncode == 128 + signal.SIGINT, stderr
    recorded = manifest(out)
    assert recorded["status"] == "interrupted"
    assert len(recorded["steps"]) == 2  # every step was profiled and analysed
    assert list(out.glob("*_ascend_ms/ASCEND_PROFILER_OUTPUT/trace_view.json"))
    assert perfkit.load(out).meta.status == "interrupted"
    assert "perfkit dash" in stdout
    assert_nothing_left(tree, out)


@pytest.mark.mindspore
def test_a_second_signal_during_the_analysis_stops_it_at_once_and_keeps_what_was_profiled(tmp_path, profiling):
    out = tmp_path / "run"
    run = profiling(out, *SMALL_FLAGS)
    freeze_in_analysis(run)
    tree = run.tree()  # the analysis's own worker process included
    run.wait_for_line("analysing profile")
    returncode, stdout, stderr = stop_twice(run, signal.SIGINT, "finishing the analysis", signal.SIGTERM)
    assert returncode == 128 + signal.SIGINT, stderr  # the first signal says how the run was stopped
    assert "stopping at once, during the profiler's analysis" in stderr and "Traceback" not in stderr
    recorded = manifest(out)
    assert recorded["status"] == "interrupted"
    assert "during the profiler's analysis" in recorded["error"]
    assert len(recorded["steps"]) == 2
    # MindSpore wrote its op files when the profiler stopped, and MindData's profile was saved before the
    # analysis: the run loads without the analysis's output.
    loaded = perfkit.load(out)
    assert loaded.meta.status == "interrupted" and len(loaded.steps) == 2 and len(loaded.host_queue) > 0
    assert_nothing_left(tree, out)


@pytest.mark.mindspore
def test_a_disk_that_fills_during_profiling_is_one_line_exit_2_and_keeps_the_step_times(tmpfs, profiling):
    disk = tmpfs(SMALL_DISK)
    out = disk / "run"
    run = profiling(out, *SMALL_FLAGS)
    training_process(run.process, rank=0)
    tree = run.tree()
    returncode, _, stderr = run.finish()
    assert returncode == 2, stderr
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("perfkit: error:")]
    assert len(errors) == 1 and stderr.rstrip().endswith(errors[0])
    assert "no space left on device" in errors[0] and str(out) in errors[0]
    # The disk is too full for the final manifest too: the one written during training stays, and says so.
    assert "could not be updated" in errors[0]
    recorded = manifest(out)
    assert recorded["status"] == "running" and len(recorded["steps"]) == 2
    assert not list(out.glob(".perfkit_run.json.*.tmp"))
    loaded = perfkit.load(out)  # the recorded steps still make a run, its cut files named in warnings
    assert loaded.steps["step"].tolist() == [1, 2] and loaded.warnings
    assert_nothing_left(tree, out)


@pytest.mark.mindspore
def test_a_full_disk_before_training_is_one_line_exit_2_and_leaves_no_folder(tmpfs):
    disk = tmpfs("4k")
    (disk / "filler").write_bytes(b"x" * 4096)
    result = CliRunner().invoke(main, ["profile", *SMALL_FLAGS, "--output", str(disk / "run")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"perfkit: error: {disk / 'run'}: cannot write the run folder: no space left on device")
    assert [path.name for path in disk.iterdir()] == ["filler"]


@pytest.mark.mindspore
def test_a_file_size_limit_is_one_line_exit_2_and_a_failed_run_that_still_loads(tmp_path, profiling):
    out = tmp_path / "run"

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))

    run = profiling(out, *SMALL_FLAGS, preexec_fn=limit_file_size)
    training_process(run.process, rank=0)
    tree = run.tree()
    returncode, _, stderr = run.finish()
    assert returncode == 2, stderr
    assert "Traceback" not in stderr
    error = stderr.strip().splitlines()[-1]
    assert error.startswith("perfkit: error: training failed: file too large") and "ulimit -f" in error
    assert str(out) in error
    recorded = manifest(out)
    assert recorded["status"] == "failed" and "file too large" in recorded["error"]
    assert len(recorded["steps"]) == 2
    loaded = perfkit.load(out)  # what fit under the limit still loads, with the cut marked
    assert loaded.meta.status == "failed"
    assert any("run failed (file too large" in warning for warning in loaded.warnings)
    assert_nothing_left(tree, out)


def test_a_full_disk_for_the_synthetic_data_is_one_error_and_leaves_no_partial_cache(tmpfs):
    disk = tmpfs("1m")
    # numpy reserves each file's space first and words its error so
    with pytest.raises(PerfkitError, match="cannot write synthetic CIFAR-10 .*: not enough free space to write "
                                           ".*--data-path") as caught:
        cifar.synthetic(disk / "cifar10-synthetic")
    assert str(disk / "cifar10-synthetic") in str(caught.value)
    assert list(disk.iterdir()) == []

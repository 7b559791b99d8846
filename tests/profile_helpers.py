"""What the `perfkit profile` tests share: the small-run flags, and finding a run's processes and files
while it trains."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SMALL_FLAGS = ["--steps", "2", "--warmup", "1", "--batch-size", "8", "--image-size", "32"]
PERFKIT = [sys.executable, "-m", "perfkit"]
# Steps of a run that is stopped on purpose: enough that it is still training when the signal comes.
LONG_STEPS = "60"
WAIT_SECONDS = 180


def manifest(folder: Path) -> dict:
    return json.loads((folder / "perfkit_run.json").read_text())


def wait_for_profiler_start(rank_folder: Path, process: subprocess.Popen) -> None:
    """Block until MindSpore's profiler has started in this rank folder (warmup done, steps being profiled)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        logs = list(rank_folder.glob("*_ascend_ms/logs/profiler_*.log"))
        if logs and "CpuProfiler start" in logs[0].read_text():
            return
        time.sleep(0.2)
    pytest.fail(f"the profiler never started under {rank_folder}")


def training_process(parent: subprocess.Popen, rank: int) -> psutil.Process:
    """The `python -m perfkit.profiler.train` process of `rank` among the command's descendants."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        for child in psutil.Process(parent.pid).children(recursive=True):
            try:
                if "perfkit.profiler.train" in child.cmdline() and \
                        child.environ().get("MS_ROLE") != "MS_SCHED" and \
                        int(child.environ().get("RANK_ID", "0")) == rank:
                    return child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        time.sleep(0.2)
    pytest.fail(f"no training process for rank {rank}")


def wait_for_recorded_step(folder: Path, process: subprocess.Popen) -> None:
    """Block until the rank's manifest in `folder` holds a profiled step (they are recorded as they end)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if (folder / "perfkit_run.json").exists() and manifest(folder)["steps"]:
            return
        time.sleep(0.1)
    pytest.fail(f"no step recorded under {folder}")


def process_tree(process: subprocess.Popen) -> list[psutil.Process]:
    """The command and every process under it, as they are now (take it while the run trains)."""
    root = psutil.Process(process.pid)
    return [root, *root.children(recursive=True)]


def assert_nothing_left(tree: list[psutil.Process], out: Path) -> None:
    """No process of `tree` (killed ones get a few seconds to go) and none naming the run folder is running."""
    _, alive = psutil.wait_procs(tree, timeout=5)
    running = []
    for process in alive:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
        except psutil.NoSuchProcess:
            pass
    assert not running, [process.cmdline() for process in running]
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]

"""A cache dir perfkit cannot use (issue 25): one warning, and the answer computed from the files without it.

Each case runs the real commands in a subprocess (the cache stays off for the rest of a process once it
found a fault) on a copy of the real fixture new_format/msinsight_level1/rank0_ascend_pt, and compares the
JSON answers with those of PERFKIT_NO_CACHE=1. Before the fix each was a traceback and exit 1:
NotADirectoryError (a file), RuntimeError (a symlink loop), OSError read-only file system in store_answer,
OverflowError in max_bytes (PERFKIT_CACHE_MAX_MB=inf).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import broken
import pytest
from conftest import FIXTURE_RUNS, REPO

COMMANDS = (["summary", "--format", "json"], ["advise", "--format", "json"])
WARNING = "perfkit: warning: the cache is not used"


def perfkit(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(REPO), **env}
    environment.pop("PERFKIT_NO_CACHE", None)
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "perfkit", *args], capture_output=True, text=True,
                          env=environment, timeout=300)


@pytest.fixture
def run(tmp_path) -> Path:
    return broken.copy_run(FIXTURE_RUNS["new_level1_rank0"], tmp_path / "run")


def answers_without_cache(run: Path) -> list[dict]:
    return [json.loads(perfkit(command[0], str(run), *command[1:], PERFKIT_NO_CACHE="1").stdout)
            for command in COMMANDS]


def check_answers(run: Path, expected: list[dict], **env: str) -> str:
    """Every command answers as without a cache, with one warning line; the trace is cut too. The warning."""
    said = set()
    for command, answer in zip(COMMANDS, expected):
        result = perfkit(command[0], str(run), *command[1:], **env)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert json.loads(result.stdout) == answer
        warnings = [line for line in result.stderr.splitlines() if WARNING in line]
        assert len(warnings) == 1, result.stderr
        said.add(warnings[0])
    window = run.parent / "window.json"
    result = perfkit("trace", str(run), "--step", "50", "-o", str(window), **env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert any(event.get("ph") == "X" for event in json.loads(window.read_bytes()))
    return said.pop()


def test_cache_dir_that_is_a_file(run, tmp_path):
    expected = answers_without_cache(run)
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    said = check_answers(run, expected, PERFKIT_CACHE_DIR=str(cache))
    assert str(cache) in said and "not a folder" in said
    assert cache.read_text() == "not a folder"


def test_cache_dir_that_is_a_symlink_loop(run, tmp_path):
    expected = answers_without_cache(run)
    cache = tmp_path / "cache"
    cache.symlink_to(cache.name)
    said = check_answers(run, expected, PERFKIT_CACHE_DIR=str(cache))
    assert "loop" in said.lower() or "symbolic links" in said, said


@pytest.mark.parametrize("limit", ["inf", "nan", "-5", "lots"])
def test_cache_size_limit_that_is_no_size(run, tmp_path, limit):
    expected = answers_without_cache(run)
    said = check_answers(run, expected, PERFKIT_CACHE_DIR=str(tmp_path / "cache"), PERFKIT_CACHE_MAX_MB=limit)
    assert f"PERFKIT_CACHE_MAX_MB={limit!r}" in said
    assert not (tmp_path / "cache").exists()


def test_read_only_cache_with_stale_entries(run, tmp_path):
    """The cache filled, the run's files changed since (every entry stale), then its file system read-only."""
    cache = tmp_path / "cache"
    cache.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(cache)],
                      capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is refused here")
    try:
        for command in COMMANDS:
            assert perfkit(command[0], str(run), *command[1:], PERFKIT_CACHE_DIR=str(cache)).returncode == 0
        assert any((cache / "answers").iterdir()) and any((cache / "runs").iterdir())
        step_times = run / "ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
        os.utime(step_times, ns=(step_times.stat().st_atime_ns, step_times.stat().st_mtime_ns + 10**9))
        expected = answers_without_cache(run)
        subprocess.run(["mount", "-o", "remount,ro", str(cache)], check=True)
        said = check_answers(run, expected, PERFKIT_CACHE_DIR=str(cache))
        assert "Read-only file system" in said, said
    finally:
        subprocess.run(["umount", str(cache)], check=False)

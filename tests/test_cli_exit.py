"""How the `perfkit` command runs and ends (apps/cli.py: console): its garbage collector's youngest generation
collected every COLLECT_EVERY allocations; ended as exiting would end it (the exit handlers run, all the output
delivered, the command's exit code) but without the interpreter's teardown, unless something else still runs in
the process; and discovery.common_folder, which the kept answers and the assembly use for
os.path.commonpath."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, REPO
from hypothesis import given
from hypothesis import strategies as st

from perfkit.apps.cli import COLLECT_EVERY, main
from perfkit.io.discovery import common_folder

sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402

# A module-level object whose finaliser speaks: the interpreter's teardown runs it, an exit without one does not.
PROBE = ("import atexit, gc, sys, threading, time\n"
         "class Probe:\n"
         "    def __del__(self):\n"
         "        print('TORN DOWN', file=sys.stderr, flush=True)\n"
         "probe = Probe()\n"
         "atexit.register(lambda: print('EXIT HANDLER RAN, collecting every', gc.get_threshold()[0],\n"
         "                              file=sys.stderr, flush=True))\n"
         "if sys.argv[1] == 'thread':\n"
         "    threading.Thread(target=time.sleep, args=(0.3,)).start()\n"
         "sys.argv = ['perfkit', *sys.argv[2:]]\n"
         "from perfkit.apps.cli import console\n"
         "console()\n")


def run_console(mode: str, *args: str, tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PERFKIT_NO_CACHE", None)
    return subprocess.run([sys.executable, "-c", PROBE, mode, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_the_command_ends_without_teardown_after_its_exit_handlers_with_all_its_output(tmp_path):
    run = str(FIXTURE_RUNS["new_level1"])
    done = run_console("alone", "summary", "--format", "json", run, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"EXIT HANDLER RAN, collecting every {COLLECT_EVERY}" in done.stderr
    assert "TORN DOWN" not in done.stderr  # no teardown
    in_process = CliRunner().invoke(main, ["summary", "--format", "json", run], env={"PERFKIT_NO_CACHE": "1"})
    assert json.loads(done.stdout) == json.loads(in_process.output)  # the whole answer reached the pipe


def test_a_failing_command_keeps_its_exit_code_and_its_one_line(tmp_path):
    done = run_console("alone", "summary", str(tmp_path / "missing"), tmp_path=tmp_path)
    assert done.returncode == 2
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
    assert "EXIT HANDLER RAN" in done.stderr and "TORN DOWN" not in done.stderr


def test_with_a_thread_still_running_the_interpreter_exits_as_usual(tmp_path):
    done = run_console("thread", "--version", tmp_path=tmp_path)
    assert done.returncode == 0
    assert "perfkit, version" in done.stdout
    assert "EXIT HANDLER RAN" in done.stderr and "TORN DOWN" in done.stderr


def test_python_dash_m_perfkit_is_the_same_command(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "perfkit", "summary", str(tmp_path / "missing")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("perfkit: error:")


NAMES = st.sampled_from(["a", "b", "ab", "a-b", "a.b", "b0", "rank_1", "rank_10", "é"])
PATHS = st.lists(NAMES, min_size=0, max_size=4).map(lambda names: "/" + "/".join(names))


@given(st.lists(PATHS, min_size=1, max_size=6))
def test_common_folder_is_commonpath(paths):
    assert common_folder(paths) == os.path.commonpath(paths)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full: a device that is always full")
@pytest.mark.parametrize("args", [["--version"], ["summary", "--format", "json", str(FIXTURE_RUNS["new_level1"])]])
def test_an_answer_that_cannot_be_written_is_one_line_and_exit_code_2(args, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "perfkit", *args], stdout=full, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "perfkit: error: standard output: cannot be written (No space left on device)"]


def test_a_reader_that_stops_early_is_no_error(tmp_path):
    run = tmp_path / "cluster"
    generate.generate_cluster(run, ranks=128, steps=1)  # an answer of ~140 KB: more than a pipe holds
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    process = subprocess.Popen([sys.executable, "-m", "perfkit", "summary", "--format", "json", str(run)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert process.stdout.read(10) == b'{\n  "run":'
    process.stdout.close()  # `| head -c 10`
    error = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0
    assert "Traceback" not in error and "Exception ignored" not in error

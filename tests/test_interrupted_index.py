"""`perfkit trace` killed while it builds a timeline index (issue 25): its forked workers must die with it.

The trace is benchmarks/generate.py's: the real fixture rank's trace_view.json (new_format/msinsight_level1,
rank 0) copied step after step to ~200 MB, which the index builds in several seconds with 2+ forked workers.
Before the fix, SIGTERM, SIGHUP and SIGKILL to perfkit left its workers running for ever under PID 1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import broken
import pytest
from conftest import FIXTURE_RUNS, REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402

TRACE_BYTES = 200 * 1024 * 1024


@pytest.fixture(scope="module")
def big_trace_run(tmp_path_factory) -> Path:
    run = broken.copy_run(FIXTURE_RUNS["new_level1_rank0"], tmp_path_factory.mktemp("big") / "rank0_ascend_pt")
    generate.write_trace_view(run / "ASCEND_PROFILER_OUTPUT/trace_view.json", TRACE_BYTES, 50)
    return run


def _group(pgid: int) -> list[int]:
    """Ids of the live (not zombie) processes of process group `pgid`, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _trace(run: Path, cache: Path, output: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(cache)}
    env.pop("PERFKIT_NO_CACHE", None)
    return subprocess.Popen([sys.executable, "-m", "perfkit", "trace", str(run), "--step", "51",
                             "-o", str(output)], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            # a suite started under nohup hands SIGHUP down ignored, and perfkit keeps it so
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG are Linux's")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_no_worker_outlives_a_killed_index_build(stop, big_trace_run, tmp_path):
    cache, output = tmp_path / "cache", tmp_path / "window.json"
    process = _trace(big_trace_run, cache, output)
    deadline = time.monotonic() + 120
    while len(_children(process.pid)) < 2:  # the index build's workers are forked
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "the index build never started its workers"
        time.sleep(0.05)
    time.sleep(0.1)  # mid-build: workers busy on blocks (on a quiet machine the build is done within 0.5 s)
    workers = _children(process.pid)
    assert process.poll() is None, "the index build ended before the signal: make the trace bigger"
    process.send_signal(stop)
    assert process.wait(timeout=30) == -stop
    time.sleep(5)
    left = _group(process.pid)  # start_new_session: the group id is perfkit's pid
    assert not left, f"{len(left)} process(es) of the killed build's group left (workers were {workers})"

    again = _trace(big_trace_run, cache, output)
    _, errors = again.communicate(timeout=600)
    assert again.returncode == 0, errors.decode()
    events = json.loads(output.read_bytes())
    assert isinstance(events, list) and any(event.get("ph") == "X" for event in events)
    assert not _group(again.pid)
    # the killed build's half-written index (named after its dead process) is removed by the next one
    assert not list(cache.glob("timeline/*/.tmp-*"))

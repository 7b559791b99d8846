"""--dask: the per-rank read on a real local Dask cluster (perfkit/io/dask_ingest.py).

Each test starts `dask scheduler` and two `dask worker` processes on 127.0.0.1 (benchmarks/local_dask.py: free
ports, no nanny, so each worker is the process started), loads a generated multi-rank run through them and stops
every process by its PID; every wait is bounded. The Run read through Dask must be the in-process Run, table for
table.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("distributed")

from perfkit.io import loader  # noqa: E402
from perfkit.io.dask_ingest import ENTRY_KIND, OUTCOMES, Target  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402
from local_dask import LocalCluster, free_port  # noqa: E402

RUN_S = 180       # for one perfkit command through the cluster
SLOW_RANK = 3


@pytest.fixture
def cluster(tmp_path):
    started = LocalCluster(tmp_path / "cluster")
    yield started
    started.stop()


def generated_run(folder: Path, ranks: int, steps: int = 3) -> Path:
    run = folder / f"ranks_{ranks}"
    generate.generate_cluster(run, ranks=ranks, steps=steps, slow_ranks=(SLOW_RANK,))
    return run


def perfkit(*arguments: str, cache: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(REPO), PERFKIT_CACHE_DIR=str(cache), **(env or {}))
    environment.pop("PERFKIT_NO_CACHE", None)
    environment.pop("PERFKIT_DASK", None)
    return subprocess.run([sys.executable, "-m", "perfkit", *arguments], capture_output=True, text=True,
                          env=environment, timeout=RUN_S)


def assert_same_run(expected, got) -> None:
    assert got.meta == expected.meta
    assert got.warnings == expected.warnings
    for name, frame in expected.tables().items():
        pd.testing.assert_frame_equal(got.tables()[name], frame, check_exact=True, obj=name)


def entries(storage: Path) -> list[Path]:
    """The rank entries workers finished (each is written under a temporary name, then renamed)."""
    return sorted(path for path in (storage / ENTRY_KIND).glob("*/*")
                  if not path.parent.name.startswith(OUTCOMES) and ".tmp-" not in path.name)


def test_a_run_read_on_dask_is_the_run_read_in_process(cluster, tmp_path, monkeypatch):
    run = generated_run(tmp_path, ranks=12)
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    storage = tmp_path / "storage"
    through_dask = loader.load(run, Target(cluster.address, str(storage)))
    assert_same_run(loader.load(run), through_dask)
    # each rank folder was read on a worker, which wrote its entry to the storage
    assert len(entries(storage)) == 12
    # the numbers against the raw files: each rank's steps are its step_trace_time.csv rows
    for rank in range(12):
        with open(run / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        steps = through_dask.steps[through_dask.steps["rank"] == rank]
        assert steps["step"].tolist() == [int(row["Step"]) for row in rows]
        assert steps["computing_ms"].tolist() == pytest.approx([float(row["Computing"]) / 1000 for row in rows])

    # a second read after one rank's file changed: only that rank is read again (its entry replaced)
    before = {path: path.stat().st_mtime_ns for path in entries(storage)}
    changed = run / "rank5_ascend_pt/ASCEND_PROFILER_OUTPUT/step_trace_time.csv"
    os.utime(changed, ns=(changed.stat().st_atime_ns, changed.stat().st_mtime_ns + 10**9))
    assert_same_run(through_dask, loader.load(run, Target(cluster.address, str(storage))))
    after = {path: path.stat().st_mtime_ns for path in entries(storage)}
    assert len(after) == 12 and len(set(after) - set(before)) == 1
    assert all(after[path] == mtime for path, mtime in before.items() if path in after)

    # the step files alone (loader.load_steps), read by read_steps on the workers
    _, steps, warnings = loader.load_steps(run, Target(cluster.address, str(tmp_path / "storage-steps")))
    _, expected_steps, expected_warnings = loader.load_steps(run)
    pd.testing.assert_frame_equal(steps, expected_steps, check_exact=True)
    assert warnings == expected_warnings and len(steps) == 12 * 3

    # the commands: the same answers with and without --dask (PERFKIT_DASK for one of them)
    for command in (["summary", "--format", "json"], ["ranks", "--format", "json"],
                    ["advise", "--format", "json"]):
        alone = perfkit(*command, str(run), cache=tmp_path / f"cache-{command[0]}-alone")
        dask = perfkit(*command, str(run), cache=tmp_path / f"cache-{command[0]}-dask",
                       env={"PERFKIT_DASK": cluster.address, "PERFKIT_DASK_STORAGE": str(tmp_path / "storage2")})
        assert alone.returncode == 0, alone.stderr
        assert dask.returncode == 0, dask.stderr
        assert json.loads(dask.stdout) == json.loads(alone.stdout)
    ranks = json.loads(perfkit("ranks", "--format", "json", "--dask", cluster.address, "--dask-storage",
                               str(tmp_path / "storage3"), str(run), cache=tmp_path / "cache-ranks3").stdout)
    assert ranks["slow_ranks"] == [SLOW_RANK]


def test_a_large_run_goes_in_tasks_of_several_folders_and_keeps_each_kind_of_entry(cluster, tmp_path, monkeypatch):
    """More than 16 ranks: every folder's cluster-level read, then the representative ranks' whole read. The
    folders go to the workers several to a task (one task a rank cost the scheduler and the workers ~6 ms a rank
    at 10,000 ranks besides the read); a representative rank keeps its cluster-level entry beside its whole one,
    so a second read finds every entry and reads nothing."""
    import distributed

    from perfkit.analysis.representatives import representative_ranks

    ranks = 40
    run = tmp_path / f"ranks_{ranks}"
    generate.generate_cluster(run, ranks=ranks, steps=1, slow_ranks=(SLOW_RANK,))
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    submitted = []
    submit = distributed.Client.submit

    def counted(self, function, *args, **kwargs):
        submitted.append(args[0])
        return submit(self, function, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "submit", counted)
    storage = tmp_path / "storage"
    through_dask = loader.load(run, Target(cluster.address, str(storage)), ranks=representative_ranks)
    shown = through_dask.meta.op_ranks
    assert 0 < len(shown) < ranks and SLOW_RANK in shown
    assert_same_run(loader.load(run, ranks=representative_ranks), through_dask)
    # 40 folders on two one-thread workers: tasks of 5 (a quarter of a worker's share), then the shown ranks'
    assert sorted(len(batch) for batch in submitted[:ranks // 5]) == [5] * (ranks // 5)
    assert sum(len(batch) for batch in submitted) == ranks + len(shown)
    written = {path: path.stat().st_mtime_ns for path in entries(storage)}
    assert len(written) == ranks + len(shown)

    submitted.clear()
    assert_same_run(through_dask, loader.load(run, Target(cluster.address, str(storage)), ranks=representative_ranks))
    assert {path: path.stat().st_mtime_ns for path in entries(storage)} == written


def told(storage: Path) -> list[Path]:
    """The outcome files of the tasks done so far."""
    return list((storage / ENTRY_KIND).glob(f"{OUTCOMES}-*/*.json"))


# The workers read the first PASSED folders (across workers: each folder claims a numbered file) and hold every later one
# until the test releases them (a file it writes), so a kill lands when exactly PASSED folders were read, whatever
# the machine's speed.
MID_RUN_RANKS = 16
PASSED = 8
GATE = """
import os, time
from pathlib import Path
from perfkit.io import loader

RELEASE, CLAIMS = Path({release!r}), Path({claims!r})
# Dask imports a preload file twice: the second import must wrap the reader, not the first import's gate
read_folder = getattr(loader._read_folder, "ungated", loader._read_folder)

def claimed(folder):
    # a folder's readers each call the reader function: the folder, not the call, takes a slot
    mine = CLAIMS / ("folder-" + Path(folder).name)
    if mine.exists():
        return True
    for slot in range({passed}):
        try:
            os.close(os.open(CLAIMS / str(slot), os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            continue
        mine.touch()
        return True
    return False

def gated(reader_name, folder, *args, **kwargs):
    if not claimed(folder):
        deadline = time.monotonic() + {wait_s}
        while not RELEASE.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
    return read_folder(reader_name, folder, *args, **kwargs)

gated.ungated = read_folder
loader._read_folder = gated
"""


@pytest.fixture
def gated_cluster(tmp_path):
    """A cluster whose workers read PASSED folders, then hold each until `release` exists; released as it
    stops, so a worker left waiting ends at once."""
    release, claims, preload = tmp_path / "release", tmp_path / "claims", tmp_path / "gate.py"
    claims.mkdir()
    preload.write_text(GATE.format(release=str(release), claims=str(claims), passed=PASSED, wait_s=RUN_S))
    started = LocalCluster(tmp_path / "cluster", preload=preload)
    started.release = release
    yield started
    release.touch()
    started.stop()


def run_killing(cluster: LocalCluster, workers: list[int], run: Path, storage: Path, cache: Path
                ) -> tuple[subprocess.Popen, int]:
    """Start `perfkit summary --dask` on `run` on a gated cluster; once the workers have read the PASSED folders
    (and wait at the gate), kill `workers`. (the command, entries written when they were killed)."""
    # PYTHONFAULTHANDLER: a command that outlasts its bound is stopped by SIGABRT, which prints where it waited
    environment = dict(os.environ, PYTHONPATH=str(REPO), PERFKIT_CACHE_DIR=str(cache), PERFKIT_DASK_TIMEOUT="3",
                       PYTHONFAULTHANDLER="1")
    command = subprocess.Popen([sys.executable, "-m", "perfkit", "summary", "--format", "json", "--dask",
                                cluster.address, "--dask-storage", str(storage), str(run)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment)
    deadline = time.monotonic() + RUN_S
    # every folder let through read (its outcome written, which is its task's last act for it)
    while len(told(storage)) < PASSED and time.monotonic() < deadline and command.poll() is None:
        time.sleep(0.005)
    written = len(entries(storage))
    if command.poll() is not None:
        pytest.fail(f"the run ended (exit {command.returncode}) before a worker could be killed in it: "
                    f"{command.communicate()[1][-2000:]}")
    assert written == PASSED
    for index in workers:
        cluster.kill_worker(index)
    return command, written


def finished(command: subprocess.Popen) -> tuple[str, str]:
    """The command's (stdout, stderr) once it ends within RUN_S; else it is stopped and the test fails with
    every thread's stack: where the wait was."""
    try:
        return command.communicate(timeout=RUN_S)
    except subprocess.TimeoutExpired:
        command.send_signal(signal.SIGABRT)
        _, err = command.communicate(timeout=30)
        pytest.fail(f"perfkit did not end within {RUN_S} s; its threads:\n{err[-6000:]}")


def test_a_worker_killed_mid_run(gated_cluster, tmp_path):
    ranks = MID_RUN_RANKS
    run = generated_run(tmp_path, ranks=ranks)
    alone = perfkit("summary", "--format", "json", str(run), cache=tmp_path / "cache-alone")

    # one of two workers killed: Dask runs its tasks again on the other; the answer is whole
    command, written = run_killing(gated_cluster, [0], run, tmp_path / "storage", tmp_path / "cache-1")
    gated_cluster.release.touch()
    out, err = finished(command)
    assert written < ranks
    assert command.returncode == 0, err
    assert json.loads(out) == json.loads(alone.stdout)


def test_the_last_worker_killed_loads_what_was_read(gated_cluster, tmp_path):
    ranks = MID_RUN_RANKS
    run = generated_run(tmp_path, ranks=ranks)
    # the last worker killed: the ranks read so far load; the others are named, in bounded time
    began = time.monotonic()
    command, written = run_killing(gated_cluster, [0, 1], run, tmp_path / "storage-2", tmp_path / "cache-2")
    out, err = finished(command)
    assert time.monotonic() - began < 60
    assert command.returncode == 0, err
    summary = json.loads(out)
    loaded = summary["ranks"] if "ranks" in summary else summary["meta"]["ranks"]
    assert len(loaded) == PASSED
    missing = set(range(ranks)) - set(loaded)
    (warning,) = [w for w in summary["warnings"] if "not read: no Dask worker left to read it" in w]
    named = {int(name) for name in re.findall(r"rank(\d+)_ascend_pt", warning)}
    assert named and named <= missing
    assert len(missing) <= 3 or f"skipped {len(missing)} folders (" in warning


def test_a_scheduler_that_stops_answering_mid_run(gated_cluster, tmp_path):
    """The scheduler stopped (SIGSTOP), its connections open: no answer ever comes, and no error either. The
    run ends in bounded time with the ranks read so far, the others named."""
    ranks = MID_RUN_RANKS
    run = generated_run(tmp_path, ranks=ranks)
    began = time.monotonic()
    command, _ = run_killing(gated_cluster, [], run, tmp_path / "storage", tmp_path / "cache")
    os.kill(gated_cluster.scheduler.pid, signal.SIGSTOP)
    try:
        out, err = finished(command)
    finally:
        os.kill(gated_cluster.scheduler.pid, signal.SIGCONT)
    assert time.monotonic() - began < 90
    assert command.returncode == 0, err
    summary = json.loads(out)
    assert len(summary["ranks"]) == PASSED
    (warning,) = [w for w in summary["warnings"] if "not read: the Dask scheduler did not answer for 3 s" in w]
    named = {int(name) for name in re.findall(r"rank(\d+)_ascend_pt", warning)}
    assert named and named <= set(range(ranks)) - set(summary["ranks"])


STOP_AFTER_FIRST_PASS = """
import json, os, signal, sys
import perfkit
from perfkit.io import dask_ingest
read = dask_ingest.read_folders
passes = []

def read_then_stop(*arguments):
    got = read(*arguments)
    passes.append(sum(not isinstance(outcome, Exception) for outcome in got))
    if len(passes) == 1:
        for pid, how in json.loads(os.environ["STOP"]):
            os.kill(pid, getattr(signal, how))
    return got

dask_ingest.read_folders = read_then_stop
run = perfkit.load(sys.argv[1], dask=dask_ingest.Target(sys.argv[2], sys.argv[3]))
print(json.dumps({"passes": passes, "ranks": list(map(int, run.ranks)), "op_ranks": run.meta.op_ranks,
                  "warnings": list(run.warnings)}))
"""


@pytest.mark.parametrize("stopped", ["scheduler", "workers"])
def test_a_cluster_that_stops_between_the_passes(cluster, tmp_path, stopped):
    """Every rank's cluster-level files read through the cluster, then the scheduler stops answering (SIGSTOP) or
    every worker is killed before the representative ranks' op-level read: that read ends in bounded time, every
    rank keeps what the first pass read, and the folders whose op-level tables were not read are named."""
    ranks = 24
    run = generated_run(tmp_path, ranks=ranks)
    stop = ([(cluster.scheduler.pid, "SIGSTOP")] if stopped == "scheduler" else
            [(worker.pid, "SIGKILL") for worker in cluster.workers])
    environment = dict(os.environ, PYTHONPATH=str(REPO), PERFKIT_CACHE_DIR=str(tmp_path / "cache"),
                       PERFKIT_DASK_TIMEOUT="3", STOP=json.dumps(stop), PYTHONFAULTHANDLER="1")
    began = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", STOP_AFTER_FIRST_PASS, str(run), cluster.address,
                               str(tmp_path / "storage")], capture_output=True, text=True, env=environment,
                              timeout=RUN_S)
    finally:
        os.kill(cluster.scheduler.pid, signal.SIGCONT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert time.monotonic() - began < 90
    result = json.loads(done.stdout)
    first, second = result["passes"]  # the second pass read nothing through the cluster
    assert first >= ranks and second == 0
    assert result["ranks"] == list(range(ranks))
    why = ("the Dask scheduler did not answer for 6 s" if stopped == "scheduler" else
           "no Dask worker is connected to the scheduler (waited 3 s)")
    (unread,) = [w for w in result["warnings"] if f"op-level tables not read (not read: {why})" in w]
    assert re.findall(r"rank\d+_ascend_pt", unread)
    assert result["op_ranks"] == []  # no rank's op-level numbers: none is claimed


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="hides a rank's files from the workers in a mount namespace (root and unshare)")
def test_a_rank_folder_the_workers_cannot_read(tmp_path):
    run = generated_run(tmp_path, ranks=6)
    hidden = run / "rank4_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    # the workers see an empty folder there, as where a share is not mounted alike
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs none "{hidden}" && exec "$0" "$@"']
    cluster = LocalCluster(tmp_path / "cluster", wrap=wrap)
    try:
        result = perfkit("summary", "--format", "json", "--dask", cluster.address, "--dask-storage",
                         str(tmp_path / "storage"), str(run), cache=tmp_path / "cache")
    finally:
        cluster.stop()
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert [w for w in summary["warnings"] if "rank4_ascend_pt" in w and "cannot be read on Dask worker" in w]
    # the rest is the run without that rank, read in process
    shutil.rmtree(run / "rank4_ascend_pt")
    without = json.loads(perfkit("summary", "--format", "json", str(run), cache=tmp_path / "cache-alone").stdout)
    assert summary["ranks"] == without["ranks"] == [0, 1, 2, 3, 5]
    assert {k: v for k, v in summary.items() if k not in ("warnings", "run")} == \
        {k: v for k, v in without.items() if k not in ("warnings", "run")}


def test_an_unreachable_scheduler_is_one_line_in_bounded_time(tmp_path):
    run = generated_run(tmp_path, ranks=2)
    began = time.monotonic()
    result = perfkit("summary", str(run), "--dask", f"tcp://127.0.0.1:{free_port()}", cache=tmp_path / "cache",
                     env={"PERFKIT_DASK_TIMEOUT": "2"})
    assert time.monotonic() - began < 30
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "cannot reach the Dask scheduler within 2 s" in result.stderr
    result = perfkit("ranks", str(run), "--dask", "not an address", cache=tmp_path / "cache")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "is no Dask scheduler address" in result.stderr


@pytest.mark.parametrize("address, env, message", [
    ("tls://127.0.0.1:{port}", {}, "is a TLS address, and Dask has no TLS settings here"),
    ("tcp://" + "a" * 5_000 + ":8786", {}, "a host name of 5,000 characters"),
    # TLS settings that cannot start a connection: the client fails in its constructor, and is closed here
    ("tls://127.0.0.1:{port}", {"DASK_DISTRIBUTED__COMM__TLS__CA_FILE": "{garbage}",
                                "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": "{garbage}"}, "cannot reach the Dask"),
    ("tcp://127.0.0.1:{port}", {"PERFKIT_DASK_TIMEOUT": "inf"}, "PERFKIT_DASK_TIMEOUT='inf': give seconds"),
    ("tcp://127.0.0.1:{port}", {"PERFKIT_DASK_TIMEOUT": "1e400"}, "PERFKIT_DASK_TIMEOUT='1e400': give seconds"),
], ids=["tls-unset", "long-host", "tls-broken", "timeout-inf", "timeout-1e400"])
def test_a_hostile_address_or_timeout_is_one_line_and_nothing_after(address, env, message, tmp_path):
    """Nothing after the line: a client whose start failed used to print a traceback from its cleanup at exit."""
    run = generated_run(tmp_path, ranks=2)
    (tmp_path / "garbage.pem").write_text("not a certificate")
    env = {key: value.format(garbage=tmp_path / "garbage.pem") for key, value in env.items()}
    result = perfkit("summary", str(run), "--dask", address.format(port=free_port()), cache=tmp_path / "cache",
                     env={"PERFKIT_DASK_TIMEOUT": "2", **env})
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr[-3000:]
    assert message in result.stderr and len(result.stderr) < 1000


def test_storage_this_machine_cannot_write_is_one_line(cluster, tmp_path):
    run = generated_run(tmp_path, ranks=2)
    (tmp_path / "a_file").write_text("")
    result = perfkit("summary", str(run), "--dask", cluster.address, "--dask-storage", str(tmp_path / "a_file/sub"),
                     cache=tmp_path / "cache")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "cannot write the Dask storage here" in result.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="gives the workers their own /tmp view in a mount namespace (root and unshare)")
def test_storage_the_workers_do_not_share_is_one_line(tmp_path):
    run = generated_run(tmp_path, ranks=2)
    storage = tmp_path / "storage"
    storage.mkdir()
    # the workers' storage path is another folder than this machine's (a local disk on each node)
    wrap = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs none "{storage}" && exec "$0" "$@"']
    cluster = LocalCluster(tmp_path / "cluster", wrap=wrap)
    try:
        result = perfkit("summary", str(run), "--dask", cluster.address, "--dask-storage", str(storage),
                         cache=tmp_path / "cache")
    finally:
        cluster.stop()
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "do not see what this machine writes there" in result.stderr


class _Future:
    """A task future as _gather sees it: its status, and no exception where the task did not raise."""

    def __init__(self, status: str):
        self.status = status

    def exception(self, timeout=None):
        return None


def test_a_task_told_done_then_lost_with_its_worker_keeps_the_outcome_it_wrote(tmp_path):
    """The CI flake: as_completed hands back a future whose worker was killed just after it finished (status
    "lost", no exception). Its outcome file is in the storage: the rank is read, not named as failed; a lost task
    that wrote nothing is named. Of a task of several folders that failed, the folders it wrote are read."""
    import contextlib
    from types import SimpleNamespace

    from fsspec.implementations.local import LocalFileSystem

    from perfkit.core.errors import FileFormatError
    from perfkit.io.dask_ingest import _gather
    written, unwritten = tmp_path / "written.json", tmp_path / "unwritten.json"
    written.write_text('{"entry": "x"}')
    futures = {_Future("finished"): [("rank0", str(tmp_path / "finished.json"))],
               _Future("lost"): [("rank1", str(written))], _Future("lost"): [("rank2", str(unwritten))],
               # a task of several folders that failed after the first: that one's outcome is in the storage
               _Future("error"): [("rank3", str(written)), ("rank4", str(unwritten))]}

    class Completed:
        def __init__(self, pending):
            self.batches = [pending]

        def next_batch(self, block):
            return self.batches.pop() if self.batches else []

    client = SimpleNamespace(status="running", as_current=contextlib.nullcontext, nthreads=lambda **_: {"w": 1})
    distributed = SimpleNamespace(as_completed=Completed, TimeoutError=TimeoutError)
    outcomes = _gather(client, distributed, futures, Target("tcp://x:1", str(tmp_path)), LocalFileSystem())
    assert outcomes["rank0"] == str(tmp_path / "finished.json") and outcomes["rank1"] == str(written)
    assert isinstance(outcomes["rank2"], FileFormatError) and "its Dask task failed" in str(outcomes["rank2"])
    assert outcomes["rank3"] == str(written)
    assert isinstance(outcomes["rank4"], FileFormatError) and "its Dask task failed" in str(outcomes["rank4"])

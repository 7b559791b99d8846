"""perfkit tune against hostile input and hostile processes (issue 38 items 7-10, 12; issue 37 item 10): a
damaged tune.json, budgets that must be deadlines, signals to tune and to profile, Dask addresses and timeouts.
The loop runs with test_tune's fake trainer; the process tests run fake scripts that never import MindSpore."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import broken
import pytest
from click.testing import CliRunner
from test_tune import AVX2, WORKERS, FakeTrainer, by_label, fixed, tuner

from perfkit.apps.cli import main
from perfkit.apps.tune import LEDGER, Ledger
from perfkit.core.errors import PerfkitError

# what a damaged or hand-edited ledger may hold in place of any one value
HOSTILE = [broken.nested(b"[", 5_000).decode(), broken.nested(b"{", 3_000).decode(), "1" * 400, "9e999", "-9e999",
           "NaN", "Infinity", '"\\ud800"', "-1", "0", "null", "[]", "{}", '"x"', "true", "1.5", '"../../outside"',
           str(10**25)]


def _slots(node, path=()):
    """The path of every value in a decoded JSON document, keys and indexes from the top."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*path, key)
        yield from _slots(value, (*path, key))


def _replaced(data, path, marker="@@VALUE@@"):
    copy = json.loads(json.dumps(data))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    return json.dumps(copy)


@pytest.fixture(scope="module")
def interrupted_tune(tmp_path_factory) -> Path:
    """A tune folder as Ctrl-C leaves it: the baseline and one candidate's first runs, candidates recorded."""
    folder = tmp_path_factory.mktemp("ledger")
    trainer = FakeTrainer({AVX2.label: 0.5}, interrupt_at=3)
    assert tuner(folder, trainer, fixed(AVX2, WORKERS), repeats=2).tune().interrupted
    return folder / "tune"


def test_every_damaged_value_of_the_ledger_is_refused_naming_it_or_goes_on(interrupted_tune, tmp_path):
    """Each value of a real ledger replaced by each hostile one (~740 ledgers): opening it for a resume is a
    PerfkitError naming tune.json, or the ledger is sound (~80: a null error, an empty list of notes, …) and a
    resume of every tenth of those goes on to a result."""
    data = json.loads((interrupted_tune / LEDGER).read_text())
    refused = resumed = 0
    for path in _slots(data):
        for hostile in HOSTILE:
            text = _replaced(data, path).replace('"@@VALUE@@"', hostile, 1)
            (interrupted_tune / LEDGER).write_text(text)
            try:
                Ledger.open(interrupted_tune, {"kind": "fake"}, 2)
            except PerfkitError as exc:
                assert str(interrupted_tune / LEDGER) in str(exc) and "\n" not in str(exc), (path, hostile)
                refused += 1
                continue
            resumed += 1
            if resumed % 10:
                continue
            scratch = tmp_path / f"resume_{resumed}"
            shutil.copytree(interrupted_tune, scratch / "tune")
            result = tuner(scratch, FakeTrainer({AVX2.label: 0.5}), fixed(AVX2, WORKERS), repeats=2).tune()
            assert (result.experiments or result.stopped) and not result.interrupted, (path, hostile)
    assert refused > 500 and resumed > 20
    (interrupted_tune / LEDGER).write_text(json.dumps(data))


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 1}', broken.nested(b"{", 3_000).decode(), "\udcff",
                                  '{"version": 1, "baseline": {"kind": "fake"}, "repeats": 1e400}'])
def test_a_damaged_ledger_is_one_line_and_exit_2_or_fresh_on_request(text, tmp_path):
    folder = tmp_path / "tune"
    folder.mkdir()
    (folder / LEDGER).write_text(text, errors="surrogateescape")
    result = CliRunner().invoke(main, ["tune", "--output", str(folder), "--steps", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.count("\n") == 1 and f"{folder / LEDGER}" in result.output and "--fresh" in result.output
    fresh = tuner(tmp_path, FakeTrainer({}), fixed(AVX2), repeats=1)
    fresh.fresh = True
    assert by_label(fresh.tune())[AVX2.label]["verdict"] != "not run"
    assert json.loads((folder / LEDGER).read_text())["baseline"] == {"kind": "fake"}


# ---- budgets and signals: every process a run started is gone after it -------------------------------------

# A user's script that never imports MindSpore: it forks a child that holds its stdout, writes both pids, then
# sleeps; `stubborn` ignores SIGINT and SIGTERM (a hang only a kill ends).
FAKE_SCRIPT = '''
import os, signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = os.fork()
if child == 0:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    time.sleep(600)
    os._exit(0)
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(f"{os.getpid()} {child}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
print("started", flush=True)
time.sleep(0 if sys.argv[2] == "exits" else 600)
'''
BOUND_S = 180   # generous: a loaded 2-core machine starts perfkit (pandas, click) in seconds, not minutes


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] != "Z"


def _descendants(pid: int) -> set[int]:
    from perfkit.profiler.launch import processes
    table, found, frontier = processes(), set(), [pid]
    while frontier:
        parent = frontier.pop()
        children = {child for child, (ppid, _) in table.items() if ppid == parent} - found
        found |= children
        frontier += children
    return found


def _poll(condition, bound_s: float = BOUND_S) -> bool:
    import time
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _script_pids(path: Path) -> list[int]:
    assert _poll(path.exists), "the script never started"
    return [int(pid) for pid in path.read_text().split()]


def _start(args: list[str], tmp_path: Path, **popen):
    import os
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "perfkit", *args], cwd=tmp_path, env=env, start_new_session=True,
                            stdin=subprocess.DEVNULL, **popen)


@pytest.fixture
def fake_script(tmp_path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(FAKE_SCRIPT)
    return script


pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")


def test_max_minutes_is_a_deadline_that_kills_a_hanging_run(fake_script, tmp_path):
    """A baseline that ignores SIGINT/SIGTERM and never ends, --max-minutes 0.25 (15 s): tune ends in one line,
    exit 2, and nothing it started is left: profile, the script, the child the script forked."""
    import subprocess
    import time
    tune = _start(["tune", "--max-minutes", "0.25", "--output", "out", "--", "python", str(fake_script),
                   str(tmp_path / "pids"), "stubborn"], tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  text=True)
    started: set[int] = set()
    try:
        # what tune started, until the script has said its pids (or tune ended: a machine too loaded to start
        # the script within the deadline still shows the deadline kept)
        while not (tmp_path / "pids").exists() and tune.poll() is None:
            started |= _descendants(tune.pid)
            time.sleep(0.1)
        if (tmp_path / "pids").exists():
            started |= set(_script_pids(tmp_path / "pids")) | _descendants(tune.pid)
        _, err = tune.communicate(timeout=BOUND_S)
    finally:
        tune.kill()
    assert tune.returncode == 2 and "Traceback" not in err, err
    assert "--max-minutes 0.25 ended before the baseline's first run did" in err.splitlines()[-1]
    assert started and _poll(lambda: not any(_alive(pid) for pid in started)), [p for p in started if _alive(p)]


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGKILL"])
def test_a_signal_to_tune_leaves_no_process_behind(signum, fake_script, tmp_path):
    """SIGTERM: the run is stopped (the script gets SIGINT through profile), tune exits 143 with its result;
    SIGKILL: tune cannot act, its profile child (SIGINTed by the kernel as its parent dies) stops the script.
    Either way profile, the script and the child the script forked are all gone."""
    import signal
    import subprocess
    tune = _start(["tune", "--output", "out", "--", "python", str(fake_script), str(tmp_path / "pids"), "waits"],
                  tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = _script_pids(tmp_path / "pids")
        started = _descendants(tune.pid) | set(pids)
        tune.send_signal(getattr(signal, signum))
        out, err = tune.communicate(timeout=BOUND_S)
    finally:
        tune.kill()
    if signum == "SIGTERM":
        assert tune.returncode == 143 and "Traceback" not in err, err
        assert "stopped: interrupted (SIGTERM)" in out
    assert _poll(lambda: not any(_alive(pid) for pid in started)), [pid for pid in started if _alive(pid)]


def test_a_child_forked_by_the_script_does_not_outlive_profile_holding_its_stdout(fake_script, tmp_path):
    """The script exits at once, its forked child would sleep 10 minutes holding the pipe: profile kills the
    script's process group as the script ends, so whoever reads profile's output sees its end."""
    import subprocess
    profile = _start(["profile", "--output", "run", "--", "python", str(fake_script), str(tmp_path / "pids"),
                      "exits"], tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = profile.communicate(timeout=BOUND_S)
    finally:
        profile.kill()
    assert profile.returncode == 0 and "started" in out, out
    assert not any(_alive(pid) for pid in _script_pids(tmp_path / "pids"))


# ---- issue 37 item 10: a custom loop, a mistyped script ------------------------------------------------------

def test_tune_of_a_custom_loop_says_the_real_cause_not_a_handled_error(tmp_path):
    """tests/scripts/run_custom_loop_tune.py (MindSpore 2.10, a PyNative value_and_grad loop without step markers,
    which logs the traceback of an ImportError it handles): the baseline gives tune no step times, and tune says
    so (the script marks no steps, --warmup 1 left the profiler nothing) in one line, never blaming the handled
    ImportError (about 20 s)."""
    import subprocess
    scripts = Path(__file__).resolve().parent / "scripts"
    tune = _start(["tune", "--repeats", "1", "--output", str(tmp_path / "out"), "--", "python",
                   "run_custom_loop_tune.py"], scripts, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = tune.communicate(timeout=600)
    finally:
        tune.kill()
    last = err.splitlines()[-1]
    assert tune.returncode == 2 and "Traceback" not in err, err
    assert "the baseline failed (the script marks no steps" in last and "perfkit.profiling" in last, last
    assert "ModuleNotFoundError" not in last and "tensorboardX" not in last
    # the handled traceback is in the run's log, where the user can read it, and is no error of the run
    log = (tmp_path / "out" / "baseline" / "repeat_1.log").read_text()
    assert "ModuleNotFoundError" in log and "trained 4 steps" in log


def test_a_failed_tune_of_a_mistyped_script_does_not_block_the_next(fake_script, tmp_path):
    first = CliRunner().invoke(main, ["tune", "--output", str(tmp_path / "out"), "--", "python", "trian.py"])
    assert first.exit_code == 2 and "the baseline failed" in first.output and "trian.py" in first.output
    ledger = json.loads((tmp_path / "out" / LEDGER).read_text())
    assert ledger["baseline"]["command"] == ["python", "trian.py"]
    second = CliRunner().invoke(main, ["tune", "--output", str(tmp_path / "out"), "--", "python", str(fake_script),
                                       str(tmp_path / "pids"), "exits"])
    assert "another baseline" not in second.output and "Traceback" not in second.output, second.output
    assert json.loads((tmp_path / "out" / LEDGER).read_text())["baseline"]["command"][1] == str(fake_script)


def test_a_run_past_the_deadline_is_not_recorded_and_a_rerun_makes_it(tmp_path):
    from test_tune import Clock
    clock = Clock()
    cut = FakeTrainer({}, clock=clock, seconds=200)
    with pytest.raises(PerfkitError, match="ended before the baseline's first run did"):
        tuner(tmp_path, cut, fixed(AVX2), max_minutes=3).tune()
    assert clock.now == pytest.approx(180)  # killed at the deadline, not at the run's end
    assert json.loads((tmp_path / "tune" / LEDGER).read_text())["runs"] == []
    again = FakeTrainer({}, clock=Clock(), seconds=60)
    result = tuner(tmp_path, again, fixed(AVX2), repeats=3, max_minutes=3.5).tune()
    assert again.calls[0] == "baseline/repeat_1" and "--max-minutes 3.5 reached" in result.stopped


@pytest.mark.parametrize("args, message", [
    (["--max-minutes", "nan"], "--max-minutes nan: give a number of minutes"),
    (["--max-minutes", "inf"], "--max-minutes inf: give a number of minutes"),
    (["--repeats", str(10**25)], "--repeats"),
])
def test_budgets_that_are_no_bound_are_refused_in_one_line(args, message):
    result = CliRunner().invoke(main, ["tune", *args, "--steps", "1"])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, result.output


def test_the_last_lines_of_a_huge_log_are_read_from_its_end(tmp_path):
    """A run's 100 MB output (sparse: no disk used) ending in a traceback: its last lines are the traceback's,
    read without reading the 100 MB."""
    import tracemalloc

    from perfkit.apps.tune_runners import _tail
    log = tmp_path / "repeat_1.log"
    with open(log, "wb") as handle:
        handle.truncate(100 * 2**20)
        handle.seek(0, 2)
        handle.write(b"\nTraceback (most recent call last):\n  File \"train.py\", line 3\nValueError: the user's bug\n"
                     b"perfkit: the script failed (exit code 1)\n")
    tracemalloc.start()
    try:
        tail = _tail(log)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tail.splitlines()[-1] == "ValueError: the user's bug" and tail.splitlines()[0].startswith("Traceback")
    assert peak < 10 * 2**20, peak

"""Run structures perfkit had never seen (issue 23), on real MindSpore 2.10 CPU runs made by tests/scripts/diag_runs.py:
several profiler cycles or windows of one rank, msrun's CPU ranks, steady steps on one cycle, a PyNative custom loop.
Expected numbers are computed here from the raw files with plain csv/json."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.cli import main

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

def _free_port() -> int:
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
    "dash": lambda run, tmp: ["dash", str(run), "--port", str(_free_port())],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("run, first, second", [
    (REPEAT2, "vm_5942_20261124202935871_ascend_ms", "vm_5942_20261124202937099_ascend_ms"),
    # the later window sorts first as text ("start12" < "start3"): the order named is the profiling order
    (DYNAMIC, "rank0_start3_stop4/vm_6077_20261124202944069_ascend_ms",
     "rank0_start12_stop13/vm_6077_20261124202948979_ascend_ms"),
], ids=["repeat2", "dynamic"])
def test_every_command_refuses_several_cycles_of_one_rank_alike(command, run, first, second, tmp_path, cache_dir):
    result = CliRunner().invoke(main, COMMANDS[command](run, tmp_path))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    message = result.output.strip().splitlines()[-1]
    assert f"holds several runs for rank 0, in profiling order: 1) {first}, 2) {second}; pass the folder" in message
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "r.html").exists()


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

"""One run a side: the noise floor follows the load the runs recorded and their own step spread, and a verdict that
cannot decide says what would (`perfkit profile --repeat 3`); runs of different scripts are not like with like.

Real runs: tests/runs/cpu_2_10_speedpair (one script, 4 against 2 hidden layers, 3 repeats each, made at load 3.7-5.1
on 2 CPUs), tests/runs/cpu_2_10_otherscript (another script). Expected numbers come from the manifests (json)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import perfkit
from perfkit.analysis import statistics
from perfkit.apps.cli import main
from perfkit.profiler import runfolder
from perfkit.render.compare import compare_text
from perfkit.views.compare import compare, gate

RUNS = Path(__file__).resolve().parent / "runs"
PAIR = RUNS / "cpu_2_10_speedpair"


def manifest(folder: Path) -> dict:
    return json.loads((folder / "perfkit_run.json").read_text())


def steady_step_ms(folder: Path) -> np.ndarray:
    """The recorded step times but the first (its compile step, 3-9x the others in every run here)."""
    steps = sorted(manifest(folder)["steps"], key=lambda step: step["step"])
    return np.array([(step["end_ns"] - step["begin_ns"]) / 1e6 for step in steps[1:]])


def load_per_cpu(folder: Path) -> float:
    host = manifest(folder)["host"]
    return host["load_average"][0] / host["logical_cpus"]


def test_one_run_a_side_on_a_busy_machine_keeps_the_measured_floor_and_says_how_to_decide():
    a, b = PAIR / "layers4" / "repeat_3", PAIR / "layers2" / "repeat_3"
    assert min(load_per_cpu(a), load_per_cpu(b)) > statistics.QUIET_LOAD_PER_CPU  # made on the busy shared VM
    result = compare(perfkit.load(a), perfkit.load(b))
    verdict = result["verdict"]
    assert verdict["speedup"] == pytest.approx(steady_step_ms(a).mean() / steady_step_ms(b).mean())
    assert 1.5 < verdict["speedup"] < statistics.NOISE_FLOOR_PCT / 100 + 1  # a real change, under the floor
    assert verdict["kind"] == statistics.NO_CHANGE and verdict["noise_floor_pct"] == statistics.NOISE_FLOOR_PCT
    text = compare_text(result)
    line = next(line for line in text.splitlines() if line.startswith("verdict"))
    assert f"started at load {load_per_cpu(a):.2f} and {load_per_cpu(b):.2f} per CPU" in line
    assert line.endswith("one run a side cannot decide: perfkit profile --repeat 3 each side, then compare the "
                         "folders")


def test_three_runs_a_side_decide_the_same_change():
    result = CliRunner().invoke(main, ["compare", str(PAIR / "layers4"), str(PAIR / "layers2"), "--format", "json"])
    assert result.exit_code == 0, result.output
    verdict = json.loads(result.stdout)["verdict"]
    means = [np.log([steady_step_ms(PAIR / side / f"repeat_{n}").mean() for n in (1, 2, 3)])
             for side in ("layers4", "layers2")]
    assert verdict["basis"] == "run means" and verdict["kind"] == "faster"
    assert verdict["speedup"] == pytest.approx(math.exp(means[0].mean() - means[1].mean()))
    assert "--repeat" not in compare_text({**json.loads(result.stdout)})


def _quiet_copy(tmp_path: Path, folder: Path, name: str, load: float) -> Path:
    """The run with its recorded load average set to `load` per CPU: a quiet machine, faked explicitly."""
    target = tmp_path / name
    shutil.copytree(folder, target)
    data = manifest(target)
    data["host"]["load_average"] = [load * data["host"]["logical_cpus"], 0.0, 0.0]
    (target / "perfkit_run.json").write_text(json.dumps(data))
    return target


def spread_floor_pct(a: Path, b: Path) -> float:
    """The 95 % t half-width of one steady step of each run on the log scale, in % (computed from the manifests)."""
    logs = [np.log(steady_step_ms(folder)) for folder in (a, b)]
    half = statistics.t_quantile(len(logs[0]) + len(logs[1]) - 2) * math.sqrt(sum(np.var(x, ddof=1) for x in logs))
    return max(100 * math.expm1(half), statistics.QUIET_FLOOR_MIN_PCT)


@pytest.mark.parametrize("b_repeat, kind", [(3, statistics.NO_CHANGE), (2, "faster")])
def test_on_a_quiet_machine_one_run_a_side_is_judged_by_the_runs_step_spread(tmp_path, uncached, b_repeat, kind):
    a = _quiet_copy(tmp_path, PAIR / "layers4" / "repeat_3", "a", 0.1)
    b = _quiet_copy(tmp_path, PAIR / "layers2" / f"repeat_{b_repeat}", "b", 0.2)
    judged = statistics.verdict([perfkit.load(a)], [perfkit.load(b)])
    # not the measured 215 %: layers4/repeat_3's steps spread widely (83-136 ms), so the floor is still wide
    assert judged.noise_floor_pct == pytest.approx(spread_floor_pct(a, b))
    assert judged.noise_floor_pct < statistics.NOISE_FLOOR_PCT
    assert judged.kind == kind and (kind == "faster") == (100 * (judged.speedup - 1) > judged.noise_floor_pct)
    assert judged.noise_floor_source.startswith("from the runs' step spread: the runs started at load 0.10 and "
                                                "0.20 per CPU")
    # a floor the user gives still decides
    assert statistics.verdict([perfkit.load(a)], [perfkit.load(b)], noise_floor_pct=500.0).kind == \
        statistics.NO_CHANGE


def test_a_quiet_run_against_one_without_a_recorded_load_keeps_the_measured_floor(tmp_path, uncached):
    a = _quiet_copy(tmp_path, PAIR / "layers4" / "repeat_3", "a", 0.1)
    b = tmp_path / "b"
    shutil.copytree(PAIR / "layers2" / "repeat_3", b)
    data = manifest(b)
    del data["host"]["load_average"]
    (b / "perfkit_run.json").write_text(json.dumps(data))
    judged = statistics.verdict([perfkit.load(a)], [perfkit.load(b)])
    assert judged.noise_floor_pct == statistics.NOISE_FLOOR_PCT and judged.kind == statistics.NO_CHANGE
    assert "the other's not recorded" in judged.noise_floor_source


def test_perfkit_profile_records_the_load_as_the_run_starts(tmp_path, monkeypatch):
    monkeypatch.setattr(runfolder.os, "getloadavg", lambda: (3.14159, 2.0, 1.0))
    monkeypatch.setattr(runfolder.os, "cpu_count", lambda: 2)
    runfolder.write_manifest(tmp_path, {"status": "running"})
    host = manifest(tmp_path)["host"]
    assert host["load_average"] == [3.14, 2.0, 1.0] and host["logical_cpus"] == 2


def test_another_script_is_not_like_with_like_and_the_gate_refuses_it():
    speedpair, other = perfkit.load(PAIR / "layers2" / "repeat_1"), perfkit.load(RUNS / "cpu_2_10_otherscript")
    scripts = [Path(manifest(folder)["script"]).name
               for folder in (PAIR / "layers2" / "repeat_1", RUNS / "cpu_2_10_otherscript")]
    assert scripts == ["run_speedpair.py", "model_train.py"]
    result = compare(speedpair, other)
    assert result["incomparable"] == ["script"]
    assert ("NOT LIKE WITH LIKE: A and B differ in script (run_speedpair.py vs model_train.py)"
            in compare_text(result))
    with pytest.raises(perfkit.PerfkitError, match="differ in script"):
        gate(result, fail_if_slower_pct=5)
    # the same script with other options is one setup: no banner
    same = compare(perfkit.load(PAIR / "layers4" / "repeat_1"), speedpair)
    assert same["incomparable"] == [] and "NOT LIKE WITH LIKE" not in compare_text(same)


def test_a_quiet_run_with_too_few_steps_for_a_spread_keeps_the_measured_floor():
    """The seed's legacy runs hold 2 steady steps each (steps 2-3): too few to estimate a run's own noise."""
    runs = [perfkit.load(RUNS / name) for name in ("seed_1_feed_fp32", "seed_2_sink_fp32")]
    assert [len(statistics.step_totals(run.steps)) for run in runs] == [2, 2]
    for run in runs:  # a quiet machine, faked explicitly: these layouts record no load
        run.meta.host = {"load_average": [0.2, 0.2, 0.2], "logical_cpus": 2}
    judged = statistics.verdict(runs[:1], runs[1:])
    assert judged.noise_floor_pct == statistics.NOISE_FLOOR_PCT
    assert "started at load 0.10 and 0.10 per CPU" in judged.noise_floor_source

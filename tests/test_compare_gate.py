"""`perfkit compare --fail-if-slower / --fail-on-new`: the regression gate for CI (exit 0 / 1 / 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS
from test_advisor import seed_feed_run
from test_compare import fixed_run, manifest_step_ms

import perfkit
from perfkit.analysis.measures import step_means
from perfkit.apps.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "sample_runs"
needs_samples = pytest.mark.skipif(not all((SAMPLES / n).is_dir() for n in ("cpu_default", "cpu_ranks2")),
                                   reason="sample_runs not made")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))


def gate(*args):
    """The gate with a 10 % noise floor for single runs: how far the sample runs of one setting land apart on a
    quiet machine (sample_runs/README.md); the default measured floor (busy shared VM) is ~3x."""
    return CliRunner().invoke(main, ["compare", "--noise-floor", "10", *map(str, args)])


def slowed_copy(source: Path, folder: Path, added_ms: float) -> Path:
    """Crafted from a real run: a copy of `source` whose recorded step times are `added_ms` longer each (as if an
    op got that much slower), written into its perfkit_run.json; everything else as recorded."""
    shutil.copytree(source, folder)
    manifest_path = folder / "perfkit_run.json"
    manifest = json.loads(manifest_path.read_text())
    for step in manifest["steps"]:
        step["end_ns"] += int(added_ms * 1e6)
    manifest_path.write_text(json.dumps(manifest))
    return folder


@needs_samples
def test_same_run_twice_passes():
    result = gate(SAMPLES / "cpu_default", SAMPLES / "cpu_default", "--fail-if-slower", 0, "--fail-on-new", "medium")
    assert result.exit_code == 0, result.output
    assert "gate failed" not in result.stderr


@needs_samples
def test_one_rank_against_two_fails_with_the_percentage():
    """cpu_ranks2 trains the same network and per-rank batch on two ranks sharing two cores: ~3x slower steps
    of twice the samples (global batch 64 vs 32), so the gate judges the time per sample: ~1.5x slower."""
    baseline, candidate = manifest_step_ms(SAMPLES / "cpu_default") / 32, manifest_step_ms(SAMPLES / "cpu_ranks2") / 64
    expected_pct = 100 * (candidate.mean() / baseline.mean() - 1)
    result = gate(SAMPLES / "cpu_default", SAMPLES / "cpu_ranks2", "--fail-if-slower", 5)
    assert result.exit_code == 1, result.output
    reason = result.stderr.strip()
    assert "\n" not in reason and reason.startswith("perfkit: gate failed: slower:")
    assert f"B is {expected_pct:+.1f} % against A (limit +5 %)" in reason
    assert reason.endswith(f"slower: speedup {baseline.mean() / candidate.mean():.2f}x "
                           f"(95 % {baseline.mean() / candidate.mean() / 1.1:.2f}-"
                           f"{baseline.mean() / candidate.mean() * 1.1:.2f}x, noise floor 10 %, per sample: "
                           "global batch 32 vs 64)")  # compare's verdict
    assert gate(SAMPLES / "cpu_ranks2", SAMPLES / "cpu_default", "--fail-if-slower", 5).exit_code == 0  # faster
    payload = json.loads(gate(SAMPLES / "cpu_default", SAMPLES / "cpu_ranks2", "--fail-if-slower", 5,
                              "--format", "json").stdout)
    assert payload["gate"]["failed"] is True and payload["verdict"]["kind"] == "slower"
    assert 100 * (1 / payload["verdict"]["speedup"] - 1) == pytest.approx(expected_pct)


@needs_samples
def test_a_slowed_copy_fails_and_a_slightly_slowed_one_is_within_the_noise(tmp_path):
    baseline = manifest_step_ms(SAMPLES / "cpu_default")
    slow = slowed_copy(SAMPLES / "cpu_default", tmp_path / "slow", added_ms=600.0)
    expected_pct = 100 * 600.0 / baseline.mean()
    result = gate(SAMPLES / "cpu_default", slow, "--fail-if-slower", 10, "--format", "markdown")
    assert result.exit_code == 1, result.output
    assert f"B is {expected_pct:+.1f} % against A (limit +10 %)" in result.stderr
    assert result.stdout.startswith("### perfkit compare:") and "**Gate: failed** — slower:" in result.stdout
    assert "| setting | A | B |" not in result.stdout  # nothing recorded differs but the step times
    # 40 ms more per step is +3.5 %, above a 2 % limit but well inside the 10 % noise floor
    bit_slower = slowed_copy(SAMPLES / "cpu_default", tmp_path / "bit_slower", added_ms=40.0)
    result = gate(SAMPLES / "cpu_default", bit_slower, "--fail-if-slower", 2)
    assert result.exit_code == 0, result.output
    assert "perfkit: gate: not failed, within the noise: B is +3.5 %" in result.stderr


@pytest.mark.parametrize("baseline, candidate, setting", [
    (SAMPLES / "cpu_default", FIXTURE_RUNS["legacy_run_2"], "device: CPU in"),            # CPU vs Ascend
    (FIXTURE_RUNS["legacy_run_2"], FIXTURE_RUNS["legacy_ut"], "network: AlexNet in"),     # AlexNet vs LeNet5
])
def test_mismatched_runs_are_refused_with_exit_2(baseline, candidate, setting):
    if not Path(baseline).is_dir():
        pytest.skip("sample_runs not made")
    result = gate(baseline, candidate, "--fail-if-slower", 5)
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith("perfkit: error: the gate compares runs of one setup")
    assert setting in line and "Traceback" not in result.output
    assert gate(baseline, candidate).exit_code == 0  # a plain compare still compares them


def test_a_batch_change_is_gated_per_sample():
    """The real batch 32 / 16 pair (sample_runs/cpu_avx2, cpu_avx2_b16) is one setup judged per sample, not
    refused: the gate's line carries the per-sample verdict and B's time per sample against A's (B takes
    1.26x A's step for half the samples: 2.5x the time per sample, beyond a 10 % noise floor)."""
    baseline, candidate = SAMPLES / "cpu_avx2", SAMPLES / "cpu_avx2_b16"
    result = gate(baseline, candidate, "--fail-if-slower", 5, "--format", "json")
    assert result.exit_code == 1, result.output
    assert "per sample: global batch 32 vs 16" in result.stderr
    assert json.loads(result.stdout)["gate"]["failed"] is True
    per_sample = [step_means(perfkit.load(run).steps)["total_ms"] / batch
                  for run, batch in ((baseline, 32), (candidate, 16))]
    assert f"B is {100 * (per_sample[1] / per_sample[0] - 1):+.1f} % against A" in result.stderr


@pytest.fixture
def crafted(monkeypatch):
    """The seed's feed-mode run and its fix (sink, O3): crafted, as no real pair shows findings appearing."""
    runs = {"before": seed_feed_run(path="before"), "after": fixed_run()}
    monkeypatch.setattr("perfkit.apps.cli._load", lambda path, cycle=None: runs[path])


def test_fail_on_new_findings(crafted):
    regressed = gate("after", "before", "--fail-on-new", "high", "--format", "json")
    assert regressed.exit_code == 1
    payload = json.loads(regressed.stdout)
    new_high = [f["id"] for f in payload["new_findings"] if f["severity"] == "high"]
    assert new_high and payload["gate"]["failed"] is True
    *notes, reason = regressed.stderr.strip().splitlines()
    assert notes == ["perfkit: warning: batch size unknown in fixed and before: samples/s unknown, time per step "
                     "compared; give the global batch with --batch-size N",
                     "perfkit: gate: network not checked: unknown in fixed and before"
                     ]  # no op names, no config
    assert reason == ("perfkit: gate failed: new finding" + ("s" if len(new_high) > 1 else "")
                                        + " at or above high: "
                                        + ", ".join(f"{i} (high)" for i in new_high))
    assert gate("before", "after", "--fail-on-new", "medium").exit_code == 0  # the fix resolves, adds nothing


def test_no_steps_cannot_be_gated_on_step_time():
    no_steps = FIXTURE_RUNS["minddata_job1"]
    result = gate(no_steps, no_steps, "--fail-if-slower", 5)
    assert result.exit_code == 2 and "the gate needs step times in both runs" in result.stderr

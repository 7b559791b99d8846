"""statistics.verdict over groups of runs: run means, the noise floor, per-sample time when batches differ.

Runs are sample_runs/cpu_default (real, batch 32) and copies of it whose manifest batch is changed to 16 (crafted
from that run's structure: only perfkit_run.json's config.batch_size differs)."""

import csv
import json
import math
import shutil
from html import escape
from pathlib import Path

import numpy as np
import pytest

import perfkit
from perfkit.analysis import statistics
from perfkit.views import compare

SAMPLE = Path(__file__).resolve().parent.parent / "sample_runs" / "cpu_default"


def _copy_with_batch(tmp_path: Path, name: str, batch: int) -> Path:
    target = tmp_path / name
    shutil.copytree(SAMPLE, target)
    manifest = json.loads((target / "perfkit_run.json").read_text())
    manifest["config"]["batch_size"] = batch
    (target / "perfkit_run.json").write_text(json.dumps(manifest))
    return target


def test_a_run_against_itself_is_no_change():
    run = perfkit.load(SAMPLE)
    result = statistics.verdict([run], [run])
    assert result.kind == statistics.SAME_RUN and result.speedup == 1.0


def test_batch_32_vs_16_is_judged_per_sample(tmp_path):
    run_a = perfkit.load(SAMPLE)
    run_b = perfkit.load(_copy_with_batch(tmp_path, "b16", 16))
    result = statistics.verdict([run_a], [run_b], noise_floor_pct=10.0)  # a quiet machine's floor
    assert result.per_sample
    # same step times, half the samples per step: per sample B takes twice as long
    assert result.speedup == pytest.approx(0.5)
    assert result.kind == "slower"
    # within the measured floor of the busy shared VM (~3x), one run a side cannot tell
    assert statistics.verdict([run_a], [run_b]).kind == statistics.NO_CHANGE
    assert statistics.samples_per_s(run_b) == pytest.approx(statistics.samples_per_s(run_a) / 2)


def test_samples_per_s_from_the_raw_step_trace():
    """Independent: 32 samples over the mean of step_trace's steady steps (the first, a warm-up, left out)."""
    run = perfkit.load(SAMPLE)
    expected_ms = np.mean(statistics.step_totals(run.steps))
    assert statistics.samples_per_s(run) == pytest.approx(32 * 1000 / expected_ms)
    manifest = json.loads((SAMPLE / "perfkit_run.json").read_text())
    assert manifest["config"]["batch_size"] == 32


def test_single_runs_within_the_noise_floor_are_no_change():
    run_a, run_b = perfkit.load(SAMPLE), perfkit.load(SAMPLE.parent / "cpu_workers1")
    result = statistics.verdict([run_a], [run_b])
    assert result.basis == "noise floor" and result.kind == statistics.NO_CHANGE
    low, high = result.interval
    assert low < result.speedup < high
    assert high / result.speedup == pytest.approx(1 + statistics.NOISE_FLOOR_PCT / 100)


def test_repeats_both_sides_test_run_means():
    runs = [perfkit.load(SAMPLE.parent / name) for name in ("cpu_default", "cpu_workers1", "cpu_workers4", "cpu_avx2")]
    result = statistics.verdict(runs[:2], runs[2:])
    assert result.basis == "run means" and result.p_value is not None
    means_a = [np.mean(statistics.step_totals(run.steps)) for run in runs[:2]]
    means_b = [np.mean(statistics.step_totals(run.steps)) for run in runs[2:]]
    assert result.speedup == pytest.approx(math.exp(np.mean(np.log(means_a)) - np.mean(np.log(means_b))))
    assert result.interval[0] < result.speedup < result.interval[1]


def test_t_quantile_matches_the_table():
    assert statistics.t_quantile(10) == pytest.approx(2.228, abs=1e-3)
    assert statistics.t_quantile(2) == pytest.approx(4.303, abs=1e-3)


def test_cli_shows_throughput_and_the_per_sample_verdict(tmp_path):
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    b16 = _copy_with_batch(tmp_path, "b16", 16)
    out = CliRunner().invoke(main, ["compare", "--noise-floor", "10", str(SAMPLE), str(b16)])
    assert out.exit_code == 0, out.output
    expected = statistics.samples_per_s(perfkit.load(SAMPLE))
    assert f"samples/s    {expected:,.1f} -> {expected / 2:,.1f} (-50.0 %)" in out.output
    assert "verdict      slower: speedup 0.50x" in out.output and "per sample: global batch 32 vs 16" in out.output
    assert "NOT LIKE WITH LIKE" not in out.output  # a batch change is judged per sample, not refused


def test_cli_says_when_the_batch_is_unknown(tmp_path):
    """Crafted from sample_runs/cpu_default: the manifest's batch_size and FRAMEWORK/cpu_framework_0.txt (where
    the Conv2D input shapes come from) removed, so no file tells the batch."""
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    unknown = tmp_path / "nobatch"
    shutil.copytree(SAMPLE, unknown)
    manifest = json.loads((unknown / "perfkit_run.json").read_text())
    del manifest["config"]["batch_size"]
    (unknown / "perfkit_run.json").write_text(json.dumps(manifest))
    for framework in unknown.glob("*/FRAMEWORK/cpu_framework_0.txt"):
        framework.unlink()
    assert statistics.global_batch(perfkit.load(unknown)) is None
    out = CliRunner().invoke(main, ["compare", str(SAMPLE), str(unknown)])
    assert out.exit_code == 0, out.output
    assert (f"samples/s    unknown (batch size unknown in {unknown}: step time compared instead; --batch-size N "
            "gives the global batch)") in out.stdout
    assert out.stderr == (f"perfkit: warning: batch size unknown in {unknown}: samples/s unknown, time per step "
                          "compared; give the global batch with --batch-size N\n")
    assert "per sample" not in out.output  # step time, not per-sample time, is what was compared
    # the user's global batch fills in: 16 against A's recorded 32 is judged per sample
    mean_a, mean_b = (np.mean(statistics.step_totals(perfkit.load(path).steps)) for path in (SAMPLE, unknown))
    out = CliRunner().invoke(main, ["compare", str(SAMPLE), str(unknown), "--batch-size", "16", "--noise-floor", "10",
                                    "--format", "json"])
    assert out.exit_code == 0 and out.stderr == ""
    payload = json.loads(out.stdout)
    assert payload["samples_per_s_b"] == pytest.approx(16 * 1000 / mean_b)
    assert payload["samples_per_s_a"] == pytest.approx(32 * 1000 / mean_a)  # its own batch, not the option's
    assert payload["verdict"]["per_sample"] and payload["verdict"]["batch_b"] == 16
    assert payload["speedup"] == pytest.approx((mean_a / 32) / (mean_b / 16))


def test_tokens_per_s_from_the_option_or_the_manifest(tmp_path):
    """Crafted from sample_runs/cpu_default: copies whose manifest config records seq_length (a user's script may),
    one with batch 16."""
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    rate = statistics.samples_per_s(perfkit.load(SAMPLE))
    out = CliRunner().invoke(main, ["compare", str(SAMPLE), str(_copy_with_batch(tmp_path, "b16", 16)),
                                    "--seq-len", "128"])
    assert out.exit_code == 0, out.output
    assert f"tokens/s     {rate * 128:,.1f} -> {rate * 64:,.1f} (-50.0 %)" in out.output
    recorded = []
    for name in ("a", "b"):
        folder = _copy_with_batch(tmp_path, name, 32)
        manifest = json.loads((folder / "perfkit_run.json").read_text())
        manifest["config"]["seq_length"] = 256
        (folder / "perfkit_run.json").write_text(json.dumps(manifest))
        recorded.append(str(folder))
    out = CliRunner().invoke(main, ["compare", *recorded, "--seq-len", "8"])  # the manifest's length wins
    assert f"tokens/s     {rate * 256:,.1f} -> {rate * 256:,.1f} (+0.0 %)" in out.output
    assert "tokens/s" not in CliRunner().invoke(main, ["compare", str(SAMPLE), recorded[0]]).output  # A's unknown


def test_report_compare_section_has_the_banner_verdict_and_throughput(tmp_path, monkeypatch):
    """`perfkit report A B` over ResNet-50 on CPU and AlexNet on Ascend (fixture legacy_run_2)."""
    from click.testing import CliRunner
    from conftest import FIXTURE_RUNS

    from perfkit.apps.cli import main
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(SAMPLE), str(FIXTURE_RUNS["legacy_run_2"]), "-o", str(out)])
    assert result.exit_code == 0, result.output
    html = out.read_text()
    assert "NOT LIKE WITH LIKE: A and B differ in device (CPU vs Ascend), network (ResNet50 vs AlexNet)" in html
    assert f"{statistics.samples_per_s(perfkit.load(SAMPLE)):,.1f} samples/s" in html
    assert "What differed between the runs" in html
    # the verdict block as `perfkit compare` prints it for the same pair: one definition
    cli = CliRunner().invoke(main, ["compare", str(SAMPLE), str(FIXTURE_RUNS["legacy_run_2"])])
    judged = compare.judge([perfkit.load(SAMPLE)], [perfkit.load(FIXTURE_RUNS["legacy_run_2"])])
    for label, text in compare.verdict_lines(judged):
        assert f"{label:<13}{text}" in cli.output
        assert escape(f"{label} {text}") in html


def _repeats(tmp_path: Path, name: str, *sources: str) -> Path:
    folder = tmp_path / name
    for index, source in enumerate(sources, start=1):
        shutil.copytree(SAMPLE.parent / source, folder / f"repeat_{index}")
    return folder


def test_cli_folders_of_repeats_are_judged_over_run_means(tmp_path):
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    base = _repeats(tmp_path, "base", "cpu_default", "cpu_default")
    candidate = _repeats(tmp_path, "candidate", "cpu_avx2", "cpu_avx2")
    out = CliRunner().invoke(main, ["compare", str(base), str(candidate), "--format", "json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert payload["runs_a"] == [str(base / "repeat_1"), str(base / "repeat_2")]
    assert payload["verdict"]["basis"] == "run means" and payload["verdict"]["n_b"] == 2


def test_cli_refuses_a_group_of_different_settings(tmp_path):
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    mixed = _repeats(tmp_path, "mixed", "cpu_default", "cpu_avx2")
    out = CliRunner().invoke(main, ["compare", str(mixed), str(SAMPLE)])
    assert out.exit_code == 2
    line = out.stderr.strip()
    assert "\n" not in line and "Traceback" not in out.output
    assert line == (f"perfkit: error: {mixed / 'repeat_2'}: not a repeat of {mixed / 'repeat_1'}: "
                    "env.ONEDNN_MAX_CPU_ISA is AVX2, not -")


def _ledger_cause_ms(path: Path) -> dict[str, float]:
    """Independent of compare: the ledger's steady rows summed per rank and cause, over that rank's steady steps,
    then averaged over ranks (a cause a rank lacks: 0 ms)."""
    from perfkit.analysis.ledger import ledger

    rows = ledger(perfkit.load(path))
    rows = rows[rows["steady"]]
    per_rank = []
    for _, frame in rows.groupby("rank"):
        steps = frame["step"].nunique()
        per_rank.append({str(cause): ms / steps for cause, ms in frame.groupby("cause", observed=True)["ms"].sum().items()})
    causes = {cause for rank in per_rank for cause in rank}
    return {cause: float(np.mean([rank.get(cause, 0.0) for rank in per_rank])) for cause in causes}


def test_cause_deltas_are_the_differences_of_the_ledger_means():
    """cpu_default (one rank) against cpu_ranks2 (two ranks: AllReduce appears), in the JSON and the text line."""
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    other = SAMPLE.parent / "cpu_ranks2"
    expected_a, expected_b = _ledger_cause_ms(SAMPLE), _ledger_cause_ms(other)
    out = CliRunner().invoke(main, ["compare", str(SAMPLE), str(other), "--format", "json"])
    assert out.exit_code == 0, out.output
    deltas = json.loads(out.stdout)["cause_deltas"]
    assert {row["cause"] for row in deltas} == set(expected_a) | set(expected_b)
    for row in deltas:
        expected = expected_b.get(row["cause"], 0.0) - expected_a.get(row["cause"], 0.0)
        assert row["delta_ms"] == pytest.approx(expected)
        assert row["ms_a"] == pytest.approx(expected_a.get(row["cause"], 0.0))
    assert [abs(row["delta_ms"]) for row in deltas] == sorted((abs(row["delta_ms"]) for row in deltas), reverse=True)
    # two ranks on two cores spend ~1.8 s a step on AllReduce (split into transfer and wait by comm_split's estimate)
    comm = [row for row in deltas if row["cause"] in ("comm", "comm_transfer", "comm_wait")]
    assert {row["cause"] for row in comm} == {"comm_transfer", "comm_wait"}
    assert all(row["ms_a"] == 0.0 for row in comm) and sum(row["delta_ms"] for row in comm) > 1000
    text = CliRunner().invoke(main, ["compare", str(SAMPLE), str(other)]).output
    top = deltas[0]
    assert f"by cause     {top['label']} {top['delta_ms']:+,.1f} ms, " in text and text.count(" per step\n") >= 1
    markdown = CliRunner().invoke(main, ["compare", str(SAMPLE), str(other), "--format", "markdown"]).output
    assert f"**by cause** {top['label']} {top['delta_ms']:+,.1f} ms" in markdown


def test_a_real_batch_32_vs_16_pair_reports_time_per_sample_and_the_throughput_change():
    """sample_runs/cpu_avx2 (batch 32) and cpu_avx2_b16 (batch 16, otherwise the same command; made on a busier
    host, sample_runs/README.md): the verdict is over time per sample, the throughput from the raw step times."""
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    a, b = SAMPLE.parent / "cpu_avx2", SAMPLE.parent / "cpu_avx2_b16"
    step_ms = {path: np.mean([(s["end_ns"] - s["begin_ns"]) / 1e6
                              for s in json.loads((path / "perfkit_run.json").read_text())["steps"]])
               for path in (a, b)}
    rate_a, rate_b = 32 * 1000 / step_ms[a], 16 * 1000 / step_ms[b]
    out = CliRunner().invoke(main, ["compare", str(a), str(b), "--format", "json"])
    payload = json.loads(out.stdout)
    assert payload["samples_per_s_a"] == pytest.approx(rate_a) and payload["samples_per_s_b"] == pytest.approx(rate_b)
    assert payload["verdict"]["per_sample"] and payload["speedup"] == pytest.approx(rate_b / rate_a)
    assert payload["differences"][0] == {"setting": "batch_size", "a": 32, "b": 16}
    text = CliRunner().invoke(main, ["compare", str(a), str(b)]).stdout
    assert f"samples/s    {rate_a:,.1f} -> {rate_b:,.1f} ({100 * (rate_b / rate_a - 1):+.1f} %)" in text
    assert f"speedup {rate_b / rate_a:.2f}x" in text and "per sample: global batch 32 vs 16" in text


def test_different_networks_get_the_banner_in_every_output():
    """AlexNet (fixture legacy_run_2) against LeNet5 (legacy_ut), both Ascend: compared when asked, under the banner."""
    from click.testing import CliRunner
    from conftest import FIXTURE_RUNS

    from perfkit.apps.cli import main
    pair = [str(FIXTURE_RUNS["legacy_run_2"]), str(FIXTURE_RUNS["legacy_ut"])]
    banner = "NOT LIKE WITH LIKE: A and B differ in network (AlexNet vs LeNet5)"
    text = CliRunner().invoke(main, ["compare", *pair])
    assert text.exit_code == 0 and text.stdout.splitlines()[3] == banner
    assert f"> **{banner}**" in CliRunner().invoke(main, ["compare", *pair, "--format", "markdown"]).stdout
    payload = json.loads(CliRunner().invoke(main, ["compare", *pair, "--format", "json"]).stdout)
    assert payload["incomparable"] == ["network"]

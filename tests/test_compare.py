"""perfkit.views.compare: speedup, step and op-type changes, queue emptiness, resolved and new findings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS
from test_advisor import make_run, queue_rows, seed_feed_run, step_rows, type_rows

from perfkit.advisor import advise
from perfkit.analysis.measures import step_means
from perfkit.analysis.statistics import (
    MIN_EFFECT_PCT,
    NO_CHANGE,
    SAME_RUN,
    regularized_beta,
    t_quantile,
    verdict,
    welch_test,
)
from perfkit.apps.cli import main
from perfkit.io.loader import load
from perfkit.render.compare import compare_text
from perfkit.views.compare import compare

REPO = Path(__file__).resolve().parents[1]


def fixed_run():
    """The seed after sink mode and O3: short interval, few Casts, fp16 BatchNorm, device queue full."""
    return make_run(data_mode="sink", amp_level="O3", compute_dtype="float16", path="fixed",
                    steps=step_rows(interval=0.3, fwd_bwd=6.0, tail=0.5),
                    op_types=type_rows(Cast=0.3, BNTrainingUpdate=1.5, BNTrainingReduce=1.2, Conv2D=8.0, ReLU=1.0),
                    host_queue=queue_rows([0] * 12 + [64] * 8),
                    device_queue=[{"batch": i, "size": 90, "capacity": 100, "wait_ms": 0.0} for i in range(10)])


def test_compare_reports_speedup_step_changes_and_op_share_deltas():
    before, after = seed_feed_run(path="before"), fixed_run()
    result = compare(before, after)
    assert result["a"]["total_ms"] == pytest.approx(20.0) and result["b"]["total_ms"] == pytest.approx(6.8)
    assert result["speedup"] == pytest.approx(20.0 / 6.8)
    assert result["step_deltas_ms"]["interval_ms"] == pytest.approx(0.3 - 9.0)
    # shares recomputed from the op-type totals given to the runs
    share_a = {"Cast": 4 / 20, "BNTrainingUpdate": 3 / 20, "BNTrainingReduce": 3 / 20, "Conv2D": 8 / 20,
               "ReLU": 2 / 20}
    share_b = {"Cast": 0.3 / 12, "BNTrainingUpdate": 1.5 / 12, "BNTrainingReduce": 1.2 / 12, "Conv2D": 8 / 12,
               "ReLU": 1 / 12}
    expected = sorted(((t, share_b[t] - share_a[t]) for t in share_a), key=lambda p: -abs(p[1]))
    assert [d["type"] for d in result["op_type_deltas"]] == [t for t, _ in expected]
    for delta, (_, value) in zip(result["op_type_deltas"], expected):
        assert delta["delta"] == pytest.approx(value)
        assert delta["share_b"] - delta["share_a"] == pytest.approx(delta["delta"])
    conv = next(d for d in result["op_type_deltas"] if d["type"] == "Conv2D")  # 8 ms over 3 steps in both
    assert conv["ms_per_step_a"] == pytest.approx(8 / 3) and conv["delta_ms_per_step"] == pytest.approx(0.0)
    assert result["queues"]["host"] == {"empty_pct_a": 0.0, "empty_pct_b": 60.0}
    assert result["queues"]["device"] == {"empty_pct_a": None, "empty_pct_b": 0.0}
    assert result["resolved"] == ["amp_level", "sink_mode"]
    assert result["new"] == []
    assert result["findings_a"] == advise(before).ids()


def test_compare_names_new_findings():
    result = compare(fixed_run(), seed_feed_run(path="regressed"))
    assert result["new"] == ["amp_level", "sink_mode"] and result["resolved"] == []
    assert result["speedup"] == pytest.approx(6.8 / 20.0)


def test_compare_without_steps_has_no_speedup():
    result = compare(make_run(op_types=type_rows(Conv2D=1.0)), make_run(op_types=type_rows(Conv2D=2.0, Cast=2.0)))
    assert result["a"] is None and result["speedup"] is None
    assert result["op_type_deltas"][0] == {"type": "Cast", "share_a": 0.0, "share_b": 0.5, "delta": 0.5,
                                           "ms_per_step_a": None, "ms_per_step_b": None, "delta_ms_per_step": None}
    assert result["verdict"] is None and result["spread_a"] is None
    assert result["missing_steps"] == [result["run_a"]]  # the same crafted path on both sides: named once


@pytest.fixture
def crafted_cli(monkeypatch):
    runs = {"before": seed_feed_run(path="before"), "after": fixed_run()}
    monkeypatch.setattr("perfkit.apps.cli._load", lambda path, cycle=None: runs[path])
    return CliRunner()


def test_compare_cli_json_and_text(crafted_cli):
    result = crafted_cli.invoke(main, ["compare", "before", "after", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert {"a", "b", "speedup", "op_type_deltas", "queues", "resolved", "new", "spread_a", "spread_b", "verdict",
            "differences", "settings_a", "settings_b", "new_findings"} <= set(payload)
    assert "noise" not in payload  # no second, per-step verdict
    assert payload["verdict"]["speedup"] == payload["speedup"]
    assert "gate" not in payload  # only when a gate option is given
    assert payload["speedup"] == pytest.approx(20.0 / 6.8)
    text = crafted_cli.invoke(main, ["compare", "before", "after"])
    assert text.exit_code == 0
    assert f"verdict      no significant change: speedup {20.0 / 6.8:.2f}x" in text.output  # one run a side
    assert [line for line in text.output.splitlines() if line.startswith(("verdict", "run-to-run"))] == [
        next(line for line in text.output.splitlines() if line.startswith("verdict"))]  # one verdict line
    assert "p = " not in text.output
    assert "resolved  amp_level, sink_mode" in text.output


def test_compare_cli_bad_path_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 2 and "does not exist" in result.output


# --- real CPU runs ---------------------------------------------------------------------------------------

SAMPLE_PAIR = (REPO / "sample_runs" / "cpu_default", REPO / "sample_runs" / "cpu_avx2")


def manifest_mean_step_ms(folder: Path) -> float:
    steps = json.loads((folder / "perfkit_run.json").read_text())["steps"]
    return sum((s["end_ns"] - s["begin_ns"]) / 1e6 for s in steps) / len(steps)


def test_compare_real_cpu_runs_with_and_without_avx2():
    default, avx2 = SAMPLE_PAIR
    result = compare(load(default), load(avx2))
    assert result["speedup"] == pytest.approx(manifest_mean_step_ms(default) / manifest_mean_step_ms(avx2), rel=1e-3)
    assert "kernel_efficiency" not in result["findings_b"]
    assert result["resolved"] == sorted(set(result["findings_a"]) - set(result["findings_b"]))
    if "kernel_efficiency" in result["findings_a"]:
        assert "kernel_efficiency" in result["resolved"]


def with_reference_kernel_convs(run, factor=100.0):
    """The real AVX2 CPU run as it would look with oneDNN's reference kernel: forward 3x3 Conv2D `factor`x slower,
    the extra time added to each step's forward pass."""
    ops = run.ops.copy()
    weights = ops["input_shapes"].fillna("").str.split(";").str[1].fillna("")
    slow = (ops["type"] == "Conv2D") & weights.str.endswith(",3,3")
    added_ms = float(ops.loc[slow, "total_ms"].sum()) * (factor - 1)
    ops.loc[slow, ["total_ms", "avg_ms"]] *= factor
    op_types = run.op_types.copy()
    op_types.loc[op_types["type"] == "Conv2D", "total_ms"] += added_ms
    op_types["share"] = op_types["total_ms"] / op_types["total_ms"].sum()
    steps = run.steps.copy()
    per_step = added_ms / len(steps)
    steps["total_ms"] += per_step
    steps["fwd_bwd_ms"] += per_step
    steps["busy_ms"] += per_step  # the step's compute ops run that much longer
    op_type_steps = run.op_type_steps.copy()  # and so do each step's Conv2D (one row per step)
    op_type_steps.loc[op_type_steps["type"] == "Conv2D", "total_ms"] += per_step
    return dataclasses.replace(run, path="reference_kernel", ops=ops, op_types=op_types, steps=steps,
                               op_type_steps=op_type_steps), added_ms


def test_compare_reports_kernel_efficiency_resolved_when_conv_kernels_recover():
    real = load(FIXTURE_RUNS["cpu_2_10"])
    slow, added_ms = with_reference_kernel_convs(real)
    finding = next(f for f in advise(slow).findings if f.id == "kernel_efficiency")
    assert finding.target == "Conv2D 3x3" and "ONEDNN_MAX_CPU_ISA=AVX2" in finding.action
    assert finding.evidence["ratio_to_reference"] < 0.1
    weights = slow.ops["input_shapes"].fillna("").str.split(";").str[1].fillna("")
    conv3x3_ms = slow.ops.loc[(slow.ops["type"] == "Conv2D") & weights.str.endswith(",3,3"), "total_ms"].sum()
    assert finding.evidence["total_ms"] == pytest.approx(conv3x3_ms, abs=0.001)
    steps_ms = slow.steps["total_ms"].mean() * len(slow.steps)  # the first step's total is unknown: at the mean
    expected_gain = 100 * conv3x3_ms * (1 - finding.evidence["ratio_to_reference"]) / steps_ms
    assert finding.est_gain_pct == pytest.approx(expected_gain, abs=0.1)
    result = compare(slow, real)
    assert result["op_type_deltas"][0]["type"] == "Conv2D" and result["op_type_deltas"][0]["delta"] < 0
    assert "kernel_efficiency" in result["resolved"] and "kernel_efficiency" not in result["new"]
    mean_ms = real.steps["total_ms"].mean()  # steps with a known total
    assert result["speedup"] == pytest.approx((mean_ms + added_ms / len(real.steps)) / mean_ms)


# --- noise: per-step spread and the verdict --------------------------------------------------------------

SAMPLES = REPO / "sample_runs"


def manifest_step_ms(folder: Path) -> np.ndarray:
    """Recorded step times straight from perfkit_run.json: per step, the mean over the rank folders' manifests."""
    manifests = [folder / "perfkit_run.json"] if (folder / "perfkit_run.json").is_file() else []
    ranks = sorted(folder.glob("rank_*/perfkit_run.json")) or manifests
    per_rank = [[(s["end_ns"] - s["begin_ns"]) / 1e6 for s in json.loads(m.read_text())["steps"]] for m in ranks]
    return np.mean(np.array(per_rank), axis=0)


def needs_samples(*names):
    return pytest.mark.skipif(not all((SAMPLES / n).is_dir() for n in names), reason="sample_runs not made")


def test_welch_p_value_matches_scipy():
    stats = pytest.importorskip("scipy.stats")  # installed with mindspore (the test extra)
    rng = np.random.default_rng(7)
    cases = [(rng.normal(100, 5, 3), rng.normal(104, 9, 3)), (rng.normal(10, 1, 40), rng.normal(10.2, 3, 7)),
             (np.array([1.0, 2.0]), np.array([30.0, 31.0, 29.5])), (rng.normal(5, 0.1, 200), rng.normal(5, 0.1, 200))]
    for a, b in cases:
        ours = welch_test(a, b)
        theirs = stats.ttest_ind(b, a, equal_var=False)
        assert ours["t"] == pytest.approx(theirs.statistic) and ours["p"] == pytest.approx(theirs.pvalue, rel=1e-9)


@pytest.mark.parametrize("a, b", [(0.5, 0.5), (1.0, 3.0), (2.5, 1.0), (40.0, 0.5), (0.5, 900.0), (300.0, 700.0)])
def test_the_incomplete_beta_meets_its_closed_forms(a, b):
    """I_x(a, 1) = x^a, I_x(1, b) = 1 - (1 - x)^b, I_x(a, b) = 1 - I_(1-x)(b, a), I_x(1/2, 1/2) = 2 asin(sqrt x) / pi:
    the hand-written continued fraction behind every p value and t quantile, over both of its branches."""
    for x in (1e-6, 0.01, 0.3, 0.5, 0.77, 0.999):
        assert regularized_beta(a, 1.0, x) == pytest.approx(x ** a, rel=1e-10, abs=1e-300)
        assert regularized_beta(1.0, b, x) == pytest.approx(-np.expm1(b * np.log1p(-x)), rel=1e-10)
        assert regularized_beta(a, b, x) == pytest.approx(1 - regularized_beta(b, a, 1 - x), abs=1e-12)
        assert regularized_beta(0.5, 0.5, x) == pytest.approx(2 * np.arcsin(np.sqrt(x)) / np.pi, rel=1e-10)
    assert regularized_beta(a, b, 0.0) == 0.0 and regularized_beta(a, b, 1.0) == 1.0


def test_the_t_quantile_is_the_students_t_table():
    # two-sided 5 %: the table's 12.706 (1 df), 2.571 (5), 2.042 (30), 1.984 (100)
    assert [round(t_quantile(df), 3) for df in (1, 5, 30, 100)] == [12.706, 2.571, 2.042, 1.984]


@needs_samples("cpu_default", "cpu_avx2")
def test_same_settings_within_noise_is_no_significant_change_not_a_speedup():
    """cpu_default and cpu_avx2 run the same kernels on this host (both oneDNN AVX2, sample_runs/README.md): 5 %
    apart, one run a side, is within the run-to-run noise floor; the per-step spread is described, not tested."""
    default, avx2 = load(SAMPLES / "cpu_default"), load(SAMPLES / "cpu_avx2")
    steps_a, steps_b = manifest_step_ms(SAMPLES / "cpu_default"), manifest_step_ms(SAMPLES / "cpu_avx2")
    result = compare(default, avx2)
    assert result["spread_a"]["n"] == len(steps_a) and result["spread_b"]["n"] == len(steps_b)
    assert result["spread_a"]["mean_ms"] == pytest.approx(steps_a.mean())
    assert result["spread_a"]["median_ms"] == pytest.approx(np.median(steps_a))
    assert result["spread_a"]["std_ms"] == pytest.approx(np.std(steps_a, ddof=1))
    assert result["spread_b"]["iqr_ms"] == pytest.approx(np.subtract(*np.percentile(steps_b, [75, 25])))
    # one run a side: the verdict is the noise floor's, over the runs' means, whatever the steps' spread
    assert result["verdict"]["kind"] == NO_CHANGE and result["verdict"]["basis"] == "noise floor"
    assert result["speedup"] == pytest.approx(steps_a.mean() / steps_b.mean())
    text = compare_text(result)
    assert "verdict      no significant change: speedup 1.05x" in text
    assert "within-run step spread (describes each run; the verdict compares runs)" in text
    assert "faster" not in text and "p = " not in text


def test_the_same_run_twice_is_no_change():
    run = load(FIXTURE_RUNS["cpu_2_10"])
    result = compare(run, run)
    assert result["verdict"]["kind"] == SAME_RUN and result["speedup"] == 1.0
    assert result["differences"] == []
    assert "verdict      no change: A and B are the same run" in compare_text(result)


def test_repeats_significant_under_the_minimum_effect_are_no_change():
    """Crafted: 8 runs a side, B 1 % slower with tiny run-to-run jitter; p is far below 0.05, but 1 % is under
    MIN_EFFECT_PCT. 5 % slower (or faster) is called."""
    rng = np.random.default_rng(3)

    def side(name, scale):
        return [make_run(path=f"{name}{i}", steps=step_rows(0.0, total, 0.0, count=4))
                for i, total in enumerate(rng.normal(100.0, 0.2, 8) * scale)]
    a, b = side("a", 1.0), side("b", 1.01)
    judged = verdict(a, b)
    assert judged.p_value < 1e-4 and abs(1 / judged.speedup - 1) * 100 < MIN_EFFECT_PCT
    assert judged.kind == NO_CHANGE
    assert verdict(a, side("c", 1.05)).kind == "slower" and verdict(side("d", 1.05), a).kind == "faster"


def test_one_run_against_repeats_is_judged_by_the_repeats_spread():
    """Crafted runs: 5 repeats of A with a 5 % log spread; a single B run inside and outside their t prediction
    interval (scipy's t, independent of compare's own quantile and tail)."""
    stats = pytest.importorskip("scipy.stats")
    totals = np.random.default_rng(5).lognormal(np.log(100.0), 0.05, 5)
    repeats = [make_run(path=f"a{i}", steps=step_rows(0.0, total, 0.0, count=4)) for i, total in enumerate(totals)]
    logs = np.log(totals)
    scale = np.std(logs, ddof=1) * np.sqrt(1 + 1 / 5)
    half = stats.t.ppf(0.975, 4) * scale
    for factor, kind in ((1.5, "slower"), (0.5, NO_CHANGE), (-1.5, "faster")):
        single = make_run(path="b", steps=step_rows(0.0, float(np.exp(logs.mean() + factor * half)), 0.0, count=4))
        judged = verdict(repeats, [single], noise_floor_pct=1000.0)  # the floor is not what decides
        assert judged.basis == "one run against repeats" and judged.kind == kind
        assert judged.p_value == pytest.approx(2 * stats.t.sf(abs(factor * half) / scale, 4))
        assert np.log(judged.interval[1] / judged.speedup) == pytest.approx(half)
        assert verdict([single], repeats).kind == {"slower": "faster", "faster": "slower"}.get(kind, kind)


def test_one_step_runs_have_no_spread_but_a_verdict():
    one_step = load(FIXTURE_RUNS["legacy_run_3"])
    assert len(one_step.steps) == 1
    result = compare(one_step, one_step)
    assert result["spread_a"]["std_ms"] is None and "std n/a" in compare_text(result)
    assert result["verdict"]["kind"] == SAME_RUN


# --- what differed ----------------------------------------------------------------------------------------

@needs_samples("cpu_workers1", "cpu_workers4")
def test_runs_that_differ_in_workers_list_workers_and_nothing_else():
    manifests = [json.loads((SAMPLES / n / "perfkit_run.json").read_text()) for n in ("cpu_workers1", "cpu_workers4")]
    differing = {k for k in manifests[0]["config"] if manifests[0]["config"][k] != manifests[1]["config"][k]}
    assert differing == {"workers", "output"}  # the premise, from the files; output is a path, not a setting
    result = compare(load(SAMPLES / "cpu_workers1"), load(SAMPLES / "cpu_workers4"))
    assert result["differences"] == [{"setting": "workers", "a": 1, "b": 4}]
    assert "  workers                 1 -> 4" in compare_text(result)


@needs_samples("cpu_default", "cpu_avx2")
def test_env_difference_is_listed_from_the_manifest():
    result = compare(load(SAMPLES / "cpu_default"), load(SAMPLES / "cpu_avx2"))
    assert result["differences"] == [{"setting": "env.ONEDNN_MAX_CPU_ISA", "a": None, "b": "AVX2"}]
    assert result["settings_a"]["network"] == "ResNet50" and result["settings_a"]["batch_size"] == 32


def test_settings_inferred_without_a_manifest():
    """No manifest: the network from the op scopes, the batch from Conv2D inputs (first dimension)."""
    run = load(FIXTURE_RUNS["legacy_run_2"])
    names = run.ops["name"].astype(str)
    assert names.str.contains("_backbone-AlexNet/").any()
    first_dims = run.ops.loc[run.ops["type"] == "Conv2D", "input_shapes"].str.split(",").str[0].astype(int)
    settings = compare(run, run)["settings_a"]
    assert settings["network"] == "AlexNet" and settings["batch_size"] == first_dims.mode()[0]
    assert settings["device"] == "Ascend"


# --- op types in ms per step -----------------------------------------------------------------------------

@needs_samples("cpu_default", "cpu_ranks2")
def test_op_types_compared_in_ms_per_step_and_rank():
    single, double = load(SAMPLES / "cpu_default"), load(SAMPLES / "cpu_ranks2")
    result = compare(single, double)
    steps_single = len(json.loads((SAMPLES / "cpu_default" / "perfkit_run.json").read_text())["steps"])
    steps_double = len(manifest_step_ms(SAMPLES / "cpu_ranks2"))
    conv_a = single.op_types.loc[single.op_types["type"] == "Conv2D", "total_ms"].sum() / steps_single
    conv_b = double.op_types.loc[double.op_types["type"] == "Conv2D", "total_ms"].sum() / (2 * steps_double)
    conv = next(d for d in result["op_type_deltas"] if d["type"] == "Conv2D")
    assert conv["ms_per_step_a"] == pytest.approx(conv_a) and conv["ms_per_step_b"] == pytest.approx(conv_b)
    assert conv["delta_ms_per_step"] == pytest.approx(conv_b - conv_a)
    allreduce = next(d for d in result["op_type_deltas"] if d["type"] == "AllReduce")
    assert allreduce["ms_per_step_a"] == 0.0 and allreduce["ms_per_step_b"] > 0  # absent in A: 0 ms, not unknown
    text = compare_text(result)
    ms_lines = text.split("op types, ms per step")[1].splitlines()
    assert ms_lines[2].split()[0] == "AllReduce"  # the largest change in ms per step first


@pytest.mark.parametrize("name", ["legacy_misc", "cpu_2_10"])
def test_spread_covers_the_steps_the_means_cover(name):
    """legacy_misc: MindSpore's average leaves its first step out; cpu_2_10: the first step's start is unknown.
    The spread and the noise test use the same steps as the mean step (steps 2..n here)."""
    run = load(FIXTURE_RUNS[name])
    means = step_means(run.steps)
    assert means["mean_of"]["first"] == 2 and means["mean_of"]["first_step"]  # the premise
    later = run.steps[run.steps["step"] >= 2]
    expected = later.groupby("step")["total_ms"].mean().to_numpy()
    spread = compare(run, run)["spread_a"]
    assert spread["n"] == len(expected) == means["mean_of"]["count"]
    assert spread["mean_ms"] == pytest.approx(expected.mean())
    assert spread["std_ms"] == pytest.approx(np.std(expected, ddof=1))

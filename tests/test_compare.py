"""perfkit.compare: speedup, step and op-type changes, queue emptiness, resolved and new findings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit import load
from perfkit.advisor import advise
from perfkit.cli import main
from perfkit.compare import compare

from conftest import FIXTURE_RUNS
from test_advisor import make_run, queue_rows, seed_feed_run, step_rows, type_rows

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
    assert result["op_type_deltas"][0] == {"type": "Cast", "share_a": 0.0, "share_b": 0.5, "delta": 0.5}


@pytest.fixture
def crafted_cli(monkeypatch):
    runs = {"before": seed_feed_run(path="before"), "after": fixed_run()}
    monkeypatch.setattr("perfkit.cli._load", runs.__getitem__)
    return CliRunner()


def test_compare_cli_json_and_text(crafted_cli):
    result = crafted_cli.invoke(main, ["compare", "before", "after", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert {"a", "b", "speedup", "op_type_deltas", "queues", "resolved", "new"} <= set(payload)
    assert payload["speedup"] == pytest.approx(20.0 / 6.8)
    text = crafted_cli.invoke(main, ["compare", "before", "after"])
    assert text.exit_code == 0
    assert f"speedup A/B  {20.0 / 6.8:.2f}x" in text.output
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
    return dataclasses.replace(run, path="reference_kernel", ops=ops, op_types=op_types, steps=steps), added_ms


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

"""perfkit.compare: speedup, step and op-type changes, queue emptiness, resolved and new findings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit import load
from perfkit.advisor import advise
from perfkit.cli import main
from perfkit.compare import compare
from test_advisor import make_run, queue_rows, seed_feed_run, step_rows, type_rows

REPO = Path(__file__).resolve().parents[1]


def fixed_run():
    """The seed after sink mode and O3: short interval, few Casts, fp16 BatchNorm, device queue full."""
    return make_run(data_mode="sink", amp_level="O3", compute_dtype="float16", path="fixed",
                    steps=step_rows(interval=0.3, fwd_bwd=6.0, tail=1.0),
                    op_types=type_rows(Cast=0.3, BNTrainingUpdate=1.5, BNTrainingReduce=1.2, Conv2D=8.0, ReLU=1.0),
                    host_queue=queue_rows([0] * 12 + [64] * 8),
                    device_queue=[{"batch": i, "size": 90, "capacity": 100, "wait_ms": 0.0} for i in range(10)])


def test_compare_reports_speedup_step_changes_and_op_share_deltas():
    before, after = seed_feed_run(path="before"), fixed_run()
    result = compare(before, after)
    assert result["a"]["total_ms"] == pytest.approx(20.0) and result["b"]["total_ms"] == pytest.approx(7.3)
    assert result["speedup"] == pytest.approx(20.0 / 7.3)
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
    assert result["speedup"] == pytest.approx(7.3 / 20.0)


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
    assert payload["speedup"] == pytest.approx(20.0 / 7.3)
    text = crafted_cli.invoke(main, ["compare", "before", "after"])
    assert text.exit_code == 0
    assert f"speedup A/B  {20.0 / 7.3:.2f}x" in text.output
    assert "resolved  amp_level, sink_mode" in text.output


def test_compare_cli_bad_path_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 2 and "does not exist" in result.output

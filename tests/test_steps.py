"""derive_steps on crafted op executions: recorded step times, per-op occurrences, and the unknown cases."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perfkit.io.formats.steps import derive_steps

EPOCH = 1_795_343_499_000_000_000  # epoch ns, beyond float64's exact integers
FORWARD, BACKWARD, OPTIMIZER = "Default/net/conv-Conv2d/Conv2D-op0", "Gradients/Default/net/conv-Conv2d/" \
    "Conv2DBackpropFilter-op1", "Default/optimizer-Adam/Adam-op2"


def events(rows: list[tuple[str, int, float]]) -> pd.DataFrame:
    """(name, start ns after EPOCH, duration ms) -> op_events."""
    return pd.DataFrame({"name": [r[0] for r in rows], "start_ns": [EPOCH + r[1] for r in rows],
                         "dur_ms": [r[2] for r in rows]})


def step_times(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    return pd.DataFrame({"step": [r[0] for r in rows], "begin_ns": [EPOCH + r[1] for r in rows],
                         "end_ns": [EPOCH + r[2] for r in rows]})


# Two graph-mode steps of 10 ms: forward at +1 ms, backward ends at +7.5 ms, optimizer after.
TWO_STEPS = events([
    (FORWARD, 1_000_000, 2.0), (BACKWARD, 3_000_000, 4.5), (OPTIMIZER, 8_000_000, 0.5),
    (FORWARD, 11_000_003, 2.0), (BACKWARD, 13_000_000, 4.0), (OPTIMIZER, 17_500_000, 1.0),
])


def test_recorded_step_times_split_each_step_exactly():
    steps, how = derive_steps(TWO_STEPS, step_times([(1, 0, 10_000_000), (2, 10_000_000, 20_000_001)]))
    assert how == "recorded_step_times"
    first, second = steps.to_dict("records")
    assert (first["interval_ms"], first["fwd_bwd_ms"], first["tail_ms"], first["total_ms"]) == \
        pytest.approx((1.0, 6.5, 2.5, 10.0), abs=1e-12)
    assert second["interval_ms"] == pytest.approx(1.000003, abs=1e-12)  # 3 ns survive the epoch offset
    assert second["fwd_bwd_ms"] == pytest.approx(17.0 - 11.000003, abs=1e-12)
    assert second["total_ms"] == pytest.approx(10.000001, abs=1e-12)
    for step in (first, second):
        assert step["interval_ms"] + step["fwd_bwd_ms"] + step["tail_ms"] == pytest.approx(step["total_ms"], rel=1e-12)


def test_events_outside_the_recorded_steps_are_ignored_and_empty_steps_are_unknown():
    warmup = events([(FORWARD, -5_000_000, 1.0), (BACKWARD, -4_000_000, 1.0)])
    steps, _ = derive_steps(pd.concat([warmup, TWO_STEPS.iloc[:3]]),
                            step_times([(1, 0, 10_000_000), (2, 10_000_000, 20_000_000)]))
    first, second = steps.to_dict("records")
    assert first["interval_ms"] == pytest.approx(1.0)
    assert math.isnan(second["interval_ms"]) and math.isnan(second["fwd_bwd_ms"]) and math.isnan(second["tail_ms"])
    assert second["total_ms"] == pytest.approx(10.0)


def test_without_step_times_the_kth_run_of_each_op_is_step_k():
    steps, how = derive_steps(TWO_STEPS.sample(frac=1, random_state=0), None)  # order must not matter
    assert how == "op_timestamps"
    first, second = steps.to_dict("records")
    assert [first["step"], second["step"]] == [1, 2]
    assert math.isnan(first["interval_ms"]) and math.isnan(first["total_ms"])
    assert first["fwd_bwd_ms"] == pytest.approx(6.5) and first["tail_ms"] == pytest.approx(8.5 - 7.5)
    assert second["interval_ms"] == pytest.approx(11.000003 - 8.5, abs=1e-12)  # from step 1's last op end
    assert second["tail_ms"] == pytest.approx(18.5 - 17.0)
    assert second["total_ms"] == pytest.approx(18.5 - 8.5)


def test_ops_that_ran_different_numbers_of_times_leave_steps_unknown_with_the_reason():
    uneven = pd.concat([TWO_STEPS, events([(FORWARD, 21_000_000, 1.0)])])
    steps, how = derive_steps(uneven, None)
    assert not len(steps)
    assert how.startswith("unknown") and "different numbers of times" in how


def test_no_events_is_unknown():
    steps, how = derive_steps(events([]), None)
    assert not len(steps) and how.startswith("unknown")


def test_without_backward_scopes_only_totals_are_known():
    pynative_like = events([("Default/Conv2D-op0", 1_000_000, 2.0), ("ReluGrad", 3_000_000, 1.0),
                            ("Default/ApplyMomentum-op1", 6_000_000, 1.0)])
    steps, _ = derive_steps(pynative_like, step_times([(1, 0, 10_000_000)]))
    (step,) = steps.to_dict("records")
    assert step["total_ms"] == pytest.approx(10.0)
    assert all(math.isnan(step[key]) for key in ("interval_ms", "fwd_bwd_ms", "tail_ms"))

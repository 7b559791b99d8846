"""Steps a loop makes heavier at a fixed period (an evaluation pass every N steps): steady.periodic_steps finds
them, every step mean leaves them out, and the periodic_steps finding says what they cost.

The real run tests/runs/cpu_2_10_periodic_eval (tests/scripts/run_periodic_eval.py) evaluates after every 4th loop
step; its step times are read here from perfkit_run.json, as the script's process recorded them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import perfkit
from perfkit.analysis.ledger import ledger
from perfkit.analysis.steady import periodic_steps, steady_steps
from perfkit.apps.cli import main

pytestmark = pytest.mark.usefixtures("uncached")

RUN = Path(__file__).resolve().parent / "runs" / "cpu_2_10_periodic_eval"
EVAL_EVERY = 4        # tests/scripts/run_periodic_eval.py
SKIPPED = 1           # its perfkit.profiling(skip_first=1): recorded step k is the loop's step k + 1


def recorded_ms() -> dict[int, float]:
    steps = json.loads((RUN / "perfkit_run.json").read_text())["steps"]
    return {step["step"]: (step["end_ns"] - step["begin_ns"]) / 1e6 for step in steps}


def evaluating_steps() -> list[int]:
    """The recorded steps in which the script evaluated (after loop steps 4, 8, 12)."""
    return [step for step in recorded_ms() if (step + SKIPPED) % EVAL_EVERY == 0]


def test_the_evaluating_steps_of_a_real_run_are_found_and_left_out_of_every_mean():
    run = perfkit.load(RUN)
    found = periodic_steps(run.steps)
    assert list(found["steps"]) == [tuple(evaluating_steps())] and list(found["period"]) == [EVAL_EVERY]
    others = [ms for step, ms in recorded_ms().items() if step not in evaluating_steps()]
    assert float(found["median_others_ms"].iloc[0]) == pytest.approx(statistics.median(others), rel=0.01)

    summary = perfkit.summarize(run)
    assert summary["steps"]["mean_of"]["periodic_steps"] == evaluating_steps()
    assert summary["steps"]["total_ms"] == pytest.approx(statistics.mean(others), rel=0.01)
    assert sorted(steady_steps(run.steps)["step"]) == sorted(set(recorded_ms()) - set(evaluating_steps()))
    frame = ledger(run)
    assert not frame.loc[frame["step"].isin(evaluating_steps()), "steady"].any()
    assert frame.loc[~frame["step"].isin(evaluating_steps()), "steady"].all()


def test_the_finding_says_what_the_periodic_work_costs_and_no_step_rule_counts_it():
    run = perfkit.load(RUN)
    findings = {finding.id: finding for finding in perfkit.advise(run).findings}
    finding = findings["periodic_steps"]
    totals = recorded_ms()
    others = [ms for step, ms in totals.items() if step not in evaluating_steps()]
    extra = sum(totals[step] - statistics.median(others) for step in evaluating_steps())
    assert finding.evidence["period"] == EVAL_EVERY and finding.evidence["periodic_steps"] == evaluating_steps()
    assert finding.evidence["extra_share_pct"] == pytest.approx(100 * extra / sum(totals.values()), abs=1.0)
    assert finding.severity == "medium"  # over a quarter of the profiled time
    assert "host_loop" not in findings  # the evaluation's host work between the steps' ops was host_loop's


def test_the_terminal_says_which_steps_the_means_leave_out():
    out = CliRunner().invoke(main, ["summary", str(RUN)]).output
    listed = ", ".join(map(str, evaluating_steps()))
    assert f"but {listed}; steps {listed} left out: every 4th step" in out


def steps_table(totals: list[float], rank: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"rank": rank, "step": np.arange(1, len(totals) + 1), "total_ms": totals, "interval_ms": 0.0})


@pytest.mark.parametrize("totals, steps", [
    ([10, 10, 30, 10, 10, 30, 10, 10, 30, 10], (3, 6, 9)),                       # every 3rd
    ([10, 25, 10, 25, 10, 25, 10, 25], (2, 4, 6, 8)),                              # every 2nd (an accumulation)
    ([80, 10, 11, 40, 10, 9, 41, 10, 12, 39, 10], (4, 7, 10)),                     # the first step compiles
])
def test_a_period_is_found(totals, steps):
    found = periodic_steps(steps_table(totals))
    assert list(found["steps"]) == [steps]
    assert set(steady_steps(steps_table(totals))["step"]).isdisjoint(steps)


@pytest.mark.parametrize("totals", [
    [10, 11, 9, 10, 12, 10, 11, 9, 10, 10],          # steady
    [10, 30, 10, 10, 10, 30, 10, 30, 10, 10, 10],    # spikes at no period
    [10, 10, 30, 10, 10, 30, 10, 10, 14, 10],        # two of three: one evaluating step too light to tell
    [10, 30, 10, 30],                                # too few steps to tell a period
    [30, 10, 30, 10, 30, 10, 30, 10, 30],            # the heavy steps the majority: the light ones are not the rule
])
def test_no_period_where_none_is_clear(totals):
    assert periodic_steps(steps_table(totals)).empty
    assert len(steady_steps(steps_table(totals))) >= len(totals) - 1  # at most a first step left out


def test_each_rank_has_its_own_period():
    table = pd.concat([steps_table([10, 10, 30] * 4, rank=0), steps_table([10] * 12, rank=1)])
    found = periodic_steps(table)
    assert found["rank"].tolist() == [0] and found["steps"].tolist() == [(3, 6, 9, 12)]
    assert len(steady_steps(table).query("rank == 1")) == 12

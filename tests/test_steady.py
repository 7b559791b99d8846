"""Which steps the step means cover (perfkit/analysis/steady.py), and that summary, ranks and advise agree on it."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.analysis.cluster import slow_ranks
from perfkit.analysis.steady import FIRST_STEP_OUTLIER, steady_steps
from perfkit.apps.cli import main

HEADER = "step_num,start_point,end_point,total,fp_point,bp_point,iteration_interval,fp_and_bp,tail\n"


@pytest.fixture(autouse=True)
def no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))


def steps_table(totals: dict[int, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"rank": rank, "step": step, "total_ms": total, "interval_ms": 0.0}
                         for rank, values in totals.items() for step, total in enumerate(values, start=1)])


def write_step_trace(folder, rank: int, totals_ms: list[float]) -> None:
    """A legacy step trace in ticks, its average row the mean of steps 2..n as MindSpore writes it."""
    lines, start = [], 10_000_000
    for step, total in enumerate(totals_ms, start=1):
        ticks = round(total * 1e5)
        lines.append(f"{step},{start},{start + ticks},{ticks},{start},{start + ticks - 10},0,{ticks - 10},10\n")
        start += ticks
    rest = [round(t * 1e5) for t in totals_ms[1:]]
    lines.append(f"-,0,0,{sum(rest) // len(rest)},0,0,0,0,0\n")
    (folder / f"step_trace_raw_{rank}_detail_time.csv").write_text(HEADER + "".join(lines))


def test_outlier_first_step_is_left_out_and_a_normal_one_kept():
    # crafted: a CPU-like run (no MindSpore average) whose first step compiles, next to one that does not
    table = steps_table({0: [3000.0, 1000.0, 1100.0, 900.0], 1: [1200.0, 1000.0, 1100.0, 900.0]})
    kept = steady_steps(table)
    assert kept[kept["rank"] == 0]["step"].tolist() == [2, 3, 4]
    assert kept[kept["rank"] == 1]["step"].tolist() == [1, 2, 3, 4]  # 1.2x the median: not an outlier
    assert 3000.0 > FIRST_STEP_OUTLIER * 1000.0 > 1200.0


def test_each_ranks_mean_says_why_its_first_step_is_left_out_or_that_it_is_kept():
    # one rank's first step an outlier, the other's kept: the reasons of both in one table (a KeyError on NaN before)
    from perfkit.analysis.measures import per_rank_step_means
    from perfkit.analysis.steady import FIRST_STEP_REASONS
    table = steps_table({0: [3000.0, 1000.0, 1100.0], 1: [1000.0, 1000.0, 1100.0]}).assign(fwd_bwd_ms=0.0, tail_ms=0.0)
    means = {entry["rank"]: entry["steps"]["mean_of"] for entry in per_rank_step_means(table)}
    assert means[0]["first_step"] == FIRST_STEP_REASONS["outlier"] and means[0]["first"] == 2
    assert means[1]["first_step"] is None and means[1]["first"] == 1


def test_a_lone_step_and_an_unknown_first_total():
    assert steady_steps(steps_table({0: [5000.0]}))["step"].tolist() == [1]
    table = steps_table({0: [math.nan, 10.0, 11.0]})
    assert steady_steps(table)["step"].tolist() == [2, 3]


def test_legacy_first_step_left_out_as_mindspore_does():
    # the real misc step traces: step 1 is shorter than the rest (no outlier), MindSpore's average leaves it out
    run = perfkit.load(FIXTURE_RUNS["legacy_misc"])
    kept = steady_steps(run.steps)
    assert kept.groupby("rank")["step"].min().to_dict() == {0: 2, 10: 2}
    assert len(kept) == len(run.steps) - 2


def test_ranks_summary_and_advise_agree_on_a_balanced_steady_state(tmp_path):
    # crafted after the 4-rank pipeline-parallel run (not among the fixtures): steps 2-5 take 179.4 ms on
    # every rank, step 1 took 2,164 and 2,376 ms on ranks 2 and 3. Means over all steps made ranks 2 and 3 slow.
    for rank, first in ((0, 180.0), (1, 181.0), (2, 2164.0), (3, 2376.0)):
        write_step_trace(tmp_path, rank, [first, 179.4, 179.4, 179.4, 179.4])
    answer = slow_ranks(tmp_path)
    assert answer.slow == [] and answer.findings == []
    assert answer.per_rank["steps"].tolist() == [5, 5, 5, 5]
    assert answer.per_rank["total_ms"].tolist() == pytest.approx([179.4] * 4)
    run = perfkit.load(tmp_path)
    summary = perfkit.summarize(run)
    assert summary["slow_ranks"] == [] and summary["steps"]["total_ms"] == pytest.approx(179.4)
    assert summary["steps"]["first_step_ms"] == pytest.approx((180.0 + 181.0 + 2164.0 + 2376.0) / 4)
    assert "slow_rank" not in perfkit.advise(run).ids()
    text = CliRunner().invoke(main, ["summary", str(tmp_path)]).output
    assert "mean per step over steps 2-5; first step" in text


def first_step_finding(run) -> dict | None:
    """compile_or_first_call's first-step evidence, None when it names no first step."""
    found = [f for f in perfkit.advise(run).findings if f.id == "compile_or_first_call"]
    return {key: found[0].evidence[key] for key in ("first_step_ms", "median_other_steps_ms", "rank")} \
        if found and "first_step_ms" in found[0].evidence else None


def test_advise_names_the_first_steps_the_means_leave_out_as_outliers(tmp_path):
    # one first-step rule (steady.first_step_verdicts) for the means and for compile_or_first_call: on the crafted
    # pipeline trace above, ranks 2 and 3 compile in step 1; advise names the larger, 2,376 ms against 179.4
    for rank, first in ((0, 180.0), (1, 181.0), (2, 2164.0), (3, 2376.0)):
        write_step_trace(tmp_path, rank, [first, 179.4, 179.4, 179.4, 179.4])
    assert first_step_finding(perfkit.load(tmp_path)) == {"first_step_ms": 2376.0, "median_other_steps_ms": 179.4,
                                                         "rank": 3}


def test_a_two_step_run_gets_the_same_first_step_verdict_from_the_means_and_from_advise():
    # the advisor's own copy of the rule wanted three steps; the means leave an outlier out from two on
    from perfkit.core.model import Meta, Run, table
    steps = table("steps", pd.DataFrame([{"rank": 0, "step": step, "interval_ms": 1.0, "fwd_bwd_ms": total - 2.0,
                                          "tail_ms": 1.0, "total_ms": total}
                                         for step, total in ((1, 300.0), (2, 100.0))]))
    run = Run(path="crafted", meta=Meta(device="Ascend", ranks=[0]), steps=steps)
    assert perfkit.summarize(run)["steps"]["total_ms"] == 100.0
    assert first_step_finding(run) == {"first_step_ms": 300.0, "median_other_steps_ms": 100.0, "rank": 0}
    calm = Run(path="crafted", meta=Meta(device="Ascend", ranks=[0]),
               steps=table("steps", steps.assign(total_ms=[140.0, 100.0])))
    assert perfkit.summarize(calm)["steps"]["total_ms"] == 120.0 and first_step_finding(calm) is None

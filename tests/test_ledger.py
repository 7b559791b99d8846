"""The step ledger (perfkit/analysis/ledger.py): every ms of every step attributed once, on every real run and on generated
step tables; findings claim ledger ms without counting any twice; every view shows the ledger's numbers."""

from __future__ import annotations

import json
import math
import sys

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.advisor import advise
from perfkit.analysis import ledger as ledger_module
from perfkit.apps.cli import main
from perfkit.core.causes import BOUND_PARTS, CAUSES
from perfkit.core.model import Meta, Run, table

sys.path.insert(0, str(REPO / "scripts"))
from summary_snapshot import profiled_runs as runs  # noqa: E402  (every fixture and sample run, as a user passes it)

ALL_RUNS = runs()
# One µs: the identity holds to float rounding of ms values.
EXACT_MS = 1e-3


def _loaded(name):
    return perfkit.load(ALL_RUNS[name])


def assert_adds_up(run: Run) -> pd.DataFrame:
    """For every (rank, step) with a known total: the ledger's causes add up to it, none negative."""
    frame = perfkit.ledger(run)
    assert set(frame["cause"]) <= set(CAUSES)
    assert (frame["ms"] >= 0).all()
    steps = run.steps[run.steps["total_ms"].notna()].set_index(["rank", "step"])["total_ms"]
    sums = frame.groupby(["rank", "step"])["ms"].sum()
    assert sorted(sums.index) == sorted(steps.index)
    assert (sums.reindex(steps.index) - steps).abs().max() <= EXACT_MS if len(steps) else True
    return frame


def assert_claims_hold(run: Run) -> None:
    """No ledger ms is claimed twice: per cause, the findings' claims never exceed the ledger's steady ms, and
    all claims together never exceed the steady steps."""
    frame = perfkit.ledger(run)
    steady = frame[frame["steady"]].groupby("cause")["ms"].sum()
    claimed: dict[str, float] = {}
    for finding in advise(run).findings:
        for cause, ms in finding.claims.items():
            claimed[cause] = claimed.get(cause, 0.0) + ms
    for cause, ms in claimed.items():
        assert ms <= steady.get(cause, 0.0) + EXACT_MS, cause
    assert sum(claimed.values()) <= float(steady.sum()) + EXACT_MS
    gains = [f.est_gain_pct for f in advise(run).findings if f.claims]
    assert sum(gains) <= 100.0 + 0.01 * len(gains)


@pytest.mark.parametrize("name", sorted(ALL_RUNS))
def test_every_real_run_adds_up_and_no_ms_is_claimed_twice(name):
    run = _loaded(name)
    assert_adds_up(run)
    assert_claims_hold(run)


@pytest.mark.parametrize("name", sorted(ALL_RUNS))
def test_the_bound_is_the_ledgers_roll_up(name):
    run = _loaded(name)
    bound = ledger_module.bound(run)
    if not bound.parts_ms:
        return
    frame = perfkit.ledger(run)
    steady = frame[frame["steady"]]
    groups = steady.assign(group=ledger_module.group_of(steady["cause"])).groupby(["rank", "group"])["ms"].sum()
    per_step = groups / steady.groupby("rank")["step"].nunique()
    for part in BOUND_PARTS:
        expected = per_step.xs(part, level="group").reindex(sorted(set(steady["rank"])), fill_value=0.0).mean() \
            if part in per_step.index.get_level_values("group") else 0.0
        assert bound.parts_ms[part] == pytest.approx(expected, abs=1e-3), part


# Generated step tables: every column a layout may give, each unknown or any size (parts may exceed the total,
# as broken files do), on 1-3 ranks; with and without communication ops and queue evidence.
MS = st.one_of(st.none(), st.floats(min_value=0.0, max_value=1e4, allow_nan=False))


@st.composite
def step_tables(draw):
    rows = []
    for rank in range(draw(st.integers(1, 3))):
        for step in range(1, draw(st.integers(1, 4)) + 1):
            row = {"rank": rank, "step": step, "total_ms": draw(st.floats(min_value=0.0, max_value=1e4))}
            for column in ("interval_ms", "fwd_bwd_ms", "tail_ms", "computing_ms", "comm_ms", "comm_exposed_ms",
                           "bubble_ms", "busy_ms", "comm_tail_ms"):
                row[column] = draw(MS)
            rows.append(row)
    op_types = [{"rank": row_rank, "type": op_type, "total_ms": draw(st.floats(0.0, 1e4)), "count": 1}
                for row_rank in {row["rank"] for row in rows}
                for op_type in draw(st.lists(st.sampled_from(["Conv2D", "AllReduce", "Send", "MatMul"]),
                                             unique=True, max_size=3))]
    mode = draw(st.sampled_from([None, "graph", "pynative"]))
    layout = draw(st.sampled_from(["cpu", "legacy", "ascend_ms"]))
    sizes = draw(st.lists(st.integers(0, 4), min_size=0, max_size=6))
    return rows, op_types, mode, layout, sizes


def generated_run(generated) -> Run:
    rows, op_types, mode, layout, sizes = generated
    host_queue = [{"rank": 0, "batch": i, "size": size, "capacity": 4} for i, size in enumerate(sizes)]
    return Run(path="generated", meta=Meta(device="Ascend", layout=layout, mode=mode, data_mode="feed",
                                           ranks=sorted({row["rank"] for row in rows})),
               steps=table("steps", pd.DataFrame(rows)), op_types=table("op_types", pd.DataFrame(op_types))
               if op_types else None, host_queue=table("host_queue", pd.DataFrame(host_queue)) if sizes else None)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step_tables())
def test_generated_step_tables_add_up(generated):
    run = generated_run(generated)
    sizes = generated[4]
    frame = assert_adds_up(run)
    assert frame["ms"].map(math.isfinite).all()
    # any claims, most important first, get no ledger ms twice: never more than a cause holds, nor the steady steps
    causes = list(CAUSES)
    claims = [ledger_module.Claim(tuple(causes[i::len(sizes) + 2]), cap_ms=float(cap) if cap else None)
              for i, cap in enumerate(sizes)] + [ledger_module.Claim(tuple(causes))]
    given = ledger_module.allocate(run, claims)
    steady = frame[frame["steady"]].groupby("cause")["ms"].sum()
    for cause in causes:
        assert sum(claim.get(cause, 0.0) for claim in given) <= steady.get(cause, 0.0) + EXACT_MS
    for claim, got in zip(claims, given):
        assert set(got) <= set(claim.causes)
        assert claim.cap_ms is None or sum(got.values()) <= claim.cap_ms + EXACT_MS
    # the last claim takes every cause: what is left, so all together are exactly the steady steps
    assert sum(sum(got.values()) for got in given) == pytest.approx(float(steady.sum()), abs=EXACT_MS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step_tables())
def test_every_rule_answers_generated_step_tables(generated):
    """Step tables as broken files give them (all-unknown intervals, zero totals, parts past the total): each rule
    finds, passes or says why it could not look; none raises (sink_mode once divided by a zero steady total, the
    communication rule took the worst of all-NA shares)."""
    advice = advise(generated_run(generated))
    for finding in advice.findings:
        assert finding.est_gain_pct is None or math.isfinite(finding.est_gain_pct)
    assert all(isinstance(reason, str) and reason for reason in advice.not_checked.values())


MULTI_RANK = [name for name in sorted(ALL_RUNS) if name.startswith(("fixtures/new_format", "sample_runs/cpu_ranks2",
                                                                      "fixtures/legacy/mindinsight_misc"))]


@pytest.mark.parametrize("name", MULTI_RANK)
def test_every_view_gives_the_same_ranks_and_parts(name, cache_dir):
    """`perfkit ranks`, `summary --format json`, the Ranks page's bars and table, the report's rank table and
    `advise` name the same slow ranks and the same compute / communication / idle ms per rank."""
    from perfkit.render.report import render_report
    from perfkit.views import numbers
    from perfkit.views.figures import ranks as ranks_figures
    run = _loaded(name)
    assert run.steps["rank"].nunique() > 1
    cli = CliRunner()
    ranks = json.loads(cli.invoke(main, ["ranks", str(ALL_RUNS[name]), "--format", "json"]).output)
    summary = json.loads(cli.invoke(main, ["summary", str(ALL_RUNS[name]), "--format", "json"]).output)
    advice = json.loads(cli.invoke(main, ["advise", str(ALL_RUNS[name]), "--format", "json"]).output)
    parts = ledger_module.rank_parts(run).set_index("rank")
    by_rank = {row["rank"]: row for row in ranks["per_rank"]}
    table_rows = ranks_figures.rank_rows(run).set_index("rank")
    bars = {trace.name: list(trace.y) for trace in ranks_figures.ranks_figure(run).data}
    labels = ledger_module.bound(run).labels
    for rank in parts.index:
        summary_parts = next(entry["parts_ms"] for entry in summary["per_rank"] if entry["rank"] == rank)
        position = list(parts.index).index(rank)
        for part in BOUND_PARTS:
            expected = float(parts.at[rank, part])
            assert by_rank[rank][f"{part}_ms"] == pytest.approx(expected, abs=1e-6), (part, "ranks")
            assert summary_parts[part] == pytest.approx(expected, abs=1e-6), (part, "summary")
            assert table_rows.at[rank, f"{part}_ms"] == pytest.approx(expected, abs=1e-6), (part, "Ranks table")
            if expected > 0:
                assert bars[labels[part]][position] == pytest.approx(expected, abs=1e-6), (part, "Ranks bars")
    slow = ranks["slow_ranks"]
    assert summary["slow_ranks"] == slow == numbers.slow_ranks(run)
    named_slow = {int(r.removeprefix("rank ")) for f in advice["findings"] if f["id"] == "slow_rank"
                  for r in f["target"].split(", ")}
    assert named_slow == set(slow)
    said_slow = {f["target"] for f in advice["findings"] if "the slow one is rank" in f["title"]}
    assert {int(t.removeprefix("rank ")) for t in said_slow} <= set(slow)
    report = render_report([run])
    for rank in parts.index:
        assert f"{parts.at[rank, 'compute']:,.3f}" in report


def test_the_findings_card_says_which_rules_could_not_run():
    """A one-step run: no rule found anything, but most could not look; the card says so instead of "no
    findings"."""
    from perfkit.views import numbers
    run = _loaded("fixtures/new_format/msinsight_level1")
    one_step = Run(path=run.path, meta=run.meta, steps=run.steps[run.steps["step"] == run.steps["step"].min()])
    one_step.meta.status = "interrupted"  # with fewer than 3 steps, no rule looks at an interrupted run
    shown = numbers.findings(one_step)
    assert not shown.items
    assert "not checked" in shown.note and "no findings: none of perfkit's rules" not in shown.note

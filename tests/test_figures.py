"""perfkit.views.figures on Runs built here: the numbers drawn equal ones computed in the test, big runs are thinned."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest

from perfkit.core.model import Meta, Run, table
from perfkit.views import format as fmt
from perfkit.views import numbers
from perfkit.views.figures import compare as compare_figures
from perfkit.views.figures import operators, overview, ranks, style
from perfkit.views.summary import summarize

OP_TOTALS = {"Conv2D": 40.0, "Cast": 30.0, "BNTrainingUpdate": 12.0, "BNTrainingReduceGrad": 8.0, "MatMul": 10.0}


def make_run(name="run", ranks=(0,), steps=4, step_ms=(10.0, 20.0, 2.0), slow_factor=1.0, queue_sizes=None,
             device="Ascend", data_mode="sink", op_totals=None) -> Run:
    """A small run: the last rank's steps scaled by slow_factor; queues from `queue_sizes` (capacity 8)."""
    op_totals = OP_TOTALS if op_totals is None else op_totals
    queue_sizes = [0, 3, 8, 8, 0, 5, 8, 2] if queue_sizes is None else queue_sizes
    steps_rows, types, ops, host, device_q, pipeline = [], [], [], [], [], []
    for rank in ranks:
        factor = slow_factor if rank == ranks[-1] and len(ranks) > 1 else 1.0
        for step in range(1, steps + 1):
            interval, fwd_bwd, tail = (value * factor for value in step_ms)
            steps_rows.append(dict(rank=rank, step=step, interval_ms=interval + step, fwd_bwd_ms=fwd_bwd,
                                   tail_ms=tail, total_ms=interval + step + fwd_bwd + tail))
        for op_type, total in op_totals.items():
            types.append(dict(rank=rank, type=op_type, total_ms=total, count=10, share=0.0))
            for pass_, prefix, part in (("forward", "Default", 0.4), ("backward", "Gradients", 0.6)):
                ops.append(dict(rank=rank, name=f"{prefix}/net/{op_type}-op{rank}", type=op_type,
                                avg_ms=total * part / 10, count=10, total_ms=total * part, **{"pass": pass_}))
        for batch, size in enumerate(queue_sizes):
            host.append(dict(rank=rank, batch=batch, size=size, capacity=8))
            device_q.append(dict(rank=rank, batch=batch, size=size // 4, capacity=2, wait_ms=0.1))
        for op_id, op_type, workers, usage in ((0, "Batch", 4, 0.9), (1, "Map", 8, 0.3), (2, "Cifar10Dataset", 1, 0.7)):
            pipeline.append(dict(rank=rank, op_id=op_id, op_type=op_type, workers=workers, queue_usage=usage,
                                 queue_empty_pct=0.0, queue_length=64, parent_id=op_id - 1 if op_id else None,
                                 children=[op_id + 1] if op_id < 2 else []))
    return Run(path=f"/runs/{name}", meta=Meta(device=device, layout="legacy", ranks=list(ranks), data_mode=data_mode),
               op_types=table("op_types", types), ops=table("ops", ops), steps=table("steps", steps_rows),
               host_queue=table("host_queue", host), device_queue=table("device_queue", device_q),
               pipeline=table("pipeline", pipeline))


def annotations(fig) -> str:
    return " ".join(a.text for a in fig.layout.annotations)


@pytest.mark.parametrize("op_type, family", [
    ("Cast", "Cast"), ("BNTrainingReduce", "BatchNorm"), ("BNTrainingUpdate", "BatchNorm"),
    ("BNTrainingReduceGrad", "BatchNorm"), ("BNTrainingUpdateGrad", "BatchNorm"), ("BNInfer", "BatchNorm"),
    ("BNInferGrad", "BatchNorm"), ("BatchNorm", "BatchNorm"), ("BatchNormGrad", "BatchNorm"),
    ("BatchNormWithActivation", "BatchNorm"), ("Conv2D", "other"), ("BiasAdd", "other"), ("BNTrainingX", "other"),
    ("TransData", "other")])
def test_op_families(op_type, family):
    assert numbers.op_family(op_type) == family


def test_op_share_figure_largest_first_with_families_and_their_share():
    run = make_run()
    fig = overview.op_share_figure(run)
    total = sum(OP_TOTALS.values())
    cast = OP_TOTALS["Cast"] / total
    bn = (OP_TOTALS["BNTrainingUpdate"] + OP_TOTALS["BNTrainingReduceGrad"]) / total
    assert f"Cast + BatchNorm: {100 * (cast + bn):.1f} % of op time" in annotations(fig)
    assert f"Cast {100 * cast:.1f} %" in annotations(fig)
    assert list(fig.layout.yaxis.categoryarray)[::-1] == sorted(OP_TOTALS, key=OP_TOTALS.get, reverse=True)
    by_trace = {trace.name: dict(zip(trace.y, trace.x)) for trace in fig.data}
    assert by_trace["Cast"] == {"Cast": pytest.approx(100 * cast)}
    assert set(by_trace["BatchNorm family"]) == {"BNTrainingUpdate", "BNTrainingReduceGrad"}
    assert by_trace["other op types"]["Conv2D"] == pytest.approx(100 * OP_TOTALS["Conv2D"] / total)


def test_op_share_figure_folds_the_tail_into_other_types():
    totals = {f"Op{i:02d}": float(100 - i) for i in range(40)}
    fig = overview.op_share_figure(make_run(op_totals=totals), top=25)
    labels = list(fig.layout.yaxis.categoryarray)[::-1]
    assert len(labels) == 26 and labels[-1] == "other types (15)"
    rest = sum(list(totals.values())[25:]) / sum(totals.values())
    other_trace = next(t for t in fig.data if t.name == "other op types")
    assert dict(zip(other_trace.y, other_trace.x))["other types (15)"] == pytest.approx(100 * rest)


def test_step_trace_stacks_each_step_and_titles_the_mean():
    run = make_run(ranks=(0, 1), slow_factor=2.0, steps=3)
    fig = overview.step_trace_figure(run)
    # the interval named as `perfkit summary` names it: its queues show the device starving, so data wait
    assert summarize(run)["bound"]["parts_ms"]["data"] > 0
    assert [t.name for t in fig.data] == ["step interval (data wait)", "forward+backward", "tail (optimizer, sync)"]
    # rank 1 is twice rank 0, so the per-step mean over ranks is 1.5x the base split
    assert list(fig.data[1].y) == pytest.approx([1.5 * 20.0] * 3)
    assert list(fig.data[0].y) == pytest.approx([(10.0 + s + 20.0 + s) / 2 for s in (1, 2, 3)])
    mean_total = float(run.steps["total_ms"].mean())
    assert f"mean step {mean_total:,.3f} ms" in fig.layout.title.text
    assert fig.layout.barmode == "stack"


def test_step_trace_of_a_long_run_is_bucketed():
    steps = 100_000
    run = make_run(steps=steps)
    fig = overview.step_trace_figure(run)
    bars = len(fig.data[0].x)
    assert bars <= overview.MAX_STEP_BARS
    per_bucket = -(-steps // overview.MAX_STEP_BARS)
    first_bucket = [10.0 + s for s in range(1, per_bucket + 1)]
    assert fig.data[0].y[0] == pytest.approx(sum(first_bucket) / per_bucket)
    assert f"mean of {per_bucket} consecutive steps" in fig.layout.xaxis.title.text


def test_queue_figure_title_has_the_empty_and_full_share():
    sizes = [0, 3, 8, 8, 0, 5, 8, 2, 0, 1]
    fig = overview.queue_figure(make_run(queue_sizes=sizes), "host")
    empty = 100 * sum(1 for s in sizes if s == 0) / len(sizes)
    full = 100 * sum(1 for s in sizes if s == 8) / len(sizes)
    assert f"empty {empty:.1f} % · full {full:.1f} % of {len(sizes)} samples" in fig.layout.title.text
    assert list(fig.data[0].y) == sizes and list(fig.data[1].y) == [8] * len(sizes)


def test_queue_figure_of_a_million_samples_ships_few_points():
    sizes = np.random.default_rng(1).integers(0, 9, size=1_000_000)
    run = make_run(queue_sizes=[])
    run.host_queue = table("host_queue", {"rank": 0, "batch": np.arange(len(sizes)), "size": sizes, "capacity": 8})
    fig = overview.queue_figure(run, "host")
    assert all(len(trace.x) <= style.MAX_POINTS_PER_TRACE for trace in fig.data)
    assert f"empty {100 * float((sizes == 0).mean()):.1f} %" in fig.layout.title.text  # from every sample
    assert len(fig.to_json()) < 500_000


def test_pipeline_figure_lists_ops_root_first_with_workers():
    fig = overview.pipeline_figure(make_run())
    assert list(fig.layout.yaxis.categoryarray)[::-1] == ["Batch (op 0) · 4 workers", "Map (op 1) · 8 workers",
                                                          "Cifar10Dataset (op 2) · 1 worker"]
    assert list(fig.data[0].text) == ["90 %", "30 %", "70 %"]
    assert fig.layout.title.text.startswith("Data pipeline of rank 0:")


def test_empty_run_gives_sentences_not_axes():
    run = Run(path="/runs/empty", meta=Meta(device="Ascend", data_mode="feed"))
    built = [overview.step_trace_figure(run), overview.op_share_figure(run), overview.queue_figure(run, "host"),
             overview.queue_figure(run, "device"), overview.pipeline_figure(run), ranks.ranks_figure(run),
             compare_figures.compare_steps_figure([run, run]), compare_figures.compare_op_time_figure([run, run]),
             compare_figures.compare_step_spread_figure([run, run]),
             compare_figures.compare_queues_figure([run, run])]
    for fig in built:
        message = style.empty_message(fig)
        assert message and message.startswith(("no ", "single-rank"))
        assert not fig.data and fig.layout.xaxis.visible is False
    assert style.empty_message(overview.queue_figure(run, "device")).startswith("no device queue data: feed mode")
    assert operators.op_type_rows(run).empty and operators.op_instance_rows(run)[1] == 0


def test_headline_cards_show_summary_numbers():
    run = make_run()
    summary = summarize(run)
    items = {card.key: card.value for card in numbers.headline_cards(run)}
    total = sum(OP_TOTALS.values())
    assert items["cast-share"] == f"{100 * OP_TOTALS['Cast'] / total:.1f} %"
    assert items["host-empty"] == f"{summary['queues']['host']['empty_pct']:.1f} %"
    assert items["mean-step"] == f"{summary['steps']['total_ms']:,.3f} ms"
    interval = run.steps["interval_ms"].mean()
    assert items["interval"] == f"{interval:,.3f} ms · {100 * interval / run.steps['total_ms'].mean():.1f} %"


def test_cast_share_is_shown_only_where_mixed_precision_applies():
    cpu = make_run(device="CPU", data_mode="feed")
    assert not {"cast-share", "batchnorm-share"} & {card.key for card in numbers.headline_cards(cpu)}
    assert "Cast + BatchNorm" not in annotations(overview.op_share_figure(cpu))
    assert "Cast + BatchNorm" in annotations(overview.op_share_figure(make_run(device="Ascend")))


def test_compare_cards_show_the_verdict_block_of_perfkit_compare():
    """One definition: the card's value is compare's verdict (never a bare speedup above "no change"), its note the
    lines `perfkit compare` prints, the speedup (mean step ratio, one run a side) among them; the step-split figure
    shows the mean steps, not a second speedup."""
    from perfkit.views.compare import compare, verdict_lines
    slow, fast = make_run("v1", step_ms=(30.0, 40.0, 2.0)), make_run("v2", step_ms=(1.0, 20.0, 2.0))
    expected = slow.steps["total_ms"].mean() / fast.steps["total_ms"].mean()
    result = compare(slow, fast)
    assert result["speedup"] == pytest.approx(expected)
    cards = compare_figures.compare_speedup_cards([slow, fast])
    assert cards[0].value == "baseline" and cards[1].value == "no significant change"
    assert f"speedup {expected:.2f}x" in cards[1].note
    assert cards[1].note == " · ".join(f"{label} {text}" for label, text in verdict_lines(result))
    assert "no significant change" in cards[1].note  # 3.1x is within the 215 % floor for one run a side
    fig = compare_figures.compare_steps_figure([slow, fast])
    assert f"{fast.steps['total_ms'].mean():,.3f} ms" in annotations(fig) and "x<" not in annotations(fig)


def test_ranks_figure_marks_the_ranks_summary_names_slow():
    slow_run = make_run(ranks=(0, 1, 2, 3), slow_factor=1.10)
    assert numbers.slow_ranks(slow_run) == summarize(slow_run)["slow_ranks"] == [3]
    assert numbers.slow_ranks(make_run(ranks=(0, 1, 2, 3), slow_factor=1.02)) == []
    fig = ranks.ranks_figure(slow_run)
    assert list(fig.data[0].x) == ["rank 0", "rank 1", "rank 2", "rank 3 (slow)"]
    rows = ranks.rank_rows(slow_run)
    assert list(rows["slow"]) == ["no", "no", "no", "yes"]


def test_op_instance_rows_filter_by_pass_and_search():
    run = make_run(ranks=(0, 1))
    rows, matched = operators.op_instance_rows(run, ["backward"], "cast")
    assert matched == 2 and set(rows["pass"]) == {"backward"} and set(rows["type"]) == {"Cast"}
    rows, matched = operators.op_instance_rows(run, limit=3)
    assert matched == len(run.ops) and len(rows) == 3
    assert list(rows["total_ms"]) == sorted(run.ops["total_ms"], reverse=True)[:3]


def test_run_labels_are_distinct():
    assert fmt.run_labels([make_run("a"), make_run("b"), make_run("a")]) == ["a (1)", "b", "a (2)"]


def test_runs_of_one_name_are_told_apart_by_their_paths():
    def at(path):
        return dataclasses.replace(make_run(), path=path)
    assert fmt.run_labels([at("/w/exp_a/profiler_v1"), at("/w/exp_b/profiler_v1"), at("/w/profiler_v2")]) == \
        ["profiler_v1 (exp_a)", "profiler_v1 (exp_b)", "profiler_v2"]
    assert fmt.run_labels([at("/a/x/profiler_v1"), at("/b/x/profiler_v1")]) == \
        ["profiler_v1 (a/x)", "profiler_v1 (b/x)"]
    assert fmt.run_labels([at("/a/x/profiler_v1"), at("/b/x/profiler_v1"), at("/a/x/profiler_v1/")]) == \
        ["profiler_v1 (a/x, 1)", "profiler_v1 (b/x)", "profiler_v1 (a/x, 2)"]  # the same folder twice


def test_tables_keep_run_names_as_written_in_their_headers():
    from perfkit.views.format import column_titles
    runs = [dataclasses.replace(make_run(), path=f"/w/{exp}/profiler_v1") for exp in ("exp_a", "exp_b")]
    settings = compare_figures.compare_setting_rows([runs[0], dataclasses.replace(runs[1], meta=dataclasses.replace(
        runs[1].meta, data_mode="feed"))])
    assert column_titles(settings) == ["setting", "profiler_v1 (exp_a)", "profiler_v1 (exp_b)"]
    ops = compare_figures.compare_op_rows(runs)
    assert column_titles(ops) == ["type", "profiler_v1 (exp_a)", "profiler_v1 (exp_b)",
                                  "profiler_v1 (exp_b) - profiler_v1 (exp_a)"]
    in_ms = ops.rename(columns=lambda c: c if c == "type" else f"{c}_ms")  # as the compare page ships it
    assert column_titles(in_ms)[1] == "profiler_v1 (exp_a) ms"
    assert column_titles(operators.op_type_rows(runs[0]))[:2] == ["type", "family"]  # names made by perfkit: spaced



def test_findings_are_the_advisors():
    from perfkit.advisor import advise
    run = make_run(ranks=(0, 1, 2, 3), slow_factor=1.5)
    result = numbers.findings(run)
    advice = advise(run)
    assert result.ids == advice.ids() and [item.action for item in result.items] == \
        [finding.action for finding in advice.findings]
    assert result.items and result.note is None


def test_the_panels_and_the_report_import_neither_dash_nor_plotly():
    """Every figure module, through the panel list, and the report: plotly only when a figure is drawn."""
    code = ("import sys, perfkit.views.panels, perfkit.render.report; "
            "print(sorted(m for m in ('dash', 'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_compare_op_rows_are_ms_per_step_and_rank_largest_change_first():
    before = make_run("v1", steps=4)
    after = make_run("v2", ranks=(0, 1), steps=5, op_totals={**OP_TOTALS, "Cast": 3.0, "Conv2D": 44.0})
    rows = compare_figures.compare_op_rows([before, after]).set_index("type")
    # each rank of `after` has the totals given: per step and rank that is the total / 5; `before`: / 4
    for op_type, total in OP_TOTALS.items():
        assert rows.loc[op_type, "v1"] == pytest.approx(total / 4, abs=1e-3)
    assert rows.loc["Cast", "v2"] == pytest.approx(3.0 / 5, abs=1e-3)
    assert rows.loc["Cast", "v2 - v1"] == pytest.approx(3.0 / 5 - 30.0 / 4, abs=1e-3)
    assert list(rows.index)[0] == "Cast"  # the largest change in ms per step
    fig = compare_figures.compare_op_time_figure([before, after])
    first_run_bar = next(trace for trace in fig.data if trace.name == "v1")
    assert list(first_run_bar.y) == list(rows.index) and list(first_run_bar.x) == list(rows["v1"])


def test_step_spread_figure_shows_each_step_and_no_verdict():
    steady, slower = make_run("v1"), make_run("v2", step_ms=(10.0, 30.0, 2.0))
    fig = compare_figures.compare_step_spread_figure([steady, slower])
    assert sorted(fig.data[1].y) == sorted(slower.steps["total_ms"])
    assert fig.layout.title.text.startswith("Within-run step spread (describes each run; the verdict compares runs)")
    assert not any(word in annotations(fig) for word in ("slower", "faster", "significant", "p = "))
    std = np.std(steady.steps["total_ms"], ddof=1)
    assert f"{steady.steps['total_ms'].mean():,.1f} ± {std:,.1f} ms<br>n = 4 steps" in annotations(fig)


def test_compare_setting_rows_list_only_what_differs():
    cpu, ascend = make_run("v1", device="CPU"), make_run("v2", device="Ascend")
    from perfkit.analysis.measures import amp_level_shown
    third = make_run("v3", device="CPU")
    rows = compare_figures.compare_setting_rows([cpu, ascend, third])
    # the CPU runs' precision is read from their Cast ops (amp_level_shown); the Ascend run records none
    assert amp_level_shown(cpu) is not None and amp_level_shown(ascend) is None
    assert rows.to_dict("records") == [
        {"setting": "device", "v1": "CPU", "v2": "Ascend", "v3": "CPU"},
        {"setting": "amp_level", "v1": amp_level_shown(cpu), "v2": "-", "v3": amp_level_shown(third)}]
    assert compare_figures.compare_setting_rows([cpu, cpu]).empty

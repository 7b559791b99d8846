"""The Compare page (and the report's compare section) over several runs, the first the baseline: speedup
cards with the verdict, what differed, each run's step spread and split, queues, op time per step."""

from __future__ import annotations

from pathlib import PurePath
from typing import TYPE_CHECKING, Sequence

import pandas as pd

from ...analysis.measures import queue_stats, step_means
from ...analysis.statistics import samples_per_s, spread, step_totals
from ...core.model import Run
from ...io.repeats import repeat_series
from ..compare import (
    SPREAD_TITLE,
    banner_words,
    differences,
    judge,
    ms_per_step_of,
    op_type_ms_per_step,
    run_settings,
    setting_value,
    verdict_headline,
    verdict_lines,
)
from ..format import COLORS, NAMED_COLUMNS, STEP_LABELS, STEP_SPLITS, ms, percent, run_color, run_labels
from ..numbers import Card, step_split
from ..per_run import once_per_run
from .style import HOVER_MS, empty_state, new_figure, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Op types per run on the compare page: the union over runs of each run's top types.
COMPARE_TOP_OP_TYPES = 10
settings_of = once_per_run(run_settings)  # reads op names: once per run, not on every Compare page render


# Compare
def compare_steps_figure(runs: Sequence[Run]) -> go.Figure:
    """Mean step split of each run side by side, its mean step above each bar (the speedup, per sample when the
    batches differ, is the verdict's: compare_speedup_cards)."""
    labels = run_labels(runs)
    means = [step_means(run.steps) for run in runs]
    if not any(means):
        return empty_state("no step data in any of these runs")
    fig = new_figure()
    splits = [dict(step_split(run)) for run in runs]
    for col in (col for split in STEP_SPLITS for col, _ in split if any(col in parts for parts in splits)):
        names = {parts[col] for parts in splits if col in parts}  # the interval: data wait in one run, idle in another
        label = names.pop() if len(names) == 1 else STEP_LABELS[col].split(" (")[0]
        fig.add_bar(x=labels, y=[(m or {}).get(col) for m in means], name=label, marker_color=COLORS[col],
                    hovertemplate=f"%{{x}}<br>{label} {HOVER_MS}<extra></extra>")
    if not all(splits):  # a run that knows only its step totals still gets its bar, whole
        label = STEP_LABELS["total_ms"] + (" (not split)" if any(splits) else "")
        fig.add_bar(x=labels, y=[(m or {}).get("total_ms") if not parts else None for m, parts in zip(means, splits)],
                    name=label, marker_color=COLORS["total_ms"],
                    hovertemplate=f"%{{x}}<br>{label} {HOVER_MS}<extra></extra>")
    for label, mean in zip(labels, means):
        if mean and mean.get("total_ms") is not None:
            fig.add_annotation(x=label, y=mean["total_ms"], text=ms(mean["total_ms"]), showarrow=False,
                               yanchor="bottom", yshift=4, font=dict(size=13))
    top = max((m or {}).get("total_ms") or 0 for m in means)
    fig = style(fig, "Mean step time and its split", height=420, barmode="stack",
                yaxis_title="ms per step", bargap=0.35)
    fig.update_yaxes(range=[0, top * 1.22 if top else 1])
    return fig


def series_label(runs: Sequence[Run], labels: Sequence[str]) -> str:
    """A series' name on its card: the run's label, or for repeat_N folders the folder holding them and their count."""
    return labels[0] if len(runs) == 1 else f"{PurePath(runs[0].path).parent.name} ({len(runs)} repeats)"


def compare_speedup_cards(runs: Sequence[Run]) -> list[Card]:
    """One card per series (the repeat_N folders of one `perfkit profile --repeat` series are one side, as `perfkit
    compare` and `perfkit tune` read them: io.repeats.repeat_series; any other run is a series of its own): the
    verdict over all its runs against the first series' as the card's value, the verdict block of `perfkit compare`
    under it (compare.verdict_lines: the run-to-run verdict with its speedup, samples/s), after the banner when
    device, network or script differ from the first's."""
    labels = run_labels(runs)
    series = []
    for members in repeat_series([run.path for run in runs]):
        # a repeat that failed is left out of its series where others are, as perfkit compare reads a side
        # (io.repeats.usable_repeats)
        kept = [i for i in members if runs[i].meta.status != "failed"] or members
        series.append(([runs[i] for i in kept], [labels[i] for i in kept]))
    baseline = series[0][0]
    cards = []
    for index, (group, group_labels) in enumerate(series):
        label = series_label(group, group_labels)
        if index == 0:
            rates = [samples_per_s(run) for run in group]
            cards.append(Card(f"speedup-{index}", label, "baseline", "samples/s unknown" if None in rates
                              else f"{sum(rates) / len(rates):,.1f} samples/s"))
            continue
        judged = judge(baseline, group)
        banner = (banner_words(judged["incomparable"], judged["settings_a"], judged["settings_b"]) + " · "
                  if judged["incomparable"] else "")
        cards.append(Card(f"speedup-{index}", label, verdict_headline(judged),
                          banner + " · ".join(f"{name} {text}" for name, text in verdict_lines(judged))))
    return cards


def compare_step_spread_figure(runs: Sequence[Run]) -> go.Figure:
    """Every step's total per run (a box and its points): the within-run spread, a description of each run (the
    verdict compares runs: compare_speedup_cards)."""
    labels = run_labels(runs)
    totals = [step_totals(run.steps) for run in runs]
    if not any(len(t) for t in totals):
        return empty_state("no step totals in any of these runs")
    fig = new_figure()
    for position, (label, values) in enumerate(zip(labels, totals)):
        fig.add_box(x=[label] * len(values), y=values, name=label, boxpoints="all", pointpos=0, jitter=0.3,
                    marker_color=run_color(position), showlegend=False,
                    hovertemplate=f"{label}<br>step total %{{y:,.2f}} ms<extra></extra>")
    for label, values in zip(labels, totals):
        if len(values):
            spread_ = spread(values)
            std = "" if spread_["std_ms"] is None else f" ± {spread_['std_ms']:,.1f}"
            text = f"{spread_['mean_ms']:,.1f}{std} ms<br>n = {spread_['n']} steps"
            fig.add_annotation(x=label, y=float(values.max()), text=text, showarrow=False, yanchor="bottom",
                               yshift=6, font=dict(size=12))
    top = max(float(t.max()) for t in totals if len(t))
    fig = style(fig, f"{SPREAD_TITLE[0].upper()}{SPREAD_TITLE[1:]}: step time per step (mean ± std)", height=420,
                yaxis_title="ms per step")
    fig.update_yaxes(range=[0, top * 1.3])
    return fig


def compare_op_rows(runs: Sequence[Run], top: int = COMPARE_TOP_OP_TYPES) -> pd.DataFrame:
    """Op types in ms per step (and rank) of each run, with the change of each later run against the first:
    the union of each run's top types, the largest change first."""
    labels = run_labels(runs)
    tables = [op_type_ms_per_step(run) for run in runs]
    types: list[str] = []
    for frame in tables:
        types += [str(t) for t in frame.sort_values("ms_per_step", ascending=False, kind="stable")["type"].head(top)
                  if str(t) not in types]
    rows = pd.DataFrame({"type": types})
    for label, frame in zip(labels, tables):
        by_type = frame.set_index(frame["type"].astype(str))
        rows[label] = pd.Series([ms_per_step_of(by_type, t) for t in types], dtype=float)  # no steps: NaN
    for label in labels[1:]:
        rows[f"{label} - {labels[0]}"] = rows[label] - rows[labels[0]]
    if len(labels) > 1:
        change = rows[[f"{label} - {labels[0]}" for label in labels[1:]]].abs().max(axis=1)
        rows = rows.iloc[change.fillna(0).sort_values(ascending=False, kind="stable").index]
    rows = rows.round(3).reset_index(drop=True)
    rows.attrs[NAMED_COLUMNS] = [column for column in rows.columns if column != "type"]
    return rows


def compare_op_table(runs: Sequence[Run]) -> pd.DataFrame:
    """compare_op_rows with its columns named as ms (a table formats a column by its unit suffix)."""
    return compare_op_rows(runs).rename(columns=lambda c: c if c == "type" else f"{c}_ms")


def compare_op_time_figure(runs: Sequence[Run], top: int = COMPARE_TOP_OP_TYPES) -> go.Figure:
    """Op time per step of each run's top op types, runs side by side: which ops got faster."""
    labels = run_labels(runs)
    rows = compare_op_rows(runs, top)
    if not len(rows) or rows[labels].isna().all().all():
        return empty_state("no operator statistics with step times in any of these runs")
    types = list(rows["type"])
    shares = [op_type_ms_per_step(run).set_index("type")["share"] for run in runs]
    fig = new_figure()
    # Horizontal groups stack the first trace at the bottom: add runs last-first so the first run is on top.
    for position in reversed(range(len(labels))):
        label, values = labels[position], rows[labels[position]]
        share = [100 * float(shares[position].get(t, 0.0)) for t in types]
        fig.add_bar(y=types, x=values, name=label, orientation="h", customdata=share,
                    marker_color=run_color(position),
                    text=[f"{v:,.1f}" if v else "" for v in values], textposition="outside", cliponaxis=False,
                    textfont=dict(size=11),
                    hovertemplate=f"{label}<br>%{{y}}: %{{x:,.2f}} ms per step · %{{customdata:.1f}} % of op time"
                                  "<extra></extra>")
    fig = style(fig, "Op time per step (ms), largest changes first", barmode="group",
                height=max(360, 120 + 14 * len(types) * len(runs)), xaxis_title="ms per step and rank",
                bargap=0.25, bargroupgap=0.05, uniformtext=dict(minsize=10, mode="show"))
    fig.update_layout(legend_traceorder="reversed")
    fig.update_yaxes(categoryorder="array", categoryarray=types[::-1], automargin=True)
    return fig


def compare_setting_rows(runs: Sequence[Run]) -> pd.DataFrame:
    """The settings that differ between the runs (perfkit compare's `differences`): setting, one column per run."""
    labels = run_labels(runs)
    rows = differences([settings_of(run) for run in runs])
    table = pd.DataFrame([{"setting": row["setting"], **{label: setting_value(value)
                                                        for label, value in zip(labels, row["values"])}}
                          for row in rows], columns=["setting", *labels])
    table.attrs[NAMED_COLUMNS] = labels
    return table


def compare_queues_figure(runs: Sequence[Run]) -> go.Figure:
    """How often each run's host and device queues were empty (percent of samples)."""
    labels = run_labels(runs)
    stats = {which: [queue_stats(run.host_queue if which == "host" else run.device_queue) for run in runs]
             for which in ("host", "device")}
    if not any(s for values in stats.values() for s in values):
        return empty_state("no data queue samples in any of these runs")
    fig = new_figure()
    for which, values in stats.items():
        y = [s["empty_pct"] if s else None for s in values]
        fig.add_bar(x=labels, y=y, name=f"{which} queue empty", marker_color=COLORS[which],
                    text=[percent(v) if v is not None else "no data" for v in y], textposition="outside",
                    cliponaxis=False, hovertemplate=f"%{{x}}<br>{which} queue empty %{{y:.1f}} %<extra></extra>")
    fig = style(fig, "Share of samples with an empty queue", height=380, barmode="group",
                yaxis_title="% of samples empty")
    fig.update_yaxes(range=[0, 115])
    return fig

"""Pure `Run -> plotly Figure` builders shared by the dashboard (dashboards/) and the static report.

Every number a figure prints comes from perfkit.analysis.measures (summarize / step_means / op_type_shares /
queue_stats) or the view layer's derived numbers (perfkit.views.numbers: slow ranks, communication), formatted by
perfkit.views.format, so the charts say what `perfkit summary` says. Which figure shows on which page, and in
the report, is perfkit.views.panels' list. A panel whose data the run lacks is an
`empty_state` figure: a sentence, no axes. Long series are bucketed to MAX_POINTS_PER_TRACE points and
long step lists to MAX_STEP_BARS bars, so a run with millions of samples ships a few thousand points.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import PurePath
from typing import Any, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..analysis.ledger import bound
from ..analysis.measures import framework_memory, link_bandwidth, op_type_shares, queue_stats, step_means
from ..core.causes import OP_TYPES_SUMMED_OVER
from ..core.model import Run
from ..core.units import FLOP_PER_GFLOP, US_PER_MS
from .compare import (
    SPREAD_TITLE,
    banner_words,
    differences,
    judge,
    ms_per_step_of,
    op_type_ms_per_step,
    run_settings,
    samples_per_s,
    setting_value,
    spread,
    step_totals,
    verdict_lines,
)
from .format import (
    BOUND_COLORS,
    COLORS,
    MB_SPEC,
    NAMED_COLUMNS,
    NUMBER_SPEC,
    PIPELINE_RANK_COLUMNS,
    STEP_LABELS,
    STEP_SPLITS,
    count,
    mean_of_text,
    ms,
    pct,
    percent,
    pooled,
    run_color,
    short_op_names,
)
from .format import speedup as format_speedup
from .numbers import (
    Card,
    OpTarget,
    amp_families_apply,
    batchnorm_share,
    cast_share,
    communication,
    once_per_run,
    op_family,
    op_mix_columns,
    per_rank_parts,
    rank_bar_segments,
    slow_ranks,
    step_split,
)

# A line trace wider than the plot in pixels shows nothing more: a dashboard plot is ~1,000-1,500 px wide,
# and plotly draws 2,000 SVG points per trace well under 100 ms.
MAX_POINTS_PER_TRACE = 2000
# Stacked bars narrower than ~3 px are unreadable at dashboard width; beyond this, consecutive steps are averaged.
MAX_STEP_BARS = 300
# Up to this many bars get wide gaps, so one or two steps do not fill the plot with a slab of colour.
FEW_STEPS = 4
# Queue traces with up to this many samples get a marker per sample.
FEW_QUEUE_SAMPLES = 50
# The op-type chart lists this many types and folds the rest into "other types": the seed's Cast/BatchNorm
# story is in the top ten, and 25 bars still fit one screen with readable labels.
TOP_OP_TYPES = 25
# Op types per run on the compare page: the union over runs of each run's top types.
COMPARE_TOP_OP_TYPES = 10
# Beyond this many ranks only the slow ranks' bars carry a label; 256 labels would overlap into noise.
MAX_LABELLED_RANKS = 32
# The operator table ships at most this many instances to the browser (largest total time first); a real
# run has tens of thousands of kernel rows, of which only the top few hundred are worth reading.
MAX_TABLE_ROWS = 2000
# Op types under this share print as 0.0 %: their bars are folded into "other types".
SMALLEST_SHOWN_SHARE = 0.0005
# Line dashes that tell ranks apart in a queue chart (all in the queue's colour).
RANK_DASHES = ("solid", "dot", "dash", "longdash", "dashdot")
# Queue charts spanning up to this many batches get a tick per batch.
FEW_BATCH_TICKS = 12
# A dataset op whose output queue is below this usage on average is starving its consumer (red in the chart).
LOW_QUEUE_USAGE_PCT = 50

FONT = dict(family="Inter, 'Segoe UI', Helvetica, Arial, sans-serif", size=13, color="#222")
# d3-format of ms in hover labels: the formatters' `1,421.820`.
HOVER_MS = "%{y:" + NUMBER_SPEC + "} ms"


# ---------------------------------------------------------------------------------------------------------
# Shared helpers


# How the dashboard and the report show a figure: the toolbar (on hover, top right) keeps the four buttons a
# reader uses, so it stays narrow and clear of a figure's title on its left.
PLOT_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": "hover",
               "modeBarButtonsToRemove": ["select2d", "lasso2d", "zoomIn2d", "zoomOut2d", "autoScale2d",
                                          "toggleSpikelines", "hoverClosestCartesian", "hoverCompareCartesian"]}


def empty_state(message: str, height: int = 160) -> go.Figure:
    """A figure that says in words why there is nothing to plot: no axes, no traces."""
    fig = go.Figure()
    fig.update_layout(meta={"empty": message}, height=height, font=FONT, plot_bgcolor="white",
                      paper_bgcolor="white", margin=dict(l=20, r=20, t=20, b=20),
                      xaxis=dict(visible=False), yaxis=dict(visible=False),
                      annotations=[dict(text=message, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                                        font=dict(size=15, color="#666"))])
    return fig


def empty_message(fig: go.Figure) -> str | None:
    """The sentence of an `empty_state` figure, None for a figure with data."""
    meta = fig.layout.meta
    return meta.get("empty") if isinstance(meta, dict) else None


def _style(fig: go.Figure, title: str, height: int = 380, **layout: Any) -> go.Figure:
    fig.update_layout(title=dict(text=title, x=0.01, xanchor="left", font=dict(size=16)), height=height,
                      font=FONT, plot_bgcolor="white", paper_bgcolor="white",
                      margin=dict(l=60, r=30, t=60, b=50),
                      legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                                  traceorder="normal"), **layout)
    fig.update_xaxes(gridcolor="#eee", zerolinecolor="#ccc")
    fig.update_yaxes(gridcolor="#eee", zerolinecolor="#ccc")
    return fig


def run_labels(runs: Sequence[Run]) -> list[str]:
    """One distinct label per run: the folder name; where runs share it (two `profiler_v1`), followed by as many
    of the folders above it as tell them apart (`profiler_v1 (exp_a)`, `profiler_v1 (exp_b)`), numbered only
    where even the paths are the same."""
    names = [run.name for run in runs]
    counts = Counter(names)
    parents = [PurePath(os.path.normpath(str(run.path))).parent.parts for run in runs]
    labels = list(names)
    for name in counts:
        same = [position for position, other in enumerate(names) if other == name]
        if len(same) < 2:
            continue
        places = Counter(parents[position] for position in same)
        depth = next((depth for depth in range(1, max(map(len, places)) + 1)
                      if len({place[-depth:] for place in places}) == len(places)), 0) if len(places) > 1 else 0
        seen: Counter = Counter()
        for position in same:
            place = parents[position]
            seen[place] += 1
            parts = [("/".join(place[-depth:]) or ".") if depth else "",
                     str(seen[place]) if places[place] > 1 else ""]
            labels[position] = f"{name} ({', '.join(part for part in parts if part)})"
    return labels


def bucket(frame: pd.DataFrame, key: str, columns: Sequence[str], limit: int) -> tuple[pd.DataFrame, int]:
    """`frame` sorted by `key`, with consecutive rows averaged in buckets so at most `limit` rows remain.

    Returns the rows and how many original rows each bucket holds (1 when nothing was merged).
    """
    frame = frame.sort_values(key, kind="stable")
    per_bucket = max(1, math.ceil(len(frame) / limit))
    if per_bucket == 1:
        return frame.reset_index(drop=True), 1
    groups = pd.Series(range(len(frame)), index=frame.index) // per_bucket
    merged = frame.groupby(groups.values).agg({key: "first", **{col: "mean" for col in columns}})
    return merged.reset_index(drop=True), per_bucket


settings_of = once_per_run(run_settings)  # reads op names: once per run, not on every Compare page render


# ---------------------------------------------------------------------------------------------------------
# Overview


def bound_figure(run: Run) -> go.Figure:
    """What bounds the mean step (analysis.bound): one bar split into compute, exposed communication, pipeline
    wait, data wait, host and unknown idle; the kind in the title, the evidence under it."""
    where = bound(run)
    if not where.parts_ms:
        return empty_state("no step data: the step cannot be split into compute, communication and idle time")
    total = sum(where.parts_ms.values())
    fig = go.Figure()
    for part, value in where.parts_ms.items():
        if value > 0:
            label = where.labels[part]
            fig.add_bar(y=["mean step"], x=[value], orientation="h", name=label, marker_color=BOUND_COLORS[part],
                        showlegend=True,
                        hovertemplate=f"{label} %{{x:{NUMBER_SPEC}}} ms ({pct(value / total)})<extra></extra>")
    title = f"Bound: {where.kind} (mean step {ms(total)})"
    return _style(fig, title, height=220, barmode="stack", xaxis_title="ms", yaxis_visible=False)


def step_trace_figure(run: Run) -> go.Figure:
    """The seed's step trace: a stacked bar per step of its split (mean over ranks for multi-rank runs)."""
    means = step_means(run.steps)
    if not means:
        return empty_state("no step data: this run has no step trace (step_trace_raw / step_trace_time.csv)")
    parts = step_split(run.steps)
    columns = [col for col, _ in parts] or ["total_ms"]
    per_step = run.steps.groupby("step", sort=True)[columns].mean().reset_index()
    per_step, merged = bucket(per_step, "step", columns, MAX_STEP_BARS)
    fig = go.Figure()
    for col, label in (parts or (("total_ms", STEP_LABELS["total_ms"]),)):
        fig.add_bar(x=per_step["step"], y=per_step[col], name=label, marker_color=COLORS[col],
                    hovertemplate=f"step %{{x}}<br>{label} {HOVER_MS}<extra></extra>")
    split = "  ".join(f"{label.split(' (')[0]} {pct(means[col] / means['total_ms'])}" for col, label in parts
                      if means.get(col) is not None and means["total_ms"])
    title = (f"Step trace: mean step {ms(means['total_ms'])} over {mean_of_text(means, brief=True)}"
             + (f"  ({split})" if split else ""))
    comm = communication(run)
    comm_in_words = comm is not None and not any(col.startswith("comm") for col in columns)
    if comm_in_words:
        # the step split has no communication part (CPU and legacy steps): said in words, not drawn per bar
        title += (f"<br><sup>{'communication ops' if comm.source == 'comm_ops' else 'exposed communication'} "
                  f"{ms(comm.mean_ms)} per step ({pct(comm.share)}), inside the parts drawn; per-rank split on the "
                  "Ranks page</sup>")
    ranks = run.steps["rank"].nunique()
    xlabel = "step" + (f" (mean of {merged} consecutive steps per bar)" if merged > 1 else "") + \
        (f", mean over {ranks} ranks" if ranks > 1 else "")
    fig = _style(fig, title, barmode="stack", xaxis_title=xlabel, yaxis_title="ms",
                 bargap=0.15 if len(per_step) > FEW_STEPS else 0.5)
    if comm_in_words:
        fig.update_layout(margin=dict(t=80))
    if merged == 1:
        fig.update_xaxes(type="category")  # one bar per step number, even when steps are not 1..n
    return fig


def op_share_figure(run: Run, top: int = TOP_OP_TYPES) -> go.Figure:
    """Op types by share of op time, largest first; Cast and BatchNorm families highlighted (their share printed
    where mixed precision applies). Types beyond `top` and those under 0.05 % (0.0 % printed) are folded into
    one "other types" bar."""
    shares = op_type_shares(run)
    if not len(shares) or not shares["share"].notna().any():
        return empty_state("no operator statistics in this run")
    visible = shares["share"].fillna(0.0) >= SMALLEST_SHOWN_SHARE
    shown = shares[visible].head(top).copy()
    rest = shares.drop(shown.index)
    if len(rest):
        shown = pd.concat([shown, pd.DataFrame([{"type": f"other types ({len(rest)})",
                                                 "total_ms": rest["total_ms"].sum(), "count": rest["count"].sum(),
                                                 "share": rest["share"].sum()}])], ignore_index=True)
    shown["family"] = shown["type"].astype(str).map(op_family)
    fig = go.Figure()
    for family, label in (("Cast", "Cast"), ("BatchNorm", "BatchNorm family"), ("other", "other op types")):
        part = shown[shown["family"] == family]
        if not len(part):
            continue
        fig.add_bar(y=part["type"].astype(str), x=100 * part["share"], orientation="h", name=label,
                    marker_color=COLORS[family], customdata=part[["total_ms", "count"]].to_numpy(),
                    text=[pct(s) for s in part["share"]], textposition="outside", cliponaxis=False,
                    hovertemplate="%{y}: %{x:.1f} % of op time<br>%{customdata[0]:" + NUMBER_SPEC + "} ms, "
                                  f"%{{customdata[1]:,}} calls (summed over {OP_TYPES_SUMMED_OVER})<extra></extra>")
    order = list(shown["type"].astype(str))
    if amp_families_apply(run):
        cast, bn = cast_share(run), batchnorm_share(run)
        fig.add_annotation(text=f"<b>Cast + BatchNorm: {pct((cast or 0.0) + (bn or 0.0))} of op time</b>  "
                                f"(Cast {pct(cast)}, BatchNorm {pct(bn)})",
                           xref="paper", yref="paper", x=1.0, y=0.0, xanchor="right", yanchor="bottom",
                           showarrow=False, bgcolor="rgba(255,255,255,0.9)", bordercolor=COLORS["BatchNorm"],
                           borderpad=6, font=dict(size=14))
    height = max(320, 90 + 24 * len(shown))
    fig = _style(fig, f"Op types by share of op time ({len(shares)} types, summed over {OP_TYPES_SUMMED_OVER})",
                 height=height, barmode="overlay", xaxis_title="% of summed op time", bargap=0.25)
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], automargin=True)
    fig.update_xaxes(range=[0, 100], ticksuffix=" %")
    return fig


QUEUE_NAMES = {"host": "Host queue (MindData -> device)", "device": "Device data queue (GetNext)"}


def _queue_missing(run: Run, which: str) -> str:
    if which == "device":
        if (run.meta.device or "").upper() == "CPU":
            return "no device queue data: CPU runs feed the host directly (no device queue)"
        if run.meta.data_mode == "feed":
            return "no device queue data: feed mode (the device queue exists only with dataset_sink_mode=True)"
        return "no device queue data in this run (minddata_aicpu / GetNext profiling absent)"
    return "no host queue data in this run (device_queue / dataset_iterator profiling absent)"


def queue_figure(run: Run, which: str) -> go.Figure:
    """Queue size per batch with its capacity; the empty/full percentages of `queue_stats` in the title."""
    queue = run.host_queue if which == "host" else run.device_queue
    stats = queue_stats(queue)
    if stats is None:
        return empty_state(_queue_missing(run, which))
    fig = go.Figure()
    ranks = sorted(queue["rank"].unique())
    merged_max = 1
    for position, rank in enumerate(ranks):
        samples = queue[queue["rank"] == rank].assign(size=lambda q: q["size"].astype("float64"),
                                                      capacity=lambda q: pd.to_numeric(q["capacity"],
                                                                                       errors="coerce"))
        points, merged = bucket(samples, "batch", ["size", "capacity"], MAX_POINTS_PER_TRACE)
        merged_max = max(merged_max, merged)
        suffix = f" rank {rank}" if len(ranks) > 1 else ""
        # a handful of samples (a 3-step profile) is invisible as a bare line: mark each one
        mode = "lines+markers" if len(points) <= FEW_QUEUE_SAMPLES else "lines"
        # the queue's colour for every rank, told apart by the line's dash (a filled area would hide the others)
        fig.add_scatter(x=points["batch"], y=points["size"], mode=mode, name=f"size{suffix}",
                        line=dict(width=1.5, shape="hv" if merged == 1 else "linear", color=COLORS[which],
                                  dash=RANK_DASHES[position % len(RANK_DASHES)]),
                        fill="tozeroy" if len(ranks) == 1 else None,
                        hovertemplate=f"batch %{{x:,d}}{suffix}<br>size %{{y:,d}}<extra></extra>")
        if points["capacity"].notna().any():
            fig.add_scatter(x=points["batch"], y=points["capacity"], mode=mode, name=f"capacity{suffix}",
                            line=dict(width=1, dash="dash", color=COLORS["capacity"]), hoverinfo="skip")
    title = (f"{QUEUE_NAMES[which]}<br><sup>empty {percent(stats['empty_pct'])} · full {percent(stats['full_pct'])} "
             f"of {count(stats['samples'])} samples</sup>")
    xlabel = "batch" + (f" (mean of {merged_max} batches per point)" if merged_max > 1 else "")
    fig = _style(fig, title, height=340, xaxis_title=xlabel, yaxis_title="elements in queue",
                 yaxis_rangemode="tozero")
    fig.update_layout(margin=dict(t=80))
    # batches are whole numbers: ticks every batch while that is readable, else plotly's integer steps
    batches = queue["batch"].max() - queue["batch"].min()
    fig.update_xaxes(tickformat=",d", dtick=1 if batches <= FEW_BATCH_TICKS else None)
    fig.update_yaxes(tickformat=",d", rangemode="tozero")
    return fig


def pipeline_figure(run: Run) -> go.Figure:
    """Dataset ops in pipeline order (root first) with their output queue usage: one rank's bars with their
    worker counts; several ranks side by side, an op x rank grid (their queues differ: one rank's full
    everywhere, another's starved); beyond PIPELINE_RANK_COLUMNS ranks, each op's median with its min-max spread
    over the ranks, as `perfkit summary` prints them."""
    pipeline = run.pipeline
    if not len(pipeline):
        return empty_state("no data pipeline profiling in this run (minddata_pipeline_raw / pipeline_profiling)")
    ranks = sorted(int(rank) for rank in pipeline["rank"].unique())
    # ops by op_id over every rank (the first rank that has an op names its type and workers, as the text does)
    ops = pipeline.sort_values(["op_id", "rank"]).drop_duplicates("op_id")
    labels = {int(row.op_id): f"{row.op_type} (op {row.op_id}) · {_workers(row.workers)}"
              for row in ops.itertuples(index=False)}
    if len(ranks) == 1:
        fig = _one_rank_pipeline(pipeline.sort_values("op_id"), labels, ranks[0])
    elif len(ranks) <= PIPELINE_RANK_COLUMNS:
        fig = _pipeline_grid(pipeline, labels, ranks)
    else:
        fig = _pooled_pipeline(pipeline, labels, ranks)
    fig.update_yaxes(categoryorder="array", categoryarray=list(labels.values())[::-1], automargin=True)
    return fig


def _one_rank_pipeline(ops: pd.DataFrame, labels: dict[int, str], rank: int) -> go.Figure:
    usage = 100 * ops["queue_usage"]
    fig = go.Figure()
    fig.add_bar(y=[labels[op] for op in ops["op_id"]], x=usage.fillna(0), orientation="h", marker_color=[
        COLORS["slow"] if u < LOW_QUEUE_USAGE_PCT else COLORS["ok"] for u in usage.fillna(0)],
        text=["no queue" if math.isnan(u) else f"{u:.0f} %" for u in usage], textposition="outside",
        cliponaxis=False, hovertemplate="%{y}<br>output queue usage %{x:.1f} %<extra></extra>", showlegend=False)
    fig = _style(fig, f"Data pipeline of rank {rank}: output queue usage per dataset op "
                      f"(root first; red < {LOW_QUEUE_USAGE_PCT} %)",
                 height=max(220, 100 + 38 * len(ops)), xaxis_title="mean output queue usage")
    fig.update_xaxes(range=[0, 100], ticksuffix=" %")
    fig.update_layout(margin=dict(r=150))  # room for the text of a full queue's bar
    return fig


def _pipeline_grid(pipeline: pd.DataFrame, labels: dict[int, str], ranks: list[int]) -> go.Figure:
    """One square per op and rank, coloured by its output queue usage (red: starved, green: full); an op without
    an output queue (the root) is a grey square saying so. Drawn as scatter markers, as link_heatmap_figure."""
    cells = pipeline.assign(usage_pct=100 * pipeline["queue_usage"], label=pipeline["op_id"].map(labels),
                            column=[f"rank {rank}" for rank in pipeline["rank"]])
    queued, unqueued = cells[cells["usage_pct"].notna()], cells[cells["usage_pct"].isna()]
    fig = go.Figure()
    fig.add_scatter(x=queued["column"], y=queued["label"], mode="markers+text", showlegend=False,
                    text=[percent(u) for u in queued["usage_pct"]], textfont=dict(size=12, color="#111"),
                    marker=dict(symbol="square", size=52, color=queued["usage_pct"], colorscale="RdYlGn", cmin=0,
                                cmax=100, showscale=True, line=dict(width=1, color="white"),
                                colorbar=dict(title="queue<br>usage", ticksuffix=" %")),
                    hovertemplate="%{y}<br>%{x}: output queue usage %{marker.color:.1f} %<extra></extra>")
    if len(unqueued):
        fig.add_scatter(x=unqueued["column"], y=unqueued["label"], mode="markers+text", showlegend=False,
                        text=["no queue"] * len(unqueued), textfont=dict(size=10, color="#555"),
                        marker=dict(symbol="square", size=52, color="#e8e8e8", line=dict(width=1, color="white")),
                        hovertemplate="%{y}<br>%{x}: no output queue<extra></extra>")
    fig = _style(fig, f"Data pipeline per rank: output queue usage per dataset op (root first; red < "
                      f"{LOW_QUEUE_USAGE_PCT} %)<br><sup>{_widest_spread(queued)}</sup>",
                 height=max(260, 120 + 60 * len(labels)))
    # each rank's mean over its queued ops under its name: a rank starved everywhere reads at a glance
    means = queued.groupby("rank")["usage_pct"].mean()
    fig.update_xaxes(categoryorder="array", categoryarray=[f"rank {rank}" for rank in ranks], showgrid=False,
                     side="top", tickvals=[f"rank {rank}" for rank in ranks],
                     ticktext=[f"rank {rank}<br>mean {percent(means.get(rank))}" for rank in ranks])
    fig.update_yaxes(showgrid=False)
    fig.update_layout(margin=dict(t=110))
    return fig


def _widest_spread(queued: pd.DataFrame) -> str:
    """The op whose queue usage differs most between ranks, with its lowest and highest rank."""
    spread = queued.groupby("op_id")["usage_pct"].agg(lambda usage: usage.max() - usage.min())
    if not len(spread) or spread.max() == 0:
        return "every op's queue usage is the same on every rank"
    rows = queued[queued["op_id"] == spread.idxmax()]
    low, high = rows.loc[rows["usage_pct"].idxmin()], rows.loc[rows["usage_pct"].idxmax()]
    return (f"ranks differ most at {low['op_type']} (op {low['op_id']}): rank {low['rank']} {percent(low['usage_pct'])}"
            f", rank {high['rank']} {percent(high['usage_pct'])}")


def _pooled_pipeline(pipeline: pd.DataFrame, labels: dict[int, str], ranks: list[int]) -> go.Figure:
    """Each op's median queue usage over the ranks (a bar) and its min-max spread (whiskers), the rank at each
    end named on hover: `perfkit summary`'s min / median / max."""
    rows = []
    for op_id, label in labels.items():
        usage = pipeline[pipeline["op_id"] == op_id].dropna(subset=["queue_usage"]).sort_values("queue_usage")
        if not len(usage):
            rows.append((label, float("nan"), float("nan"), float("nan"), "", ""))
            continue
        low, median, high = (100 * value for value in pooled(usage["queue_usage"].tolist()))
        rows.append((label, low, median, high, usage["rank"].iloc[0], usage["rank"].iloc[-1]))
    frame = pd.DataFrame(rows, columns=["label", "low", "median", "high", "low_rank", "high_rank"])
    fig = go.Figure()
    fig.add_bar(y=frame["label"], x=frame["median"].fillna(0), orientation="h", showlegend=False,
                marker_color=[COLORS["slow"] if m < LOW_QUEUE_USAGE_PCT else COLORS["ok"]
                              for m in frame["median"].fillna(0)],
                error_x=dict(type="data", symmetric=False, array=frame["high"] - frame["median"],
                             arrayminus=frame["median"] - frame["low"], color="#333", thickness=1.5, width=6),
                text=["no queue" if math.isnan(m) else f"{percent(lo)} / {percent(m)} / {percent(hi)}"
                      for lo, m, hi in zip(frame["low"], frame["median"], frame["high"])],
                textposition="none", customdata=frame[["low", "low_rank", "high", "high_rank"]].to_numpy(),
                hovertemplate="%{y}<br>median %{x:.1f} %<br>min %{customdata[0]:.1f} % (rank %{customdata[1]})"
                              "<br>max %{customdata[2]:.1f} % (rank %{customdata[3]})<extra></extra>")
    fig = _style(fig, f"Data pipeline over {len(ranks)} ranks: output queue usage per dataset op, median with "
                      f"min-max whiskers (root first; red < {LOW_QUEUE_USAGE_PCT} %)",
                 height=max(220, 100 + 38 * len(labels)), xaxis_title="output queue usage over the ranks: "
                                                                       "min / median / max")
    # the numbers right of the plot, where no whisker crosses them
    for label, text in zip(frame["label"], fig.data[0].text):
        fig.add_annotation(x=1.01, xref="paper", y=label, text=text, showarrow=False, xanchor="left")
    fig.update_xaxes(range=[0, 100], ticksuffix=" %")
    fig.update_layout(margin=dict(r=230))
    return fig


def _workers(workers) -> str:
    if pd.isna(workers):
        return "workers unknown"
    return f"{int(workers)} worker{'s' if workers != 1 else ''}"


# ---------------------------------------------------------------------------------------------------------
# Operators


def op_type_rows(run: Run) -> pd.DataFrame:
    """Op types largest first, as the operators table shows them (share in %).

    Where ranks run different op-type mixes (analysis.ranks_run_different_ops), one more column per mix of
    ranks (views.numbers.op_mix_columns, a few at most): the type's share of those ranks' op time (0 where they
    do not run it), so the pooled share is not read as any one rank's.
    """
    shares = op_type_shares(run)
    rows = pd.DataFrame({"type": shares["type"].astype(str), "family": shares["type"].astype(str).map(op_family),
                         "total_ms": shares["total_ms"].astype(float),
                         "count": shares["count"].astype("int64"),
                         "share_pct": 100 * shares["share"].astype(float)})
    mixes = op_mix_columns(run)
    return rows if mixes is None else rows.join(mixes.shares.fillna(0.0), on="type")


@once_per_run
def _short_op_names(run: Run) -> dict[str, str]:
    """Full op name -> the short one the instance table shows (views.format.short_op_names over every op of the
    run, so a search or pass filter never changes how a name reads)."""
    names = run.ops["name"].astype(str).tolist()
    return dict(zip(names, short_op_names(names)))


def op_instance_rows(run: Run, passes: Sequence[str] | None = None, search: str = "",
                     limit: int = MAX_TABLE_ROWS) -> tuple[pd.DataFrame, int]:
    """Op instances (largest total time first) of the given passes whose name or type contains `search`.

    Returns at most `limit` rows and the number that matched; `short_name` is how the table shows `name`.
    """
    ops = run.ops
    if passes:
        ops = ops[ops["pass"].isin(list(passes))]
    needle = search.strip().lower()
    if needle:
        ops = ops[ops["name"].str.lower().str.contains(needle, regex=False, na=False)
                  | ops["type"].str.lower().str.contains(needle, regex=False, na=False)]
    matched = len(ops)
    top = ops.nlargest(limit, "total_ms") if matched > limit else ops.sort_values("total_ms", ascending=False)
    short = _short_op_names(run)
    rows = pd.DataFrame({"rank": top["rank"].astype("int64"), "name": top["name"].astype(str),
                         "short_name": top["name"].astype(str).map(short),
                         "type": top["type"].astype(str), "pass": top["pass"].astype(str),
                         "input_shapes": top["input_shapes"].astype("string").fillna(""),
                         "avg_ms": top["avg_ms"].astype(float), "count": top["count"].astype("int64"),
                         "total_ms": top["total_ms"].astype(float)})
    return rows.reset_index(drop=True), matched


# ---------------------------------------------------------------------------------------------------------
# Compare


def compare_steps_figure(runs: Sequence[Run]) -> go.Figure:
    """Mean step split of each run side by side, its mean step above each bar (the speedup, per sample when the
    batches differ, is the verdict's: compare_speedup_cards)."""
    labels = run_labels(runs)
    means = [step_means(run.steps) for run in runs]
    if not any(means):
        return empty_state("no step data in any of these runs")
    fig = go.Figure()
    split_parts = {part for run in runs for part in step_split(run.steps)}
    ordered = [part for split in STEP_SPLITS for part in split if part in split_parts]
    for col, label in ordered:
        fig.add_bar(x=labels, y=[(m or {}).get(col) for m in means], name=label, marker_color=COLORS[col],
                    hovertemplate=f"%{{x}}<br>{label} {HOVER_MS}<extra></extra>")
    if not ordered:
        fig.add_bar(x=labels, y=[(m or {}).get("total_ms") for m in means], name=STEP_LABELS["total_ms"],
                    marker_color=COLORS["total_ms"])
    for label, mean in zip(labels, means):
        if mean and mean.get("total_ms") is not None:
            fig.add_annotation(x=label, y=mean["total_ms"], text=ms(mean["total_ms"]), showarrow=False, yanchor="bottom",
                               yshift=4, font=dict(size=13))
    top = max((m or {}).get("total_ms") or 0 for m in means)
    fig = _style(fig, "Mean step time and its split", height=420, barmode="stack",
                 yaxis_title="ms per step", bargap=0.35)
    fig.update_yaxes(range=[0, top * 1.22 if top else 1])
    return fig


def compare_speedup_cards(runs: Sequence[Run]) -> list[Card]:
    """One card per run: its speedup over the first with the verdict block of `perfkit compare`
    (compare.verdict_lines: the run-to-run verdict, samples/s), under the banner when device, network or batch
    size differ from the first's."""
    cards = []
    for index, (label, run) in enumerate(zip(run_labels(runs), runs)):
        if index == 0:
            throughput = samples_per_s(run)
            cards.append(Card(f"speedup-{index}", label, "baseline",
                              "samples/s unknown" if throughput is None else f"{throughput:,.1f} samples/s"))
            continue
        judged = judge([runs[0]], [run])
        banner = (banner_words(judged["incomparable"], judged["settings_a"], judged["settings_b"]) + " · "
                  if judged["incomparable"] else "")
        cards.append(Card(f"speedup-{index}", label,
                          "unknown" if judged["speedup"] is None else format_speedup(judged["speedup"]),
                          banner + " · ".join(f"{name} {text}" for name, text in verdict_lines(judged))))
    return cards


def compare_step_spread_figure(runs: Sequence[Run]) -> go.Figure:
    """Every step's total per run (a box and its points): the within-run spread, a description of each run (the
    verdict compares runs: compare_speedup_cards)."""
    labels = run_labels(runs)
    totals = [step_totals(run.steps) for run in runs]
    if not any(len(t) for t in totals):
        return empty_state("no step totals in any of these runs")
    fig = go.Figure()
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
    fig = _style(fig, f"{SPREAD_TITLE[0].upper()}{SPREAD_TITLE[1:]}: step time per step (mean ± std)", height=420,
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
    fig = go.Figure()
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
    fig = _style(fig, "Op time per step (ms), largest changes first", barmode="group",
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
    fig = go.Figure()
    for which, values in stats.items():
        y = [s["empty_pct"] if s else None for s in values]
        fig.add_bar(x=labels, y=y, name=f"{which} queue empty", marker_color=COLORS[which],
                    text=[percent(v) if v is not None else "no data" for v in y], textposition="outside",
                    cliponaxis=False, hovertemplate=f"%{{x}}<br>{which} queue empty %{{y:.1f}} %<extra></extra>")
    fig = _style(fig, "Share of samples with an empty queue", height=380, barmode="group",
                 yaxis_title="% of samples empty")
    fig.update_yaxes(range=[0, 115])
    return fig


# ---------------------------------------------------------------------------------------------------------
# Ranks


def ranks_figure(run: Run) -> go.Figure:
    """Per-rank mean step split into the step ledger's parts (the numbers `perfkit ranks` and `summary` print);
    the slow ranks of `perfkit summary` / `perfkit ranks` are marked."""
    per_rank = per_rank_parts(run)
    if len(per_rank) < 2:
        return empty_state("single-rank run: there are no other ranks to compare with")
    slow = set(slow_ranks(run))
    labels = [f"rank {row['rank']}" + (" (slow)" if row["rank"] in slow else "") for row in per_rank]
    fig = go.Figure()
    for col, label in rank_bar_segments(run):
        fig.add_bar(x=labels, y=[row.get(col) for row in per_rank], name=label,
                    marker_color=BOUND_COLORS[col.removesuffix("_ms")],
                    hovertemplate=f"%{{x}}<br>{label} {HOVER_MS}<extra></extra>")
    for label, row in zip(labels, per_rank):
        total = row["total_ms"]
        marked = row["rank"] in slow
        if total is not None and (marked or len(per_rank) <= MAX_LABELLED_RANKS):
            fig.add_annotation(x=label, y=total, text=("⚠ " if marked else "") + ms(total), showarrow=False,
                               yanchor="bottom", yshift=4,
                               font=dict(size=13, color=COLORS["slow"] if marked else "#222"))
    top = max(row["total_ms"] or 0 for row in per_rank)
    verdict = f"slow: {', '.join(f'rank {r}' for r in sorted(slow))}" if slow else "no slow rank"
    fig = _style(fig, f"Mean step per rank ({verdict})", height=420, barmode="stack", yaxis_title="ms per step",
                 bargap=0.35)
    fig.update_yaxes(range=[0, top * 1.18 if top else 1])
    return fig


def rank_rows(run: Run) -> pd.DataFrame:
    """Per-rank mean step split (the ledger's parts and the idle time), how much slower than the fastest rank
    (in %), and whether the rank is slow."""
    per_rank = per_rank_parts(run)
    if len(per_rank) < 2:
        return pd.DataFrame(columns=["rank", "total_ms", "slower_than_fastest_pct", "slow"])
    slow = set(slow_ranks(run))
    frame = pd.DataFrame(per_rank)
    fastest = frame["total_ms"].min()
    frame["slower_than_fastest_pct"] = 100 * (frame["total_ms"] - fastest) / fastest if fastest else float("nan")
    frame["slow"] = frame["rank"].isin(slow).map({True: "yes", False: "no"})
    return frame


# ---------------------------------------------------------------- timeline (perfkit.io.timeline windows)

# Above this many bars a timeline is merged: plotly draws a few thousand SVG bars in well under a second,
# and a 1,500 px plot cannot show more distinct bars anyway.
MAX_TIMELINE_BARS = 4000
# Events shorter than this share of the window (under a pixel at dashboard width) are merged with
# adjacent tiny ones in their lane when the window has too many bars.
TINY_EVENT_SHARE = 1 / 1500
# "scope": cell-scope spans (a CPU run's Scope Layer), containers of the compute under them, not compute.
TIMELINE_COLORS = {"compute": "#4e79a7", "communication": "#e15759", "data": "#f28e2b", "host": "#59a14f",
                   "idle": "#bab0ac", "scope": "#d4c4e0"}
TIMELINE_LANE_PX = 22


def nesting_depth(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per event of one lane, sorted by start and, among equal starts, longest first: how many earlier events
    contain it (start no later, end no earlier; a zero-length event at a container's very end is not inside
    it). A call stack's frames, a cell scope's ops: each is one deeper than the event it starts inside.

    Vectorised as a count of earlier events with an end at or above one's own: over blocks of 1, 2, 4 ...
    events, each event in a block's right half counts the left half's ends at or above its own (one sorted
    search per level), so n events cost log2(n) sorts, never a Python loop over events.
    """
    count = len(starts)
    depth = np.zeros(count, dtype=np.int64)
    if count < 2:
        return depth
    end_rank = np.unique(ends, return_inverse=True)[1].astype(np.int64)
    lowest = end_rank + (ends <= starts)  # the lowest end rank that contains the event
    width = int(end_rank.max()) + 2
    position = np.arange(count, dtype=np.int64)
    size = 1
    while size < count:
        block = position // (2 * size)
        right = (position // size) % 2 == 1
        left_keys = np.sort(block[~right] * width + end_rank[~right])
        base = block[right] * width
        depth[right] += (np.searchsorted(left_keys, base + width) - np.searchsorted(left_keys, base + lowest[right]))
        size *= 2
    return depth


def complete_events(events: pd.DataFrame) -> pd.DataFrame:
    """A window's events with a duration (what the timeline draws), in lane and time order, each with its
    nesting `depth` in its lane (rank, lane_order; `nesting_depth`).

    An event reaching past its rank's window (`events.attrs["window_us"]`, perfkit.io.timeline's) is cut at the
    window's edges, its whole duration kept in `full_dur_us` (NaN where it was not cut): a cell-scope span of a
    CPU run runs on into the next step when that step's first ops share its scope (the profiler joins
    consecutive ops of one scope into one span), and a step's window must not show more than the step. Depths
    are those of the whole events: a cut changes where a bar ends, not which row it is in."""
    bars = events[events["dur_us"].notna() & (events["ph"] == "X")].copy()
    bars["end_us"] = bars["start_us"] + bars["dur_us"]
    bars = bars.sort_values(["rank", "lane_order", "start_us", "end_us"], ascending=[True, True, True, False],
                            kind="stable")
    starts, ends = bars["start_us"].to_numpy(), bars["end_us"].to_numpy()
    depth = np.zeros(len(bars), dtype=np.int64)
    for rows in bars.groupby(["rank", "lane_order"], sort=False).indices.values():
        depth[rows] = nesting_depth(starts[rows], ends[rows])
    bars["depth"] = depth
    bars["full_dur_us"] = np.nan
    for rank, (low, high) in events.attrs.get("window_us", {}).items():
        mine = bars["rank"] == rank
        cut = mine & ((bars["start_us"] < low) | (bars["end_us"] > high))
        bars.loc[cut, "full_dur_us"] = bars.loc[cut, "dur_us"]
        bars.loc[mine, "start_us"] = bars.loc[mine, "start_us"].clip(lower=low)
        bars.loc[mine, "end_us"] = bars.loc[mine, "end_us"].clip(upper=high)
    bars["dur_us"] = bars.pop("end_us") - bars["start_us"]
    return bars


def timeline_bars(events: pd.DataFrame, max_bars: int = MAX_TIMELINE_BARS) -> tuple[pd.DataFrame, int]:
    """(bars to draw, events merged away): `complete_events(events)` (a window, or already that), and above
    `max_bars`, each run of adjacent tiny events at one depth of a lane merged into one bar named "N events"."""
    bars = events if "depth" in events else complete_events(events)
    bars = bars.assign(count=1)
    if len(bars) <= max_bars:
        return bars, 0
    window = (bars["start_us"] + bars["dur_us"]).max() - bars["start_us"].min()
    tiny_us = window * TINY_EVENT_SHARE
    bars = bars.sort_values(["rank", "lane_order", "depth", "start_us"], kind="stable")
    tiny = (bars["dur_us"] < tiny_us).to_numpy()
    row = (bars["rank"].astype(str) + "/" + bars["lane_order"].astype(str) + "/" + bars["depth"].astype(str)).to_numpy()
    gap = bars["start_us"].to_numpy() - np.r_[-np.inf, (bars["start_us"] + bars["dur_us"]).to_numpy()[:-1]]
    joins = tiny & np.r_[False, tiny[:-1]] & np.r_[False, row[1:] == row[:-1]] & (gap < tiny_us)
    bars["group"] = np.cumsum(~joins)
    merged = bars.groupby("group", sort=False).agg(
        rank=("rank", "first"), process=("process", "first"), lane=("lane", "first"),
        lane_order=("lane_order", "first"), depth=("depth", "first"), name=("name", "first"),
        category=("category", "first"), start_us=("start_us", "min"), shapes=("shapes", "first"),
        count=("count", "sum"), ph=("ph", "first"), full_dur_us=("full_dur_us", "first"))
    ends = (bars["start_us"] + bars["dur_us"]).groupby(bars["group"], sort=False).max()
    merged["dur_us"] = ends.to_numpy() - merged["start_us"].to_numpy()
    several = merged["count"] > 1
    merged.loc[several, "name"] = merged.loc[several, "count"].map(lambda n: f"{n} events")
    merged.loc[several, "shapes"] = None
    return merged.reset_index(drop=True), len(bars) - len(merged)


def _row_labels(bars: pd.DataFrame) -> pd.Series:
    """A lane's row label, "rank R · process · lane"; its nested events' sub-rows add " · depth"."""
    lane = "rank " + bars["rank"].astype(str) + " · " + bars["process"].astype(str) + " · " + bars["lane"].astype(str)
    return lane.where(bars["depth"] == 0, lane + " · " + bars["depth"].astype(str))


def timeline_figure(events: pd.DataFrame, title: str = "", max_bars: int = MAX_TIMELINE_BARS,
                    highlight: OpTarget | None = None) -> go.Figure:
    """Lanes as rows (rank, process, thread; in the profiler's order), nested events in sub-rows under their
    lane (one per depth), events as bars coloured by category, time in ms from the window's start; hover:
    name, duration, shapes. Zoom with the mouse. The events `highlight` matches are outlined and counted in
    the title."""
    complete = complete_events(events)
    bars, merged_away = timeline_bars(complete, max_bars)
    if not len(bars):
        return empty_state("no events with a duration in this window")
    zero = bars["start_us"].min()
    bars["label"] = _row_labels(bars)
    order = bars.sort_values(["rank", "lane_order", "depth"]).drop_duplicates("label")["label"].tolist()
    fig = go.Figure()
    for category, part in bars.groupby("category", sort=True):
        shapes = part["shapes"].where(part["shapes"].notna(), "").astype(str).str.replace("\r\n", " ", regex=False)
        cut = part["full_dur_us"].map(lambda us: "" if us != us else
                                      f"<br>cut at the window's edge: runs {us / US_PER_MS:,.3f} ms in all")
        fig.add_bar(y=part["label"], x=part["dur_us"] / US_PER_MS, base=(part["start_us"] - zero) / US_PER_MS,
                    orientation="h", name=category, marker_color=TIMELINE_COLORS.get(category, "#9c755f"),
                    marker_line_width=0, customdata=np.stack([part["name"].astype(str), shapes, cut], axis=1),
                    hovertemplate="%{customdata[0]}<br>%{x:.3f} ms at %{base:.3f} ms<br>%{customdata[1]}"
                                  "%{customdata[2]}<extra>" + category + "</extra>")
    note = f" · {merged_away:,} tiny events merged into neighbours" if merged_away else ""
    cut_count = int(complete["full_dur_us"].notna().sum())
    if cut_count:
        note += f" · {cut_count:,} cut at the window's edges (hover: whole length)"
    if highlight is not None:
        found = complete[highlight.matches(complete)]
        fig.add_bar(y=_row_labels(found), x=found["dur_us"] / US_PER_MS, base=(found["start_us"] - zero) / US_PER_MS,
                    orientation="h", name=highlight.label[:40], marker=dict(color="rgba(0,0,0,0)",
                                                                            line=dict(color="#111", width=2)),
                    hoverinfo="skip")
        note += f" · {len(found):,} of them {highlight.label}"
    fig.update_layout(title=dict(text=f"{title}{len(events):,} events{note}", font=dict(size=14)), barmode="overlay",
                      bargap=0.15, height=max(240, 80 + TIMELINE_LANE_PX * len(order)), font=FONT,
                      plot_bgcolor="white", paper_bgcolor="white", margin=dict(l=20, r=20, t=50, b=40),
                      legend=dict(orientation="h", y=1.02, x=1, xanchor="right", yanchor="bottom"),
                      meta={"bars": len(bars), "merged": merged_away, "cut": cut_count})
    fig.update_xaxes(title="ms from the window's start", showgrid=True, gridcolor="#eee", zeroline=False)
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], automargin=True)
    return fig


# ---------------------------------------------------------------------------------------------------------
# Memory and communication (the Memory page; the Ranks page's communication panels)

# Op names the top-ops-by-memory chart lists: beyond 20 the bars get too thin to read at dashboard height.
TOP_MEMORY_OPS = 20
# Communication op rows the Ranks page's table ships (longest first): a cluster run has thousands.
MAX_COMM_ROWS = 500
# Heat-map colour range in multiples of the median link of the same type: slow_link's bar (0.8) sits in the
# yellow, half the median is deep red.
LINK_COLOR_RANGE = (0.4, 1.2)


def _peaks_kept(samples: pd.DataFrame, column: str, limit: int) -> pd.DataFrame:
    """At most `limit` samples in time order: each bucket of consecutive samples keeps its largest `column`
    value, so thinning a long trace never hides its peak (averaging, as `bucket` does, would)."""
    if len(samples) <= limit:
        return samples
    positions = pd.Series(range(len(samples)), index=samples.index) * limit // len(samples)
    return samples.loc[samples[column].fillna(-1.0).groupby(positions.to_numpy()).idxmax()]


def memory_timeline_figure(run: Run) -> go.Figure:
    """The framework allocator's allocated and reserved MB over time, one pair of lines per rank, with the
    profiled steps' starts marked where the run recorded step times."""
    samples = framework_memory(run)
    if not len(samples):
        return empty_state("no allocator memory records in this run (profile with profile_memory=True: "
                           "perfkit profile --profile-memory)")
    fig = go.Figure()
    ranks = sorted(samples["rank"].unique())
    for rank in ranks:
        of_rank = samples[samples["rank"] == rank].sort_values("time_ms", kind="stable")
        for column, label in (("allocated_mb", "allocated"), ("reserved_mb", "reserved")):
            shown = _peaks_kept(of_rank[of_rank[column].notna()], column, MAX_POINTS_PER_TRACE)
            if not len(shown):
                continue
            name = f"{label} (rank {rank})" if len(ranks) > 1 else label
            fig.add_scatter(x=shown["time_ms"], y=shown[column], mode="lines", name=name, line_shape="hv",
                            line=dict(color=COLORS[column], width=2, dash="solid" if rank == ranks[0] else "dot"),
                            hovertemplate=f"{name}<br>%{{x:{NUMBER_SPEC}}} ms<br>%{{y:{MB_SPEC}}} MB<extra></extra>")
    starts = samples.dropna(subset=["step"]).groupby("step")["time_ms"].min()
    for step, start in starts.items():
        fig.add_vline(x=float(start), line=dict(color="#999", width=1, dash="dash"))
        fig.add_annotation(x=float(start), y=1.0, yref="paper", text=f"step {step}", showarrow=False,
                           xanchor="left", yanchor="bottom", font=dict(size=11, color="#666"))
    component = ", ".join(sorted(samples["component"].dropna().astype(str).unique()))
    steps_note = "" if len(starts) else " · step bounds unknown (no recorded step times)"
    return _style(fig, f"Memory over time ({component} allocator){steps_note}", height=420,
                  xaxis_title="ms since the run's start", yaxis_title="MB")


def top_op_memory_figure(run: Run, top: int = TOP_MEMORY_OPS) -> go.Figure:
    """Operators by the largest memory block they allocated (over every rank), largest first."""
    if not len(run.op_memory):
        return empty_state("no per-operator memory in this run (operator_memory.csv, written with "
                           "profile_memory=True on Ascend)")
    per_op = (run.op_memory.groupby("name", observed=True)
              .agg(largest_mb=("size_mb", "max"), total_mb=("size_mb", "sum"), blocks=("size_mb", "size"))
              .reset_index().sort_values(["largest_mb", "name"], ascending=[False, True])  # ties by name
              .head(top).iloc[::-1].set_index("name"))
    fig = go.Figure(go.Bar(x=per_op["largest_mb"], y=per_op.index.astype(str), orientation="h",
                           marker_color=COLORS["allocated_mb"], customdata=per_op[["total_mb", "blocks"]],
                           hovertemplate="%{y}<br>largest block %{x:,.1f} MB<br>%{customdata[1]} blocks, "
                                         "%{customdata[0]:,.1f} MB in all<extra></extra>"))
    fig = _style(fig, f"Top {len(per_op)} operators by their largest memory block",
                 height=max(300, 24 * len(per_op) + 120), xaxis_title="MB")
    fig.update_yaxes(automargin=True)
    return fig


COMM_OP_COLUMNS = ["rank", "step", "name", "kind", "group", "elapse_ms", "transit_ms", "wait_ms",
                   "synchronization_ms", "wait_ratio", "size_mb"]


def comm_op_rows(run: Run) -> pd.DataFrame:
    """Communication ops, longest first, with each op's wait ratio (wait / (wait + transit), msprof-analyze's)."""
    rows = run.comm_ops.sort_values("elapse_ms", ascending=False, kind="stable").head(MAX_COMM_ROWS)
    moving = rows["wait_ms"] + rows["transit_ms"]
    rows = rows.assign(wait_ratio=rows["wait_ms"] / moving.where(moving > 0))
    return rows[COMM_OP_COLUMNS].round(3)


def link_heatmap_figure(run: Run) -> go.Figure:
    """Rank x rank bandwidth (GB/s) of the network links (not LOCAL), summed over steps and ops: each profiled
    rank's row holds its links to every peer, so peers that were not profiled still show as columns.

    Drawn as square scatter markers, not a plotly heatmap: the dashboard ships plotly.js's basic bundle
    (scatter, bar, pie), which has no heatmap trace.
    """
    links = link_bandwidth(run.comm_links).dropna(subset=["bandwidth_gb_s"])
    if not len(links):
        return empty_state("no link bandwidth in this run (communication_matrix.json)")
    cells = (links.groupby(["src", "dst"])
             .agg(size_mb=("size_mb", "sum"), transit_ms=("transit_ms", "sum"),
                  link_type=("link_type", lambda types: "/".join(sorted(set(types)))))
             .reset_index())
    cells["bandwidth_gb_s"] = cells["size_mb"] / cells["transit_ms"]
    # coloured against the links of the same type: HCCS and RDMA rates differ by design, a slow link does not
    cells["of_median"] = cells["bandwidth_gb_s"] / cells.groupby("link_type")["bandwidth_gb_s"].transform("median")
    sources, targets = sorted(cells["src"].unique()), sorted(cells["dst"].unique())
    fig = go.Figure(go.Scatter(
        x=[f"to {dst}" for dst in cells["dst"]], y=[f"rank {src}" for src in cells["src"]], mode="markers+text",
        text=[f"{value:.1f}" for value in cells["bandwidth_gb_s"]], textfont=dict(size=12, color="#111"),
        customdata=cells[["link_type", "size_mb", "bandwidth_gb_s"]].to_numpy(),
        marker=dict(symbol="square", size=46, color=cells["of_median"], colorscale="RdYlGn", cmin=LINK_COLOR_RANGE[0],
                    cmax=LINK_COLOR_RANGE[1], showscale=True, colorbar=dict(title="x median<br>of its type"),
                    line=dict(width=1, color="white")),
        hovertemplate="%{y} %{x}<br>%{customdata[0]} %{customdata[2]:.2f} GB/s (%{marker.color:.2f}x the median)"
                      "<br>%{customdata[1]:,.1f} MB<extra></extra>"))
    fig = _style(fig, "Link bandwidth, rank to rank (GB/s; red: slower than the links of its type)",
                 height=max(260, 56 * len(sources) + 170))
    fig.update_xaxes(categoryorder="array", categoryarray=[f"to {dst}" for dst in targets], showgrid=False)
    fig.update_yaxes(categoryorder="array", categoryarray=[f"rank {src}" for src in sources][::-1], showgrid=False)
    return fig


# Cells whose time is under this share of the tree's root are left out of the flame graph (their time stays in
# their parent's bar): a large model has thousands of Cells, most of them too thin to see or hover.
CELL_MIN_SHARE = 0.002
# How many levels below the top the flame graph draws (the table lists every Cell).
CELL_LEVELS = 7
PASS_COLORS = {"forward_ms": "#4e79a7", "backward_ms": "#f28e2b", "other_ms": "#a0a0a0"}


def cell_flame_layout(tree: pd.DataFrame) -> pd.DataFrame:
    """The Cell tree laid out as a flame graph (icicle): per drawn Cell, x0 (its start, ms) and its level;
    children start where their parent starts, the largest first, so each spans part of its parent's bar.
    Per-rank trees (ranks running different Cells) get one `rank N` bar above each rank's Cells."""
    if not len(tree):
        return tree.assign(x0=[], level=[], key=[])
    frame = tree.copy()
    per_rank = frame["rank"].notna().any() and frame["rank"].nunique() > 1
    frame["key"] = (("rank " + frame["rank"].astype(str) + "/") if per_rank else "") + frame["path"]
    frame["parent_key"] = np.where(frame["parent"] == "", ("rank " + frame["rank"].astype(str)) if per_rank else "",
                                   (("rank " + frame["rank"].astype(str) + "/") if per_rank else "") + frame["parent"])
    frame["level"] = frame["depth"] + (1 if per_rank else 0)
    if per_rank:
        ranks = frame[frame["depth"] == 1].groupby("rank")[["forward_ms", "backward_ms", "other_ms", "total_ms",
                                                            "calls", "flops", "flops_ms"]].sum().reset_index()
        ranks = ranks.assign(key="rank " + ranks["rank"].astype(str), parent_key="", level=1, depth=0,
                             label="rank " + ranks["rank"].astype(str), path="", share=np.nan, tflops_per_s=np.nan)
        frame = pd.concat([ranks, frame], ignore_index=True)
    top = frame.loc[frame["parent_key"] == "", "total_ms"].sum()
    frame = frame[(frame["total_ms"] >= CELL_MIN_SHARE * top) & (frame["level"] <= CELL_LEVELS)]
    children: dict[str, list[int]] = {}
    for index, parent in zip(frame.index, frame["parent_key"]):
        children.setdefault(parent, []).append(index)
    x0 = {}
    stack = [("", 0.0)]
    while stack:
        parent, start = stack.pop()
        for index in sorted(children.get(parent, []), key=lambda i: -frame.at[i, "total_ms"]):
            x0[index] = start
            stack.append((frame.at[index, "key"], start))
            start += frame.at[index, "total_ms"]
    frame = frame.loc[list(x0)]
    return frame.assign(x0=[x0[i] for i in frame.index]).sort_values(["level", "x0"]).reset_index(drop=True)


def cells_figure(run: Run) -> go.Figure:
    """Op time by network Cell as a flame graph: one row per level of the Cell tree, each Cell a bar as wide as
    its ms per step, split into forward (blue), backward (orange) and other (grey: optimizer, communication);
    hover for ms, share of the step, calls, FLOPs and achieved TFLOP/s. The dashboard zooms into a clicked Cell."""
    from ..analysis.cells import cells
    from ..core.scopes import NO_CELL
    tree = cells(run)
    if not len(tree):
        return empty_state("no op data: nothing to place in Cells")
    if set(tree["path"]) == {NO_CELL}:
        return empty_state("the op names carry no Cell scope (op-type-only names): no Cell tree to draw")
    bars = cell_flame_layout(tree)
    levels = int(bars["level"].max())
    fig = go.Figure()
    offset = bars["x0"].to_numpy(dtype=float)
    for column, name in (("forward_ms", "forward"), ("backward_ms", "backward"), ("other_ms", "other")):
        fig.add_trace(go.Bar(y=bars["level"], x=bars[column], base=offset, orientation="h", name=name,
                             marker=dict(color=PASS_COLORS[column], line=dict(width=0)), hoverinfo="skip"))
        offset = offset + bars[column].to_numpy(dtype=float)
    flops = bars["flops"].where(bars["flops"] > 0)
    hover = [f"<b>{label}</b><br>{path}<br>{ms(total)} per step: forward {ms(fwd)}, backward {ms(bwd)}, other "
             f"{ms(other)}<br>share of the step {'' if share != share else pct(share)}<br>calls per step "
             f"{count(calls)}<br>FLOPs per step {'unknown' if gf != gf else f'{gf / FLOP_PER_GFLOP:,.2f} G'}"
             f"<br>achieved {'unknown' if tf != tf else f'{tf:.3f} TFLOP/s'}"
             for label, path, total, fwd, bwd, other, share, calls, gf, tf in zip(
                 bars["label"], bars["path"], bars["total_ms"], bars["forward_ms"], bars["backward_ms"],
                 bars["other_ms"], bars["share"].astype(float), bars["calls"], flops.astype(float),
                 bars["tflops_per_s"].astype(float))]
    fig.add_trace(go.Bar(y=bars["level"], x=bars["total_ms"], base=bars["x0"], orientation="h", name="Cell",
                         marker=dict(color="rgba(0,0,0,0)", line=dict(color="white", width=1.5)),
                         text=bars["label"], textposition="inside", insidetextanchor="middle",
                         textfont=dict(color="white", size=12), constraintext="both",
                         hovertext=hover, hoverinfo="text", showlegend=False))
    _style(fig, "Op time by Cell (ms per step; click a Cell to zoom, double-click to zoom out)",
           height=120 + 34 * levels, barmode="overlay", bargap=0.04, hovermode="closest")
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(1, levels + 1)),
                     ticktext=[f"level {level}" for level in range(1, levels + 1)], gridcolor="rgba(0,0,0,0)")
    fig.update_xaxes(title_text="ms per step")
    return fig


def cell_rows(run: Run) -> pd.DataFrame:
    """The Cell tree as the Cells table lists it: every Cell, largest first within its level (share in %)."""
    from ..analysis.cells import cells
    tree = cells(run)
    rows = pd.DataFrame({"cell": tree["label"].astype(str), "depth": tree["depth"].astype("int64"),
                         "total_ms": tree["total_ms"], "forward_ms": tree["forward_ms"],
                         "backward_ms": tree["backward_ms"], "other_ms": tree["other_ms"],
                         "share_pct": 100 * tree["share"], "calls": tree["calls"].round().astype("int64"),
                         "flops_gflop": (tree["flops"] / FLOP_PER_GFLOP).where(tree["flops"] > 0),
                         "achieved_tflop_s": tree["tflops_per_s"],
                         "path": tree["path"].astype(str)})
    if tree["rank"].nunique() > 1:  # ranks running different Cells (pooled rows have no rank)
        rows.insert(0, "rank", tree["rank"].astype("int64"))
    return rows.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)


def zoomed_to_cell(fig: go.Figure, run: Run, path: str) -> go.Figure:
    """The Cells flame graph (cells_figure) zoomed into the Cell at `path` (a finding's link); as it was where
    the graph does not draw that Cell."""
    from ..analysis.cells import cells
    bars = cell_flame_layout(cells(run))
    match = bars[bars["path"] == path]
    if not len(match) or empty_message(fig) is not None:
        return fig
    start, width = float(match["x0"].iloc[0]), float(match["total_ms"].iloc[0])
    return go.Figure(fig).update_xaxes(range=[start, start + width], autorange=False)

"""The Overview page's figures: what bounds the step, the step trace, the op types' shares, the host and device
queues, the data pipeline. Long series are bucketed to MAX_POINTS_PER_TRACE points and long step lists to
MAX_STEP_BARS bars, so a run with millions of samples ships a few thousand points."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import pandas as pd

from ...analysis.ledger import bound
from ...analysis.measures import op_type_shares, queue_stats, step_means
from ...core.causes import OP_TYPES_SUMMED_OVER
from ...core.model import Run
from ..format import (
    BOUND_COLORS,
    COLORS,
    NUMBER_SPEC,
    PIPELINE_RANK_COLUMNS,
    STEP_LABELS,
    count,
    mean_of_text,
    ms,
    pct,
    percent,
    pooled,
)
from ..numbers import amp_families_apply, batchnorm_share, cast_share, communication, op_family, step_split
from .style import HOVER_MS, MAX_POINTS_PER_TRACE, empty_state, new_figure, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Stacked bars narrower than ~3 px are unreadable at dashboard width; beyond this, consecutive steps are averaged.
MAX_STEP_BARS = 300
# Up to this many bars get wide gaps, so one or two steps do not fill the plot with a slab of colour.
FEW_STEPS = 4
# Queue traces with up to this many samples get a marker per sample.
FEW_QUEUE_SAMPLES = 50
# The op-type chart lists this many types and folds the rest into "other types": the seed's Cast/BatchNorm
# story is in the top ten, and 25 bars still fit one screen with readable labels.
TOP_OP_TYPES = 25
# Op types under this share print as 0.0 %: their bars are folded into "other types".
SMALLEST_SHOWN_SHARE = 0.0005
# Line dashes that tell ranks apart in a queue chart (all in the queue's colour).
RANK_DASHES = ("solid", "dot", "dash", "longdash", "dashdot")
# Queue charts spanning up to this many batches get a tick per batch.
FEW_BATCH_TICKS = 12
# A dataset op whose output queue is below this usage on average is starving its consumer (red in the chart).
LOW_QUEUE_USAGE_PCT = 50


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


# Overview
def bound_figure(run: Run) -> go.Figure:
    """What bounds the mean step (analysis.bound): one bar split into compute, exposed communication, pipeline
    wait, data wait, host and unknown idle; the kind in the title, the evidence under it."""
    where = bound(run)
    if not where.parts_ms:
        return empty_state("no step data: the step cannot be split into compute, communication and idle time")
    total = sum(where.parts_ms.values())
    fig = new_figure()
    for part, value in where.parts_ms.items():
        if value > 0:
            label = where.labels[part]
            fig.add_bar(y=["mean step"], x=[value], orientation="h", name=label, marker_color=BOUND_COLORS[part],
                        showlegend=True,
                        hovertemplate=f"{label} %{{x:{NUMBER_SPEC}}} ms ({pct(value / total)})<extra></extra>")
    title = f"Bound: {where.kind} (mean step {ms(total)})"
    return style(fig, title, height=220, barmode="stack", xaxis_title="ms", yaxis_visible=False)


def step_trace_figure(run: Run) -> go.Figure:
    """The seed's step trace: a stacked bar per step of its split (mean over ranks for multi-rank runs)."""
    means = step_means(run.steps)
    if not means:
        return empty_state("no step data: this run has no step trace (step_trace_raw / step_trace_time.csv)")
    parts = step_split(run)
    columns = [col for col, _ in parts] or ["total_ms"]
    per_step = run.steps.groupby("step", sort=True)[columns].mean().reset_index()
    per_step, merged = bucket(per_step, "step", columns, MAX_STEP_BARS)
    fig = new_figure()
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
    fig = style(fig, title, barmode="stack", xaxis_title=xlabel, yaxis_title="ms",
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
    fig = new_figure()
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
    fig = style(fig, f"Op types by share of op time ({len(shares)} types, summed over {OP_TYPES_SUMMED_OVER})",
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
    fig = new_figure()
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
    fig = style(fig, title, height=340, xaxis_title=xlabel, yaxis_title="elements in queue",
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
    fig = new_figure()
    fig.add_bar(y=[labels[op] for op in ops["op_id"]], x=usage.fillna(0), orientation="h", marker_color=[
        COLORS["slow"] if u < LOW_QUEUE_USAGE_PCT else COLORS["ok"] for u in usage.fillna(0)],
        text=["no queue" if math.isnan(u) else f"{u:.0f} %" for u in usage], textposition="outside",
        cliponaxis=False, hovertemplate="%{y}<br>output queue usage %{x:.1f} %<extra></extra>", showlegend=False)
    fig = style(fig, f"Data pipeline of rank {rank}: output queue usage per dataset op "
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
    fig = new_figure()
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
    fig = style(fig, f"Data pipeline per rank: output queue usage per dataset op (root first; red < "
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
    fig = new_figure()
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
    fig = style(fig, f"Data pipeline over {len(ranks)} ranks: output queue usage per dataset op, median with "
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

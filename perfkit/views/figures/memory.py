"""The Memory page: the framework allocator's memory over time, and operators by their largest block."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ...analysis.measures import framework_memory
from ...core.model import Run
from ..format import COLORS, MB_SPEC, NUMBER_SPEC
from .style import MAX_POINTS_PER_TRACE, empty_state, new_figure, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Op names the top-ops-by-memory chart lists: beyond 20 the bars get too thin to read at dashboard height.
TOP_MEMORY_OPS = 20


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
    fig = new_figure()
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
    return style(fig, f"Memory over time ({component} allocator){steps_note}", height=420,
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
    fig = new_figure()
    fig.add_bar(x=per_op["largest_mb"], y=per_op.index.astype(str), orientation="h",
                marker_color=COLORS["allocated_mb"], customdata=per_op[["total_mb", "blocks"]],
                hovertemplate="%{y}<br>largest block %{x:,.1f} MB<br>%{customdata[1]} blocks, "
                              "%{customdata[0]:,.1f} MB in all<extra></extra>")
    fig = style(fig, f"Top {len(per_op)} operators by their largest memory block",
                height=max(300, 24 * len(per_op) + 120), xaxis_title="MB")
    fig.update_yaxes(automargin=True)
    return fig

"""The Ranks page: each rank's mean step split by the step ledger (slow ranks marked), and the communication
panels: link bandwidth rank to rank, communication ops longest first."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ...analysis.measures import link_bandwidth
from ...core.model import Run
from ..format import BOUND_COLORS, COLORS, ms
from ..numbers import per_rank_parts, rank_bar_segments, slow_ranks
from .style import HOVER_MS, empty_state, new_figure, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

# Beyond this many ranks only the slow ranks' bars carry a label; 256 labels would overlap into noise.
MAX_LABELLED_RANKS = 32


# Ranks
def ranks_figure(run: Run) -> go.Figure:
    """Per-rank mean step split into the step ledger's parts (the numbers `perfkit ranks` and `summary` print);
    the slow ranks of `perfkit summary` / `perfkit ranks` are marked."""
    per_rank = per_rank_parts(run)
    if len(per_rank) < 2:
        return empty_state("single-rank run: there are no other ranks to compare with")
    slow = set(slow_ranks(run))
    labels = [f"rank {row['rank']}" + (" (slow)" if row["rank"] in slow else "") for row in per_rank]
    fig = new_figure()
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
    fig = style(fig, f"Mean step per rank ({verdict})", height=420, barmode="stack", yaxis_title="ms per step",
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


# Communication op rows the Ranks page's table ships (longest first): a cluster run has thousands.
MAX_COMM_ROWS = 500
# Heat-map colour range in multiples of the median link of the same type: slow_link's bar (0.8) sits in the
# yellow, half the median is deep red.
LINK_COLOR_RANGE = (0.4, 1.2)
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
    fig = new_figure()
    fig.add_scatter(
        x=[f"to {dst}" for dst in cells["dst"]], y=[f"rank {src}" for src in cells["src"]], mode="markers+text",
        text=[f"{value:.1f}" for value in cells["bandwidth_gb_s"]], textfont=dict(size=12, color="#111"),
        customdata=cells[["link_type", "size_mb", "bandwidth_gb_s"]].to_numpy(),
        marker=dict(symbol="square", size=46, color=cells["of_median"], colorscale="RdYlGn", cmin=LINK_COLOR_RANGE[0],
                    cmax=LINK_COLOR_RANGE[1], showscale=True, colorbar=dict(title="x median<br>of its type"),
                    line=dict(width=1, color="white")),
        hovertemplate="%{y} %{x}<br>%{customdata[0]} %{customdata[2]:.2f} GB/s (%{marker.color:.2f}x the median)"
                      "<br>%{customdata[1]:,.1f} MB<extra></extra>")
    fig = style(fig, "Link bandwidth, rank to rank (GB/s; red: slower than the links of its type)",
                height=max(260, 56 * len(sources) + 170))
    fig.update_xaxes(categoryorder="array", categoryarray=[f"to {dst}" for dst in targets], showgrid=False)
    fig.update_yaxes(categoryorder="array", categoryarray=[f"rank {src}" for src in sources][::-1], showgrid=False)
    return fig

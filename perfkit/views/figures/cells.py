"""The Cells page: op time by network Cell as a flame graph, and the Cell tree as a table."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ...analysis.cells import cells
from ...core.model import Run
from ...core.scopes import NO_CELL
from ...core.units import FLOP_PER_GFLOP
from ..format import count, ms, pct
from .style import empty_message, empty_state, new_figure, style

if TYPE_CHECKING:
    import plotly.graph_objects as go

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
    tree = cells(run)
    if not len(tree):
        return empty_state("no op data: nothing to place in Cells")
    if set(tree["path"]) == {NO_CELL}:
        return empty_state("the op names carry no Cell scope (op-type-only names): no Cell tree to draw")
    bars = cell_flame_layout(tree)
    levels = int(bars["level"].max())
    fig = new_figure()
    offset = bars["x0"].to_numpy(dtype=float)
    for column, name in (("forward_ms", "forward"), ("backward_ms", "backward"), ("other_ms", "other")):
        fig.add_bar(y=bars["level"], x=bars[column], base=offset, orientation="h", name=name,
                    marker=dict(color=PASS_COLORS[column], line=dict(width=0)), hoverinfo="skip")
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
    fig.add_bar(y=bars["level"], x=bars["total_ms"], base=bars["x0"], orientation="h", name="Cell",
                marker=dict(color="rgba(0,0,0,0)", line=dict(color="white", width=1.5)),
                text=bars["label"], textposition="inside", insidetextanchor="middle",
                textfont=dict(color="white", size=12), constraintext="both",
                hovertext=hover, hoverinfo="text", showlegend=False)
    style(fig, "Op time by Cell (ms per step; click a Cell to zoom, double-click to zoom out)",
          height=120 + 34 * levels, barmode="overlay", bargap=0.04, hovermode="closest")
    fig.update_yaxes(autorange="reversed", tickmode="array", tickvals=list(range(1, levels + 1)),
                     ticktext=[f"level {level}" for level in range(1, levels + 1)], gridcolor="rgba(0,0,0,0)")
    fig.update_xaxes(title_text="ms per step")
    return fig


def cell_rows(run: Run) -> pd.DataFrame:
    """The Cell tree as the Cells table lists it: every Cell, largest first within its level (share in %)."""
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
    bars = cell_flame_layout(cells(run))
    match = bars[bars["path"] == path]
    if not len(match) or empty_message(fig) is not None:
        return fig
    start, width = float(match["x0"].iloc[0]), float(match["total_ms"].iloc[0])
    return new_figure(fig).update_xaxes(range=[start, start + width], autorange=False)

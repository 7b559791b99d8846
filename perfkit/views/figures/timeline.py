"""The Timeline page's figure: one window of a run's trace (perfkit.io.timeline), lanes as rows, nested events
in sub-rows, tiny events merged beyond MAX_TIMELINE_BARS bars; above them the step's split as the step ledger
attributes it (`step_band`: the data wait a data-bound step spends before its first op, drawn as such); which
step the page opens on (`opening_step`: the first steady step, not the compile step)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ...analysis.ledger import PYNATIVE_COMPUTE_LABEL, ledger
from ...analysis.steady import steady_steps
from ...core.causes import CAUSES
from ...core.model import Run
from ...core.units import US_PER_MS
from ..format import ms
from ..numbers import OpTarget
from .style import FONT, empty_state, new_figure

if TYPE_CHECKING:
    import plotly.graph_objects as go

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
# MindSpore's CPU traces draw each depth of the Cell scopes over the ops as a thread of a `Scope Layer` process
# ("Thread 0" the outermost: Default, Gradients); the rows are named for what they hold.
SCOPE_PROCESS = "Scope Layer"
SCOPE_ROWS = "Cell scopes"
# A merged bar's opacity is its busy share, but never so faint that it cannot be seen.
MIN_OPACITY = 0.2
# A step ledger bar wider than this share of the window says what it is on the bar (narrower ones: in the hover).
BAND_TEXT_SHARE = 0.2
# The step ledger's split of the step, drawn as a lane of its own above the trace's (never merged, never cut).
BAND_PROCESS = "step ledger"
BAND_LANE = "where the step's time goes"
# The ledger's causes of a step's interval (the time before its first forward op), each drawn in the colour of
# what it is: waiting for data, host work, or idle time the files do not explain.
INTERVAL_CATEGORY = {"data_wait": "data", "host_transfer": "host", "host_launch": "host", "host_dispatch": "host",
                     "compile": "idle", "unknown": "idle"}
# The colour of a step without a split, by the bound part its largest cause rolls up into.
PART_CATEGORY = {"compute": "compute", "communication": "communication", "pipeline": "communication",
                 "data": "data", "host": "host", "unknown": "idle", "compile": "idle"}


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
    consecutive ops of one scope into one span), and a step's window must not show more than the step; such a cut
    scope span reaches no further than the window's other events (it does not cover a data wait). Depths
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
        # A scope span joined across steps covers the gap between them (a data wait) though no op of it runs
        # there: cut, it starts at the window's first other event and ends at its last.
        work = bars[mine & (bars["category"] != "scope")]
        scope_low = max(low, work["start_us"].min()) if len(work) else low
        scope_high = min(high, work["end_us"].max()) if len(work) else high
        scope = mine & cut & (bars["category"] == "scope")
        bars.loc[mine, "start_us"] = bars.loc[mine, "start_us"].clip(lower=low)
        bars.loc[mine, "end_us"] = bars.loc[mine, "end_us"].clip(upper=high)
        bars.loc[scope, "start_us"] = bars.loc[scope, "start_us"].clip(lower=scope_low)
        bars.loc[scope, "end_us"] = bars.loc[scope, "end_us"].clip(upper=scope_high)
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
        count=("count", "sum"), ph=("ph", "first"), full_dur_us=("full_dur_us", "first"),
        busy_us=("dur_us", "sum"))
    ends = (bars["start_us"] + bars["dur_us"]).groupby(bars["group"], sort=False).max()
    merged["dur_us"] = ends.to_numpy() - merged["start_us"].to_numpy()
    # Events of one depth of a lane do not overlap: their summed time is the time the merged bar is busy, which
    # its opacity shows (a PyNative step's ops are short runs between dispatch gaps: not one solid compute bar).
    merged["busy"] = (merged["busy_us"] / merged["dur_us"].where(merged["dur_us"] > 0)).clip(upper=1.0).fillna(1.0)
    several = merged["count"] > 1
    merged.loc[several, "name"] = [f"{n:,} events, busy {busy:.0%} of the bar"
                                   for n, busy in zip(merged.loc[several, "count"], merged.loc[several, "busy"])]
    merged.loc[several, "shapes"] = None
    return merged.drop(columns="busy_us").reset_index(drop=True), len(bars) - len(merged)


def _row_labels(bars: pd.DataFrame) -> pd.Series:
    """A lane's row label, "rank R · process · lane"; its nested events' sub-rows add " · depth". The Scope Layer's
    threads read "Cell scopes · depth N" (1 the outermost)."""
    process, lane = bars["process"].astype(str), bars["lane"].astype(str)
    scope = process == SCOPE_PROCESS
    depth = pd.to_numeric(lane.str.extract(r"(\d+)$")[0], errors="coerce")
    lane = lane.where(~scope | depth.isna(), "depth " + (depth + 1).astype("Int64").astype(str))
    process = process.where(~scope, SCOPE_ROWS)
    label = "rank " + bars["rank"].astype(str) + " · " + process + " · " + lane
    return label.where(bars["depth"] == 0, label + " · " + bars["depth"].astype(str))


def opening_step(run: Run, steps: list[int]) -> int | None:
    """The step the Timeline opens on: the first steady step (the first that the step means cover: not a compile
    or warm-up step, analysis.steady) that the trace has, else its first step; None without steps."""
    if not steps:
        return None
    steady = steady_steps(run.steps) if len(run.steps) else run.steps
    wanted = sorted(set(int(step) for step in steady["step"]) & set(steps)) if len(steady) else []
    return wanted[0] if wanted else steps[0]


def step_band(run: Run, events: pd.DataFrame, step: int | None) -> pd.DataFrame:
    """The step ledger's split of `step` (perfkit.analysis.ledger) as bars of a lane of its own, per rank of the
    window (`events.attrs["window_us"]`, the loader's step bounds): the interval before the first forward op
    named by the cause the ledger gives it ("data wait (queue evidence) 138.297 ms"), then forward+backward and
    the tail, laid end to end from the step's start as the step file or recorded bounds split it; a step without
    a split (PyNative, totals only) is one bar naming its causes. Empty without a step or steps."""
    columns = ["rank", "process", "lane", "lane_order", "depth", "name", "category", "start_us", "dur_us",
               "shapes", "ph", "full_dur_us", "count"]
    windows = events.attrs.get("window_us", {})
    if step is None or not len(run.steps) or not windows:
        return pd.DataFrame(columns=columns)
    causes = ledger(run)
    rows = []
    for rank, (start, end) in windows.items():
        found = run.steps[(run.steps["rank"] == rank) & (run.steps["step"] == step)]
        if not len(found) or end == float("inf"):
            continue
        split = found.iloc[0]
        mine = causes[(causes["rank"] == rank) & (causes["step"] == step) & (causes["ms"] > 0)]
        for name, category, length in _band_parts(split, mine, run.meta.mode == "pynative"):
            rows.append({"rank": rank, "process": BAND_PROCESS, "lane": BAND_LANE, "lane_order": -1, "depth": 0,
                         "name": name, "category": category, "start_us": start,
                         "dur_us": max(min(length * US_PER_MS, end - start), 0.0), "shapes": None, "ph": "X",
                         "full_dur_us": np.nan, "count": 1})
            start += length * US_PER_MS
    return pd.DataFrame(rows, columns=columns)


def _band_parts(split: pd.Series, causes: pd.DataFrame, pynative: bool) -> list[tuple[str, str, float]]:
    """(name, category, ms) of a step's parts in time order, from its steps row and its ledger rows (their
    labels as the summary words them: PyNative op time includes dispatch waits)."""
    interval, fwd_bwd, tail = (split.get(column) for column in ("interval_ms", "fwd_bwd_ms", "tail_ms"))
    known = [value for value in (interval, fwd_bwd, tail) if value is not None and value == value]
    if len(known) == 3:
        waits = causes[causes["cause"].isin(list(INTERVAL_CATEGORY))]
        cause = waits.loc[waits["ms"].idxmax(), "cause"] if len(waits) else "unknown"
        named = CAUSES[cause].label if cause != "unknown" else "before the first op"
        return [(f"{named} {ms(interval)}", INTERVAL_CATEGORY[cause], float(interval)),
                (f"forward+backward {ms(fwd_bwd)}", "compute", float(fwd_bwd)),
                (f"tail (optimizer, sync) {ms(tail)}", "compute", float(tail))]
    total = split.get("total_ms")
    if total is None or total != total or not len(causes):
        return []
    ordered = causes.sort_values("ms", ascending=False)
    label = {cause: PYNATIVE_COMPUTE_LABEL if pynative and cause == "compute" else spec.label
             for cause, spec in CAUSES.items()}
    words = ", ".join(f"{label[cause]} {ms(value)}" for cause, value in zip(ordered["cause"], ordered["ms"]))
    return [(f"step {ms(total)}: {words}", PART_CATEGORY[CAUSES[ordered.iloc[0]['cause']].group], float(total))]


def timeline_figure(events: pd.DataFrame, title: str = "", max_bars: int = MAX_TIMELINE_BARS,
                    highlight: OpTarget | None = None, band: pd.DataFrame | None = None) -> go.Figure:
    """Lanes as rows (rank, process, thread; in the profiler's order), nested events in sub-rows under their
    lane (one per depth), events as bars coloured by category, time in ms from the window's start; hover:
    name, duration, shapes. Zoom with the mouse. The events `highlight` matches are outlined and counted in
    the title. `band` (step_band's bars) is drawn as the top lane: where the step's time goes, the data wait
    included, though no trace event covers it. A merged bar's opacity is the share of it its events fill."""
    complete = complete_events(events)
    bars, merged_away = timeline_bars(complete, max_bars)
    if band is not None and len(band):
        bars = pd.concat([band.astype({"start_us": "float64", "dur_us": "float64"}), bars], ignore_index=True)
    if not len(bars):
        return empty_state("no events with a duration in this window")
    if "busy" not in bars:
        bars["busy"] = 1.0
    bars["busy"] = bars["busy"].astype("float64").fillna(1.0)
    windows = events.attrs.get("window_us", {})
    starts = [start for start, end in windows.values() if end != float("inf")]
    zero = min(starts) if starts else bars["start_us"].min()
    span = (bars["start_us"] + bars["dur_us"]).max() - zero
    bars["label"] = _row_labels(bars)
    order = bars.sort_values(["rank", "lane_order", "depth"]).drop_duplicates("label")["label"].tolist()
    fig = new_figure()
    for category, part in bars.groupby("category", sort=True):
        shapes = part["shapes"].where(part["shapes"].notna(), "").astype(str).str.replace("\r\n", " ", regex=False)
        cut = part["full_dur_us"].map(lambda us: "" if us != us else
                                      f"<br>cut at the window's edge: runs {us / US_PER_MS:,.3f} ms in all")
        fig.add_bar(y=part["label"], x=part["dur_us"] / US_PER_MS, base=(part["start_us"] - zero) / US_PER_MS,
                    orientation="h", name=category, marker_color=TIMELINE_COLORS.get(category, "#9c755f"),
                    marker_opacity=np.maximum(part["busy"].to_numpy(), MIN_OPACITY), marker_line_width=0,
                    text=part["name"].astype(str).where((part["process"] == BAND_PROCESS)
                                                        & (part["dur_us"] >= BAND_TEXT_SHARE * span), "").tolist(),
                    textposition="inside", insidetextanchor="start", textfont=dict(color="#111", size=11),
                    constraintext="none",
                    customdata=np.stack([part["name"].astype(str), shapes, cut], axis=1),
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

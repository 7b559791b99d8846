"""The Timeline page: one step of a run's trace, lanes as rows, ops as bars (perfkit.io.timeline + figures).

The trace index is built on the first visit, in a thread, while the page polls its progress; later
visits (and the CLI's `perfkit trace`) reuse it from the cache. It opens on the first steady step (not the compile
step), with the step ledger's split of the step as the top lane. `?run=N&step=S&op=NAME` opens a step
with the occurrences of NAME outlined (an op name, op type or family: views.numbers.op_target): the
Operators page links here when an op's name is clicked, a finding about ops from the Overview's findings.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence
from urllib.parse import urlencode

import dash
from dash import Input, Output, State, dcc, html

from ..core.errors import PerfkitError
from ..core.model import Run
from ..io import timeline
from ..views import ids as panel_ids
from ..views import numbers
from ..views.figures.timeline import opening_step, step_band, timeline_figure
from . import ids, layout
from .inputs import integer, query_value, text

PATH = ids.TIMELINE
STEP = "timeline-step"
RANKS = "timeline-ranks"
STATUS = "timeline-status"
POLL = "timeline-poll"
BODY = "timeline-body"
GRAPH = "timeline-graph"
POLL_MS = 400


class Builds:
    """Index builds, one thread per run (its path and the profiler cycle it was loaded with); their progress
    and outcome for the page to poll."""

    def __init__(self):
        self.lock = threading.Lock()
        self.state: dict[tuple[str, int | None], dict] = {}

    def status(self, run: Run) -> dict:
        key = (run.path, run.meta.cycle)
        with self.lock:
            if key not in self.state:
                self.state[key] = {"message": "starting", "fraction": 0.0, "index": None, "error": None}
                threading.Thread(target=self._build, args=(key,), daemon=True).start()
            return dict(self.state[key])

    def _build(self, key: tuple[str, int | None]) -> None:
        def progress(message: str, fraction: float) -> None:
            with self.lock:
                self.state[key].update(message=message, fraction=fraction)
        try:
            path, cycle = key
            found = timeline.index(path, progress, cycle)
            outcome = {"index": found}
        except PerfkitError as exc:
            outcome = {"error": str(exc)}
        with self.lock:
            self.state[key].update(outcome, fraction=1.0)


def page(search: Any, count: int, run_index) -> list:
    index = run_index(search)
    if index is None:
        return [layout.card("Unknown run", layout.empty(f"unknown run: choose one of the {count} loaded runs"))]
    controls = html.Div([
        html.Label(["step ", dcc.Dropdown(id=STEP, clearable=False, style={"minWidth": 140})]),
        html.Label(["ranks ", dcc.Dropdown(id=RANKS, multi=True, style={"minWidth": 220})]),
    ], style={"display": "flex", "gap": "16px", "alignItems": "center"})
    return [layout.card("Timeline", controls, html.Div(id=STATUS, className="empty-state"),
                        dcc.Interval(id=POLL, interval=POLL_MS), dcc.Loading(html.Div(id=BODY)))]


def register(app: dash.Dash, runs: Sequence[Run], run_index) -> None:
    """The page's callbacks. `run_index(search)` is the app's reading of ?run=N (None when unknown)."""
    builds = Builds()

    @app.callback(Output(STATUS, "children"), Output(POLL, "disabled"), Output(STEP, "options"),
                  Output(STEP, "value"), Output(RANKS, "options"), Output(RANKS, "value"),
                  Input(POLL, "n_intervals"), State(ids.URL, "search"))
    def poll(_, search):
        index = run_index(search)
        if index is None:
            return "unknown run", True, [], None, [], []
        state = builds.status(runs[index])
        if state["error"]:
            return state["error"], True, [], None, [], []
        found = state["index"]
        if found is None:
            return f"{state['message']}: {state['fraction']:.0%}", False, [], None, [], []
        steps = found.steps()
        wanted = integer(query_value(search, "step", ""))
        step = wanted if wanted in steps else opening_step(runs[index], steps)
        ranks = sorted(found.ranks)
        note = "; ".join(found.warnings)
        if not steps:
            note = (note + "; " if note else "") + "this trace has no step markers: the whole trace is one window"
        return (note, True, [{"label": str(s), "value": s} for s in steps], step,
                [{"label": f"rank {r}", "value": r} for r in ranks], ranks[:8])

    @app.callback(Output(BODY, "children"), Input(STEP, "value"), Input(RANKS, "value"), State(ids.URL, "search"))
    def draw(step, ranks, search):
        index = run_index(search)
        if index is None or not isinstance(ranks, list) or not ranks:
            return layout.empty("pick a rank")
        state = builds.status(runs[index])
        if state["index"] is None:
            return dash.no_update
        try:
            events = timeline.timeline(runs[index], step=integer(step) if state["index"].steps() else None,
                                       ranks=[r for r in map(integer, ranks) if r is not None])
        except PerfkitError as exc:
            return layout.empty(str(exc))
        op = query_value(search, "op", "")
        chosen = integer(step) if state["index"].steps() else None
        fig = timeline_figure(events, title=f"step {step} · " if step is not None else "",
                              highlight=numbers.op_target(runs[index], op) if op else None,
                              band=step_band(runs[index], events, chosen))
        return layout.graph(fig, GRAPH)

    @app.callback(Output(ids.URL, "pathname", allow_duplicate=True), Output(ids.URL, "search", allow_duplicate=True),
                  Input(panel_ids.OP_TABLE, "cellClicked"), State(ids.URL, "search"), prevent_initial_call=True)
    def open_op(cell, search):
        """Clicking an op's name on the Operators page opens its occurrences on the timeline."""
        if not isinstance(cell, dict) or cell.get("colId") != "name" or not isinstance(cell.get("value"), str):
            raise dash.exceptions.PreventUpdate
        return PATH, "?" + urlencode({"run": query_value(search, "run", "0"), "op": text(cell["value"])})


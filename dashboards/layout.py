"""Page bodies: perfkit.figures' figures and numbers wrapped in Dash components. No data work here."""

from __future__ import annotations

from typing import Sequence

import plotly.graph_objects as go
from dash import dash_table, dcc, html

from perfkit import figures
from perfkit.compare import verdict_words
from perfkit.model import PASSES, Run

from . import ids

GRAPH_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": "hover"}
TABLE_STYLE = dict(
    style_table={"overflowX": "auto"},
    style_cell={"fontFamily": "Inter, 'Segoe UI', Helvetica, Arial, sans-serif", "fontSize": 13,
                "padding": "4px 8px", "textAlign": "right", "maxWidth": 520, "overflow": "hidden",
                "textOverflow": "ellipsis"},
    style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "left"}
                            for c in ("type", "name", "family", "pass", "setting")],
    style_header={"fontWeight": 600, "backgroundColor": "#eef1f5"},
    style_data_conditional=[{"if": {"filter_query": '{family} = "Cast"'}, "backgroundColor": "#fde8e8"},
                            {"if": {"filter_query": '{family} = "BatchNorm"'}, "backgroundColor": "#f3e8f1"}],
)


def empty(message: str) -> html.P:
    return html.P(message, className="empty-state")


def graph(fig: go.Figure, graph_id: str) -> html.Div | html.P:
    """The figure, or its sentence when it is an empty state (never an empty axis)."""
    message = figures.empty_message(fig)
    if message is not None:
        return html.P(message, className="empty-state", id=graph_id)
    return dcc.Graph(id=graph_id, figure=fig, config=GRAPH_CONFIG)


def card(title: str, *children) -> html.Div:
    return html.Div([html.H2(title), *children], className="card")


def header(labels: Sequence[str]) -> html.Header:
    links = [dcc.Link(name, href=path, id=ids.nav(path)) for path, name in ids.PAGES.items()]
    return html.Header([html.H1("perfkit"), html.Nav(links, style={"display": "flex", "gap": "6px"}),
                        html.Div(dcc.Dropdown(id=ids.RUN, options=[{"label": label, "value": i}
                                                                   for i, label in enumerate(labels)],
                                              value=0, clearable=False, style={"minWidth": 320, "color": "#222"}),
                                 style={"marginLeft": "auto"})],
                       className="top")


def findings_panel(run: Run) -> html.Div:
    result = figures.findings(run)
    if not result.items:
        return card("Findings (perfkit advise)", empty(result.note or ""))
    items = []
    for item in result.items:
        evidence = ", ".join(f"{key} = {value}" for key, value in item["evidence"].items())
        gain = f" · up to {item['est_gain_pct']:.1f} % of step time" if item.get("est_gain_pct") is not None else ""
        target = f" · {item['target']}" if item.get("target") else ""
        items.append(html.Div([html.Span(item["severity"], className="sev"),
                               html.Span(item["title"], className="title"),
                               html.Div(f"{item['id']}{target}{gain} — {evidence}", className="evidence"),
                               html.Div(["Change: ", html.Code(item["action"])])],
                              className=f"finding sev-{item['severity']}"))
    return card("Findings (perfkit advise)", html.Div(items, id="findings"))


def overview(run: Run) -> list:
    meta = run.meta
    kpis = [html.Div([html.Div(label, className="label"), html.Div(value, className="value", id=ids.kpi(key))],
                     className="kpi") for key, label, value in figures.headline_items(run)]
    return [
        html.P(f"{run.path} · device {meta.device or 'unknown'} · layout {meta.layout or 'unknown'} · "
               f"ranks {meta.ranks} · data mode {meta.data_mode or 'unknown'}", className="meta"),
        html.Div(kpis, className="kpis"),
        card("Step trace", graph(figures.step_trace_figure(run), "fig-steps")),
        card("Operator types", graph(figures.op_share_figure(run), "fig-op-shares")),
        html.Div([card("Host queue", graph(figures.queue_figure(run, "host"), "fig-host-queue")),
                  card("Device queue", graph(figures.queue_figure(run, "device"), "fig-device-queue"))],
                 className="grid2"),
        card("Data pipeline", graph(figures.pipeline_figure(run), "fig-pipeline")),
        findings_panel(run),
    ]


def _table(table_id: str, frame, page_size: int) -> dash_table.DataTable:
    columns = [{"name": c.replace("_pct", " %").replace("_", " "), "id": c} for c in frame.columns]
    return dash_table.DataTable(id=table_id, columns=columns,
                                data=frame.to_dict("records"), sort_action="native", filter_action="native",
                                page_size=page_size, **TABLE_STYLE)


def operators(run: Run) -> list:
    types = figures.op_type_rows(run)
    if not len(types) and not len(run.ops):
        return [card("Operators", empty("no operator statistics in this run"))]
    instances, matched = figures.op_instance_rows(run)
    controls = html.Div([
        dcc.Checklist(id=ids.OP_PASSES, options=[{"label": f" {p}", "value": p} for p in PASSES],
                      value=list(PASSES), inline=True, inputStyle={"marginLeft": "12px"}),
        dcc.Input(id=ids.OP_SEARCH, type="search", placeholder="search name or type", debounce=True,
                  style={"width": 320, "padding": "4px 8px"}),
        html.Span(instances_count(len(instances), matched), id=ids.OP_COUNT),
    ], className="controls")
    return [card(f"Op types ({len(types)})", _table(ids.OP_TYPES_TABLE, types, 15) if len(types)
                 else empty("no op-type statistics in this run")),
            card("Op instances", controls, _table(ids.OP_TABLE, instances, 20) if len(run.ops)
                 else empty("no per-instance operator data in this run"))]


def instances_count(shown: int, matched: int) -> str:
    if shown < matched:
        return f"{matched:,} matching instances; the {shown:,} with the largest total time are listed"
    return f"{matched:,} matching instances"


def compare_page(labels: Sequence[str], chosen: Sequence[int]) -> list:
    options = [{"label": label, "value": i} for i, label in enumerate(labels)]
    return [card("Runs to compare", dcc.Dropdown(id=ids.COMPARE_RUNS, multi=True, options=options,
                                                 value=list(chosen) or list(range(min(3, len(labels)))))),
            html.Div(id=ids.COMPARE_BODY)]


def compare_body(runs: Sequence[Run]) -> list:
    if len(runs) < 2:
        return [card("Compare", empty("pick two or more runs to compare"))]
    labels = figures.run_labels(runs)
    kpis = []
    for i, (label, speedup, verdict) in enumerate(zip(labels, figures.speedups(runs), figures.step_verdicts(runs))):
        note = "baseline" if i == 0 else verdict_words(verdict)
        kpis.append(html.Div([html.Div(label, className="label"),
                              html.Div("n/a" if speedup is None else f"{speedup:.2f}x", className="value",
                                       id=f"speedup-{i}"),
                              html.Div(note, className="note", id=f"verdict-{i}")], className="kpi"))
    settings = figures.compare_setting_rows(runs)
    op_rows = figures.compare_op_rows(runs)
    return [card(f"Speedup over {labels[0]} (mean step time ratio) and whether it is beyond the noise",
                 html.Div(kpis, className="speedups")),
            card("What differed between the runs",
                 _table("compare-settings", settings, 20) if len(settings)
                 else empty("nothing the runs' files record differs (device, network, batch, config, env, versions)")),
            card("Step time spread", graph(figures.compare_step_spread_figure(runs), "fig-compare-spread")),
            html.Div([card("Step split", graph(figures.compare_steps_figure(runs), "fig-compare-steps")),
                      card("Queue emptiness", graph(figures.compare_queues_figure(runs), "fig-compare-queues"))],
                     className="grid2"),
            card("Op time per step", graph(figures.compare_op_time_figure(runs), "fig-compare-ops"),
                 _table("compare-op-table", op_rows, 12) if len(op_rows) else empty("no operator statistics"))]


def ranks(run: Run) -> list:
    slow = figures.slow_ranks(run)
    note = (f"slow ranks: {', '.join(map(str, slow))}" if slow else "no slow rank") if len(run.ranks) > 1 else ""
    rows = figures.rank_rows(run)
    panels = [card("Ranks", html.P(note, className="meta", id="slow-ranks"),
                   graph(figures.ranks_figure(run), "fig-ranks"))]
    if len(rows) > 1:
        table = _table("rank-table", rows, 16)
        table.style_data_conditional = [{"if": {"filter_query": '{slow} = "slow"'}, "backgroundColor": "#fde8e8"}]
        panels.append(card("Per-rank mean step (ms)", table))
    if len(run.comm_ops) or len(run.comm_links):
        panels += [card("Link bandwidth", graph(figures.link_heatmap_figure(run), "fig-link-heatmap")),
                   card("Communication ops (longest first)", _table("comm-op-table", figures.comm_op_rows(run), 15))]
    return panels

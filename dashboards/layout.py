"""Page bodies: the view layer's panels (perfkit.views.panels) wrapped in Dash components. No data work here.

A run page is what views.panels.shown keeps of its panels for the dashboard, in order (`run_page`); each panel
kind has one renderer in RENDERERS.
"""

from __future__ import annotations

import functools
from typing import Sequence
from urllib.parse import urlencode

import dash_ag_grid as dag
import pandas as pd
import plotly.graph_objects as go
from dash import dcc, html

from ..analysis.representatives import op_coverage
from ..core.model import PASSES, Run
from ..views import ids as panel_ids
from ..views import numbers
from ..views.figures.cells import zoomed_to_cell
from ..views.figures.operators import op_instance_rows
from ..views.figures.style import PLOT_CONFIG, empty_message
from ..views.format import COUNT_SPEC, NAMED_COLUMNS, ROW_TINTS, column_spec, column_title
from ..views.lines import op_ranks_line, run_facts, run_heading, status_class
from ..views.panel import CARDS, FIGURE, FINDINGS, INSTANCES, SPEEDUPS, STATUS, TABLE, Panel
from ..views.panels import COMPARE_PANELS, DASHBOARD, panels_on, shown
from ..views.summary import summarize
from . import ids

# Rows of a highlighted meaning get its tint: op families in the op tables, slow ranks in the rank table.
ROW_STYLES = {"styleConditions": [
    {"condition": "params.data.family === 'Cast'", "style": {"backgroundColor": ROW_TINTS["Cast"]}},
    {"condition": "params.data.family === 'BatchNorm'", "style": {"backgroundColor": ROW_TINTS["BatchNorm"]}},
    {"condition": "params.data.slow === 'yes'", "style": {"backgroundColor": ROW_TINTS["slow"]}}]}
# A text column's width for its longest value: the grid's 14 px font averages under 8 px a character.
TEXT_PX_PER_CHAR = 8
CELL_PADDING_PX = 40
# Rows per grid page.
PAGE_ROWS = {panel_ids.OP_TYPES_TABLE: 15, panel_ids.OP_TABLE: 20, panel_ids.RANK_TABLE: 16,
             panel_ids.COMM_OP_TABLE: 15, panel_ids.COMPARE_OP_TABLE: 12}


def empty(message: str) -> html.P:
    return html.P(message, className="empty-state")


def graph(fig: go.Figure, graph_id: str) -> html.Div | html.P:
    """The figure, or its sentence when it is an empty state (never an empty axis)."""
    message = empty_message(fig)
    if message is not None:
        return html.P(message, className="empty-state", id=graph_id)
    return dcc.Graph(id=graph_id, figure=fig, config=PLOT_CONFIG)


def card(title: str, *children, **attributes) -> html.Div:
    return html.Div([html.H2(title), *children] if title else list(children), className="card", **attributes)


def header(labels: Sequence[str]) -> html.Header:
    links = [dcc.Link(name, href=path, id=ids.nav(path)) for path, name in ids.PAGES.items()]
    return html.Header([html.H1("perfkit"), html.Nav(links, style={"display": "flex", "gap": "6px"}),
                        html.Div(dcc.Dropdown(id=ids.RUN, options=[{"label": label, "value": i}
                                                                   for i, label in enumerate(labels)],
                                              value=0, clearable=False, style={"minWidth": 320, "color": "#222"}),
                                 style={"marginLeft": "auto"})],
                       className="top")


def _column(column: str, frame: pd.DataFrame) -> dict:
    """An AG Grid column: numbers right-aligned and formatted as the report prints them (`1,421.820`),
    op instance names shown short (`short_name`: the cells that tell the op apart) with the whole name on hover,
    op types never cut."""
    spec = column_spec(column)
    definition = {"field": column, "headerName": column_title(column, frame.attrs.get(NAMED_COLUMNS, ()))}
    if spec is not None:
        # d3-format reads the same spec as Python's format()
        definition |= {"type": "rightAligned", "filter": "agNumberColumnFilter",
                       "valueFormatter": {"function": f"params.value == null ? '' : d3.format('{spec}')(params.value)"}}
        if spec == COUNT_SPEC:
            definition["maxWidth"] = 120
    else:
        definition["tooltipField"] = column  # a cut text cell shows the whole text on hover
    if column == "name":
        # Shown short where the table has short names (views.format.short_op_names); a right-to-left cell puts
        # the ellipsis of a name still too long first: "…/fc3-Dense/MatMul-op19", not "Default/network-With…".
        # The name itself is isolated as left-to-right text (U+2066 … U+2069), else the right-to-left cell
        # would reorder its number-only parts.
        shown = "params.data.short_name" if "short_name" in frame else "params.value"
        definition |= {"flex": 3, "minWidth": 280,
                       "cellStyle": {"direction": "rtl", "textAlign": "left"},
                       "valueFormatter": {"function": f"'\u2066' + {shown} + '\u2069'"}}
    elif column == "short_name":
        definition["hide"] = True
    elif column in ("type", "family", "cell"):  # as wide as the longest value: `Conv2DBackpropFilter` whole
        longest = int(frame[column].astype(str).str.len().max()) if len(frame) else 0
        definition |= {"minWidth": max(120, TEXT_PX_PER_CHAR * longest + CELL_PADDING_PX)}
    elif column == "input_shapes":
        definition |= {"flex": 2, "minWidth": 170}
    return definition


def grid(grid_id: str, frame: pd.DataFrame) -> dag.AgGrid:
    return dag.AgGrid(id=grid_id, columnDefs=[_column(c, frame) for c in frame.columns],
                      rowData=frame.to_dict("records"),
                      defaultColDef={"sortable": True, "filter": True, "floatingFilter": True,
                                     "suppressHeaderMenuButton": True, "suppressHeaderFilterButton": True,
                                     "resizable": True, "flex": 1, "minWidth": 90, "wrapHeaderText": True,
                                     "autoHeaderHeight": True},
                      dashGridOptions={"pagination": True, "paginationPageSize": PAGE_ROWS.get(grid_id, 20),
                                       "paginationPageSizeSelector": False, "domLayout": "autoHeight",
                                       "tooltipShowDelay": 300, "enableCellTextSelection": True,
                                       # columns named after runs may hold a dot ("exp1.5"): not a nested field
                                       "suppressFieldDotNotation": True},
                      getRowStyle=ROW_STYLES, style={"height": None})


def _cards(panel: Panel, run: Run) -> html.Div:
    kpis = [html.Div([html.Div(c.label, className="label"), html.Div(c.value, className="value", id=ids.kpi(c.key))],
                     className="kpi") for c in numbers.headline_cards(run)]
    return html.Div(html.Div(kpis, className="kpis"), id=panel.id)


def _status(panel: Panel, run: Run) -> html.Div:
    """The run panel (views.lines: run_facts, the summary's warnings), as the terminal's first lines say it."""
    summary = summarize(run)
    facts = [html.Span([html.Span(label, className="label"), " ",
                        html.Span(words, className=status_class(words) if label == "status" else "")],
                       className="fact") for label, words in run_facts(summary)]
    warnings = [html.Ul([html.Li(warning) for warning in summary["warnings"]], className="warnings")] \
        if summary["warnings"] else []
    return card(panel.title, html.P(run_heading(summary), className="meta"), html.Div(facts, className="facts"),
                *warnings, id=panel.id)


def _findings(panel: Panel, run: Run, run_index: int) -> html.Div:
    result = numbers.findings(run)
    if not result.items:
        return card(panel.title, empty(result.note or ""))
    items = [html.Div([html.Span(item.severity, className="sev"), html.Span(item.title, className="title"),
                       html.Div(item.detail, className="evidence"), html.Div(["Change: ", html.Code(item.action)]),
                       *_cell_link(item.cell, run_index), *_timeline_link(link, run_index)],
                      className=f"finding sev-{item.severity}")
             for item, link in zip(result.items, numbers.timeline_links(run))]
    return card(panel.title, html.Div(items, id=panel.id))


def _cell_link(cell: dict | None, run_index: int) -> list:
    """The finding's Cell, linked to the Cells page zoomed into it."""
    if cell is None:
        return []
    href = f"{ids.CELLS_PAGE}?{urlencode({'run': run_index, 'cell': cell['path']})}"
    return [html.Div(["Cell: ", dcc.Link(numbers.cell_words(cell), href=href)])]


def _timeline_link(link: numbers.TimelineLink | None, run_index: int) -> list:
    if link is None:
        return []
    href = f"{ids.TIMELINE}?{urlencode({'run': run_index, **link.query})}"
    return [html.Div(dcc.Link(link.text, href=href, className=ids.FINDING_TIMELINE_LINK))]


def _speedups(panel: Panel, runs: Sequence[Run], cards: list[numbers.Card]) -> html.Div:
    kpis = [html.Div([html.Div(c.label, className="label"), html.Div(c.value, className="value", id=c.key),
                      html.Div(c.note, className="note", id=c.key.replace("speedup", "verdict"))], className="kpi")
            for c in cards]
    return card(panel.title, html.Div(kpis, className="speedups", id=panel.id))


def _notes(panel: Panel, run: Run) -> list:
    """The panel's sentence above it (views.numbers), where it has one."""
    note = panel.note(run) if panel.note else None
    return [html.P(note, className="meta", id=f"{panel.id}-note")] if note else []


def _figure(panel: Panel, run: Run, fig: go.Figure) -> html.Div:
    return card(panel.title, *_notes(panel, run), graph(fig, panel.id))


def _table(panel: Panel, run: Run, frame: pd.DataFrame) -> html.Div:
    if not len(frame):
        return card(panel.title, empty(panel.empty))
    return card(panel.title, *_notes(panel, run), grid(panel.id, frame))


def _instances(panel: Panel, run: Run) -> html.Div:
    if not len(run.ops):
        return card(panel.title, empty("no per-instance operator data in this run"))
    instances, matched = op_instance_rows(run)
    controls = html.Div([
        dcc.Checklist(id=ids.OP_PASSES, options=[{"label": f" {p}", "value": p} for p in PASSES],
                      value=list(PASSES), inline=True, inputStyle={"marginLeft": "12px"}),
        dcc.Input(id=ids.OP_SEARCH, type="search", placeholder="search name or type", debounce=True,
                  style={"width": 320, "padding": "4px 8px"}),
        html.Span(instances_count(len(instances), matched), id=ids.OP_COUNT),
    ], className="controls")
    return card(panel.title, controls, grid(panel.id, instances))


RENDERERS = {CARDS: _cards, FINDINGS: _findings, FIGURE: _figure, TABLE: _table, INSTANCES: _instances,
             SPEEDUPS: _speedups, STATUS: _status}


def run_page(path: str, run: Run, run_index: int, cell: str = "") -> list:
    """One run's page (the run is `runs[run_index]` of the app: its links name it): its panels in the view
    layer's order, half-width ones side by side; an optional panel only where it has something to show.
    `cell`: on the Cells page, the Cell path its flame graph opens zoomed into (a finding's link). First, where
    the run's op-level numbers cover some ranks only, which (perfkit dash --rank N reads others)."""
    renderers = RENDERERS | {FINDINGS: functools.partial(_findings, run_index=run_index)}
    if cell:
        renderers[FIGURE] = lambda panel, run, fig: _figure(
            panel, run, zoomed_to_cell(fig, run, cell) if panel.id == panel_ids.CELLS else fig)
    covered = op_ranks_line(op_coverage(run))
    return [html.P(line, className="note") for line in covered] + _panels_body(panels_on(path), run, renderers)


def _panels_body(panels: Sequence[Panel], subject: Run | Sequence[Run], renderers: dict) -> list:
    """What views.panels.shown keeps of `panels` (of one run, or the compare panels of several runs) for the
    dashboard, in order, half-width ones side by side."""
    body = []
    for row in shown(panels, subject, DASHBOARD):
        rendered = [renderers[panel.kind](panel, subject, *([] if content is None else [content]))
                    for panel, content in row]
        body.append(html.Div(rendered, className="grid2") if row[0].panel.half else rendered[0])
    return body


def instances_count(shown: int, matched: int) -> str:
    if shown < matched:
        return f"{matched:,} matching instances; the {shown:,} with the largest total time are listed"
    return f"{matched:,} matching instances"


def compare_page(labels: Sequence[str], chosen: Sequence[int]) -> list:
    """The run picker (chosen: from the URL, else compare.default_selection) and the compare body."""
    options = [{"label": label, "value": i} for i, label in enumerate(labels)]
    return [card("Runs to compare", dcc.Dropdown(id=ids.COMPARE_RUNS, multi=True, options=options,
                                                 value=list(chosen))),
            html.Div(id=ids.COMPARE_BODY)]


def compare_body(runs: Sequence[Run]) -> list:
    """The compare section (views.panels.COMPARE_PANELS, as the report shows it) over the chosen runs."""
    if len(runs) < 2:
        return [card("Compare", empty("pick two or more runs to compare"))]
    return _migration_card(runs) + _panels_body(COMPARE_PANELS, runs, RENDERERS)


def _migration_card(runs: Sequence[Run]) -> list:
    """Two runs of different frameworks, a PyTorch reference and its MindSpore port: the cross-framework comparison
    (docs/migration.md) above the panels, as `perfkit compare` words it."""
    from ..analysis.migration import TORCH, framework_of
    from ..render.migration import migration_markdown
    from ..views.migration import compare_frameworks, is_cross_framework
    if len(runs) != 2 or not is_cross_framework(*runs):
        return []
    reference, port = runs if framework_of(runs[0]) == TORCH else runs[::-1]
    return [card("PyTorch reference and MindSpore port", dcc.Markdown(migration_markdown(
        compare_frameworks([reference], [port]))))]

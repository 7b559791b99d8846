"""`perfkit report`: one self-contained HTML file with the dashboard's figures and findings.

Each run's section shows the view layer's panels as views.panels.shown lays them out for the report, in their order.

plotly.js is inlined once, so the file opens from disk (file://) with no network, e.g. as a CI artifact.
"""

from __future__ import annotations

import functools
import html
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..analysis.representatives import op_coverage
from ..core.errors import PerfkitError
from ..core.model import Run
from ..core.version import __version__
from ..views import ids, numbers
from ..views.figures.overview import TOP_OP_TYPES
from ..views.figures.style import PLOT_CONFIG, empty_message
from ..views.format import cell, column_spec, column_titles, run_labels
from ..views.lines import op_ranks_label, run_facts, run_heading, status_class
from ..views.panel import CARDS, FIGURE, FINDINGS, SPEEDUPS, STATUS, TABLE, Panel
from ..views.panels import COMPARE_PANELS, REPORT, panels, shown
from ..views.summary import summarize

if TYPE_CHECKING:
    import plotly.graph_objects as go

# plotly.js's basic bundle (scatter, bar, pie: every trace perfkit.views.figures draws), same version as the plotly
# package (tests/test_dashboard_first_page.py checks), MIT: vendor/plotly.js-LICENSE. A quarter of the full
# bundle: the report file is 3.6 MB smaller and the dashboard's first page draws in half the time.
# The perfkit package folder, as imported and as resolved (perfkit/dashboards is a link to the repository's
# dashboards/ folder in a source checkout).
PACKAGE_ROOTS = (Path(__file__).parents[1], Path(__file__).resolve().parents[1])
PLOTLY_BUNDLE = PACKAGE_ROOTS[1] / "vendor" / "plotly-basic.min.js"

# One look for the dashboard and the report (the dashboard injects the same sheet).
STYLESHEET = """
body { font-family: Inter, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0; background: #f4f6f9; color: #222; }
header.top { background: #1f2d3d; color: #fff; padding: 12px 24px; display: flex; align-items: center; gap: 24px;
             flex-wrap: wrap; }
header.top h1 { font-size: 20px; margin: 0; font-weight: 600; }
header.top a { color: #cfe0f5; text-decoration: none; font-size: 15px; padding: 4px 10px; border-radius: 4px; }
header.top a.active, header.top a:hover { background: #34495e; color: #fff; }
main { padding: 16px 24px; max-width: 1500px; margin: 0 auto; }
.card { background: #fff; border-radius: 6px; box-shadow: 0 1px 3px rgba(0,0,0,.12); padding: 12px 16px;
        margin-bottom: 16px; }
.card h2 { font-size: 17px; margin: 4px 0 10px; }
.meta { color: #555; font-size: 14px; margin: 0 0 12px; }
.kpis { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 16px; }
.kpi { background: #fff; border-radius: 6px; box-shadow: 0 1px 3px rgba(0,0,0,.12); padding: 10px 16px;
       min-width: 150px; }
.kpi .label { font-size: 12px; color: #666; text-transform: uppercase; letter-spacing: .03em; }
.kpi .value { font-size: 20px; font-weight: 600; margin-top: 4px; }
.kpi .note { font-size: 12px; color: #444; margin-top: 2px; }
.grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; align-items: start; }
@media (max-width: 1100px) { .grid2 { grid-template-columns: 1fr; } }
.empty-state { color: #666; font-size: 15px; font-style: italic; padding: 18px 8px; margin: 0; }
.finding { border-left: 5px solid #999; padding: 6px 12px; margin: 8px 0; background: #fafbfc; }
.finding.sev-high { border-color: #d62728; } .finding.sev-medium { border-color: #f28e2b; }
.finding.sev-low { border-color: #59a14f; }
.finding .title { font-weight: 600; }
.finding .sev { font-size: 12px; text-transform: uppercase; font-weight: 700; margin-right: 8px; }
.finding code { background: #eef1f5; padding: 2px 5px; border-radius: 3px; font-size: 13px; }
.finding .evidence { font-size: 13px; color: #444; margin: 4px 0; }
table.plain { border-collapse: collapse; font-size: 13px; }
table.plain th, table.plain td { border-bottom: 1px solid #e3e6ea; padding: 4px 10px; text-align: right; }
table.plain th.text, table.plain td.text { text-align: left; }
.speedups { display: flex; flex-wrap: wrap; gap: 12px; }
.facts { display: flex; flex-wrap: wrap; gap: 6px 22px; font-size: 14px; }
.fact .label { color: #666; }
.status-bad { color: #fff; background: #d62728; padding: 1px 8px; border-radius: 3px; font-weight: 600; }
.status-ok { color: #2d7d2d; font-weight: 600; }
ul.warnings { margin: 10px 0 0; padding: 8px 12px 8px 28px; background: #fff8e5; border-left: 5px solid #f28e2b;
              font-size: 13px; }
.controls { display: flex; flex-wrap: wrap; gap: 24px; align-items: center; margin-bottom: 12px; }
.ag-layout-auto-height .ag-center-cols-viewport, .ag-layout-auto-height .ag-center-cols-container {
  min-height: 0 !important; }
"""

# A table in the report lists at most this many rows (the dashboard pages through all of them).
REPORT_TABLE_ROWS = TOP_OP_TYPES


def _figure(fig: go.Figure) -> str:
    message = empty_message(fig)
    if message is not None:
        return f'<p class="empty-state">{html.escape(message)}</p>'
    return fig.to_html(full_html=False, include_plotlyjs=False, config=PLOT_CONFIG)


def _card(title: str, body: str) -> str:
    return f'<div class="card"><h2>{html.escape(title)}</h2>{body}</div>'


def _findings(panel: Panel, run: Run, section: str = "") -> str:
    return findings_card(panel.title, numbers.findings(run), cells_anchor=f"{section}-{ids.CELLS}")


def _cell_line(cell: dict | None, anchor: str) -> str:
    """The finding's Cell, linked to the section's Cells graph."""
    if cell is None:
        return ""
    return f'<div>Cell: <a href="#{html.escape(anchor)}">{html.escape(numbers.cell_words(cell))}</a></div>'


def findings_card(title: str, result: numbers.Findings, cells_anchor: str = "") -> str:
    """Findings (views.numbers: worded once) as a card: severity, title, evidence, the change to make, and
    the Cell the finding's ops sit in, linked to `cells_anchor` (the run section's Cells graph) where given."""
    if not result.items:
        return _card(title, f'<p class="empty-state">{html.escape(result.note or "")}</p>')
    return _card(title, "".join(
        f'<div class="finding sev-{html.escape(item.severity)}"><span class="sev">{html.escape(item.severity)}</span>'
        f'<span class="title">{html.escape(item.title)}</span>'
        f'<div class="evidence">{html.escape(item.detail)}</div>'
        f'<div>Change: <code>{html.escape(item.action)}</code></div>'
        f'{_cell_line(item.cell, cells_anchor) if cells_anchor else ""}</div>' for item in result.items))


def _kpis(cards: list[numbers.Card]) -> str:
    return "".join(f'<div class="kpi"><div class="label">{html.escape(card.label)}</div>'
                   f'<div class="value">{html.escape(card.value)}</div>'
                   + (f'<div class="note">{html.escape(card.note)}</div>' if card.note else "") + "</div>"
                   for card in cards)


def _cards(panel: Panel, run: Run) -> str:
    return f'<div class="kpis">{_kpis(numbers.headline_cards(run))}</div>'


def _status(panel: Panel, run: Run) -> str:
    """The run panel (views.lines: run_facts, the summary's warnings), as the dashboard's Overview shows it."""
    summary = summarize(run)
    facts = "".join(f'<span class="fact"><span class="label">{html.escape(label)}</span> '
                    f'<span class="{status_class(words) if label == "status" else ""}">{html.escape(words)}'
                    "</span></span>" for label, words in run_facts(summary))
    warnings = ('<ul class="warnings">' + "".join(f"<li>{html.escape(warning)}</li>" for warning in summary["warnings"])
                + "</ul>") if summary["warnings"] else ""
    return _card(panel.title, f'<p class="meta">{html.escape(run_heading(summary))}</p>'
                              f'<div class="facts">{facts}</div>{warnings}')


def _speedups(panel: Panel, runs: Sequence[Run], cards: list[numbers.Card]) -> str:
    return _card(panel.title, f'<div class="speedups">{_kpis(cards)}</div>')


def _note(panel: Panel, run: Run) -> str:
    """The panel's sentence above it (views.numbers), where it has one."""
    note = panel.note(run) if panel.note else ""
    return f'<p class="meta">{html.escape(note)}</p>' if note else ""


def _figure_panel(panel: Panel, run: Run, fig: go.Figure) -> str:
    return _card(panel.title, _note(panel, run) + _figure(fig))


def _table_panel(panel: Panel, run: Run, frame) -> str:
    if not len(frame):
        return _card(panel.title, f'<p class="empty-state">{html.escape(panel.empty)}</p>')
    shown = frame.head(REPORT_TABLE_ROWS)
    # text columns left, numbers right (and formatted as everywhere: views.format)
    align = {c: "" if column_spec(c) else ' class="text"' for c in shown.columns}
    head = "".join(f"<th{align[c]}>{html.escape(title)}</th>" for c, title in zip(shown.columns, column_titles(frame)))
    body = "".join("<tr>" + "".join(f"<td{align[c]}>{html.escape(cell(c, v))}</td>" for c, v in zip(shown.columns, row))
                   + "</tr>" for row in shown.itertuples(index=False))
    more = (f'<p class="meta">the first {len(shown):,} of {len(frame):,} rows</p>' if len(frame) > len(shown) else "")
    return _card(panel.title, f'{_note(panel, run)}<table class="plain"><tr>{head}</tr>{body}</table>{more}')


RENDERERS = {CARDS: _cards, FINDINGS: _findings, FIGURE: _figure_panel, TABLE: _table_panel, SPEEDUPS: _speedups,
             STATUS: _status}


def _anchored(anchor: str, linked: bool, body: str) -> str:
    """A panel's HTML, inside an element a link can name where one does (the Cells graph: findings link it)."""
    return f'<div id="{html.escape(anchor)}">{body}</div>' if linked else body


def _section(section_id: str, title: str, panels_: Sequence[Panel], subject: Run | Sequence[Run]) -> str:
    """A section of the report: what views.panels.shown keeps of `panels_` (of one run, or the compare panels of
    several) for the report, in its order and rows. The Cells graph is anchored: findings link to it."""
    parts = []
    renderers = RENDERERS | {FINDINGS: functools.partial(_findings, section=section_id)}
    for row in shown(panels_, subject, REPORT):
        rendered = "".join(_anchored(f"{section_id}-{panel.id}", panel.id == ids.CELLS, renderers[panel.kind](
            panel, subject, *([] if content is None else [content]))) for panel, content in row)
        parts.append(f'<div class="grid2">{rendered}</div>' if row[0].panel.half else rendered)
    return f'<section id="{section_id}"><h2>{html.escape(title)}</h2>{"".join(parts)}</section>'


def run_section(index: int, label: str, run: Run,
                kinds: Sequence[str] = (STATUS, CARDS, FINDINGS, FIGURE, TABLE)) -> str:
    """A run's section: the report's panels of these kinds (a notebook's summary leaves the findings out); its
    title names the ranks its op-level numbers cover where they are not every rank's."""
    covered = op_ranks_label(op_coverage(run))
    title = label if covered is None else f"{label} (op types, memory, Cells: {covered})"
    return _section(f"run-{index}", title, tuple(panel for panel in panels() if panel.kind in kinds), run)


def compare_section(runs: Sequence[Run]) -> str:
    """The compare section (views.panels.COMPARE_PANELS), as the dashboard's Compare page shows it; for a PyTorch
    reference and its MindSpore port, the cross-framework comparison first (docs/migration.md)."""
    return _migration_card(runs) + _section("compare", "Compare", COMPARE_PANELS, runs)


def _migration_card(runs: Sequence[Run]) -> str:
    from ..analysis.migration import TORCH, framework_of
    from ..views.migration import compare_frameworks, is_cross_framework
    from .migration import migration_text
    if len(runs) != 2 or not is_cross_framework(*runs):
        return ""
    reference, port = runs if framework_of(runs[0]) == TORCH else runs[::-1]
    text = migration_text(compare_frameworks([reference], [port]))
    return _card("PyTorch reference and MindSpore port", f"<pre>{html.escape(text)}</pre>")


def render_report(runs: Sequence[Run]) -> str:
    """The report as one HTML string (plotly.js's basic bundle inlined: every trace perfkit draws, 1.2 MB)."""
    labels = run_labels(runs)
    nav = "".join(f'<a href="#run-{i}">{html.escape(label)}</a>' for i, label in enumerate(labels))
    if len(runs) > 1:
        nav = '<a href="#compare">Compare</a>' + nav
    body = (compare_section(runs) if len(runs) > 1 else "") + "".join(
        run_section(i, label, run) for i, (label, run) in enumerate(zip(labels, runs)))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>perfkit report: {html.escape(', '.join(labels))}</title>"
            f"<style>{STYLESHEET}</style><script>{PLOTLY_BUNDLE.read_text(encoding='utf-8')}</script></head><body>"
            f'<header class="top"><h1>perfkit report</h1>{nav}'
            f'<span style="margin-left:auto;font-size:13px">perfkit {__version__}</span></header>'
            f"<main>{body}</main></body></html>")


def write_report(runs: Sequence[Run], path: str | os.PathLike) -> None:
    text = render_report(runs)
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        raise PerfkitError(f"cannot write the report: {exc.strerror or exc}", path) from exc

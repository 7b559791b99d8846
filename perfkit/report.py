"""`perfkit report`: one self-contained HTML file with the dashboard's figures and findings.

plotly.js is inlined once, so the file opens from disk (file://) with no network, e.g. as a CI artifact.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Sequence

import plotly.graph_objects as go

from . import __version__, figures
from .compare import verdict_words
from .errors import PerfkitError
from .model import Run

# plotly.js's basic bundle (scatter, bar, pie: every trace perfkit.figures draws), same version as the plotly
# package (tests/test_dashboard_first_page.py checks), MIT: vendor/plotly.js-LICENSE. A quarter of the full
# bundle: the report file is 3.6 MB smaller and the dashboard's first page draws in half the time.
PLOTLY_BUNDLE = Path(__file__).resolve().parent / "vendor" / "plotly-basic.min.js"

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
table.plain th:first-child, table.plain td:first-child { text-align: left; }
.speedups { display: flex; flex-wrap: wrap; gap: 12px; }
.controls { display: flex; flex-wrap: wrap; gap: 24px; align-items: center; margin-bottom: 12px; }
"""

_PLOT_CONFIG = {"displaylogo": False, "responsive": True, "displayModeBar": "hover"}


def _figure(fig: go.Figure) -> str:
    message = figures.empty_message(fig)
    if message is not None:
        return f'<p class="empty-state">{html.escape(message)}</p>'
    return fig.to_html(full_html=False, include_plotlyjs=False, config=_PLOT_CONFIG)


def _card(title: str, body: str) -> str:
    return f'<div class="card"><h2>{html.escape(title)}</h2>{body}</div>'


def _findings(run: Run) -> str:
    result = figures.findings(run)
    if not result.items:
        return f'<p class="empty-state">{html.escape(result.note or "")}</p>'
    parts = []
    for item in result.items:
        evidence = ", ".join(f"{html.escape(str(k))} = {html.escape(str(v))}" for k, v in item["evidence"].items())
        gain = f" · up to {item['est_gain_pct']:.1f} % of step time" if item.get("est_gain_pct") is not None else ""
        target = f" · {html.escape(str(item['target']))}" if item.get("target") else ""
        parts.append(
            f'<div class="finding sev-{html.escape(item["severity"])}"><span class="sev">'
            f'{html.escape(item["severity"])}</span><span class="title">{html.escape(item["title"])}</span>'
            f'<div class="evidence">{html.escape(item["id"])}{target}{gain} — {evidence}</div>'
            f'<div>Change: <code>{html.escape(item["action"])}</code></div></div>')
    return "".join(parts)


def _op_type_table(run: Run, top: int = figures.TOP_OP_TYPES) -> str:
    rows = figures.op_type_rows(run).head(top)
    if not len(rows):
        return '<p class="empty-state">no operator statistics in this run</p>'
    body = "".join(f"<tr><td>{html.escape(r.type)}</td><td>{r.total_ms:,.3f}</td><td>{r.count:,}</td>"
                   f"<td>{r.share_pct:.2f}</td></tr>" for r in rows.itertuples(index=False))
    return ('<table class="plain"><tr><th>op type</th><th>total ms</th><th>calls</th><th>share %</th></tr>'
            f"{body}</table>")


def _run_section(index: int, label: str, run: Run) -> str:
    meta = run.meta
    kpis = "".join(f'<div class="kpi"><div class="label">{html.escape(name)}</div>'
                   f'<div class="value">{html.escape(value)}</div></div>'
                   for _, name, value in figures.headline_items(run))
    description = (f"{html.escape(run.path)} · device {html.escape(str(meta.device or 'unknown'))} · "
                   f"layout {html.escape(str(meta.layout or 'unknown'))} · ranks {meta.ranks} · "
                   f"data mode {html.escape(str(meta.data_mode or 'unknown'))}")
    panels = [
        _card("Findings (perfkit advise)", _findings(run)),
        _card("Step trace", _figure(figures.step_trace_figure(run))),
        _card("Operator types", _figure(figures.op_share_figure(run))),
        '<div class="grid2">' + _card("Host queue", _figure(figures.queue_figure(run, "host")))
        + _card("Device queue", _figure(figures.queue_figure(run, "device"))) + "</div>",
        _card("Data pipeline", _figure(figures.pipeline_figure(run))),
    ]
    if len(run.ranks) > 1:
        panels.append(_card("Ranks", _figure(figures.ranks_figure(run))))
    if len(run.memory):
        panels.append(_card("Memory", _figure(figures.memory_timeline_figure(run))))
    if len(run.comm_links):
        panels.append(_card("Link bandwidth", _figure(figures.link_heatmap_figure(run))))
    panels.append(_card(f"Top {figures.TOP_OP_TYPES} op types", _op_type_table(run)))
    return (f'<section id="run-{index}"><h2>{html.escape(label)}</h2><p class="meta">{description}</p>'
            f'<div class="kpis">{kpis}</div>{"".join(panels)}</section>')


def _compare_section(runs: Sequence[Run], labels: list[str]) -> str:
    cards = "".join(f'<div class="kpi"><div class="label">{html.escape(label)}</div>'
                    f'<div class="value">{"n/a" if s is None else f"{s:.2f}x"}</div>'
                    f'<div class="note">{html.escape("baseline" if i == 0 else verdict_words(verdict))}</div></div>'
                    for i, (label, s, verdict) in enumerate(zip(labels, figures.speedups(runs),
                                                                 figures.step_verdicts(runs))))
    return ('<section id="compare"><h2>Compare</h2>'
            f'<p class="meta">speedup over {html.escape(labels[0])} (mean step time ratio)</p>'
            f'<div class="speedups">{cards}</div>'
            + _card("Step split", _figure(figures.compare_steps_figure(runs)))
            + _card("Step time spread", _figure(figures.compare_step_spread_figure(runs)))
            + _card("Op time per step", _figure(figures.compare_op_time_figure(runs)))
            + _card("Queue emptiness", _figure(figures.compare_queues_figure(runs))) + "</section>")


def render_report(runs: Sequence[Run]) -> str:
    """The report as one HTML string (plotly.js's basic bundle inlined: every trace perfkit draws, 1.2 MB)."""
    labels = figures.run_labels(runs)
    nav = "".join(f'<a href="#run-{i}">{html.escape(label)}</a>' for i, label in enumerate(labels))
    if len(runs) > 1:
        nav = '<a href="#compare">Compare</a>' + nav
    body = (_compare_section(runs, labels) if len(runs) > 1 else "") + "".join(
        _run_section(i, label, run) for i, (label, run) in enumerate(zip(labels, runs)))
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

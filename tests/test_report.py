"""perfkit.render.report and the `report` / `dash` commands (the report in a browser: test_dashboard_browser.py)."""

from __future__ import annotations

import html
import re

import pytest
from click.testing import CliRunner
from conftest import REPO
from test_figures import make_run

from perfkit.advisor import advise
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError
from perfkit.render.report import PLOTLY_BUNDLE, render_report
from perfkit.views import numbers
from perfkit.views.compare import judge
from perfkit.views.panel import FIGURE
from perfkit.views.panels import REPORT, panels, shown

SEED_RUNS = [REPO / "tests/runs/seed_1_feed_fp32", REPO / "tests/runs/seed_3_sink_o3"]


def plotly_divs(text: str) -> int:
    return len(re.findall(r'<div id="[0-9a-f-]+" class="plotly-graph-div"', text))


def figure_panels(run) -> int:
    """The figures the report draws for a run: the panel list's figure panels the report shows (views.panels.shown:
    those it shows only with data, ranks, memory, links, where this run has them)."""
    return sum(item.panel.kind == FIGURE for row in shown(panels(), run, REPORT) for item in row)


# The compare section's figures (step split, step time spread, op time per step, queue emptiness).
COMPARE_FIGURES = 4


def test_report_is_self_contained():
    runs = [make_run("v1"), make_run("v2", ranks=(0, 1), slow_factor=1.5)]
    text = render_report(runs)
    assert text.count(PLOTLY_BUNDLE.read_text(encoding="utf-8")[-300:]) == 1  # plotly.js (basic) inlined, once
    assert len(text) < 2 * 1024**2  # the basic bundle, not the full 4.8 MB one
    # nothing fetched from elsewhere: no external script, stylesheet or image
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', text)
    # the compare section + each run's figure panels (the 2-rank run adds the Ranks figure)
    assert figure_panels(runs[1]) == figure_panels(runs[0]) + 1
    assert plotly_divs(text) == COMPARE_FIGURES + sum(figure_panels(run) for run in runs)
    speedup = judge([runs[0]], [runs[1]])["speedup"]
    assert f"{speedup:.2f}x" in text


def test_report_says_what_is_missing_and_escapes_names():
    run = make_run('<script>alert(1)</script>', data_mode="feed")
    run.device_queue = run.device_queue.iloc[0:0]
    text = render_report([run])
    assert "no device queue data: feed mode" in text
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_report_lists_findings_with_evidence_and_action():
    run = make_run(ranks=(0, 1, 2, 3), slow_factor=1.5)
    result = numbers.findings(run)
    text = render_report([run])
    advice = advise(run)
    for item, finding in zip(result.items, advice.findings, strict=True):
        assert html.escape(item.action) in text
        assert f"{finding.id} · {finding.target}" in text


def test_report_command_writes_one_file(tmp_path):
    from perfkit.io.loader import load
    runs = [load(path) for path in SEED_RUNS]
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", *map(str, SEED_RUNS), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    assert plotly_divs(text) >= COMPARE_FIGURES + 2 * 4
    speedup = judge([runs[0]], [runs[1]])["speedup"]
    assert f"{speedup:.2f}x" in text


def test_report_command_errors_are_one_line(tmp_path):
    result = CliRunner().invoke(main, ["report", str(tmp_path / "missing"), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.count("\n") == 1 and "does not exist" in result.output
    assert not (tmp_path / "r.html").exists()


def test_report_to_an_unwritable_path_is_one_line(tmp_path, monkeypatch):
    import perfkit.apps.cli
    monkeypatch.setattr(perfkit.apps.cli, "_load", lambda path, cycle=None: make_run())
    target = tmp_path / "no_such_dir" / "r.html"
    result = CliRunner().invoke(main, ["report", "anything", "-o", str(target)])
    assert result.exit_code == 2 and "cannot write the report" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("host, warned", [("127.0.0.1", False), ("localhost", False), ("0.0.0.0", True),
                                          ("192.168.1.5", True)])
def test_dash_command_binds_loopback_unless_told(monkeypatch, host, warned):
    import perfkit.apps.cli
    import perfkit.dashboards.app
    served = {}
    monkeypatch.setattr(perfkit.apps.cli, "_load", lambda path, cycle=None: make_run())

    def serve(runs, host, port, ready):
        served.update(host=host, port=port, runs=len(runs))
        ready()  # the app is built: now the URL is worth printing
    monkeypatch.setattr(perfkit.dashboards.app, "serve", serve)
    # 192.168.1.5 is not this machine's address: the port check would rightly refuse it
    monkeypatch.setattr(perfkit.dashboards.app, "check_port", lambda host, port: served.update(checked=(host, port)))
    result = CliRunner().invoke(main, ["dash", "a", "b", "--host", host, "--port", "8123"])
    assert result.exit_code == 0, result.output
    assert served == {"checked": (host, 8123), "host": host, "port": 8123, "runs": 2}
    assert ("warning: serving on" in result.output) is warned
    assert ":8123/  (Ctrl-C stops)" in result.output.splitlines()[-1]


def test_dash_default_host_is_loopback():
    from perfkit.apps.cli import dash
    assert next(p for p in dash.params if p.name == "host").default == "127.0.0.1"


@pytest.mark.parametrize("command", ["dash", "report"])
def test_help_has_an_example(command):
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "Example:" in result.output and f"perfkit {command} " in result.output


def test_the_report_and_the_dashboard_show_one_compare_section():
    """views.panels.COMPARE_PANELS is the compare section of both: the report shows what differed between the
    runs (here the one setting the two sample runs' manifests differ in) as the dashboard's Compare page does."""
    import json as json_module

    from plotly.utils import PlotlyJSONEncoder

    from perfkit.dashboards.layout import compare_body
    from perfkit.io.loader import load
    from perfkit.views.panels import COMPARE_PANELS
    runs = [load(REPO / "sample_runs/cpu_default"), load(REPO / "sample_runs/cpu_avx2")]
    manifests = [json_module.loads((REPO / f"sample_runs/{name}/perfkit_run.json").read_text())
                 for name in ("cpu_default", "cpu_avx2")]
    isa = [manifest["env"].get("ONEDNN_MAX_CPU_ISA", "-") for manifest in manifests]
    text = render_report(runs)
    section = text[text.index('<section id="compare">'):text.index('<section id="run-0">')]
    positions = [section.find(f"<h2>{html.escape(panel.title)}</h2>") for panel in COMPARE_PANELS]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)
    assert f"<td class=\"text\">env.ONEDNN_MAX_CPU_ISA</td><td class=\"text\">{isa[0]}</td>" \
           f"<td class=\"text\">{isa[1]}</td>" in section and isa == ["-", "AVX2"]
    page = json_module.dumps(compare_body(runs), cls=PlotlyJSONEncoder)
    assert all(f'"id": "{panel.id}"' in page for panel in COMPARE_PANELS)


def test_dash_help_lists_every_page_of_the_dashboard():
    from perfkit.dashboards import ids
    result = CliRunner().invoke(main, ["dash", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for path, title in ids.PAGES.items():  # the navigation bar's pages
        assert f"{title} {path}" in text
    assert len(ids.PAGES) == 7

"""The view layer (perfkit/views): one set of formatters, one panel list, derived numbers taken from the
analysis/advisor, and every view naming the same slow ranks."""

from __future__ import annotations

import json
import re
import socket

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, REPO
from plotly.utils import PlotlyJSONEncoder
from test_figures import make_run

import perfkit
from perfkit.apps.cli import main
from perfkit.core.causes import OP_TYPES_SUMMED_OVER
from perfkit.core.model import Meta, Run, table
from perfkit.render import text as render
from perfkit.views import format as fmt
from perfkit.views import ids, numbers
from perfkit.views.figures import operators, overview, ranks
from perfkit.views.panel import COMPARE, FIGURE, INSTANCES, NEVER, PAGES, TABLE, WITH_DATA, Panel
from perfkit.views.panels import COMPARE_PANELS, DASHBOARD, PANELS, REPORT, panels, panels_on, shown
from perfkit.views.summary import summarize

# Every multi-rank real run: fixtures, the 2-rank CPU sample run. (Checked by loading: a run listed here that
# turns out single-rank fails the test below instead of passing vacuously.)
MULTI_RANK_RUNS = {name: FIXTURE_RUNS[name] for name in ("legacy_misc", "new_level1", "new_2023")} | {
    "cpu_ranks2": REPO / "sample_runs/cpu_ranks2"}


def lockstep_run() -> Run:
    """Crafted (no real fixture shows it): 4 data-parallel ranks in lockstep, equal step totals of 100 ms;
    rank 3 computes 80 ms a step against the others' 60 ms, and they wait for it in communication. The step
    totals alone show no slow rank; compute time does (issue 12)."""
    rows_ = []
    for rank in range(4):
        computing = 80.0 if rank == 3 else 60.0
        for step in range(1, 6):
            rows_.append(dict(rank=rank, step=step, interval_ms=None, fwd_bwd_ms=None, tail_ms=None,
                              computing_ms=computing, comm_ms=100.0 - computing,
                              comm_exposed_ms=100.0 - computing, total_ms=100.0))
    return Run(path="/runs/lockstep", meta=Meta(device="Ascend", layout="ascend_ms", ranks=[0, 1, 2, 3]),
               steps=table("steps", rows_))


def ranks_page_slow(client, index: int) -> set[int]:
    """The ranks the dashboard's Ranks page marks slow, read from the page the server sends."""
    body = {"output": "page.children", "outputs": {"id": "page", "property": "children"}, "changedPropIds": [],
            "inputs": [{"id": "url", "property": "pathname", "value": "/ranks"},
                       {"id": "url", "property": "search", "value": f"?run={index}"}]}
    response = client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200
    text = response.get_data(as_text=True)
    marked = {int(rank) for rank in re.findall(r"rank (\d+) \(slow\)", text)}
    note = re.search(r"slow ranks?: ([\d, ]+) \(", text)
    assert marked == ({int(r) for r in note.group(1).split(",")} if note else set())
    assert ("no slow rank" in text) is (not marked)
    return marked


def cli_json(monkeypatch, command: str, run: Run) -> dict:
    import perfkit.apps.cli
    monkeypatch.setattr(perfkit.apps.cli, "_load", lambda path: run)
    result = CliRunner().invoke(main, [command, "x", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def advise_slow(advice: dict) -> set[int]:
    return {int(rank) for finding in advice["findings"] if finding["id"] == "slow_rank"
            for rank in re.findall(r"rank (\d+)", finding["target"])}


@pytest.fixture(scope="module")
def multi_rank_runs():
    runs = {name: perfkit.load(path) for name, path in MULTI_RANK_RUNS.items()}
    runs["crafted_lockstep"] = lockstep_run()
    return runs


def test_ranks_page_summary_and_advise_name_the_same_slow_ranks(multi_rank_runs, monkeypatch):
    from perfkit.dashboards import create_app
    names = list(multi_rank_runs)
    client = create_app([multi_rank_runs[name] for name in names]).server.test_client()
    for index, name in enumerate(names):
        run = multi_rank_runs[name]
        assert run.steps["rank"].nunique() > 1, name
        page = ranks_page_slow(client, index)
        summary = set(cli_json(monkeypatch, "summary", run)["slow_ranks"])
        advice = advise_slow(cli_json(monkeypatch, "advise", run))
        assert page == summary == advice, name
    # the crafted run is the one whose step totals are equal: only compute time tells rank 3 is slow
    assert ranks_page_slow(client, names.index("crafted_lockstep")) == {3}


def test_lockstep_run_rank_table_says_yes_and_no():
    frame = ranks.rank_rows(lockstep_run())
    assert list(frame["slow"]) == ["no", "no", "no", "yes"]
    assert list(frame["compute_ms"]) == [60.0, 60.0, 60.0, 80.0]


# ---------------------------------------------------------------------------------------------------------
# Formatters


@pytest.mark.parametrize("value, text", [(1421.82, "1,421.820 ms"), (0.0004, "0.000 ms"), (None, "unknown"),
                                         (float("nan"), "unknown")])
def test_ms(value, text):
    assert fmt.ms(value) == text


def test_pct_percent_count_and_cells():
    assert fmt.pct(0.12345) == "12.3 %" and fmt.percent(12.345) == "12.3 %" and fmt.pct(None) == "n/a"
    assert fmt.count(1234567) == "1,234,567"
    assert fmt.cell("total_ms", 1421.82) == "1,421.820" and fmt.cell("share_pct", 51.54) == "51.5"
    assert fmt.cell("count", 966) == "966" and fmt.cell("name", "Default/Cast-op1") == "Default/Cast-op1"
    assert fmt.column_title("slower_than_fastest_pct") == "slower than fastest %"


def test_terminal_report_and_cards_print_ms_alike():
    run = make_run()
    mean = run.steps["total_ms"].mean()
    expected = f"{mean:,.3f} ms"
    assert expected in render.summary_text(summarize(run))
    assert {card.key: card.value for card in numbers.headline_cards(run)}["mean-step"] == expected
    assert f"mean step {expected}" in overview.step_trace_figure(run).layout.title.text


def test_step_parts_have_one_label_and_colour_each():
    parts = [column for split in fmt.STEP_SPLITS for column, _ in split]
    assert all(column in fmt.COLORS and column in fmt.STEP_LABELS for column in parts)
    assert not set(fmt.RUN_COLORS) & set(fmt.COLORS.values())  # a run never looks like a step part
    meanings = {"interval_ms": "data wait", "free_ms": "idle", "host": "host queue", "device": "device queue",
                "Cast": "Cast", "tail_ms": "tail"}
    assert len({fmt.COLORS[key] for key in meanings}) == len(meanings)


# ---------------------------------------------------------------------------------------------------------
# The panel list


def test_every_panel_holds_its_functions_and_an_id_of_views_ids():
    for panel in PANELS + COMPARE_PANELS:
        for function in (panel.content, panel.text, panel.data, panel.note):
            assert function is None or callable(function), panel.id
        assert panel.page in {page.path for page in PAGES} | {COMPARE.path}
    assert len({panel.id for panel in PANELS + COMPARE_PANELS}) == len(PANELS + COMPARE_PANELS)
    assert ids.OWN == {panel.id for panel in PANELS + COMPARE_PANELS}  # what a plugin's panel may not take


def test_a_panel_without_its_content_function_or_with_a_name_for_one_fails_when_built():
    with pytest.raises(ValueError, match="needs a content function"):
        Panel("fig-x", "X", "/", FIGURE)
    with pytest.raises(ValueError, match="text is not callable"):
        Panel("fig-x", "X", "/", FIGURE, content=overview.bound_figure, text="bound_lines")


@pytest.mark.parametrize("name", ["legacy_misc", "new_level1", "cpu_2_10", "legacy_ut"])
def test_a_panels_json_form_holds_what_its_text_form_prints(name):
    """perfkit's own panels carry their JSON form (`data`: the part of the summary they show) as a plugin's
    does: the text form printed from it alone is the text form printed from the whole summary."""
    run = perfkit.load(FIXTURE_RUNS[name])
    summary = summarize(run)
    with_text = [panel for panel in PANELS if panel.text is not None]
    assert with_text and all(panel.data is not None for panel in with_text)
    for panel in with_text:
        part = panel.data(run)
        assert part.items() <= summary.items(), panel.id
        assert panel.text(part) == panel.text(summary), panel.id


def test_dashboard_pages_show_their_panels_in_list_order():
    from perfkit.dashboards import layout
    run = make_run(ranks=(0, 1), slow_factor=1.3)
    for page in PAGES:
        rendered = json.dumps(layout.run_page(page.path, run, 0), cls=PlotlyJSONEncoder)
        # the crafted run has no communication files: the optional communication panels stay out
        positions = [rendered.find(f'"id": "{panel.id}"') for panel in panels_on(page.path) if not panel.optional]
        assert all(p >= 0 for p in positions) and positions == sorted(positions), page.path
        assert all(f'"id": "{panel.id}"' not in rendered for panel in panels_on(page.path) if panel.optional)


def test_report_shows_its_panels_in_list_order():
    from perfkit.render.report import render_report
    run = make_run(ranks=(0, 1), slow_factor=1.3)
    text = render_report([run])
    # the crafted run has two ranks and no memory or communication files
    titles = [item.panel.title for row in shown(panels(), run, REPORT) for item in row if item.panel.title]
    assert "Ranks" in titles  # two ranks: the WITH_DATA ranks panels are in
    positions = [text.find(f"<h2>{title}</h2>") for title in titles]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)
    assert "<h2>Memory</h2>" not in text and "<h2>Link bandwidth</h2>" not in text
    assert INSTANCES not in {item.panel.kind for row in shown(panels(), run, REPORT) for item in row}
    assert sum(panel.kind == TABLE and panel.title in titles for panel in panels()) == \
        text.count('<table class="plain">')


def test_one_rule_per_consumer_decides_which_panels_show():
    """A single-rank run without memory records: the dashboard's Ranks and Memory pages say in words that there
    is nothing to show (the ranks figure, the memory figure), the report leaves its WITH_DATA panels out;
    both leave out the optional communication panels, and the report never shows a NEVER panel."""
    run = make_run()
    on_dashboard = {item.panel.id for path in ("/ranks", "/memory") for row in shown(panels_on(path), run, DASHBOARD)
                    for item in row}
    in_report = {item.panel.id for row in shown(panels(), run, REPORT) for item in row}
    with_data = {panel.id for panel in PANELS if panel.report == WITH_DATA}
    assert {ids.RANKS, ids.RANK_TABLE, ids.MEMORY, ids.OP_MEMORY} <= on_dashboard
    assert {ids.LINK_HEATMAP, ids.COMM_OP_TABLE}.isdisjoint(on_dashboard | in_report)
    assert with_data and in_report.isdisjoint(with_data)  # nor Cells: its op names carry no scope
    assert in_report.isdisjoint({panel.id for panel in PANELS if panel.report == NEVER})
    with pytest.raises(ValueError, match="not 'notebook'"):
        shown(PANELS, run, "notebook")


def test_half_panels_share_a_row():
    grouped = shown(panels_on("/"), make_run(), DASHBOARD)
    assert [[item.panel.id for item in row] for row in grouped if row[0].panel.half] == \
        [[ids.HOST_QUEUE, ids.DEVICE_QUEUE]]
    assert sum(len(row) for row in grouped) == len(panels_on("/"))


def test_summary_text_sections_follow_the_panel_list():
    run = make_run(ranks=(0, 1), slow_factor=1.3)
    text = render.summary_text(summarize(run))
    heads = {ids.STEPS: "steps (", ids.RANKS: "per rank", ids.OP_SHARES: "op types (", ids.HOST_QUEUE: "host queue",
             ids.PIPELINE: "data pipeline"}
    positions = [text.find(heads[panel.id]) for panel in PANELS if panel.id in heads]
    assert all(p >= 0 for p in positions) and positions == sorted(positions)
    assert f"over {OP_TYPES_SUMMED_OVER}" in text


def test_a_run_and_its_views_are_freed_once_nothing_holds_the_run():
    """Views are computed once per run (views/per_run.py) and kept while the run lives: what they keep must not
    hold the run, or every run a dashboard or notebook ever loaded would stay in memory. perfkit.summarize's
    Summary holds its run, and is made afresh around the kept numbers."""
    import gc
    import weakref

    from perfkit.render.report import render_report

    run = perfkit.load(FIXTURE_RUNS["legacy_misc"])
    summary = perfkit.summarize(run)
    assert summary.run is run and summary == perfkit.summarize(run)
    render_report([run])  # every panel's figure, table and note, the findings and their timeline links
    numbers.timeline_links(run)
    freed = weakref.ref(run)
    del run, summary
    gc.collect()
    assert freed() is None


# ---------------------------------------------------------------------------------------------------------
# Item 6 polish


def test_communication_card_and_rank_segment_on_the_two_rank_cpu_run():
    run = perfkit.load(REPO / "sample_runs/cpu_ranks2")
    # independent of the advisor: the collective op type's time per rank over that rank's profiled steps
    collective = run.op_types[run.op_types["type"] == "AllReduce"].groupby("rank")["total_ms"].sum()
    steps = run.steps.groupby("rank")["total_ms"].agg(["mean", "size"])
    per_rank = collective / steps["size"]
    expected = per_rank.mean()
    # CPU collectives run with no compute op beside them: the exposed time the steps measure (each steady
    # step's AllReduce time with no compute op running) is the op time, to rounding
    cards = {card.key: card for card in numbers.headline_cards(run)}
    card_ms, card_pct = cards["communication"].value.split(" ms · ")
    assert float(card_ms.replace(",", "")) == pytest.approx(expected, abs=0.005)
    assert card_pct == f"{100 * expected / steps['mean'].mean():.1f} %"
    assert 0.45 < expected / steps["mean"].mean() < 0.55  # the run's ~50 % communication
    fig = ranks.ranks_figure(run)
    traces = {trace.name: list(trace.y) for trace in fig.data}
    # the Ranks page's bars are the ledger's split, named as the bound names it: the AllReduce time is the
    # communication segment, and the segments of a rank add up to its mean step
    comm = traces[perfkit.analysis.ledger.bound(run).labels["communication"]]
    assert comm == pytest.approx(list(per_rank), abs=0.01)
    assert [sum(values) for values in zip(*traces.values())] == pytest.approx(list(steps["mean"]))
    assert f"exposed communication {card_ms} ms per step" in overview.step_trace_figure(run).layout.title.text
    assert "cast-share" not in cards  # CPU: no mixed-precision story


def test_op_types_under_a_twentieth_of_a_percent_fold_into_other():
    totals = {"Conv2D": 1000.0, "MatMul": 500.0, "Tiny1": 0.1, "Tiny2": 0.2}
    fig = overview.op_share_figure(make_run(op_totals=totals))
    labels = list(fig.layout.yaxis.categoryarray)[::-1]
    assert labels == ["Conv2D", "MatMul", "other types (2)"]
    assert list(fig.layout.xaxis.range) == [0, 100]


def test_queue_and_pipeline_axes():
    run = make_run()
    queue = overview.queue_figure(run, "host")
    assert queue.layout.xaxis.tickformat == ",d" and queue.layout.xaxis.dtick == 1
    assert list(overview.pipeline_figure(run).layout.xaxis.range) == [0, 100]


def test_op_instance_rows_carry_input_shapes():
    run = perfkit.load(REPO / "sample_runs/cpu_ranks2")
    rows_, _ = operators.op_instance_rows(run, limit=5)
    top = run.ops.sort_values("total_ms", ascending=False).head(5)
    assert list(rows_["input_shapes"]) == list(top["input_shapes"].fillna(""))


def test_dash_on_a_busy_port_is_one_line_and_exit_2(monkeypatch):
    import perfkit.apps.cli
    monkeypatch.setattr(perfkit.apps.cli, "_load", lambda path: pytest.fail("runs loaded before the port was checked"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        result = CliRunner().invoke(main, ["dash", "x", "--port", str(port)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.count("\n") == 1 and f"127.0.0.1:{port}" in result.output
    assert "http://" not in result.output  # no URL printed for a dashboard that is not served


def test_serve_on_a_port_taken_after_the_check_is_one_error(monkeypatch):
    from perfkit.dashboards.app import serve
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(perfkit.PerfkitError, match=f"127.0.0.1:{port}"):
            serve([make_run()], host="127.0.0.1", port=port, ready=lambda: pytest.fail("ready before binding"))


def test_findings_card_and_advise_text_print_evidence_alike():
    from perfkit.advisor import advise
    from perfkit.render.advice import advice_text
    run = perfkit.load(REPO / "sample_runs/cpu_ranks2")
    advice = advise(run)
    text = advice_text(advice)
    for item, finding in zip(numbers.findings(run).items, advice.findings, strict=True):
        for key, value in finding.evidence.items():
            shown = (f"{value:,.3f}".rstrip("0").rstrip(".") if isinstance(value, float)
                     else value if isinstance(value, str) else f"{value:,}")  # str: how a split was estimated
            assert f"{key} = {shown}" in item.detail and f"{key} {shown}" in text
    # the run's communication (~1,700 ms a step) exercises the thousands separator
    assert any(isinstance(v, float) and v >= 1000 for finding in advice.findings for v in finding.evidence.values())


def test_short_op_names_tell_every_op_apart_by_its_cells():
    """cpu_2_10's ResNet-50: 684 full names, which cut at either end read alike; the short names are distinct,
    each the instance names of the full name's cells in order, then its op."""
    names = list(dict.fromkeys(perfkit.load(FIXTURE_RUNS["cpu_2_10"]).ops["name"].astype(str)))
    short = fmt.short_op_names(names)
    assert len(set(short)) == len(names) > 600
    assert len({name[-40:] for name in names}) < len(names)  # what a cut name showed: rows that read the same
    wrapper = ("Default", "network-WithLossCell", "_backbone-ResNet50")  # in over half the names
    expected = []
    for full in names:
        scopes = full.split("/")
        cells = [scope.split("-", 1)[0] for scope in scopes[:-1] if "-" in scope and scope not in wrapper]
        expected.append(f"{'.'.join(cells)}/{scopes[-1]}" if cells else scopes[-1])
    alike = {value for value in expected if expected.count(value) > 1}  # the loss op, forward and backward
    assert len(alike) <= 2
    assert short == [full if value in alike else value for full, value in zip(names, expected)]
    # two names that shorten alike stay whole; names without scopes are kept
    assert fmt.short_op_names(["A/x-C/y-D/Op-op0", "B/x-C/y-D/Op-op0", "Conv2D1"]) == \
        ["A/x-C/y-D/Op-op0", "B/x-C/y-D/Op-op0", "Conv2D1"]

"""The Timeline page in headless Chromium: the index builds on the first visit, bars are drawn, nested events
get sub-rows, the step picker switches steps, hovering a bar names its op, the Operators page and a finding
link to their ops' occurrences. Screenshots: docs/dash_timeline.png and docs/dash_timeline_finding.png with
PERFKIT_SCREENSHOT_DIR=docs."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import broken
import pytest
from conftest import FIXTURE_RUNS, REPO
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from test_dashboard_browser import make_driver, screenshot, start_server, wait_for
from test_timeline_view import brute_force_depths

import perfkit
from perfkit.io import timeline  # noqa: E402
from perfkit.views import ids as panel_ids
from perfkit.views.figures import timeline as timeline_figures

pytestmark = pytest.mark.browser
STEPS = 3
REPEAT2 = REPO / "tests" / "runs" / "cpu_2_10_repeat2"
DATA_BOUND = REPO / "tests" / "runs" / "cpu_2_10_data_wait"


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """The real new-layout rank with its trace repeated for 3 steps by the benchmark generator (the fixture
    profiled one step; the step picker needs several): each copy shifted in time, its marker renumbered."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from generate import write_trace_view
    folder = broken.copy_run(FIXTURE_RUNS["new_level1_rank0"], tmp_path_factory.mktemp("run") / "rank0_ascend_pt")
    trace = folder / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    size = trace.stat().st_size
    assert write_trace_view(trace, size * (STEPS - 1) + 1, first_step=1) == STEPS
    return folder


@pytest.fixture(scope="module")
def page(run_folder, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("PERFKIT_CACHE_DIR", str(cache))
    patch.delenv("PERFKIT_NO_CACHE", raising=False)
    from perfkit.dashboards import create_app
    # run 1: the CPU run, whose compute_bound finding names an op type; run 2: the database export (no JSON trace);
    # run 3: the second of two profiler cycles (perfkit dash --cycle 2); run 4: a data-bound run under perfkit profile
    url, stop = start_server(create_app([perfkit.load(run_folder), perfkit.load(FIXTURE_RUNS["cpu_2_10"]),
                                         perfkit.load(FIXTURE_RUNS["new_db_level1"]),
                                         perfkit.load(REPEAT2, cycle=2), perfkit.load(DATA_BOUND)]))
    driver = make_driver(tmp_path_factory.mktemp("chromium-profile"))
    yield driver, url
    driver.quit()
    stop()
    patch.undo()


def bars(driver) -> int:
    return driver.execute_script("return document.querySelectorAll('#timeline-graph .trace.bars path').length")


def outlined(driver) -> list[str]:
    """The stroke widths of the bars of the figure's last trace: the outlines of the ops a link names."""
    return driver.execute_script(
        "const traces = document.querySelectorAll('#timeline-graph .trace.bars');"
        "return [...traces[traces.length - 1].querySelectorAll('path')].map(p => p.style.strokeWidth);")


def row_labels(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('#timeline-graph .ytick text')].map(t => t.textContent);")


def title(driver) -> str:
    return driver.execute_script("const t = document.querySelector('#timeline-graph .gtitle');"
                                 "return t ? t.textContent : '';")


def test_timeline_page_draws_picks_steps_and_hovers(page, run_folder, tmp_path_factory):
    driver, url = page
    driver.get(f"{url}/timeline?run=0")
    wait_for(driver, lambda d: bars(d) > 0, "timeline bars (after the index is built)")
    first = timeline.timeline(run_folder, step=1)
    assert title(driver).startswith(f"step 1 · {len(first):,} events")
    drawn, merged = timeline_figures.timeline_bars(first)
    assert merged > 0 and "tiny events merged" in title(driver)  # 4,363 complete events > MAX_TIMELINE_BARS
    wait_for(driver, lambda d: bars(d) == len(drawn), f"{len(drawn)} bars")

    # The step picker: choose step 2, the figure follows.
    driver.find_element(By.CSS_SELECTOR, "#timeline-step").click()
    option = wait_for(driver, lambda d: [e for e in d.find_elements(By.XPATH, "//*[@role='option']")
                                         if e.text.strip() == "2"], "step options")[0]
    option.click()
    second = timeline.timeline(run_folder, step=2)
    wait_for(driver, lambda d: title(d).startswith(f"step 2 · {len(second):,} events"), "step 2 drawn")

    # Hover: the longest bar on the Ascend Hardware lanes names its op.
    hardware = second[(second["process"] == "Ascend Hardware") & (second["ph"] == "X")]
    longest = hardware.sort_values("dur_us").iloc[-1]
    target = driver.execute_script(
        "const gd = document.getElementById('timeline-graph').querySelector('.js-plotly-plot');"
        "let best = null, width = -1;"
        "gd.querySelectorAll('.trace.bars path').forEach(p => {const w = p.getBBox().width;"
        "  if (w > width) {width = w; best = p;}});"
        "return best;")
    ActionChains(driver).move_to_element(target).perform()
    hover = wait_for(driver, lambda d: d.execute_script(
        "const h = document.querySelector('#timeline-graph .hoverlayer .hovertext');"
        "return h ? h.textContent : '';"), "a hover label")
    drawn = timeline_figures.complete_events(second)  # as drawn: events reaching past the step cut at its edges
    longest_any = drawn[drawn["dur_us"] == drawn["dur_us"].max()]
    assert any(name in hover for name in longest_any["name"]) and "ms" in hover
    assert len(longest["name"]) > 0
    screenshot(driver, "dash_timeline", tmp_path_factory.mktemp("shots"))


def test_nested_events_have_sub_rows_under_their_lane(page, run_folder):
    driver, url = page
    driver.get(f"{url}/timeline?run=0&step=1")
    wait_for(driver, lambda d: bars(d) > 0, "timeline bars")
    # independently: per Python lane, the depths a pair-by-pair containment count gives the step's events
    events = timeline.timeline(run_folder, step=1)
    calls = events[(events["process"] == "Python") & (events["ph"] == "X") & events["dur_us"].notna()]
    expected = set()
    for lane, of_lane in calls.groupby("lane"):
        for *_, depth in brute_force_depths(zip(of_lane["start_us"], of_lane["start_us"] + of_lane["dur_us"])):
            expected.add(f"rank 0 · Python · {lane}" + (f" · {depth}" if depth else ""))
    assert any(label.endswith(" · 1") for label in expected)
    wait_for(driver, lambda d: {label for label in row_labels(d) if " · Python · " in label} == expected,
             f"{len(expected)} Python rows and sub-rows")


def test_op_link_outlines_its_occurrences(page, run_folder):
    driver, url = page
    name = "aten::empty"
    driver.get(f"{url}/timeline?run=0&step=3&op={name}")
    events = timeline.timeline(run_folder, step=3)
    count = int(((events["ph"] == "X") & (events["name"] == name)).sum())
    wait_for(driver, lambda d: f"{count:,} of them {name}" in title(d), "the op's occurrences counted")
    assert count > 0


def test_a_finding_links_to_its_ops_on_the_timeline(page, tmp_path_factory):
    driver, url = page
    driver.get(f"{url}/?run=1")
    link = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR,
                                                      f"#{panel_ids.FINDINGS} a.finding-timeline-link"),
                    "the finding's timeline link")
    assert link[0].text == "Conv2DBackpropFilter on the timeline, step 2"
    link[0].click()
    wait_for(driver, lambda d: "/timeline" in d.current_url and "op=Conv2DBackpropFilter" in d.current_url,
             "the timeline page")
    # independently: the step's events that the CPU trace names `<scope>/Conv2DBackpropFilter-op<N>`
    step = timeline.timeline(FIXTURE_RUNS["cpu_2_10"], step=2)
    trace = next(FIXTURE_RUNS["cpu_2_10"].glob("*_ascend_ms")) / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    ops = {(e["name"], float(e["ts"])) for e in json.load(open(trace))
           if e.get("ph") == "X" and re.fullmatch(r".*/Conv2DBackpropFilter-op\d+", e["name"])}
    count = len(ops & set(zip(step["name"], step["start_us"])))
    assert count == 53  # ResNet-50's 53 convolutions, each once a step
    wait_for(driver, lambda d: title(d).startswith("step 2 · ") and title(d).endswith(
        f"{count:,} of them Conv2DBackpropFilter"), "the finding's ops counted")
    wait_for(driver, lambda d: outlined(d) == ["2px"] * count, f"{count} outlined bars")
    screenshot(driver, "dash_timeline_finding", tmp_path_factory.mktemp("shots"))


def test_clicking_an_op_name_on_the_operators_page_opens_it_on_the_timeline(page, run_folder):
    driver, url = page
    driver.get(f"{url}/operators?run=0")
    cell = wait_for(driver, lambda d: d.find_elements(
        By.CSS_SELECTOR,
        f"#{panel_ids.OP_TABLE} .ag-center-cols-container .ag-row[row-index='0'] .ag-cell[col-id='name']"),
        "op instance table")[0]
    name = cell.get_attribute("textContent").strip().strip("\u2066\u2069")  # the grid isolates names (bidi)
    cell.click()
    wait_for(driver, lambda d: "/timeline" in d.current_url, "the timeline page")
    assert "op=" in driver.current_url
    events = timeline.timeline(run_folder, step=1)  # no step in the link: the page opens the first
    count = int(((events["ph"] == "X") & (events["name"] == name)).sum())
    assert count > 0, name  # the Operators page's names are the trace's kernel names
    wait_for(driver, lambda d: title(d).endswith(f"{count:,} of them {name}"), "the op outlined and counted")


def test_a_database_export_has_its_timeline(page, tmp_path_factory):
    """No trace_view.json: the page draws the profiler database's own event tables, both ranks."""
    driver, url = page
    # the expected window first: the page then finds the index built, instead of racing this process's build
    events = timeline.timeline(FIXTURE_RUNS["new_db_level1"], step=50, ranks=[0, 1])
    driver.get(f"{url}/timeline?run=2&step=50")
    wait_for(driver, lambda d: title(d).startswith(f"step 50 · {len(events):,} events"), "the database's step 50")
    drawn, _ = timeline_figures.timeline_bars(events)
    band = timeline_figures.step_band(perfkit.load(FIXTURE_RUNS["new_db_level1"]), events, 50)
    assert set(band["rank"]) == {0, 1}  # the step's split for both ranks, above their lanes
    wait_for(driver, lambda d: bars(d) == len(drawn) + len(band), f"{len(drawn) + len(band)} bars")
    labels = row_labels(driver)
    for rank in (0, 1):
        for process in ("Python", "CANN", "Ascend Hardware", "HCCL"):
            assert any(label.startswith(f"rank {rank} · {process} · ") for label in labels), (rank, process)
    screenshot(driver, "dash_timeline_db", tmp_path_factory.mktemp("shots"))


def test_a_run_read_with_a_cycle_shows_that_cycle_s_timeline(page):
    """perfkit dash --cycle 2 on the real repeat=2 run: the page draws the second cycle's events (the folder's
    whole timeline would be refused: two runs of rank 0)."""
    driver, url = page
    second = REPEAT2 / "vm_5942_20261124202937099_ascend_ms"
    events = timeline.timeline(second, step=2)
    driver.get(f"{url}/timeline?run=3&step=2")
    wait_for(driver, lambda d: title(d).startswith(f"step 2 · {len(events):,} events"), "cycle 2's step 2")
    first = timeline.timeline(REPEAT2 / "vm_5942_20261124202935871_ascend_ms", step=2)
    assert sorted(first["start_us"]) != sorted(events["start_us"])  # the cycles' windows differ


def drawn_bars(driver) -> list[dict]:
    """Every bar of the timeline figure as drawn (plotly's full data: arrays decoded): its trace's name (the
    category) and colour, its row, its op's name, where it ends (ms from the window's start)."""
    return driver.execute_script(
        "const gd = document.querySelector('#timeline-graph .js-plotly-plot');"
        "const bars = [];"
        "gd._fullData.forEach(t => { for (let i = 0; i < t.y.length; i++) bars.push({category: t.name,"
        "  color: t.marker.color, row: t.y[i], name: t.customdata ? t.customdata[i][0] : null,"
        "  end: t.base[i] + t.x[i]}); });"
        "return bars;")


def test_cpu_lanes_are_coloured_by_what_runs_on_them(page, tmp_path_factory):
    """The CPU run (cpu_2_10): its CPU OP lane holds the kernels (args.type HostCpuOps in the raw trace) and is
    drawn in the compute colour; its Scope Layer lanes hold cell scopes, drawn in the scope colour; no bar runs
    past the step."""
    from test_timeline import raw_lane_kinds
    driver, url = page
    trace = next(FIXTURE_RUNS["cpu_2_10"].rglob("trace_view.json"))
    kinds = {}
    for (name, _), kind in raw_lane_kinds(trace).items():
        kinds.setdefault(name, set()).add(kind)
    assert all(len(found) == 1 for found in kinds.values())
    driver.get(f"{url}/timeline?run=1&step=2")
    wait_for(driver, lambda d: bars(d) > 0, "timeline bars")
    window = timeline.timeline(FIXTURE_RUNS["cpu_2_10"], step=2)
    (start, end), = window.attrs["window_us"].values()
    band = timeline_figures.step_band(perfkit.load(FIXTURE_RUNS["cpu_2_10"]), window, 2)
    expected = len(timeline_figures.timeline_bars(window)[0]) + len(band)
    drawn = wait_for(driver, lambda d: drawn_bars(d) if len(drawn_bars(d)) == expected else None, "every bar")
    assert sorted(bar["name"] for bar in drawn if " · step ledger · " in bar["row"]) == sorted(band["name"])
    drawn = [bar for bar in drawn if " · step ledger · " not in bar["row"]]
    assert {bar["category"] for bar in drawn} == {"compute", "scope"}
    for bar in drawn:
        (kind,) = kinds[bar["name"]]
        assert bar["category"] == kind and bar["color"] == timeline_figures.TIMELINE_COLORS[kind]
        assert (" · CPU OP · " in bar["row"]) == (kind == "compute")
        assert bar["end"] <= (end - start) / 1000 + 1e-6
    assert sum(" · CPU OP · " in bar["row"] for bar in drawn) == \
        sum(1 for (name, ts), kind in raw_lane_kinds(trace).items() if kind == "compute" and start <= ts < end)
    screenshot(driver, "dash_timeline_cpu", tmp_path_factory.mktemp("shots"))


def test_a_data_bound_step_shows_its_data_wait(page, tmp_path_factory):
    """The data-bound run: the page opens on its first steady step (2: step 1 compiles), and its step 5 is the
    recorded 139 ms step, whose top lane draws the data wait before the step's first op in the data colour.
    Screenshot: docs/img/dash_timeline_data_wait.png with PERFKIT_SCREENSHOT_DIR=docs/img."""
    driver, url = page
    driver.get(f"{url}/timeline?run=4")
    wait_for(driver, lambda d: title(d).startswith("step 2 · "), "the first steady step")
    steps = {s["step"]: s for s in json.loads((DATA_BOUND / "perfkit_run.json").read_text())["steps"]}
    length_ms = (steps[5]["end_ns"] - steps[5]["begin_ns"]) / 1e6
    driver.get(f"{url}/timeline?run=4&step=5")
    wait_for(driver, lambda d: title(d).startswith("step 5 · "), "step 5")
    drawn = wait_for(driver, lambda d: [bar for bar in drawn_bars(d) if " · step ledger · " in bar["row"]] or None,
                     "the step ledger's lane")
    wait = next(bar for bar in drawn if bar["name"].startswith("data wait"))
    assert wait["category"] == "data" and wait["color"] == timeline_figures.TIMELINE_COLORS["data"]
    assert max(bar["end"] for bar in drawn) == pytest.approx(length_ms, abs=1e-3)
    assert wait["end"] > 0.9 * length_ms
    screenshot(driver, "dash_timeline_data_wait", tmp_path_factory.mktemp("shots"))

"""The dashboard and the report in headless Chromium: pages render their charts and show summary's numbers.

One app instance serves every test in this module on a free loopback port. Screenshots of each page go to
$PERFKIT_SCREENSHOT_DIR when set (the README's images: PERFKIT_SCREENSHOT_DIR=docs), else to a temp folder.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, REPO

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver")
                                               else None)
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("headless browser tests need chromium and chromedriver (apt-get install chromium chromium-driver)",
                allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from test_figures import make_run  # noqa: E402
from werkzeug.serving import WSGIRequestHandler, make_server  # noqa: E402

import perfkit
from perfkit.analysis.measures import step_means  # noqa: E402
from perfkit.render.report import write_report  # noqa: E402
from perfkit.views import ids as panel_ids  # noqa: E402
from perfkit.views import numbers  # noqa: E402
from perfkit.views.compare import judge, verdict_headline, verdict_lines  # noqa: E402
from perfkit.views.figures import style  # noqa: E402
from perfkit.views.format import ms  # noqa: E402
from perfkit.views.panel import FIGURE  # noqa: E402
from perfkit.views.panels import REPORT, panels, panels_on, shown  # noqa: E402
from perfkit.views.summary import summarize  # noqa: E402

# Runs the dashboard is started over, in this order. The seed's three profiles make the compare page; the
# fixtures cover queues + pipeline (legacy Ascend), two ranks (new layout) and a CPU run. Each must load (a real
# run that stops loading is a failure, never a skip); the crafted run (queues, pipeline, findings; built in
# test_figures) adds what no real file shows.
FOLDERS = {
    "seed_1_feed_fp32": REPO / "tests/runs/seed_1_feed_fp32",
    "seed_2_sink_fp32": REPO / "tests/runs/seed_2_sink_fp32",
    "seed_3_sink_o3": REPO / "tests/runs/seed_3_sink_o3",
    "legacy_run_2": FIXTURE_RUNS["legacy_run_2"],
    "new_level1": FIXTURE_RUNS["new_level1"],
    "cpu_2_10": FIXTURE_RUNS["cpu_2_10"],
    "cpu_ranks2": REPO / "sample_runs/cpu_ranks2",
    "minddata_4ranks": REPO / "tests/runs/mindinsight_minddata_4ranks",
}
# The real runs the README's screenshots show, best first: the seed's queues and pipeline if the legacy reader
# loads them, else the new-layout run.
OVERVIEW_SHOWCASE = "legacy_run_2"
OPERATORS_SHOWCASE = "legacy_run_2"
COMPARE_SHOWCASE = ("seed_1_feed_fp32", "seed_2_sink_fp32", "seed_3_sink_o3")
WINDOW = (1440, 1000)
TIMEOUT_S = 20
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--no-first-run",
                  "--disable-sync", "--hide-scrollbars", "--force-device-scale-factor=1")


class QuietHandler(WSGIRequestHandler):
    def log_request(self, *args, **kwargs):  # one line per request would bury the test output
        pass


def start_server(app):
    """Serve a Dash app's Flask server on a free loopback port in a thread; returns (base_url, stop)."""
    server = make_server("127.0.0.1", 0, app.server, threaded=True, request_handler=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop():
        server.shutdown()
        thread.join(timeout=10)
    return f"http://127.0.0.1:{server.server_port}", stop


def make_driver(profile_dir: Path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile_dir}")
    options.add_argument(f"--window-size={WINDOW[0]},{WINDOW[1]}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def screenshot(driver, name: str, fallback_dir: Path) -> Path:
    """A full-page PNG: the window is stretched to the page height for the shot."""
    folder = Path(os.environ.get("PERFKIT_SCREENSHOT_DIR") or fallback_dir)
    folder.mkdir(parents=True, exist_ok=True)
    # the plot toolbars show while the (virtual) pointer rests on a plot; they are noise in a picture
    driver.execute_script("document.querySelectorAll('.modebar-container').forEach(e => e.remove())")
    # the window's height includes the browser's own frame: add it, so the page's last card is not cut off
    height, frame = driver.execute_script("return [document.documentElement.scrollHeight, "
                                          "window.outerHeight - window.innerHeight]")
    driver.set_window_size(WINDOW[0], max(WINDOW[1], height + frame))
    WebDriverWait(driver, TIMEOUT_S).until(
        lambda d: d.execute_script("return window.innerHeight >= document.documentElement.scrollHeight"))
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(*WINDOW)
    return path


def wait_for(driver, predicate, what: str):
    return WebDriverWait(driver, TIMEOUT_S).until(lambda d: predicate(d), message=f"timed out waiting for {what}")


def plots_rendered(driver, count: int) -> bool:
    """At least `count` plotly graphs drawn, each with its SVG and at least one trace or annotation."""
    return driver.execute_script(
        "const plots = [...document.querySelectorAll('.js-plotly-plot')];"
        "const drawn = plots.filter(p => p.querySelector('svg.main-svg') &&"
        "  p.querySelectorAll('.trace, .annotation').length > 0);"
        "return drawn.length >= arguments[0];", count)


def text_of(driver, element_id: str) -> str:
    return driver.find_element(By.ID, element_id).text


def svg_texts(driver, graph_id: str) -> str:
    return " ".join(el.get_attribute("textContent") for el in
                    driver.find_elements(By.CSS_SELECTOR, f"#{graph_id} svg text"))


class Loaded:
    """The runs the app serves, by label."""

    def __init__(self):
        self.labels: list[str] = []
        self.runs: list = []
        for label, folder in FOLDERS.items():
            self.add(label, perfkit.load(folder))
        self.add("crafted", make_run("crafted", ranks=(0, 1), slow_factor=1.3, steps=6,
                                     queue_sizes=[0, 0, 1, 3, 8, 8, 2, 0, 5, 8] * 20))

    def add(self, label, run):
        self.labels.append(label)
        self.runs.append(run)

    def index(self, label: str) -> int:
        return self.labels.index(label)

    def run(self, label: str):
        return self.runs[self.index(label)]


@pytest.fixture(scope="module")
def loaded():
    return Loaded()


@pytest.fixture(scope="module")
def base_url(loaded):
    from perfkit.dashboards import create_app
    url, stop = start_server(create_app(loaded.runs))
    yield url
    stop()


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    driver = make_driver(tmp_path_factory.mktemp("chromium-profile"))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


def open_page(driver, url: str, plots: int):
    driver.get(url)
    wait_for(driver, lambda d: plots_rendered(d, plots), f"{plots} rendered plots at {url}")


def cast_share_pct(summary) -> float:
    """Cast's share of op time in %, from the summary contract's op_types."""
    return 100 * sum(op["share"] for op in summary["op_types"] if op["type"].startswith("Cast"))


def drawn_figures(run, listed) -> int:
    """How many of these panels are figures with data for this run (the others say in words why not)."""
    return sum(panel.kind == FIGURE and style.empty_message(panel.content(run)) is None
               for panel in listed)


def panels_with_data(run) -> int:
    """Overview charts this run has data for, from the panel list."""
    return drawn_figures(run, panels_on("/"))


def grid_cells(driver, grid_id: str, column: str):
    """The displayed cells of one column of an AG Grid, top row first."""
    cells = driver.find_elements(By.CSS_SELECTOR, f"#{grid_id} .ag-center-cols-container .ag-row")
    rows = sorted(cells, key=lambda row: int(row.get_attribute("row-index")))
    return [row.find_element(By.CSS_SELECTOR, f".ag-cell[col-id='{column}']") for row in rows]


@pytest.mark.parametrize("label", ["legacy_run_2", "new_level1", "cpu_2_10", "cpu_ranks2", "seed_2_sink_fp32",
                                   "crafted"])
def test_overview_shows_summary_numbers(driver, base_url, loaded, shots, label):
    index, run = loaded.index(label), loaded.run(label)
    summary = summarize(run)
    open_page(driver, f"{base_url}/?run={index}", plots=panels_with_data(run))
    if summary["op_types"] and numbers.amp_families_apply(run):
        expected_cast = f"{cast_share_pct(summary):.1f} %"
        assert text_of(driver, "kpi-cast-share") == expected_cast
        assert f"Cast {expected_cast}" in svg_texts(driver, panel_ids.OP_SHARES)
    elif summary["op_types"]:  # CPU: no float16 kernels, so no Cast story to tell
        assert not driver.find_elements(By.ID, "kpi-cast-share")
        assert "Cast + BatchNorm" not in svg_texts(driver, panel_ids.OP_SHARES)
    for which, queue in (("host", panel_ids.HOST_QUEUE), ("device", panel_ids.DEVICE_QUEUE)):
        stats = summary["queues"][which]
        if stats:
            expected_empty = f"{stats['empty_pct']:.1f} %"
            assert text_of(driver, f"kpi-{which}-empty") == expected_empty
            assert f"empty {expected_empty}" in svg_texts(driver, queue)
        else:
            assert text_of(driver, f"kpi-{which}-empty") == "no data"
            assert text_of(driver, queue).startswith(f"no {which} queue data")
            assert not driver.find_elements(By.CSS_SELECTOR, f"#{queue} .main-svg")
    if summary["steps"]:
        expected_step = f"{summary['steps']['total_ms']:,.3f} ms"
        assert text_of(driver, "kpi-mean-step") == expected_step
        assert f"mean step {expected_step}" in svg_texts(driver, panel_ids.STEPS)
        bars = driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.STEPS} .trace.bars .point")
        parts = sum(bool(run.steps[col].notna().any()) for col in ("interval_ms", "fwd_bwd_ms", "tail_ms"))
        assert len(bars) == parts * run.steps["step"].nunique()
    communication = numbers.communication(run)
    if communication is not None and communication.source == "comm_ops":  # measured from collective ops only
        assert text_of(driver, "kpi-communication").startswith(f"{communication.mean_ms:,.3f} ms")
    if label == OVERVIEW_SHOWCASE:
        screenshot(driver, "dash_overview", shots)
    if label == "cpu_ranks2":  # a CPU run: no Cast card, communication as a card
        screenshot(driver, "dash_overview_cpu_ranks2", shots)


def test_pipeline_shows_every_rank_s_queues(driver, base_url, loaded, shots):
    """MindInsight's 4 real minddata_pipeline_raw files: rank 2's queues are 94 % full on every op, rank 3's 16 %.
    The pipeline figure draws a square per op and rank with that rank's usage from its file (read here with csv),
    each rank's mean under its name; one rank's values for all (the old single table) fails here."""
    import csv
    index = loaded.index("minddata_4ranks")
    open_page(driver, f"{base_url}/?run={index}", plots=1)
    expected = {}
    for rank in range(4):
        with open(FOLDERS["minddata_4ranks"] / f"minddata_pipeline_raw_{rank}.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                if row["output_queue_size"]:  # the root Batch has no output queue
                    expected[(f"rank {rank}", row["op_type"], row["op_id"])] = (
                        f"{100 * float(row['output_queue_usage_rate']):.1f} %")
    drawn = driver.execute_script(
        f"const plot = document.querySelector('#{panel_ids.PIPELINE} .js-plotly-plot');"
        "return plot.data.flatMap(t => t.x.map((x, i) => [x, t.y[i], t.text[i]]));")
    shown = {(x, label.split(" ")[0], label.split("(op ")[1].split(")")[0]): text for x, label, text in drawn
             if text != "no queue"}
    assert shown == expected
    assert {text for (rank, _, _), text in shown.items() if rank == "rank 2"} == {"93.8 %"}
    assert {text for (rank, _, _), text in shown.items() if rank == "rank 3"} == {"15.6 %"}
    texts = svg_texts(driver, panel_ids.PIPELINE)
    assert "Data pipeline per rank" in texts and "mean 93.8 %" in texts and "mean 15.6 %" in texts
    screenshot(driver, "dash_pipeline_ranks", shots)


def test_device_queue_absent_on_cpu_is_said_in_words(driver, base_url, loaded):
    index, run = loaded.index("cpu_2_10"), loaded.run("cpu_2_10")
    assert not len(run.device_queue)
    open_page(driver, f"{base_url}/?run={index}", plots=panels_with_data(run))
    assert text_of(driver, panel_ids.DEVICE_QUEUE).startswith("no device queue data: CPU")


def test_operators_table_filters(driver, base_url, loaded, shots):
    label = OPERATORS_SHOWCASE
    index, run = loaded.index(label), loaded.run(label)
    driver.get(f"{base_url}/operators?run={index}")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_TABLE} .ag-cell"), "op instance table")
    types = summarize(run)["op_types"]
    assert grid_cells(driver, panel_ids.OP_TYPES_TABLE, "type")[0].text == types[0]["type"]  # largest first, as summary
    assert grid_cells(driver, panel_ids.OP_TYPES_TABLE, "total_ms")[0].text == f"{types[0]['total_ms']:,.3f}"
    top = run.ops.sort_values("total_ms", ascending=False).iloc[0]
    name = grid_cells(driver, panel_ids.OP_TABLE, "name")[0]
    shown = name.text.strip("\u2066\u2069")  # the name is isolated as left-to-right text in a right-to-left cell
    assert shown.endswith(str(top["name"])[-12:])  # a long name keeps its tail, in its own order
    if str(top["input_shapes"]) not in ("", "<NA>", "nan"):
        assert grid_cells(driver, panel_ids.OP_TABLE, "input_shapes")[0].text.strip()
    assert text_of(driver, "op-count").startswith(f"{len(run.ops):,} matching")
    screenshot(driver, "dash_operators", shots)

    needle = str(summarize(run)["op_types"][0]["type"])[:4].lower()
    driver.find_element(By.ID, "op-search").send_keys(needle, Keys.ENTER)
    expected = run.ops["name"].str.lower().str.contains(needle, regex=False) | \
        run.ops["type"].str.lower().str.contains(needle, regex=False)
    wait_for(driver, lambda d: text_of(d, "op-count").startswith(f"{int(expected.sum()):,} matching"),
             "search to filter the op table")
    for row in driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_TABLE} .ag-center-cols-container .ag-row"):
        cells = {c.get_attribute("col-id"): c.get_attribute("textContent").lower()
                 for c in row.find_elements(By.CSS_SELECTOR, ".ag-cell")}
        assert needle in cells["name"] or needle in cells["type"]

    driver.find_element(By.CSS_SELECTOR, "#op-passes input[value='backward']").click()  # untick backward
    kept = expected & (run.ops["pass"] != "backward")
    wait_for(driver, lambda d: text_of(d, "op-count").startswith(f"{int(kept.sum()):,} matching"),
             "backward instances to leave the table")
    assert all(c.text != "backward" for c in
               driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_TABLE} .ag-cell[col-id='pass']"))


def overflowing(driver, cells) -> list[str]:
    """The texts of the cells whose text is cut (wider than the cell: drawn with an ellipsis)."""
    return [cell.get_attribute("textContent") for cell in cells
            if driver.execute_script("const v = arguments[0].querySelector('.ag-cell-value') || arguments[0];"
                                     "return v.scrollWidth > v.clientWidth + 1;", cell)]


def test_op_instance_names_are_told_apart_and_types_shown_whole(driver, base_url, loaded, shots):
    """cpu_2_10's ResNet-50: dozens of Conv2DBackpropFilter-op0 differ only in the cells they sit in. Each shown
    name is those cells as a dotted path and the op, the whole name on hover; no two read the same."""
    index, run = loaded.index("cpu_2_10"), loaded.run("cpu_2_10")
    driver.get(f"{base_url}/operators?run={index}")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_TABLE} .ag-cell"), "op instance table")
    from perfkit.analysis.measures import steady_ops
    top = steady_ops(run).sort_values("total_ms", ascending=False).head(20)  # the table's: the steady steps'
    names = grid_cells(driver, panel_ids.OP_TABLE, "name")
    shown = [cell.get_attribute("textContent").strip("\u2066\u2069") for cell in names]
    assert len(shown) == 20 and len(set(shown)) == 20
    assert len({name.rsplit("/", 1)[-1] for name in top["name"]}) < 20  # the op parts alone repeat
    for text, full in zip(shown, top["name"]):
        cells, op = text.rsplit("/", 1)
        assert full.endswith("/" + op)
        scopes = [scope.split("-", 1)[0] for scope in full.split("/")[:-1]]
        position = 0
        for cell in cells.split("."):  # each cell, in order, is the instance name of one of the full name's scopes
            position = scopes.index(cell, position) + 1
    assert not overflowing(driver, names)
    ActionChains(driver).move_to_element(names[0]).perform()
    tooltip = wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".ag-tooltip"), "the name's tooltip")
    assert tooltip[0].text == top["name"].iloc[0]
    types = grid_cells(driver, panel_ids.OP_TYPES_TABLE, "type") + grid_cells(driver, panel_ids.OP_TABLE, "type")
    assert "Conv2DBackpropFilter" in {cell.text for cell in types}
    assert not overflowing(driver, types)
    screenshot(driver, "dash_operators_cpu", shots)


def test_the_largest_kernel_s_type_is_in_the_op_types_table(driver, base_url, loaded, shots):
    """msinsight_level1: hcom_allReduce (HCCL, left out of op_statistic.csv) is the largest type and holds the
    largest kernel (79 ms); its type reads as HCCL means it, not `hcom_allReduce_`. Numbers from the CSV."""
    import csv
    index = loaded.index("new_level1")
    hccl = [row for rank in (0, 1) for row in csv.DictReader(open(
        FIXTURE_RUNS["new_level1"] / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"))
        if row["Accelerator Core"] == "HCCL"]
    total_ms = sum(float(row["Duration(us)"]) for row in hccl) / 1000
    driver.get(f"{base_url}/operators?run={index}")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_TYPES_TABLE} .ag-cell"),
             "op types table")
    types = [cell.text for cell in grid_cells(driver, panel_ids.OP_TYPES_TABLE, "type")]
    assert types[0] == "hcom_allReduce" and not any(t.endswith("_") for t in types)
    assert grid_cells(driver, panel_ids.OP_TYPES_TABLE, "total_ms")[0].text == f"{total_ms:,.3f}"
    assert grid_cells(driver, panel_ids.OP_TYPES_TABLE, "count")[0].text == str(len(hccl))
    largest = max(hccl, key=lambda row: float(row["Duration(us)"]))
    assert grid_cells(driver, panel_ids.OP_TABLE, "total_ms")[0].text == f"{float(largest['Duration(us)']) / 1000:,.3f}"
    assert grid_cells(driver, panel_ids.OP_TABLE, "type")[0].text == "hcom_allReduce"
    assert "79.090" == grid_cells(driver, panel_ids.OP_TABLE, "total_ms")[0].text


def test_the_toolbar_covers_no_figure_title(driver, base_url, loaded):
    """Each plot's toolbar, shown while the pointer rests on the plot, against its title: their boxes never meet
    (the queue-emptiness title in its half-width card was under it)."""
    indices = ",".join(str(loaded.index(label)) for label in COMPARE_SHOWCASE)
    open_page(driver, f"{base_url}/compare?runs={indices}", plots=4)
    plots = driver.find_elements(By.CSS_SELECTOR, "#compare-body .js-plotly-plot")
    titled = 0
    for plot in plots:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", plot)
        ActionChains(driver).move_to_element(plot).perform()
        boxes = wait_for(driver, lambda d: d.execute_script(
            "const p = arguments[0], bar = p.querySelector('.modebar'), title = p.querySelector('.gtitle');"
            "if (!bar || getComputedStyle(bar).opacity === '0') return null;"
            "const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };"
            "return [box(bar), title ? box(title) : null];", plot), "the toolbar on hover")
        bar, title = boxes
        if title is None:
            continue
        titled += 1
        apart = title[2] <= bar[0] or bar[2] <= title[0] or title[3] <= bar[1] or bar[3] <= title[1]
        assert apart, (driver.execute_script("return arguments[0].querySelector('.gtitle').textContent", plot), boxes)
    assert titled >= 3  # the spread, split and queue-emptiness figures at least


def test_compare_shows_speedup(driver, base_url, loaded, shots):
    labels = COMPARE_SHOWCASE
    indices = [loaded.index(label) for label in labels]
    open_page(driver, f"{base_url}/compare?runs={','.join(map(str, indices))}", plots=2)
    base_total = step_means(loaded.run(labels[0]).steps)["total_ms"]
    assert text_of(driver, "speedup-0") == "baseline"
    for position, label in enumerate(labels):
        expected = base_total / step_means(loaded.run(label).steps)["total_ms"]
        if position:  # the verdict block of `perfkit compare` under each later run's speedup
            judged = judge([loaded.run(labels[0])], [loaded.run(label)])
            # the card's value is the verdict (its speedup only where the verdict calls it), never a bare ratio
            assert text_of(driver, f"speedup-{position}") == verdict_headline(judged)
            assert f"speedup {expected:.2f}x" in text_of(driver, f"verdict-{position}")
            for name, text in verdict_lines(judged):
                assert f"{name} {text}" in text_of(driver, f"verdict-{position}")
        assert ms(step_means(loaded.run(label).steps)["total_ms"]) in svg_texts(driver, panel_ids.COMPARE_STEPS)
    screenshot(driver, "dash_compare", shots)


@pytest.mark.parametrize("label", ["new_level1", "cpu_ranks2", "crafted"])
def test_ranks_shows_every_rank_and_marks_slow_ones(driver, base_url, loaded, shots, label):
    index, run = loaded.index(label), loaded.run(label)
    summary = summarize(run)
    open_page(driver, f"{base_url}/ranks?run={index}", plots=1)
    texts = svg_texts(driver, panel_ids.RANKS)
    for entry in summary["per_rank"]:
        rank, total = entry["rank"], entry["steps"]["total_ms"]
        assert (f"rank {rank} (slow)" in texts) is (rank in summary["slow_ranks"])  # summary's slow ranks
        assert f"rank {rank}" in texts and f"{total:,.3f} ms" in texts
    slow_cells = [cell.text for cell in grid_cells(driver, panel_ids.RANK_TABLE, "slow")]
    assert slow_cells == ["yes" if entry["rank"] in summary["slow_ranks"] else "no" for entry in summary["per_rank"]]
    if label == "cpu_ranks2":  # the ledger's parts, communication named as the bound names it
        labels = perfkit.analysis.ledger.bound(run).labels
        assert labels["communication"] in texts and labels["compute"] in texts
        screenshot(driver, "dash_ranks", shots)


def test_unknown_run_is_an_empty_state(driver, base_url):
    for query in ("?run=999", "?run=../../etc/passwd"):
        driver.get(f"{base_url}/ranks{query}")
        wait_for(driver, lambda d: "unknown run" in d.find_element(By.ID, "page").text, "unknown-run message")


def test_console_has_no_errors(driver, base_url, loaded):
    driver.get_log("browser")  # drop what earlier tests left
    crafted = loaded.index("crafted")
    run = loaded.run("crafted")
    for page, plots in ((f"/?run={crafted}", panels_with_data(run)), (f"/operators?run={crafted}", 0),
                        ("/compare", 2), (f"/ranks?run={crafted}", drawn_figures(run, panels_on("/ranks")))):
        driver.get(base_url + page)
        if plots:
            wait_for(driver, lambda d: plots_rendered(d, plots), f"plots at {page}")
        else:
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_TABLE} .ag-cell"), "op table")
    errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == []


def test_report_opens_offline(driver, loaded, tmp_path):
    labels = COMPARE_SHOWCASE
    chosen = [loaded.run(label) for label in labels[:2]] + [loaded.run("crafted")]
    path = tmp_path / "report.html"
    write_report(chosen, path)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                               "downloadThroughput": -1, "uploadThroughput": -1})
    try:
        driver.get_log("browser")
        driver.get(path.as_uri())
        figures_expected = 3 + sum(item.panel.kind == FIGURE and style.empty_message(item.content) is None
                                   for run in chosen for row in shown(panels(), run, REPORT) for item in row)
        wait_for(driver, lambda d: plots_rendered(d, figures_expected), f"{figures_expected} report figures")
        speedup = step_means(chosen[0].steps)["total_ms"] / step_means(chosen[1].steps)["total_ms"]
        assert f"{speedup:.2f}x" in driver.find_element(By.ID, "compare").text
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
                                                                   "downloadThroughput": -1, "uploadThroughput": -1})

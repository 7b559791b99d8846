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
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from werkzeug.serving import WSGIRequestHandler, make_server  # noqa: E402

import perfkit  # noqa: E402
from perfkit.analysis import step_means, summarize  # noqa: E402
from perfkit.report import write_report  # noqa: E402

# Runs the dashboard is started over, in this order: (label, path). The seed's three profiles make the compare
# page; the fixtures cover queues + pipeline (legacy Ascend), two ranks (new layout) and a CPU run.
RUNS = (
    ("seed_1_feed_fp32", REPO / "tests/runs/seed_1_feed_fp32"),
    ("seed_2_sink_fp32", REPO / "tests/runs/seed_2_sink_fp32"),
    ("seed_3_sink_o3", REPO / "tests/runs/seed_3_sink_o3"),
    ("legacy_run_2", FIXTURE_RUNS["legacy_run_2"]),
    ("new_level1", FIXTURE_RUNS["new_level1"]),
    ("cpu_2_10", FIXTURE_RUNS["cpu_2_10"]),
)
INDEX = {label: i for i, (label, _) in enumerate(RUNS)}
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
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WINDOW[0], max(WINDOW[1], height))
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


@pytest.fixture(scope="module")
def runs():
    return [perfkit.load(path) for _, path in RUNS]


@pytest.fixture(scope="module")
def base_url(runs):
    from dashboards import create_app
    url, stop = start_server(create_app(runs))
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


def test_overview_shows_summary_numbers(driver, base_url, runs, shots):
    index = INDEX["legacy_run_2"]
    summary = summarize(runs[index])
    # steps, op types, host queue, device queue, pipeline: all present in this Ascend sink-mode run
    open_page(driver, f"{base_url}/?run={index}", plots=5)
    expected_cast = f"{cast_share_pct(summary):.1f} %"
    assert text_of(driver, "kpi-cast-share") == expected_cast
    assert f"Cast {expected_cast}" in svg_texts(driver, "fig-op-shares")
    for which in ("host", "device"):
        expected_empty = f"{summary['queues'][which]['empty_pct']:.1f} %"
        assert text_of(driver, f"kpi-{which}-empty") == expected_empty
        assert f"empty {expected_empty}" in svg_texts(driver, f"fig-{which}-queue")
    expected_step = f"{summary['steps']['total_ms']:,.2f} ms"
    assert text_of(driver, "kpi-mean-step") == expected_step
    assert f"mean step {expected_step}" in svg_texts(driver, "fig-steps")
    bars = driver.find_elements(By.CSS_SELECTOR, "#fig-steps .trace.bars .point")
    assert len(bars) == 3 * summary["steps"]["count"]  # interval, fwd+bwd, tail per step
    screenshot(driver, "dash_overview", shots)


def test_overview_empty_states_are_words(driver, base_url, runs):
    index = INDEX["cpu_2_10"]
    assert not len(runs[index].device_queue)
    open_page(driver, f"{base_url}/?run={index}", plots=2)
    message = text_of(driver, "fig-device-queue")
    assert message.startswith("no device queue data")
    assert not driver.find_elements(By.CSS_SELECTOR, "#fig-device-queue .main-svg")


def test_operators_table_filters(driver, base_url, runs, shots):
    index = INDEX["legacy_run_2"]
    run = runs[index]
    driver.get(f"{base_url}/operators?run={index}")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#op-table td"), "op instance table")
    type_cells = driver.find_elements(By.CSS_SELECTOR, "#op-types-table td[data-dash-column='type']")
    assert type_cells[0].text == summarize(run)["op_types"][0]["type"]  # largest first, as summary orders it
    count = text_of(driver, "op-count")
    assert count.startswith(f"{len(run.ops):,} matching")
    screenshot(driver, "dash_operators", shots)

    search = driver.find_element(By.ID, "op-search")
    search.send_keys("cast", Keys.ENTER)
    expected = run.ops["name"].str.lower().str.contains("cast") | run.ops["type"].str.lower().str.contains("cast")
    wait_for(driver, lambda d: text_of(d, "op-count").startswith(f"{int(expected.sum()):,} matching"),
             "search to filter the op table")
    for cell in driver.find_elements(By.CSS_SELECTOR, "#op-table td[data-dash-column='name']"):
        assert "cast" in cell.text.lower() or "cast" in cell.find_element(
            By.XPATH, "..").find_element(By.CSS_SELECTOR, "td[data-dash-column='type']").text.lower()

    backward = driver.find_element(By.CSS_SELECTOR, "#op-passes input[value='backward']")
    backward.click()  # untick: forward and other remain
    wait_for(driver, lambda d: all(c.text != "backward" for c in
                                   d.find_elements(By.CSS_SELECTOR, "#op-table td[data-dash-column='pass']")),
             "backward instances to leave the table")


def test_compare_shows_speedup(driver, base_url, runs, shots):
    first, second, third = INDEX["seed_1_feed_fp32"], INDEX["seed_2_sink_fp32"], INDEX["seed_3_sink_o3"]
    open_page(driver, f"{base_url}/compare?runs={first},{second},{third}", plots=3)
    base_total = step_means(runs[first].steps)["total_ms"]
    for position, index in enumerate((first, second, third)):
        expected = base_total / step_means(runs[index].steps)["total_ms"]
        assert text_of(driver, f"speedup-{position}") == f"{expected:.2f}x"
        assert f"{expected:.2f}x" in svg_texts(driver, "fig-compare-steps")
    screenshot(driver, "dash_compare", shots)


def test_ranks_marks_every_rank(driver, base_url, runs, shots):
    index = INDEX["new_level1"]
    summary = summarize(runs[index])
    assert len(summary["per_rank"]) == 2
    open_page(driver, f"{base_url}/ranks?run={index}", plots=1)
    labels = svg_texts(driver, "fig-ranks")
    for entry in summary["per_rank"]:
        assert f"rank {entry['rank']}" in labels
        assert f"{entry['steps']['total_ms']:,.2f} ms" in labels
    screenshot(driver, "dash_ranks", shots)


def test_unknown_run_is_an_empty_state(driver, base_url):
    driver.get(f"{base_url}/?run=999")
    wait_for(driver, lambda d: "unknown run" in d.find_element(By.ID, "page").text, "unknown-run message")
    driver.get(f"{base_url}/ranks?run=../../etc")
    wait_for(driver, lambda d: "unknown run" in d.find_element(By.ID, "page").text, "unknown-run message")


def test_console_has_no_errors(driver, base_url, runs):
    driver.get_log("browser")  # drop what earlier tests left
    for page, plots in (("/", 4), ("/operators", 0), ("/compare", 3), (f"/ranks?run={INDEX['new_level1']}", 1)):
        driver.get(base_url + page)
        if plots:
            wait_for(driver, lambda d: plots_rendered(d, plots), f"plots at {page}")
        else:
            wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#op-table td"), "op table")
    errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == []


def test_report_opens_offline(driver, runs, tmp_path):
    chosen = [runs[INDEX["seed_1_feed_fp32"]], runs[INDEX["seed_3_sink_o3"]]]
    path = tmp_path / "report.html"
    write_report(chosen, path)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, "latency": 0,
                                                               "downloadThroughput": -1, "uploadThroughput": -1})
    try:
        driver.get_log("browser")
        driver.get(path.as_uri())
        # compare: 3 figures; each run: steps, op types, host queue, pipeline (sink runs also the device queue)
        wait_for(driver, lambda d: plots_rendered(d, 3 + 2 * 4), "report figures")
        speedup = step_means(chosen[0].steps)["total_ms"] / step_means(chosen[1].steps)["total_ms"]
        assert f"{speedup:.2f}x" in driver.find_element(By.ID, "compare").text
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
    finally:
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": False, "latency": 0,
                                                                   "downloadThroughput": -1, "uploadThroughput": -1})

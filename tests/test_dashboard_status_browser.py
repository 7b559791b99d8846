"""The dashboard in headless Chromium: the Overview's run panel (status and warnings) and the Compare page over two
series of repeats (one card per series, the verdict as its value); the Ranks link only for runs of several ranks.

Screenshots go to $PERFKIT_SCREENSHOT_DIR when set (docs/dashboard.md's: PERFKIT_SCREENSHOT_DIR=docs/img), else to a
temp folder. Real runs: tests/runs/cpu_2_10_ctrlc, sample_runs/cpu_ranks2, tests/runs/cpu_2_10_speedpair."""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from selenium.webdriver.common.by import By
from test_dashboard_browser import driver, open_page, screenshot, start_server, text_of, wait_for  # noqa: F401

import perfkit
from perfkit.views import ids as panel_ids
from perfkit.views.compare import compare, verdict_headline

pytestmark = pytest.mark.browser

INTERRUPTED = REPO / "tests/runs/cpu_2_10_ctrlc"
RANKS2 = REPO / "sample_runs/cpu_ranks2"
# the baseline series first: 4 hidden layers, then the 2-layer series judged against it
SERIES = [REPO / f"tests/runs/cpu_2_10_speedpair/{side}/repeat_{n}"
          for side in ("layers4", "layers2") for n in (1, 2, 3)]


@pytest.fixture(scope="module")
def runs():
    return [perfkit.load(folder) for folder in (INTERRUPTED, RANKS2, *SERIES)]


@pytest.fixture(scope="module")
def base_url(runs):
    from perfkit.dashboards import create_app
    url, stop = start_server(create_app(runs))
    yield url
    stop()


def ranks_link_shown(driver) -> bool:
    return driver.find_element(By.ID, "nav-ranks").is_displayed()


def test_the_overview_shows_the_runs_status_and_warnings_first(driver, base_url, runs, tmp_path):
    recorded = json.loads((INTERRUPTED / "perfkit_run.json").read_text())
    open_page(driver, f"{base_url}/?run=0", plots=1)
    panel = text_of(driver, panel_ids.RUN_STATUS)
    assert f"status {recorded['status']}" in panel and f"mindspore {recorded['mindspore_version']}" in panel
    for warning in perfkit.summarize(runs[0])["warnings"]:
        assert warning in panel
    status = driver.find_element(By.CSS_SELECTOR, f"#{panel_ids.RUN_STATUS} .status-bad")
    assert status.text == "interrupted"
    # the run panel is the page's first card, above the headline cards
    first = driver.find_element(By.CSS_SELECTOR, "main .card")
    assert first.get_attribute("id") == panel_ids.RUN_STATUS
    wait_for(driver, lambda d: not ranks_link_shown(d), "the Ranks link hidden for a single-rank run")
    screenshot(driver, "dash_overview_interrupted", tmp_path)
    open_page(driver, f"{base_url}/?run=1", plots=1)
    wait_for(driver, ranks_link_shown, "the Ranks link shown for a 2-rank run")


def test_compare_over_two_series_of_repeats_shows_one_verdict_per_series(driver, base_url, runs, tmp_path):
    open_page(driver, f"{base_url}/compare?runs={','.join(str(i) for i in range(2, 8))}", plots=2)
    wait_for(driver, lambda d: d.find_elements(By.ID, "speedup-1"), "the second series' card")
    assert not driver.find_elements(By.ID, "speedup-2")  # two series, not six runs
    judged = compare(runs[2], runs[5], runs[3:5], runs[6:8])  # perfkit compare layers4 layers2
    assert judged["verdict"]["basis"] == "run means" and (judged["verdict"]["n_a"], judged["verdict"]["n_b"]) == (3, 3)
    assert text_of(driver, "speedup-0") == "baseline"
    assert text_of(driver, "speedup-1") == verdict_headline(judged)
    assert f"speedup {judged['speedup']:.2f}x" in text_of(driver, "verdict-1")
    assert "run means, 3 vs 3 runs" in text_of(driver, "verdict-1")
    labels = driver.find_element(By.ID, panel_ids.SPEEDUPS).text.lower()  # the labels are shown in capitals
    assert "layers4 (3 repeats)" in labels and "layers2 (3 repeats)" in labels
    screenshot(driver, "dash_compare_repeats", tmp_path)

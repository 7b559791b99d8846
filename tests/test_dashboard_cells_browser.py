"""The Cells page in a real browser (headless Chromium, as tests/test_dashboard_browser.py): the flame graph
draws the run's Cells, a click zooms into one, the table lists them sortable; a screenshot for the README."""

from __future__ import annotations

import pytest
from conftest import REPO
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from test_dashboard_browser import driver, grid_cells, open_page, screenshot, start_server, svg_texts, wait_for  # noqa: F401

import perfkit
from perfkit.views import ids as panel_ids

SAMPLE = REPO / "sample_runs" / "cpu_default"


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def base_url():
    from perfkit.dashboards import create_app
    url, stop = start_server(create_app([perfkit.load(SAMPLE)]))
    yield url
    stop()


def x_range(driver) -> list[float]:
    return driver.execute_script(f"return document.querySelector('#{panel_ids.CELLS} .js-plotly-plot')"
                                 "._fullLayout.xaxis.range")


def test_cells_page_draws_the_tree_and_zooms_into_a_cell(driver, base_url, shots):
    tree = perfkit.cells(perfkit.load(SAMPLE))
    open_page(driver, f"{base_url}/cells?run=0", plots=1)
    texts = svg_texts(driver, panel_ids.CELLS)
    for label in ("layer1", "layer2", "layer3", "layer4", "optimizer"):
        assert label in texts
    cells = [cell.text for cell in grid_cells(driver, panel_ids.CELLS_TABLE, "cell")]
    assert cells[:3] == tree.sort_values("total_ms", ascending=False)["label"].head(3).tolist()
    screenshot(driver, "dash_cells", shots)
    whole = x_range(driver)
    layer4 = tree.set_index("label").loc["layer4"]
    label = next(text for text in driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.CELLS} svg text")
                 if text.text == "layer4")
    ActionChains(driver).move_to_element(label).click().perform()
    wait_for(driver, lambda d: x_range(d) != whole, "the flame graph to zoom")
    low, high = x_range(driver)
    assert high - low == pytest.approx(layer4["total_ms"], rel=1e-6)


def test_a_finding_links_to_its_cell_zoomed(driver, base_url):
    """The Overview's compute-bound finding names its Cell; its link opens the Cells page zoomed into it."""
    tree = perfkit.cells(perfkit.load(SAMPLE)).set_index("label")
    driver.get_log("browser")  # drop what the other test left
    open_page(driver, f"{base_url}/?run=0", plots=1)
    link = wait_for(driver, lambda d: next((a for a in d.find_elements(By.CSS_SELECTOR, f"#{panel_ids.FINDINGS} a")
                                            if a.text.startswith("layer4 (")), None), "the finding's Cell link")
    link.click()
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{panel_ids.CELLS} .js-plotly-plot"),
             "the Cells page")
    wait_for(driver, lambda d: x_range(d) is not None, "the flame graph")
    low, high = x_range(driver)
    assert high - low == pytest.approx(tree.at["layer4", "total_ms"], rel=1e-6)
    errors = [entry for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]
    assert errors == []

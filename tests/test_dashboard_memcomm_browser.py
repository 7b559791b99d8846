"""The Memory page and the Ranks page's communication panels in headless Chromium, against numbers computed
here from the raw files. Screenshots: docs/dash_memory.png, docs/dash_ranks_communication.png (with
PERFKIT_SCREENSHOT_DIR=docs)."""

from __future__ import annotations

import csv

import pytest
from conftest import FIXTURE_RUNS, REPO

# the module's browser and screenshot folder fixtures are that file's, shared
from test_dashboard_browser import By, driver, open_page, screenshot, shots, start_server, svg_texts, text_of, wait_for  # noqa: F401

import perfkit
from perfkit.analysis.measures import link_bandwidth
from perfkit.views import ids as panel_ids
from perfkit.views.summary import summarize

pytestmark = pytest.mark.browser

RUNS = {"new_level1": FIXTURE_RUNS["new_level1"], "new_2023": FIXTURE_RUNS["new_2023"],
        "cpu_memory": REPO / "tests/runs/cpu_2_10_memory", "cpu_2_10": FIXTURE_RUNS["cpu_2_10"]}
LABELS = list(RUNS)


@pytest.fixture(scope="module")
def runs():
    return {label: perfkit.load(folder) for label, folder in RUNS.items()}


@pytest.fixture(scope="module")
def base_url(runs):
    from perfkit.dashboards import create_app
    url, stop = start_server(create_app([runs[label] for label in LABELS]))
    yield url
    stop()


def test_memory_page_shows_the_peak_per_rank_and_the_top_ops(driver, base_url, runs, shots):
    run = runs["new_level1"]
    open_page(driver, f"{base_url}/memory?run={LABELS.index('new_level1')}", plots=2)
    memory = summarize(run)["memory"]
    assert text_of(driver, f"{panel_ids.MEMORY}-note").startswith(
        f"peak allocated {memory['peak_allocated_mb']:,.1f} MB · peak reserved {memory['peak_reserved_mb']:,.1f} MB")
    legend = svg_texts(driver, panel_ids.MEMORY)
    for rank in (0, 1):
        assert f"allocated (rank {rank})" in legend and f"reserved (rank {rank})" in legend
    assert "PTA+GE allocator" in legend
    # the largest block of operator_memory.csv, read here, is the top bar
    largest = {}
    for rank_folder in ("rank0_ascend_pt", "rank1_ascend_pt"):
        with open(RUNS["new_level1"] / rank_folder / "ASCEND_PROFILER_OUTPUT/operator_memory.csv", newline="") as f:
            for row in csv.DictReader(f):
                largest[row["Name"]] = max(largest.get(row["Name"], 0.0), float(row["Size(KB)"]) / 1024)
    top = min(largest, key=lambda name: (-largest[name], name))  # blocks of equal size: by name
    bars = driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_MEMORY} .trace.bars .point")
    assert len(bars) == min(20, len(largest))
    labels = [el.get_attribute("textContent") for el in
              driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.OP_MEMORY} .yaxislayer-above .ytick text")]
    assert labels[-1] == top  # largest at the top of the horizontal bars
    screenshot(driver, "dash_memory", shots)


def test_memory_page_marks_the_steps_of_a_profile_run(driver, base_url, runs):
    open_page(driver, f"{base_url}/memory?run={LABELS.index('cpu_memory')}", plots=1)
    texts = svg_texts(driver, panel_ids.MEMORY)
    assert "step 1" in texts and "MindSpore allocator" in texts
    assert "step bounds unknown" not in texts
    assert text_of(driver, panel_ids.OP_MEMORY).startswith("no per-operator memory in this run")


def test_memory_page_without_memory_says_why(driver, base_url):
    driver.get(f"{base_url}/memory?run={LABELS.index('cpu_2_10')}")
    wait_for(driver, lambda d: d.find_elements(By.ID, panel_ids.MEMORY), "memory page")
    assert text_of(driver, panel_ids.MEMORY).startswith("no allocator memory records in this run")
    assert not driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.MEMORY} .main-svg")


def test_ranks_page_heat_map_and_op_table(driver, base_url, runs, shots):
    run = runs["new_2023"]
    open_page(driver, f"{base_url}/ranks?run={LABELS.index('new_2023')}", plots=2)
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"#{panel_ids.LINK_HEATMAP} .trace.scatter .point"),
             "heat map cells")
    texts = svg_texts(driver, panel_ids.LINK_HEATMAP)
    links = link_bandwidth(run.comm_links)
    assert len(links) and "LOCAL" not in set(links["link_type"])
    cells = links.groupby(["src", "dst"])[["size_mb", "transit_ms"]].sum()
    assert len(driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.LINK_HEATMAP} .trace.scatter .point")) == len(cells)
    for (src, dst), row in cells.iterrows():  # each (src, dst) cell prints size / time over the run's transfers
        assert f"{row.size_mb / row.transit_ms:.1f}" in texts
        assert f"rank {src}" in texts and f"to {dst}" in texts
    rows = driver.find_elements(By.CSS_SELECTOR, f"#{panel_ids.COMM_OP_TABLE} .ag-center-cols-container .ag-row")
    assert len(rows) == min(15, len(run.comm_ops))  # first page of the table
    first = {c.get_attribute("col-id"): c.get_attribute("textContent").strip("\u2066\u2069")
             for c in next(row for row in rows if row.get_attribute("row-index") == "0").find_elements(
                 By.CSS_SELECTOR, ".ag-cell")}
    longest = run.comm_ops.loc[run.comm_ops["elapse_ms"].idxmax()]
    assert first["name"] == longest["name"] and first["elapse_ms"] == f"{longest['elapse_ms']:,.3f}"
    screenshot(driver, "dash_ranks_communication", shots)

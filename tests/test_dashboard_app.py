"""The Dash app without a browser: callbacks answer unknown runs with words and malformed requests with 400."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_figures import make_run

from perfkit.dashboards import create_app
from perfkit.dashboards.app import is_loopback, run_index
from perfkit.views import ids as panel_ids


@pytest.fixture(scope="module")
def client():
    app = create_app([make_run("v1"), make_run("v2", ranks=(0, 1), slow_factor=1.5)])
    assert app.server.debug is False
    return app.server.test_client()


def update(client, output, outputs, inputs):
    body = {"output": output, "outputs": outputs, "changedPropIds": [],
            "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs]}
    return client.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")


def page(client, pathname, search):
    return update(client, "page.children", {"id": "page", "property": "children"},
                  [("url", "pathname", pathname), ("url", "search", search)])


@pytest.mark.parametrize("search", ["?run=2", "?run=-1", "?run=abc", "?run=../../etc/passwd", "?run=1.5"])
def test_unknown_run_is_an_empty_state(client, search):
    response = page(client, "/", search)
    assert response.status_code == 200
    assert "unknown run: choose one of the 2 loaded runs" in response.get_data(as_text=True)


def test_known_run_renders_its_page(client):
    response = page(client, "/ranks", "?run=1")
    assert response.status_code == 200 and "slow rank: 1 " in response.get_data(as_text=True)


@pytest.mark.parametrize("body", ["not json", json.dumps({}), json.dumps({"output": "page.children"}),
                                  json.dumps({"output": "nope.children", "outputs": {"id": "nope", "property": "x"},
                                              "inputs": [], "changedPropIds": []}),
                                  json.dumps({"output": "page.children", "inputs": [], "changedPropIds": [],
                                              "outputs": {"id": "page", "property": "children"}})])
def test_malformed_callback_request_is_400(client, body):
    response = client.post("/_dash-update-component", data=body, content_type="application/json")
    assert response.status_code == 400
    assert "Traceback" not in response.get_data(as_text=True)


def test_malformed_inputs_to_a_real_callback_are_handled(client):
    response = update(client, "..op-table.rowData...op-count.children..",
                      [{"id": panel_ids.OP_TABLE, "property": "rowData"}, {"id": "op-count", "property": "children"}],
                      [("url", "search", {"run": 0}), ("op-passes", "value", "forward"), ("op-search", "value", [1])])
    # an unreadable search falls back to the first run, a non-list pass filter to every pass
    assert response.status_code == 200 and "10 matching instances" in response.get_data(as_text=True)
    response = update(client, "compare-body.children", {"id": "compare-body", "property": "children"},
                      [("compare-runs", "value", [0, "1", None, 7, 0, {"x": 1}])])
    text = response.get_data(as_text=True)
    # the speedup cards, the first run (v1) the baseline
    assert response.status_code == 200 and '"v1"' in text and '"baseline"' in text and "pick two" not in text


def test_run_index_accepts_only_loaded_indices():
    assert [run_index(v, 2) for v in (0, 1, "1", 2, -1, "x", None, True, 1.0, [0])] == \
        [0, 1, 1, None, None, None, None, None, None, None]


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                            ("0.0.0.0", False), ("10.0.0.2", False), ("example.org", False)])
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_dash_command_serves_on_loopback_with_debug_off(tmp_path):
    """The real command in a child process: it binds 127.0.0.1 only, serves the app, and says debug is off."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    from conftest import FIXTURE_RUNS
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "dash.log").open("w+")
    child = subprocess.Popen([sys.executable, "-m", "perfkit", "dash", str(FIXTURE_RUNS["new_level1"]),
                              "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline, status = time.monotonic() + 60, None
        while time.monotonic() < deadline and status is None:
            try:
                status = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).status
            except OSError:
                assert child.poll() is None, (tmp_path / "dash.log").read_text()
                time.sleep(0.3)
        assert status == 200
        with pytest.raises(OSError):  # not reachable through a non-loopback address of this host
            with socket.create_connection((_non_loopback_address(), port), timeout=2):
                pass
    finally:
        child.terminate()
        child.wait(timeout=10)
    output = (tmp_path / "dash.log").read_text()
    assert "warning" not in output.lower() and "Debug mode: on" not in output
    assert "development server" not in output  # served by waitress, not Flask's own server


def _non_loopback_address() -> str:
    import socket
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent, it only picks the outgoing interface
            address = probe.getsockname()[0]
    except OSError:
        address = "127.0.0.1"
    if address.startswith("127."):
        pytest.skip("this host has no non-loopback IPv4 address")
    return address


@pytest.mark.parametrize("body", ["null", "[]", "1", '"page.children"'])
def test_callback_body_that_is_not_an_object_is_400(client, body):
    response = client.post("/_dash-update-component", data=body, content_type="application/json")
    assert response.status_code == 400


@pytest.mark.parametrize("path", ["/_dash-component-suites/dash/../../../../etc/passwd",
                                  "/_dash-component-suites/dash/deps/nope.js",
                                  "/_dash-component-suites/perfkit/app.py"])
def test_script_dash_does_not_serve_is_404(client, path):
    assert client.get(path).status_code == 404


def test_page_path_that_is_not_a_string_is_not_found(client):
    response = page(client, ["/"], "?run=0")
    assert response.status_code == 200 and "no page" in response.get_data(as_text=True)


def test_pages_are_built_once_per_run_and_the_first_overview_before_serving(monkeypatch):
    from perfkit.dashboards import layout
    built = []
    original = layout.run_page
    monkeypatch.setattr(layout, "run_page", lambda path, run, index, *cell: built.append(run.name) or original(path, run, index, *cell))
    runs = [make_run("v1"), make_run("v2")]
    client = create_app(runs, prebuild=True).server.test_client()
    assert built == [runs[0].name]  # before any request
    first, again = page(client, "/", "?run=0"), page(client, "/", "?run=0")
    assert first.status_code == again.status_code == 200 and first.get_data() == again.get_data()
    assert built == [runs[0].name]
    assert page(client, "/", "?run=1").status_code == 200 and built == [runs[0].name, runs[1].name]
    assert create_app(runs).server and built == [runs[0].name, runs[1].name]  # no prebuild unless asked


SAMPLES = Path(__file__).resolve().parents[1] / "sample_runs"


@pytest.mark.skipif(not (SAMPLES / "cpu_avx2").is_dir(), reason="sample_runs not made")
def test_compare_page_shows_spread_verdict_differences_and_op_time(monkeypatch, tmp_path):
    from perfkit.io.loader import load
    from perfkit.views.compare import compare, run_verdict_words
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path))
    runs = [load(SAMPLES / "cpu_default"), load(SAMPLES / "cpu_avx2")]
    client = create_app(runs).server.test_client()
    response = update(client, "compare-body.children", {"id": "compare-body", "property": "children"},
                      [("compare-runs", "value", [0, 1])])
    text = response.get_data(as_text=True)
    result = compare(*runs)
    assert response.status_code == 200
    assert run_verdict_words(result["verdict"]) in text and "no significant change" in text  # not called a speedup
    tables = {}

    def collect(node):  # the grids in the returned component tree, by id
        if isinstance(node, dict):
            if node.get("type") == "AgGrid":
                tables[node["props"]["id"]] = node["props"]["rowData"]
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(json.loads(text))
    assert tables[panel_ids.COMPARE_SETTINGS] == [{"setting": "env.ONEDNN_MAX_CPU_ISA", "cpu_default": "-",
                                           "cpu_avx2": "AVX2"}]
    assert panel_ids.COMPARE_SPREAD in text and "Op time per step" in text
    conv = next(d for d in result["op_type_deltas"] if d["type"] == "Conv2D")
    conv_row = next(row for row in tables[panel_ids.COMPARE_OP_TABLE] if row["type"] == "Conv2D")
    assert conv_row["cpu_default_ms"] == pytest.approx(conv["ms_per_step_a"], abs=1e-3)
    assert conv_row["cpu_avx2 - cpu_default_ms"] == pytest.approx(conv["delta_ms_per_step"], abs=1e-3)


@pytest.mark.skipif(not (SAMPLES / "cpu_avx2").is_dir(), reason="sample_runs not made")
def test_compare_page_defaults_to_runs_of_the_first_runs_setup(monkeypatch, tmp_path):
    """cpu_default, AlexNet on Ascend (legacy_run_2), cpu_avx2: the page starts on 0 and 2, never all three, and
    AlexNet's card carries the banner when picked by hand."""
    from conftest import FIXTURE_RUNS

    from perfkit.io.loader import load
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path))
    runs = [load(SAMPLES / "cpu_default"), load(FIXTURE_RUNS["legacy_run_2"]), load(SAMPLES / "cpu_avx2")]
    client = create_app(runs).server.test_client()

    def dropdown_value(node):
        if isinstance(node, dict):
            if node.get("props", {}).get("id") == "compare-runs":
                return node["props"]["value"]
            return next((v for v in map(dropdown_value, node.values()) if v is not None), None)
        if isinstance(node, list):
            return next((v for v in map(dropdown_value, node) if v is not None), None)
        return None

    assert dropdown_value(json.loads(page(client, "/compare", "").get_data(as_text=True))) == [0, 2]
    assert dropdown_value(json.loads(page(client, "/compare", "?runs=0,1").get_data(as_text=True))) == [0, 1]
    # only runs of other setups: the first two
    assert dropdown_value(json.loads(page(create_app(runs[:2]).server.test_client(), "/compare", "")
                                     .get_data(as_text=True))) == [0, 1]
    body = update(client, "compare-body.children", {"id": "compare-body", "property": "children"},
                  [("compare-runs", "value", [0, 1])]).get_data(as_text=True)
    assert "NOT LIKE WITH LIKE: A and B differ in device (CPU vs Ascend), network (ResNet50 vs AlexNet)" in body

"""Nothing a browser sends makes the dashboard read a path.

Statically: the app adds no route to Dash's own, and Dash's routes that take a path serve only Dash's registered
scripts or folders the dashboard does not have. Dynamically: query strings, URL paths and every input of every
callback carry paths (a real run folder not among the served runs, a probe folder, `/etc/passwd`, `../..`) to a
real server in this process, while an audit hook records every file opened or listed, and `os.stat` every path
looked at, whose name contains a probe. Nothing may be recorded; runs given by path read as unknown runs.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import uuid
from pathlib import Path
from urllib.parse import quote

import dash
import pytest
from conftest import FIXTURE_RUNS, REPO
from test_figures import make_run
from werkzeug.serving import WSGIRequestHandler, make_server

from perfkit.dashboards import create_app
from perfkit.views import ids as panel_ids

sys.path.insert(0, str(REPO / "benchmarks"))
from dash_load import Request, callback_body, fetch  # noqa: E402

# Dash's own routes that take a path, and what keeps each from reading one: the component suites answer only
# scripts Dash registered (anything else is a 404), /assets and /static would serve the dashboard package's
# assets/ and static/ folders, which do not exist, and the catch-all answers Dash's index page for any URL.
PATH_ROUTES = {"/_dash-component-suites/<string:package_name>/<path:fingerprinted_path>",
               "/assets/<path:filename>", "/static/<path:filename>", "/<path:path>"}
FILE_EVENTS = {"open", "os.listdir", "os.scandir", "glob.glob", "os.chdir", "shutil.copyfile", "shutil.copytree"}
UNKNOWN_RUN = "unknown run: choose one of the 2 loaded runs"

# Audit hooks cannot be removed: this one records only while `probes` is set, and only names containing a probe.
probes: list[str] = []
seen: list[tuple[str, str]] = []


def record_manifest(event: str, path) -> None:
    if isinstance(path, (str, bytes, os.PathLike)):
        name = os.fsdecode(path)
        if any(probe in name for probe in probes):
            seen.append((event, name))


def _audit(event: str, args: tuple) -> None:
    if probes and event in FILE_EVENTS and args:
        record_manifest(event, args[0])


sys.addaudithook(_audit)


@pytest.fixture
def watch(monkeypatch):
    """watch(strings): from then on, record what opens, lists or stats a path containing one of them."""
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        record_manifest("os.stat", path)
        return real_stat(path, *args, **kwargs)
    monkeypatch.setattr(os, "stat", stat)
    seen.clear()
    yield lambda strings: probes.extend(strings)
    probes.clear()


def post(base, body: bytes) -> tuple[int, bytes]:
    return fetch(base, Request("", "POST", "/_dash-update-component", body))


class QuietHandler(WSGIRequestHandler):
    def log_request(self, *args, **kwargs):  # hundreds of probe requests would bury the test output
        pass


def serve(app):
    server = make_server("127.0.0.1", 0, app.server, threaded=True, request_handler=QuietHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return ("127.0.0.1", server.server_port), server.shutdown


@pytest.fixture(scope="module")
def app():
    return create_app([make_run("v1"), make_run("v2", ranks=(0, 1), slow_factor=1.5)])


@pytest.fixture(scope="module")
def base(app):
    address, stop = serve(app)
    yield address
    stop()


@pytest.fixture
def probe_paths(tmp_path):
    """Paths a request might try to make the app read: each exists, and none is a run the app was given."""
    marker = f"perfkit-probe-{uuid.uuid4().hex[:8]}"
    probe_run = tmp_path / marker
    probe_run.symlink_to(REPO / "sample_runs/cpu_default", target_is_directory=True)
    real_runs = [str(REPO / "sample_runs/cpu_ranks2"), str(FIXTURE_RUNS["new_level1"])]
    values = [str(probe_run), str(probe_run / "perfkit_run.json"), f"../../{marker}", f"file://{probe_run}",
              "/etc/passwd", "../../../../etc/passwd", *real_runs]
    return [marker, "/etc/passwd", *real_runs], values


def routes(app: dash.Dash) -> set[tuple[str, str, frozenset]]:
    return {(rule.rule, rule.endpoint, frozenset(rule.methods)) for rule in app.server.url_map.iter_rules()}


def test_the_app_adds_no_route_to_dashs_own(app):
    assert routes(app) == routes(dash.Dash(__name__))
    assert {rule for rule, _, _ in routes(app) if "<" in rule} == PATH_ROUTES
    package = Path(app.server.root_path)
    assert Path(app.config.assets_folder) == package / "assets" and not (package / "assets").exists()
    assert Path(app.server.static_folder) == package / "static" and not (package / "static").exists()


def test_callbacks_take_no_state_and_no_file_input(app):
    """Every callback input is a URL part or a control value, every state a URL part (the dynamic test sends
    paths to each)."""
    # a clientside callback (the Cells graph's zoom) runs in the browser: the server has no code to send it to
    server_side = {output: callback for output, callback in app.callback_map.items() if "callback" in callback}
    assert set(app.callback_map) - set(server_side) == {f"{panel_ids.CELLS}.figure"}
    inputs = {f"{i['id']}.{i['property']}" for callback in server_side.values() for i in callback["inputs"]}
    assert inputs == {"url.pathname", "url.search", "run-select.value", "compare-runs.value", "op-passes.value",
                      "op-search.value", f"{panel_ids.OP_TABLE}.cellClicked", "timeline-step.value",
                      "timeline-ranks.value", "timeline-poll.n_intervals"}
    # State is read only from the URL, which the dynamic test below sends paths in like any input
    states = {f"{s['id']}.{s['property']}" for callback in server_side.values() for s in callback["state"]}
    assert states <= {"url.search", "url.pathname"}


def test_paths_in_urls_open_nothing(app, base, watch, probe_paths):
    strings, values = probe_paths
    watch(strings)
    replies = []
    for value in values:
        quoted = quote(value, safe="")
        for url in (f"/?run={quoted}", f"/operators?run={quoted}", f"/ranks?run={value}",
                    f"/compare?runs=0,{quoted}", f"/{value.lstrip('/')}"):
            replies.append((url, *fetch(base, Request("", "GET", url)), True))
        for url in (f"/_dash-component-suites/dash/{value.lstrip('/')}", f"/_dash-component-suites/{quoted}/x.js",
                    f"/assets/{value.lstrip('/')}", f"/static/{value.lstrip('/')}"):
            replies.append((url, *fetch(base, Request("", "GET", url)), False))
    # Flask's static routes look (os.stat) for the file inside the dashboard's assets/ and static/ folders, which
    # do not exist; anything else recorded, or any open there, is a leak.
    folders = [Path(app.config.assets_folder), Path(app.server.static_folder)]
    assert [(event, name) for event, name in seen if event != "os.stat"
            or not any(Path(os.path.normpath(name)).is_relative_to(folder) for folder in folders)] == []
    for url, status, body, page in replies:
        # Dash's index page is the same for every URL (the browser's callbacks read the URL); a file route
        # answers 404, or the index page where werkzeug decoded %2F and no file route matched any more.
        is_index = status == 200 and b"react-entry-point" in body
        assert is_index if page else (is_index or 400 <= status < 500), (url, status)


def test_paths_in_callback_inputs_open_nothing(base, watch, probe_paths):
    strings, values = probe_paths
    dependencies = {d["output"]: d for d in json.loads(fetch(base, Request("", "GET", "/_dash-dependencies"))[1])
                    if not d.get("clientside_function")}  # those run in the browser, never on the server
    defaults = {"url.pathname": "/", "url.search": "?run=0", "run-select.value": 0, "compare-runs.value": [0, 1],
                "op-passes.value": ["forward"], "op-search.value": "", f"{panel_ids.OP_TABLE}.cellClicked": None,
                "timeline-step.value": 1, "timeline-ranks.value": [0], "timeline-poll.n_intervals": 0}
    page = dependencies["page.children"]
    watch(strings)
    replies = []
    for value in values:
        for dependency in dependencies.values():  # each input of each callback in turn carries the path
            for item in dependency["inputs"] + dependency.get("state", []):
                key = f"{item['id']}.{item['property']}"
                for sent in (value, f"?run={value}", [value]):
                    body = callback_body(dependency, {**defaults, key: sent}, [key])
                    replies.append((dependency["output"], key, sent, *post(base, body), None))
        for pathname in ("/", "/operators", "/ranks"):
            body = callback_body(page, {"url.pathname": pathname, "url.search": f"?run={quote(value)}"},
                                 ["url.search"])
            replies.append(("page.children", pathname, value, *post(base, body), UNKNOWN_RUN))
    assert seen == []
    for output, key, sent, status, body, expected in replies:
        assert status in (200, 204) or 400 <= status < 500, (output, key, sent, status)
        if expected:
            assert status == 200 and expected.encode() in body, (output, key, sent)


def test_the_monitors_see_a_route_that_reads_a_path(watch, probe_paths):
    """The checks above would catch a leak: a route that reads the path it is given shows in both."""
    from flask import request
    strings, values = probe_paths
    leaky = create_app([make_run("v1")])
    leaky.server.add_url_rule("/file", "file", lambda: Path(request.args["path"]).read_text())
    assert routes(leaky) - routes(dash.Dash(__name__)) == {("/file", "file", frozenset({"GET", "HEAD", "OPTIONS"}))}
    address, stop = serve(leaky)
    try:
        watch(strings)
        status, _ = fetch(address, Request("", "GET", f"/file?path={quote(values[1])}"))
    finally:
        stop()
    assert status == 200
    assert ("open", values[1]) in seen

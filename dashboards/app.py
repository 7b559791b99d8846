"""The app factory: `create_app(runs)` builds a Dash app over runs loaded before it starts.

Callbacks address runs by their index in `runs`; nothing a browser sends can name a path or load a file.
An index that is unknown or malformed gets an empty state, a request Dash cannot parse gets a 400, a script
Dash does not serve (`/_dash-component-suites/dash/../x`) a 404.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import socket
import traceback
from pathlib import Path
from typing import Any, Sequence

import dash
from dash import Input, Output, State, dcc, html
from dash.exceptions import CallbackException, DependencyException
from werkzeug.exceptions import BadRequest, HTTPException, NotFound

from ..core.errors import PerfkitError
from ..core.model import PASSES, Run
from ..render import report
from ..render.report import STYLESHEET
from ..views import ids as panel_ids
from ..views.compare import default_selection
from ..views.figures.operators import op_instance_rows
from ..views.format import run_labels
from . import ids, layout, timeline
from .inputs import query_value, run_index, text

LOOPBACK_HOST = "127.0.0.1"
# perfkit's plotly.js basic bundle (perfkit.render.report.PLOTLY_BUNDLE), a page script served like Dash's own, so
# dcc.Graph finds window.Plotly and never fetches the full plotly.min.js: 1.2 MB instead of 4.8 MB, whose
# evaluation was most of the first page's time (benchmarks/dash_first_page.py).
PLOTLY_BUNDLE = report.PLOTLY_BUNDLE.relative_to(report.PACKAGE_ROOTS[1]).as_posix()
# Pages built and kept per (page, run): runs never change while the app serves them, and one
# overview of a small CPU run took 170 ms a request to build (benchmarks/results/dash_load.txt, one client).
PAGE_CACHE_SIZE = 64
# waitress's worker threads: a dashboard has one or a few viewers, each page fires a handful of callbacks.
SERVER_THREADS = 8

INDEX_STRING = """<!DOCTYPE html>
<html lang="en"><head>{%metas%}<title>{%title%}</title>{%favicon%}{%css%}<style>""" + STYLESHEET + """</style>
</head><body>{%app_entry%}<footer>{%config%}{%scripts%}{%renderer%}</footer></body></html>"""


def unknown_run(count: int) -> list:
    return [layout.card("Unknown run", layout.empty(f"unknown run: choose one of the {count} loaded runs"))]


def create_app(runs: Sequence[Run], prebuild: bool = False) -> dash.Dash:
    """A Dash app over `runs` (already loaded). Serve it with `serve` or `app.run(debug=False)`.

    `prebuild` builds the first run's overview now, so the first visitor does not wait for its summary and
    findings (up to 4 s on a million-op run, benchmarks/results/dash_first_page.txt).
    """
    runs = list(runs)
    labels = run_labels(runs)
    # runs never change while the app serves them: their settings are read once, on the first Compare visit
    compare_default = functools.cache(lambda: default_selection(runs))
    app = dash.Dash(__name__, title="perfkit", suppress_callback_exceptions=True, serve_locally=True,
                    index_string=INDEX_STRING, update_title=None)
    app.scripts.append_script({"relative_package_path": PLOTLY_BUNDLE, "namespace": "perfkit"})
    app.layout = html.Div([dcc.Location(id=ids.URL, refresh=False), layout.header(labels),
                           html.Main(id=ids.PAGE)])

    @functools.lru_cache(maxsize=PAGE_CACHE_SIZE)
    def run_page(pathname: str, index: int, cell: str):
        return layout.run_page(pathname, runs[index], index, cell)

    @functools.lru_cache(maxsize=PAGE_CACHE_SIZE)
    def compare_body(picked: tuple[int, ...]):
        return layout.compare_body([runs[i] for i in picked])

    if prebuild and runs:
        run_page("/", 0, "")  # the key render_page asks by

    def picked_index(search: Any) -> int | None:
        """The run the URL's ?run=N names (the first one without it); None when there is no such run."""
        return run_index(query_value(search, "run", "0"), len(runs))

    def pick(search: Any) -> Run | None:
        index = picked_index(search)
        return None if index is None else runs[index]

    @app.callback(Output(ids.URL, "search"), Output(ids.RUN, "value"),
                  Input(ids.URL, "search"), Input(ids.RUN, "value"))
    def sync_run(search, run_value):
        """The run lives in the URL (?run=N) so a page can be linked; the dropdown follows it and sets it."""
        if dash.ctx.triggered_id == ids.RUN:
            index = run_index(run_value, len(runs))
            return (dash.no_update if index is None else f"?run={index}"), dash.no_update
        index = picked_index(search)
        return dash.no_update, (dash.no_update if index is None else index)

    @app.callback([Output(ids.nav(path), "className") for path in ids.PAGES]
                  + [Output(ids.nav(path), "href") for path in ids.PAGES] + [Output(ids.nav(ids.RANKS_PAGE), "style")],
                  Input(ids.URL, "pathname"), Input(ids.URL, "search"))
    def mark_active(pathname, search):
        """The page's link marked, every link keeping the run; the Ranks link only for a run of several ranks."""
        keep = f"?run={query_value(search, 'run', '0')}"
        run = pick(search)
        single_rank = run is not None and len(run.ranks) < 2 and pathname != ids.RANKS_PAGE
        return (["active" if path == pathname else "" for path in ids.PAGES] + [path + keep for path in ids.PAGES]
                + [{"display": "none"} if single_rank else {}])

    @app.callback(Output(ids.PAGE, "children"), Input(ids.URL, "pathname"), Input(ids.URL, "search"))
    def render_page(pathname, search):
        if pathname == "/compare":
            chosen = [run_index(v, len(runs)) for v in str(query_value(search, "runs", "")).split(",") if v]
            chosen = [i for i in chosen if i is not None]
            return layout.compare_page(labels, chosen or compare_default())
        if pathname == timeline.PATH:
            return timeline.page(search, len(runs), picked_index)
        if not isinstance(pathname, str) or pathname not in ids.PAGES:
            return [layout.card("Not found", layout.empty(f"no page {pathname!s}: use the links above"))]
        index = picked_index(search)
        if index is None:
            return unknown_run(len(runs))
        return run_page(pathname, index, text(query_value(search, "cell", "")) if pathname == ids.CELLS_PAGE else "")

    @app.callback(Output(ids.COMPARE_BODY, "children"), Input(ids.COMPARE_RUNS, "value"))
    def render_compare(values):
        chosen = [] if not isinstance(values, list) else [run_index(v, len(runs)) for v in values]
        return compare_body(tuple(dict.fromkeys(i for i in chosen if i is not None)))

    @app.callback(Output(panel_ids.OP_TABLE, "rowData"), Output(ids.OP_COUNT, "children"),
                  Input(ids.URL, "search"), Input(ids.OP_PASSES, "value"), Input(ids.OP_SEARCH, "value"))
    def filter_ops(url_search, passes, search):
        run = pick(url_search)
        if run is None:
            return [], f"unknown run: choose one of the {len(runs)} loaded runs"
        passes = [p for p in passes if p in PASSES] if isinstance(passes, list) else list(PASSES)
        rows, matched = op_instance_rows(run, passes, text(search))
        return rows.to_dict("records"), layout.instances_count(len(rows), matched)

    # The Cells flame graph zooms into a clicked Cell, in the browser: a bar's click data holds its start (base)
    # and width (x); plotly's double-click zooms back out.
    app.clientside_callback(
        """function(click, fig) {
            const point = click && click.points && click.points[0];
            if (!point || typeof point.base !== "number") { return window.dash_clientside.no_update; }
            const xaxis = Object.assign({}, fig.layout.xaxis, {range: [point.base, point.base + point.x],
                                                              autorange: false});
            return Object.assign({}, fig, {layout: Object.assign({}, fig.layout, {xaxis: xaxis})});
        }""",
        Output(panel_ids.CELLS, "figure"), Input(panel_ids.CELLS, "clickData"), State(panel_ids.CELLS, "figure"),
        prevent_initial_call=True)
    timeline.register(app, runs, picked_index)
    _bounded_requests(app)
    _reject_malformed_requests(app)
    return app


# A callback body is a few KB; a bigger one is no browser's (413, before it is read).
MAX_BODY_BYTES = 1024 * 1024


def _bounded_requests(app: dash.Dash) -> None:
    """Request bodies: at most MAX_BODY_BYTES, and decoded by perfkit's bounded JSON decoder
    (perfkit/core/boundedjson.py), so that a body nested 100,000 deep is a 400 (Flask answers 400 to a ValueError
    while decoding; the standard decoder raised RecursionError: a 500), and numbers no callback can use
    (`1e400`, `Infinity`, 30 digits) arrive as None (dashboards/inputs.py checks the rest)."""
    from flask.json.provider import DefaultJSONProvider

    from ..core import boundedjson

    class BoundedJSON(DefaultJSONProvider):
        def loads(self, s: str | bytes, **kwargs: Any) -> Any:
            return boundedjson.loads(s.decode("utf-8", "replace") if isinstance(s, (bytes, bytearray)) else s)

    app.server.json = BoundedJSON(app.server)
    app.server.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES


def _reject_malformed_requests(app: dash.Dash) -> None:
    """A callback request Dash cannot parse is the client's fault: answer 400 in one line, not a 500 traceback.
    So is a request for a script Dash has not registered: Dash raises, which would be a 500; it is a 404.

    An exception raised inside perfkit's own code is a bug and stays a 500.
    """
    from flask import request

    @app.server.errorhandler(Exception)
    def bad_request(exc: Exception):
        if isinstance(exc, HTTPException):
            return exc
        if isinstance(exc, DependencyException) and request.path.startswith("/_dash-component-suites/"):
            return NotFound("no such script")
        if request.path.endswith("/_dash-update-component") and isinstance(exc, CLIENT_ERRORS) \
                and not _raised_in_perfkit(exc):
            logging.getLogger("perfkit.dash").warning("rejected malformed callback request: %r", exc)
            return BadRequest(f"malformed callback request: {type(exc).__name__}")
        raise exc


# What Dash raises on a request body that does not match a registered callback (AttributeError: a JSON body
# that is not an object, `[]` or `null`).
CLIENT_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, CallbackException)
_OWN_CODE = tuple(str(root) for root in report.PACKAGE_ROOTS) + (str(Path(__file__).resolve().parent),)


def _raised_in_perfkit(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return any(frame.filename.startswith(_OWN_CODE) for frame in frames)


def serve(runs: Sequence[Run], host: str = LOOPBACK_HOST, port: int = 8050, ready=None) -> None:
    """Serve the dashboard with waitress (a production WSGI server, debug off) until interrupted.

    The port is bound before `ready()` is called (once the first page is built): a busy port is one
    PerfkitError, raised before any URL is printed.
    """
    from waitress import create_server
    app = create_app(runs, prebuild=True)
    try:
        server = create_server(app.server, host=host, port=port, threads=SERVER_THREADS)
    except OSError as exc:
        raise _cannot_bind(host, port, exc) from exc
    if ready is not None:
        ready()
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C is how the dashboard is stopped
        pass
    finally:
        server.close()


def check_port(host: str, port: int) -> None:
    """Raise PerfkitError when `host:port` cannot be bound (in use, or not an address of this machine).
    `serve` binds again later (and says so too if the port was taken in between)."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as waitress binds
            probe.bind((host, port))
    except OSError as exc:
        raise _cannot_bind(host, port, exc) from exc


def _cannot_bind(host: str, port: int, exc: OSError) -> PerfkitError:
    return PerfkitError(f"cannot serve the dashboard on {host}:{port}: {exc.strerror or exc} "
                        "(another program uses the port? choose one with --port)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

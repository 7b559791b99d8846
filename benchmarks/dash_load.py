"""Load test of the dashboard server on loopback: many concurrent clients, a table of latencies per request kind.

The server is the real command, `perfkit dash <runs> --port P`, in a child process (waitress, 8 threads,
debug off), so client and server threads do not share a GIL. The clients (threads, one HTTP connection per
request, HTTP/1.0) send a fixed mix, shuffled with a seed, built from what the app serves:

- page loads (`/`, `/operators?run=1`, `/compare?runs=0,1`, `/ranks?run=N`, also with unknown run ids),
  `/_dash-layout`, `/_dash-dependencies` and the scripts the page lists;
- POST `/_dash-update-component` for every callback in `/_dash-dependencies`, in the body the Dash renderer
  sends (output, outputs, inputs, changedPropIds, parsedChangedPropsIds): each page's render for the runs in
  turn, the compare body, the operator filter, the nav links and the run picker;
- the same callbacks with unknown or path-like run ids (`?run=99`, `?run=../../etc/passwd`): 200 and the
  "unknown run" state; malformed callback bodies and script paths Dash does not serve: 4xx;
- every callback, the Timeline page's too, with hostile values in each input and state (`1e400`, `-1e400`,
  `Infinity`, `NaN`, 30-digit integers, a 5,000-digit string, nested lists): 200 or a 4xx, never a 5xx; bodies
  nested 100,000 deep or over the size limit: 4xx.

Every reply is checked (status, and a phrase of the page it should show). Exit status 1 if any check failed.

    python benchmarks/dash_load.py --clients 50 --requests 3000 --out benchmarks/results/dash_load.txt
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Sequence

import psutil

REPO = Path(__file__).resolve().parents[1]
SAMPLE_RUNS = sorted(str(p) for p in (REPO / "sample_runs").iterdir() if p.is_dir())
HOST = "127.0.0.1"
REQUEST_TIMEOUT_S = 60
UNKNOWN_RUN = "unknown run: choose one of the"


@dataclass(frozen=True)
class Request:
    kind: str
    method: str
    path: str
    body: bytes | None = None
    status: int | None = 200  # None: any 4xx; NOT_5XX: anything below 500
    expect: str | None = None  # a phrase the reply must contain


@dataclass
class Outcome:
    kind: str
    status: int | None  # None: no HTTP reply (connection error or timeout)
    seconds: float
    failure: str | None


@dataclass
class Result:
    clients: int
    wall_s: float
    outcomes: list[Outcome]
    server_peak_threads: int
    server_peak_rss_mb: float
    failures: list[str] = field(default_factory=list)

    def count(self, predicate) -> int:
        return sum(1 for o in self.outcomes if predicate(o))

    @property
    def server_errors(self) -> int:
        return self.count(lambda o: o.status is not None and o.status >= 500)

    @property
    def connection_errors(self) -> int:
        return self.count(lambda o: o.status is None)


def callback_body(dependency: dict, values: dict, changed: Sequence[str]) -> bytes:
    """The body the Dash renderer posts for one callback: `values` maps "id.property" to the input's value."""
    output = dependency["output"]
    outputs = [dict(zip(("id", "property"), part.split(".", 1)))
               for part in (output[2:-2].split("...") if output.startswith("..") else [output])]
    inputs, state = ([{"id": i["id"], "property": i["property"], "value": values[f"{i['id']}.{i['property']}"]}
                      for i in dependency.get(kind, [])] for kind in ("inputs", "state"))
    return json.dumps({"output": output, "outputs": outputs if output.startswith("..") else outputs[0],
                       "inputs": inputs, "state": state, "changedPropIds": list(changed),
                       "parsedChangedPropsIds": list(changed)}).encode()


NOT_5XX = -1
MALFORMED_BODIES = [b"not json", b"{}", json.dumps({"output": "page.children"}).encode(),
                    json.dumps({"output": "nope.children", "outputs": {"id": "nope", "property": "children"},
                                "inputs": [], "changedPropIds": []}).encode(),
                    json.dumps({"output": "page.children", "outputs": {"id": "page", "property": "children"},
                                "inputs": [], "changedPropIds": []}).encode(),
                    b"[1, 2", json.dumps([{"output": "page.children"}]).encode(), b"null", b'"page.children"',
                    # deep: RecursionError in the JSON decoder (was a 500); big: over the server's body limit
                    b"[" * 100_000, b'{"output": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001,
                    b'{"output": "' + b"x" * (2 * 1024 * 1024) + b'"}']
# Raw JSON put in place of a callback's inputs and states: numbers no int or float holds (`1e400` was a 500 in
# the Timeline's int() with OverflowError), values of the wrong type, text a number parser chokes on.
HOSTILE_VALUES = ["1e400", "-1e400", "Infinity", "-Infinity", "NaN", "1" * 30, "-" + "9" * 25, "2147483648",
                  "-1", '"1e400"', '"' + "9" * 5000 + '"', "[1e400, -1e400]", '{"value": 1e400}', "null", "true",
                  "[" * 100 + "]" * 100, '"?run=0&step=1e400"', '"?run=1e400&step=-1e400"']


def hostile_body(dependency: dict, first: int) -> bytes:
    """A callback body with HOSTILE_VALUES (from the `first`th on) as its inputs' and states' values."""
    keys = [f"{i['id']}.{i['property']}" for kind in ("inputs", "state") for i in dependency.get(kind, [])]
    text = callback_body(dependency, {key: f"@@{n}@@" for n, key in enumerate(keys)}, keys[:1]).decode()
    for n in range(len(keys)):
        text = text.replace(f'"@@{n}@@"', HOSTILE_VALUES[(first + n) % len(HOSTILE_VALUES)])
    return text.encode()
UNKNOWN_SEARCHES = ["?run=99", "?run=-1", "?run=abc", "?run=../../etc/passwd", "?run=/etc/passwd", "?run=1e3"]


def visit(cycle: int, run_count: int, deps: dict[str, dict], scripts: Sequence[str]) -> list[Request]:
    """One round of the mix: what a few browsers looking at the dashboard send, plus bad requests.

    `deps` are the callbacks from /_dash-dependencies by output; `cycle` rotates the runs, the scripts and the bad
    inputs, so every run's pages are rendered over the whole test.
    """
    a, b = (2 * cycle) % run_count, (2 * cycle + 1) % run_count
    page, nav = deps["page.children"], deps[next(k for k in deps if "nav-overview.className" in k)]
    sync, ops = deps["..url.search...run-select.value.."], deps["..op-table.rowData...op-count.children.."]
    poll = deps[next(k for k in deps if "timeline-status.children" in k)]
    compare_body = deps["compare-body.children"]
    unknown, unknown2, unknown3 = (UNKNOWN_SEARCHES[(cycle + i) % len(UNKNOWN_SEARCHES)] for i in range(3))

    def render(pathname: str, search: str) -> bytes:
        return callback_body(page, {"url.pathname": pathname, "url.search": search}, ["url.pathname"])

    def post(kind: str, body: bytes, expect: str | None, status: int | None = 200) -> Request:
        return Request(kind, "POST", "/_dash-update-component", body, status, expect)

    return [
        Request("GET page", "GET", "/", expect="react-entry-point"),
        Request("GET page", "GET", f"/operators?run={b}", expect="react-entry-point"),
        Request("GET page", "GET", "/compare?runs=0,1", expect="react-entry-point"),
        Request("GET page", "GET", f"/ranks?run={a}", expect="react-entry-point"),
        Request("GET page, unknown run", "GET", f"/{unknown}", expect="react-entry-point"),
        Request("GET _dash-layout", "GET", "/_dash-layout", expect='"url"'),
        Request("GET _dash-layout", "GET", "/_dash-layout", expect='"url"'),
        Request("GET _dash-dependencies", "GET", "/_dash-dependencies", expect="page.children"),
        Request("GET _dash-dependencies", "GET", "/_dash-dependencies", expect="page.children"),
        Request("GET script", "GET", scripts[cycle % len(scripts)]),
        Request("GET script", "GET", scripts[(cycle + 1) % len(scripts)]),
        post("POST render /", render("/", f"?run={a}"), "Step trace"),
        post("POST render /", render("/", f"?run={b}"), "Step trace"),
        post("POST render /operators", render("/operators", f"?run={a}"), "Op instances"),
        post("POST render /operators", render("/operators", f"?run={b}"), "Op instances"),
        post("POST render /ranks", render("/ranks", f"?run={a}"), "fig-ranks"),
        post("POST render /ranks", render("/ranks", f"?run={b}"), "fig-ranks"),
        post("POST render /compare", render("/compare", f"?runs={a},{b}"), "Runs to compare"),
        post("POST compare body", callback_body(compare_body, {"compare-runs.value": [a, b]},
                                                ["compare-runs.value"]),
             "Speedup over" if a != b else "pick two or more runs"),
        post("POST compare body", callback_body(compare_body, {"compare-runs.value": list(range(run_count))},
                                                ["compare-runs.value"]),
             "Speedup over" if run_count > 1 else "pick two or more runs"),
        post("POST op filter", callback_body(ops, {"url.search": f"?run={a}", "op-passes.value": ["forward"],
                                                   "op-search.value": "Conv"}, ["op-search.value"]),
             "matching instances"),
        post("POST op filter", callback_body(ops, {"url.search": f"?run={b}",
                                                   "op-passes.value": ["forward", "backward", "other"],
                                                   "op-search.value": ""}, ["op-passes.value"]),
             "matching instances"),
        post("POST nav links", callback_body(nav, {"url.pathname": "/operators", "url.search": f"?run={a}"},
                                             ["url.pathname"]), f"ranks?run={a}"),
        post("POST nav links", callback_body(nav, {"url.pathname": "/", "url.search": f"?run={b}"},
                                             ["url.search"]), f"compare?run={b}"),
        post("POST run picker", callback_body(sync, {"url.search": f"?run={a}", "run-select.value": 0},
                                              ["url.search"]), '"value":'),
        post("POST run picker", callback_body(sync, {"url.search": "?run=0", "run-select.value": b},
                                              ["run-select.value"]), f"?run={b}"),
        post("POST render, unknown run", render("/", unknown), UNKNOWN_RUN),
        post("POST render, unknown run", render("/operators", unknown2), UNKNOWN_RUN),
        post("POST render, unknown run", render("/ranks", unknown3), UNKNOWN_RUN),
        post("POST op filter, unknown run",
             callback_body(ops, {"url.search": unknown, "op-passes.value": ["forward"], "op-search.value": ""},
                           ["url.search"]), UNKNOWN_RUN),
        post("POST malformed", MALFORMED_BODIES[cycle % len(MALFORMED_BODIES)], None, None),
        post("POST malformed", MALFORMED_BODIES[(cycle + 3) % len(MALFORMED_BODIES)], None, None),
        Request("GET bad script path", "GET", ("/_dash-component-suites/dash/../../../../etc/passwd",
                                               "/_dash-component-suites/perfkit/app.py",
                                               "/_dash-component-suites/dash/deps/nope.js")[cycle % 3], status=None),
        # the Timeline page's poll builds the run's index, so that hostile draws reach the index
        post("POST timeline poll", callback_body(poll, {"timeline-poll.n_intervals": cycle,
                                                        "url.search": f"?run={a}"}, ["timeline-poll.n_intervals"]),
             None),
    ] + [post(f"POST hostile {output.strip('.').split('.')[0]}", hostile_body(dependency, cycle + n), None, NOT_5XX)
         for n, (output, dependency) in enumerate(sorted(deps.items()))]


def build_requests(base: tuple[str, int], run_count: int, total: int, seed: int = 0) -> list[Request]:
    """`total` requests: whole rounds of `visit` (the last one cut), shuffled with `seed`."""
    index = fetch(base, Request("GET page", "GET", "/"))[1].decode()
    scripts = re.findall(r'src="(/_dash-component-suites/[^"]+)"', index)
    dependencies = {d["output"]: d for d in json.loads(fetch(base, Request("", "GET", "/_dash-dependencies"))[1])}
    requests: list[Request] = []
    cycle = 0
    while len(requests) < total:
        requests += visit(cycle, run_count, dependencies, scripts)
        cycle += 1
    requests = requests[:total]
    random.Random(seed).shuffle(requests)
    return requests


def fetch(base: tuple[str, int], request: Request) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(*base, timeout=REQUEST_TIMEOUT_S)
    try:
        headers = {"Content-Type": "application/json", "Accept": "application/json"} if request.body else {}
        connection.request(request.method, request.path, body=request.body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def send(base: tuple[str, int], request: Request) -> Outcome:
    start = time.perf_counter()
    try:
        status, body = fetch(base, request)
    except (OSError, http.client.HTTPException) as exc:
        return Outcome(request.kind, None, time.perf_counter() - start,
                       f"{request.method} {request.path}: no reply ({type(exc).__name__}: {exc})")
    seconds = time.perf_counter() - start
    failure = None
    if request.status is None and not 400 <= status < 500:
        failure = f"{request.method} {request.path}: {status}, expected a 4xx"
    elif request.status == NOT_5XX:
        failure = f"{request.method} {request.path}: {status}" if status >= 500 else None
    elif request.status is not None and status != request.status:
        failure = f"{request.method} {request.path}: {status}, expected {request.status}"
    elif request.expect is not None and request.expect.encode() not in body:
        failure = f"{request.method} {request.path}: {status} without {request.expect!r}"
    if failure and request.body:
        failure += f" (body {request.body[:120]!r})"
    return Outcome(request.kind, status, seconds, failure)


def drive(base: tuple[str, int], requests: Sequence[Request], clients: int, server_pid: int | None = None) -> Result:
    """Send `requests` from `clients` threads; sample the server's threads and RSS while they run."""
    peak = {"threads": 0, "rss": 0}
    done = threading.Event()

    def sample():
        process = psutil.Process(server_pid)
        while not done.wait(0.1):
            try:
                peak["threads"] = max(peak["threads"], process.num_threads())
                peak["rss"] = max(peak["rss"], process.memory_info().rss)
            except psutil.Error:
                return
    sampler = threading.Thread(target=sample, daemon=True)
    if server_pid is not None:
        sampler.start()
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        outcomes = list(pool.map(lambda request: send(base, request), requests))
    wall = time.perf_counter() - start
    done.set()
    if server_pid is not None:
        sampler.join()
    return Result(clients, wall, outcomes, peak["threads"], peak["rss"] / 2**20,
                  [o.failure for o in outcomes if o.failure])


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    return sorted_values[min(len(sorted_values) - 1, max(0, int(-(-q * len(sorted_values) // 100)) - 1))]


def table(result: Result) -> str:
    kinds = sorted({o.kind for o in result.outcomes})
    lines = [f"{'request kind':<28} {'n':>5} {'status':<24} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}"]
    for kind in kinds + ["all"]:
        rows = [o for o in result.outcomes if kind in (o.kind, "all")]
        times = sorted(o.seconds * 1000 for o in rows)
        statuses = Counter("conn" if o.status is None else str(o.status) for o in rows)
        status = " ".join(f"{s}:{n}" for s, n in sorted(statuses.items()))
        lines.append(f"{kind:<28} {len(rows):>5} {status:<24} " +
                     " ".join(f"{percentile(times, q):>8.1f}" for q in (50, 90, 99, 100)))
    n = len(result.outcomes)
    lines += ["",
              f"{n} requests from {result.clients} clients in {result.wall_s:.1f} s: {n / result.wall_s:.1f} req/s; "
              f"5xx: {result.server_errors}, no reply: {result.connection_errors}, failed checks: "
              f"{len(result.failures)}",
              f"server: peak {result.server_peak_threads} threads, peak RSS {result.server_peak_rss_mb:.0f} MB"]
    lines += [f"FAILED {f}" for f in result.failures[:20]]
    return "\n".join(lines)


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    versions = ", ".join(f"{p} {version(p)}" for p in ("dash", "flask", "werkzeug", "plotly", "pandas"))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"machine: {os.cpu_count()} CPUs ({cpu}), load average {load} (1/5/15 min) at start; "
            f"Python {platform.python_version()}; {versions}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


class Server:
    """`perfkit dash RUNS --port P` in a child process (environment `env`), its output in a temp file; a
    context manager. `ready_s`: from start until it answers; `left`, after exit: pids of its processes still
    running (should be none)."""

    def __init__(self, runs: Sequence[str], startup_timeout_s: float = 120, env: dict | None = None):
        self.runs, self.startup_timeout_s, self.env = list(runs), startup_timeout_s, env
        self.base = (HOST, free_port())
        self.url = f"http://{HOST}:{self.base[1]}/"
        self.left: list[int] = []

    def __enter__(self) -> "Server":
        self.log = tempfile.NamedTemporaryFile("w+", prefix="dash_load_", suffix=".log")
        began = time.perf_counter()
        self.process = subprocess.Popen([sys.executable, "-m", "perfkit", "dash", *self.runs,
                                         "--port", str(self.base[1])], cwd=REPO, env=self.env,
                                        stdout=self.log, stderr=subprocess.STDOUT)
        while not self._answers():
            if self.process.poll() is not None or time.perf_counter() - began > self.startup_timeout_s:
                self.__exit__()
                raise RuntimeError(f"perfkit dash did not start:\n{self.output()[-2000:]}")
            time.sleep(0.05)
        self.ready_s = time.perf_counter() - began
        return self

    def _answers(self) -> bool:
        try:
            return fetch(self.base, Request("", "GET", "/_dash-layout"))[0] == 200
        except OSError:
            return False

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def tracebacks(self) -> list[str]:
        """The server's log lines around each traceback it printed (a 500 leaves one)."""
        text = self.output()
        return [text[max(0, m.start() - 200):m.start() + 1500] for m in re.finditer("Traceback", text)]

    def __exit__(self, *exc) -> None:
        children = psutil.Process(self.process.pid).children(recursive=True) if self.process.poll() is None else []
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        _, alive = psutil.wait_procs(children, timeout=5)
        self.left = [process.pid for process in alive] + ([self.process.pid] if self._answers() else [])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", default=SAMPLE_RUNS, help="run folders to serve (default: sample_runs/*)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    header = machine()
    with Server(args.runs) as server:
        requests = build_requests(server.base, len(args.runs), args.requests, args.seed)
        result = drive(server.base, requests, args.clients, server.process.pid)
        tracebacks = server.tracebacks()
    runs = " ".join(os.path.relpath(r, REPO) for r in args.runs)
    report = "\n".join([f"python benchmarks/dash_load.py --clients {args.clients} --requests {args.requests}",
                        header, f"served: perfkit dash {runs}", "", table(result)]
                       + [f"server traceback:\n{t}" for t in tracebacks[:3]])
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 1 if result.failures or result.server_errors or result.connection_errors or tracebacks else 0


if __name__ == "__main__":
    sys.exit(main())

"""`perfkit dash` under load: 50 concurrent clients, 1,000 mixed requests (benchmarks/dash_load.py's mix).

Every page load, Dash asset and real callback answers 200 with what it should show, unknown runs the
"unknown run" state, malformed callback bodies (nested 100,000 deep, over the size limit) and bad script paths a
4xx, every callback with hostile numbers in its inputs (`1e400`, `Infinity`, 30-digit integers) 200 or a 4xx;
no 5xx, no dropped connection, no traceback in the server's log. `pytest -s` prints the latency table.
"""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
from dash_load import NOT_5XX, Server, build_requests, drive, table  # noqa: E402

RUNS = [str(REPO / "sample_runs/cpu_default"), str(REPO / "sample_runs/cpu_ranks2")]
CLIENTS = 50
REQUESTS = 1000
# About 30 s on 2 shared cores; far past it means requests queue or hang rather than a slow machine.
WALL_LIMIT_S = 120


def test_fifty_clients_get_every_answer_right():
    with Server(RUNS) as server:
        requests = build_requests(server.base, len(RUNS), REQUESTS)
        result = drive(server.base, requests, CLIENTS, server.process.pid)
        tracebacks = server.tracebacks()
    print("\n" + table(result))

    kinds = {request.kind for request in requests}
    assert {"POST render /", "POST render /operators", "POST render /ranks", "POST render /compare",
            "POST render, unknown run", "POST malformed", "GET _dash-layout", "GET script", "POST timeline poll",
            "POST hostile timeline-body", "POST hostile timeline-status", "POST hostile page", "POST hostile url",
            "POST hostile op-table", "POST hostile compare-body"} <= kinds
    assert len(result.outcomes) == REQUESTS
    assert result.connection_errors == 0, result.failures[:5]
    assert result.server_errors == 0, tracebacks[:1]
    assert not tracebacks, tracebacks[0]
    for request, outcome in zip(requests, result.outcomes):
        if request.status is None:  # malformed on purpose
            assert 400 <= outcome.status < 500, outcome.failure
        elif request.status == NOT_5XX:  # hostile values in a well-formed body: answered, never a server error
            assert outcome.status < 500, outcome.failure
        else:
            assert outcome.status == 200, outcome.failure
    assert not result.failures, result.failures[:5]
    assert result.wall_s < WALL_LIMIT_S

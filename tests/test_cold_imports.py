"""What a cold terminal answer imports: the modules that draw (plotly, Dash, the report), the timeline's trace
readers and the libraries no answer uses stay out of `summary`, `advise`, `ranks` and `perfkit.load` (issue 39: a
small rank's cold answer is its imports; docs/scale.md, "A small rank, cold"). Checked in a fresh interpreter
after the answer, not timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, REPO

# Libraries a terminal answer never needs: drawing (plotly, dash), the profiler's (mindspore), and two that are
# installed beside perfkit for other reasons (scipy with the test tools, hypothesis for the tests).
NEVER_IMPORTED = ("plotly", "dash", "mindspore", "scipy", "hypothesis")
# perfkit's own modules that only the dashboard, the report and the timeline need.
NEVER_IMPORTED_OF_PERFKIT = ("perfkit.dashboards", "perfkit.render.report", "perfkit.io.timeline",
                             "perfkit.io.trace_json", "perfkit.io.trace_text")

PROBE = ("import atexit, json, sys\n"
         "def imported():\n"
         "    return sorted({name.split('.')[0] for name in sys.modules} & set(sys.argv[1].split(','))"
         " | {name for name in sys.modules if name.startswith(tuple(sys.argv[2].split(',')))})\n"
         "atexit.register(lambda: print('IMPORTED', json.dumps(imported()), file=sys.stderr))\n")


def imported_by(code: str, *args: str, cache: Path) -> list[str]:
    """Of NEVER_IMPORTED and NEVER_IMPORTED_OF_PERFKIT, what a fresh interpreter running `code` (with `args` as
    sys.argv[3:]) has imported when it exits; pandas too, to show that the run was read (not answered from a
    cache)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(cache)}
    env.pop("PERFKIT_NO_CACHE", None)
    done = subprocess.run([sys.executable, "-c", PROBE + code, ",".join((*NEVER_IMPORTED, "pandas")),
                           ",".join(NEVER_IMPORTED_OF_PERFKIT), *args],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stderr.splitlines() if line.startswith("IMPORTED "))
    return json.loads(line.removeprefix("IMPORTED "))


CLI = "from perfkit.apps.cli import main\nmain(sys.argv[3:], prog_name='perfkit')\n"


@pytest.mark.parametrize("run, command", [
    ("new_level1_rank0", ["advise"]),
    ("new_level1_rank0", ["advise", "--format", "markdown"]),
    ("new_level1_rank0", ["summary", "--by", "cell"]),
    ("new_level1", ["ranks", "--format", "json"]),
    ("legacy_run_2", ["summary", "--format", "json"]),
])
def test_a_cold_terminal_answer_imports_nothing_that_draws(run, command, tmp_path):
    found = imported_by(CLI, *command, str(FIXTURE_RUNS[run]), cache=tmp_path)
    assert found == ["pandas"]


def test_perfkit_load_and_its_answers_import_nothing_that_draws(tmp_path):
    """The Python API's facade holds perfkit.timeline, so it imports the timeline's module and its readers (about
    12 ms); nothing that draws."""
    code = ("import perfkit\n"
            "run = perfkit.load(sys.argv[3])\n"
            "perfkit.summarize(run), perfkit.advise(run), perfkit.ledger(run)\n")
    found = imported_by(code, str(FIXTURE_RUNS["new_level1_rank0"]), cache=tmp_path)
    assert set(found) - {"perfkit.io.timeline", "perfkit.io.trace_json", "perfkit.io.trace_text"} == {"pandas"}


def test_the_probe_sees_plotly_and_a_trace_reader(tmp_path):
    """The check above would fail: a module that imports plotly, or the timeline's reader, is seen."""
    code = "import plotly.graph_objects\nimport perfkit.io.trace_text\n"
    assert {"plotly", "perfkit.io.trace_json", "perfkit.io.trace_text"} <= set(imported_by(code, cache=tmp_path))

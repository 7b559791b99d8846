"""Readers and panels from an installed package (entry points `perfkit.readers`, `perfkit.panels`), and what a
reader or plugin that breaks the rules costs: one warning, or one line and exit 2 where nothing else loads.

Each test installs a package the way pip leaves one: a `*.dist-info` folder with METADATA and entry_points.txt
beside the package's modules, in a folder put on sys.path. No perfkit file is touched.
"""

from __future__ import annotations

import csv
import html
import json
import shutil
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.apps.cli import main
from perfkit.core import plugins
from perfkit.io import cache, formats
from perfkit.views import ids as panel_ids
from perfkit.views import panel

# A per-step log as a training script writes it (crafted: `step,total_ms`, one row per step): a layout that knows
# each step's total and nothing of its split, the case of issue 22 (mean 1,095 ms became 5 ms).
STEP_LOG = "step_totals.csv"
STEP_LOG_READER = '''
from pathlib import Path
import pandas as pd
from perfkit.io.formats.base import Parts, Reader

def detect(folder: Path) -> bool:
    return (folder / "step_totals.csv").is_file()

def read(folder: Path) -> dict:
    steps = pd.read_csv(folder / "step_totals.csv")
    return {0: Parts(tables={"steps": steps}, sources=[str(folder / "step_totals.csv")])}

READER = Reader(name="steplog", provides=frozenset({"steps"}), detect=detect, read=read, fills=FILLS,
                looks_for="step_totals.csv")
'''


def install(site: Path, monkeypatch, package: str, modules: dict[str, str], entry_points: dict[str, dict[str, str]]):
    """`package` (its modules: {file name: source}) installed under `site`, declaring `entry_points`
    ({group: {name: "module:attribute"}}), and on sys.path for this test."""
    (site / package).mkdir(parents=True)
    for name, source in {"__init__.py": "", **modules}.items():
        (site / package / name).write_text(textwrap.dedent(source))
    dist = site / f"{package}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items()) + "\n"
        for group, points in entry_points.items()))
    monkeypatch.syspath_prepend(str(site))
    forget_plugins()


def forget_plugins() -> None:
    """What this process remembers of installed plugins (perfkit asks once per process)."""
    plugins.forget()
    formats._installed.cache_clear()
    panel._installed.cache_clear()
    cache.code_digest.cache_clear()


@pytest.fixture(autouse=True)
def clean(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    yield
    monkeypatch.undo()  # the plugin's folder off sys.path before perfkit forgets what it found there
    for name in [name for name in sys.modules if name.startswith("perfkit_test_")]:
        del sys.modules[name]
    forget_plugins()


# The steps the real CPU run's op events give (4: the first one's interval unknown, formats/steps.py).
CPU_RUN_STEPS = 4


def cpu_run_with_step_log(tmp_path: Path, totals: list[float]) -> Path:
    """The real CPU run (MindSpore 2.10) with a step log beside its FRAMEWORK/ folder."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUNS["cpu_2_10"], run)
    unit = next(run.glob("*_ascend_ms"))
    write_step_log(unit, totals)
    return run


def write_step_log(folder: Path, totals: list[float]) -> None:
    with open(folder / STEP_LOG, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["step", "total_ms"])
        writer.writerows((step, total) for step, total in enumerate(totals, start=1))


def step_log_alone(tmp_path: Path) -> Path:
    """A folder holding a step log and nothing else."""
    alone = tmp_path / "alone"
    alone.mkdir()
    write_step_log(alone, [5.0, 6.0])
    return alone


def one_line_error(folder: Path) -> str:
    """`perfkit summary folder`'s error: one line, exit 2, no traceback."""
    result = CliRunner().invoke(main, ["summary", str(folder)])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "Traceback" not in result.output
    return result.output


def install_step_log_reader(tmp_path, monkeypatch, fills: bool) -> None:
    install(tmp_path / "site", monkeypatch, "perfkit_test_steplog",
            {"layout.py": STEP_LOG_READER.replace("FILLS", 'frozenset({"steps"})' if fills else "frozenset()")},
            {plugins.READERS: {"steplog": "perfkit_test_steplog.layout:READER"}})


# ---------------------------------------------------------------------------------------------------------
# A reader that gives step totals only


def test_a_step_totals_reader_fills_steps_but_never_replaces_those_the_op_events_give(tmp_path, monkeypatch):
    run_path = cpu_run_with_step_log(tmp_path, [5.0] * CPU_RUN_STEPS)
    derived = perfkit.load(run_path).steps  # no plugin yet: the cpu reader's op events give the steps
    assert len(derived) == CPU_RUN_STEPS
    assert derived["fwd_bwd_ms"].notna().all() and derived["total_ms"].mean() > 500
    install_step_log_reader(tmp_path, monkeypatch, fills=True)
    assert formats.readers()[-1].name == "steplog" and formats.readers()[-1].plugin.startswith("steplog = ")

    run = perfkit.load(run_path)
    assert run.steps[["step", "interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms"]].equals(
        derived[["step", "interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms"]])
    assert not [w for w in run.warnings if "steplog" in w]

    # where nothing else gives steps, the log's totals are the steps, their split unknown (NA, not 0)
    alone = tmp_path / "alone"
    alone.mkdir()
    write_step_log(alone, [12.5, 10.0, 11.0])
    summary = json.loads(CliRunner().invoke(main, ["summary", "--format", "json", str(alone)]).output)
    with open(alone / STEP_LOG) as rows:
        totals = [float(row["total_ms"]) for row in csv.DictReader(rows)]
    assert summary["layout"] == "steplog" and summary["steps"]["count"] == len(totals)
    steps = perfkit.load(alone).steps
    assert steps["total_ms"].tolist() == totals and steps["interval_ms"].isna().all()


def test_a_reader_whose_steps_replace_the_op_derived_ones_says_so(tmp_path, monkeypatch):
    run_path = cpu_run_with_step_log(tmp_path, [5.0] * CPU_RUN_STEPS)
    install_step_log_reader(tmp_path, monkeypatch, fills=False)
    run = perfkit.load(run_path)
    assert run.steps["total_ms"].tolist() == [5.0] * CPU_RUN_STEPS  # it declared them its own: they win ...
    said = [w for w in run.warnings if "steplog" in w]
    assert len(said) == 1 and "replaces the one the cpu reader would give through op_events" in said[0]  # ... said


# ---------------------------------------------------------------------------------------------------------
# A chart


CHART = '''
import plotly.graph_objects as go
from perfkit.views.panel import FIGURE, Panel

def steps_per_rank(run):
    counts = run.steps.groupby("rank")["step"].nunique()
    return go.Figure(go.Bar(x=[str(rank) for rank in counts.index], y=counts.tolist()))

def data(run):
    return {"steps": int(run.steps["step"].nunique())}

def text(summary):
    return [f"profiled steps per rank  {summary['panels']['fig-steps-per-rank']['steps']}"]

PANELS = [Panel("fig-steps-per-rank", "Profiled steps per rank", "/", FIGURE, content=steps_per_rank,
                data=data, text=text)]
'''


def test_a_chart_from_a_package_reaches_dashboard_report_terminal_and_json(tmp_path, monkeypatch):
    from plotly.utils import PlotlyJSONEncoder

    from perfkit.dashboards.layout import run_page
    from perfkit.render.report import render_report

    install(tmp_path / "site", monkeypatch, "perfkit_test_chart", {"chart.py": CHART},
            {plugins.PANELS: {"steps-per-rank": "perfkit_test_chart.chart:PANELS"}})
    folder = FIXTURE_RUNS["legacy_run_2"]
    with open(folder / "step_trace_raw_1_detail_time.csv") as rows:
        steps = len(list(csv.reader(rows))) - 2  # less the header and MindSpore's average row
    run = perfkit.load(folder)

    page = json.dumps(run_page("/", run, 0), cls=PlotlyJSONEncoder)
    assert '"id": "fig-steps-per-rank"' in page
    assert "<h2>Profiled steps per rank</h2>" in render_report([run])
    text = CliRunner().invoke(main, ["summary", str(folder)])
    assert text.exit_code == 0 and f"profiled steps per rank  {steps}\n" in text.output
    summary = json.loads(CliRunner().invoke(main, ["summary", "--format", "json", str(folder)]).output)
    assert summary["panels"] == {"fig-steps-per-rank": {"steps": steps}}


def test_without_plugins_the_summary_json_has_no_panels_key():
    summary = perfkit.summarize(perfkit.load(FIXTURE_RUNS["legacy_run_2"]))
    assert "panels" not in summary  # runs keep their JSON: built-in panels' forms are the summary's own keys


# ---------------------------------------------------------------------------------------------------------
# Broken plugins and readers that break the schema


@pytest.mark.parametrize("group, module", [
    (plugins.READERS, "import perfkit_test_not_installed\n"),
    (plugins.PANELS, "raise RuntimeError('chart plugin misconfigured')\n"),
    (plugins.READERS, "READER = 42\n"),
])
def test_a_plugin_that_fails_to_import_is_one_warning_and_the_rest_loads(tmp_path, monkeypatch, group, module):
    install(tmp_path / "site", monkeypatch, "perfkit_test_broken", {"broken.py": module},
            {group: {"broken": "perfkit_test_broken.broken:THING"}})
    result = CliRunner().invoke(main, ["summary", str(FIXTURE_RUNS["legacy_run_2"])])
    assert result.exit_code == 0 and "Traceback" not in result.output
    said = [line for line in result.output.splitlines() if "perfkit_test_broken" in line]
    assert len(said) == 1 and said[0].startswith("warning: plugin broken = perfkit_test_broken.broken:THING")
    assert "steps (" in result.output  # the run itself is all there


# One package whose readers, panels and rules break in the same ways: they are said in the same words.
BROKEN_EVERYWHERE = {
    "broken.py": "raise RuntimeError('misconfigured')\n",
    "taken.py": """
from perfkit.advisor import rule
from perfkit.io.formats.base import Reader
from perfkit.views.ids import BOUND
from perfkit.views.panel import FIGURE, Panel

READER = Reader(name="cpu", provides=frozenset({"steps"}), detect=lambda folder: False, read=lambda folder: {})
PANELS = [Panel(BOUND, "Mine", "/", FIGURE, content=lambda run: None)]

@rule("tail")
def tail(run):
    return []
""",
}


@pytest.mark.parametrize("module, reason", [
    ("broken", "importing it raised RuntimeError: misconfigured; left out"),
    ("taken", "{noun} {name!r} is taken; left out"),
])
def test_a_broken_reader_panel_or_rule_plugin_is_worded_one_way(tmp_path, monkeypatch, module, reason):
    """perfkit/core/plugins.py loads the three groups and words their failures: the reader's warning, the
    panel's and the rule's `advise` line differ only in what the plugin gave."""
    from perfkit.advisor.registry import installed_rules
    target = f"perfkit_test_every.{module}"
    install(tmp_path / "site", monkeypatch, "perfkit_test_every", BROKEN_EVERYWHERE,
            {plugins.READERS: {"a_reader": f"{target}:READER"}, plugins.PANELS: {"a_panel": f"{target}:PANELS"},
             plugins.RULES: {"a_rule": target}})
    said = {"reader": formats.plugin_problems(), "panel": panel.plugin_problems(),
            "rule": tuple(f"{name}: {why}" for name, why in installed_rules()[1].items())}
    taken = {"reader": "cpu", "panel": panel_ids.BOUND, "rule": "tail"}
    target = {"reader": f"{target}:READER", "panel": f"{target}:PANELS", "rule": target}
    assert said == {noun: (f"plugin a_{noun} = {target[noun]} from perfkit_test_every 0.1: "
                           + reason.format(noun=noun, name=taken[noun]),) for noun in said}
    assert [reader.name for reader in formats.readers()] == [reader.name for reader in formats.READERS]
    assert [item.id for item in panel.installed()] == [] and installed_rules()[0] == ()


RAISING_CHART = '''
from perfkit.views.panel import FIGURE, Panel

def fail(value):
    raise KeyError("no such column")

PANELS = [Panel("fig-raising", "Raising", "/", FIGURE, content=fail, data=fail, text=fail, note=fail)]
'''


def test_a_chart_that_raises_is_one_warning_and_every_view_still_renders(tmp_path, monkeypatch):
    from plotly.utils import PlotlyJSONEncoder

    from perfkit.dashboards.layout import run_page
    from perfkit.render.report import render_report

    install(tmp_path / "site", monkeypatch, "perfkit_test_raising_chart", {"chart.py": RAISING_CHART},
            {plugins.PANELS: {"raising": "perfkit_test_raising_chart.chart:PANELS"}})
    folder = FIXTURE_RUNS["legacy_run_2"]
    summary = json.loads(CliRunner().invoke(main, ["summary", "--format", "json", str(folder)]).output)
    said = [w for w in summary["warnings"] if "raising" in w]
    assert said == ["plugin raising = perfkit_test_raising_chart.chart:PANELS from perfkit_test_raising_chart 0.1: "
                    "panel 'fig-raising' data raised KeyError: 'no such column'"]
    assert summary["panels"] == {"fig-raising": None}
    text = CliRunner().invoke(main, ["summary", str(folder)])
    assert text.exit_code == 0 and "Traceback" not in text.output and "steps (" in text.output
    run = perfkit.load(folder)
    failure = "panel 'fig-raising' content raised KeyError"
    assert failure in json.dumps(run_page("/", run, 0), cls=PlotlyJSONEncoder)
    assert html.escape(failure) in render_report([run])


RAISING_READER = '''
from perfkit.io.formats.base import Reader

def read(folder):
    raise ZeroDivisionError("division by zero in the plugin")

READER = Reader(name="raising", provides=frozenset({"steps"}), detect=lambda f: (f / "step_totals.csv").is_file(),
                read=read)
'''


def test_a_plugin_reader_that_raises_is_one_warning_or_one_line(tmp_path, monkeypatch):
    run_path = cpu_run_with_step_log(tmp_path, [5.0])
    install(tmp_path / "site", monkeypatch, "perfkit_test_raising", {"layout.py": RAISING_READER},
            {plugins.READERS: {"raising": "perfkit_test_raising.layout:READER"}})
    run = perfkit.load(run_path)
    said = [w for w in run.warnings if "raising" in w]
    assert len(said) == 1 and "reading this folder raised ZeroDivisionError" in said[0]
    assert len(run.steps) == CPU_RUN_STEPS
    alone = step_log_alone(tmp_path)
    line = one_line_error(alone)
    assert line.startswith(f"perfkit: error: {alone}: plugin raising = ") and "raised ZeroDivisionError" in line


BREAKING_READER = '''
import pandas as pd
from perfkit.io.formats.base import Parts, Reader

def read(folder):
    # "time" where the schema says total_ms: the table breaks the steps schema
    return {0: Parts(tables={"steps": pd.read_csv(folder / "step_totals.csv").rename(columns={"total_ms": "time"})},
                     sources=[str(folder / "step_totals.csv")])}

READER = Reader(name="breaking", provides=frozenset({"steps"}), detect=lambda f: (f / "step_totals.csv").is_file(),
                read=read, fills=frozenset({"steps"}))
'''


@pytest.mark.parametrize("name, source, problem", [
    ("breaking", BREAKING_READER, "gave table 'steps' without column(s) total_ms (read from step_totals.csv)"),
    # values of the wrong kind, from a reader that does not merely fill steps: its table is left out before it
    # can take precedence (had it won, the op-derived steps would be lost)
    ("values", BREAKING_READER.replace('.rename(columns={"total_ms": "time"})', '.assign(warmup=[[1], [2]])')
     .replace(', fills=frozenset({"steps"})', ''), "gave table 'steps' whose column 'warmup' holds values that "
                                                   "are not boolean"),
])
def test_a_reader_table_that_breaks_the_schema_is_one_line_naming_file_and_reader(tmp_path, monkeypatch, name,
                                                                                  source, problem):
    install(tmp_path / "site", monkeypatch, f"perfkit_test_{name}", {"layout.py": source},
            {plugins.READERS: {name: f"perfkit_test_{name}.layout:READER"}})
    alone = step_log_alone(tmp_path)
    line = one_line_error(alone)
    assert line.startswith(f"perfkit: error: {alone}: the breaking reader (plugin {name} = ") and problem in line
    # beside a run that loads: one warning (what the reader read there is skipped), and the run's own steps
    run = perfkit.load(cpu_run_with_step_log(tmp_path, [5.0, 6.0]))
    said = [w for w in run.warnings if "breaking reader" in w]
    assert len(said) == 1 and said[0].startswith("skipped ") and problem in said[0]
    assert len(run.steps) == CPU_RUN_STEPS


# ---------------------------------------------------------------------------------------------------------
# Caches


def test_a_changed_plugin_makes_kept_answers_and_cached_runs_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PERFKIT_NO_CACHE")
    install(tmp_path / "site", monkeypatch, "perfkit_test_chart", {"chart.py": CHART},
            {plugins.PANELS: {"steps-per-rank": "perfkit_test_chart.chart:PANELS"}})
    assert tmp_path / "site" / "perfkit_test_chart" in plugins.code_paths()
    folder = str(FIXTURE_RUNS["legacy_run_2"])
    computed = []
    original = cache.store_read_answer  # summary keeps its answer with what it read
    monkeypatch.setattr(cache, "store_read_answer", lambda entry, output, *rest: computed.append(output) or
                        original(entry, output, *rest))
    CliRunner().invoke(main, ["summary", folder])
    CliRunner().invoke(main, ["summary", folder])
    assert len(computed) == 1
    chart = tmp_path / "site" / "perfkit_test_chart" / "chart.py"
    chart.write_text(chart.read_text().replace("profiled steps per rank", "steps profiled per rank"))
    del sys.modules["perfkit_test_chart.chart"]
    forget_plugins()  # a new process, as after the user edits the plugin
    output = CliRunner().invoke(main, ["summary", folder]).output
    assert len(computed) == 2 and "steps profiled per rank" in output


# ---------------------------------------------------------------------------------------------------------
# The rest of the reader protocol: run-wide tables, raw-data hints, values broken in perfkit's own readers


RUN_WIDE_READER = '''
import pandas as pd
from perfkit.io.formats.base import RUN_WIDE, Parts, Reader

def read(folder):
    # one file for the whole run: step totals with a rank column, and a table without one
    steps = pd.read_csv(folder / "cluster_steps.csv")
    queue = pd.DataFrame({"batch": [1, 2], "size": [0, 4], "capacity": [8, 8]})
    return {RUN_WIDE: Parts(tables={"steps": steps, "host_queue": queue})}

def hint(root):
    found = sorted(root.glob("*.nsys-rep"))
    return f"holds {found[0].name}, a trace this reader cannot read; export it first" if found else None

READER = Reader(name="cluster_log", provides=frozenset({"steps", "host_queue"}),
                detect=lambda f: (f / "cluster_steps.csv").is_file(), read=read, raw_data_hint=hint)
'''


def test_run_wide_tables_are_split_by_rank_or_given_to_every_rank(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, "perfkit_test_cluster", {"layout.py": RUN_WIDE_READER},
            {plugins.READERS: {"cluster": "perfkit_test_cluster.layout:READER"}})
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "cluster_steps.csv").write_text("rank,step,total_ms\n0,1,10.0\n0,2,11.0\n3,1,12.0\n3,2,13.5\n")
    run = perfkit.load(folder)
    assert run.ranks == [0, 3]
    assert run.steps.groupby("rank")["total_ms"].sum().to_dict() == {0: 21.0, 3: 25.5}
    assert run.host_queue.groupby("rank")["size"].sum().to_dict() == {0: 4, 3: 4}  # given to every rank


def test_every_readers_raw_data_hint_is_asked(tmp_path, monkeypatch):
    install(tmp_path / "site", monkeypatch, "perfkit_test_cluster", {"layout.py": RUN_WIDE_READER},
            {plugins.READERS: {"cluster": "perfkit_test_cluster.layout:READER"}})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report1.nsys-rep").write_bytes(b"\0")
    result = CliRunner().invoke(main, ["summary", str(tmp_path / "run")])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert "holds report1.nsys-rep, a trace this reader cannot read; export it first" in result.output
    (tmp_path / "run" / "report1.nsys-rep").unlink()
    result = CliRunner().invoke(main, ["summary", str(tmp_path / "run")])
    assert "no MindSpore profiler files found" in result.output and "gpu_op_*" in result.output


def test_values_a_builtin_reader_breaks_are_found_per_piece_when_the_table_fails(tmp_path):
    """perfkit's own readers' values are coerced once per table; when that fails, the broken piece is found
    and left out with a warning naming its reader and folder, the other ranks' pieces kept."""
    import pandas as pd

    from perfkit.io.assembly import combine
    good = pd.DataFrame({"step": [1], "total_ms": [2.0]})
    bad = pd.DataFrame({"step": [1], "total_ms": [3.0], "warmup": [[1]]})
    legacy = formats.by_name("legacy")
    steps, said = combine(tmp_path, "steps", [(0, good, (tmp_path / "r0", legacy)),
                                               (1, bad, (tmp_path / "r1", legacy))])
    assert steps["rank"].tolist() == [0] and steps["total_ms"].tolist() == [2.0]
    assert len(said) == 1 and said[0][0] == "r1"
    assert said[0][1].startswith("the legacy reader: table 'steps' column 'warmup' holds values that are not boolean")


# ---------------------------------------------------------------------------------------------------------
# A reader that declares its traces: its timeline in `perfkit trace` and on the dashboard's Timeline page

TRACING_READER = '''
import json
from pathlib import Path
import pandas as pd
from perfkit.io.formats.base import Parts, Reader, TraceFile

def detect(folder: Path) -> bool:
    return (folder / "tracer.json").is_file()

def read(folder: Path) -> dict:
    steps = pd.DataFrame(json.loads((folder / "tracer.json").read_text()))
    return {3: Parts(tables={"steps": steps}, meta={"device": "TPU"}, sources=[str(folder / "tracer.json")])}

def traces(folder: Path) -> list:
    return [TraceFile(3, folder / "timeline.json", folder)]

READER = Reader(name="tracer", provides=frozenset({"steps"}), detect=detect, read=read, traces=traces,
                looks_for="tracer.json")
'''
TRACED_OPS = ("tpu/Conv2D-op1", "tpu/AllReduce-op2")


def traced_run(tmp_path: Path, monkeypatch) -> Path:
    """A folder only the tracer plugin reads: two steps, and its Chrome trace of them (ProfilerStep#N markers)."""
    install(tmp_path / "site", monkeypatch, "perfkit_test_tracer", {"layout.py": TRACING_READER},
            {plugins.READERS: {"tracer": "perfkit_test_tracer.layout:READER"}})
    run = tmp_path / "run"
    run.mkdir()
    (run / "tracer.json").write_text(json.dumps({"step": [1, 2], "total_ms": [0.1, 0.1]}))
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "TPU cores"}},
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 5, "args": {"name": "core 5"}}]
    for step in (1, 2):
        start = 1000.0 * step
        events.append({"ph": "X", "name": f"ProfilerStep#{step}", "pid": 2, "tid": 1, "ts": start, "dur": 100.0})
        events += [{"ph": "X", "name": name, "pid": 1, "tid": 5, "ts": start + 10 + 40 * number, "dur": 30.0}
                   for number, name in enumerate(TRACED_OPS)]
    (run / "timeline.json").write_text(json.dumps(events))
    return run


def test_a_plugin_readers_trace_is_cut_by_perfkit_trace(tmp_path, monkeypatch):
    run = traced_run(tmp_path, monkeypatch)
    out = tmp_path / "step2.json"
    result = CliRunner().invoke(main, ["trace", str(run), "--step", "2", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.endswith(f"wrote {out}: 3 events\n")  # the step's marker and its two ops
    exported = [event for event in json.loads(out.read_text()) if event["ph"] == "X"]
    assert sorted((event["name"], event["ts"]) for event in exported) == [
        ("ProfilerStep#2", 2000.0), ("tpu/AllReduce-op2", 2050.0), ("tpu/Conv2D-op1", 2010.0)]
    processes = {event["args"]["name"] for event in json.loads(out.read_text()) if event["name"] == "process_name"}
    assert "rank 3: TPU cores" in processes


def test_a_plugin_readers_trace_is_drawn_on_the_timeline_page(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from dash_load import callback_body

    from perfkit.dashboards import create_app
    run = traced_run(tmp_path, monkeypatch)
    client = create_app([perfkit.load(run)]).server.test_client()
    dependencies = {d["output"]: d for d in client.get("/_dash-dependencies").get_json()}
    poll = next(d for output, d in dependencies.items() if "timeline-status.children" in output)
    draw = dependencies["timeline-body.children"]

    def call(dependency, values, changed):
        reply = client.post("/_dash-update-component", data=callback_body(dependency, values, changed),
                            content_type="application/json")
        assert reply.status_code == 200, reply.data
        return reply.get_json()["response"]

    for _ in range(200):  # the index is built in a thread; the page polls until it is there
        state = call(poll, {"timeline-poll.n_intervals": 1, "url.search": "?run=0&step=2"},
                     ["timeline-poll.n_intervals"])
        if state["timeline-poll"]["disabled"]:
            break
        time.sleep(0.05)
    assert state["timeline-status"]["children"] == ""  # no error, no warning
    assert state["timeline-step"] == {"options": [{"label": "1", "value": 1}, {"label": "2", "value": 2}], "value": 2}
    assert state["timeline-ranks"]["value"] == [3]
    body = call(draw, {"timeline-step.value": 2, "timeline-ranks.value": [3], "url.search": "?run=0&step=2"},
                ["timeline-step.value"])
    figure = body["timeline-body"]["children"]["props"]["figure"]
    drawn = {trace["name"]: [row[0] for row in trace["customdata"]] for trace in figure["data"]}
    assert figure["layout"]["title"]["text"].startswith("step 2 · ")
    assert {name for names in drawn.values() for name in names} >= set(TRACED_OPS)
    assert "tpu/AllReduce-op2" in drawn["communication"] and "tpu/Conv2D-op1" in drawn["compute"]


def test_a_plugin_reader_whose_traces_raise_is_one_line_naming_it(tmp_path, monkeypatch):
    run = traced_run(tmp_path, monkeypatch)
    layout = tmp_path / "site" / "perfkit_test_tracer" / "layout.py"
    layout.write_text(layout.read_text().replace('    return [TraceFile(3, folder / "timeline.json", folder)]',
                                                 '    raise KeyError("rank")'))
    forget_plugins()
    sys.modules.pop("perfkit_test_tracer.layout", None)
    result = CliRunner().invoke(main, ["trace", str(run), "--step", "2", "-o", str(tmp_path / "out.json")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert result.output.startswith(f"perfkit: error: {run}: plugin tracer = perfkit_test_tracer.layout:READER from "
                                    "perfkit_test_tracer 0.1: listing its traces raised KeyError")


def test_installed_plugins_are_looked_for_once_per_sys_path(monkeypatch, tmp_path):
    """A cold answer asks for the entry points 3-5 times: sys.path's folders are listed once, and again only when
    sys.path changes or perfkit forgets its plugins."""
    import os

    listed = []
    real = os.scandir
    monkeypatch.setattr(plugins.os, "scandir", lambda folder: listed.append(folder) or real(folder))

    def each_folder():
        return [folder or "." for folder in sys.path]

    forget_plugins()
    plugins._entry_point_files()
    plugins._entry_point_files()
    assert listed == each_folder()
    monkeypatch.syspath_prepend(str(tmp_path))
    listed.clear()
    plugins._entry_point_files()
    assert listed == each_folder() and listed[0] == str(tmp_path)
    listed.clear()
    plugins._entry_point_files()
    assert listed == []
    forget_plugins()
    plugins._entry_point_files()
    assert listed == each_folder()

"""Every view shows the run's status and warnings in one place (the run panel: `perfkit summary`'s first lines, the
report's and the dashboard's Overview), a failed run's recorded failure, one wording of the step interval, the
Compare step split of a run with totals only, a short `repr`, `perfkit.show` outside Jupyter, plotly.js once per
notebook kernel, and `perfkit dash`/`report` over a tune folder's repeats.

Real runs (tests/runs, each with its SOURCE.txt): cpu_2_10_failed (a script that failed before its first step),
cpu_2_10_ctrlc (Ctrl-C after 6 steps), cpu_2_10_slowdata (data-bound), cpu_2_10_pynative (steps with
totals only), cpu_2_10_speedpair (two settings, three repeats each). Expected values are read from perfkit_run.json."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.apps.cli import main
from perfkit.render import notebook, report
from perfkit.views import ids, numbers
from perfkit.views.compare import compare, verdict_headline
from perfkit.views.figures.compare import compare_speedup_cards, compare_steps_figure
from perfkit.views.figures.overview import step_trace_figure

RUNS = Path(__file__).resolve().parent / "runs"
FAILED, INTERRUPTED, SLOWDATA = RUNS / "cpu_2_10_failed", RUNS / "cpu_2_10_ctrlc", RUNS / "cpu_2_10_slowdata"
PAIR = RUNS / "cpu_2_10_speedpair"


def manifest(folder: Path) -> dict:
    return json.loads((folder / "perfkit_run.json").read_text())


def test_summary_of_a_run_that_failed_before_profiling_says_its_recorded_failure():
    recorded = manifest(FAILED)
    assert recorded["status"] == "failed" and recorded["steps"] == []
    result = CliRunner().invoke(main, ["summary", str(FAILED)])
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in result.output
    assert message == f"perfkit: error: {FAILED}: run failed ({recorded['error']}): no profiled step was completed"
    assert "no MindSpore profiler files found" not in message


def test_the_terminal_shows_status_and_warnings_first():
    recorded = manifest(INTERRUPTED)
    text = CliRunner().invoke(main, ["summary", str(INTERRUPTED)]).output.splitlines()
    assert text[:2] == [f"run      {INTERRUPTED}", "layout   cpu   device CPU   ranks [0]"]
    assert text[2].startswith(f"mode     {recorded['used']['mode']}   data feed   amp ")
    assert text[2].endswith(f"   mindspore {recorded['mindspore_version']}")
    assert text[3:5] == [f"status   {recorded['status']}",
                         f"warning: run was interrupted: data up to step {len(recorded['steps'])}"]
    assert sum(line.startswith("warning: ") for line in text) == len(perfkit.summarize(perfkit.load(INTERRUPTED))
                                                                   ["warnings"])  # said once, in that one place


def test_the_report_shows_the_run_panel_with_status_and_every_warning():
    run = perfkit.load(INTERRUPTED)
    page = report.render_report([run])
    section = page[page.index('<section id="run-0">'):]
    assert section.index(">Run</h2>") < section.index('class="kpis"')  # first, above the cards
    assert '<span class="status-bad">interrupted</span>' in section
    assert '<span class="label">mindspore</span> <span class="">2.10.0</span>' in section
    for warning in perfkit.summarize(run)["warnings"]:
        assert f"<li>{warning}</li>" in section


def _texts_and_classes(component) -> list[str]:
    """Every text and class name in a Dash component tree."""
    if isinstance(component, str):
        return [component]
    found = [getattr(component, "className", None) or ""]
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children] if children is not None else []:
        found += _texts_and_classes(child)
    return found


def test_the_dashboard_overview_shows_the_same_run_panel():
    pytest.importorskip("dash")
    from perfkit.dashboards import layout
    run = perfkit.load(INTERRUPTED)
    page = layout.run_page("/", run, 0)
    assert getattr(page[0], "id", None) == ids.RUN_STATUS  # first on the Overview
    shown = _texts_and_classes(page[0])
    assert "status-bad" in shown and "interrupted" in shown and "2.10.0" in shown
    assert all(warning in shown for warning in perfkit.summarize(run)["warnings"])


def test_the_step_interval_is_worded_as_the_terminal_words_it():
    run = perfkit.load(SLOWDATA)
    assert perfkit.summarize(run)["bound"]["kind"] == "data"
    cli = CliRunner().invoke(main, ["summary", str(SLOWDATA)]).output
    assert "step interval (data wait)" in cli
    cards = {card.key: card.label for card in numbers.headline_cards(run)}
    trace = {bar.name for bar in step_trace_figure(run).data}
    assert cards["interval"] == "step interval (data wait)" and "step interval (data wait)" in trace
    assert not any("device idle" in label for label in [*cards.values(), *trace])


def test_the_compare_step_split_draws_a_run_with_totals_only():
    split, totals_only = perfkit.load(PAIR / "layers2" / "repeat_1"), perfkit.load(RUNS / "cpu_2_10_pynative")
    assert numbers.step_split(totals_only) == () and numbers.step_split(split)
    figure = compare_steps_figure([split, totals_only])
    whole = next(bar for bar in figure.data if bar.name == "step total (not split)")
    expected = perfkit.summarize(totals_only)["steps"]["total_ms"]
    assert list(whole.y) == [None, pytest.approx(expected)]


def test_a_run_prints_in_one_short_line():
    run = perfkit.load(INTERRUPTED)
    recorded = manifest(INTERRUPTED)
    shown = repr(run)
    assert len(shown) < 200 and "\n" not in shown and str(run) == shown
    assert shown == (f"Run({str(INTERRUPTED)!r}, layout=cpu, ranks=[0], steps={len(recorded['steps'])}, "
                     f"mode={recorded['used']['mode']}, status={recorded['status']})")


def test_show_outside_jupyter_prints_the_terminal_text(capsys):
    run = perfkit.load(INTERRUPTED)
    perfkit.show(run)
    out = capsys.readouterr().out
    assert out.startswith(f"run      {INTERRUPTED}\n") and "status   interrupted" in out
    assert "object at 0x" not in out and "<IPython" not in out


def test_plotly_js_goes_into_the_first_output_with_figures_only(monkeypatch):
    monkeypatch.setattr(notebook, "_PLOTLY_SENT", set())
    bundle = report.PLOTLY_BUNDLE.read_text(encoding="utf-8")
    run = perfkit.load(SLOWDATA)
    outputs = [notebook.run_html(run), notebook.summary_html(perfkit.summarize(run)), notebook.run_html(run)]
    assert [bundle in output for output in outputs] == [True, False, False]
    assert all("Plotly.newPlot" in output for output in outputs)
    assert notebook.NO_PLOTLY in outputs[1]  # said where the page turns out to hold none
    assert sum(len(output) for output in outputs) < len(bundle) * 1.5


def _tune_folder(tmp_path: Path) -> Path:
    """A tune session's layout (baseline/, exp_01_*/ with repeat_N folders and the record files tune keeps beside
    each: repeat_N.log, repeat_N.applied.json) made of the real speedpair repeats."""
    tune = tmp_path / "perfkit_tune"
    for side, source in (("baseline", "layers4"), ("exp_01_layers-2", "layers2")):
        for number in (1, 2, 3):
            shutil.copytree(PAIR / source / f"repeat_{number}", tune / side / f"repeat_{number}")
            (tune / side / f"repeat_{number}.log").write_text("trained\n")
            (tune / side / f"repeat_{number}.applied.json").write_text("{}\n")
    return tune


def test_dash_over_a_tune_folder_glob_groups_repeats_and_shows_the_verdict(tmp_path, monkeypatch, uncached):
    pytest.importorskip("dash")
    from perfkit.dashboards import app
    tune = _tune_folder(tmp_path)
    served = {}
    monkeypatch.setattr(app, "check_port", lambda host, port: None)
    monkeypatch.setattr(app, "serve", lambda runs, **options: served.setdefault("runs", runs))
    given = sorted(str(path) for path in tune.glob("*/repeat_*"))  # what the shell makes of TUNEDIR/*/repeat_*
    assert any(path.endswith(".log") for path in given)
    result = CliRunner().invoke(main, ["dash", *given])
    assert result.exit_code == 0, result.output
    assert "left out" not in result.stderr
    runs = served["runs"]
    assert [Path(run.path).name for run in runs] == ["repeat_1", "repeat_2", "repeat_3"] * 2
    baseline, candidate = compare_speedup_cards(runs)
    assert (baseline.label, candidate.label) == ("baseline (3 repeats)", "exp_01_layers-2 (3 repeats)")
    judged = compare(runs[0], runs[3], runs[1:3], runs[4:])  # as perfkit compare TUNE/baseline TUNE/exp_01_...
    assert judged["verdict"]["basis"] == "run means" and judged["verdict"]["n_a"] == 3
    assert candidate.value == verdict_headline(judged) and not re.fullmatch(r"[\d.]+x", candidate.value)
    assert f"speedup {judged['speedup']:.2f}x" in candidate.note


def test_dash_over_folders_of_repeats_and_a_broken_run_leaves_that_one_out(tmp_path, monkeypatch, uncached):
    pytest.importorskip("dash")
    from perfkit.dashboards import app
    served = {}
    monkeypatch.setattr(app, "check_port", lambda host, port: None)
    monkeypatch.setattr(app, "serve", lambda runs, **options: served.setdefault("runs", runs))
    result = CliRunner().invoke(main, ["dash", str(PAIR / "layers4"), str(PAIR / "layers2"), str(FAILED)])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (f"perfkit: warning: left out {FAILED}: run failed "
                                             f"({manifest(FAILED)['error']}): no profiled step was completed")
    labels = [card.label for card in compare_speedup_cards(served["runs"])]
    assert labels == ["layers4 (3 repeats)", "layers2 (3 repeats)"]


def test_a_failed_repeat_is_left_out_of_its_series_as_perfkit_compare_leaves_it_out(tmp_path, uncached):
    for side, source in (("a", "layers4"), ("b", "layers2")):
        for number in (1, 2, 3):
            shutil.copytree(PAIR / source / f"repeat_{number}", tmp_path / side / f"repeat_{number}")
    failed = tmp_path / "b" / "repeat_2" / "perfkit_run.json"  # marked failed, explicitly: its data still loads
    failed.write_text(json.dumps({**manifest(failed.parent), "status": "failed", "error": "RuntimeError: boom"}))
    given = sorted(str(path) for path in tmp_path.glob("*/repeat_*"))
    runs = [perfkit.load(path) for path in given]
    assert runs[4].meta.status == "failed"
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"])
    judged = json.loads(result.stdout)
    assert judged["verdict"]["n_b"] == 2
    candidate = compare_speedup_cards(runs)[1]
    assert candidate.label == "b (2 repeats)" and candidate.value == verdict_headline(judged)

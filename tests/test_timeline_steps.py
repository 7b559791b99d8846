"""One step definition on the timeline (issue 37, item 7 and the Timeline's part of item 13): the Timeline's and
`perfkit trace`'s steps are the loader's (perfkit profile's recorded bounds first, else the op runs with each step
starting where the one before it ended), the page draws the step ledger's split above the trace (a data-bound
step's data wait, though no event covers it), opens on the first steady step, names the Scope Layer's rows, and
shows how busy a merged bar is. Checked against the real runs' raw files, read with json and csv."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.apps.cli import main
from perfkit.io import timeline as tl
from perfkit.views.figures import timeline as figures

RUNS = REPO / "tests" / "runs"
DATA_BOUND = RUNS / "cpu_2_10_data_wait"
PYNATIVE = RUNS / "cpu_2_10_pynative_steps"
DATA_BOUND_STEP = 5


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)


def recorded_ns(run: Path) -> dict[int, tuple[int, int]]:
    """{step: (begin_ns, end_ns)} of perfkit_run.json (epoch ns, exact as integers)."""
    steps = json.loads((run / "perfkit_run.json").read_text())["steps"]
    return {s["step"]: (s["begin_ns"], s["end_ns"]) for s in steps}


def recorded(run: Path) -> dict[int, tuple[float, float]]:
    """{step: (begin_us, end_us)}: epoch µs as float64 holds them, to 0.25 µs."""
    return {step: (begin / 1000, end / 1000) for step, (begin, end) in recorded_ns(run).items()}


def executions(run: Path) -> list[tuple[str, int, float]]:
    """(op name, start ns, duration ms) of every op run in FRAMEWORK/cpu_op_execute_timestamp_0.txt."""
    text = next(run.rglob("cpu_op_execute_timestamp_0.txt")).read_text()
    found = []
    for line in text.splitlines():
        name, _, runs = line.split(";", 2)
        for one in runs.split():
            start, duration, _ = one.split(",")
            found.append((name, int(start), float(duration)))
    return found


def test_recorded_steps_are_the_timeline_s_steps():
    """A data-bound run under perfkit profile: the timeline's step N is the recorded step N (the summary's),
    137 ms with its data wait, not the 0.7 ms its ops span."""
    found = tl.index(DATA_BOUND)
    steps = {step: (start, end) for step, start, end in found.ranks[0]["steps"]}
    assert sorted(steps) == sorted(recorded(DATA_BOUND))
    for step, bounds in recorded(DATA_BOUND).items():
        assert steps[step] == pytest.approx(bounds, abs=0.5)
    events = perfkit.timeline(DATA_BOUND, step=DATA_BOUND_STEP)
    begin, end = recorded(DATA_BOUND)[DATA_BOUND_STEP]
    assert events.attrs["window_us"][0] == pytest.approx((begin, end))
    assert end - begin > 100_000  # ~4 ms a sample, 32 samples: the wait is the step
    run = perfkit.load(DATA_BOUND)
    total = run.steps.set_index("step").loc[DATA_BOUND_STEP, "total_ms"]
    assert (end - begin) / 1000 == pytest.approx(total, abs=1e-3)


def test_a_pynative_run_s_recorded_steps_reach_perfkit_trace(tmp_path):
    """29 steps recorded by prof.step() in a PyNative loop: `perfkit trace --step 3` writes step 3's events (it
    said "no step markers" and exited 2)."""
    out = tmp_path / "step3.json"
    result = CliRunner().invoke(main, ["trace", str(PYNATIVE), "--step", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    begin, end = recorded(PYNATIVE)[3]
    names = {name for name, start, _ in executions(PYNATIVE) if begin * 1000 <= start < end * 1000}
    written = [event for event in json.loads(out.read_text()) if event["ph"] == "X"]
    ops = {event["name"] for event in written if event.get("args", {}).get("type") == "HostCpuOps"}
    assert ops == names and len(names) > 5
    assert all(event["ts"] + event["dur"] > begin and event["ts"] < end for event in written)
    assert tl.index(PYNATIVE).steps() == sorted(recorded(PYNATIVE)) == list(range(1, 30))


def test_steps_from_op_runs_begin_where_the_step_before_ended():
    """Graph mode without recorded bounds (the loader's rule): a step's window holds the gap before its first op,
    so its length is the loader's step total; the windows tile the trace."""
    fixture = FIXTURE_RUNS["cpu_2_10"]
    steps = tl.index(fixture).ranks[0]["steps"]
    totals = perfkit.load(fixture).steps.set_index("step")["total_ms"]
    for (_, _, previous_end), (step, start, end) in zip(steps, steps[1:]):
        assert start == previous_end
        assert (end - start) / 1000 == pytest.approx(totals[step], abs=1e-3)


def test_the_step_band_shows_a_data_bound_step_s_data_wait():
    """The band above the trace: the data wait from the step's recorded start to its first forward op (the raw
    timestamps' first `Default/` op of the step), then forward+backward and the tail, filling the step."""
    run = perfkit.load(DATA_BOUND)
    events = perfkit.timeline(run, step=DATA_BOUND_STEP)
    band = figures.step_band(run, events, DATA_BOUND_STEP)
    begin, end = recorded(DATA_BOUND)[DATA_BOUND_STEP]
    begin_ns, end_ns = recorded_ns(DATA_BOUND)[DATA_BOUND_STEP]
    first_forward = min(start for name, start, _ in executions(DATA_BOUND)
                        if begin_ns <= start < end_ns and name.startswith("Default/") and "/optimizer" not in name)
    wait = band.iloc[0]
    assert wait["name"].startswith("data wait (queue evidence)") and wait["category"] == "data"
    assert wait["start_us"] == pytest.approx(begin, abs=0.5)
    assert wait["dur_us"] == pytest.approx((first_forward - begin_ns) / 1000, abs=0.01)
    assert wait["dur_us"] > 0.9 * (end - begin)
    assert band["dur_us"].sum() == pytest.approx((end_ns - begin_ns) / 1000, abs=0.01)
    fig = figures.timeline_figure(events, band=band)
    data = [trace for trace in fig.data if trace.name == "data"]
    assert data and any(" · step ledger · " in row for row in data[0].y)


def test_a_pynative_step_s_band_names_its_dispatch_gaps():
    """A PyNative step has no split: its band is one bar naming the ledger's causes, host dispatch first."""
    run = perfkit.load(PYNATIVE)
    band = figures.step_band(run, perfkit.timeline(run, step=3), 3)
    begin, end = recorded_ns(PYNATIVE)[3]
    assert len(band) == 1 and band.iloc[0]["dur_us"] == pytest.approx((end - begin) / 1000, abs=0.01)
    assert band.iloc[0]["name"].split(": ", 1)[1].startswith("host: PyNative dispatch")


def test_the_timeline_opens_on_the_first_steady_step():
    """Step 1 of the data-bound run compiles (over 1.5x the median of the others in the raw recorded bounds):
    the page opens on step 2."""
    bounds = recorded(DATA_BOUND)
    lengths = {step: end - begin for step, (begin, end) in bounds.items()}
    assert lengths[1] > 1.5 * statistics.median(length for step, length in lengths.items() if step != 1)
    assert figures.opening_step(perfkit.load(DATA_BOUND), tl.index(DATA_BOUND).steps()) == 2


def test_scope_layer_rows_are_named_for_the_cell_scopes():
    events = perfkit.timeline(DATA_BOUND, step=DATA_BOUND_STEP)
    rows = set(figures.timeline_figure(events).layout.yaxis.categoryarray)
    assert not any("Scope Layer" in row for row in rows)
    assert "rank 0 · Cell scopes · depth 1" in rows


def test_a_merged_bar_shows_how_busy_it_is():
    """The PyNative run's whole trace with few bars allowed: each merged bar says the share of it its ops fill,
    and is drawn that opaque (its gaps were one solid compute bar)."""
    events = perfkit.timeline(PYNATIVE)
    bars, merged = figures.timeline_bars(events, max_bars=50)
    several = bars[bars["count"] > 1]
    assert merged > 0 and len(several)
    for _, bar in several.iterrows():
        inside = events[(events["lane_order"] == bar["lane_order"]) & (events["ph"] == "X")
                        & (events["start_us"] >= bar["start_us"] - 1)
                        & (events["start_us"] + events["dur_us"] <= bar["start_us"] + bar["dur_us"] + 1)]
        assert bar["busy"] <= 1.0
        assert f"busy {bar['busy']:.0%}" in bar["name"]
        assert bar["busy"] * bar["dur_us"] <= inside["dur_us"].sum() + 1
    compute = [trace for trace in figures.timeline_figure(events, max_bars=50).data if trace.name == "compute"][0]
    assert min(compute.marker.opacity) < 0.9


def test_a_scope_span_cut_at_the_step_does_not_cover_its_data_wait():
    """MindSpore joins the last ops of step 4 and the first of step 5 (both `Default`) into one Scope Layer span
    that covers step 5's 138 ms data wait: cut at the step, it starts with the step's first op."""
    events = perfkit.timeline(DATA_BOUND, step=DATA_BOUND_STEP)
    begin_ns, end_ns = recorded_ns(DATA_BOUND)[DATA_BOUND_STEP]
    first_op_us = min(start for _, start, _ in executions(DATA_BOUND) if begin_ns <= start < end_ns) / 1000
    bars = figures.complete_events(events)
    scopes = bars[bars["category"] == "scope"]
    assert scopes["full_dur_us"].notna().any()  # the joined span is there, and cut
    assert scopes["start_us"].min() == pytest.approx(first_op_us, abs=0.5)


def test_recorded_steps_of_another_clock_are_not_used(tmp_path):
    """A recording whose steps meet none of the trace's events (another clock, another process's run) is not the
    timeline's: the steps come from the op runs, as without one."""
    import shutil
    run = tmp_path / "run"
    shutil.copytree(DATA_BOUND, run)
    manifest = json.loads((run / "perfkit_run.json").read_text())
    for step in manifest["steps"]:
        step["begin_ns"] += 86_400 * 10**9
        step["end_ns"] += 86_400 * 10**9
    (run / "perfkit_run.json").write_text(json.dumps(manifest))
    steps = tl.index(run).ranks[0]["steps"]
    day_later = min(begin for begin, _ in recorded(run).values())
    assert steps and all(end < day_later for _, _, end in steps)
    runs: dict[str, int] = {}
    for name, _, _ in executions(run):
        runs[name] = runs.get(name, 0) + 1
    assert len(set(runs.values())) == 1 and len(steps) == next(iter(runs.values()))  # graph mode: k-th run, step k

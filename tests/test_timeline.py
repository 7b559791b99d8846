"""The timeline index, windows and Chrome-trace export, on the real trace fixtures, checked against json.load."""

from __future__ import annotations

import csv
import errno
import json
import math
import os
import shutil
from collections import Counter, defaultdict
from pathlib import Path

import broken
import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS
from test_architecture import imported, run_perfkit

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import FileFormatError, PerfkitError
from perfkit.core.opnames import comm_kind, op_types_of
from perfkit.io import timeline as tl
from perfkit.io import trace_json
from perfkit.views.figures import timeline

NEW_RANK0 = FIXTURE_RUNS["new_level1_rank0"]
TRACES = {  # run -> {rank: trace file}, as the profiler wrote them
    "new_level1": {r: FIXTURE_RUNS["new_level1"] / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json"
                   for r in (0, 1)},
    "cpu_2_10": {0: next(FIXTURE_RUNS["cpu_2_10"].glob("*_ascend_ms")) / "ASCEND_PROFILER_OUTPUT/trace_view.json"},
    "legacy_run_2": {1: FIXTURE_RUNS["legacy_run_2"] / "ascend_timeline_display_1.json"},
}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)


@pytest.fixture(params=["one block", "many blocks"])
def block_size(request, monkeypatch):
    """Small fixtures fit one block; small blocks send them through the cuts between events and the
    worker processes (one per core) as a 1 GB trace goes."""
    if request.param == "many blocks":
        monkeypatch.setattr(trace_json, "BLOCK_BYTES", 100_000)
        monkeypatch.setattr(tl, "index_workers", lambda: 2)  # forked workers even on a 1-core machine
    return request.param


def _expected(path: Path) -> tuple[int, dict[tuple[str, str], float]]:
    """Independently: (events with a time, total duration of complete events per (pid, tid) lane)."""
    events = json.load(open(path))
    timed = [e for e in events if e.get("ph") != "M" and "ts" in e]
    totals: dict[tuple[str, str], float] = defaultdict(float)
    for event in timed:
        if event.get("ph") == "X":
            totals[(str(event["pid"]), str(event["tid"]))] += float(event["dur"])
    return len(timed), dict(totals)


@pytest.mark.parametrize("run", sorted(TRACES))
def test_events_and_lane_totals_match_json_load(run, block_size):
    events = tl.timeline(FIXTURE_RUNS[run], start_ms=0)
    for rank, path in TRACES[run].items():
        count, totals = _expected(path)
        mine = events[events["rank"] == rank]
        assert len(mine) == count
        complete = mine[mine["ph"] == "X"]
        got = complete.groupby(["pid", "tid"])["dur_us"].sum().to_dict()
        assert got.keys() == totals.keys()
        for lane, total in totals.items():
            assert got[lane] == pytest.approx(total, rel=1e-9), lane


def test_lanes_follow_the_profilers_sort_indexes():
    events = tl.timeline(NEW_RANK0, step=50)
    raw = json.load(open(TRACES["new_level1"][0]))
    sort = {e["pid"]: e["args"]["sort_index"] for e in raw if e.get("name") == "process_sort_index"}
    names = {e["pid"]: e["args"]["name"] for e in raw if e.get("name") == "process_name"}
    lanes = events.drop_duplicates(["pid", "tid"]).sort_values("lane_order")
    shown = list(dict.fromkeys(lanes["process"]))
    assert shown == sorted(shown, key=lambda name: sort[next(p for p, n in names.items() if n == name)])
    assert lanes["lane_order"].is_monotonic_increasing and lanes["lane_order"].is_unique


def test_step_window_holds_the_events_meeting_the_step_marker():
    raw = json.load(open(TRACES["new_level1"][0]))
    (marker,) = [e for e in raw if e.get("name") == "ProfilerStep#50"]
    start, end = float(marker["ts"]), float(marker["ts"]) + marker["dur"]
    meeting = [e for e in raw if e.get("ph") != "M" and "ts" in e
               and float(e["ts"]) < end and (float(e["ts"]) + float(e.get("dur", 0)) > start or float(e["ts"]) >= start)]
    events = tl.timeline(NEW_RANK0, step=50)
    assert len(events) == len(meeting)
    assert (events["step"] == 50).all()


def test_index_is_reused_and_rebuilt_when_the_trace_changes(tmp_path):
    run = broken.copy_run(FIXTURE_RUNS["legacy_run_2"], tmp_path / "run")
    first = tl.index(run)
    assert tl.index(run).folder == first.folder
    trace = run / "ascend_timeline_display_1.json"
    events = json.loads(trace.read_text())
    trace.write_text(json.dumps(events[:50]))
    second = tl.index(run)
    assert second.folder != first.folder and not first.folder.exists()
    assert len(tl.timeline(run, start_ms=0)) == 50
    assert not any(path.is_relative_to(run) for path in [second.folder])


@pytest.mark.parametrize("damage", ["index.json cut", "part deleted", "part garbage"])
def test_corrupt_index_is_rebuilt_never_used(damage):
    found = tl.index(NEW_RANK0)
    part = found.folder / found.ranks[0]["parts"][0]["file"]
    if damage == "index.json cut":
        text = (found.folder / tl.INDEX_FILE).read_text()
        (found.folder / tl.INDEX_FILE).write_text(text[: len(text) // 2])
    elif damage == "part deleted":
        part.unlink()
    else:
        part.write_bytes(b"PAR1 not really")
    events = tl.timeline(NEW_RANK0, start_ms=0)
    assert len(events) == _expected(TRACES["new_level1"][0])[0]


def test_full_disk_while_indexing_is_one_error_and_leaves_nothing(monkeypatch, tmp_path):
    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(tl.pq, "write_table", no_space)
    result = CliRunner().invoke(main, ["trace", str(NEW_RANK0), "--step", "50", "-o", str(tmp_path / "s.json")])
    assert result.exit_code == 2
    # the cache is given up (one warning), the index tried in the process's temporary folder, which fails too
    warning, error = [line for line in result.stderr.splitlines() if line.startswith("perfkit:")]
    assert "warning: the cache is not used" in warning and "No space left" in warning
    assert "No space left" in error and "Traceback" not in result.output
    timeline_cache = tmp_path / "cache" / "timeline"
    assert not [p for p in timeline_cache.rglob("*") if p.is_file()]
    assert not (tmp_path / "s.json").exists()


def test_step_the_run_lacks_lists_the_steps_it_has(tmp_path):
    result = CliRunner().invoke(main, ["trace", str(NEW_RANK0), "--step", "7", "-o", str(tmp_path / "s.json")])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1].endswith("rank 0 has no step 7: it has steps 50")


def _valid_chrome_trace(events: list) -> None:
    assert isinstance(events, list) and events
    timed = [e for e in events if e["ph"] != "M"]
    for event in events:
        assert {"ph", "name", "pid", "tid"} <= event.keys()
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
    for event in timed:
        assert isinstance(event["ts"], float) and math.isfinite(event["ts"])
        if event["ph"] == "X":
            assert event["dur"] >= 0
    assert [e["ts"] for e in timed] == sorted(e["ts"] for e in timed)
    assert events[: len(events) - len(timed)] == [e for e in events if e["ph"] == "M"]  # metadata first


def test_exported_trace_is_valid_and_round_trips_through_the_index(tmp_path):
    out = tmp_path / "step50.json"
    result = CliRunner().invoke(main, ["trace", str(FIXTURE_RUNS["new_level1"]), "--step", "50", "-o", str(out)])
    assert result.exit_code == 0, result.output
    exported = json.loads(out.read_text())
    _valid_chrome_trace(exported)
    window = tl.timeline(FIXTURE_RUNS["new_level1"], step=50)
    names = {e["pid"]: e["args"]["name"] for e in exported if e["name"] == "process_name"}
    assert {name.split(":")[0] for name in names.values()} == {"rank 0", "rank 1"}  # ranks side by side
    # Read back by the index's own parser: the same events, times and durations.
    back = pd.concat(t.to_pandas() for t in trace_json.read_blocks(out))
    back = back[back["ph"] != "M"]
    key = lambda frame, ts, dur: Counter(zip(frame["name"], frame[ts].round(3), frame[dur].fillna(0).round(3),  # noqa: E731
                                            frame["ph"]))
    assert key(back, "ts", "dur") == key(window, "start_us", "dur_us")


def test_parquet_export_is_the_events_table(tmp_path):
    out = tmp_path / "step50.parquet"
    result = CliRunner().invoke(main, ["trace", str(NEW_RANK0), "--step", "50", "--format", "parquet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    table = pd.read_parquet(out)
    assert list(table.columns) == tl.EVENT_COLUMNS
    assert len(table) == len(tl.timeline(NEW_RANK0, step=50))


def test_trace_command_imports_no_pandas_cold_or_warm_and_writes_the_same_bytes(tmp_path):
    """`perfkit trace` answers in a fresh process without pandas (its import is half a warm command's time):
    cold, finding the traces (the reader registry imports pandas only in its read functions) and building the
    index, and warm; the same bytes from both and from the in-process command."""
    cache = tmp_path / "cache"
    run = FIXTURE_RUNS["new_level1"]
    outputs = {name: tmp_path / f"{name}.{fmt}" for name in ("cold", "warm") for fmt in ("json",)}
    cold = run_perfkit("trace", str(run), "--step", "50", "-o", str(outputs["cold"]), cache=cache)
    warm = run_perfkit("trace", str(run), "--step", "50", "-o", str(outputs["warm"]), cache=cache)
    assert cold.returncode == 0 and warm.returncode == 0, cold.stderr + warm.stderr
    assert "pandas" not in imported(cold) and "pandas" not in imported(warm)
    in_process = CliRunner().invoke(main, ["trace", str(run), "--step", "50", "-o", str(tmp_path / "lib.json")])
    assert in_process.exit_code == 0
    assert outputs["cold"].read_bytes() == outputs["warm"].read_bytes() == (tmp_path / "lib.json").read_bytes()
    parquet = run_perfkit("trace", str(run), "--step", "50", "--format", "parquet", "-o", str(tmp_path / "w.parquet"),
                          cache=cache)
    assert parquet.returncode == 0 and "pandas" not in imported(parquet)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "w.parquet"), tl.timeline(run, step=50),
                                  check_dtype=False)


def test_a_warm_index_is_found_without_walking_the_readers(tmp_path, monkeypatch):
    """The run's index is found through a kept answer keyed by every file under the run: the readers'
    detection is skipped until a file changes."""
    run = broken.copy_run(NEW_RANK0, tmp_path / "run")
    first = tl.index(run)
    walks = []
    real = tl.trace_sources
    monkeypatch.setattr(tl, "trace_sources", lambda path, cycle=None: walks.append(path) or real(path, cycle))
    assert tl.index(run).folder == first.folder and not walks
    other = run / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv"  # not a file the index depends on
    os.utime(other, ns=(other.stat().st_atime_ns, other.stat().st_mtime_ns + 10**9))
    assert tl.index(run).folder == first.folder and len(walks) == 1
    trace = run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    os.utime(trace, ns=(trace.stat().st_atime_ns, trace.stat().st_mtime_ns + 10**9))
    assert tl.index(run).folder != first.folder and len(walks) == 2


def test_indexes_count_towards_the_cache_limit_least_recently_used_first(monkeypatch):
    first = tl.index(FIXTURE_RUNS["legacy_run_2"])
    size = sum(part.stat().st_size for part in first.folder.iterdir())
    monkeypatch.setenv("PERFKIT_CACHE_MAX_MB", str(size / 2 / 1024**2))  # room for no index but the newest
    second = tl.index(NEW_RANK0)
    assert second.folder.is_dir() and not first.folder.exists()
    perfkit.load(FIXTURE_RUNS["legacy_run_3"])  # a load's trim counts indexes too: the older one goes
    assert not second.folder.exists()
    again = tl.index(NEW_RANK0)  # its kept location names a removed index: rebuilt, not an error
    assert again.folder.is_dir() and len(tl.timeline(NEW_RANK0, step=50)) > 0


# ---------------------------------------------------------------- text timelines (a rank without its JSON one)

def test_legacy_run_without_its_json_timeline_is_indexed_from_output_timeline_data(tmp_path):
    run = broken.copy_run(FIXTURE_RUNS["legacy_run_2"], tmp_path / "run")
    (run / "ascend_timeline_display_1.json").unlink()
    found = tl.index(run)
    assert found.ranks[1]["source"].endswith("output_timeline_data_1.txt")
    # independently: the op rows (ms) and the step trace's start/end points (10 ns ticks)
    rows = list(csv.reader((run / "output_timeline_data_1.txt").read_text().splitlines()[1:]))
    with open(run / "step_trace_raw_1_detail_time.csv", newline="") as handle:
        steps = [row for row in csv.DictReader(handle) if int(row["step_num"]) > 0]
    assert found.ranks[1]["steps"] == [[int(r["step_num"]), int(r["start_point"]) / 100, int(r["end_point"]) / 100]
                                       for r in steps]
    events = tl.timeline(run, start_ms=0)
    ops = events[events["ph"] == "X"]
    assert len(ops) == len(rows)
    totals = defaultdict(float)
    for name, stream, _, dur_ms in rows:
        totals[f"Stream {stream}"] += float(dur_ms) * 1000
    assert ops.groupby("lane")["dur_us"].sum().to_dict() == pytest.approx(dict(totals), rel=1e-12)
    step = tl.timeline(run, step=1)
    start, end = found.ranks[1]["steps"][0][1:]
    inside = [r for r in rows if float(r[2]) * 1000 < end and (float(r[2]) + float(r[3])) * 1000 > start]
    assert len(step) == len(inside)


def test_cpu_run_without_trace_view_is_indexed_from_its_op_timestamps(tmp_path):
    """The same ops and steps as from trace_view.json: the text's starts are ns, trace_view's µs (MindSpore
    writes both from one record; its µs are ~37 ns later)."""
    run = broken.copy_run(FIXTURE_RUNS["cpu_2_10"], tmp_path / "run")
    with_json = tl.index(run)
    json_steps = with_json.ranks[0]["steps"]
    next(run.glob("*_ascend_ms")).joinpath("ASCEND_PROFILER_OUTPUT", "trace_view.json").unlink()
    found = tl.index(run)
    assert found.ranks[0]["source"].endswith("FRAMEWORK/cpu_op_execute_timestamp_0.txt")
    assert [s[0] for s in found.ranks[0]["steps"]] == [s[0] for s in json_steps] == perfkit.load(run).steps["step"].tolist()
    for (_, start, end), (_, json_start, json_end) in zip(found.ranks[0]["steps"], json_steps):
        assert start == pytest.approx(json_start, abs=1.0) and end == pytest.approx(json_end, abs=1.0)
    text = next(run.glob("*_ascend_ms")) / "FRAMEWORK" / "cpu_op_execute_timestamp_0.txt"
    runs = sum(len(line.split(";")[2].split()) for line in text.read_text().splitlines() if line.strip())
    assert len(tl.timeline(run, start_ms=0).query("ph == 'X'")) == runs


def test_gpu_pynative_op_launches_give_the_timeline_and_its_steps(tmp_path):
    """Crafted (no real GPU op-launch file exists in the fixtures): the GPU PyNative run of the diagnosis
    tests, whose step trace is empty; step k starts at the k-th launch of the step's first op, as the loader."""
    from test_diagnosis_rules import GPU_STEPS, gpu_pynative
    run = gpu_pynative(tmp_path / "gpu")
    found = tl.index(run)
    launches = (run / "gpu_op_execute_timestamp_0.txt").read_text().splitlines()
    cast = sorted(int(pair.split(",")[0]) / 1000 for line in launches if line.startswith("Default/Cast")
                  for pair in line.split(";")[2].split())
    assert [start for _, start, _ in found.ranks[0]["steps"]] == pytest.approx(cast) and len(cast) == GPU_STEPS
    step = tl.timeline(run, step=2)
    assert step["dur_us"].max() == pytest.approx(1100.0)  # Adam's 1.1 ms (the file's µs, not ms * 1000)
    loaded = perfkit.load(run).steps["total_ms"].tolist()
    assert [(end - start) / 1000 for _, start, end in found.ranks[0]["steps"]] == pytest.approx(loaded)


def test_trace_command_exports_a_text_timeline(tmp_path):
    run = broken.copy_run(FIXTURE_RUNS["legacy_run_2"], tmp_path / "run")
    (run / "ascend_timeline_display_1.json").unlink()
    result = CliRunner().invoke(main, ["trace", str(run), "--step", "1", "-o", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    exported = json.loads((tmp_path / "s.json").read_text())
    _valid_chrome_trace(exported)
    assert {e["args"]["name"] for e in exported if e["name"] == "process_name"} == {"rank 1: Ascend device"}


# ---------------------------------------------------------------- bad input (crafted from the real trace)

def _run_with_trace(tmp_path: Path, mutate) -> tuple[Path, Path]:
    run = broken.copy_run(NEW_RANK0, tmp_path / "run")
    trace = run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    mutate(trace)
    return run, trace


def _trace_cli(run: Path, tmp_path: Path, *args: str):
    return CliRunner().invoke(main, ["trace", str(run), *args, "-o", str(tmp_path / "out.json")])


def test_trace_cut_in_half_gives_the_events_before_the_cut_with_a_warning(tmp_path, block_size):
    run, trace = _run_with_trace(tmp_path, broken.cut_in_half)
    found = tl.index(run)
    assert any("JSON stops at byte" in w and "trace_view.json" in w for w in found.warnings)
    assert len(tl.timeline(run, start_ms=0)) == _timed_events_before_the_break(trace.read_bytes())
    result = _trace_cli(run, tmp_path, "--start-ms", "0")
    assert result.exit_code == 0 and "perfkit: warning:" in result.stderr and "JSON stops at byte" in result.stderr


def _timed_events_before_the_break(raw: bytes) -> int:
    """Independently: the whole events with a time before the JSON breaks."""
    complete = json.JSONDecoder()
    text, position, count = raw.decode(errors="replace")[1:], 0, 0
    while True:
        try:
            event, position = complete.raw_decode(text, position)
        except json.JSONDecodeError:
            return count
        count += event.get("ph") != "M" and "ts" in event
        position = len(text) - len(text[position:].lstrip(" ,"))


def test_garbage_in_the_middle_gives_the_events_before_it_and_no_stray_part(tmp_path, block_size):
    """Workers decode blocks ahead of the reader: those after the break (crafted: garbage bytes in the
    middle of the file) are dropped with their parts."""
    def spoil(path: Path) -> None:
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2] + b"\"]]\"" + raw[len(raw) // 2:])  # breaks a string or a value
    run, trace = _run_with_trace(tmp_path, spoil)
    found = tl.index(run)
    assert any("JSON stops at byte" in w for w in found.warnings)
    assert len(tl.timeline(run, start_ms=0)) == _timed_events_before_the_break(trace.read_bytes())
    _only_listed_parts(found)


@pytest.mark.parametrize("content, problem", [(b'{"traceEvents": []}', "not a JSON array"), (b"", "is empty"),
                                              (b"[{\"ph\": \"X\", \"na", "holds no whole event")])
def test_unreadable_trace_is_one_line_exit_2(tmp_path, content, problem):
    run, trace = _run_with_trace(tmp_path, lambda p: p.write_bytes(content))
    result = _trace_cli(run, tmp_path, "--start-ms", "0")
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("perfkit:")]
    assert str(trace) in line and problem in line


def _edit_events(edit):
    def mutate(path: Path) -> None:
        events = json.loads(path.read_text())
        path.write_text(json.dumps([edit(dict(e)) if e.get("ph") == "X" else e for e in events]))
    return mutate


def test_events_without_ts_or_dur_are_counted_in_a_warning(tmp_path):
    def drop(event):
        event.pop("ts" if event["name"].startswith("aten::") else "dur", None)
        return event
    run, trace = _run_with_trace(tmp_path, _edit_events(drop))
    raw = json.loads(trace.read_text())
    no_ts = sum(1 for e in raw if e.get("ph") == "X" and "ts" not in e)
    no_dur = sum(1 for e in raw if e.get("ph") == "X" and "ts" in e and "dur" not in e)
    found = tl.index(run)
    assert any(f"{no_ts:,} events without a time" in w for w in found.warnings)
    assert any(f"{no_dur:,} complete events without a duration" in w for w in found.warnings)


@pytest.mark.parametrize("bad", ["abc", float("nan")])
def test_string_and_nan_times_are_unknown_not_numbers(tmp_path, bad, block_size):
    def spoil(event):
        if event["name"].startswith("aten::"):
            event["dur"] = bad
        return event
    run, trace = _run_with_trace(tmp_path, _edit_events(spoil))  # json.dumps writes NaN for float("nan")
    spoiled = sum(1 for e in json.load(open(trace)) if e.get("ph") == "X" and e["name"].startswith("aten::"))
    events = tl.timeline(run, start_ms=0)
    aten = events[events["name"].str.startswith("aten::") & (events["ph"] == "X")]
    assert len(aten) == spoiled and aten["dur_us"].isna().all()
    assert any(f"{spoiled:,} times that are not numbers" in w for w in tl.index(run).warnings)


def test_a_20_mb_event_is_read(tmp_path, block_size):
    def huge(path: Path) -> None:
        events = json.loads(path.read_text())
        events[5]["args"]["Call stack"] = "x" * 20_000_000
        path.write_text(json.dumps(events))
    run, trace = _run_with_trace(tmp_path, huge)
    assert len(tl.timeline(run, start_ms=0)) == _expected(trace)[0]


def test_a_nested_event_separator_does_not_split_an_event(tmp_path, block_size):
    """`},{` inside an event (a list of objects in args, or a string) is not between events."""
    def nested(path: Path) -> None:
        events = json.loads(path.read_text())
        for event in events[::7]:
            event.setdefault("args", {})["inputs"] = [{"shape": "1,2"}, {"shape": "},{"}]
        path.write_text(json.dumps(events, separators=(",", ":")))
    run, trace = _run_with_trace(tmp_path, nested)
    assert len(tl.timeline(run, start_ms=0)) == _expected(trace)[0]
    _only_listed_parts(tl.index(run))


def _only_listed_parts(found: tl.Index) -> None:
    """Parts that workers wrote for blocks the reader then re-read or never reached are not left behind."""
    listed = {part["file"] for info in found.ranks.values() for part in info["parts"]}
    assert {path.name for path in found.folder.glob("*.parquet")} == listed


def test_summary_never_reads_the_trace(tmp_path):
    run, _ = _run_with_trace(tmp_path, lambda p: p.write_bytes(b"not json at all"))
    result = CliRunner().invoke(main, ["summary", str(run), "--format", "json"])
    assert result.exit_code == 0 and "trace_view" not in result.output


def test_run_without_a_trace_says_so(tmp_path):
    run = broken.copy_run(NEW_RANK0, tmp_path / "run")
    (run / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").unlink()
    with pytest.raises(FileFormatError, match="holds no trace file"):
        tl.index(run)


def test_index_never_lives_in_the_run(tmp_path, monkeypatch):
    """A cache dir inside the run is not used: the index is built in the process's own temporary folder."""
    run = broken.copy_run(NEW_RANK0, tmp_path / "run")
    before = broken.folder_digest(run)
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(run / "cache"))
    found = tl.index(run)
    assert found.folder.is_relative_to(tl._scratch_root()) and found.steps() == [50]
    assert broken.folder_digest(run) == before


@pytest.mark.parametrize("run", sorted(TRACES))
def test_blocks_go_through_msgspec_not_the_slow_decoder(run, monkeypatch):
    """Every block of a real trace is decoded by msgspec: the path that makes a 1 GB trace take seconds."""
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", 50_000)
    for path in TRACES[run].values():
        stats = trace_json.Stats()
        blocks = list(trace_json.read_blocks(path, stats))
        assert sum(len(block) for block in blocks) == len(json.load(open(path)))
        assert stats.slow_blocks == 0 and (len(blocks) > 10 or path.stat().st_size < 500_000), stats


def test_cpu_steps_are_the_loaders_steps_and_hold_each_op_once():
    """The CPU trace has no step markers: step k is the k-th run of every op, as the CPU reader derives
    its steps (from cpu_op_execute_timestamp, another file)."""
    run = FIXTURE_RUNS["cpu_2_10"]
    assert tl.index(run).steps() == perfkit.load(run).steps["step"].tolist()
    raw = json.load(open(TRACES["cpu_2_10"][0]))
    ops = {e["name"] for e in raw if e.get("ph") == "X" and e.get("args", {}).get("type")}
    for step in tl.index(run).steps():
        events = tl.timeline(run, step=step)
        kernels = events[events["op_type"].notna() & (events["ph"] == "X")]
        assert len(kernels) == len(ops) and set(kernels["name"]) == ops


def test_one_odd_event_costs_a_small_piece_of_slow_decoding(tmp_path, monkeypatch):
    """A block msgspec rejects is halved until the piece holding the odd event is small: only that piece
    is decoded event by event. The odd event (crafted: no real trace has one) has a NaN duration, which
    is not JSON (json.dumps writes it) and which only the standard library's decoder accepts."""
    monkeypatch.setattr(trace_json, "BLOCK_BYTES", 1_000_000)
    monkeypatch.setattr(trace_json, "SLOW_BYTES", 30_000)
    events = json.load(open(TRACES["new_level1"][0]))
    odd = next(number for number, event in enumerate(events) if number > len(events) // 2 and "dur" in event)
    events[odd]["dur"] = float("nan")
    path = tmp_path / "trace_view.json"
    path.write_text(json.dumps(events, separators=(",", ":")))
    stats = trace_json.Stats()
    read = pd.concat(block.to_pandas() for block in trace_json.read_blocks(path, stats))
    assert list(read["name"]) == [e["name"] for e in events]
    assert stats.bad_values == 1 and read["dur"].isna().sum() == sum("dur" not in e for e in events) + 1
    assert 0 < stats.slow_bytes <= 30_000, stats


def test_parts_keep_dictionaries_for_text_only():
    """A part's text columns are dictionary-encoded (a few hundred names for millions of events); its times, nearly
    all distinct, are not (looking each up in a dictionary cost a fifth of the write)."""
    found = tl.index(NEW_RANK0)
    for part in found.ranks[0]["parts"]:
        metadata = pq.ParquetFile(found.folder / part["file"]).metadata
        for group in range(metadata.num_row_groups):
            for number in range(metadata.num_columns):
                column = metadata.row_group(group).column(number)
                dictionary = any("DICTIONARY" in encoding for encoding in column.encodings)
                assert dictionary == (column.path_in_schema not in ("start_us", "dur_us")), column


# ---------------------------------------------------------------- lanes coloured by what runs on them (issue 29)

CPU_RANKS2 = Path(__file__).resolve().parents[1] / "sample_runs/cpu_ranks2"


def raw_lane_kinds(trace: Path) -> dict[tuple[str, float], str]:
    """Independently, from json.load: per complete event (name, ts) what its raw trace says runs there. The CPU
    OP process (args.type HostCpuOps) of a trace without a device process holds the run's kernels: compute, an
    AllReduce among them communication; the Scope Layer process holds cell scopes."""
    events = json.load(open(trace))
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    assert set(processes.values()) == {"CPU OP", "Scope Layer"}  # no device lane: a CPU run
    kinds = {}
    for event in events:
        if event.get("ph") != "X":
            continue
        process = processes[event["pid"]]
        if process == "CPU OP":
            assert event["args"]["type"] == "HostCpuOps"
            op_type = event["name"].rsplit("/", 1)[-1].split("-op")[0]
            kinds[(event["name"], float(event["ts"]))] = "communication" if op_type == "AllReduce" else "compute"
        else:
            assert process == "Scope Layer" and not event.get("args")
            kinds[(event["name"], float(event["ts"]))] = "scope"
    return kinds


@pytest.mark.parametrize("run", ["cpu_2_10", "cpu_ranks2"])
def test_cpu_run_lanes_are_coloured_by_what_runs_on_them(run):
    folder = FIXTURE_RUNS[run] if run in FIXTURE_RUNS else CPU_RANKS2
    events = tl.timeline(folder, start_ms=0)
    for rank, trace in ((0, next(folder.rglob("trace_view.json"))),) if run == "cpu_2_10" else \
            ((r, next((folder / f"rank_{r}").rglob("trace_view.json"))) for r in (0, 1)):
        expected = raw_lane_kinds(trace)
        mine = events[(events["rank"] == rank) & (events["ph"] == "X")]
        got = {(name, start): category for name, start, category in zip(mine["name"], mine["start_us"],
                                                                         mine["category"])}
        assert got == expected
        assert Counter(got.values())["compute"] > 600  # the kernels: Conv2D, BatchNorm, ...
    fig = timeline.timeline_figure(tl.timeline(folder, step=2))
    colours = {trace.name: trace.marker.color for trace in fig.data}
    assert colours["compute"] == timeline.TIMELINE_COLORS["compute"]
    assert colours["scope"] == timeline.TIMELINE_COLORS["scope"] != colours["compute"]
    assert "host" not in colours


# Real traces of every kind, and whether the ops on their op lanes include communication ops.
COMMUNICATING = {"new_level1": (FIXTURE_RUNS["new_level1"], True),
                 "new_db_level1": (FIXTURE_RUNS["new_db_level1"], True),
                 "cpu_ranks2": (CPU_RANKS2, True), "cpu_2_10": (FIXTURE_RUNS["cpu_2_10"], False),
                 "legacy_run_2": (FIXTURE_RUNS["legacy_run_2"], False),
                 "cpu_pynative_text": (Path(__file__).resolve().parent / "runs/cpu_2_10_pynative", False)}


@pytest.mark.parametrize("run", sorted(COMMUNICATING))
def test_an_op_is_communication_on_the_timeline_exactly_when_the_analysis_counts_it_so(run):
    """The timeline colours an op as communication where the analysis counts it as communication (core/opnames.comm_kind
    of its type): never a Python call that sends bytes on a socket, nor BroadcastTo. Lanes that say what they hold are
    theirs: a communication process's events (HCCL's), Overlap Analysis, the cell scopes."""
    folder, communicates = COMMUNICATING[run]
    events = tl.timeline(folder, start_ms=0)
    by_lane = (events["process"].isin(["Overlap Analysis", tl.SCOPE_PROCESS])
               | events["process"].str.contains(tl.COMMUNICATION_PROCESS))
    ops = events[~by_lane].drop_duplicates(["name", "category"])
    counted = ops["name"].map(lambda name: comm_kind(op_types_of([name])[0]) is not None)
    shown = ops["category"] == "communication"
    assert ops[shown != counted][["process", "name", "category"]].values.tolist() == []
    assert counted.any() == communicates and (~counted).any()


def test_scope_spans_are_cut_at_their_steps_edges_with_their_whole_length_on_hover():
    """cpu_ranks2's step 1: a `Default` scope span runs on into step 2 (the profiler joins consecutive ops of one
    scope, and step 2 starts with Default ops): drawn up to the step's end, its whole length in the hover."""
    events = tl.timeline(CPU_RANKS2, step=1, ranks=[0])
    (start, end), = events.attrs["window_us"].values()
    raw = json.load(open(next((CPU_RANKS2 / "rank_0").rglob("trace_view.json"))))
    past = [e for e in raw if e.get("ph") == "X" and start <= float(e["ts"]) < end
            and float(e["ts"]) + float(e["dur"]) > end]
    assert past and all(e["pid"] == 3 for e in past)  # Scope Layer spans only
    fig = timeline.timeline_figure(events)
    step_ms = (end - start) / 1000
    for trace in fig.data:
        assert max(b + x for b, x in zip(trace.base, trace.x)) <= step_ms + 1e-6
    assert fig.layout.meta["cut"] == len(past) + len(events[(events["start_us"] < start) & (events["ph"] == "X")])
    scope = next(trace for trace in fig.data if trace.name == "scope")
    notes = [row[2] for row in scope.customdata if row[2]]
    assert any(f"runs {float(e['dur']) / 1000:,.3f} ms in all" in note for e in past for note in notes)


def test_cpu_rank_is_the_rank_its_framework_files_name():
    """CPU folders have no profiler_info: rank 1 is rank_1's trace_view.json, not rank 0 twice with rank 1's text
    timestamps as a fallback."""
    root, files = tl.trace_files(CPU_RANKS2)
    assert [(f.rank, f.path.relative_to(root).parts[0], f.path.name) for f in files] == \
        [(0, "rank_0", "trace_view.json"), (1, "rank_1", "trace_view.json")]
    raw = json.load(open(files[1].path))
    scopes = sum(1 for e in raw if e.get("ph") == "X" and e["pid"] == 3)
    events = tl.timeline(CPU_RANKS2, start_ms=0, ranks=[1])
    assert (events["process"] == "Scope Layer").sum() == scopes > 5_000  # ~1,786 a step


def test_progress_without_a_terminal_is_one_line_each():
    import io

    from perfkit.apps.cli import progress_printer
    stream = io.StringIO()
    show = progress_printer(stream)
    for fraction in (0.0, 0.05, 0.5, 0.88, 1.0):
        show("indexing trace_view.json of rank 0", fraction)
    show("indexed", 1.0)
    lines = stream.getvalue().split("\n")
    assert lines == ["indexing trace_view.json of rank 0: 0%", "indexing trace_view.json of rank 0: 50%",
                     "indexing trace_view.json of rank 0: 88%", "indexing trace_view.json of rank 0: 100%",
                     "indexed: 100%", ""]
    assert "\r" not in stream.getvalue()

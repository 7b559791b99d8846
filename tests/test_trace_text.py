"""Text timelines (perfkit/io/trace_text.py) against an independent plain-Python reading of the same files.

Real files: the legacy Ascend output_timeline_data_1.txt of mindinsight_run_2 (which also has the same
ops in ascend_timeline_display_1.json) and the CPU cpu_op_execute_timestamp_{r}.txt of cpu_2_10 and
the sample runs (which also have trace_view.json). No real gpu_op_execute_timestamp file exists in the
fixtures: the GPU tests use small crafted files in the format MindSpore's DataSaver::WriteOpTimestamp
writes (see trace_text's docstring for the source).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from conftest import FIXTURE_RUNS, REPO

from perfkit.core.errors import FileFormatError
from perfkit.io import trace_text
from perfkit.io.trace_json import OUTPUT, Stats
from perfkit.io.trace_text import text_trace_blocks, text_traces

LEGACY_RUN = FIXTURE_RUNS["legacy_run_2"]
LEGACY_TEXT = LEGACY_RUN / "output_timeline_data_1.txt"
CPU_RUNS = [next(FIXTURE_RUNS["cpu_2_10"].glob("*_ascend_ms")),
            next((REPO / "sample_runs/cpu_default").glob("*_ascend_ms")),
            next((REPO / "sample_runs/cpu_ranks2/rank_1").glob("*_ascend_ms"))]
CPU_TEXTS = [next((run / "FRAMEWORK").glob("cpu_op_execute_timestamp_*.txt")) for run in CPU_RUNS]

# A GPU file as DataSaver::WriteOpTimestamp writes it (crafted: no real one in the fixtures):
# `full_op_name;GpuOps;start_ns,dur_us start_ns,dur_us ` and a newline, per op.
GPU_TEXT = (
    "Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op5;GpuOps;"
    "1650000000000000000,12.5 1650000000010000000,11.25 \n"
    "Default/network-WithLossCell/_backbone-LeNet5/relu-ReLU/ReLU-op6;GpuOps;"
    "1650000000000020000,3.5 1650000000010020000,3 \n"
    "Gradients/Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/gradConv2D/Conv2DBackpropFilter-op9;"
    "GpuOps;1650000000000050000,40.75 1650000000010050000,41 \n"
)


def _read(path: Path, stats: Stats | None = None) -> pa.Table:
    return pa.concat_tables(text_trace_blocks(path, stats))


def _ops(table: pa.Table) -> pa.Table:
    return table.filter(pc.equal(table.column("ph"), "X"))


def _lane_totals(table: pa.Table) -> dict[str, tuple[int, float]]:
    """Lane -> (runs, total µs) of the module's output."""
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for row in _ops(table).select(["tid", "dur"]).to_pylist():
        totals[row["tid"]][0] += 1
        totals[row["tid"]][1] += row["dur"]
    return {lane: (count, total) for lane, (count, total) in totals.items()}


def _legacy_rows(path: Path) -> list[tuple[str, str, float, float]]:
    """Independently: (name, stream, start µs, dur µs) of each data line (ms in the file)."""
    rows = []
    for line in path.read_text().splitlines()[1:]:
        name, stream, start_ms, dur_ms = line.split(",")
        rows.append((name, stream, float(start_ms) * 1000, float(dur_ms) * 1000))
    return rows


def _cpu_runs(path: Path) -> list[tuple[str, str, int, float]]:
    """Independently: (name, thread, start ns, dur µs) of each run (dur ms in the file)."""
    runs = []
    for line in path.read_text().splitlines():
        name, _, rest = line.split(";", 2)
        for run in rest.split():
            start_ns, dur_ms, tid = run.split(",")
            runs.append((name, tid, int(start_ns), float(dur_ms) * 1000))
    return runs


def _expected_totals(rows) -> dict[str, tuple[int, float]]:
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for name, lane, _, dur_us in rows:
        totals[lane][0] += 1
        totals[lane][1] += dur_us
    return {lane: (count, total) for lane, (count, total) in totals.items()}


def _assert_totals(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for lane, (count, total) in expected.items():
        assert got[lane][0] == count
        assert math.isclose(got[lane][1], total, rel_tol=1e-12)


# ---------------------------------------------------------------- real files: counts, lanes, totals

def test_legacy_ascend_text_counts_and_stream_totals_match_the_file():
    stats = Stats()
    table = _read(LEGACY_TEXT, stats)
    rows = _legacy_rows(LEGACY_TEXT)
    assert table.schema == OUTPUT
    assert stats.events == len(_ops(table)) == len(rows) == 107 and stats.bad_values == 0
    _assert_totals(_lane_totals(table), _expected_totals(rows))
    ops = _ops(table).to_pylist()
    assert [(op["name"], op["tid"]) for op in ops] == [(name, stream) for name, stream, _, _ in rows]
    assert [op["ts"] for op in ops] == pytest.approx([start for _, _, start, _ in rows], rel=1e-15)
    # op type from the name, as MindSpore's own timeline has it in args.type
    assert {op["args"]["op_type"] for op in ops if op["name"].endswith("AssignAdd-op142")} == {"AssignAdd"}


@pytest.mark.parametrize("path", CPU_TEXTS, ids=lambda path: path.parents[2].name + "/" + path.name)
def test_cpu_text_counts_and_thread_totals_match_the_file(path):
    stats = Stats()
    table = _read(path, stats)
    runs = _cpu_runs(path)
    assert stats.events == len(_ops(table)) == len(runs) and stats.bad_values == 0 and stats.truncated_at is None
    _assert_totals(_lane_totals(table), _expected_totals(runs))
    assert set(pc.struct_field(_ops(table).column("args"), "op_type").to_pylist()) == {"HostCpuOps"}


def test_lanes_are_named_once_each_as_mindspore_names_them():
    for path, process, lane in ((LEGACY_TEXT, "Ascend device", "Stream 519"), (CPU_TEXTS[0], "CPU OP", "Thread 0")):
        table = _read(path)
        meta = table.filter(pc.equal(table.column("ph"), "M")).to_pylist()
        by_kind = defaultdict(list)
        for event in meta:
            by_kind[event["name"]].append(event)
        assert [event["args"]["name"] for event in by_kind["process_name"]] == [process]
        assert [event["args"]["name"] for event in by_kind["thread_name"]] == [lane]
        assert [event["args"]["sort_index"] for event in by_kind["thread_sort_index"]] == [int(lane.split()[-1])]


# ---------------------------------------------------------------- units, against the JSON of the same run

@pytest.mark.parametrize("run", CPU_RUNS, ids=lambda run: run.parent.name)
def test_cpu_runs_start_and_last_as_in_trace_view_of_the_same_run(run):
    """Every CPU op run: the k-th run of an op in the text is the k-th in trace_view.json (µs), same
    duration; the same start to within the float64 step at epoch µs (0.25 µs: trace_view writes starts
    37 ns after the text's)."""
    view = defaultdict(list)
    for event in json.load(open(run / "ASCEND_PROFILER_OUTPUT/trace_view.json")):
        if event.get("ph") == "X" and (event.get("args") or {}).get("type") == "HostCpuOps":
            view[event["name"]].append((float(event["ts"]), float(event["dur"])))
    ours = defaultdict(list)
    for op in _ops(_read(next((run / "FRAMEWORK").glob("cpu_op_execute_timestamp_*.txt")))).to_pylist():
        ours[op["name"]].append((op["ts"], op["dur"]))
    assert ours.keys() == view.keys() and sum(map(len, ours.values())) == sum(map(len, view.values()))
    for name, runs in view.items():
        for (ts, dur), (their_ts, their_dur) in zip(sorted(ours[name]), sorted(runs)):
            assert abs(ts - their_ts) <= math.ulp(their_ts)
            assert math.isclose(dur, their_dur, rel_tol=1e-12)


def test_legacy_text_lasts_as_the_timeline_json_and_starts_on_one_clock():
    """ascend_timeline_display_1.json has the same device ops (short names) in µs, its starts measured from
    its own origin: the durations are equal and the start differences one constant. (The JSON holds its
    first op twice: the set.)"""
    view = defaultdict(list)
    for event in json.load(open(LEGACY_RUN / "ascend_timeline_display_1.json")):
        if event.get("ph") == "X" and event.get("pid") == 1:
            view[event["args"]["fullname"]].append((event["ts"], event["dur"]))
    ours = defaultdict(list)
    for op in _ops(_read(LEGACY_TEXT)).to_pylist():
        ours[op["name"]].append((op["ts"], op["dur"]))
    assert ours.keys() == view.keys()
    offsets = []
    for name, runs in ours.items():
        for (ts, dur), (their_ts, their_dur) in zip(sorted(runs), sorted(set(view[name]))):
            assert dur == pytest.approx(their_dur, abs=1e-6)
            offsets.append(ts - their_ts)
    assert max(offsets) - min(offsets) < 0.01  # µs; a ms start read as µs would spread them by 1000x


def test_gpu_text_in_mindspores_documented_format(tmp_path):
    """Crafted (no real GPU file): starts ns -> µs, durations already µs, one lane per type field (GpuOps)."""
    path = tmp_path / "gpu_op_execute_timestamp_3.txt"
    path.write_text(GPU_TEXT)
    stats = Stats()
    table = _read(path, stats)
    expected = []
    for line in GPU_TEXT.splitlines():
        name, kind, rest = line.split(";", 2)
        expected += [(name, kind, int(start) / 1000, float(dur)) for start, dur in (r.split(",") for r in rest.split())]
    ops = _ops(table).to_pylist()
    assert stats.events == len(ops) == len(expected) == 6
    assert [(op["name"], op["tid"], op["ts"], op["dur"]) for op in ops] == expected
    assert [op["args"]["op_type"] for op in ops[:2]] == ["Conv2D", "Conv2D"]
    assert ops[-1]["args"]["op_type"] == "Conv2DBackpropFilter"
    assert text_traces(tmp_path) == {3: path}


# ---------------------------------------------------------------- finding the file

def test_text_traces_prefers_device_ops_per_rank(tmp_path):
    assert text_traces(LEGACY_RUN) == {1: LEGACY_TEXT}
    assert text_traces(CPU_RUNS[0]) == {0: CPU_TEXTS[0]}
    # a GPU folder has host CPU ops too (crafted copies): the device file wins, each rank its own
    for rank in (0, 1):
        (tmp_path / f"gpu_op_execute_timestamp_{rank}.txt").write_text(GPU_TEXT)
        (tmp_path / f"cpu_op_execute_timestamp_{rank}.txt").write_bytes(CPU_TEXTS[0].read_bytes())
    (tmp_path / "cpu_op_execute_timestamp_2.txt").write_bytes(CPU_TEXTS[0].read_bytes())
    assert text_traces(tmp_path) == {0: tmp_path / "gpu_op_execute_timestamp_0.txt",
                                     1: tmp_path / "gpu_op_execute_timestamp_1.txt",
                                     2: tmp_path / "cpu_op_execute_timestamp_2.txt"}
    assert text_traces(tmp_path / "absent") == {}


# ---------------------------------------------------------------- chunks

def test_small_chunks_give_the_same_events_and_name_each_lane_once(monkeypatch, tmp_path):
    """A CPU file read a few lines at a time (and a line longer than a chunk) gives the events of one
    read, with each lane's M events once, before its first run."""
    path = tmp_path / "cpu_op_execute_timestamp_0.txt"
    lines = CPU_TEXTS[0].read_text().splitlines(keepends=True)
    # a second thread for some runs (crafted: the fixture ran on thread 0 only)
    lines[5] = lines[5].replace(",0 ", ",7 ")
    path.write_text("".join(lines))
    whole = _read(path)
    monkeypatch.setattr(trace_text, "CHUNK_BYTES", 300)  # longer lines than this exist in the file
    blocks = list(text_trace_blocks(path))
    assert len(blocks) > 100
    chunked = pa.concat_tables(blocks)
    assert _ops(chunked).equals(_ops(whole))
    meta = chunked.filter(pc.equal(chunked.column("ph"), "M")).select(["name", "tid"]).to_pylist()
    assert sorted((event["name"], event["tid"]) for event in meta) == [
        ("process_name", None), ("thread_name", "0"), ("thread_name", "7"),
        ("thread_sort_index", "0"), ("thread_sort_index", "7")]
    _assert_totals(_lane_totals(chunked), _expected_totals(_cpu_runs(path)))


# ---------------------------------------------------------------- bad input

def test_cut_off_cpu_file_keeps_the_whole_runs_before_the_cut(tmp_path):
    data = CPU_TEXTS[0].read_bytes()
    last_line = data.rstrip(b"\n").rfind(b"\n") + 1
    second_run_end = data.index(b" ", data.index(b" ", last_line) + 1)  # after the last line's 2nd run
    cut = data[:second_run_end + 5]  # inside its third run
    path = tmp_path / "cpu_op_execute_timestamp_0.txt"
    path.write_bytes(cut)
    stats = Stats()
    table = _read(path, stats)
    expected = _cpu_runs(CPU_TEXTS[0])
    last_name = cut[last_line:].split(b";")[0].decode()
    dropped = sum(1 for name, *_ in expected if name == last_name) - 2
    assert stats.events == len(expected) - dropped and stats.bad_values == 0
    assert stats.truncated_at == second_run_end
    assert len(_ops(table).filter(pc.equal(_ops(table).column("name"), last_name))) == 2


def test_cut_off_legacy_file_drops_its_last_row(tmp_path):
    data = LEGACY_TEXT.read_bytes()
    path = tmp_path / LEGACY_TEXT.name
    path.write_bytes(data[:-4])  # the last duration lost digits: it cannot be trusted
    stats = Stats()
    table = _read(path, stats)
    assert stats.events == len(_ops(table)) == 106 and stats.truncated_at == data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data.rstrip(b"\n"))  # only the final newline missing: a row may still have lost digits
    assert _read(path, Stats()).num_rows == _read(LEGACY_TEXT).num_rows - 1


def test_a_complete_runs_line_without_its_newline_loses_nothing(tmp_path):
    path = tmp_path / "gpu_op_execute_timestamp_0.txt"
    path.write_text(GPU_TEXT.rstrip("\n"))  # the line still ends with the space after its last run
    stats = Stats()
    assert len(_ops(_read(path, stats))) == 6 and stats.truncated_at is None


def test_lines_and_values_that_do_not_parse_are_counted_and_skipped(tmp_path):
    lines = CPU_TEXTS[0].read_text().splitlines()
    broken = {
        3: "this line has no fields",
        4: lines[4].replace(",", ",abc", 1),        # a start that is not a number
        6: lines[6].replace(",0 ", ",nan,0 ", 1),    # a run with a field too many
        8: lines[8].split(";")[0] + ";HostCpuOps;1795343499775632224,-1,0 1795343499775632225,inf,0 ",
    }
    for number, line in broken.items():
        lines[number] = line
    path = tmp_path / "cpu_op_execute_timestamp_0.txt"
    path.write_text("\n".join(lines) + "\n")
    stats = Stats()
    table = _read(path, stats)
    # independently: every run of the lines left whole, and of lines 4, 6 and 8 all but the broken ones
    whole_runs = sum(len(line.split(";", 2)[2].split()) for number, line in enumerate(lines) if number != 3)
    bad_runs = 1 + 1 + 2
    assert stats.bad_values == 1 + bad_runs  # line 3, and the runs
    assert stats.events == len(_ops(table)) == whole_runs - bad_runs


def test_names_that_are_not_utf8_are_read_with_replacement_characters(tmp_path):
    path = tmp_path / "gpu_op_execute_timestamp_0.txt"
    path.write_bytes(GPU_TEXT.replace("ReLU-op6", "ReLU\udcff-op6").encode("utf-8", "surrogateescape"))
    names = _ops(_read(path)).column("name").to_pylist()
    assert len(names) == 6 and names[2].endswith("ReLU\ufffd-op6")


def test_legacy_rows_that_do_not_parse_are_counted_and_skipped(tmp_path):
    lines = LEGACY_TEXT.read_text().splitlines()
    lines[2] = "Default/Cast-op1,519,not-a-time,0.1"
    lines[3] = "Default/Cast-op2,519,154907896.1"  # a column short
    lines[4] = lines[4] + ",extra"
    path = tmp_path / LEGACY_TEXT.name
    path.write_text("\r\n".join(lines) + "\r\n")  # CRLF, as some copies have
    stats = Stats()
    table = _read(path, stats)
    assert stats.bad_values == 3 and stats.events == len(_ops(table)) == 107 - 3
    expected = _expected_totals([row for number, row in enumerate(_legacy_rows(LEGACY_TEXT), start=1)
                                 if number not in (2, 3, 4)])
    _assert_totals(_lane_totals(table), expected)


@pytest.mark.parametrize("content", [b"", b"\n\n", b"op_name, stream_id, start_time(ms), duration(ms)\n",
                                     b"Default/Cast-op1,519,abc,def\n", b"\xff\xfe garbage without fields\n"])
def test_a_file_with_no_readable_op_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / "output_timeline_data_0.txt"
    path.write_bytes(content)
    with pytest.raises(FileFormatError) as error:
        _read(path)
    assert str(path) in str(error.value) and "no readable op run" in str(error.value)


def test_a_cpu_file_cut_inside_its_first_run_is_an_error_naming_it(tmp_path):
    path = tmp_path / "cpu_op_execute_timestamp_0.txt"
    data = CPU_TEXTS[0].read_bytes()
    path.write_bytes(data[:data.index(b";HostCpuOps;") + 20])
    with pytest.raises(FileFormatError, match="cut off at byte"):
        _read(path)


def test_an_unknown_text_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "step_trace_profiling_0.txt"
    path.write_text("x\n")
    with pytest.raises(FileFormatError, match="not a text timeline"):
        _read(path)


def test_reading_text_timelines_imports_no_pandas():
    """The timeline's fast path (perfkit trace) reads these without pandas: nothing here imports it, once
    pyarrow's own first look for it is spared as `perfkit trace` spares it."""
    code = ("import sys; from pathlib import Path; from perfkit.io.parallel import pyarrow_without_pandas; "
            "pyarrow_without_pandas(); from perfkit.io.trace_text import text_trace_blocks; "
            f"print(sum(t.num_rows for t in text_trace_blocks(Path({str(CPU_TEXTS[0])!r}))), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(_cpu_runs(CPU_TEXTS[0])) + 3), "False"]  # + the 3 M events

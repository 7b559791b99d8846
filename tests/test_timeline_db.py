"""The timeline of a database export (no trace_view.json): events from the profiler database's own tables,
checked against plain SQLite queries of the same file."""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from pathlib import Path

import broken
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

from perfkit.apps.cli import main
from perfkit.io import timeline as tl

RUN = FIXTURE_RUNS["new_db_level1"]
DATABASES = {rank: RUN / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db"
             for rank in (0, 1)}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)


def _raw(path: Path) -> dict[tuple[str, str], tuple[int, int]]:
    """Independently, per (process, lane): (events, total ns), straight from the tables."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    strings = dict(con.execute("SELECT id, value FROM STRING_IDS"))
    lanes: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for table, process in (("PYTORCH_API", "Python"), ("CANN_API", "CANN")):
        for thread, start, end in con.execute(f"SELECT globalTid, startNs, endNs FROM {table}"):
            lane = lanes[(process, f"Thread {int(thread) % 2**32}")]
            lane[0] += 1
            lane[1] += int(end) - int(start)
    for stream, start, end in con.execute("SELECT streamId, startNs, endNs FROM TASK"):
        lane = lanes[("Ascend Hardware", f"Stream {stream}")]
        lane[0] += 1
        lane[1] += end - start
    for group, start, end in con.execute("SELECT groupName, startNs, endNs FROM COMMUNICATION_OP"):
        lane = lanes[("HCCL", strings[group])]
        lane[0] += 1
        lane[1] += end - start
    return {key: tuple(value) for key, value in lanes.items()}


def test_events_and_lane_totals_equal_the_database_tables():
    events = tl.timeline(RUN, start_ms=0)
    for rank, path in DATABASES.items():
        mine = events[(events["rank"] == rank) & (events["ph"] == "X")]
        got = {key: (len(group), group["dur_us"].sum()) for key, group in mine.groupby(["process", "lane"])}
        expected = _raw(path)
        assert got.keys() == expected.keys()
        for lane, (count, total_ns) in expected.items():
            assert got[lane][0] == count, lane
            assert got[lane][1] == pytest.approx(total_ns / 1000, rel=1e-9), lane


def test_device_tasks_are_named_by_their_kernel_and_steps_by_the_profiler_step():
    con = sqlite3.connect(f"file:{DATABASES[0]}?mode=ro&immutable=1", uri=True)
    strings = dict(con.execute("SELECT id, value FROM STRING_IDS"))
    kernels = sorted((strings[name], strings[kind]) for name, kind in con.execute(
        "SELECT c.name, c.opType FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId"))
    ((step, start, end),) = con.execute(
        "SELECT p.name, p.startNs, p.endNs FROM PYTORCH_API p JOIN STRING_IDS s ON s.id = p.name "
        "WHERE s.value LIKE 'ProfilerStep#%'")
    found = tl.index(RUN)
    assert found.ranks[0]["steps"] == [[int(strings[step].split("#")[1]), int(start) / 1000, int(end) / 1000]]
    events = tl.timeline(RUN, step=50, ranks=[0])
    device = events[(events["process"] == "Ascend Hardware")]
    named = sorted(zip(device["name"], device["op_type"]))
    assert [pair for pair in named if pair in set(kernels)] == [k for k in kernels if k in set(named)]
    assert len(set(kernels) & set(named)) == len(set(kernels))


def test_without_framework_calls_the_steps_come_from_step_time(tmp_path):
    """Crafted from the real file: a database without PYTORCH_API (MindSpore's own export has no such table)."""
    run = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "run")
    path = run / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    for stale in path.parent.glob("*.db-*"):
        stale.unlink()
    con = sqlite3.connect(path)
    con.execute("PRAGMA journal_mode=DELETE")  # the change in the file itself, not in a WAL beside it
    con.execute("DROP TABLE PYTORCH_API")
    con.commit()
    ((step, start, end),) = con.execute("SELECT id, startNs, endNs FROM STEP_TIME")
    con.close()
    found = tl.index(run)
    assert found.ranks[0]["steps"] == [[step, start / 1000, end / 1000]]
    assert "Python" not in set(tl.timeline(run, step=step)["process"])


def test_the_database_is_read_in_place_and_exported(tmp_path):
    run = broken.copy_run(FIXTURE_RUNS["new_db_level1"], tmp_path / "run")
    before = broken.folder_digest(run)
    out = tmp_path / "step50.json"
    result = CliRunner().invoke(main, ["trace", str(run), "--step", "50", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert broken.folder_digest(run) == before  # no journal, WAL or index beside the database
    assert out.stat().st_size > 0


@pytest.mark.parametrize("damage,problem", [("cut", "cannot be read"), ("not sqlite", "not an SQLite database")])
def test_a_damaged_database_is_one_line_exit_2(tmp_path, damage, problem):
    run = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "run")
    path = run / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    for stale in path.parent.glob("*.db-*"):
        stale.unlink()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3] if damage == "cut" else b"not a database at all" + data[21:])
    result = CliRunner().invoke(main, ["trace", str(run), "--step", "50", "-o", str(tmp_path / "s.json")])
    lines = [line for line in result.stderr.splitlines() if line.startswith("perfkit:")]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert path.name in lines[0] and problem in lines[0] and "Traceback" not in result.output


def test_the_page_draws_every_lane_of_a_database_step():
    from perfkit.views.figures import timeline
    events = tl.timeline(RUN, step=50, ranks=[0])
    fig = timeline.timeline_figure(events, title="step 50 · ")
    drawn = {label for trace in fig.data for label in trace.y}
    lanes = events[events["ph"] == "X"].drop_duplicates(["process", "lane"])
    assert set(lanes["process"]) == {"Python", "CANN", "Ascend Hardware", "HCCL"}
    assert all(any(f"{row.process} · {row.lane}" in label for label in drawn) for row in lanes.itertuples())


def test_a_cycle_the_run_does_not_have_is_refused_by_the_timeline_as_by_load(tmp_path):
    """Each rank of the export is one profiler run: `--cycle 2` is refused by `perfkit trace` with the line `perfkit
    summary` gives (cycles.chosen_cycle), and `--cycle 1` is the run itself."""
    out = tmp_path / "step.json"
    said = {command: CliRunner().invoke(main, [command, str(RUN), "--cycle", "2", *extra])
            for command, extra in (("trace", ["--step", "50", "-o", str(out)]), ("summary", []))}
    assert [result.exit_code for result in said.values()] == [2, 2] and not out.exists()
    assert said["trace"].output == said["summary"].output
    assert "has no profiler run 2 for rank 0 (--cycle)" in said["trace"].output
    assert CliRunner().invoke(main, ["trace", str(RUN), "--cycle", "1", "--step", "50", "-o", str(out)]).exit_code == 0

"""perfkit.io.cache: a cached load equals a cold one, changed files invalidate, broken entries fall back."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.apps.cli import main
from perfkit.core import model
from perfkit.core.model import Meta, Run
from perfkit.io import cache, parallel
from perfkit.io.formats import READERS
from perfkit.views.summary import summarize

sys.path.insert(0, str(REPO / "benchmarks"))
import generate  # noqa: E402


@pytest.fixture
def reads(monkeypatch) -> list:
    """Every real reader.read call made from now on, as (reader name, folder)."""
    calls = []
    for reader in READERS:
        original = reader.read

        def spy(folder, _original=original, _name=reader.name):
            calls.append((_name, Path(folder)))
            return _original(folder)
        monkeypatch.setattr(reader, "read", spy)
    return calls


def summary_json(path: Path) -> dict:
    """The summary of a load (not the CLI's: its answer cache would skip the load these tests are about)."""
    return json.loads(json.dumps(summarize(perfkit.load(path))))


def cli_summary(path: Path) -> str:
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(path)])
    assert result.exit_code == 0, result.output
    return result.output


def entry_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.parquet")) if folder.exists() else []


def tree_state(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns)
                  for p in folder.rglob("*"))


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # fixtures may be read-only; the copies are edited
    return target


@pytest.mark.parametrize("name", sorted(FIXTURE_RUNS))
def test_cached_summary_equals_cold(name, cache_dir, reads, monkeypatch):
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    uncached = summary_json(FIXTURE_RUNS[name])
    assert not cache_dir.exists()
    monkeypatch.delenv("PERFKIT_NO_CACHE")
    cold = summary_json(FIXTURE_RUNS[name])
    cold_reads = len(reads)
    assert entry_files(cache_dir)
    warm = summary_json(FIXTURE_RUNS[name])
    assert len(reads) == cold_reads, "the warm load read the files again"
    assert warm == cold == uncached


@pytest.mark.parametrize("name", ["new_level1", "cpu_2_10", "legacy_run_2"])
def test_cached_tables_equal_cold_tables(name, cache_dir):
    cold = perfkit.load(FIXTURE_RUNS[name])
    warm = perfkit.load(FIXTURE_RUNS[name])
    for name, frame in cold.tables().items():
        pd.testing.assert_frame_equal(warm.tables()[name], frame)
    assert warm.meta == cold.meta and warm.warnings == cold.warnings


def test_round_trip_keeps_dtypes_lists_and_meta(tmp_path):
    pipeline = model.table("pipeline", pd.DataFrame({
        "rank": [3, 3, 3], "op_id": [0, 1, 2], "op_type": ["Batch", None, "Map"], "workers": [1, 4, 8],
        "queue_usage": [0.5, float("nan"), 1.0], "queue_empty_pct": [0.0, 1.0, 2.0],
        "queue_length": [64, None, 8], "parent_id": [None, 0, 1], "children": [[1, 2], [], None],
    }))
    run = Run(path="/x/run", meta=Meta(device="Ascend", ranks=[3], env={"A": "1"}, config={"batch": [32, 3]}),
              warnings=["skipped x.csv: is empty"], pipeline=pipeline)
    entry = tmp_path / "runs" / "place" / "entry"
    assert cache.store(entry, run)
    back = cache.fetch(entry, reload=lambda name: pytest.fail(f"reloaded {name}"))
    for name, frame in run.tables().items():
        pd.testing.assert_frame_equal(back.tables()[name], frame)
    assert (back.path, back.meta, back.warnings) == (run.path, run.meta, run.warnings)


def test_an_entry_stored_in_the_background_is_there_when_the_block_ends(tmp_path, monkeypatch):
    """stores_in_background: the write runs on another thread while the caller goes on, and is finished (the
    entry readable, equal to the run) when the block ends; without the block it is written before store_soon
    returns."""
    import threading
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    writers, store = [], cache.store

    def recording_store(entry, stored):
        writers.append(threading.current_thread())
        return store(entry, stored)
    monkeypatch.setattr(cache, "store", recording_store)
    entry = tmp_path / "runs" / "place" / "entry"
    with cache.stores_in_background():
        cache.store_soon(entry, run)
    assert writers and writers[0] is not threading.current_thread()
    back = cache.fetch(entry, reload=lambda name: pytest.fail(f"reloaded {name}"))
    for name, frame in run.tables().items():
        pd.testing.assert_frame_equal(back.tables()[name], frame)
    now = tmp_path / "runs" / "place2" / "entry"
    cache.store_soon(now, run)
    assert writers[1] is threading.current_thread() and now.is_dir()


def test_an_error_of_a_background_store_is_raised_where_the_block_ends(tmp_path, monkeypatch):
    """Not a thread's traceback on stderr: the caller meets the error as it met it when the store was inline."""
    def failing_store(entry, run):
        raise KeyError("boom")
    monkeypatch.setattr(cache, "store", failing_store)
    reached = False
    with pytest.raises(KeyError, match="boom"):
        with cache.stores_in_background():
            cache.store_soon(tmp_path / "entry", Run(path="/x/run", meta=Meta()))
            reached = True  # the caller went on before the error was raised
    assert reached


def test_meta_that_json_would_change_is_not_cached(tmp_path):
    run = Run(path="/x/run", meta=Meta(config={"shape": (32, 3)}))  # a tuple would come back as a list
    assert not cache.store(tmp_path / "runs" / "place" / "entry", run)
    assert not (tmp_path / "entry").exists() and not list(tmp_path.iterdir())


def rewrite_computing(step_trace_time: Path, factor: float) -> list[float]:
    """Scale the Computing column (µs) of step_trace_time.csv; returns the new values in ms."""
    rows = list(csv.reader(step_trace_time.open(newline="", encoding="utf-8-sig")))
    col = rows[0].index("Computing")
    for row in rows[1:]:
        row[col] = repr(float(row[col]) * factor)
    with step_trace_time.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(rows)
    return [float(row[col]) / 1000 for row in rows[1:]]


def test_rewritten_file_invalidates_the_entry(tmp_path, cache_dir, reads):
    run = copy_run(FIXTURE_RUNS["new_level1_rank0"], tmp_path / "rank0_ascend_pt")
    before = summary_json(run)
    computing = rewrite_computing(run / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", factor=3)
    reads.clear()
    after = summary_json(run)
    assert ("ascend_ms", run) in reads
    assert after["steps"]["computing_ms"] == pytest.approx(sum(computing) / len(computing))
    assert after["steps"]["computing_ms"] == pytest.approx(3 * before["steps"]["computing_ms"])
    assert len(list((cache_dir / "runs").glob("*/*"))) == 1, "the stale entry of the rewritten run was not removed"


def test_touched_file_means_a_cold_read(tmp_path, cache_dir, reads):
    run = copy_run(FIXTURE_RUNS["new_level1_rank0"], tmp_path / "rank0_ascend_pt")
    first = summary_json(run)
    reads.clear()
    summary_json(run)
    assert reads == []
    target = run / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert summary_json(run) == first
    assert reads, "a touched file did not make the next load read the folder again"


def test_a_file_a_reader_reads_under_framework_makes_the_run_stale_raw_data_and_logs_do_not(tmp_path, cache_dir,
                                                                                              reads):
    """The cache keys a run by the files under its folders as the one walk (discovery.walk) sees them: the CPU
    reader's FRAMEWORK/ files count; raw CANN data (PROF_*) and the profiler's logs, which no reader reads, do not
    (discovery.SKIPPED). Kept answers are keyed the same way."""
    run = copy_run(FIXTURE_RUNS["cpu_2_10"], tmp_path / "run")
    unit = next(run.glob("*_ascend_ms"))
    question = ("summary",)
    first = summary_json(run)
    answer = cache.answer_entry(run, question, ())
    for skipped in (unit / "PROF_000001_20261122103128064_ABC" / "device_0" / "data" / "raw.data",
                    unit / "logs" / "profiler.log"):
        skipped.parent.mkdir(parents=True, exist_ok=True)
        skipped.write_text("new")
    reads.clear()
    assert summary_json(run) == first and reads == []
    assert cache.answer_entry(run, question, ()) == answer
    types = unit / "FRAMEWORK" / "cpu_op_type_info_0.csv"
    os.utime(types, ns=(types.stat().st_atime_ns, types.stat().st_mtime_ns + 1_000_000))
    assert summary_json(run) == first and ("cpu", unit) in reads
    assert cache.answer_entry(run, question, ()) != answer


@pytest.mark.parametrize("module", ["perfkit.io.loader", "perfkit.io.timeline"])
def test_cached_runs_and_timeline_indexes_are_keyed_by_all_the_code_that_builds_them(module):
    """Every module the loader (the timeline index) imports, directly or through others, is among the code its cache
    entries are keyed by (CODE): a change to any of them makes the entries stale."""
    import importlib

    from test_architecture import import_graph, package_files
    graph, files = import_graph(), package_files()
    reached, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo += list(graph[name])
    code = importlib.import_module(module).CODE
    uncovered = sorted(name for name in reached if not any(path == files[name] or path in files[name].parents
                                                           for path in code))
    assert "perfkit.io.formats.db_timeline" in reached and uncovered == []


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing", "entry_json"])
def test_broken_entry_falls_back_to_a_cold_read(damage, cache_dir, reads):
    run = FIXTURE_RUNS["new_level1"]
    cold = summary_json(run)
    files = entry_files(cache_dir)
    for path in files:
        if damage == "garbage":
            path.write_bytes(b"not parquet at all")
        elif damage == "truncated":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        elif damage == "missing":
            path.unlink()
    if damage == "entry_json":
        for path in cache_dir.rglob(cache.META_FILE):
            path.write_text("{")
    reads.clear()
    assert summary_json(run) == cold
    assert reads, "the broken entry was used instead of the files"
    reads.clear()
    assert summary_json(run) == cold
    assert reads == [], "the entry was not rewritten after the cold read"


def test_cache_dir_inside_the_run_is_never_written(tmp_path, monkeypatch, reads):
    run = copy_run(FIXTURE_RUNS["new_level1"], tmp_path / "run")
    state = tree_state(run)
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(run / ".cache"))
    summary_json(run)
    summary_json(run)
    assert tree_state(run) == state
    assert len(reads) == 2 * len(set(reads))  # both loads were cold


def test_default_cache_dir_is_the_users_not_the_runs(tmp_path, monkeypatch):
    run = copy_run(FIXTURE_RUNS["new_level1"], tmp_path / "run")
    state = tree_state(run)
    monkeypatch.delenv("PERFKIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    summary_json(run)
    assert entry_files(tmp_path / "xdg" / "perfkit")
    assert tree_state(run) == state


def test_no_cache_env_writes_nothing(cache_dir, monkeypatch, reads):
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    summary_json(FIXTURE_RUNS["new_level1"])
    summary_json(FIXTURE_RUNS["new_level1"])
    assert not cache_dir.exists()
    assert len(reads) == 2 * len(set(reads))


def test_many_ranks_read_in_parallel_equal_one_process(tmp_path, cache_dir, monkeypatch):
    run, ranks = tmp_path / "cluster", parallel.PARALLEL_MIN_FOLDERS + 1
    generate.generate_cluster(run, ranks=ranks, steps=3, slow_ranks=(2,))
    in_workers = summary_json(run)
    warm = summary_json(run)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_FOLDERS", 10**6)
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    sequential = summary_json(run)
    assert in_workers == warm == sequential
    assert in_workers["ranks"] == list(range(ranks))


def test_warm_load_reads_op_rows_only_when_they_are_used(cache_dir, monkeypatch):
    """`perfkit summary` never uses op rows: a warm load leaves them in the cache until asked for."""
    cold = perfkit.load(FIXTURE_RUNS["legacy_run_2"])
    read = []
    original = cache._read_table
    monkeypatch.setattr(cache, "_read_table", lambda folder, spec: read.append(spec["file"]) or original(folder, spec))
    warm = perfkit.load(FIXTURE_RUNS["legacy_run_2"])
    perfkit.summarize(warm)
    assert "ops.parquet" not in read and "steps.parquet" in read
    pd.testing.assert_frame_equal(warm.ops, cold.ops)
    assert read.count("ops.parquet") == 1
    warm.ops  # noqa: B018 - a second use reads nothing more
    assert read.count("ops.parquet") == 1


def test_deferred_op_rows_come_from_the_files_when_the_entry_is_gone(cache_dir):
    cold = perfkit.load(FIXTURE_RUNS["legacy_run_2"])
    warm = perfkit.load(FIXTURE_RUNS["legacy_run_2"])
    shutil.rmtree(cache_dir)  # e.g. the user cleared the cache while the dashboard was up
    pd.testing.assert_frame_equal(warm.ops, cold.ops)


def test_warm_load_warns_about_impossible_op_times_like_the_cold_one(tmp_path, cache_dir, monkeypatch):
    run = copy_run(FIXTURE_RUNS["legacy_run_2"], tmp_path / "run")
    detail = run / "aicore_intermediate_1_detail.csv"
    rows = list(csv.reader(detail.open(newline="")))
    time_column = rows[0].index("execution_time")
    rows[1][time_column] = "-3.5"
    with detail.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    cold, warm = summary_json(run), summary_json(run)
    assert warm == cold
    assert any("ops.avg_ms" in w and "negative or infinite" in w for w in cold["warnings"])


def test_cache_is_trimmed_to_its_limit_least_recently_used_first(cache_dir, monkeypatch):
    runs = [FIXTURE_RUNS[name] for name in ("legacy_run_2", "legacy_run_3", "legacy_run_4")]
    for run in runs:
        perfkit.load(run)
    entries = {_entry_source(p): p.parent for p in entry_files(cache_dir)}
    sizes = {run: sum(f.stat().st_size for f in entries[str(run)].iterdir()) for run in runs}
    assert all(sizes.values())
    perfkit.load(runs[0])  # now the most recently used; runs[1] the least
    monkeypatch.setenv("PERFKIT_CACHE_MAX_MB", str((sizes[runs[0]] + sizes[runs[2]] + 100) / 1024**2))
    copy = copy_run(runs[1], cache_dir.parent / "copy")  # a new folder: a cold load that stores, then trims
    perfkit.load(copy)
    kept = {_entry_source(p) for p in entry_files(cache_dir)}
    assert str(copy) in kept and str(runs[0]) in kept  # this load's entry and the most recently used stay
    assert str(runs[1]) not in kept


def _entry_source(parquet: Path) -> str:
    """The run a cache entry was made from, as its entry.json names it."""
    return json.loads((parquet.parent / cache.META_FILE).read_text())["run"]

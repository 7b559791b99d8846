"""The database export reader, checked against SQL written here on the real fixture (torch_npu, 2 ranks,
database export only), plus the raw-data message on folders shaped like CANN's PROF_* output."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import broken
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.apps.cli import main
from perfkit.io.formats import db

RUN = FIXTURE_RUNS["new_db_level1"]
OUTPUT = "ASCEND_PROFILER_OUTPUT"
RANKS = (0, 1)
MB = 1024 * 1024


pytestmark = pytest.mark.usefixtures("uncached")


def profiler_db(rank: int, root: Path = RUN) -> Path:
    return root / f"rank{rank}_ascend_pt" / OUTPUT / f"ascend_pytorch_profiler_{rank}.db"


def analysis_db(rank: int, root: Path = RUN) -> Path:
    return root / f"rank{rank}_ascend_pt" / OUTPUT / "analysis.db"


def sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as connection:
        return connection.execute(query).fetchall()


def summary(path: Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(path)])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def run():
    return perfkit.load(RUN)


def test_the_real_database_fixture_loads(run):
    assert run.ranks == list(RANKS)
    assert (run.meta.layout, run.meta.export, run.meta.device, run.meta.chip) == ("ascend_db", "db", "Ascend",
                                                                                  "Ascend910B")
    assert run.meta.framework == "torch_npu"  # ascend_pytorch_profiler_{r}.db: actions in PyTorch terms
    for table in ("steps", "op_types", "ops"):
        assert sorted(getattr(run, table)["rank"].unique()) == list(RANKS), table
    code, out, err = summary(RUN)
    assert code == 0, err
    assert json.loads(out)["ranks"] == list(RANKS)


def test_compute_dtype_from_the_kernels_input_dtypes(run):
    first_dtypes = {value.split(";")[0] for rank in RANKS for (value,) in sql(profiler_db(rank), """
        SELECT d.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS t ON t.id = c.opType
        JOIN STRING_IDS d ON d.id = c.inputDataTypes WHERE t.value IN ('Conv2D', 'MatMulV2')""")}
    assert first_dtypes == {"FLOAT"} and run.meta.compute_dtype == "float32"


def test_task_join_in_rowid_chunks_gives_the_same_tables(run, monkeypatch):
    monkeypatch.setattr(db, "TASK_ROWS_PER_CHUNK", 100)  # the fixture's 552 tasks in several threads' ranges
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    chunked = perfkit.load(RUN)
    assert len(db._task_chunks(db.Database(profiler_db(0), []))) == 4
    assert chunked.ops.equals(run.ops) and chunked.op_types.equals(run.op_types)


@pytest.mark.parametrize("rank", RANKS)
def test_step_time_is_step_time_table(run, rank):
    expected = dict(sql(profiler_db(rank), "SELECT id, (endNs - startNs) / 1e6 FROM STEP_TIME"))
    steps = run.steps[run.steps["rank"] == rank]
    assert dict(zip(steps["step"], steps["total_ms"])) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("rank", RANKS)
def test_op_type_totals_are_task_sums(run, rank):
    """Compute tasks by type, and the collectives by COMMUNICATION_OP's opType (`hcom_allReduce_` written, the
    trailing separator left off: hcom_allReduce, the run's largest type)."""
    rows = sql(profiler_db(rank), """
        SELECT s.value, count(*), sum(t.endNs - t.startNs) / 1e6
        FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId JOIN STRING_IDS s ON s.id = c.opType
        GROUP BY s.value""")
    collectives = sql(profiler_db(rank), """
        SELECT rtrim(s.value, '_'), count(*), sum(o.endNs - o.startNs) / 1e6 FROM COMMUNICATION_OP o
        JOIN STRING_IDS s ON s.id = o.opType GROUP BY s.value""")
    assert [name for name, _, _ in collectives] == ["hcom_allReduce"]
    rows += collectives
    types = run.op_types[run.op_types["rank"] == rank].set_index("type")
    assert types["total_ms"].idxmax() == "hcom_allReduce"
    assert sorted(types.index) == sorted(name for name, _, _ in rows)
    for name, count, total_ms in rows:
        assert types.loc[name, "count"] == count
        assert types.loc[name, "total_ms"] == pytest.approx(total_ms, abs=1e-9)
    assert types["share"].sum() == pytest.approx(1.0)


@pytest.mark.parametrize("rank", RANKS)
def test_ops_are_kernels_and_collectives_by_name(run, rank):
    kernels = sql(profiler_db(rank), """
        SELECT s.value, count(*), sum(t.endNs - t.startNs) / 1e6 FROM TASK t
        JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId JOIN STRING_IDS s ON s.id = c.name
        GROUP BY s.value""")
    collectives = sql(profiler_db(rank), """
        SELECT s.value, count(*), sum(o.endNs - o.startNs) / 1e6 FROM COMMUNICATION_OP o
        JOIN STRING_IDS s ON s.id = o.opName GROUP BY s.value""")
    ops = run.ops[run.ops["rank"] == rank].set_index("name")
    assert len(collectives) == 4 and len(ops) == len(kernels) + len(collectives)
    for name, count, total_ms in kernels + collectives:
        assert (ops.loc[name, "count"], ops.loc[name, "total_ms"]) == (count, pytest.approx(total_ms, abs=1e-9))


@pytest.mark.parametrize("rank", RANKS)
def test_exposed_communication_is_analysis_db(run, rank):
    rows = sql(analysis_db(rank), "SELECT CAST(step AS INTEGER), communication_not_overlapped / 1e3, "
                                  "communication / 1e3, overlapped / 1e3, computing / 1e3 FROM StepTraceTime")
    steps = run.steps[run.steps["rank"] == rank].set_index("step")
    for step, exposed, comm, overlapped, computing in rows:
        assert steps.loc[step, "comm_exposed_ms"] == pytest.approx(exposed)
        assert steps.loc[step, "comm_ms"] == pytest.approx(comm)
        assert steps.loc[step, "comm_overlapped_ms"] == pytest.approx(overlapped)
        assert steps.loc[step, "computing_ms"] == pytest.approx(computing)
        assert exposed > 90  # the fixture's step is mostly waiting in a collective: a real number was read


def test_ranks_reads_the_steps_alone():
    from perfkit.io.loader import load_steps
    _, steps, _ = load_steps(RUN)
    expected = {rank: sql(profiler_db(rank), "SELECT (endNs - startNs) / 1e6 FROM STEP_TIME")[0][0] for rank in RANKS}
    assert dict(zip(steps["rank"], steps["total_ms"])) == pytest.approx(expected)


def test_database_bytes_and_mtime_unchanged_and_nothing_beside(tmp_path, monkeypatch):
    run_copy = broken.copy_run(RUN, tmp_path / "run")
    files = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in run_copy.rglob("*") if path.is_file()}
    monkeypatch.delenv("PERFKIT_NO_CACHE")  # the cached path too: its key reads sizes and mtimes
    perfkit.load(run_copy)
    perfkit.load(run_copy)
    code, _, err = summary(run_copy)
    assert code == 0, err
    after = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in run_copy.rglob("*") if path.is_file()}
    assert after == files  # no -journal, -wal or -shm appeared, no byte or mtime changed


def test_text_export_is_read_where_both_are(tmp_path):
    # Crafted: torch_npu's default export writes both, but no fixture has both; the DB files of the DB fixture are
    # put beside the text fixture's tables.
    rank = broken.copy_run(FIXTURE_RUNS["new_level1_rank0"], tmp_path / "rank0_ascend_pt")
    for name in ("ascend_pytorch_profiler_0.db", "analysis.db"):
        shutil.copyfile(profiler_db(0).with_name(name), rank / OUTPUT / name)
    both, text = perfkit.load(rank), perfkit.load(FIXTURE_RUNS["new_level1_rank0"])
    assert both.meta.export == text.meta.export == "text"
    assert both.steps.equals(text.steps) and both.op_types.equals(text.op_types)


@pytest.mark.parametrize("rank", RANKS)
def test_memory_matches_sql(run, rank):
    memory = run.memory[run.memory["rank"] == rank]
    framework = memory[~memory["component"].str.startswith("CANN/")]
    peak = sql(profiler_db(rank), "SELECT max(totalAllocated), max(totalReserved) FROM MEMORY_RECORD")[0]
    assert (framework["allocated_mb"].max(), framework["reserved_mb"].max()) == pytest.approx((peak[0] / MB,
                                                                                                peak[1] / MB))
    assert set(framework["component"]) == {"PTA", "GE", "PTA+GE"} and set(memory["device"]) == {f"NPU:{rank}"}
    assert (memory["time_ms"] >= 0).all()  # on the run's clock, as the CSV twins' memory is
    modules = memory[memory["component"].str.startswith("CANN/")]
    assert len(modules) == sql(profiler_db(rank), "SELECT count(*) FROM NPU_MODULE_MEM")[0][0]
    blocks = run.op_memory[run.op_memory["rank"] == rank]
    (op_bytes, unreleased) = sql(profiler_db(rank), "SELECT sum(size), sum(releaseTime IS NULL) FROM OP_MEMORY")[0]
    assert blocks["size_mb"].sum() == pytest.approx(op_bytes / MB)
    assert blocks["released_at_ms"].isna().sum() == unreleased


@pytest.mark.parametrize("rank", RANKS)
def test_communication_matches_sql(run, rank):
    ops = run.comm_ops[run.comm_ops["rank"] == rank].set_index("name")
    rows = sql(analysis_db(rank), "SELECT hccl_op_name, elapse_time, wait_time, group_name FROM CommAnalyzerTime")
    assert len(ops) == len(rows)
    for name, elapse, wait, group in rows:
        assert (ops.loc[name, "elapse_ms"], ops.loc[name, "wait_ms"]) == pytest.approx((elapse, wait))
        assert ops.loc[name, "group"] == group
    # an op's size: each link type once (the table repeats it per packet-size bucket), SDMA (= HCCS + PCIE + SIO) out
    sizes = dict(sql(analysis_db(rank), """
        SELECT hccl_op_name, sum(size) FROM (SELECT DISTINCT hccl_op_name, transport_type, transit_size AS size
        FROM CommAnalyzerBandwidth WHERE transport_type != 'SDMA') GROUP BY hccl_op_name"""))
    assert ops["size_mb"].to_dict() == pytest.approx(sizes)
    assert set(ops["kind"]) == {"collective"} and set(ops["step"]) == {50}
    links = run.comm_links[run.comm_links["rank"] == rank]
    totals = sql(analysis_db(rank), "SELECT CAST(dst_rank AS INTEGER), bandwidth FROM CommAnalyzerMatrix "
                                    "WHERE hccl_op_name = 'allreduce-total'")
    assert set(links["name"]) == {"allreduce-total"}  # per-type totals present: only they count
    assert dict(zip(links["dst"], links["bandwidth_gb_s"])) == pytest.approx(dict(totals))


# ---------------------------------------------------------------- broken databases (beside the robustness corpus)

def test_database_locked_by_a_writer_still_loads(tmp_path):
    rank = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "rank0_ascend_pt")
    pristine = perfkit.load(rank)
    writer = sqlite3.connect(rank / OUTPUT / "ascend_pytorch_profiler_0.db", isolation_level=None)
    writer.execute("PRAGMA journal_mode=DELETE")
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("DELETE FROM TASK")  # not committed: a reader that waited or saw it would lose every kernel
    try:
        locked = perfkit.load(rank)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert locked.op_types.equals(pristine.op_types) and locked.steps.equals(pristine.steps)


def test_nothing_readable_is_one_line_exit_2(tmp_path):
    rank = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "rank0_ascend_pt")
    broken.not_sqlite(rank / OUTPUT / "ascend_pytorch_profiler_0.db")
    broken.cut_in_half(rank / OUTPUT / "analysis.db")
    code, _, err = summary(rank)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err
    assert "ascend_pytorch_profiler_0.db" in lines[0] and "not an SQLite database" in lines[0]


def test_missing_kernel_tables_leave_the_steps(tmp_path):
    rank = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "rank0_ascend_pt")
    broken.drop_table(rank / OUTPUT / "ascend_pytorch_profiler_0.db", "TASK")
    run = perfkit.load(rank)
    assert run.op_types.empty and len(run.steps) == 1
    assert any("ascend_pytorch_profiler_0.db" in w and "TASK" in w for w in run.warnings), run.warnings


def test_a_database_with_half_its_tables_loads_the_rest_and_names_what_is_missing(tmp_path):
    """Rank 1's profiler database without STRING_IDS (its kernels have no names), rank 0's analysis.db without
    CommAnalyzerBandwidth (its ops no sizes): one warning per file naming the table; the rest as before."""
    run_dir = tmp_path / "run"
    shutil.copytree(RUN, run_dir)
    broken.drop_table(run_dir / "rank1_ascend_pt" / OUTPUT / "ascend_pytorch_profiler_1.db", "STRING_IDS")
    broken.drop_table(run_dir / "rank0_ascend_pt" / OUTPUT / "analysis.db", "CommAnalyzerBandwidth")
    pristine, run = perfkit.load(RUN), perfkit.load(run_dir)
    said = [w for w in run.warnings if "lacks table" in w]
    assert said == [
        "rank0_ascend_pt: analysis.db: lacks table(s) CommAnalyzerBandwidth that CommAnalyzerTime refer to "
        "(a database with tables missing); what needs them is left out",
        "rank1_ascend_pt: ascend_pytorch_profiler_1.db: lacks table(s) STRING_IDS that TASK, COMPUTE_TASK_INFO, "
        "COMMUNICATION_OP refer to (a database with tables missing); what needs them is left out"], run.warnings
    assert not any("Level0" in w for w in run.warnings)  # nameless kernels are not a Level0 collection
    assert run.steps.equals(pristine.steps)
    ops = run.comm_ops.set_index(["rank", "name"])
    assert ops.loc[0, "size_mb"].isna().all() and ops.loc[1, "size_mb"].notna().all()
    assert ops["elapse_ms"].equals(pristine.comm_ops.set_index(["rank", "name"])["elapse_ms"])
    assert set(run.op_types["rank"]) == {0}


def test_renamed_column_is_named(tmp_path):
    rank = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "rank0_ascend_pt")
    broken.rename_column(rank / OUTPUT / "ascend_pytorch_profiler_0.db", "STEP_TIME", "endNs", "stopNs")
    run = perfkit.load(rank)
    assert any("skipped table STEP_TIME" in w and "endNs" in w for w in run.warnings), run.warnings
    # the total falls back to analysis.db's parts (Computing + Not Overlapped + Free + Preparing, µs)
    (parts,) = sql(analysis_db(0), "SELECT (computing + communication_not_overlapped + free + preparing) / 1e3 "
                                   "FROM StepTraceTime")[0]
    assert run.steps["total_ms"].tolist() == pytest.approx([parts])


def test_unmerged_wal_is_said(tmp_path):
    # Crafted: a profiler killed before it closed its database leaves committed pages in the -wal file.
    rank = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "rank0_ascend_pt")
    (rank / OUTPUT / "ascend_pytorch_profiler_0.db-wal").write_bytes(b"\0" * 4096)
    run = perfkit.load(rank)
    assert any("ascend_pytorch_profiler_0.db-wal" in w and "not read" in w for w in run.warnings), run.warnings


# ---------------------------------------------------------------- raw CANN data

def raw_prof(parent: Path) -> Path:
    """Crafted (no fixture keeps raw data): the shape of CANN's PROF_* folder, device and host data files."""
    prof = parent / "PROF_000001_20261123101435646_FKFLNPEPPRRCFCBA"
    for sub in ("device_0/data", "host/data"):
        (prof / sub).mkdir(parents=True)
        (prof / sub / "Framework.task_desc_info.0.slice_0").write_bytes(b"\x00\x01")
    return prof


def one_line_error(path: Path) -> str:
    code, _, err = summary(path)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_mindspore_folder_without_analysis_says_offline_analyse(tmp_path):
    folder = tmp_path / "host_1234_20261123101435_ascend_ms"
    raw_prof(folder)
    (folder / "profiler_info_0.json").write_text("{}")
    line = one_line_error(folder)
    assert "raw CANN" in line and "PROF_000001" in line
    assert f"Profiler.offline_analyse('{folder}')" in line


def test_torch_npu_folder_without_analysis_says_analyse(tmp_path):
    folder = tmp_path / "host_1234_20261123101435_ascend_pt"
    raw_prof(folder)
    line = one_line_error(tmp_path)  # the parent of the rank folder, as a user passes a cluster run
    assert "raw CANN" in line and f"analyse('{folder}')" in line


def test_bare_prof_folder_gives_msprof_export(tmp_path):
    prof = raw_prof(tmp_path)
    line = one_line_error(tmp_path)
    assert "raw CANN" in line and f"msprof --export=on --output={prof}" in line


def test_no_files_message_lists_what_it_found(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trace_view.json").write_text("[]")
    (tmp_path / "notes.txt").write_text("run 3")
    line = one_line_error(tmp_path)
    assert "no MindSpore profiler files found" in line
    assert "notes.txt" in line and os.path.join("out", "trace_view.json") in line


def test_forward_backward_span_from_scoped_kernel_names(tmp_path):
    # Crafted: MindSpore names kernels by scope (Default/…, Gradients/…), torch_npu (the only database fixture)
    # does not; the fixture's names get MindSpore's scopes: kernels starting before the middle of the step
    # forward, the later ones backward.
    rank = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "rank0_ascend_pt")
    path = rank / OUTPUT / "ascend_pytorch_profiler_0.db"
    ((begin, end),) = sql(path, "SELECT startNs, endNs FROM STEP_TIME")
    middle = (begin + end) // 2
    kernels = "FROM TASK t JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId"
    broken._edit_database(
        path,
        f"UPDATE STRING_IDS SET value = 'Default/net/' || value WHERE id IN "
        f"(SELECT c.name {kernels} GROUP BY c.name HAVING min(t.startNs) < {middle})",
        f"UPDATE STRING_IDS SET value = 'Gradients/Default/net/' || value WHERE id IN "
        f"(SELECT c.name {kernels} GROUP BY c.name HAVING min(t.startNs) >= {middle})")
    rows = sql(path, f"SELECT s.value, t.startNs, t.endNs {kernels} JOIN STRING_IDS s ON s.id = c.name")
    in_step = [(name, start, stop) for name, start, stop in rows if begin <= start < end]
    first_forward = min(start for name, start, _ in in_step if name.startswith("Default/"))
    last_backward = max(stop for name, _, stop in in_step if name.startswith("Gradients/"))
    steps = perfkit.load(rank).steps
    assert steps["fwd_bwd_ms"].tolist() == pytest.approx([(last_backward - first_forward) / 1e6])
    expected_tail = (end - begin) / 1e6 - steps["interval_ms"].iloc[0] - (last_backward - first_forward) / 1e6
    assert steps["tail_ms"].tolist() == pytest.approx([max(expected_tail, 0.0)])


def test_without_analysis_db_the_steps_are_step_time_spans(tmp_path):
    # Crafted: single-card runs write no analysis.db (it comes with communication); only STEP_TIME tells then.
    rank = broken.copy_run(FIXTURE_RUNS["new_db_level1_rank0"], tmp_path / "rank0_ascend_pt")
    (rank / OUTPUT / "analysis.db").unlink()
    run = perfkit.load(rank)
    ((step, total_ms),) = sql(profiler_db(0), "SELECT id, (endNs - startNs) / 1e6 FROM STEP_TIME")
    assert run.steps[["step", "total_ms"]].values.tolist() == [[step, pytest.approx(total_ms)]]
    assert run.steps[["interval_ms", "fwd_bwd_ms", "comm_exposed_ms"]].isna().all().all()
    assert run.meta.step_source == "step_time" and len(run.op_types)

"""The database export at Level0 (tests/runs/msinsight_db_level0, real torch_npu files) and the communication
sources of a database export: op types from kernel names, communication ops from COMMUNICATION_OP where no
communication analysis exists, and MindSpore's communication_analyzer.db. Numbers are checked against SQL
written here on the raw files."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor import advise
from perfkit.analysis.ledger import steady_means
from perfkit.views.summary import summarize

RUN = REPO / "tests" / "runs" / "msinsight_db_level0"
OUTPUT = "ASCEND_PROFILER_OUTPUT"
RANKS = (0, 1)


pytestmark = pytest.mark.usefixtures("uncached")


def profiler_db(rank: int, root: Path = RUN) -> Path:
    return root / f"rank{rank}_ascend_pt" / OUTPUT / f"ascend_pytorch_profiler_{rank}.db"


def sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as connection:
        return connection.execute(query).fetchall()


@pytest.fixture(scope="module")
def run():
    return perfkit.load(RUN)


def test_level0_types_are_none_in_the_files():
    """The premise: Level0 writes `N/A` for every compute and communication op type."""
    for rank in RANKS:
        for table, column in (("COMPUTE_TASK_INFO", "opType"), ("COMMUNICATION_OP", "opType")):
            values = sql(profiler_db(rank), f"SELECT DISTINCT s.value FROM {table} t JOIN STRING_IDS s "
                                            f"ON s.id = t.{column}")
            assert values == [("N/A",)]


@pytest.mark.parametrize("rank", RANKS)
def test_op_types_come_from_kernel_names(run, rank):
    types = run.op_types[run.op_types["rank"] == rank].set_index("type")
    assert "N/A" not in types.index
    kernels = sql(profiler_db(rank), "SELECT n.value, sum(t.endNs - t.startNs), count(*) FROM TASK t "
                                     "JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId "
                                     "JOIN STRING_IDS n ON n.id = c.name GROUP BY n.value")
    # Conv2D1, Conv2D2, ...: the kernel name is the type with a number appended
    conv = [(ns, count) for name, ns, count in kernels if re.fullmatch(r"Conv2D\d+", name)]
    assert conv
    assert types.at["Conv2D", "total_ms"] == pytest.approx(sum(ns for ns, _ in conv) / 1e6, rel=1e-12)
    assert types.at["Conv2D", "count"] == sum(count for _, count in conv)
    # the collectives are typed as the typed exports type them, their ops' summed elapse time
    elapse = sql(profiler_db(rank), "SELECT sum(endNs - startNs), count(*) FROM COMMUNICATION_OP")[0]
    assert types.at["hcom_allReduce", "total_ms"] == pytest.approx(elapse[0] / 1e6, rel=1e-12)
    assert types.at["hcom_allReduce", "count"] == elapse[1]
    said = [w for w in run.warnings if f"ascend_pytorch_profiler_{rank}.db: COMPUTE_TASK_INFO: no op types" in w]
    assert len(said) == 1


@pytest.mark.parametrize("rank", RANKS)
def test_communication_ops_come_from_communication_op(run, rank):
    ops = run.comm_ops[run.comm_ops["rank"] == rank].sort_values("name")
    rows = sql(profiler_db(rank), "SELECT n.value, (o.endNs - o.startNs) / 1e6, o.startNs, s.id FROM COMMUNICATION_OP o "
                                  "JOIN STRING_IDS n ON n.id = o.opName JOIN STEP_TIME s "
                                  "ON o.startNs >= s.startNs AND o.startNs < s.endNs ORDER BY n.value")
    assert len(rows) == 4 == len(ops)
    assert list(ops["name"]) == [name for name, *_ in rows]
    assert list(ops["elapse_ms"]) == pytest.approx([ms for _, ms, *_ in rows], rel=1e-12)
    assert list(ops["step"]) == [step for *_, step in rows] == [50] * 4
    assert set(ops["kind"]) == {"collective"}
    assert ops["transit_ms"].isna().all()  # Level0 has no transfer/wait split


def test_the_communication_summary_is_the_ops_time_per_step(run):
    summary = summarize(run)
    per_rank = {}
    for rank in RANKS:
        (ns,) = sql(profiler_db(rank), "SELECT sum(endNs - startNs) FROM COMMUNICATION_OP")[0]
        per_rank[rank] = ns / 1e6  # one profiled step
        entry = next(e for e in summary["per_rank"] if e["rank"] == rank)
        assert entry["communication"]["collective_ms"] == pytest.approx(per_rank[rank], rel=1e-9)
    assert summary["communication"]["collective_ms"] == pytest.approx(sum(per_rank.values()) / 2, rel=1e-9)


def test_not_checked_never_asks_a_database_export_for_communication_json(run):
    advice = advise(run)
    assert not [reason for reason in advice.not_checked.values() if "no communication.json" in reason]
    # comm_wait looked for the ops (COMMUNICATION_OP gave them) and found no measured transfer/wait split in them;
    # the communication finding's split is estimated from their timing (tests/test_comm_split.py)
    assert advice.not_checked["comm_wait"] == ("no collective communication op with measured transit or wait time "
                                               "(the communication finding's split is estimated from the ops' timing)")


def _with_communication_analyzer(tmp_path: Path) -> Path:
    """Rank 0 of the Level0 run with a communication_analyzer.db beside it, crafted from the real analysis.db of
    the Level1 fixture (new_format/msinsight_db_level1, the same job; CommAnalyzer* tables copied row for row):
    MindSpore's database export writes msprof's communication analysis under that name."""
    folder = tmp_path / "rank0_ascend_pt"
    shutil.copytree(RUN / "rank0_ascend_pt", folder)
    source = FIXTURE_RUNS["new_db_level1"] / "rank0_ascend_pt" / OUTPUT / "analysis.db"
    target = folder / OUTPUT / "communication_analyzer.db"
    with sqlite3.connect(f"file:{source}?mode=ro&immutable=1", uri=True) as real, sqlite3.connect(target) as made:
        for name, schema in real.execute("SELECT name, sql FROM sqlite_master WHERE name LIKE 'CommAnalyzer%'"):
            made.execute(schema)
            rows = real.execute(f'SELECT * FROM "{name}"').fetchall()
            made.executemany(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(rows[0]))})', rows)
    return folder


def test_communication_analyzer_db_gives_the_transfer_wait_split(tmp_path):
    folder = _with_communication_analyzer(tmp_path)
    run = perfkit.load(folder)
    times = sql(folder / OUTPUT / "communication_analyzer.db",
                "SELECT hccl_op_name, elapse_time, transit_time, wait_time FROM CommAnalyzerTime ORDER BY 1")
    ops = run.comm_ops.sort_values("name")
    assert list(ops["name"]) == [name for name, *_ in times]
    assert list(ops["transit_ms"]) == pytest.approx([transit for _, _, transit, _ in times], rel=1e-12)
    # the ledger splits the exposed collective time by transit / elapse of the ops
    share = sum(t for _, _, t, _ in times) / sum(e for _, e, _, _ in times)
    (exposed_us,) = sql(folder / OUTPUT / "analysis.db", "SELECT communication_not_overlapped FROM StepTraceTime")[0]
    means = steady_means(run).iloc[0]
    assert means["comm_transfer"] == pytest.approx(exposed_us / 1e3 * share, rel=1e-9)
    assert means["comm_transfer"] + means["comm_wait"] == pytest.approx(exposed_us / 1e3, rel=1e-9)
    assert "comm" not in means or means["comm"] == 0


def test_analysis_db_tables_win_over_communication_op(tmp_path):
    """Where the analysis tables exist, COMMUNICATION_OP does not add its ops a second time."""
    folder = _with_communication_analyzer(tmp_path)
    run = perfkit.load(folder)
    assert len(run.comm_ops) == len(sql(folder / OUTPUT / "communication_analyzer.db",
                                        "SELECT * FROM CommAnalyzerTime"))
    assert run.comm_ops["transit_ms"].notna().all()


def _copy_rank0(tmp_path: Path) -> Path:
    folder = tmp_path / "rank0_ascend_pt"
    shutil.copytree(RUN / "rank0_ascend_pt", folder)
    return folder


def test_an_op_ending_before_it_starts_is_named_and_unknown(tmp_path):
    folder = _copy_rank0(tmp_path)
    with sqlite3.connect(profiler_db(0, tmp_path)) as made:
        made.execute("UPDATE COMMUNICATION_OP SET endNs = startNs - 5 WHERE rowid = 1")
    run = perfkit.load(folder)
    assert run.comm_ops["elapse_ms"].isna().sum() == 1 and run.comm_ops["elapse_ms"].notna().sum() == 3
    said = [w for w in run.warnings if "COMMUNICATION_OP" in w]
    assert said == ["ascend_pytorch_profiler_0.db: COMMUNICATION_OP: 1 op(s) end before they "
                    "start; their time is unknown"]


def test_half_the_tables_the_rest_loads_one_warning_each(tmp_path):
    folder = _copy_rank0(tmp_path)
    with sqlite3.connect(profiler_db(0, tmp_path)) as made:
        made.execute("DROP TABLE TASK")
        made.execute("ALTER TABLE COMMUNICATION_OP RENAME COLUMN opName TO op")
    run = perfkit.load(folder)
    assert len(run.steps) == 1 and not len(run.op_types) and not len(run.comm_ops)
    assert len([w for w in run.warnings if "skipped table COMMUNICATION_OP: lacks column(s) opName" in w]) == 1
    assert len([w for w in run.warnings if "no kernels" in w]) == 1


def test_dataset_csv_beside_the_database_tells_sink_mode(tmp_path):
    """dataset.csv sits in the database export's ASCEND_PROFILER_OUTPUT/ too (CANN's file list); its device-side
    stages say sink mode as in the text export. The file is crafted with the text export tests' columns."""
    folder = _copy_rank0(tmp_path)
    assert perfkit.load(folder).meta.data_mode is None
    (folder / OUTPUT / "dataset.csv").write_text("Operation,Stage,Occurrences,Avg. time (us),Custom Info\n"
                                                "DeviceQueue,PushToAscend,10,120.5,\n")
    assert perfkit.load(folder).meta.data_mode == "sink"


def test_a_broken_dataset_csv_is_named_and_the_rest_loads(tmp_path):
    folder = _copy_rank0(tmp_path)
    (folder / OUTPUT / "dataset.csv").write_text("Operation,Occurrences\nDeviceQueue,10\n")
    run = perfkit.load(folder)
    assert len(run.steps) == 1 and run.meta.data_mode is None
    assert len([w for w in run.warnings if "dataset.csv" in w and "lacks column(s) Stage" in w]) == 1

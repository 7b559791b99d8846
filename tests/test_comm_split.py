"""Communication split into transfer and wait where the files time the ops but do not split them
(perfkit/analysis/comm_split.py): the Level0 database export (tests/runs/msinsight_db_level0: COMMUNICATION_OP with each op's
count and data type), a CPU msrun job (tests/runs/cpu_2_10_msrun2: op launches of 2 ranks) and a legacy step trace
without its hccl_raw (tests/runs/mindinsight_cluster_propose). Every number is computed again here from the raw files
(sqlite3, csv, the text of cpu_op_execute_timestamp), and the estimates are held against what the Level1 twin and
hccl_raw measured. The communication rule: the wait diagnosis where the estimate says wait, bucket/fusion advice
where it says transfer, and the reason where neither estimate applies."""

from __future__ import annotations

import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor import advise
from perfkit.analysis import comm_split
from perfkit.analysis.ledger import ledger, steady_means

LEVEL0 = REPO / "tests" / "runs" / "msinsight_db_level0"
MSRUN2 = REPO / "tests" / "runs" / "cpu_2_10_msrun2"
OUTPUT = "ASCEND_PROFILER_OUTPUT"
RANKS = (0, 1)
# bytes per element of the data types the Level0 files use (ENUM_HCCL_DATA_TYPE)
WIDTH = {"FP32": 4, "FP16": 2, "BFP16": 2}

pytestmark = pytest.mark.usefixtures("uncached")


def sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as connection:
        return connection.execute(query).fetchall()


def profiler_db(root: Path, rank: int) -> Path:
    return root / f"rank{rank}_ascend_pt" / OUTPUT / f"ascend_pytorch_profiler_{rank}.db"


def level0_ops(root: Path = LEVEL0, ranks: tuple[int, ...] = RANKS
               ) -> dict[int, dict[str, tuple[int, int, int | None]]]:
    """rank -> op name -> (start ns, end ns, payload bytes or None), read with SQL from each rank's database."""
    ops = {}
    for rank in ranks:
        rows = sql(profiler_db(root, rank),
                   "SELECT s.value, c.startNs, c.endNs, c.count, d.name FROM COMMUNICATION_OP c "
                   "JOIN STRING_IDS s ON s.id = c.opName LEFT JOIN ENUM_HCCL_DATA_TYPE d ON d.id = c.dataType")
        ops[rank] = {name: (start, end, count * WIDTH[dtype] if count and dtype in WIDTH else None)
                     for name, start, end, count, dtype in rows}
    return ops


def independent_level0_split(ops: dict, arrival: bool = True) -> dict[int, tuple[float, float]]:
    """rank -> (estimated transfer ms, elapse ms) of its collectives, by the rules written out: wait is the larger of
    (latest start of the op over the ranks - own start) and (elapse - bytes at the fastest bytes/elapse of any op)."""
    fastest = max(size / (end - start) for by_name in ops.values() for start, end, size in by_name.values())  # B/ns
    result = {}
    for rank, by_name in ops.items():
        transfer = elapse = 0.0
        for name, (start, end, size) in by_name.items():
            latest = max(ops[other][name][0] for other in ops)
            waits = [(end - start) - size / fastest]
            if arrival:
                waits.append(min(latest - start, end - start))
            wait = max(waits)
            transfer += (end - start - wait) / 1e6
            elapse += (end - start) / 1e6
        result[rank] = (transfer, elapse)
    return result


@pytest.fixture(scope="module")
def level0():
    return perfkit.load(LEVEL0)


@pytest.fixture(scope="module")
def msrun2():
    return perfkit.load(MSRUN2)


def test_level0_ops_keep_their_start_and_payload(level0):
    ops = level0_ops()
    for rank in RANKS:
        table = level0.comm_ops[level0.comm_ops["rank"] == rank].set_index("name")
        assert set(table.index) == set(ops[rank])
        for name, (start, end, size) in ops[rank].items():
            assert table.at[name, "start_ms"] == pytest.approx(start / 1e6, abs=1e-6)
            assert table.at[name, "size_mb"] == pytest.approx(size / 1e6, rel=1e-12)


def test_level0_split_is_the_independent_estimate(level0):
    ops = level0_ops()
    # every allReduce ends within the shorter execution of the two ranks: the ranks' clocks agree, arrivals count
    for name in ops[0]:
        ends = [ops[rank][name][1] for rank in RANKS]
        assert max(ends) - min(ends) <= min(ops[rank][name][1] - ops[rank][name][0] for rank in RANKS)
    expected = independent_level0_split(ops)
    exposed = {rank: sql(LEVEL0 / f"rank{rank}_ascend_pt" / OUTPUT / "analysis.db",
                         "SELECT communication_not_overlapped FROM StepTraceTime")[0][0] / 1e3 for rank in RANKS}
    means = steady_means(level0)
    for rank in RANKS:  # start_ms is float64 epoch ms: exact to 0.25 µs, so the arrivals to about that
        transfer, elapse = expected[rank]
        assert means.at[rank, "comm_transfer"] == pytest.approx(exposed[rank] * transfer / elapse, abs=1e-3)
        assert means.at[rank, "comm_wait"] == pytest.approx(exposed[rank] * (1 - transfer / elapse), abs=1e-3)
    # the rate said is the fastest op's bytes / elapse (B/ns is GB/s)
    fastest = max(size / (end - start) for by_name in ops.values() for start, end, size in by_name.values())
    assert comm_split.estimate(level0).rates == {"hcom_allReduce": pytest.approx(fastest, rel=1e-9)}


def test_level0_estimate_agrees_with_the_transit_its_level1_twin_measured(level0):
    """The same job profiled at Level1 (new_format/msinsight_db_level1) measures each allReduce's transit time: 3.99 ms
    a step of ~102 ms of op time on rank 0. The Level0 estimate from bytes and timing alone is within 10 % of it."""
    level1 = FIXTURE_RUNS["new_db_level1"]
    estimated = independent_level0_split(level0_ops())
    for rank in RANKS:
        (transit,) = sql(level1 / f"rank{rank}_ascend_pt" / OUTPUT / "analysis.db",
                         "SELECT sum(transit_time) FROM CommAnalyzerTime")[0]
        assert estimated[rank][0] == pytest.approx(transit, rel=0.10)
    rows = comm_split.estimate(level0).rows
    assert rows.groupby("rank")["transfer_ms"].sum().to_dict() == pytest.approx(
        {rank: estimated[rank][0] for rank in RANKS}, abs=1e-3)


def test_the_ledger_says_the_split_is_an_estimate(level0):
    frame = ledger(level0)
    split = frame[frame["cause"].isin(["comm_transfer", "comm_wait"])]
    assert len(split) == 4 and not split["measured"].any()
    assert split["source"].str.contains("estimate: wait from the 2 profiled ranks' arrival", regex=False).all()
    assert split["source"].str.contains("hcom_allReduce 64.1 GB/s", regex=False).all()
    assert not (frame["cause"] == "comm").any()
    totals = frame.groupby(["rank", "step"])["ms"].sum()
    steps = level0.steps.set_index(["rank", "step"])["total_ms"]
    assert totals.to_numpy() == pytest.approx(steps.reindex(totals.index).to_numpy(), abs=1e-6)


def test_level0_gets_the_wait_diagnosis_not_bucket_advice(level0):
    finding = next(f for f in advise(level0).findings if f.id == "communication")
    assert finding.title.startswith("Collective communication mostly waiting for peers")
    assert "bucket_cap_mb" not in finding.action and "cannot help waiting time" in finding.action
    assert set(finding.claims) == {"comm_wait"}
    assert finding.evidence["comm_split"].startswith("estimate: ")
    means = steady_means(level0).mean()
    assert finding.evidence["comm_wait_ms"] == pytest.approx(means["comm_wait"], abs=1e-3)
    assert finding.evidence["comm_wait_ms"] > 20 * finding.evidence["comm_transfer_ms"]


def _copy_level0(tmp_path: Path) -> Path:
    folder = tmp_path / "level0"
    shutil.copytree(LEVEL0, folder)
    return folder


def _update(path: Path, statement: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(statement)


def test_clocks_that_disagree_leave_the_bandwidth_estimate_alone(tmp_path):
    """Rank 1's clock 1 s ahead: its executions no longer end with rank 0's, so arrivals are not compared."""
    folder = _copy_level0(tmp_path)
    _update(profiler_db(folder, 1), "UPDATE COMMUNICATION_OP SET startNs = startNs + 1000000000, "
                                    "endNs = endNs + 1000000000")
    run = perfkit.load(folder)
    split = comm_split.estimate(run)
    assert set(split.rows["how"]) == {"bandwidth"} and split.rows["last"].isna().all()
    expected = independent_level0_split(level0_ops(folder), arrival=False)
    assert split.rows.groupby("rank")["transfer_ms"].sum().to_dict() == pytest.approx(
        {rank: expected[rank][0] for rank in RANKS}, rel=1e-9)


def test_without_sizes_the_arrivals_alone_split(tmp_path):
    folder = _copy_level0(tmp_path)
    for rank in RANKS:
        _update(profiler_db(folder, rank), "UPDATE COMMUNICATION_OP SET count = NULL")
    run = perfkit.load(folder)
    assert run.comm_ops["size_mb"].isna().all()
    split = comm_split.estimate(run)
    assert set(split.rows["how"]) == {"arrival"}
    ops = level0_ops(folder)
    for row, op in zip(split.rows.itertuples(), run.comm_ops.loc[split.rows.index].itertuples()):
        start, end, _ = ops[op.rank][op.name]
        latest = max(ops[rank][op.name][0] for rank in RANKS)
        assert row.wait_ms == pytest.approx(min(latest - start, end - start) / 1e6, abs=5e-4)  # float64 epoch ms


def test_one_rank_without_sizes_stays_unsplit_and_says_why(tmp_path):
    folder = _copy_level0(tmp_path)
    shutil.rmtree(folder / "rank1_ascend_pt")
    _update(profiler_db(folder, 0), "UPDATE COMMUNICATION_OP SET count = NULL")
    run = perfkit.load(folder)
    assert comm_split.estimate(run).why_not == ("one rank only (no peer to compare its arrivals with) and no op sizes "
                                                "(nothing to divide by a link's rate)")
    advice = advise(run)
    finding = next(f for f in advice.findings if f.id == "communication")
    assert finding.evidence["comm_split_unknown"] == comm_split.estimate(run).why_not
    assert "unknown" in finding.action
    assert "transfer and wait unknown: one rank only" in advice.not_checked["comm_wait"]
    assert (ledger(run)["cause"] == "comm").any()


# ---------------------------------------------------------------------------------------------------------
# CPU msrun: 2 ranks, op launches only


def cpu_executions(rank: int) -> dict[str, list[tuple[int, float]]]:
    """AllReduce op name -> its executions (start ns, duration ms) in launch order, from the rank's timestamp file
    (`name;HostCpuOps;start,duration,thread start,duration,thread ...`)."""
    (path,) = (MSRUN2 / f"rank_{rank}").glob(f"*/FRAMEWORK/cpu_op_execute_timestamp_{rank}.txt")
    executions = defaultdict(list)
    for line in path.read_text().splitlines():
        name, _, calls = line.split(";")
        if "AllReduce" in name:
            for call in calls.split():
                start, duration, _ = call.split(",")
                executions[name].append((int(start), float(duration)))
    return {name: sorted(calls) for name, calls in executions.items()}


def test_cpu_collectives_become_comm_ops(msrun2):
    for rank in RANKS:
        executions = cpu_executions(rank)
        ops = msrun2.comm_ops[msrun2.comm_ops["rank"] == rank]
        assert len(ops) == sum(len(calls) for calls in executions.values()) == 24
        assert set(ops["kind"]) == {"collective"}
        for name, calls in executions.items():
            mine = ops[ops["name"] == name].sort_values("start_ms")
            assert mine["start_ms"].to_numpy() == pytest.approx([start / 1e6 for start, _ in calls], abs=1e-3)
            assert mine["elapse_ms"].to_numpy() == pytest.approx([duration for _, duration in calls], abs=1e-6)


def test_cpu_arrival_waits_are_the_independent_ones(msrun2):
    executions = {rank: cpu_executions(rank) for rank in RANKS}
    expected = {}
    for name in executions[0]:
        for k, calls in enumerate(zip(*(executions[rank][name] for rank in RANKS))):
            ends = [start + duration * 1e6 for start, duration in calls]
            if max(ends) - min(ends) > min(duration for _, duration in calls) * 1e6:
                continue  # they do not end together: not compared
            latest = max(start for start, _ in calls)
            for rank, (start, duration) in zip(RANKS, calls):
                expected[(rank, name, k)] = min((latest - start) / 1e6, duration)
    split = comm_split.estimate(msrun2)
    ops = msrun2.comm_ops.sort_values("start_ms")
    ops = ops.assign(k=ops.groupby(["rank", "name"]).cumcount())
    got = {(op.rank, op.name, op.k): split.rows.at[op.Index, "wait_ms"] for op in ops.itertuples()
           if op.Index in split.rows.index}
    assert got.keys() == expected.keys() and 0 < len(got) < 48  # some executions do not end together
    assert all(got[key] == pytest.approx(expected[key], abs=1e-3) for key in expected)


def test_cpu_late_rank_is_named_from_its_arrivals(msrun2):
    """Rank 0 computes ~51 ms a step against rank 1's ~12 ms: rank 1 waits at the all-reduces for rank 0."""
    means = steady_means(msrun2)
    assert means.at[1, "comm_wait"] > 2 * means.at[1, "comm_transfer"]
    finding = next(f for f in advise(msrun2).findings if f.id == "communication")
    assert finding.title.startswith("Collective communication mostly waiting for peers")
    assert finding.evidence["late_rank"] == 0 and finding.target == "rank 0"
    assert finding.evidence["rank0_arrives_last_pct"] > finding.evidence["rank1_arrives_last_pct"]
    assert "Rank 0 arrives last at" in finding.action and "comm_fusion" not in finding.action


def test_transfer_bound_estimate_keeps_the_fusion_advice():
    """sample_runs/cpu_ranks2: the ranks reach their all-reduces about together (rank 1 last at ~62 %), so most of
    the exposed time is estimated transfer: fusion / overlap advice, the estimate said."""
    run = perfkit.load(REPO / "sample_runs" / "cpu_ranks2")
    finding = next(f for f in advise(run).findings if f.id == "communication")
    assert "comm_fusion" in finding.action and "mostly waiting" not in finding.title
    assert finding.evidence["comm_split"].startswith("estimate: wait from the 2 profiled ranks' arrival")
    assert finding.evidence["comm_transfer_ms"] > finding.evidence["comm_wait_ms"]


def test_a_communication_op_table_without_sizes_or_with_a_backwards_op_loads(tmp_path):
    """COMMUNICATION_OP without its count / dataType columns, and one op of rank 1 that ends before it starts: the
    rest loads; the backwards op is said once naming the database, its time unknown, its collective unmatched."""
    folder = _copy_level0(tmp_path)
    for rank in RANKS:
        with sqlite3.connect(profiler_db(folder, rank)) as connection:
            connection.execute("ALTER TABLE COMMUNICATION_OP DROP COLUMN count")
            connection.execute("ALTER TABLE COMMUNICATION_OP DROP COLUMN dataType")
    _update(profiler_db(folder, 1), "UPDATE COMMUNICATION_OP SET endNs = startNs - 1 WHERE opId = 2")
    run = perfkit.load(folder)
    said = [w for w in run.warnings if "COMMUNICATION_OP" in w]
    assert said == ["rank1_ascend_pt: ascend_pytorch_profiler_1.db: COMMUNICATION_OP: 1 op(s) end before they "
                    "start; their time is unknown"]
    assert run.comm_ops["size_mb"].isna().all() and run.comm_ops["elapse_ms"].isna().sum() == 1
    split = comm_split.estimate(run)
    backwards = run.comm_ops.loc[run.comm_ops["elapse_ms"].isna(), "name"].iloc[0]
    estimated = run.comm_ops.loc[split.rows.index]
    assert set(split.rows["how"]) == {"arrival"} and backwards not in set(estimated["name"])
    assert len(split.rows) == 6  # three collectives matched on both ranks


# ---------------------------------------------------------------------------------------------------------
# Legacy Ascend without hccl_raw: the step trace's communication streams time each op on the device's tick counter

CLUSTER = REPO / "tests" / "runs" / "mindinsight_cluster_propose"


def step_trace_collectives(rank: int) -> dict[tuple[int, str], tuple[float, float]]:
    """(step, op name without its `stream_{id}_{index}_` prefix) -> (start ms, end ms) of the AllReduce columns."""
    import csv
    import re
    with open(CLUSTER / f"step_trace_raw_{rank}_detail_time.csv", newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["step_num"].isdigit()]
    spans = {}
    for column in rows[0]:
        if "AllReduce" in column and column.endswith("_start_point"):
            base = column[:-len("_start_point")]
            for row in rows:
                start, end = float(row[column]) / 1e5, float(row[base + "_end_point"]) / 1e5
                if end >= start:
                    spans[(int(row["step_num"]), re.sub(r"^stream_\d+_\d+_", "", base))] = (start, end)
    return spans


def hccl_op_costs(rank: int, ops: set[tuple[int, str]]) -> tuple[float, float]:
    """(communication_cost, wait_cost) of the rank's (step, op) `ops` summed, from hccl_raw's JSON."""
    import csv
    import json
    cost = wait = 0.0
    with open(CLUSTER / f"hccl_raw_{rank}.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["step_num"].isdigit():
                for name, (_, op_cost, op_wait, _) in json.loads(row["communication_operator_cost"]).items():
                    if (int(row["step_num"]), name) in ops:
                        cost, wait = cost + op_cost, wait + op_wait
    return cost, wait


def test_legacy_streams_without_hccl_raw_are_split_by_arrival(tmp_path):
    """The 4-rank, 2-stage legacy run with its hccl_raw files left out: the step trace places every AllReduce on
    each rank's device clock, whose step ends agree across ranks. The arrival estimate, computed again here from the
    csv, is held against what hccl_raw measured for the same ops: on stage 0 (ranks 0-1) the arrival gaps are HCCL's
    Notify Wait to 1 % (11.97 / 43.23 ms against 12.06 / 43.38 ms); on stage 1 they exceed it (42 against 12 ms:
    the early rank copies locally before it waits), and everywhere the estimated transfer is at least the measured
    communication_cost: the estimate never makes transfer smaller."""
    folder = tmp_path / "no_hccl"
    folder.mkdir()
    for path in CLUSTER.glob("step_trace_raw_*_detail_time.csv"):
        shutil.copy(path, folder)
    run = perfkit.load(folder)
    split = comm_split.estimate(run)
    spans = {rank: step_trace_collectives(rank) for rank in range(4)}
    for stage in ((0, 1), (2, 3)):
        expected = defaultdict(float)
        for key in spans[stage[0]].keys() & spans[stage[1]].keys():
            (s0, e0), (s1, e1) = (spans[rank][key] for rank in stage)
            if abs(e0 - e1) > min(e0 - s0, e1 - s1):
                continue
            for rank, (start, end) in zip(stage, ((s0, e0), (s1, e1))):
                expected[rank] += min(max(s0, s1) - start, end - start)
        got = split.rows[split.rows["rank"].isin(stage)].groupby("rank")["wait_ms"].sum()
        assert got.to_dict() == pytest.approx(dict(expected), abs=1e-3)
    waits = split.rows.groupby("rank")["wait_ms"].sum()
    transfers = split.rows.groupby("rank")["transfer_ms"].sum()
    estimated = run.comm_ops.loc[split.rows.index]
    for rank in range(4):
        mine = estimated[estimated["rank"] == rank]
        cost, wait = hccl_op_costs(rank, set(zip(mine["step"].astype(int), mine["name"])))
        assert transfers[rank] >= cost
        if rank in (0, 1):
            assert waits[rank] == pytest.approx(wait, rel=0.02)
        else:
            assert waits[rank] > wait


def test_one_rank_with_payloads_is_split_by_the_fastest_rate(tmp_path):
    """Rank 0 of the Level0 run alone: no peer to compare arrivals with, so transfer is each op's payload at the
    fastest bytes / elapse among its own four allReduce ops, and the finding says which rate."""
    folder = _copy_level0(tmp_path)
    shutil.rmtree(folder / "rank1_ascend_pt")
    run = perfkit.load(folder)
    ops = level0_ops(folder, ranks=(0,))
    fastest = max(size / (end - start) for start, end, size in ops[0].values())
    transfer = sum(min(size / fastest, end - start) for start, end, size in ops[0].values()) / 1e6
    elapse = sum(end - start for start, end, _ in ops[0].values()) / 1e6
    split = comm_split.estimate(run)
    assert set(split.rows["how"]) == {"bandwidth"} and split.peers == 0
    exposed = sql(folder / "rank0_ascend_pt" / OUTPUT / "analysis.db",
                  "SELECT communication_not_overlapped FROM StepTraceTime")[0][0] / 1e3
    assert steady_means(run).at[0, "comm_transfer"] == pytest.approx(exposed * transfer / elapse, rel=1e-9)
    finding = next(f for f in advise(run).findings if f.id == "communication")
    assert f"hcom_allReduce {fastest:,.1f} GB/s" in finding.evidence["comm_split"]
    assert "arrival" not in finding.evidence["comm_split"] and "mostly waiting" in finding.title


# ---------------------------------------------------------------------------------------------------------
# Where the wait sits: a step's first collective holding most of it is arrival skew (the torch_npu job:
# the first allReduce waits ~80 ms of its elapse, the three after it almost nothing).

def _json_waits(root: Path) -> dict[tuple[str, str], list[tuple[float, float, str]]]:
    """(rank folder, step) -> [(start µs, elapse - transit ms, op name)] of the collectives in communication.json."""
    import json
    waits = defaultdict(list)
    for path in sorted(root.glob(f"*/{OUTPUT}/communication.json")):
        for step, kinds in json.loads(path.read_text()).items():
            for name, info in kinds.get("collective", {}).items():
                if name == "Total Op Info":
                    continue
                times = info["Communication Time Info"]
                waits[path.parts[-3], step].append((times["Start Timestamp(us)"],
                                                    max(times["Elapse Time(ms)"] - times["Transit Time(ms)"], 0.0),
                                                    name.partition("@")[0]))
    return waits


def _first_share(waits: dict) -> float:
    first = sum(min(ops)[1] for ops in waits.values())
    return first / sum(wait for ops in waits.values() for _, wait, _ in ops)


def test_the_wait_at_each_step_s_first_collective_is_said_from_the_files():
    run = FIXTURE_RUNS["new_level1"]
    waits = _json_waits(run)
    assert {step for _, step in waits} == {"step50"}  # one profiled step: every op of it is in the steady mean
    expected = _first_share(waits)
    assert expected > 0.5
    finding = next(f for f in advise(perfkit.load(run)).findings if f.id == "communication")
    assert finding.evidence["wait_at_first_collective_pct"] == pytest.approx(100 * expected, abs=0.01)
    assert finding.evidence["first_collective"] == min(next(iter(waits.values())))[2]
    assert "at each step's first collective" in finding.action and "reach it at different times" in finding.action
    assert finding.action.split(". ", 1)[1][0].isupper()  # the causes start a sentence


def test_the_database_s_analysis_tables_give_the_same_first_collective_wait():
    run = FIXTURE_RUNS["new_db_level1"]
    first = total = 0.0
    for path in sorted(run.glob(f"*/{OUTPUT}/analysis.db")):
        rows = sql(path, "SELECT start_timestamp, elapse_time - transit_time, step FROM CommAnalyzerTime "
                         "WHERE lower(type) = 'collective'")
        by_step = defaultdict(list)
        for start, wait, step in rows:
            by_step[step].append((start, max(wait, 0.0)))
        first += sum(min(ops)[1] for ops in by_step.values())
        total += sum(max(wait, 0.0) for _, wait, _ in rows)
    finding = next(f for f in advise(perfkit.load(run)).findings if f.id == "communication")
    assert finding.evidence["wait_at_first_collective_pct"] == pytest.approx(100 * first / total, abs=0.01)
    assert first / total > 0.85


def test_level0_estimated_waits_sit_at_the_first_all_reduce(level0):
    ops = level0_ops()
    split = independent_level0_split(ops)
    fastest = max(size / (end - start) for by_name in ops.values() for start, end, size in by_name.values())
    first = total = 0.0
    for rank, by_name in ops.items():
        for name, (start, end, size) in by_name.items():
            latest = max(ops[other][name][0] for other in ops)
            wait = max((end - start) - size / fastest, min(latest - start, end - start)) / 1e6
            total += wait
            first += wait if start == min(s for s, _, _ in by_name.values()) else 0.0
    assert split  # the same rules as the split test above
    finding = next(f for f in advise(level0).findings if f.id == "communication")
    assert finding.evidence["wait_at_first_collective_pct"] == pytest.approx(100 * first / total, abs=0.01)


def test_wait_spread_over_many_collectives_names_no_first_collective():
    run = FIXTURE_RUNS["new_2023"]
    waits = _json_waits(run)
    assert _first_share(waits) < 0.5  # FSDP: broadcasts, all-gathers and reduce-scatters wait a little each
    finding = next(f for f in advise(perfkit.load(run)).findings if f.id == "communication")
    assert finding.title.startswith("Collective communication mostly waiting for peers")
    assert "wait_at_first_collective_pct" not in finding.evidence
    assert "first collective" not in finding.action

"""MindInsight's own profiler tests, re-asserted on the same runs (tests/fixtures/legacy are its test data).

Source: mindspore-ai/mindinsight @ e233ee19, tests/st/func/profiler and tests/ut/profiler. Its test
folders map to ours as: tests/utils/resource/run_2/normal_run/profiler = legacy/mindinsight_run_2,
run_3 = legacy/mindinsight_run_3, run_4 = legacy/mindinsight_run_4, tests/utils/resource/profiler =
legacy/mindinsight_misc. Tests on run_1 (not in our fixtures) are left out. Each expectation names the
MindInsight test it comes from; where perfkit differs by definition, the difference is asserted and
explained next to it. MindInsight shows times in µs where it multiplies a file's ms by 1e3; perfkit
keeps ms, so those expectations are compared in ms.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.analysis.measures import MIN_QUEUE_SAMPLES, host_cpu_busy, queue_stats, step_means

RUN_2 = FIXTURE_RUNS["legacy_run_2"]
RUN_3 = FIXTURE_RUNS["legacy_run_3"]
RUN_4 = FIXTURE_RUNS["legacy_run_4"]
MISC = FIXTURE_RUNS["legacy_misc"]
TICKS_PER_MS = 1e5


@pytest.fixture(autouse=True)
def no_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def rank_rows(frame, rank: int):
    return frame[frame["rank"] == rank].reset_index(drop=True)


# --- step trace ------------------------------------------------------------------------------------------

def test_cluster_step_trace_of_run_2():
    # st/func/profiler/test_cluster_analyser.py::test_query_cluster_step_trace: step 1 of rank 1 is
    # [iteration_interval, fp_and_bp, tail, total] = [0.0, 23.6681, 0.041, 23.7091] ms (rounded to 4 places)
    run = perfkit.load(RUN_2)
    (step,) = run.steps.to_dict("records")
    assert step["rank"] == 1 and step["step"] == 1
    got = [round(step[key], 4) for key in ("interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms")]
    assert got == [0.0, 23.6681, 0.041, 23.7091]


def test_training_trace_of_run_2():
    # ut/profiler/analyser/test_training_trace_analyse.py::test_analyse_get_training_trace_time_info:
    # one step, fp_and_bp [23.6681]
    run = perfkit.load(RUN_2)
    assert len(run.steps) == 1
    assert [round(v, 4) for v in run.steps["fwd_bwd_ms"]] == [23.6681]
    # ...::test_analyse_get_training_trace_graph: MindInsight's summary is the file's last row as written,
    # total_steps 1, iteration_interval 12.4321, fp_and_bp 0.0, total_time 0.0. That row here is step_num 0
    # with a zero total: not an average of the one step (interval 0, fp_and_bp 23.67 ms). Difference by
    # definition: perfkit's means are over the step rows, so the summary says what the step did.
    last = csv_rows(RUN_2 / "step_trace_raw_1_detail_time.csv")[-1]
    assert int(last["iteration_interval"]) / TICKS_PER_MS == 12.43211 and int(last["total"]) == 0
    means = step_means(run.steps)
    assert means["count"] == 1 and means["mean_of"]["count"] == 1
    assert means["interval_ms"] == 0.0 and round(means["fwd_bwd_ms"], 4) == 23.6681
    assert round(means["total_ms"], 4) == 23.7091


@pytest.mark.parametrize("rank", [0, 10])
def test_step_means_are_mindspore_average_row(rank):
    # MindInsight shows the step trace file's average row (step_num `-`) as the run's step summary
    # (test_training_trace_analyse above reads it as `summary`); on these files it is the mean of steps
    # 2..n. perfkit's step means leave the first profiled step out in the same way.
    rows = csv_rows(MISC / f"step_trace_raw_{rank}_detail_time.csv")
    average = rows[-1]
    assert average["step_num"] == "-"
    means = perfkit.analysis.measures.per_rank_step_means(perfkit.load(MISC).steps)
    got = next(entry["steps"] for entry in means if entry["rank"] == rank)
    assert got["count"] == len(rows) - 1 and got["mean_of"]["count"] == len(rows) - 2
    assert (got["mean_of"]["first"], got["mean_of"]["last"]) == (2, len(rows) - 1)
    assert "MindSpore's own average" in got["mean_of"]["first_step"]
    for key, column in (("interval_ms", "iteration_interval"), ("fwd_bwd_ms", "fp_and_bp"), ("tail_ms", "tail"),
                        ("total_ms", "total")):
        # the average row is rounded to whole ticks
        assert got[key] == pytest.approx(int(average[column]) / TICKS_PER_MS, abs=1 / TICKS_PER_MS)
    assert got["first_step_ms"] == int(rows[0]["total"]) / TICKS_PER_MS


@pytest.mark.parametrize("folder, columns", [
    # st/func/profiler/test_cluster_analyser.py::test_query_cluster_model_parallel:
    # step_bottleneck_info [iteration_interval, computation, communication_alone] = [0.0, 651.9051, 1293.1231]
    (RUN_3, {"computation": 651.9051, "communication_alone_time": 1293.1231}),
    # ...::test_query_cluster_pipeline_parallel: [0.0, 651.9051, 1293.1231, 1577.1234, 368.7766, 227.1234]
    (RUN_4, {"computation": 651.9051, "communication_alone_time": 1293.1231, "receive_alone_time": 368.7766,
             "collective_communication_time": 227.1234}),
])
def test_cluster_bottleneck_times(folder, columns):
    (row,) = csv_rows(next(folder.glob("ascend_cluster_analyse_*_1.csv")))
    assert {name: float(row[name]) for name in columns} == columns  # the file says what MindInsight shows
    run = perfkit.load(folder)
    (step,) = run.steps.to_dict("records")
    assert step["interval_ms"] == 0.0  # the first value MindInsight shows
    # Difference by definition: these test files pair a 23.7 ms step with 651.9 ms of computation and
    # 1293.1 ms of communication alone. A part of a step cannot exceed it, so perfkit leaves them out of the
    # step (NaN) and says so in one warning naming the file and the values; a real run's per-step values
    # would be kept (test_cluster_times_within_the_step_are_kept).
    assert max(columns.values()) > step["total_ms"]
    for column in ("computing_ms", "comm_exposed_ms", "comm_receive_ms", "comm_collective_ms"):
        assert pd.isna(step[column])
    (warning,) = [w for w in run.warnings if "ascend_cluster_analyse" in w]
    assert "communication_alone_time 1293.1 ms" in warning and "not used" in warning


def test_cluster_times_within_the_step_are_kept(tmp_path):
    # crafted: no real cluster-analyse file has values that fit its step (the MindInsight ones above do not)
    shutil.copy(RUN_4 / "step_trace_raw_1_detail_time.csv", tmp_path)
    (tmp_path / "ascend_cluster_analyse_pipeline-parallel_1_2_1.csv").write_text(
        "computation,communication_alone_time,stage_time,receive_alone_time,collective_communication_time\n"
        "20.5,3.1,23.6,1.2,1.9\n")
    (step,) = perfkit.load(tmp_path).steps.to_dict("records")
    assert (step["computing_ms"], step["comm_exposed_ms"], step["comm_receive_ms"], step["comm_collective_ms"]) \
        == (20.5, 3.1, 1.2, 1.9)


# --- op types and op detail -----------------------------------------------------------------------------

def test_aicore_type_of_misc():
    # ut/profiler/analyser/test_analyser_aicore_type.py::test_query_success_1 / test_data: 5 types, each
    # [kernel_type, total_time = file ms * 1e3 (µs), execution_frequency, total_percent, avg_time = total / count]
    rows = csv_rows(MISC / "aicore_intermediate_1_type.csv")
    types = rank_rows(perfkit.load(MISC).op_types, 1).set_index("type")
    assert len(types) == len(rows) == 5
    for row in rows:
        got = types.loc[row["kernel_type"]]
        assert got["total_ms"] == float(row["total_time"])
        assert got["count"] == int(row["execution_frequency"])
        assert round(got["total_ms"] * 1e3 / got["count"], 3) == round(float(row["total_time"]) * 1e3
                                                                       / int(row["execution_frequency"]), 3)
        # the file's percent, kept as file_share (MindInsight's total_percent is that number x 100)
        assert got["file_share"] == pytest.approx(float(row["percent"]) / 100)
    # Difference by definition: the percents sum to 90.48 %: MindSpore divides by its total AI Core time
    # (output_op_compute_time's "total op" line), which holds tasks this file does not list. perfkit's share
    # divides by the listed types' summed time, so the shares sum to 1 and MatMul is 81.5 %, not 73.8 %.
    assert sum(float(row["percent"]) for row in rows) == pytest.approx(90.48)
    assert types["share"].sum() == pytest.approx(1.0)
    listed_ms = sum(float(row["total_time"]) for row in rows)
    assert types.loc["MatMul", "share"] == pytest.approx(1.085 / listed_ms)
    summary_matmul = next(op for op in perfkit.summarize(perfkit.load(MISC))["op_types"] if op["type"] == "MatMul")
    assert summary_matmul["share"] == pytest.approx(types.loc["MatMul", "share"])  # one share, API and JSON


def test_aicore_type_percent_denominator_of_run_2():
    # The denominator named above, on the run that has the file it comes from: run_2's type percents are
    # each type's time over output_op_compute_time_1.txt's "total op" line.
    total_line = next(line for line in (RUN_2 / "output_op_compute_time_1.txt").read_text().splitlines()
                      if line.startswith("total op"))
    total_ms = float(total_line.split()[2])
    for row in csv_rows(RUN_2 / "aicore_intermediate_1_type.csv"):
        assert float(row["percent"]) == pytest.approx(100 * float(row["execution_time"]) / total_ms, abs=0.005)


def test_aicore_detail_of_misc():
    # ut/profiler/analyser/test_analyser_aicore_detail.py::test_query_success_1: 10 ops, each with
    # avg_execution_time = detail file ms * 1e3 and execution_frequency; ...::test_query_success_2: one MatMul
    # (op9); ...::test_query_success_3: ranked by avg_execution_time, descending
    rows = csv_rows(MISC / "aicore_intermediate_1_detail.csv")
    ops = rank_rows(perfkit.load(MISC).ops, 1)
    assert len(ops) == len(rows) == 10
    by_name = ops.set_index("name")
    for row in rows:
        got_us = by_name.loc[row["full_kernel_time"], "avg_ms"] * 1e3
        assert round(got_us, 3) == round(float(row["execution_time"]) * 1e3, 3)
        assert by_name.loc[row["full_kernel_time"], "count"] == int(row["execution_frequency"])
    (matmul,) = ops[ops["type"] == "MatMul"]["name"]
    assert matmul.endswith("MatMul-op9")
    expected_rank = [row["full_kernel_time"] for row in sorted(rows, key=lambda r: float(r["execution_time"]),
                                                               reverse=True)]
    assert ops.sort_values("avg_ms", ascending=False, kind="stable")["name"].tolist() == expected_rank


# --- data queues and GetNext -------------------------------------------------------------------------------

def test_queue_summary_of_run_2():
    # st/func/profiler/test_minddata_analyse.py::test_analyse_queue_summary and
    # ut/profiler/analyser/test_minddata_analyse.py: device_queue (device_queue_profiling_1.txt, perfkit's host
    # queue: the host side of the sink) 1 batch, 1 empty, 0 full; get_next (minddata_aicpu_1.txt, perfkit's
    # device queue) 3 batches, sizes [3, 2, 1], 0 empty
    run = perfkit.load(RUN_2)
    host = queue_stats(run.host_queue)
    assert host["samples"] == 1 and host["empty_pct"] == 100.0 and host["full_pct"] == 0.0
    device = queue_stats(run.device_queue)
    assert device["samples"] == 3 and device["empty_pct"] == 0.0
    assert run.device_queue["size"].tolist() == [3, 2, 1]


def test_get_next_wait_of_run_2():
    # st/func/profiler/test_minddata_analyse.py::test_analyse_get_next_info: get_next times [0.001, 0, 0.001] ms,
    # avg_cost 0.000666... ms
    waits = perfkit.load(RUN_2).device_queue["wait_ms"]
    assert waits.round(6).tolist() == [0.001, 0.0, 0.001]
    assert waits.mean() == pytest.approx(0.0006666666666666666)


# --- MindData pipeline -------------------------------------------------------------------------------------

def test_pipeline_of_misc_csv(tmp_path):
    # ut/profiler/analyser/test_minddata_pipeline_analyser.py::test_query_success_1 / _3: rank 0 of
    # tests/utils/resource/profiler is minddata_pipeline_raw_0.csv's 4 ops as written (Batch; Shuffle;
    # two TFReader), usage rates, workers, parents and children
    rows = csv_rows(MISC / "minddata_pipeline_raw_0.csv")
    shutil.copy(MISC / "minddata_pipeline_raw_0.csv", tmp_path)
    pipeline = perfkit.load(tmp_path).pipeline.set_index("op_id")
    assert len(pipeline) == len(rows) == 4
    for row in rows:
        got = pipeline.loc[int(row["op_id"])]
        assert got["op_type"] == row["op_type"] and got["workers"] == int(row["num_workers"])
        assert list(got["children"]) == (json.loads(row["children_id"]) if row["children_id"] else [])
        assert (pd.isna(got["parent_id"]) if not row["parent_id"] else got["parent_id"] == int(row["parent_id"]))
        if row["output_queue_size"]:
            assert got["queue_usage"] == pytest.approx(float(row["output_queue_usage_rate"]))
        else:
            # Difference by definition: the CSV writes usage 0 for Batch, which has no queue samples; perfkit
            # says unknown (NaN), so "0 % full" is not read as a starving op
            assert float(row["output_queue_usage_rate"]) == 0 and pd.isna(got["queue_usage"])


def test_pipeline_of_misc_folder_warns_when_json_and_csv_differ():
    # Difference: MindInsight reads only minddata_pipeline_raw_0.csv (above). The folder also holds
    # pipeline_profiling_0.json, the raw file MindSpore parses into that CSV, and here they are two different
    # pipelines (the JSON is run_2's ImageFolder pipeline). perfkit reads the JSON and says so.
    run = perfkit.load(MISC)
    assert rank_rows(run.pipeline, 0)["op_type"].tolist() == ["BatchOp", "MapOp", "MapOp", "ImageFolderOp"]
    (warning,) = [w for w in run.warnings if "describe different pipelines" in w]
    assert "pipeline_profiling_0.json" in warning and "minddata_pipeline_raw_0.csv" in warning


def test_pipeline_topology_built_as_mindspore_builds_it():
    # minddata_pipeline_raw_0.csv above is MindSpore's parser output for the pipeline in
    # pipeline_profiling_1.json (the same ops; op 4, a TFReader without queue metrics, dropped and its
    # child 3 attached to Shuffle). perfkit's reading of that JSON gives the CSV's topology.
    expected = {int(row["op_id"]): (row["op_type"], json.loads(row["children_id"]) if row["children_id"] else [])
                for row in csv_rows(MISC / "minddata_pipeline_raw_0.csv")}
    raw_ids = {op["op_id"] for op in json.loads((MISC / "pipeline_profiling_1.json").read_text())["op_info"]}
    assert 4 in raw_ids and 4 not in expected
    got = rank_rows(perfkit.load(MISC).pipeline, 1)
    assert {int(r.op_id): (r.op_type, list(r.children)) for r in got.itertuples()} == expected
    # run_2's JSON (EpochCtrl on top of Batch, no metrics) against its own CSV: EpochCtrl is dropped, no warning
    run = perfkit.load(RUN_2)
    assert "EpochCtrlOp" not in set(run.pipeline["op_type"])
    assert not [w for w in run.warnings if "different pipelines" in w]


# --- proposals: ut/profiler/proposer/test_proposer.py on tests/utils/resource/profiler, rank 0 -------------

def test_proposals_of_misc_rank_0():
    run = perfkit.load(MISC)
    advice = perfkit.advise(run)
    ids = advice.ids()
    # ...::test_propose_compose: minddata_cpu_utilization [90]: 100 - mean idle (10 %) > 80, and
    # minddata_device_queue [1, 1, 0, 1] (empty_rate 100.0 over the 30 % threshold). Difference by definition
    # (issue 14): that empty rate is one host-queue sample, and perfkit does not advise from fewer than
    # MIN_QUEUE_SAMPLES (one sample once gave two contradicting findings): dataset_workers and host_cpu say
    # why they did not look, and the 90 % busy host is still computed as MindInsight does.
    host = json.loads((MISC / "minddata_cpu_utilization_0.json").read_text())["device_info"]["idle_utilization"]
    assert host_cpu_busy(run.cpu_util[run.cpu_util["rank"] == 0])["busy_pct"] == 100 - sum(host) / len(host) == 90
    assert len(run.host_queue) == 1 and len(run.host_queue) < MIN_QUEUE_SAMPLES and not len(run.device_queue)
    for rule_id in ("dataset_workers", "host_cpu"):
        assert rule_id not in ids and "fewer than 3 data queue samples" in advice.not_checked[rule_id]
    # ...: step_trace-iter_interval ['0.5'] (mean interval above 0.5 ms). Difference by definition: the run
    # already sinks (device_queue_profiling_0.txt), so perfkit does not propose sink mode; the ~90 ms interval is
    # device idle whose cause the files do not show (no data evidence): the bound says "unknown".
    assert "sink_mode" not in ids and run.meta.data_mode == "sink"
    assert advice.bound["kind"] == "unknown" and advice.bound["parts_ms"]["data"] == 0

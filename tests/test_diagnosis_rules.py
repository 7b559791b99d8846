"""Issue 14's rules and readers on real files, one firing and one silent case each.

Real fixtures and sample runs are used as they are. Three runs are crafted, because no real file shows them
(tests/fixtures has no GPU PyNative run, no pipeline-parallel run with more than one stage, no Level0
kernel table); each is written here in the file formats docs/formats.md describes, column for column:
  - `gpu_pynative`: MindSpore 2.2 GPU, PyNative, empty step trace, op launches in gpu_op_execute_timestamp;
  - `pipeline_run`: 4 ranks, pp=2 x dp=2, torch_npu `*_ascend_pt` new layout, bf16, profiler_metadata pp groups;
  - a Level0 kernel_details.csv whose Type column is `N/A`.
Every expected number is computed here from what the test wrote or from the raw files.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor import advise
from perfkit.analysis.ledger import bound, rank_parts
from perfkit.apps.cli import main
from perfkit.io.formats.ascend_ms import type_from_kernel_name

SAMPLE_RUNS = REPO / "sample_runs"
TEST_RUNS = REPO / "tests" / "runs"


def load(path):
    return perfkit.load(path)


def finding(advice, rule_id):
    found = [f for f in advice.findings if f.id == rule_id]
    assert len(found) == 1, advice.ids()
    return found[0]


# --- a crafted GPU PyNative run (MindSpore 2.2.14) ----------------------------------------------------------

GPU_STEPS = 15
GPU_STEP_NS = 154_000_000
# (full name, type, offset in the step in ms, duration ms); MatMul runs twice a step, so ops run different
# numbers of times and only the step's first op (Cast) marks the steps.
GPU_OPS = [("Default/Cast-op0", "Cast", 0.0, 0.1), ("Default/Conv2D-op1", "Conv2D", 5.0, 0.5),
           ("Default/ReLU-op2", "ReLU", 60.0, 0.2), ("Default/MatMul-op3", "MatMul", 80.0, 0.8),
           ("Default/MatMul-op3", "MatMul", 100.0, 0.8), ("Default/Adam-op4", "Adam", 130.0, 1.1)]
FIRST_CALL_MS = 43.0  # the first Conv2D call (kernel selection and compile) in step 1
GPU_EPOCH_NS = 1_700_000_000_000_000_000


def gpu_pynative(folder: Path, mode: str = "pynative", calls: dict[str, list[tuple[int, float]]] | None = None
                 ) -> Path:
    """Writes the GPU files docs/formats.md §1 lists (GPU rows) for a PyNative run whose step trace is empty: GPU_OPS
    over GPU_STEPS steps, or `calls` (full op name -> [(start epoch ns, duration ms)], type from the name).

    Crafted: no real GPU PyNative gpu_op_execute_timestamp file is public (searched: find_string and the code
    and issues corpora for `gpu_op_execute_timestamp` / `;GpuOps;`, MindInsight's tests/utils/resource/profiler
    and MindSpore's tests/ut/data/profiler_data, which hold GPU timelines but no op launch file). Its structure is
    that of MindSpore's writer, `DataSaver::WriteOpTimestamp` (mindspore-ai/mindspore,
    mindspore/ccsrc/profiler/device/data_saver.cc at 0d0dec65, Apache-2.0): one line per op, `full_name;GpuOps;` then
    `start,duration ` per launch, start in ns, duration CUDA's ms x 1000; the CSVs follow `OpDetailInfo::GetGpuHeader`
    and `OpType::GetGpuHeader` (tests/test_formats_gpu.py)."""
    folder.mkdir(parents=True)
    if calls is None:
        calls = {}
        for step in range(GPU_STEPS):
            for name, _, offset_ms, dur_ms in GPU_OPS:
                dur = FIRST_CALL_MS if (step == 0 and name == "Default/Conv2D-op1") else dur_ms
                calls.setdefault(name, []).append((GPU_EPOCH_NS + step * GPU_STEP_NS + int(offset_ms * 1e6), dur))
        types = {name: op_type for name, op_type, _, _ in GPU_OPS}
    else:
        types = {name: name.rsplit("/", 1)[-1].split("-")[0] for name in calls}
    (folder / "gpu_op_execute_timestamp_0.txt").write_text("".join(  # durations in µs, as GPUProfiler stores them
        f"{name};GpuOps;" + " ".join(f"{start},{dur * 1000:g}" for start, dur in runs) + " \n"
        for name, runs in calls.items()))
    (folder / "step_trace_profiling_0.txt").write_text("")
    (folder / "profiler_info_0.json").write_text(json.dumps(
        {"ms_version": "2.2.14", "context_mode": mode, "rank_id": 0, "device_target": "GPU"}))
    total_us = {name: 1000 * sum(d for _, d in runs) for name, runs in calls.items()}
    all_us = sum(total_us.values())
    with open(folder / "gpu_op_detail_info_0.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["op_side", "op_type", "op_name", "op_full_name", "op_occurrences", "op_total_time(us)",
                      "op_avg_time(us)", "total_proportion", "cuda_activity_cost_time(us)",
                      "cuda_activity_call_count"])
        for name, runs in calls.items():
            out.writerow(["Device", types[name], name.split("/")[-1], name, len(runs), total_us[name],
                          total_us[name] / len(runs), total_us[name] / all_us, total_us[name], len(runs)])
    with open(folder / "gpu_op_type_info_0.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["op_type", "type_occurrences", "total_time(us)", "total_proportion", "avg_time(us)"])
        for op_type in dict.fromkeys(types.values()):
            names = [n for n in calls if types[n] == op_type]
            count, us = sum(len(calls[n]) for n in names), sum(total_us[n] for n in names)
            out.writerow([op_type, count, us, us / all_us, us / count])
    return folder


def test_gpu_reader_takes_version_mode_and_steps_from_op_launches_when_the_step_trace_is_empty(tmp_path):
    folder = gpu_pynative(tmp_path / "gpu")
    run = load(folder)
    assert (run.meta.ms_version, run.meta.mode, run.meta.step_source) == ("2.2.14", "pynative",
                                                                          "first_op_timestamps")
    assert any("gpu_op_execute_timestamp_0.txt" in w for w in run.warnings)
    # independently: Cast's k-th launch starts step k; the last step ends with the last op
    cast = [int(pair.split(",")[0]) for line in (folder / "gpu_op_execute_timestamp_0.txt").read_text().splitlines()
            if line.startswith("Default/Cast") for pair in line.split(";")[2].split()]
    assert len(run.steps) == len(cast) == GPU_STEPS
    assert run.steps["total_ms"].iloc[:-1].tolist() == pytest.approx([GPU_STEP_NS / 1e6] * (GPU_STEPS - 1))
    assert run.ops.set_index("name").loc["Default/Conv2D-op1", "max_ms"] == pytest.approx(FIRST_CALL_MS)


def test_graph_mode_fires_on_a_pynative_gpu_run_that_idles_the_gpu(tmp_path):
    run = load(gpu_pynative(tmp_path / "gpu"))
    where = bound(run)
    assert where.kind == "host"
    busy_ms = run.op_types["total_ms"].sum() / GPU_STEPS  # GPU op time per step, from the type file
    advice = advise(run)
    assert "host_bound" in advice.passed  # a PyNative step's host time is graph_mode's, with the same change
    found = finding(advice, "graph_mode")
    assert found.severity == "high"
    assert found.evidence["device_compute_ms"] == pytest.approx(busy_ms, rel=1e-3)
    assert found.evidence["host_gap_share_pct"] == pytest.approx(
        100 * (1 - busy_ms / run.steps["total_ms"].mean()), abs=0.05)
    assert "GRAPH_MODE" in found.action and "@ms.jit" in found.action and "PyNative" in found.title


def test_host_bound_on_a_graph_mode_gpu_run_says_launch_bound(tmp_path):
    # crafted graph-mode GPU files whose 41 kernels a step leave 0.8 ms gaps between them (under a millisecond per
    # call: launches, not Python): launch-bound. With gaps of 20-55 ms (GPU_OPS in graph mode) the host does more
    # than launch between kernels: the ledger's host_loop, whose rule claims it
    calls: dict[str, list[tuple[int, float]]] = {}
    for step in range(GPU_STEPS):
        begin = GPU_EPOCH_NS + step * 42_000_000
        for index in range(41):
            name = "Default/Cast-op0" if index == 0 else f"Default/ReLU-op{index}"
            calls.setdefault(name, []).append((begin + index * 1_000_000, 0.2))
    advice = advise(load(gpu_pynative(tmp_path / "gpu", mode="graph", calls=calls)))
    found = finding(advice, "host_bound")
    assert found.title.startswith("Launch-bound: the GPU runs ops only") and "GRAPH_MODE" not in found.action
    assert "host_loop" not in advice.ids()
    spaced = advise(load(gpu_pynative(tmp_path / "spaced", mode="graph")))
    assert "host_loop" in spaced.ids() and "host_bound" not in spaced.ids()


def test_host_bound_silent_on_real_graph_mode_cpu_runs_and_a_real_pynative_run_that_mostly_computes():
    for path in (SAMPLE_RUNS / "cpu_default", TEST_RUNS / "cpu_2_10_pynative"):
        advice = advise(load(path))
        assert "host_bound" in advice.passed, (path, advice.ids(), advice.not_checked)


def test_compile_or_first_call_names_the_first_call_instead_of_blaming_its_op_type(tmp_path):
    run = load(gpu_pynative(tmp_path / "gpu"))
    found = finding(advise(run), "compile_or_first_call")
    share = FIRST_CALL_MS / run.ops["total_ms"].sum()
    assert found.target == "Default/Conv2D-op1"
    assert found.evidence["one_call_share_of_op_time_pct"] == pytest.approx(100 * share, abs=0.01)
    assert share > 0.4  # the run: one first call is ~45 % of all GPU op time
    assert "schedule" in found.action and "warmup" in found.action


def test_compile_or_first_call_names_a_first_step_that_carries_compilation():
    # crafted (no real fixture profiles its compile step): the first of four steps takes 5x the others
    from perfkit.core.model import Meta, Run, table
    steps = table("steps", pd.DataFrame([{"rank": 0, "step": s, "interval_ms": 1.0, "fwd_bwd_ms": fwd, "tail_ms": 1.0,
                                          "total_ms": fwd + 2.0} for s, fwd in ((1, 498.0), (2, 98.0), (3, 98.0),
                                                                                  (4, 98.0))]))
    run = Run(path="crafted", meta=Meta(device="Ascend", ranks=[0]), steps=steps)
    found = finding(advise(run), "compile_or_first_call")
    assert (found.evidence["first_step_ms"], found.evidence["median_other_steps_ms"]) == (500.0, 100.0)
    assert "5.0x" in found.title


def test_compile_or_first_call_silent_on_real_steady_runs_and_on_1x_files_without_call_counts():
    # mindinsight_misc's 1.x detail file has no count column: every op reads as called once, which says nothing
    for path in (SAMPLE_RUNS / "cpu_default", FIXTURE_RUNS["legacy_misc"], FIXTURE_RUNS["legacy_ut"]):
        advice = advise(load(path))
        assert "compile_or_first_call" in advice.passed, (path, advice.ids())


# --- a crafted pipeline-parallel run: pp=2 x dp=2, torch_npu, bf16 ------------------------------------------

STEP_TRACE_HEADER = ["Step", "Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free",
                     "Stage", "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing"]
# per stage, µs per step: computing, p2p wait (hcom_batchSendRecv, not overlapped), all-reduce not overlapped
STAGES = {0: (300_000, 323_000, 17_000), 1: (519_000, 80_000, 20_000)}
STAGE_OF = {0: 0, 1: 0, 2: 1, 3: 1}   # pp groups [0, 2] and [1, 3]: one rank per stage each
FREE_US, PREPARING_US = 20_000, 1_000


def pipeline_run(root: Path, with_groups: bool = True) -> Path:
    for rank, stage in STAGE_OF.items():
        folder = root / f"rank{rank}_ascend_pt"
        output = folder / "ASCEND_PROFILER_OUTPUT"
        output.mkdir(parents=True)
        (folder / f"profiler_info_{rank}.json").write_text(json.dumps({"config": {}, "start_info": {}}))
        groups = {f"10.0.0.1%enp_{rank % 2}_pp": {"group_name": "pp", "group_rank": stage,
                                                  "global_ranks": [rank % 2, rank % 2 + 2]},
                  f"10.0.0.1%enp_{stage}_dp": {"group_name": "dp", "group_rank": rank % 2,
                                               "global_ranks": [2 * stage, 2 * stage + 1]}}
        (folder / "profiler_metadata.json").write_text(json.dumps(
            {"ENV_VARIABLES": {}, **({"parallel_group_info": groups} if with_groups else {})}))
        computing, p2p, collective = STAGES[stage]
        with open(output / "step_trace_time.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(STEP_TRACE_HEADER)
            for step in (1, 2, 3):
                exposed = p2p + collective
                out.writerow([step, computing, exposed, 5_000, exposed + 5_000, FREE_US,
                              computing + exposed + FREE_US, p2p, collective, PREPARING_US])
        with open(output / "kernel_details.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
                          "Wait Time(us)", "Block Dim", "Input Shapes", "Input Data Types"])
            start = 1_700_000_000_000_000.0
            for step in (1, 2, 3):
                for name, op_type, dur, dtype in (
                        ("MatMulV2_1", "MatMulV2", computing, "DT_BF16;DT_BF16"),
                        ("hcom_batchSendRecv__1_1", "hcom_batchSendRecv_", p2p, "N/A"),
                        ("hcom_allReduce__2_1", "hcom_allReduce_", collective, "N/A")):
                    out.writerow([step, name, op_type, "AI_CORE", f"{start}\t", dur, 0, 20, '"4096,4096"', dtype])
                    start += dur
    return root


def test_pipeline_stages_come_from_profiler_metadata_pp_groups_and_bf16_stays_bf16(tmp_path):
    run = load(pipeline_run(tmp_path / "pp"))
    assert run.meta.pipeline_stages == [[0, 1], [2, 3]]
    assert run.meta.framework == "torch_npu"
    assert run.meta.compute_dtype == "bfloat16"
    assert "amp_level" in advise(run).passed  # bf16 is already half precision


def test_pipeline_stage_imbalance_fires_and_replaces_slow_rank_and_communication(tmp_path):
    run = load(pipeline_run(tmp_path / "pp"))
    advice = advise(run)
    found = finding(advice, "pipeline_stage_imbalance")
    for stage, (computing, p2p, _) in STAGES.items():
        assert found.evidence[f"stage{stage}_compute_ms"] == pytest.approx(computing / 1000)
        assert found.evidence[f"stage{stage}_pipeline_wait_ms"] == pytest.approx(p2p / 1000)
    step_ms = {stage: (sum(v) + FREE_US + PREPARING_US) / 1000 for stage, v in STAGES.items()}
    wait_share = sum(p2p / 1000 for _, p2p, _ in STAGES.values()) / sum(step_ms.values())
    assert found.est_gain_pct == pytest.approx(100 * wait_share, abs=0.01)
    assert "Megatron" in found.action and "set_auto_parallel_context" not in found.action  # torch_npu wording
    # the second stage computes 73 % more, and stage 0 waits in p2p: neither is a slow rank nor fusion's job
    assert "slow_rank" in advice.passed and "communication" in advice.passed
    assert bound(run).kind == "pipeline"


def test_without_stage_information_the_same_ranks_read_as_slow_ranks(tmp_path):
    # the counterfactual: the rule that takes over needs the stages; without them slow_rank still speaks
    advice = advise(load(pipeline_run(tmp_path / "pp", with_groups=False)))
    assert "slow_rank" in advice.ids()


def test_pipeline_stage_imbalance_silent_on_real_runs_without_two_stages():
    # mindinsight_run_4's cluster file says pipeline-parallel with stage_num 1 (one stage) of 2 ranks, of which
    # the folder holds rank 1 alone: its stage lists the ranks present; level1 is data parallel
    run_4 = load(FIXTURE_RUNS["legacy_run_4"])
    assert run_4.meta.pipeline_stages == [[1]]
    for run in (run_4, load(FIXTURE_RUNS["new_level1"])):
        assert "pipeline_stage_imbalance" in advise(run).passed


# --- communication: collectives only ------------------------------------------------------------------------

def test_communication_fires_on_real_collective_communication_with_the_framework_s_wording():
    run = load(FIXTURE_RUNS["new_level1"])  # torch_npu; communication.json lists only collectives (allReduce)
    found = finding(advise(run), "communication")
    exposed = run.steps.groupby("rank")["comm_exposed_ms"].mean()
    totals = run.steps.groupby("rank")["total_ms"].mean()
    assert found.evidence["comm_exposed_share_pct"] == pytest.approx(100 * exposed.mean() / totals.mean(), abs=0.01)
    # its collectives are ~97 % wait (communication.json: Elapse far above Transit): no bucket/fusion advice
    assert "mostly waiting" in found.title
    assert "bucket_cap_mb" not in found.action and "ms.set_auto_parallel_context" not in found.action


def test_communication_on_a_mindspore_run_keeps_mindspore_wording():
    found = finding(advise(load(SAMPLE_RUNS / "cpu_ranks2")), "communication")
    assert "ms.set_auto_parallel_context" in found.action


def test_communication_silent_when_the_exposed_communication_is_point_to_point(tmp_path):
    parts = rank_parts(load(pipeline_run(tmp_path / "pp")))
    assert (parts["pipeline"] > parts["communication"]).all()


# --- amp_level on partial evidence --------------------------------------------------------------------------

def test_amp_level_fires_conditionally_on_the_seed_s_own_files_without_framework_raw(tmp_path):
    seed = tmp_path / "seed_1"
    shutil.copytree(TEST_RUNS / "seed_1_feed_fp32", seed, ignore=shutil.ignore_patterns("framework_raw_*"))
    run = load(seed)
    assert run.meta.compute_dtype is None and run.meta.amp_level is None
    found = finding(advise(run), "amp_level")
    types = pd.read_csv(seed / "aicore_intermediate_0_type.csv").set_index("op_type")["execution_time"]
    cast_bn = types["Cast"] + types[[t for t in types.index if t.startswith("BNTraining")]].sum()
    assert found.evidence["cast_bn_share_of_device_pct"] == pytest.approx(100 * cast_bn / types.sum(), abs=0.01)
    assert "if not already O3" in found.action and "not recorded" in found.title
    assert found.severity == "high"


def test_amp_level_silent_on_the_real_o3_seed_run():
    assert "amp_level" in advise(load(TEST_RUNS / "seed_3_sink_o3")).passed


# --- kernel_efficiency: like with like ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cpu_default", "cpu_avx2", "cpu_workers1", "cpu_workers4"])
def test_kernel_efficiency_gives_no_high_finding_on_real_resnet50_32px_cpu_runs(name):
    # made here with `perfkit profile` (MindSpore 2.10 CPU, oneDNN jit kernels: ONEDNN_VERBOSE=1 shows jit)
    advice = advise(load(SAMPLE_RUNS / name))
    assert not [f for f in advice.findings if f.id == "kernel_efficiency" and f.severity == "high"]
    assert "kernel_efficiency" in advice.passed


def test_kernel_efficiency_gain_never_exceeds_the_share_its_ops_take():
    for path in (SAMPLE_RUNS / "cpu_default", FIXTURE_RUNS["cpu_2_10"]):
        run = load(path)
        for found in (f for f in advise(run).findings if f.id == "kernel_efficiency"):
            assert found.est_gain_pct <= found.evidence["share_of_op_time_pct"]


# --- Level0 op types, per-rank op data ----------------------------------------------------------------------

@pytest.mark.parametrize("name, op_type", [("Conv2D1", "Conv2D"), ("trans_TransData_0", "TransData"),
                                           ("aclnnInplaceRelu_Relu_Relu", "Relu"), ("MatMulV2", "MatMulV2"),
                                           ("aclnnMaxPool2dWithMask_MaxPoolWithArgmaxV1AiCore_MaxPoolWithArgmaxV1",
                                            "MaxPoolWithArgmaxV1"), ("hcom_allReduce__586_0_1", "allReduce")])
def test_level0_kernel_names_give_their_op_type(name, op_type):
    assert type_from_kernel_name(name) == op_type


def test_level0_kernel_table_gets_op_types_from_names_with_a_warning(tmp_path):
    # crafted from the real level1 kernel table: the same rows with Type set to N/A, as Level0 writes it
    source = FIXTURE_RUNS["new_level1_rank0"]
    folder = tmp_path / "rank0_ascend_ms"
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("op_statistic.csv", "trace_view.json"))
    kernels = pd.read_csv(folder / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", dtype=str, keep_default_na=False)
    kernels["Type"] = "N/A"
    kernels.to_csv(folder / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", index=False)
    run = load(folder)
    assert any("Level0" in w for w in run.warnings)
    expected = {type_from_kernel_name(n) for n in kernels["Name"]}
    assert set(run.op_types["type"]) == expected and len(expected) > 1


def test_ranks_without_op_data_are_named():
    run = load(FIXTURE_RUNS["legacy_misc"])  # aicore files for rank 1 only; step traces for ranks 0 and 10
    assert any("none on rank(s) [0, 10]" in w for w in run.warnings)


# --- trust ---------------------------------------------------------------------------------------------------

def test_an_interrupted_run_with_few_steps_is_said_first_and_not_advised(tmp_path):
    # crafted from a real sample run: its manifest marked interrupted after 2 of its 3 steps
    run_dir = tmp_path / "interrupted"
    shutil.copytree(SAMPLE_RUNS / "cpu_default", run_dir)
    manifest = json.loads((run_dir / "perfkit_run.json").read_text())
    manifest["status"], manifest["steps"] = "interrupted", manifest["steps"][:2]
    (run_dir / "perfkit_run.json").write_text(json.dumps(manifest))
    advice = advise(load(run_dir))
    assert advice.caveat.startswith("the run interrupted after 2 profiled step(s)")
    assert not advice.findings and not advice.passed
    result = CliRunner().invoke(main, ["advise", str(run_dir)])
    assert result.output.startswith("WARNING: the run interrupted")


def test_a_compute_bound_run_is_told_which_op_types_take_the_time():
    run = load(SAMPLE_RUNS / "cpu_default")
    assert bound(run).kind == "compute"
    found = finding(advise(run), "compute_bound")
    types = run.op_types.groupby("type")["total_ms"].sum().sort_values(ascending=False)
    top = types.index[0]
    assert found.target == top
    assert found.evidence[f"{top}_share_pct"] == pytest.approx(100 * types.iloc[0] / types.sum(), abs=0.01)


def test_summary_json_has_the_bound_with_parts_that_add_up_to_the_step():
    for path in (SAMPLE_RUNS / "cpu_default", FIXTURE_RUNS["new_level1"], TEST_RUNS / "seed_3_sink_o3"):
        result = CliRunner().invoke(main, ["summary", str(path), "--format", "json"])
        payload = json.loads(result.output)
        assert {"run", "steps", "op_types", "queues", "bound"} <= set(payload)
        parts = payload["bound"]["parts_ms"]
        assert set(parts) == {"compute", "communication", "pipeline", "data", "host", "unknown"}
        assert sum(parts.values()) == pytest.approx(payload["steps"]["total_ms"], rel=1e-3)
        assert payload["bound"]["evidence"]


def test_data_wait_only_with_queue_evidence():
    # seed_3: the device queue is empty in 2 of 3 samples -> the interval is data wait
    starving = bound(load(TEST_RUNS / "seed_3_sink_o3"))
    assert starving.kind == "data" and starving.parts_ms["data"] > 0
    # mindinsight_misc: 90 ms intervals but a single host-queue sample: no data evidence, the idle is unknown
    misc = bound(load(FIXTURE_RUNS["legacy_misc"]))
    assert misc.parts_ms["data"] == 0 and misc.kind == "unknown"
    result = CliRunner().invoke(main, ["summary", str(FIXTURE_RUNS["legacy_misc"])])
    assert "step interval (device idle)" in result.output and "data wait" not in result.output


def test_pipeline_wait_between_balanced_stages_is_not_called_a_layer_imbalance():
    """Real msprof-analyze output (16 ranks, 2 stages): the stages compute within ~1 % of the step of each other
    while stage 1 waits 27 % of it; moving layers cannot help, so the action is the bubble and what the stage waits
    for. The real 4-rank MindInsight run, whose stage 1 computes 23x stage 0, keeps the rebalance advice."""
    balanced = finding(advise(perfkit.load(TEST_RUNS / "msinsight_cluster_analysis")), "pipeline_stage_imbalance")
    spread = balanced.evidence["compute_spread_pct_of_step"]
    stage_ms = [balanced.evidence[f"stage{stage}_compute_ms"] for stage in (0, 1)]
    assert abs(stage_ms[1] - stage_ms[0]) < 0.05 * balanced.evidence["step_ms"]
    assert spread < 5 and "the stages compute within" in balanced.title
    assert "Rebalance" not in balanced.action and "Move layers" not in balanced.action
    assert "micro" in balanced.action and "exposed collectives" in balanced.action
    skewed = finding(advise(perfkit.load(TEST_RUNS / "mindinsight_cluster_propose")), "pipeline_stage_imbalance")
    assert skewed.evidence["compute_spread_pct_of_step"] > 5
    assert skewed.action.startswith(("Rebalance layers", "Move layers")) and "stage 1 computes" in skewed.title

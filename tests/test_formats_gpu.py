"""The GPU reader, on files built the way MindSpore's GPU profiler writes them.

No real GPU run is among the fixtures. The files below follow MindSpore's writers:
`DataSaver::WriteOpType`/`WriteOpDetail` (headers from `OpType::GetGpuHeader` and
`OpDetailInfo::GetGpuHeader`, rows `Device,type,name,full_name,count,total,avg,proportion,cupti,kernels`),
`GpuDataSaver::WriteStepTrace` (per marker op, `name start,end start,end ` in 10 ns) and
`GpuDataSaver::WriteStepTraceAsyncLaunchKernel` (per step, `op,ts op,ts op,ts op,ts[ comm,start,end]` in ns),
`GetNextProfiling::SaveProfilingData` (`GetNext start end queue_size`, ns).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError
from perfkit.io.formats import gpu

FP = "Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op1"
BP = "Gradients/Default/network-WithLossCell/_backbone-LeNet5/gradConv2D/Conv2DBackpropFilter-op30"
ITER_END = "Default/network-TrainOneStepCell/optimizer-Momentum/ApplyMomentum-op40"
ALLREDUCE = "Default/network-TrainOneStepCell/AllReduce-op50"

TYPE_ROWS = [("Conv2D", 4, 812.5, 0.40625, 203.125), ("MatMul", 6, 900.0, 0.45, 150.0),
             ("Cast", 10, 287.5, 0.14375, 28.75)]
DETAIL_ROWS = [
    ("Device", "Conv2D", "Conv2D-op1", FP, 2, 500.0, 250.0, 0.25, 480.0, 2),
    ("Device", "Conv2DBackpropFilter", "Conv2DBackpropFilter-op30", BP, 2, 312.5, 156.25, 0.15625, 300.0, 2),
    ("Device", "Cast", "Cast-op7", "Default/Cast-op7", 10, 287.5, 28.75, 0.14375, 280.0, 10),
]
# Per-marker trace in 10 ns ticks, 3 steps: (start, end) per step for each marker op.
FP_TIMES = [(1000, 1100), (5000, 5090), (9100, 9200)]
BP_TIMES = [(3000, 3200), (7000, 7300), (11000, 11150)]
END_TIMES = [(3900, 4000), (8000, 8200), (12000, 12050)]
ALLREDUCE_TIMES = [(3300, 3800), (7400, 7900), (11200, 11600)]


pytestmark = pytest.mark.usefixtures("uncached")


def write_ops(folder: Path, rank: int = 0) -> None:
    with open(folder / f"gpu_op_type_info_{rank}.csv", "w") as out:
        out.write("op_type,type_occurrences,total_time(us),total_proportion,avg_time(us)\n")
        out.writelines(",".join(map(str, row)) + "\n" for row in TYPE_ROWS)
    with open(folder / f"gpu_op_detail_info_{rank}.csv", "w") as out:
        out.write("op_side,op_type,op_name,op_full_name,op_occurrences,op_total_time(us),op_avg_time(us),"
                  "total_proportion,cuda_activity_cost_time(us),cuda_activity_call_count\n")
        out.writelines(",".join(map(str, row)) + "\n" for row in DETAIL_ROWS)


def write_marker_trace(folder: Path, with_comm: bool) -> None:
    lines = [(FP, FP_TIMES), (BP, BP_TIMES), (ITER_END, END_TIMES)]
    if with_comm:
        lines.append((ALLREDUCE, ALLREDUCE_TIMES))
    (folder / "step_trace_profiling_0.txt").write_text(
        "".join(name + " " + "".join(f"{s},{e} " for s, e in times) + "\n" for name, times in lines))


@pytest.fixture
def gpu_run(tmp_path) -> Path:
    write_ops(tmp_path)
    write_marker_trace(tmp_path, with_comm=True)
    (tmp_path / "minddata_getnext_profiling_0.txt").write_text("GetNext 100 2100 0\nGetNext 3000 3050 4\n")
    return tmp_path


def test_op_types_in_ms(gpu_run):
    run = perfkit.load(gpu_run)
    assert run.meta.device == "GPU" and run.meta.layout == "gpu" and run.ranks == [0]
    with open(gpu_run / "gpu_op_type_info_0.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    types = run.op_types.set_index("type")
    for row in rows:
        assert math.isclose(types.loc[row["op_type"], "total_ms"], float(row["total_time(us)"]) / 1000)
        assert types.loc[row["op_type"], "share"] == float(row["total_proportion"])
        assert types.loc[row["op_type"], "count"] == int(row["type_occurrences"])


def test_ops_in_ms_with_pass(gpu_run):
    with open(gpu_run / "gpu_op_detail_info_0.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    ops = perfkit.load(gpu_run).ops.set_index("name")
    for row in rows:
        op = ops.loc[row["op_full_name"]]
        assert math.isclose(op["avg_ms"], float(row["op_avg_time(us)"]) / 1000)
        assert math.isclose(op["total_ms"], float(row["op_total_time(us)"]) / 1000)
        assert op["count"] == int(row["op_occurrences"]) and op["type"] == row["op_type"]
    assert ops.loc[BP, "pass"] == "backward" and ops.loc[FP, "pass"] == "forward"


def test_per_marker_step_trace(gpu_run):
    steps = perfkit.load(gpu_run).steps.sort_values("step")
    # GpuStepTraceParser: a step starts where the previous one ended, the first at its fp start
    starts = [FP_TIMES[0][0]] + [end for _, end in END_TIMES[:-1]]
    assert steps["step"].tolist() == [1, 2, 3]
    assert steps["interval_ms"].tolist() == [(fp - s) / 1e5 for (fp, _), s in zip(FP_TIMES, starts)]
    assert steps["fwd_bwd_ms"].tolist() == [(bp - fp) / 1e5 for (fp, _), (_, bp) in zip(FP_TIMES, BP_TIMES)]
    assert steps["tail_ms"].tolist() == [(end - bp) / 1e5 for (_, bp), (_, end) in zip(BP_TIMES, END_TIMES)]
    assert steps["total_ms"].tolist() == [(end - s) / 1e5 for (_, end), s in zip(END_TIMES, starts)]
    assert steps["comm_ms"].tolist() == [(e - s) / 1e5 for s, e in ALLREDUCE_TIMES]


def test_per_marker_without_comm(tmp_path):
    write_marker_trace(tmp_path, with_comm=False)
    steps = gpu.read(tmp_path)[0].tables["steps"]
    assert len(steps) == 3 and "comm_ms" not in steps


def test_async_launch_step_trace_in_ns(tmp_path):
    steps_ns = [(1_000_000, 1_250_000, 4_000_000, 4_600_000, (4_100_000, 4_400_000)),
                (4_600_000, 5_000_000, 8_000_000, 8_500_000, (8_100_000, 8_300_000))]
    (tmp_path / "step_trace_profiling_0.txt").write_text("".join(
        f"Default/GetNext-op0,{start} {FP},{fp} {BP},{bp} {ITER_END},{end} {ALLREDUCE},{cs},{ce}\n"
        for start, fp, bp, end, (cs, ce) in steps_ns))
    steps = gpu.read(tmp_path)[0].tables["steps"]
    assert steps["interval_ms"].tolist() == [(fp - start) / 1e6 for start, fp, *_ in steps_ns]
    assert steps["fwd_bwd_ms"].tolist() == [(bp - fp) / 1e6 for _, fp, bp, *_ in steps_ns]
    assert steps["tail_ms"].tolist() == [(end - bp) / 1e6 for _, _, bp, end, _ in steps_ns]
    assert steps["comm_ms"].tolist() == [(ce - cs) / 1e6 for *_, (cs, ce) in steps_ns]


def test_getnext_queue_from_minddata_reader(gpu_run):
    run = perfkit.load(gpu_run)
    assert run.device_queue["wait_ms"].tolist() == [2000 / 1e6, 50 / 1e6]
    assert run.meta.data_mode == "sink"


@pytest.mark.parametrize("content, problem", [
    (b"", "empty"),
    (b"op_type,type_occurrences,total_time(us),total_proportion,avg_time(us)\n", "no rows"),
    (b"kind,n\nCast,1\n", "lacks column"),
])
def test_broken_type_file_is_skipped_with_one_warning(gpu_run, content, problem):
    (gpu_run / "gpu_op_type_info_0.csv").write_bytes(content)
    run = perfkit.load(gpu_run)
    named = [w for w in run.warnings if "gpu_op_type_info_0.csv" in w]
    assert len(named) == 1 and problem in named[0]
    assert len(run.ops) == len(DETAIL_ROWS) and len(run.steps) == 3


def test_broken_step_trace_is_skipped(gpu_run):
    (gpu_run / "step_trace_profiling_0.txt").write_text(f"{FP} 1000,1100\n")
    run = perfkit.load(gpu_run)
    assert any("step_trace_profiling_0.txt" in w for w in run.warnings)
    assert len(run.op_types) == len(TYPE_ROWS)


def test_folder_with_only_a_broken_file_names_it(tmp_path):
    (tmp_path / "gpu_op_detail_info_0.csv").write_text("op_side,op_type\nDevice,Cast\n")
    with pytest.raises(PerfkitError, match="gpu_op_detail_info_0.csv"):
        perfkit.load(tmp_path)


def test_summary_cli(gpu_run):
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(gpu_run)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)

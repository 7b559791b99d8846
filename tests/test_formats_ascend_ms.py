"""The MindSpore >= 2.3 / torch_npu layout reader, checked against the csv module on the real fixtures."""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from broken import CSV_BREAKS, broken_csv
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError
from perfkit.io.formats import ascend_ms

NEW_FORMAT_RUNS = {"new_level1": [0, 1], "new_level1_rank0": [0], "new_level1_rank0_output": [0],
                   "new_2023": [0, 1], "new_2023_rank1": [1]}
LEVEL1_RANK0 = FIXTURE_RUNS["new_level1_rank0"]
RANK0_2023 = FIXTURE_RUNS["new_2023"] / "test_rank_0"
OUTPUT = "ASCEND_PROFILER_OUTPUT"


pytestmark = pytest.mark.usefixtures("uncached")


def csv_rows(path: Path) -> list[dict[str, str]]:
    """Rows as dicts, leaving out rows whose cell count differs from the header (as the reader does)."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.reader(handle))
    return [dict(zip(rows[0], row)) for row in rows[1:] if len(row) == len(rows[0])]


def step_trace_expectation(rank_dir: Path) -> dict[str, float]:
    (row,) = csv_rows(rank_dir / OUTPUT / "step_trace_time.csv")
    us = {key: float(value) for key, value in row.items()}
    preparing = us.get("Preparing", 0.0)
    return {"step": int(us["Step"]),
            "total_ms": (us["Computing"] + us["Communication(Not Overlapped)"] + us["Free"] + preparing) / 1000,
            "interval_ms": (us["Free"] + preparing) / 1000,
            "fwd_bwd_ms": (us["Computing"] + us["Communication(Not Overlapped)"]) / 1000,
            "comm_ms": us["Communication"] / 1000, "free_ms": us["Free"] / 1000}


@pytest.mark.parametrize("name", sorted(NEW_FORMAT_RUNS))
def test_every_new_format_fixture_loads(name):
    run = perfkit.load(FIXTURE_RUNS[name])
    assert run.meta.layout == "ascend_ms" and run.meta.device == "Ascend"
    assert run.ranks == NEW_FORMAT_RUNS[name]
    assert sorted(run.steps["rank"].unique()) == NEW_FORMAT_RUNS[name]
    assert sorted(run.ops["rank"].unique()) == NEW_FORMAT_RUNS[name]
    assert len(run.op_types) and run.op_types["share"].between(0, 1).all()
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(FIXTURE_RUNS[name])])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["layout"] == "ascend_ms" and summary["ranks"] == NEW_FORMAT_RUNS[name]
    assert {"interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms"} <= set(summary["steps"])
    assert summary["steps"]["tail_ms"] is None  # torch_npu kernel names carry no scopes


def test_level1_rank0_steps_match_step_trace_time():
    # 8873.756 + 101963.203 + 25744.05 + 17902.5 us, the worked example in the brief
    expected = step_trace_expectation(LEVEL1_RANK0)
    assert expected["total_ms"] == pytest.approx((8873.756 + 101963.203 + 25744.05 + 17902.5) / 1000)
    run = perfkit.load(LEVEL1_RANK0)
    (step,) = run.steps.to_dict("records")
    assert step["step"] == expected["step"] == 50
    for key in ("total_ms", "interval_ms", "fwd_bwd_ms", "comm_ms", "free_ms"):
        assert step[key] == pytest.approx(expected[key])
    assert math.isnan(step["tail_ms"])
    assert any("fwd/bwd/tail split unavailable" in w for w in run.warnings)
    assert run.meta.step_source == "step_trace_time"


@pytest.mark.parametrize("rank", [0, 1])
def test_2023_steps_without_preparing_column(rank):
    rank_dir = FIXTURE_RUNS["new_2023"] / f"test_rank_{rank}"
    assert "Preparing" not in csv_rows(rank_dir / OUTPUT / "step_trace_time.csv")[0]
    expected = step_trace_expectation(rank_dir)
    run = perfkit.load(FIXTURE_RUNS["new_2023"])
    step = run.steps[run.steps["rank"] == rank].iloc[0]
    assert step["total_ms"] == pytest.approx(expected["total_ms"])
    assert step["interval_ms"] == pytest.approx(expected["interval_ms"])
    assert math.isnan(step["preparing_ms"])


def test_op_types_from_op_statistic_and_the_collectives_it_leaves_out():
    """op_statistic.csv's compute types, plus the HCCL collectives kernel_details.csv lists (Accelerator Core HCCL,
    Type `hcom_allReduce_`: the name `hcom_allReduce__586_0_1` less its ids; the type is hcom_allReduce)."""
    expected = defaultdict(lambda: [0.0, 0, 0.0])
    for row in csv_rows(LEVEL1_RANK0 / OUTPUT / "op_statistic.csv"):
        entry = expected[row["OP Type"]]
        entry[0] += float(row["Total Time(us)"]) / 1000
        entry[1] += int(row["Count"])
        entry[2] += float(row["Ratio(%)"]) / 100
    compute_ms = sum(total_ms for total_ms, _, _ in expected.values())
    hccl = [row for row in csv_rows(LEVEL1_RANK0 / OUTPUT / "kernel_details.csv") if row["Accelerator Core"] == "HCCL"]
    assert {row["Type"] for row in hccl} == {"hcom_allReduce_"}
    expected["hcom_allReduce"] = [sum(float(row["Duration(us)"]) for row in hccl) / 1000, len(hccl), None]
    run = perfkit.load(LEVEL1_RANK0)
    got = {row.type: [row.total_ms, row.count, row.file_share, row.share] for row in run.op_types.itertuples()}
    assert set(got) == set(expected)
    all_ms = sum(total_ms for total_ms, _, _ in expected.values())
    for op_type, (total_ms, count, ratio) in expected.items():
        assert got[op_type][0] == pytest.approx(total_ms)
        assert got[op_type][1] == count
        assert got[op_type][3] == pytest.approx(total_ms / all_ms)
        if ratio is None:  # the file does not count it
            assert math.isnan(got[op_type][2])
        else:
            assert got[op_type][2] == pytest.approx(ratio)  # Ratio(%): of the file's own rows, rounded
            assert got[op_type][3] * all_ms / compute_ms == pytest.approx(ratio, abs=1e-4)
    largest = max(float(row["Duration(us)"]) for row in hccl) / 1000
    assert largest == pytest.approx(79.08952)  # the largest kernel of the run
    assert run.ops.set_index("name").loc["hcom_allReduce__586_0_1", "type"] == "hcom_allReduce"


def test_op_types_from_kernels_when_op_statistic_is_missing():
    assert not (RANK0_2023 / OUTPUT / "op_statistic.csv").exists()
    totals = defaultdict(float)
    counts = defaultdict(int)
    for row in csv_rows(RANK0_2023 / OUTPUT / "kernel_details.csv"):
        op_type = row["Type"].rstrip("_")  # hcom_broadcast_ -> hcom_broadcast
        totals[op_type] += float(row["Duration(us)"]) / 1000
        counts[op_type] += 1
    run = perfkit.load(RANK0_2023)
    got = run.op_types.set_index("type")
    assert set(got.index) == set(totals)
    for op_type, total in totals.items():
        assert got.loc[op_type, "total_ms"] == pytest.approx(total)
        assert got.loc[op_type, "count"] == counts[op_type]
        assert got.loc[op_type, "share"] == pytest.approx(total / sum(totals.values()))
    # this real file has one FlashAttentionScore row with a cell missing: skipped, and said so
    assert any("kernel_details.csv: skipped 1 row" in w for w in run.warnings)


@pytest.mark.parametrize("rank_dir", [LEVEL1_RANK0, RANK0_2023], ids=["torch_npu_level1", "torch_npu_2023"])
def test_ops_aggregate_kernel_details_by_name(rank_dir):
    expected = defaultdict(lambda: {"total": 0.0, "count": 0})
    first = {}
    for row in csv_rows(rank_dir / OUTPUT / "kernel_details.csv"):
        expected[row["Name"]]["total"] += float(row["Duration(us)"]) / 1000
        expected[row["Name"]]["count"] += 1
        first.setdefault(row["Name"], row)
    run = perfkit.load(rank_dir)
    ops = run.ops.set_index("name")
    assert set(ops.index) == set(expected)
    for name, entry in expected.items():
        assert ops.loc[name, "total_ms"] == pytest.approx(entry["total"])
        assert ops.loc[name, "count"] == entry["count"]
        assert ops.loc[name, "avg_ms"] == pytest.approx(entry["total"] / entry["count"])
        assert ops.loc[name, "type"] == first[name]["Type"].rstrip("_")  # hcom_allReduce_: see trim_type_separator
        shapes = first[name]["Input Shapes"]
        if shapes != "N/A":
            assert ops.loc[name, "input_shapes"] == shapes.strip('"')
    assert set(ops["pass"]) == {"other"}  # torch_npu names such as Conv2D1 carry no scope


def test_torch_npu_conv_shapes_and_dtypes():
    run = perfkit.load(LEVEL1_RANK0)
    conv = run.ops.set_index("name").loc["Conv2D1"]
    assert conv["input_shapes"] == "32,1,224,224,8;121,4,16,8;64"
    assert conv["input_dtypes"] == "FLOAT;FLOAT;FLOAT"
    assert run.meta.compute_dtype == "float32"
    assert run.meta.amp_level is None  # amp levels are MindSpore's; this is a torch_npu run
    assert run.meta.ms_version is None


def mindspore_rank(tmp_path: Path, step_header: str = "Step ID") -> Path:
    """The level1 rank0 folder rewritten as MindSpore writes it: scoped kernel names, `Step ID`,
    fp16 convolutions with fp32 batch norm, a profiler_info with ms_version, a sink-mode dataset.csv."""
    rank_dir = tmp_path / "rank0_ascend_ms"
    shutil.copytree(LEVEL1_RANK0, rank_dir)
    (rank_dir / "profiler_info_0.json").unlink()
    (rank_dir / "profiler_info_3.json").write_text(json.dumps(
        {"ms_version": "2.3.1", "context_mode": 0, "rank_id": 3, "profiler_parameters": {}}))
    header = ["Step ID", "Model ID", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)",
              "Input Shapes", "Input Data Types"]
    header[0] = step_header
    kernels = [  # (name, type, start us, duration us, dtypes)
        ("Default/network/data-GetNext/GetNext-op1", "GetNext", 1000.0, 5.0, "N/A"),
        ("Default/network/conv1-Conv2d/Conv2D-op1", "Conv2D", 1010.5, 20.25, "FLOAT16;FLOAT16"),
        ("Default/network/bn1-BatchNorm2d/BNTrainingUpdate-op2", "BNTrainingUpdate", 1031.0, 4.0, "FLOAT;FLOAT"),
        ("Gradients/Default/network/conv1-Conv2d/Conv2DBackpropFilter-op3", "Conv2DBackpropFilter", 1040.0, 30.0,
         "FLOAT16;FLOAT16"),
        ("Default/optimizer-Momentum/ApplyMomentum-op4", "ApplyMomentum", 1075.0, 2.5, "FLOAT;FLOAT"),
    ]
    with open(rank_dir / OUTPUT / "kernel_details.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for name, op_type, start, duration, dtypes in kernels:
            writer.writerow([50, 4294967295, name, op_type, "AI_CORE", f"{start}\t", duration, '"16,3,32,32"',
                             dtypes])
    (rank_dir / OUTPUT / "op_statistic.csv").write_text(
        "Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
        "0,Conv2D,AI_CORE,1,20.25,20.25,20.25,20.25,60.0\n"
        "0,Conv2D,AI_VECTOR_CORE,1,10.0,10.0,10.0,10.0,30.0\n"
        "0,GetNext,AI_CPU,1,5.0,5.0,5.0,5.0,10.0\n")
    (rank_dir / OUTPUT / "dataset.csv").write_text(
        "Operation,Stage,Occurrences,Avg. time (us),Custom Info\n"
        "DeviceQueue,PushToAscend,10,120.5,\n")
    return rank_dir


@pytest.mark.parametrize("step_header", ["Step ID", "Step Id"])
def test_mindspore_scopes_give_forward_backward_span(tmp_path, step_header):
    rank_dir = mindspore_rank(tmp_path, step_header)
    expected = step_trace_expectation(rank_dir)
    run = perfkit.load(rank_dir)
    assert run.ranks == [3]  # from the profiler_info file name
    (step,) = run.steps.to_dict("records")
    fwd_bwd = ((1040.0 + 30.0) - 1010.5) / 1000  # last backward end - first forward start
    assert step["fwd_bwd_ms"] == pytest.approx(fwd_bwd)
    assert step["tail_ms"] == pytest.approx(max(0.0, expected["total_ms"] - expected["interval_ms"] - fwd_bwd))
    assert not any("fwd/bwd/tail split unavailable" in w for w in run.warnings)
    passes = run.ops.set_index("name")["pass"]
    assert passes["Default/network/conv1-Conv2d/Conv2D-op1"] == "forward"
    assert passes["Gradients/Default/network/conv1-Conv2d/Conv2DBackpropFilter-op3"] == "backward"
    assert passes["Default/optimizer-Momentum/ApplyMomentum-op4"] == "optimizer"
    conv = run.op_types.set_index("type").loc["Conv2D"]  # two core types, one row
    assert conv["total_ms"] == pytest.approx(0.03025) and conv["count"] == 2
    # Ratio(%) written above (60 + 30) is the file's; share is of the types' summed time (30.25 of 35.25 us)
    assert conv["file_share"] == pytest.approx(0.9) and conv["share"] == pytest.approx(30.25 / 35.25)
    assert run.meta.ms_version == "2.3.1" and run.meta.mode == "graph"
    assert run.meta.compute_dtype == "mixed"  # fp16 convolutions, fp32 batch norm
    assert run.meta.amp_level is None  # O1 or O2: the dtypes cannot tell which
    assert run.meta.data_mode == "sink"


def test_detect_needs_an_analysed_table(tmp_path):
    (tmp_path / OUTPUT).mkdir()
    (tmp_path / OUTPUT / "trace_view.json").write_text("[]")  # e.g. a CPU run: not this reader's
    assert not ascend_ms.detect(tmp_path)
    (tmp_path / OUTPUT / "op_statistic.csv").write_text("OP Type,Core Type,Count,Total Time(us)\n")
    assert ascend_ms.detect(tmp_path)


@pytest.mark.parametrize("how", CSV_BREAKS)
@pytest.mark.parametrize("file_name", ["step_trace_time.csv", "kernel_details.csv", "op_statistic.csv"])
def test_a_broken_file_is_skipped_with_a_warning(tmp_path, file_name, how):
    rank_dir = tmp_path / "rank0_ascend_pt"
    shutil.copytree(LEVEL1_RANK0, rank_dir)
    path = rank_dir / OUTPUT / file_name
    path.write_bytes(broken_csv(path.read_bytes(), how, cut_at=12))
    run = perfkit.load(rank_dir)
    assert any(file_name in w for w in run.warnings), run.warnings
    if how == "truncated_row":
        assert any(f"{file_name}: skipped 1 row" in w for w in run.warnings)
    if how == "not_utf8":
        assert any(file_name in w and "not UTF-8" in w for w in run.warnings)
    other_tables = {"step_trace_time.csv": run.op_types, "kernel_details.csv": run.steps,
                    "op_statistic.csv": run.steps}
    assert len(other_tables[file_name])  # the rest still loaded
    if file_name == "step_trace_time.csv" and how != "truncated_row":
        assert not len(run.steps)


def test_all_data_files_broken_raises_naming_them(tmp_path):
    rank_dir = tmp_path / "rank0_ascend_pt"
    shutil.copytree(LEVEL1_RANK0, rank_dir)
    for name in ("step_trace_time.csv", "kernel_details.csv", "op_statistic.csv"):
        (rank_dir / OUTPUT / name).write_bytes(b"")
    # with its memory and communication files the folder still has something to show (next test)
    for name in ("memory_record.csv", "operator_memory.csv", "npu_module_mem.csv", "communication.json",
                 "communication_matrix.json"):
        (rank_dir / OUTPUT / name).unlink()
    with pytest.raises(PerfkitError) as caught:
        perfkit.load(rank_dir)
    assert "kernel_details.csv" in str(caught.value) and OUTPUT in str(caught.value)
    result = CliRunner().invoke(main, ["summary", str(rank_dir)])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_broken_data_files_beside_readable_memory_load_with_a_warning_naming_them(tmp_path):
    rank_dir = tmp_path / "rank0_ascend_pt"
    shutil.copytree(LEVEL1_RANK0, rank_dir)
    for name in ("step_trace_time.csv", "kernel_details.csv", "op_statistic.csv"):
        (rank_dir / OUTPUT / name).write_bytes(b"")
    run = perfkit.load(rank_dir)
    assert len(run.memory) and len(run.comm_ops) and not len(run.steps)
    assert any("kernel_details.csv" in w and "is empty" in w for w in run.warnings), run.warnings


def test_broken_profiler_info_falls_back_to_rank_zero_with_a_warning(tmp_path):
    rank_dir = tmp_path / "rank_ascend_pt"
    shutil.copytree(FIXTURE_RUNS["new_level1"] / "rank1_ascend_pt", rank_dir)
    (rank_dir / "profiler_info_1.json").rename(rank_dir / "profiler_info.json")
    (rank_dir / "profiler_info.json").write_text('{"rank_id": ')
    run = perfkit.load(rank_dir)
    assert run.ranks == [0]
    assert any("profiler_info.json" in w and "JSON" in w for w in run.warnings)


def test_a_ranks_profiler_info_is_decoded_once_for_both_readers(tmp_path, monkeypatch):
    """The ascend_ms and the communication reader both take the rank from profiler_info: the file is decoded once
    while it is unchanged, again once rewritten, and each reader gets the same rank, meta and warnings as a
    decode of its own would give."""
    import os

    from perfkit.io.formats import communication, files
    folder = tmp_path / "rank0_ascend_pt"
    shutil.copytree(LEVEL1_RANK0, folder)
    info = next(folder.glob("profiler_info*.json"))
    decoded = []
    real = files.read_json_object
    monkeypatch.setattr(files, "read_json_object",
                        lambda path, warnings: decoded.append(os.path.basename(path)) or real(path, warnings))
    monkeypatch.setattr(ascend_ms, "_INFO_DECODED", {})
    ascend_ms.read_steps(folder)
    communication.read(folder)
    assert decoded.count(info.name) == 1
    data = json.loads(info.read_text())
    data["rank_id"] = "not a rank"
    info.write_text(json.dumps(data))
    os.utime(info, ns=(info.stat().st_atime_ns, info.stat().st_mtime_ns + 1_000_000_000))
    first, second = ascend_ms.read_steps(folder), communication.read(folder)
    assert decoded.count(info.name) == 2
    monkeypatch.setattr(ascend_ms, "_INFO_DECODED", {})
    assert [list(result) for result in (first, second)] == [list(ascend_ms.read_steps(folder)),
                                                            list(communication.read(folder))]
    assert first[0].warnings == ascend_ms.read_steps(folder)[0].warnings

"""The legacy (MindSpore <= 2.2 Ascend, flat folder) reader, checked against the raw fixture files."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
from broken import load_broken
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError
from perfkit.io.formats import legacy

LEGACY_RUNS = ["legacy_run_2", "legacy_run_3", "legacy_run_4", "legacy_misc", "legacy_ut"]
TICKS_PER_MS = 1e5

# MindSpore's optimizer update kernels seen in the legacy fixtures' op names (mindspore.ops)
OPTIMIZER_UPDATES = {"ApplyMomentum", "SGD", "Adam", "ApplyAdam", "AdamWeightDecay", "Lamb", "ApplyRMSProp"}


pytestmark = pytest.mark.usefixtures("uncached")


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return list(csv.DictReader(handle))


def step_rows(path: Path) -> list[dict[str, str]]:
    """Step rows without the trailing average row."""
    rows = csv_rows(path)
    assert rows[-1]["step_num"] in ("-", "0")
    return rows[:-1]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize("name", LEGACY_RUNS)
def test_steps_match_raw_step_trace(name):
    folder = FIXTURE_RUNS[name]
    run = perfkit.load(folder)
    assert run.meta.layout == "legacy" and run.meta.device == "Ascend"
    for path in sorted(folder.glob("step_trace_raw_*_detail_time.csv")):
        rank = int(path.name.split("_")[3])
        expected = step_rows(path)
        steps = run.steps[run.steps["rank"] == rank].sort_values("step")
        assert list(steps["step"]) == [int(r["step_num"]) for r in expected]
        for (_, got), raw in zip(steps.iterrows(), expected):
            assert close(got["fwd_bwd_ms"], int(raw["fp_and_bp"]) / TICKS_PER_MS)
            assert close(got["interval_ms"], int(raw["iteration_interval"]) / TICKS_PER_MS)
            assert close(got["tail_ms"], int(raw["tail"]) / TICKS_PER_MS)
            assert close(got["total_ms"], int(raw["total"]) / TICKS_PER_MS)


def test_run_2_single_step_and_average_row_dropped():
    run = perfkit.load(FIXTURE_RUNS["legacy_run_2"])
    assert len(run.steps) == 1
    step = run.steps.iloc[0]
    assert close(step["fwd_bwd_ms"], 2366808 / 1e5)
    assert step["interval_ms"] == 0
    assert close(step["tail_ms"], 4097 / 1e5)
    # the average row carries an interval of 1243211 ticks: it must not show up anywhere
    assert not (run.steps["interval_ms"] == 1243211 / 1e5).any()


def union_ms(row: dict[str, str]) -> float:
    """Time inside the step covered by at least one communication interval: the intervals clipped to
    [start_point, end_point], sorted, merged where they overlap, the merged lengths summed."""
    spans = sorted((max(int(row[c]), int(row["start_point"])),
                    min(int(row[c.replace("_start_point", "_end_point")]), int(row["end_point"])))
                   for c in row if c.startswith("stream_") and c.endswith("_start_point"))
    merged: list[list[int]] = []
    for start, end in spans:
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return sum(end - start for start, end in merged) / TICKS_PER_MS


COMM_COLUMNS = ("comm_ms", "comm_exposed_ms", "comm_receive_ms", "comm_collective_ms")


@pytest.mark.parametrize("name", ["legacy_run_3", "legacy_run_4", "legacy_misc"])
def test_communication_never_above_the_step(name):
    """Every communication time of every step is at most the step, and comm_ms is the union of the raw
    intervals (run_3 / run_4 have none in their step trace; their cluster files' 1293 ms of communication
    alone in a 23.7 ms step is refused with a warning)."""
    folder = FIXTURE_RUNS[name]
    run = perfkit.load(folder)
    steps = run.steps
    for column in COMM_COLUMNS:
        known = steps[steps[column].notna()]
        assert (known[column] <= known["total_ms"]).all(), column
    for path in folder.glob("step_trace_raw_*_detail_time.csv"):
        rank = legacy.rank_of(path.name)
        rows = step_rows(path)
        got = steps[steps["rank"] == rank].sort_values("step")
        if any(c.startswith("stream_") for c in rows[0]):
            assert [round(v, 6) for v in got["comm_ms"]] == [round(union_ms(r), 6) for r in rows]
        else:
            assert got["comm_ms"].isna().all()
    if name != "legacy_misc":
        assert steps["comm_exposed_ms"].isna().all()
        assert any("communication_alone_time 1293.1 ms" in w for w in run.warnings)


def test_misc_ranks_and_comm_from_stream_columns():
    folder = FIXTURE_RUNS["legacy_misc"]
    run = perfkit.load(folder)
    assert run.ranks == [0, 1, 10]
    overlapping = 0
    for rank in (0, 10):
        rows = step_rows(folder / f"step_trace_raw_{rank}_detail_time.csv")
        starts = [c for c in rows[0] if c.startswith("stream_") and c.endswith("_start_point")]
        assert starts
        expected = [union_ms(r) for r in rows]
        summed = [sum(int(r[c.replace("_start_point", "_end_point")]) - int(r[c]) for c in starts) / TICKS_PER_MS
                  for r in rows]
        got = run.steps[run.steps["rank"] == rank].sort_values("step")
        assert len(got) == len(expected)
        assert all(close(g, e) for g, e in zip(got["comm_ms"], expected))
        assert (got["comm_ms"] <= got["total_ms"]).all()
        overlapping += sum(e < s - 1e-9 for e, s in zip(expected, summed))
    # streams 10 and 11 overlap in these steps: the union is less than the durations added up
    assert overlapping > 0
    # step 40 of rank 10 has all-zero communication columns
    assert run.steps[(run.steps["rank"] == 10) & (run.steps["step"] == 40)]["comm_ms"].item() == 0


def test_ut_allreduce_comm():
    folder = FIXTURE_RUNS["legacy_ut"]
    rows = step_rows(folder / "step_trace_raw_6_detail_time.csv")
    run = perfkit.load(folder)
    got = run.steps[run.steps["rank"] == 6].sort_values("step")["comm_ms"].tolist()
    column = "stream_24_0_AllReduce-op3143"
    assert got == [(int(r[column + "_end_point"]) - int(r[column + "_start_point"])) / TICKS_PER_MS for r in rows]


@pytest.mark.parametrize("name", ["legacy_misc", "legacy_ut", "legacy_run_2"])
def test_op_type_shares_from_percent_column(name):
    folder = FIXTURE_RUNS[name]
    path = next(folder.glob("aicore_intermediate_*_type.csv"))
    rows = csv_rows(path)
    percents = [float(r["percent"]) for r in rows]
    # these 1.x files write percent 0-100
    assert sum(percents) > 1.5
    run = perfkit.load(folder)
    types = run.op_types.set_index("type")
    type_key = "op_type" if "op_type" in rows[0] else "kernel_type"
    time_key = "execution_time" if "execution_time" in rows[0] else "total_time"
    total_ms = sum(float(row[time_key]) for row in rows)
    for row in rows:
        # the file's percent (of MindSpore's total AI Core time) is file_share; share is of the listed types
        assert close(types.loc[row[type_key], "file_share"], float(row["percent"]) / 100)
        assert close(types.loc[row[type_key], "share"], float(row[time_key]) / total_ms)
        assert close(types.loc[row[type_key], "total_ms"], float(row[time_key]))
        assert types.loc[row[type_key], "count"] == int(row["execution_frequency"])


def test_cast_share_fraction_and_percent_agree(tmp_path):
    rows = csv_rows(FIXTURE_RUNS["legacy_ut"] / "aicore_intermediate_1_type.csv")
    cast = next(r for r in rows if r["op_type"] == "Cast")
    fraction = tmp_path / "aicore_intermediate_0_type.csv"
    # the 2.0-2.2 shape: kernel_type/total_time headers, percent a 0-1 fraction
    fraction.write_text("kernel_type,total_time,execution_frequency,percent\n" + "".join(
        f"{r['op_type']},{r['execution_time']},{r['execution_frequency']},{float(r['percent']) / 100}\n"
        for r in rows))
    types = legacy.read(tmp_path)[0].tables["op_types"].set_index("type")
    assert close(types.loc["Cast", "file_share"], float(cast["percent"]) / 100)


def test_share_computed_when_percent_absent(tmp_path):
    (tmp_path / "aicore_intermediate_0_type.csv").write_text(
        "op_type,execution_time,execution_frequency\nCast,1.0,2\nConv2D,3.0,4\n")
    types = perfkit.load(tmp_path).op_types.set_index("type")
    assert types.loc["Cast", "share"] == 0.25 and types.loc["Conv2D", "share"] == 0.75
    assert types["file_share"].isna().all()


@pytest.mark.parametrize("name", ["legacy_ut", "legacy_run_2"])
def test_1x_detail_without_count(name):
    folder = FIXTURE_RUNS[name]
    path = next(folder.glob("aicore_intermediate_*_detail.csv"))
    rows = csv_rows(path)
    assert "execution_frequency" not in rows[0]
    ops = perfkit.load(folder).ops.set_index("name")
    name_key = next(iter(rows[0]))
    for row in rows:
        op = ops.loc[row[name_key]]
        assert op["count"] == 1
        assert close(op["avg_ms"], float(row["execution_time"])) and close(op["total_ms"], op["avg_ms"])
        assert op["type"] == row[name_key].rsplit("/", 1)[-1].rsplit("-op", 1)[0]
        op_type = row[name_key].rsplit("/", 1)[-1].rsplit("-op", 1)[0]
        expected_pass = ("backward" if row[name_key].startswith("Gradients/") else
                         "optimizer" if "optimizer" in row[name_key] or op_type in OPTIMIZER_UPDATES else
                         "other" if not row[name_key].startswith("Default/") else "forward")
        assert op["pass"] == expected_pass


def test_detail_with_count_and_framework_dtypes():
    folder = FIXTURE_RUNS["legacy_misc"]
    rows = csv_rows(folder / "aicore_intermediate_1_detail.csv")
    framework = {r["full_kernel_name"]: json.loads(r["op_info"]) for r in csv_rows(folder / "framework_raw_1.csv")}
    run = perfkit.load(folder)
    ops = run.ops[run.ops["rank"] == 1].set_index("name")
    for row in rows:
        op = ops.loc[row["full_kernel_time"]]
        assert close(op["total_ms"], float(row["execution_time"]) * int(row["execution_frequency"]))
        info = framework.get(row["full_kernel_time"])
        if info:
            inputs = sorted((k for k in info if k.startswith("input_")), key=lambda k: int(k[6:]))
            assert op["input_dtypes"] == ";".join(info[k]["data_type"].replace("NUMBER_TYPE_", "").lower()
                                                  for k in inputs)
            assert op["input_shapes"] == ";".join(info[k]["shape"] for k in inputs)
    conv = ops.loc["Default/network-WithLossCell/_backbone-LeNet5/conv1-Conv2d/Conv2D-op13"]
    assert conv["input_dtypes"].split(";")[0] == "float16"


def framework_line(task: int, name: str, op_type: str, dtype: str) -> str:
    info = json.dumps({"input_0": {"format": "NC1HWC0", "data_type": f"NUMBER_TYPE_{dtype}", "shape": "8,3,32,32"}})
    return f'{task},0,1,{name},{name.rsplit("/", 1)[-1]},{op_type},Default,"{info.replace(chr(34), chr(34) * 2)}"\n'


@pytest.mark.parametrize("conv, bn, expected", [
    ("FLOAT32", "FLOAT32", ("float32", "O0")),
    ("FLOAT16", "FLOAT32", ("mixed", "O2")),
    ("FLOAT16", "FLOAT16", ("float16", "O3")),
])
def test_amp_level_inferred_from_framework_dtypes(tmp_path, conv, bn, expected):
    (tmp_path / "framework_raw_0.csv").write_text(
        "task_id,stream_id,block_dim,full_op_name,op_name,op_type,subgraph,op_info\n"
        + framework_line(1, "Default/net/conv1-Conv2d/Conv2D-op1", "Conv2D", conv)
        + framework_line(2, "Default/net/bn1-BatchNorm2d/BNTrainingUpdate-op2", "BNTrainingUpdate", bn))
    meta = legacy.read(tmp_path)[0].meta
    assert (meta["compute_dtype"], meta["amp_level"]) == expected


def test_messy_text_parses(tmp_path):
    """BOM, CRLF, `N/A`, tab-suffixed numbers and trailing empty lines."""
    (tmp_path / "aicore_intermediate_0_type.csv").write_bytes(
        b"\xef\xbb\xbfop_type,execution_time,execution_frequency,percent\r\n"
        b"Cast,1.5\t,3,25.0\r\nConv2D,4.5\t,N/A,75.0\r\n\r\n\r\n")
    types = legacy.read(tmp_path)[0].tables["op_types"].set_index("type")
    assert types.loc["Cast", "total_ms"] == 1.5 and types.loc["Conv2D", "total_ms"] == 4.5
    assert types.loc["Cast", "file_share"] == 0.25 and math.isnan(types.loc["Conv2D", "count"])


def test_inference_step_trace(tmp_path):
    (tmp_path / "step_trace_raw_0_detail_time.csv").write_text(
        "step_num,start_point,end_point,total,fp_point,iteration_interval,fp\n"
        "1,100,500,400,150,50,350\n2,500,1000,500,520,20,480\n-,300,750,450,335,35,415\n")
    steps = legacy.read(tmp_path)[0].tables["steps"]
    assert steps["step"].tolist() == [1, 2]
    assert steps["fwd_bwd_ms"].tolist() == [350 / 1e5, 480 / 1e5]
    assert steps["tail_ms"].isna().all()


def test_profiler_info_meta(tmp_path):
    shutil.copy(FIXTURE_RUNS["legacy_run_2"] / "step_trace_raw_1_detail_time.csv", tmp_path)
    (tmp_path / "profiler_info_1.json").write_text(json.dumps({"ms_version": "2.2.10", "context_mode": 0,
                                                               "rank_id": 1}))
    run = perfkit.load(tmp_path)
    assert run.meta.ms_version == "2.2.10" and run.meta.mode == "graph" and run.ranks == [1]


def test_data_mode_from_minddata_file_names():
    assert perfkit.load(FIXTURE_RUNS["legacy_run_2"]).meta.data_mode == "sink"  # device_queue + minddata_aicpu


@pytest.mark.parametrize("content, problem", [
    (b"", "empty"),
    (b"op_type,execution_time,execution_frequency,percent\r\n", "no rows"),
    (b"kind,time\r\nCast,1\r\n", "lacks column"),
])
def test_broken_type_file_is_skipped_with_one_warning(tmp_path, content, problem):
    folder = tmp_path / "run"
    run, named = load_broken(FIXTURE_RUNS["legacy_run_2"], folder, "aicore_intermediate_1_type.csv", content)
    assert len(named) == 1 and problem in named[0]
    assert not len(run.op_types)
    assert len(run.ops) == len(csv_rows(folder / "aicore_intermediate_1_detail.csv"))
    assert len(run.steps) == 1


def test_truncated_row_is_skipped_with_warning(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE_RUNS["legacy_run_2"], folder)
    path = folder / "aicore_intermediate_1_type.csv"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines) + b"Cast,0.5\r\n")  # cut off mid-row
    run = perfkit.load(folder)
    assert len(run.op_types) == len(lines) - 1
    assert any("aicore_intermediate_1_type.csv" in w and "skipped 1 row" in w for w in run.warnings)


def test_truncated_step_row_is_skipped_with_warning(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    source = FIXTURE_RUNS["legacy_ut"] / "step_trace_raw_6_detail_time.csv"
    lines = source.read_bytes().splitlines(keepends=True)
    # header, step 1, step 2 cut after its fifth cell, then the average row
    (folder / source.name).write_bytes(lines[0] + lines[1] + b",".join(lines[2].split(b",")[:5]) + b"\r\n" + lines[3])
    run = perfkit.load(folder)
    assert run.steps["step"].tolist() == [1]
    assert any(source.name in w and "skipped 1 step row" in w for w in run.warnings)


def test_folder_with_only_a_broken_file_names_it(tmp_path):
    (tmp_path / "aicore_intermediate_0_type.csv").write_text("")
    with pytest.raises(PerfkitError, match="aicore_intermediate_0_type.csv"):
        perfkit.load(tmp_path)


@pytest.mark.parametrize("name", LEGACY_RUNS)
def test_summary_cli(name):
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(FIXTURE_RUNS[name])])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)


def test_malformed_row_with_non_utf8_bytes_is_one_warning_and_no_stderr_noise(tmp_path, capfd):
    """pyarrow decodes a malformed row before our handler sees it; its UnicodeDecodeError used to be
    printed as "Exception ignored ... Traceback" on stderr."""
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE_RUNS["legacy_run_2"], folder)
    path = folder / "aicore_intermediate_1_detail.csv"
    path.write_bytes(path.read_bytes() + b"Default/Cast-op\x88\x99,0.5,1,extra\r\n")
    run = perfkit.load(folder)
    named = [w for w in run.warnings if path.name in w]
    assert len(named) == 1 and "not UTF-8" in named[0]
    assert len(run.op_types) and len(run.steps)  # the rest of the run still loads
    captured = capfd.readouterr()
    assert "Exception ignored" not in captured.err and "Traceback" not in captured.err

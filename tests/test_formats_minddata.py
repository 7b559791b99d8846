"""The MindData reader: pipeline, host/device queues and CPU utilisation, checked against the raw files."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
from broken import load_broken
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError
from perfkit.io.formats import minddata

CPU_MD = FIXTURE_RUNS["cpu_2_10"] / "md"
MINDDATA_RUNS = ["minddata_job1", "minddata_job2", "minddata_profiler"]


pytestmark = pytest.mark.usefixtures("uncached")


def queue_records(path: Path) -> list[list[int]]:
    """(capacity, batch, size) of every `1 ...` line."""
    records = []
    for line in path.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "1":
            records.append([int(fields[1]), int(fields[2]), int(fields[3])])
    return records


def expected_pipeline(path: Path) -> dict[int, dict]:
    """The ops MindSpore's parser writes to minddata_pipeline_raw_{r}.csv: from op 0 down, an op without
    output-queue metrics is left out and its children take its place under its parent."""
    ops = {op["op_id"]: op for op in json.loads(path.read_text())["op_info"]}

    def measured(op_id: int) -> bool:
        return bool((ops[op_id].get("metrics") or {}).get("output_queue"))

    def kept_children(op_id: int) -> list[int]:
        return [kept for child in (ops[op_id].get("children") or [])
                for kept in ([child] if measured(child) else kept_children(child))]

    expected = {}

    def visit(op_id: int, parent: int | None) -> None:
        op = ops[op_id]
        queue = (op.get("metrics") or {}).get("output_queue") or {}
        sizes = queue.get("size") or []
        expected[op_id] = {
            "usage": sum(sizes) / len(sizes) / queue["length"] if sizes else None,
            "empty": 100 * sum(1 for s in sizes if s == 0) / len(sizes) if sizes else None,
            "workers": op["num_workers"], "parent": parent, "children": kept_children(op_id)}
        for child in kept_children(op_id):
            visit(child, op_id)

    visit(0, None)
    return expected


def check_pipeline(frame, expected):
    assert sorted(frame["op_id"]) == sorted(expected)
    for _, row in frame.iterrows():
        want = expected[row["op_id"]]
        if want["usage"] is None:
            assert math.isnan(row["queue_usage"]) and math.isnan(row["queue_empty_pct"])
        else:
            assert math.isclose(row["queue_usage"], want["usage"])
            assert math.isclose(row["queue_empty_pct"], want["empty"])
        assert row["workers"] == want["workers"]
        assert list(row["children"]) == want["children"]
        if want["parent"] is None:
            assert pd.isna(row["parent_id"])
        else:
            assert row["parent_id"] == want["parent"]


def test_cpu_md_pipeline_from_size_series():
    run = perfkit.load(CPU_MD)
    check_pipeline(run.pipeline, expected_pipeline(CPU_MD / "pipeline_profiling_0.json"))
    batch = run.pipeline[run.pipeline["op_type"] == "BatchOp"].iloc[0]
    assert batch["queue_length"] == 16 and 0 < batch["queue_usage"] < 1


def test_cpu_md_host_queue_and_data_mode():
    run = perfkit.load(CPU_MD)
    records = queue_records(CPU_MD / "dataset_iterator_profiling_0.txt")
    assert run.host_queue[["capacity", "batch", "size"]].values.tolist() == records
    empty = sum(1 for _, _, size in records if size == 0)
    assert (run.host_queue["size"] == 0).sum() == empty
    assert run.meta.data_mode == "feed"


def test_cpu_md_utilisation_with_uneven_series():
    data = json.loads((CPU_MD / "minddata_cpu_utilization_0.json").read_text())
    user = data["device_info"]["user_utilization"]
    process_user = data["process_info"]["user_utilization"]
    assert len(user) != len(data["device_info"]["idle_utilization"])  # the trap this file carries
    cpu = perfkit.load(CPU_MD).cpu_util
    assert len(cpu) == max(len(v) for v in list(data["device_info"].values()) + list(data["process_info"].values()))
    assert cpu["user_pct"].tolist()[:len(user)] == user
    assert cpu["user_pct"].iloc[len(user):].isna().all()
    assert cpu["process_user_pct"].tolist()[:len(process_user)] == process_user


@pytest.mark.parametrize("name", MINDDATA_RUNS)
def test_minddata_raw_pipelines(name):
    folder = FIXTURE_RUNS[name]
    path = next(folder.glob("pipeline_profiling_*.json"))
    run = perfkit.load(folder)
    assert run.meta.device is None  # MindData files alone do not tell the device
    check_pipeline(run.pipeline, expected_pipeline(path))


def test_pipeline_raw_csv():
    folder = FIXTURE_RUNS["legacy_ut"]  # minddata_pipeline_raw_0.csv, no pipeline_profiling json
    with open(folder / "minddata_pipeline_raw_0.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    pipeline = perfkit.load(folder).pipeline.set_index("op_id")
    for row in rows:
        op = pipeline.loc[int(row["op_id"])]
        sizes = json.loads(row["output_queue_size"]) if row["output_queue_size"] else []
        if sizes:
            assert math.isclose(op["queue_usage"], float(row["output_queue_usage_rate"]))
            assert op["queue_empty_pct"] == 100 * sum(1 for s in sizes if s == 0) / len(sizes)
        else:
            assert math.isnan(op["queue_usage"])
        assert list(op["children"]) == (json.loads(row["children_id"]) if row["children_id"] else [])
        assert op["workers"] == int(row["num_workers"])


def test_run_2_queues():
    folder = FIXTURE_RUNS["legacy_run_2"]
    run = perfkit.load(folder)
    # sink mode: the device queue file wins over the iterator file
    assert run.host_queue[["capacity", "batch", "size"]].values.tolist() == \
        queue_records(folder / "device_queue_profiling_1.txt")
    lines = [line.split() for line in (folder / "minddata_aicpu_1.txt").read_text().splitlines()]
    assert run.device_queue["size"].tolist() == [int(f[3]) for f in lines]
    assert run.device_queue["wait_ms"].tolist() == [(int(f[2]) - int(f[1])) / 1e3 for f in lines]
    assert run.device_queue["capacity"].isna().all()
    assert run.meta.data_mode == "sink"


def test_gpu_getnext_in_ns(tmp_path):
    # GetNextProfiling::SaveProfilingData: `Name() start end queue_size`, ns
    (tmp_path / "minddata_getnext_profiling_0.txt").write_text(
        "GetNext 1000000 3500000 0\nGetNext 4000000 4000500 2\n")
    queue = minddata.read(tmp_path)[0]
    assert queue.tables["device_queue"]["wait_ms"].tolist() == [2.5, 0.0005]
    assert queue.tables["device_queue"]["size"].tolist() == [0, 2]
    assert queue.meta["data_mode"] == "sink" and queue.meta["device"] == "GPU"


def test_four_field_queue_lines(tmp_path):
    (tmp_path / "dataset_iterator_profiling_0.txt").write_text("1 64 1 3\r\n1 64 2 0\r\n\r\n")
    host = minddata.read(tmp_path)[0].tables["host_queue"]
    assert host.values.tolist() == [[1, 3, 64], [2, 0, 64]]


@pytest.mark.parametrize("content, problem", [
    (b"", "empty"),
    (b"{\"op_info\": [{\"op_id\": 0", "not valid JSON"),
    (b"{\"sampling_interval\": 10}", "no op_info"),
])
def test_broken_pipeline_json_falls_back_with_one_warning(tmp_path, content, problem):
    folder = tmp_path / "run"
    run, named = load_broken(FIXTURE_RUNS["legacy_run_2"], folder, "pipeline_profiling_1.json", content)
    assert len(named) == 1 and problem in named[0]
    # the CSV in the same folder still gives the pipeline
    assert len(run.pipeline) == len(list(csv.DictReader(open(folder / "minddata_pipeline_raw_1.csv"))))
    assert len(run.steps) == 1


def _set(op_id: int, path: str, value):
    """An edit of the real pipeline_profiling_1.json: op `op_id`'s field at `path` (dotted) set to `value`."""
    def edit(ops: list[dict]) -> None:
        node = next(op for op in ops if op["op_id"] == op_id)
        *parents, last = path.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


@pytest.mark.parametrize("edit, problem", [
    (_set(0, "children", [[1]]), "op 0: children is not a list of op ids"),
    (_set(1, "children", 1), "op 1: children is not a list of op ids"),
    (_set(0, "metrics", [1]), "op 0: metrics is not an object"),
    (_set(1, "metrics.output_queue", "full"), "op 1: metrics.output_queue is not an object"),
    (_set(0, "metrics.output_queue.size", [[0, 2], [3]]), "op 0: metrics.output_queue.size is not a list of numbers"),
    (_set(2, "metrics.output_queue.size", ["x"]), "op 2: metrics.output_queue.size is not a list of numbers"),
    (_set(0, "metrics.output_queue.length", "64"), "op 0: metrics.output_queue.length is not a number >= 0"),
    (_set(3, "op_id", [3]), "has an op_info entry without an integer op_id"),
], ids=["nested-children", "children-number", "metrics-list", "queue-text", "sizes-nested", "sizes-text",
        "length-text", "op-id-list"])
def test_a_pipeline_json_of_the_wrong_shape_falls_back_with_one_warning(edit, problem, tmp_path):
    """Values the bounded decoder takes but no MindSpore writes (mutations of the real file): each was a
    ValueError, TypeError or AttributeError from numpy or a dict lookup."""
    folder = tmp_path / "run"
    data = json.loads((FIXTURE_RUNS["legacy_run_2"] / "pipeline_profiling_1.json").read_text())
    edit(data["op_info"])
    run, named = load_broken(FIXTURE_RUNS["legacy_run_2"], folder, "pipeline_profiling_1.json",
                             json.dumps(data).encode())
    assert len(named) == 1 and problem in named[0], named
    assert len(run.pipeline) == len(list(csv.DictReader(open(folder / "minddata_pipeline_raw_1.csv"))))


@pytest.mark.parametrize("old, new, problem", [
    (b'"[0, 2]"', b'"[0, [2]]"', "op 0: output_queue_size is not a list of numbers"),
    (b'"[0, 2]"', b'"[""x""]"', "op 0: output_queue_size is not a list of numbers"),
    (b",[1]\r\n", b',"[[1]]"\r\n', "op 0: children_id is not a list of op ids"),
])
def test_a_pipeline_csv_cell_of_the_wrong_shape_is_one_warning(old, new, problem, tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE_RUNS["legacy_run_2"], folder)
    (folder / "pipeline_profiling_1.json").unlink()  # the CSV alone gives the pipeline
    target = folder / "minddata_pipeline_raw_1.csv"
    raw = target.read_bytes()
    assert old in raw
    target.write_bytes(raw.replace(old, new, 1))
    run = perfkit.load(folder)
    named = [w for w in run.warnings if target.name in w]
    assert len(named) == 1 and problem in named[0], named


def test_truncated_queue_line_warns(tmp_path):
    (tmp_path / "dataset_iterator_profiling_0.txt").write_text("1 64 1 3 10\n1 64\n")
    parts = minddata.read(tmp_path)[0]
    assert len(parts.tables["host_queue"]) == 1
    assert any("dataset_iterator_profiling_0.txt" in w for w in parts.warnings)


def test_folder_with_only_a_broken_file_names_it(tmp_path):
    (tmp_path / "pipeline_profiling_0.json").write_text("not json")
    with pytest.raises(PerfkitError, match="pipeline_profiling_0.json"):
        perfkit.load(tmp_path)


@pytest.mark.parametrize("folder", [CPU_MD] + [FIXTURE_RUNS[n] for n in MINDDATA_RUNS])
def test_summary_cli(folder):
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(folder)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)


def test_unknown_worker_count_stays_unknown(tmp_path):
    """Crafted: real pipeline files always name num_workers; one written without it must not read as 0 workers."""
    pipeline = {"sampling_interval": 10, "op_info": [
        {"op_id": 0, "op_type": "Batch", "num_workers": 4, "children": [1],
         "metrics": {"output_queue": {"length": 8, "size": [8, 8]}}},
        {"op_id": 1, "op_type": "Map", "children": None,
         "metrics": {"output_queue": {"length": 8, "size": [2, 4]}}}]}
    (tmp_path / "pipeline_profiling_0.json").write_text(json.dumps(pipeline))
    run = perfkit.load(tmp_path)
    assert run.pipeline.set_index("op_id")["workers"].tolist()[0] == 4
    assert run.pipeline.set_index("op_id")["workers"].isna().tolist() == [False, True]
    assert [op["workers"] for op in perfkit.summarize(run)["pipeline"]] == [4, None]

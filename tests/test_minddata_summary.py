"""MindSpore's minddata_pipeline_summary_{r}.json (ASCEND_PROFILER_OUTPUT/ of MindSpore >= 2.3) as the pipeline where
no raw pipeline file is there. No real summary file is public: the one here is crafted from MindSpore's writer
(MindDataPiplineSummaryViewer._analyse_pipeline_info: per-op lists in op-id order, utilisation = 100 * mean
queue size / queue length rounded to 2 places, -1 without a queue or parent) applied to the real
pipeline_profiling_0.json of fixtures/cpu_2_10 (a MindSpore 2.10 run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.views.summary import summarize

RAW = FIXTURE_RUNS["cpu_2_10"] / "md" / "pipeline_profiling_0.json"


pytestmark = pytest.mark.usefixtures("uncached")


def summary_of(raw: dict) -> dict:
    """MindSpore's summary fields of a pipeline_profiling JSON, by its writer's formulas."""
    ops = sorted(raw["op_info"], key=lambda op: op["op_id"])
    parents = {child: op["op_id"] for op in ops for child in op.get("children") or []}
    result = {key: [] for key in ("op_ids", "op_names", "pipeline_ops", "num_workers", "queue_average_size",
                                  "queue_utilization_pct", "queue_empty_freq_pct", "children_ids")}
    for op in ops:
        queue = ((op.get("metrics") or {}).get("output_queue") or {})
        sizes, length = queue.get("size") or [], queue.get("length") or 0
        average = round(sum(sizes) / len(sizes), 2) if sizes else -1
        name = op["op_type"][:-2]
        result["op_ids"].append(op["op_id"])
        result["op_names"].append(name)
        result["pipeline_ops"].append(f"{name}(id={op['op_id']})")
        result["num_workers"].append(op["num_workers"])
        result["queue_average_size"].append(average)
        result["queue_utilization_pct"].append(round(100 * average / length, 2) if sizes and length else -1)
        result["queue_empty_freq_pct"].append(round(100 * sizes.count(0) / len(sizes), 2) if sizes else -1)
        result["children_ids"].append(op.get("children") or [])
    result["parent_id"] = [parents.get(op["op_id"], -1) for op in ops]
    return result


def write_summary(folder: Path, data: dict, rank: int = 0) -> Path:
    output = folder / "ASCEND_PROFILER_OUTPUT"
    output.mkdir(parents=True)
    path = output / f"minddata_pipeline_summary_{rank}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_summary_gives_the_pipeline(tmp_path):
    data = summary_of(json.loads(RAW.read_text()))
    write_summary(tmp_path, data)
    run = perfkit.load(tmp_path)
    pipeline = run.pipeline.set_index("op_id")
    assert list(pipeline.index) == data["op_ids"]
    assert list(pipeline["op_type"]) == data["op_names"] == ["Take", "Batch", "Map", "Map", "Cifar"]
    for op_id, pct, empty in zip(data["op_ids"], data["queue_utilization_pct"], data["queue_empty_freq_pct"]):
        if pct == -1:  # the Take op has no output queue
            assert pd_isna(pipeline.at[op_id, "queue_usage"]) and pd_isna(pipeline.at[op_id, "queue_empty_pct"])
        else:
            assert pipeline.at[op_id, "queue_usage"] == pytest.approx(pct / 100)
            assert pipeline.at[op_id, "queue_empty_pct"] == pytest.approx(empty)
    assert pd_isna(pipeline.at[0, "parent_id"]) and pipeline.at[2, "parent_id"] == 1
    assert summarize(run)["pipeline"][1]["queue_usage"] == pytest.approx(data["queue_utilization_pct"][1] / 100)


def test_the_raw_pipeline_wins_where_both_are_there(tmp_path):
    data = summary_of(json.loads(RAW.read_text()))
    data["queue_utilization_pct"] = [-1, 1.0, 1.0, 1.0, 1.0]  # a summary that disagrees with its raw file
    path = write_summary(tmp_path, data)
    (path.parent / "pipeline_profiling_0.json").write_bytes(RAW.read_bytes())
    pipeline = perfkit.load(tmp_path).pipeline.set_index("op_id")
    assert pipeline.at[1, "queue_usage"] != pytest.approx(0.01)


def test_uneven_lists_are_named_and_the_rest_loads(tmp_path):
    data = summary_of(json.loads(RAW.read_text()))
    data["num_workers"] = data["num_workers"][:3]
    path = write_summary(tmp_path, data)
    (path.parent / "dataset_iterator_profiling_0.txt").write_bytes(
        (FIXTURE_RUNS["cpu_2_10"] / "md" / "dataset_iterator_profiling_0.txt").read_bytes())
    run = perfkit.load(tmp_path)
    assert not len(run.pipeline) and len(run.host_queue)
    said = [w for w in run.warnings if "minddata_pipeline_summary_0.json" in w]
    assert said == ["ASCEND_PROFILER_OUTPUT: skipped minddata_pipeline_summary_0.json: has per-op lists of another length than op_ids: "
                    "num_workers"]


def pd_isna(value) -> bool:
    import pandas as pd
    return bool(pd.isna(value))

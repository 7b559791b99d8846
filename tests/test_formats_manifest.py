"""perfkit_run.json: the facts it records, its step times, and what a broken manifest costs (a warning)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.core.errors import LayoutError
from perfkit.io.formats import RUN_WIDE, manifest

STEPS = [{"step": 1, "begin_ns": 1_795_343_498_000_000_000, "end_ns": 1_795_343_499_880_000_000},
         {"step": 2, "begin_ns": 1_795_343_499_880_000_000, "end_ns": 1_795_343_501_327_000_000}]
GOOD = {"perfkit_version": "0.1.0", "mindspore_version": "2.10.0", "device": "CPU", "rank": 0, "rank_size": 1,
        "status": "ok", "error": None, "config": {"steps": 2, "sink": True},
        "used": {"sink": False, "amp_level": "O2", "mode": "graph"},
        "notes": ["dataset sink mode is not available on CPU: fell back to feed"], "synthetic_data": False,
        "env": {"OMP_NUM_THREADS": "2"}, "steps": STEPS, "started_at": "2026-11-22T10:31:20+00:00",
        "finished_at": "2026-11-22T10:31:45+00:00", "command": "perfkit profile --device CPU --steps 2 --sink"}


pytestmark = pytest.mark.usefixtures("uncached")


def read(tmp_path: Path, content) -> tuple[int, manifest.Parts]:
    path = tmp_path / manifest.MANIFEST
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    assert manifest.detect(tmp_path)
    ((rank, parts),) = manifest.read(tmp_path).items()
    return rank, parts


def test_a_good_manifest_gives_meta_and_step_times(tmp_path):
    rank, parts = read(tmp_path, GOOD)
    assert rank == 0 and parts.warnings == []
    assert parts.meta == {"device": "CPU", "ms_version": "2.10.0", "status": "ok", "synthetic_data": False,
                          "env": {"OMP_NUM_THREADS": "2"}, "config": {"steps": 2, "sink": True},
                          "data_mode": "feed", "amp_level": "O2", "mode": "graph",
                          "step_source": "recorded_step_times"}
    assert parts.tables["step_times"].to_dict("records") == STEPS


def test_rank_null_is_run_wide(tmp_path):
    rank, parts = read(tmp_path, {**GOOD, "rank": None, "rank_size": 8, "steps": []})
    assert rank == RUN_WIDE and "step_times" not in parts.tables


@pytest.mark.parametrize("status, error, expected", [
    ("interrupted", None, "run was interrupted: data up to step 2"),
    ("failed", "RuntimeError: out of memory", "run failed (RuntimeError: out of memory): data up to step 2"),
    ("running", None, "run was still running (or was killed) when read: data up to step 2"),
])
def test_a_run_that_did_not_finish_says_how_far_it_got(tmp_path, status, error, expected):
    _, parts = read(tmp_path, {**GOOD, "status": status, "error": error})
    assert parts.warnings == [expected]
    assert parts.meta["status"] == status


def test_wrong_types_are_ignored_with_warnings_and_the_rest_loads(tmp_path):
    bad = {**GOOD, "device": "TPU", "synthetic_data": "yes", "used": {"sink": 1, "amp_level": "O9", "mode": "graph"},
           "steps": [STEPS[0], {"step": 2, "begin_ns": "soon"}, {"step": 3, "begin_ns": 5, "end_ns": 4}]}
    _, parts = read(tmp_path, bad)
    joined = "\n".join(parts.warnings)
    for field in ("device", "synthetic_data", "used.sink", "used.amp_level", "steps[1]", "steps[2]"):
        assert field in joined
    assert all(w.startswith(manifest.MANIFEST) for w in parts.warnings)
    assert parts.meta["mode"] == "graph" and parts.meta["ms_version"] == "2.10.0"
    assert "device" not in parts.meta and "data_mode" not in parts.meta
    assert parts.tables["step_times"]["step"].tolist() == [1]


@pytest.mark.parametrize("content", [b"", b'{"status": "ok", "steps": [', b"\xff\xfe{}", b"[1, 2]"],
                         ids=["empty", "truncated", "not_utf8", "not_an_object"])
def test_a_broken_manifest_is_a_warning_and_the_run_still_loads(tmp_path, content):
    run_dir = tmp_path / "profiler_v1"
    shutil.copytree(FIXTURE_RUNS["cpu_2_10"], run_dir)
    (run_dir / manifest.MANIFEST).write_bytes(content)
    run = perfkit.load(run_dir)
    assert any(manifest.MANIFEST in w for w in run.warnings), run.warnings
    assert run.meta.device == "CPU" and len(run.steps) == 4 and run.meta.step_source == "op_timestamps"


def test_a_run_stopped_before_the_profiler_wrote_loads_from_its_manifest(tmp_path):
    """A run killed hard (or the surviving rank msrun killed) has only the step times perfkit recorded."""
    source = REPO / "sample_runs" / "cpu_default" / "perfkit_run.json"
    shutil.copy(source, tmp_path / "perfkit_run.json")
    recorded = json.loads(source.read_text())["steps"]
    run = perfkit.load(tmp_path)
    assert run.meta.layout == "manifest" and run.meta.step_source == "recorded_step_times"
    assert run.steps["step"].tolist() == [s["step"] for s in recorded]
    assert run.steps["total_ms"].tolist() == pytest.approx([(s["end_ns"] - s["begin_ns"]) / 1e6 for s in recorded])
    assert run.steps["fwd_bwd_ms"].isna().all()
    assert any("profiler wrote no op data" in w for w in run.warnings)
    summary = perfkit.summarize(run)
    assert summary["steps"]["total_ms"] == pytest.approx(run.steps["total_ms"].mean())
    # issue 25: the manifest says ok, but no op data splits the steps: incomplete, bound unknown (was
    # "compute-bound 100 %")
    assert run.meta.status == "incomplete" and summary["bound"]["kind"] == "unknown"


def test_a_manifest_without_step_times_is_still_no_run(tmp_path):
    manifest = json.loads((REPO / "sample_runs" / "cpu_default" / "perfkit_run.json").read_text())
    manifest["steps"] = []
    (tmp_path / "perfkit_run.json").write_text(json.dumps(manifest))
    # issue 25: was "no MindSpore profiler files found (looked for …, perfkit_run.json); found only files
    # perfkit does not read: perfkit_run.json"
    with pytest.raises(LayoutError, match="its perfkit_run.json records no profiled step"):
        perfkit.load(tmp_path)

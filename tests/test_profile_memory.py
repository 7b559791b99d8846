"""`perfkit profile --profile-memory`: a real (small) CPU training run records the allocator's memory, the run
loads with a memory table and shows it in the summary and on the dashboard's Memory page."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.analysis.measures import memory_peaks
from perfkit.apps.cli import main
from perfkit.views.figures import memory, style


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("profile_memory") / "run"
    result = CliRunner().invoke(main, ["profile", "--profile-memory", "--steps", "1", "--warmup", "1",
                                       "--batch-size", "8", "--image-size", "32", "--output", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.mindspore
def test_memory_is_recorded_loaded_and_shown(memory_run, monkeypatch, tmp_path):
    folder, output = memory_run
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    (record,) = folder.glob("*_ascend_ms/FRAMEWORK/cpu_ms_memory_record_0.txt")
    with open(record, newline="") as handle:
        rows = list(csv.DictReader(handle))
    run = perfkit.load(folder)
    assert len(run.memory) == len(rows) > 0
    peak = memory_peaks(run)[0]["peak_allocated_mb"]
    assert peak > 0 and peak == pytest.approx(max(int(row["Total Allocated(Byte)"]) for row in rows) / 2**20)
    # the manifest records the host memory the CPU allocator draws from, and the step the samples fall in
    recorded = json.loads((folder / "perfkit_run.json").read_text())
    assert recorded["config"]["profile_memory"] is True
    assert run.meta.memory_capacity_mb == recorded["memory_capacity_mb"] > peak
    assert set(run.memory["step"].dropna()) == {1}
    # shown: in what `perfkit profile` printed, in `perfkit summary`, on the Memory page
    assert f"peak allocated {peak:,.1f} MB" in output
    summary = json.loads(CliRunner().invoke(main, ["summary", str(folder), "--format", "json"]).stdout)
    assert summary["memory"]["peak_allocated_mb"] == peak
    assert summary["per_rank"][0]["memory"]["peak_allocated_mb"] == peak
    figure = memory.memory_timeline_figure(run)
    assert style.empty_message(figure) is None
    assert max(max(trace.y) for trace in figure.data if trace.name == "allocated") == pytest.approx(peak)


@pytest.mark.mindspore
def test_without_the_flag_no_memory_is_recorded(tmp_path):
    from perfkit.profiler.launch import ProfileRequest, profile
    outcome = profile(ProfileRequest(steps=1, warmup=1, batch_size=8, image_size=32, output=str(tmp_path / "run")),
                      say=lambda text: None)
    assert not list(outcome.folder.glob("*_ascend_ms/FRAMEWORK/cpu_ms_memory_record_*.txt"))
    run = perfkit.load(outcome.folder)
    assert len(run.memory) == 0 and run.meta.memory_capacity_mb is None

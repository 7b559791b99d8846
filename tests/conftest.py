"""Shared test fixtures: the real profiler folders under tests/fixtures (or where PERFKIT_FIXTURES says)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("PERFKIT_FIXTURES", REPO / "tests" / "fixtures")).resolve()

# Every real run folder under tests/fixtures (see its SOURCES.md), as a user would pass it to perfkit.
FIXTURE_RUNS = {
    "legacy_run_2": FIXTURES / "legacy/mindinsight_run_2",
    "legacy_run_3": FIXTURES / "legacy/mindinsight_run_3",
    "legacy_run_4": FIXTURES / "legacy/mindinsight_run_4",
    "legacy_misc": FIXTURES / "legacy/mindinsight_misc",
    "legacy_ut": FIXTURES / "legacy/mindspore_ut",
    "new_level1": FIXTURES / "new_format/msinsight_level1",
    "new_level1_rank0": FIXTURES / "new_format/msinsight_level1/rank0_ascend_pt",
    "new_level1_rank0_output": FIXTURES / "new_format/msinsight_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT",
    "new_db_level1": FIXTURES / "new_format/msinsight_db_level1",
    "new_db_level1_rank0": FIXTURES / "new_format/msinsight_db_level1/rank0_ascend_pt",
    "new_2023": FIXTURES / "new_format/msinsight_2023",
    "new_2023_rank1": FIXTURES / "new_format/msinsight_2023/test_rank_1",
    "minddata_job1": FIXTURES / "minddata_raw/mindspore_ut/JOB1",
    "minddata_job2": FIXTURES / "minddata_raw/mindspore_ut/JOB2",
    "minddata_profiler": FIXTURES / "minddata_raw/mindspore_ut/profiler",
    "cpu_2_10": FIXTURES / "cpu_2_10/resnet50_64px_avx2",
}


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"fixtures not found at {FIXTURES}; set PERFKIT_FIXTURES")
    return FIXTURES


@pytest.fixture
def uncached(tmp_path, monkeypatch) -> None:
    """No Parquet cache for one test: every load reads the files (`pytestmark = pytest.mark.usefixtures("uncached")`)."""
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private, enabled Parquet cache for one test."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(folder))
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)
    return folder

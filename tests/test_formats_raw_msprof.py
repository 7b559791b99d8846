"""A folder holding CANN's own database (`msprof --type=db` output, msprof_*.db: real file from msinsight's test
data) is named as raw CANN data with the command that analyses it, never "no MindSpore profiler files found"."""

from __future__ import annotations

import shutil

from click.testing import CliRunner
from conftest import REPO

from perfkit.apps.cli import main

MSPROF_DB = REPO / "tests" / "raw" / "msinsight_msprof_db" / "msprof_0.db"


def error_line(path) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["summary", str(path)])
    return result.exit_code, result.stderr.strip()


def test_a_lone_msprof_database_gets_the_raw_data_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(MSPROF_DB, folder)
    code, line = error_line(folder)
    assert code == 2 and len(line.splitlines()) == 1 and "Traceback" not in line
    assert "msprof database (msprof_0.db" in line and f"msprof-analyze cluster -d {folder}" in line
    assert "no MindSpore profiler files found" not in line


def test_the_hint_finds_it_below_a_parent_of_ranks(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    rank = tmp_path / "cluster" / "node0"
    rank.mkdir(parents=True)
    shutil.copy(MSPROF_DB, rank / "msprof_20250101.db")
    code, line = error_line(tmp_path / "cluster")
    assert code == 2 and "node0/msprof_20250101.db" in line and f"msprof-analyze cluster -d {rank}" in line


def test_a_folder_without_one_keeps_the_generic_message(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "msprof_notes.txt").write_text("x")
    code, line = error_line(tmp_path)
    assert code == 2 and "no MindSpore profiler files found" in line

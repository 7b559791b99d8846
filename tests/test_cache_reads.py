"""A kept `summary` / `advise` answer is keyed by what it read (perfkit/io/cache.py: answers keyed by what they read):
the folders the walks listed and the files the load read (a large run's cluster-level files of every rank, its
representative ranks' folders whole), each checked by a stat, never the whole tree walked. A changed file the answer
read, or a name added to a folder it listed, is a new answer; a file it did not read is not, and the kept answer is
the one a fresh read gives. Each reader's cluster-level read opens only the files its `cluster_files` name."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from test_representative_ranks import OUTPUT, built, expected_representatives, factor

from perfkit.apps.cli import main
from perfkit.io import cache, loader
from perfkit.io.formats import ascend_ms, communication


@pytest.fixture
def run_folder(tmp_path) -> Path:
    return built(tmp_path / "run", factor)


def summary(run: Path) -> str:
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(run)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def fresh(run: Path, monkeypatch) -> str:
    with monkeypatch.context() as patch:
        patch.setenv("PERFKIT_NO_CACHE", "1")
        return summary(run)


def rewrite(path: Path, text: str) -> None:
    """`text` into `path`, its mtime moved on by a second (a file system's clock may be coarse)."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))


class Loads:
    """Counts the loads that read the files (not the kept answer)."""

    def __init__(self, monkeypatch):
        self.count = 0
        real = loader.load

        def counted(*args, **kwargs):
            self.count += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(loader, "load", counted)


def test_a_kept_answer_lists_what_it_read_and_is_given_without_a_walk(run_folder, cache_dir, monkeypatch):
    loads = Loads(monkeypatch)
    first = summary(run_folder)
    (kept,) = (cache_dir / "answers").glob("*/*.read")
    header, output = kept.read_text().split("\n", 1)
    manifest = json.loads(header)
    assert output == first.rstrip("\n") and Path(manifest["base"]) == run_folder.resolve()
    shown = expected_representatives(run_folder)
    for rank in range(40):
        folder = f"rank{rank}_ascend_pt"
        files = {path[len(folder) + 1:] for path in manifest["files"] if path.startswith(folder + "/")}
        every = {path.relative_to(run_folder / folder).as_posix() for path in (run_folder / folder).rglob("*")
                 if path.is_file()}
        cluster_level = {f"profiler_info_{rank}.json", f"{OUTPUT}/step_trace_time.csv", f"{OUTPUT}/communication.json"}
        assert files == (every if rank in shown else cluster_level), rank
        assert folder in manifest["folders"] and f"{folder}/{OUTPUT}" in manifest["folders"]
    monkeypatch.setattr(cache, "_files_under", lambda *args: pytest.fail("walked for a kept answer"))
    assert summary(run_folder) == first and loads.count == 1


@pytest.mark.parametrize("change", ["step_file", "communication", "profiler_info", "shown_kernels", "new_file",
                                    "new_rank", "removed_file"])
def test_a_change_to_what_the_answer_read_asks_again(run_folder, cache_dir, monkeypatch, change):
    loads = Loads(monkeypatch)
    first = summary(run_folder)
    shown = expected_representatives(run_folder)
    other = next(rank for rank in range(40) if rank not in shown)
    folder = run_folder / f"rank{other}_ascend_pt"
    if change == "step_file":  # a rank no view showed turns slow: the answer must say so
        path = folder / OUTPUT / "step_trace_time.csv"
        header, *rows = path.read_text().splitlines()
        rows = [",".join([row.split(",")[0], *(repr(float(cell) * 3) for cell in row.split(",")[1:])])
                for row in rows]
        rewrite(path, "\n".join([header, *rows]) + "\n")
    elif change == "communication":
        path = folder / OUTPUT / "communication.json"
        rewrite(path, path.read_text().replace('"Elapse Time(ms)": ', '"Elapse Time(ms)": 1'))
    elif change == "profiler_info":
        path = folder / f"profiler_info_{other}.json"
        rewrite(path, path.read_text() + " ")
    elif change == "shown_kernels":
        path = run_folder / f"rank{shown[0]}_ascend_pt" / OUTPUT / "kernel_details.csv"
        rewrite(path, "\n".join(path.read_text().splitlines()[:-5]) + "\n")
    elif change == "new_file":
        shutil.copy(FIXTURES / "new_format/msinsight_level1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/"
                    "communication_matrix.json", folder / OUTPUT / "communication_matrix.json")
    elif change == "new_rank":
        shutil.copytree(folder, run_folder / "rank40_ascend_pt")
        (run_folder / "rank40_ascend_pt" / f"profiler_info_{other}.json").rename(
            run_folder / "rank40_ascend_pt" / "profiler_info_40.json")
    elif change == "removed_file":
        (folder / OUTPUT / "communication.json").unlink()
    again = summary(run_folder)
    assert loads.count == 2, change
    assert again == fresh(run_folder, monkeypatch)
    if change in ("step_file", "new_rank", "removed_file"):
        assert again != first


def test_a_file_the_answer_did_not_read_keeps_it(run_folder, cache_dir, monkeypatch):
    loads = Loads(monkeypatch)
    first = summary(run_folder)
    other = next(rank for rank in range(40) if rank not in expected_representatives(run_folder))
    path = run_folder / f"rank{other}_ascend_pt" / OUTPUT / "kernel_details.csv"
    rewrite(path, "\n".join(path.read_text().splitlines()[:-5]) + "\n")
    assert summary(run_folder) == first and loads.count == 1
    assert fresh(run_folder, monkeypatch) == first


def _opened(monkeypatch) -> list[str]:
    opened: list[str] = []
    real = os.open

    def recording(path, *args, **kwargs):
        opened.append(os.fspath(path))
        return real(path, *args, **kwargs)
    monkeypatch.setattr(os, "open", recording)
    return opened


@pytest.mark.parametrize("folder", sorted(str(path) for path in FIXTURES.glob("new_format/*/*")
                                          if (path / "ASCEND_PROFILER_OUTPUT").is_dir()))
@pytest.mark.parametrize("reader", [ascend_ms.READER, communication.READER], ids=lambda reader: reader.name)
def test_a_cluster_level_read_opens_only_its_cluster_files(folder, reader, monkeypatch):
    folder = Path(folder)
    monkeypatch.setattr(ascend_ms, "_INFO_DECODED", {})
    opened = _opened(monkeypatch)
    (reader.read_cluster or reader.read)(folder)
    monkeypatch.undo()
    assert opened
    named = cache._patterns(reader.cluster_files)
    outside = [path for path in opened if not named.fullmatch(os.path.relpath(path, folder))]
    assert not outside, outside

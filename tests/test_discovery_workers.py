"""Discovery of a root with many folders below it (a cluster's rank folders) in forked workers
(discovery._found_in_workers, issue 39) finds what one walk of the tree finds: the same claims in the same order, the
same plugin problems, the same message for a tree deeper than it looks, within a kept answer's folders_seen() the
same folders with the same mtimes, and within files_listed() each claimed folder's files as the cache key takes
them."""

from __future__ import annotations

import shutil

import pytest
from conftest import FIXTURE_RUNS

from perfkit.core.errors import LayoutError
from perfkit.io import cache, discovery, parallel
from perfkit.io.formats import readers
from perfkit.io.formats.base import Reader

RANK = FIXTURE_RUNS["new_level1"] / "rank0_ascend_pt"
MAP_FOLDERS = parallel.map_folders


def discovered(path, given, parallel_from: int, monkeypatch) -> tuple:
    """(discover's answer or its LayoutError's text, the folders it recorded in folders_seen, the files it listed
    for the cache key of each folder claimed, whether it forked)."""
    monkeypatch.setattr(discovery, "PARALLEL_DISCOVERY_FROM", parallel_from)
    forked = []
    monkeypatch.setattr(parallel, "map_folders", lambda *args: forked.append(1) or MAP_FOLDERS(*args))
    with discovery.folders_seen({}) as seen, discovery.files_listed({}, cache.folder_files) as files:
        try:
            found = discovery.discover(path, given)
        except LayoutError as exc:
            found = str(exc)
    if not isinstance(found, str):
        assert set(files) == {str(folder) for _, folder in found[1]}
        assert all(listed == cache.folder_files(folder) for folder, listed in files.items())
    return found, seen, files, bool(forked)


def raising_on(name: str) -> Reader:
    """A plugin's reader whose detect raises on the folders called `name`."""
    def detect(folder):
        if folder.name == name:
            raise ValueError(f"cannot look at {folder.name}")
        return False
    return Reader(name="raising", provides=frozenset({"steps"}), detect=detect, read=lambda folder: {},
                  plugin="raising = raising_plugin:READER")


@pytest.mark.parametrize("fixture", ["new_level1", "new_db_level1", "new_2023", "legacy_run_2", "cpu_2_10",
                                     "minddata_profiler"])
def test_the_workers_find_on_a_real_run_what_one_walk_finds(fixture, monkeypatch):
    given = (*readers(), raising_on("ASCEND_PROFILER_OUTPUT"))
    one_walk = discovered(FIXTURE_RUNS[fixture], given, 10**9, monkeypatch)
    in_workers = discovered(FIXTURE_RUNS[fixture], given, 1, monkeypatch)
    assert not one_walk[3] and in_workers[3] == bool(discovery._folders_below(FIXTURE_RUNS[fixture]))
    assert in_workers[:3] == one_walk[:3]
    assert one_walk[0][1]  # the run's folders claimed


def many_ranks(root, ranks: int):
    """`ranks` rank folders, each the real rank0's profiler_info and step file, rank 7's holding a folder chain deeper
    than discovery looks and rank 9 a FRAMEWORK folder."""
    for rank in range(ranks):
        output = root / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
        output.mkdir(parents=True)
        shutil.copy(RANK / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", output)
        shutil.copy(next(RANK.glob("profiler_info*.json")), output.parent / f"profiler_info_{rank}.json")
    (root / "rank7_ascend_pt" / "a" / "b" / "c" / "d" / "e").mkdir(parents=True)
    (root / "rank9_ascend_pt" / "FRAMEWORK").mkdir()
    return root


def test_the_workers_find_on_a_large_root_what_one_walk_finds(tmp_path, monkeypatch):
    many = discovery.PARALLEL_DISCOVERY_FROM
    root = many_ranks(tmp_path / "run", many + 3)
    given = (*readers(), raising_on("c"))
    one_walk = discovered(root, given, 10**9, monkeypatch)
    in_workers = discovered(root, given, many, monkeypatch)
    assert not one_walk[3] and in_workers[3]
    assert in_workers[:3] == one_walk[:3]
    _, jobs, problems = one_walk[0]
    assert len(jobs) == many + 3
    assert [str(folder.relative_to(root)) for _, folder in jobs[:3]] == ["rank0_ascend_pt", "rank1000_ascend_pt",
                                                                         "rank1001_ascend_pt"]
    assert problems == [("rank7_ascend_pt/a/b/c", "plugin raising = raising_plugin:READER: detect raised "
                                                  "ValueError: cannot look at c")]


def test_the_workers_say_a_tree_is_deeper_than_it_looks_as_one_walk_does(tmp_path, monkeypatch):
    root, many = tmp_path / "run", discovery.PARALLEL_DISCOVERY_FROM
    for rank in range(many):
        (root / f"rank{rank}" / "a" / "b" / "c" / "d" / "e").mkdir(parents=True)
    one_walk = discovered(root, readers(), 10**9, monkeypatch)
    in_workers = discovered(root, readers(), many, monkeypatch)
    assert in_workers[:3] == one_walk[:3] and in_workers[3]
    assert "goes deeper (e.g. rank0/a/b/c/d/e)" in one_walk[0]

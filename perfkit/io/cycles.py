"""The choice among profiler cycles: a folder may hold several runs of one rank (schedule cycles with repeat > 1,
dynamic-profiler windows, two runs side by side); they are never merged nor one picked silently. `chosen_cycle` is
the one choice of every command (perfkit --cycle N, the API's cycle=N), for the loader and the timeline alike.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.errors import LayoutError
from .formats.base import RUN_WIDE

if TYPE_CHECKING:
    from .formats.base import Parts, Reader

# `cycle` of load/load_steps/timeline: which of several profiler runs of one rank to read, 1-based in profiling
# order, or LAST_CYCLE; None: a folder holding several is refused (several_runs).
Cycle = int | str | None
LAST_CYCLE = "last"
# What one reader read of one rank in one folder: (reader, folder, its Parts for the rank).
Entry = tuple["Reader", Path, "Parts"]


def runs_by_rank(by_rank: dict[int, list[Entry]]) -> dict[int, list[Path]]:
    """Per rank, the folders that each hold a whole run of it: its unit folders (or, in a run without unit
    folders, the folders of one supplementary reader). Two for one rank are two runs side by side: schedule
    cycles, dynamic-profiler windows."""
    runs: dict[int, list[Path]] = {}
    for rank, entries in by_rank.items():
        if rank == RUN_WIDE:
            continue
        folders = sorted({folder for reader, folder, _ in entries if reader.unit})
        if not folders:
            # a reader that gives no schema table (perfkit's manifest) only adds facts to the folders beside it
            for name in {reader.name for reader, _, _ in entries if reader.gives_run_tables}:
                same = sorted({folder for reader, folder, _ in entries if reader.name == name})
                if len(same) > len(folders):
                    folders = same
        runs[rank] = folders
    return runs


def chosen_cycle(root: Path, runs: dict[int, list[Path]], cycle: Cycle) -> tuple[set[Path], Cycle]:
    """(the folders of the runs not chosen, which run was read where a rank has several, else None).
    Which run: its number where every rank read the same one, else `cycle` as given ("last" over ranks holding
    different numbers of runs: their numbers differ, and choosing again by any one of them would read another
    run or none). Without a `cycle`, a rank with several runs is refused (several_runs); a cycle a rank does not
    have is one line naming that rank's runs. The one choice of every command (perfkit --cycle N, the API's
    cycle=N).

    A cycle is one launch's profiling window: the Nth run of every rank is one window only where each rank's runs
    come from one process (schedule cycles, dynamic-profiler windows). Where some rank was profiled by several
    processes (two launches side by side), numbering each rank's runs would pair one launch's rank 0 with
    another's rank 1: such a folder is refused, whatever the cycle (separate_launches)."""
    ordered = {rank: sorted(set(folders), key=_profiling_order) for rank, folders in sorted(runs.items())
               if folders}  # a rank only other files speak of (a manifest's) has no run to choose among
    if len(ordered) > 1 and any(len({_process(folder) for folder in folders}) > 1 for folders in ordered.values()):
        raise separate_launches(root, ordered)
    if cycle is None:
        for rank, folders in ordered.items():
            if len(folders) > 1:
                raise several_runs(root, rank, folders)
        return set(), None
    left_out: set[Path] = set()
    numbers = set()
    for rank, folders in ordered.items():
        number = len(folders) if cycle == LAST_CYCLE else cycle
        if not (isinstance(number, int) and 1 <= number <= len(folders)):
            choices = "1" if len(folders) == 1 else f"1-{len(folders)}"
            raise LayoutError(f"has no profiler run {cycle!r} for rank {rank} (--cycle): it holds "
                              f"{_runs_named(root, folders)}; choose {choices} or last", root)
        left_out.update(folders[:number - 1] + folders[number:])
        numbers.add(number)
    if not any(len(folders) > 1 for folders in ordered.values()):
        return left_out, None
    return left_out, numbers.pop() if len(numbers) == 1 else cycle


def of_cycle(by_rank: dict[int, list[Entry]], left_out: set[Path]) -> dict[int, list[Entry]]:
    """by_rank without the entries read from the runs not chosen (their folders and what lies under them)."""
    if not left_out:
        return by_rank
    kept = {rank: [entry for entry in entries if not inside(entry[1], left_out)] for rank, entries in by_rank.items()}
    return {rank: entries for rank, entries in kept.items() if entries}


def inside(folder: Path, folders: set[Path]) -> bool:
    """Whether `folder` is one of `folders` or lies under one."""
    return folder in folders or any(parent in folders for parent in folder.parents)


# MindSpore (and torch_npu) name each profiler folder {host}_{process id}_{start time, yyyymmddHHMMSSmmm}_ascend_ms
# (_ascend_pt): the folders of one process are its cycles or windows; another process is another launch or rank.
_PROFILER_FOLDER = re.compile(r"^(?P<process>.+_\d+)_(?P<started>\d{17})_ascend_(?:ms|pt)$")
# How many runs a message names at each end of a long list (a folder of 3,000 windows is not a 130 KB line).
NAMED_AT_EACH_END = 5


def _profiling_order(folder: Path) -> tuple:
    """A profiler folder's place in time: its name's start time, else its path (never the text order of its
    parent alone: a dynamic-profiler window "rank0_start12_stop13" sorts before "rank0_start3_stop4")."""
    named = _PROFILER_FOLDER.match(folder.name)
    return (0, named.group("started"), str(folder)) if named else (1, "", str(folder))


def _process(folder: Path) -> str:
    """Which process wrote a profiler folder: {host}_{pid} from its name; a folder named otherwise is its own."""
    named = _PROFILER_FOLDER.match(folder.name)
    return named.group("process") if named else str(folder)


def several_runs(root: Path, rank: int, folders) -> LayoutError:
    """The one refusal of every command (summary, advise, ranks, compare, report, dash, trace) for a folder
    holding several profiler runs of one rank (schedule cycles with repeat > 1, dynamic-profiler windows, two
    runs side by side): they are never merged nor one picked silently; the user chooses one by its number
    (--cycle) or passes its own folder, where it has one."""
    ordered = sorted(set(folders), key=_profiling_order)
    own = _own_folders(root, ordered, set(ordered))
    passing = f" or pass its folder (e.g. {own[-1]})" if own else ""
    return LayoutError(f"holds several runs for rank {rank}, in profiling order: {_runs_named(root, ordered)}; "
                       f"choose one with --cycle N (1-{len(ordered)}, or last){passing}", root)


def separate_launches(root: Path, runs: dict[int, list[Path]]) -> LayoutError:
    """The refusal for a folder holding runs of several ranks where some rank was profiled by several processes:
    separate launches side by side. A cycle number cannot choose among them (it would pair one launch's ranks
    with another's), so the user passes one launch's folder."""
    rank, folders = next((rank, folders) for rank, folders in runs.items()
                         if len({_process(folder) for folder in folders}) > 1)
    own = _own_folders(root, folders, {folder for each in runs.values() for folder in each})
    where = (f"pass the folder of one run ({_named(os.path.relpath(folder, root) for folder in own)})" if own
             else "move each run's folders into a folder of its own and pass that")
    return LayoutError(f"holds the runs of separate launches: rank {rank} has runs of "
                       f"{len({_process(folder) for folder in folders})} ({_runs_named(root, folders)}); a --cycle number would pair one launch's ranks with "
                       f"another's, so none is read: {where}", root)


def _own_folders(root: Path, runs: list[Path], every_run: set[Path]) -> list[Path]:
    """Each of `runs`' own folder, the highest under `root` that holds no other of them (a rank folder or a
    perfkit profile output, with the run's manifest and dataset files beside its profiler folder); [] where a
    run's profiler folder has something beside it other than runs (of `every_run`, all ranks'): its manifest,
    its dataset files, which passing the profiler folder alone would leave out."""
    own = []
    for run in runs:
        if run == root:
            return []
        highest = run
        for parent in run.parents:
            if parent == root or root not in parent.parents or any(inside(other, {parent}) for other in runs
                                                                   if other != run):
                break
            highest = parent
        if highest == run and any(Path(entry) not in every_run for entry in _entries(run.parent)):
            return []
        own.append(highest)
    return own


def _entries(folder: Path) -> list[str]:
    try:
        return [os.path.join(folder, name) for name in os.listdir(folder)]
    except OSError:
        return []


def _runs_named(root: Path, ordered: list[Path]) -> str:
    """`1) a, 2) b`: runs in profiling order, by their folder under the run's root (the root by its name); a long
    list by its first and last few."""
    return _named(f"{number}) {os.path.relpath(folder, root) if folder != root else folder.name}"
                  for number, folder in enumerate(ordered, 1))


def _named(items) -> str:
    """Items joined by commas; of a long list, the first and last NAMED_AT_EACH_END and how many between."""
    items = list(items)
    if len(items) <= 2 * NAMED_AT_EACH_END + 1:
        return ", ".join(items)
    return ", ".join([*items[:NAMED_AT_EACH_END], f"... ({len(items) - 2 * NAMED_AT_EACH_END} more)",
                      *items[-NAMED_AT_EACH_END:]])

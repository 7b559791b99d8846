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
    cycle=N)."""
    ordered = {rank: sorted(set(folders), key=_profiling_order) for rank, folders in sorted(runs.items())
               if folders}  # a rank only other files speak of (a manifest's) has no run to choose among
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


# MindSpore names each profiler folder {worker}_{start time, yyyymmddHHMMSSmmm}_ascend_ms.
_FOLDER_STARTED = re.compile(r"_(\d{17})_ascend_ms$")


def _profiling_order(folder: Path) -> tuple:
    """A profiler folder's place in time: its name's start time, else its path (never the text order of its
    parent alone: a dynamic-profiler window "rank0_start12_stop13" sorts before "rank0_start3_stop4")."""
    started = _FOLDER_STARTED.search(folder.name)
    return (0, started.group(1), str(folder)) if started else (1, "", str(folder))


def several_runs(root: Path, rank: int, folders) -> LayoutError:
    """The one refusal of every command (summary, advise, ranks, compare, report, dash, trace) for a folder
    holding several profiler runs of one rank (schedule cycles with repeat > 1, dynamic-profiler windows, two
    runs side by side): they are never merged nor one picked silently; the user chooses one by its number
    (--cycle) or passes its folder."""
    ordered = sorted(set(folders), key=_profiling_order)
    return LayoutError(f"holds several runs for rank {rank}, in profiling order: {_runs_named(root, ordered)}; "
                       f"choose one with --cycle N (1-{len(ordered)}, or last) or pass its folder "
                       f"(e.g. {ordered[-1]})", root)


def _runs_named(root: Path, ordered: list[Path]) -> str:
    """`1) a, 2) b`: runs in profiling order, by their folder under the run's root (the root by its name)."""
    return ", ".join(f"{number}) {os.path.relpath(folder, root) if folder != root else folder.name}"
                     for number, folder in enumerate(ordered, 1))

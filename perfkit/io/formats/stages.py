"""Pipeline stages: which global ranks run each stage, from what a run's files say about its parallel layout."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from .integers import MAX_RANK

# MindInsight's cluster file: ascend_cluster_analyse_{parallel_mode}_{stage_num}_{rank_size}_{rank_id}.csv
# (its ParallelAnalyser reads the name's parts 3-5 this way).
CLUSTER_FILE = re.compile(r"^ascend_cluster_analyse_([a-z]+-parallel)_(\d+)_(\d+)_(\d+)\.csv$")


def stages_from_count(stage_num: Any, rank_size: Any, present: Iterable[int]) -> list[list[int]] | None:
    """The stages of the ranks `present` in MindSpore's placement: rank r runs stage r // (rank_size / stage_num)
    (MindInsight's get_within_stage_communication_rate). Only the ranks present are placed and the stages after
    the last one holding one are left off, so the work is theirs, never rank_size's or stage_num's (a file name
    may say 99,999,999 ranks). None where the numbers do not describe a layout: not integers, fewer ranks than
    stages, more ranks than a rank can number (integers.MAX_RANK)."""
    if type(stage_num) is not int or type(rank_size) is not int or not 1 <= stage_num <= rank_size <= MAX_RANK + 1:
        return None
    per_stage = rank_size / stage_num
    placed: dict[int, list[int]] = {}
    for rank in sorted(set(present)):
        if 0 <= rank < rank_size:
            placed.setdefault(int(rank // per_stage), []).append(rank)
    return [placed.get(stage, []) for stage in range(max(placed) + 1)] if placed else None


def stages_from_cluster_file(folder: Path, present: Iterable[int]) -> list[list[int]] | None:
    """Stages of the ranks `present` from a legacy cluster file's name, when its parallel mode is
    pipeline-parallel (its counts of more digits than a rank can have describe no layout)."""
    for path in sorted(folder.glob("ascend_cluster_analyse_*.csv")):
        match = CLUSTER_FILE.match(path.name)
        if match and match.group(1) == "pipeline-parallel":
            stage_num, rank_size = (int(group) if len(group) <= MAX_DIGITS else None for group in match.group(2, 3))
            return stages_from_count(stage_num, rank_size, present)
    return None


# A count in a name with more digits than this is past MAX_RANK (and int() of 4,300 digits is an error).
MAX_DIGITS = len(str(MAX_RANK + 1))


def stages_from_pp_groups(group_info: Any) -> list[list[int]] | None:
    """Stages from profiler_metadata.json's parallel_group_info: each `pp` group lists one global rank per
    stage, in stage order; a rank's file names only its own groups (load merges the ranks' answers)."""
    if not isinstance(group_info, dict):
        return None
    groups = [entry.get("global_ranks") for entry in group_info.values()
              if isinstance(entry, dict) and entry.get("group_name") == "pp"]
    groups = [g for g in groups if isinstance(g, list) and g and all(type(r) is int for r in g)]
    if not groups:
        return None
    return [sorted({group[stage] for group in groups if stage < len(group)})
            for stage in range(max(len(g) for g in groups))]


def merged_stages(first: list[list[int]], second: list[list[int]]) -> list[list[int]]:
    """Two ranks' views of the stages, as one (each rank's metadata knows its own pp groups)."""
    length = max(len(first), len(second))
    return [sorted(set(first[s] if s < len(first) else []) | set(second[s] if s < len(second) else []))
            for s in range(length)]

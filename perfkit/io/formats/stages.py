"""Pipeline stages: which global ranks run each stage, from what a run's files say about its parallel layout."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# MindInsight's cluster file: ascend_cluster_analyse_{parallel_mode}_{stage_num}_{rank_size}_{rank_id}.csv
# (its ParallelAnalyser reads the name's parts 3-5 this way).
CLUSTER_FILE = re.compile(r"^ascend_cluster_analyse_([a-z]+-parallel)_(\d+)_(\d+)_(\d+)\.csv$")


def stages_from_count(stage_num: Any, rank_size: Any) -> list[list[int]] | None:
    """MindSpore's placement: rank r runs stage r // (rank_size / stage_num) (MindInsight's
    get_within_stage_communication_rate). None where the numbers do not describe a layout."""
    if type(stage_num) is not int or type(rank_size) is not int or stage_num < 1 or rank_size < stage_num:
        return None
    per_stage = rank_size / stage_num
    return [[rank for rank in range(rank_size) if int(rank // per_stage) == stage] for stage in range(stage_num)]


def stages_from_cluster_file(folder: Path) -> list[list[int]] | None:
    """Stages from a legacy cluster file's name, when its parallel mode is pipeline-parallel."""
    for path in sorted(folder.glob("ascend_cluster_analyse_*.csv")):
        match = CLUSTER_FILE.match(path.name)
        if match and match.group(1) == "pipeline-parallel":
            return stages_from_count(int(match.group(2)), int(match.group(3)))
    return None


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

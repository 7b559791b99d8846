"""msprof-analyze's cluster analysis output (`msprof-analyze cluster -d DIR` writes `DIR/cluster_analysis_output/`),
read as a cluster run: every rank's step split, the pipeline stages, the communication ops and links.

Files (msprof-analyze's cluster_analyse; real ones in msinsight's test data, server/src/test/test_data/
cluster_analysis_output):
  cluster_step_trace_time.csv   `Step,Type,Index,Computing,Communication(Not Overlapped),Overlapped,Communication,
                                Free,Stage,Bubble,Communication(Not Overlapped and Exclude Receive)[,Preparing]`, µs:
                                one `rank` row per (step, rank) with the rank in Index (step_trace_time.csv's columns),
                                one `stage` row per (step, stage) with the stage's ranks in Index, `"(0, 1, 2)"`
  cluster_communication.json    {group: {"step{N}": {op@group: {rank: op info}}}}; group `p2p` or the collective
                                group's ranks `"(0, 1, ...)"`; op info as in communication.json (Communication Time
                                Info, ms; Communication Bandwidth Info, MB)
  cluster_communication_matrix.json  {group: {"step{N}": {op@group: {"src-dst": link}}}}, links as in
                                communication_matrix.json; each link is given to its source rank
  communication_group.json      {"collective": [[ranks]], "p2p": [[ranks]]} (not read: the groups are in the above)

Without the step file the communication loads and the steps are unknown, said once; a broken file is skipped
with a warning naming it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..discovery import has_match
from . import ascend_ms, communication
from .base import Parts, Reader
from .files import guarded, json_object, read_csv_table, with_folder_notes
from .integers import RANK, STEP, checked, whole

if TYPE_CHECKING:
    import pandas as pd

LAYOUT = "cluster_analysis"
STEP_FILE = "cluster_step_trace_time.csv"
COMMUNICATION_FILE = "cluster_communication.json"
MATRIX_FILE = "cluster_communication_matrix.json"
FILES = (STEP_FILE, COMMUNICATION_FILE, MATRIX_FILE)
STEP_COLUMNS = {**ascend_ms.STEP_TRACE_COLUMNS, "type": ("Type",), "index": ("Index",)}
STEP_TYPES = {**ascend_ms.STEP_TRACE_TYPES, "type": pa.string(), "index": pa.string()}
P2P_GROUP = "p2p"
RANK_LIST = re.compile(r"\d+")


def detect(folder: Path) -> bool:
    return has_match(folder, FILES)


def read(folder: Path) -> dict[int, Parts]:
    notes = Parts()
    trace = guarded(notes, folder / STEP_FILE, lambda p: read_csv_table(p, STEP_COLUMNS, ("step", "type", "index",
                                                                                          "computing", "free"),
                                                                         STEP_TYPES, notes.warnings))
    steps, stages = _steps(trace.to_pandas(), notes.warnings) if trace is not None else ({}, None)
    if trace is None and not (folder / STEP_FILE).exists():
        notes.warnings.append(f"no {STEP_FILE} in {folder.name}: the ranks' step times are unknown")
    ops = _per_rank(json_object(notes, folder / COMMUNICATION_FILE), False, COMMUNICATION_FILE, notes.warnings)
    links = _per_rank(json_object(notes, folder / MATRIX_FILE), True, MATRIX_FILE, notes.warnings)
    ranks = sorted(set(steps) | set(ops) | set(links))
    result = {}
    for rank in ranks:
        parts = Parts(meta={"device": "Ascend", "layout": LAYOUT, "export": "text", "pipeline_stages": stages},
                      sources=list(notes.sources))
        if rank in steps:
            parts.tables["steps"] = steps[rank]
        if rank in ops:
            parts.tables["comm_ops"] = communication.comm_ops_table(ops[rank], parts.warnings, COMMUNICATION_FILE)
        if rank in links:
            parts.tables["comm_links"] = communication.comm_links_table(links[rank], parts.warnings, MATRIX_FILE)
        result[rank] = parts
    return with_folder_notes(result, notes.warnings)


def _steps(trace: pd.DataFrame, warnings: list[str]) -> tuple[dict[int, pd.DataFrame], list[list[int]] | None]:
    """Per rank, its steps (step_trace_time.csv's split in ms, as the text export reads it); the stages' ranks.
    A row whose Index is no rank or whose Step is no step is left out, said once (formats/integers.py)."""
    import pandas as pd
    kinds = trace["type"].str.strip().str.lower()
    rows = trace[kinds == "rank"]
    ranks, known = checked(rows["index"], RANK, STEP_FILE, "Index", warnings, rows=rows.index + 2)
    _, stepped = checked(rows["step"], STEP, STEP_FILE, "Step", warnings, rows=rows.index + 2)
    keep = known & stepped
    steps = {}
    for rank, frame in rows[keep].groupby(ranks[keep]):
        times = ascend_ms.step_times({column: frame[column].to_numpy(dtype=np.float64, na_value=np.nan)
                                       for column in ascend_ms.STEP_TRACE_COLUMNS if column in frame}, STEP_FILE,
                                      warnings)
        unknown = np.full(len(times["step"]), np.nan)
        steps[int(rank)] = pd.DataFrame({**times, "fwd_bwd_ms": unknown, "tail_ms": unknown})
    stages, refused = set(), []
    for line, index in zip(trace.index[kinds == "stage"] + 2, trace["index"][kinds == "stage"]):
        members = [whole(rank, RANK) for rank in RANK_LIST.findall(str(index))]
        if None in members:
            refused.append(str(line))
        elif members:
            stages.add(tuple(members))
    if refused:
        warnings.append(f"{STEP_FILE}: the Index of stage row(s) {', '.join(refused[:5])} lists a number that is "
                        "not a rank: the stage left out")
    return steps, [list(stage) for stage in sorted(stages)] or None


def _per_rank(data: dict | None, by_source: bool, file_name: str, warnings: list[str]) -> dict[int, dict]:
    """The cluster file regrouped as one communication.json / communication_matrix.json per rank:
    {rank: {"step{N}": {kind: {op: value}}}}; the ops' per-rank entries (by_source False), or each link under
    its source rank (by_source True). An entry under a key that is no rank is left out, counted in a warning."""
    per_rank: dict[int, dict] = {}
    refused = []
    for group, steps in (data or {}).items():
        kind = "p2p" if group == P2P_GROUP else "collective"
        for step, entries in (steps.items() if isinstance(steps, dict) else ()):
            for op, values in (entries.items() if isinstance(entries, dict) else ()):
                for key, value in (values.items() if isinstance(values, dict) else ()):
                    rank = whole(str(key).partition("-")[0] if by_source else str(key), RANK)
                    if rank is None:
                        refused.append(str(key))
                        continue
                    ops = per_rank.setdefault(rank, {}).setdefault(step, {}).setdefault(kind, {})
                    if by_source:
                        ops.setdefault(op, {})[key] = value
                    else:
                        ops[op] = value
    if refused:
        warnings.append(f"{file_name}: {len(refused)} entr{'y' if len(refused) == 1 else 'ies'} under a key that is "
                        f"not a rank (a whole number 0-{RANK.high:,}), such as {refused[0][:40]!r}: left out")
    return per_rank


READER = Reader(name=LAYOUT, provides=frozenset({"steps", "comm_ops", "comm_links"}), detect=detect, read=read,
                looks_for="cluster_analysis_output/ (msprof-analyze)",
                summary_of_ranks="msprof-analyze's summary of the rank folders beside it")

"""`summarize`: the `perfkit summary --format json` contract, every number of the summary from the analyses and
the ledger, as a dict that knows its run (`Summary`); the one summarize (perfkit.summarize is this one)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..analysis.cells import summary_entry as cells_entry
from ..analysis.cluster import of_run
from ..analysis.ledger import OWN_OPS_STEP_SOURCES, bound, ledger, rank_parts
from ..analysis.migration import TORCH, execution_mode, framework_of, framework_version
from ..analysis.representatives import op_coverage
from ..analysis.measures import (
    PER_RANK_TOP_OP_TYPES,
    amp_level_shown,
    communication_by_rank,
    communication_summary,
    json_number,
    memory_peaks,
    memory_summary,
    op_type_items,
    op_type_shares,
    op_type_shares_by_rank,
    per_rank_step_means,
    queue_stats,
    ranks_run_different_ops,
    step_means,
)
from ..core.causes import BOUND_PARTS
from ..core.model import Run
from .panel import summary_entries
from .per_run import once_per_run


class Summary(dict):
    """`summarize(run)`: the `perfkit summary --format json` dict, with the run it describes (`run`), so a
    notebook can show it as the report does (render/notebook.py)."""

    def __init__(self, summary: dict[str, Any], run: Run):
        super().__init__(summary)
        self.run = run


def _ledger_communication(run: Run) -> dict[int, dict[str, Any]]:
    """Per rank, communication per step where no communication file says more: the ledger's, when it is the
    communication ops' time (overlap unknown) or was measured from the step's own op executions (CPU, GPU op
    launches), so what the summary says and what the bound counts agree."""
    parts = rank_parts(run)
    by_ops = (parts["comm_source"] == "ops_overlap_unknown") | (run.meta.step_source in OWN_OPS_STEP_SOURCES)
    measured_by_ops = parts[by_ops & (parts["communication"] + parts["pipeline"] > 0)]
    return {int(row.rank): {"collective_ms": json_number(row.communication), "p2p_ms": json_number(row.pipeline),
                            "wait_ratio": None, "slowest_link": None}
            for row in measured_by_ops.itertuples(index=False)}


def _communication(run: Run) -> dict[int, dict[str, Any]]:
    """Per rank, the communication ops' summary (analysis.communication_by_rank), its time per step the ledger's
    where the ledger measured it from the step's own op executions (the op rows of CPU/GPU launches also time
    the steps the means leave out), else the ledger's alone."""
    by_ops = communication_by_rank(run)
    if run.meta.step_source not in OWN_OPS_STEP_SOURCES:
        return by_ops or _ledger_communication(run)
    by_ledger = _ledger_communication(run)
    return {rank: {**by_ops.get(rank, {}), **by_ledger[rank]} if rank in by_ledger else by_ops[rank]
            for rank in sorted(by_ops.keys() | by_ledger.keys())}


def _pipelines(pipeline: pd.DataFrame) -> dict[int, list[dict[str, Any]]]:
    """Per rank with a MindData pipeline, its ops in op_id order."""
    pipeline = pipeline.sort_values(["rank", "op_id"]) if len(pipeline) else pipeline
    return {int(rank): [{"op_id": int(row.op_id), "op_type": str(row.op_type),
                         "workers": None if pd.isna(row.workers) else int(row.workers),
                         "queue_usage": json_number(row.queue_usage)} for row in ops.itertuples(index=False)]
            for rank, ops in pipeline.groupby("rank", sort=True)} if len(pipeline) else {}


def run_panel(run: Run) -> dict[str, Any]:
    """The contract's entries the run panel shows (views.lines.status_lines), for a view that computes no summary:
    the run, its layout, device, ranks and meta, what the loader and the ledger warned of, and the ranks the
    op-level numbers cover where not every rank's."""
    return {
        "run": run.path,
        "layout": run.meta.layout,
        "device": run.meta.device,
        "ranks": [int(r) for r in run.ranks],
        "meta": {key: value for key, value in run.meta.to_dict().items()
                 if key not in ("ranks", "config", "env", "rank_folders", "op_ranks")}
                | {"amp_level": amp_level_shown(run)}
                # a PyTorch run's version and mode are in its sidecar (config), as compare's settings read them
                | ({"mode": execution_mode(run), "framework_version": framework_version(run)}
                   if framework_of(run) == TORCH else {}),
        "warnings": list(run.warnings) + list(ledger(run).attrs["warnings"]),
        **({"op_ranks": op_coverage(run)} if run.meta.op_ranks is not None else {}),
    }


def summarize(run: Run) -> Summary:
    """The `perfkit summary --format json` contract (docs/summary-json.md) of `run`, which also knows its run.
    Computed once per run: each call gives a new Summary around the same numbers."""
    return Summary(_contract(run), run)


@once_per_run
def _contract(run: Run) -> dict[str, Any]:
    """The contract's dict, holding no reference to the run (once_per_run keeps it as long as the run lives)."""
    per_rank = per_rank_step_means(run.steps)
    peaks, communication = memory_peaks(run), _communication(run)
    parts = rank_parts(run).set_index("rank")
    known_ranks = {entry["rank"] for entry in per_rank}
    pipelines = _pipelines(run.pipeline)
    shown_pipelines = set(pipelines) if len(pipelines) > 1 else set()  # each rank's own only where there are several
    per_rank = sorted(per_rank + [{"rank": rank, "steps": None}
                                  for rank in (set(peaks) | set(communication) | shown_pipelines) - known_ranks],
                      key=lambda entry: entry["rank"])
    parts_ms = {rank: {part: json_number(value) for part, value in zip(BOUND_PARTS, values)}
                for rank, values in zip(parts.index, parts[list(BOUND_PARTS)].itertuples(index=False))}
    for entry in per_rank:
        entry["memory"] = peaks.get(entry["rank"])
        entry["communication"] = communication.get(entry["rank"])
        entry["parts_ms"] = parts_ms.get(entry["rank"])
    shares = op_type_shares(run)
    by_rank = op_type_shares_by_rank(run)
    if ranks_run_different_ops(by_rank):  # added only then, so runs whose ranks agree keep their JSON
        for entry in per_rank:
            mine = by_rank[by_rank["rank"] == entry["rank"]]
            entry["op_types"] = op_type_items(mine.head(PER_RANK_TOP_OP_TYPES))
    if len(pipelines) > 1:  # each rank's own, as its queues differ; added only then, so one-pipeline runs keep their JSON
        for entry in per_rank:
            entry["pipeline"] = pipelines.get(entry["rank"])
    panel_entries, panel_problems = summary_entries(run)  # the JSON form of panels that declare one (plugins')
    panel = run_panel(run)
    return {
        "run": panel["run"],
        "layout": panel["layout"],
        "device": panel["device"],
        "ranks": panel["ranks"],
        "meta": panel["meta"],
        "steps": step_means(run.steps),
        "per_rank": per_rank,
        "slow_ranks": of_run(run).slow if len(run.steps) and run.steps["rank"].nunique() > 1 else [],
        "op_types": op_type_items(shares),
        "queues": {"host": queue_stats(run.host_queue), "device": queue_stats(run.device_queue)},
        "pipeline": pipelines[min(pipelines)] if pipelines else [],
        "pipeline_rank": min(pipelines) if pipelines else None,
        "memory": memory_summary(peaks),
        "communication": communication_summary(communication),
        "warnings": panel["warnings"] + panel_problems,
        "bound": bound(run).to_dict(),
        "cells": cells_entry(run),
        **panel_entries,
        # added only where the op-level tables are not every rank's, so the JSON of other runs stays as it was
        **({"op_ranks": panel["op_ranks"]} if "op_ranks" in panel else {}),
    }


"""Pure functions over a Run: step split, op shares, queue emptiness, the summary contract."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from .cluster import of_steps
from .model import Run

STEP_KEYS = ("interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms")
# Reported only where a layout measures them (step_trace_time.csv's columns).
OPTIONAL_STEP_KEYS = ("computing_ms", "comm_ms", "comm_exposed_ms", "comm_overlapped_ms", "free_ms",
                      "preparing_ms", "bubble_ms")

# Op-type families the seed's AMP story is about (formats.md §3): Ascend BNTraining*/BNInfer, CPU/GPU BatchNorm*.
CAST_FAMILY = re.compile(r"^Cast")
BATCHNORM_FAMILY = re.compile(r"^(BatchNorm.*|BNTraining(Reduce|Update)(Grad)?|BNInfer.*)$")


def _number(value: Any) -> float | None:
    """A JSON-safe float: NaN/inf (unknown) become None."""
    if value is None or pd.isna(value):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def step_means(steps: pd.DataFrame) -> dict[str, Any] | None:
    """Mean per step in ms of interval / fwd_bwd / tail / total (and communication where present)."""
    if not len(steps):
        return None
    result: dict[str, Any] = {"count": int(steps.groupby("rank")["step"].nunique().max()
                                           if "rank" in steps else steps["step"].nunique())}
    complete = steps[steps["total_ms"].notna()]
    if len(complete):
        # A step whose start is unknown (the first one, derived from op timestamps) has parts but no
        # total; averaging its parts with the other steps' totals would make the parts exceed the whole.
        steps = complete
    for key in STEP_KEYS:
        result[key] = _number(steps[key].mean())
    for key in OPTIONAL_STEP_KEYS:
        if key in steps and steps[key].notna().any():
            result[key] = _number(steps[key].mean())
    return result


def per_rank_step_means(steps: pd.DataFrame) -> list[dict[str, Any]]:
    """`step_means` of each rank, in rank order, in one pass over all ranks (a cluster run has hundreds).

    Sums by numpy's bincount, which adds in row order: the same table gives the same digits however
    pandas laid it out in memory (a cached load must print what the cold one did).
    """
    if not len(steps):
        return []
    ranks, rank_of_row = np.unique(steps["rank"].to_numpy(), return_inverse=True)
    counts = steps.groupby("rank", sort=True)["step"].nunique().to_numpy()
    has_total = steps["total_ms"].notna().to_numpy()
    rank_has_total = np.bincount(rank_of_row, weights=has_total, minlength=len(ranks)) > 0
    used = has_total | ~rank_has_total[rank_of_row]  # as step_means: only complete steps where a rank has them
    means: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key: (mean per rank, values per rank)
    for key in STEP_KEYS + tuple(key for key in OPTIONAL_STEP_KEYS if key in steps):
        values = steps[key].to_numpy(dtype=np.float64, na_value=np.nan)
        known = used & ~np.isnan(values)
        known_count = np.bincount(rank_of_row[known], minlength=len(ranks))
        sums = np.bincount(rank_of_row[known], weights=values[known], minlength=len(ranks))
        means[key] = (np.where(known_count > 0, sums / np.maximum(known_count, 1), np.nan), known_count)
    result = []
    for position, rank in enumerate(ranks.tolist()):
        rank_means: dict[str, Any] = {"count": int(counts[position])}
        # optional keys only where the rank measured them, as step_means
        rank_means.update({key: _number(mean[position]) for key, (mean, known_count) in means.items()
                           if key in STEP_KEYS or known_count[position]})
        result.append({"rank": int(rank), "steps": rank_means})
    return result


def op_type_shares(run: Run) -> pd.DataFrame:
    """Op types over all ranks, largest first: type, total_ms, count, share (of summed op time)."""
    if not len(run.op_types):
        return pd.DataFrame(columns=["type", "total_ms", "count", "share"])
    grouped = (run.op_types.groupby("type", observed=True, sort=False)
               .agg(total_ms=("total_ms", "sum"), count=("count", "sum")).reset_index())
    total = grouped["total_ms"].sum()
    grouped["share"] = grouped["total_ms"] / total if total > 0 else float("nan")
    return grouped.sort_values("total_ms", ascending=False, kind="stable").reset_index(drop=True)


def queue_stats(queue: pd.DataFrame) -> dict[str, Any] | None:
    """Samples and the percentage of them where the queue was empty (size 0) or full (size = capacity)."""
    if not len(queue):
        return None
    samples = len(queue)
    empty = int((queue["size"] == 0).sum())
    capacity = pd.to_numeric(queue["capacity"], errors="coerce")
    full = int(((capacity > 0) & (queue["size"] >= capacity)).sum())
    return {"samples": samples, "empty_pct": 100.0 * empty / samples, "full_pct": 100.0 * full / samples}


def _slow_ranks(run: Run) -> list[int]:
    """Ranks `perfkit ranks` names slow (cluster.of_steps: msprof-analyze's 5 % rule on step, interval and
    compute time). In data-parallel lockstep a slow rank's step total matches the others', so the per-rank
    totals alone would not show it."""
    if len(run.steps) == 0 or run.steps["rank"].nunique() < 2:
        return []
    return of_steps(run.path, run.steps).slow


def summarize(run: Run) -> dict[str, Any]:
    """The `perfkit summary --format json` contract (see README)."""
    per_rank = per_rank_step_means(run.steps)
    shares = op_type_shares(run)
    pipeline = run.pipeline.sort_values(["rank", "op_id"]) if len(run.pipeline) else run.pipeline
    first_rank_pipeline = pipeline[pipeline["rank"] == pipeline["rank"].min()] if len(pipeline) else pipeline
    return {
        "run": run.path,
        "layout": run.meta.layout,
        "device": run.meta.device,
        "ranks": [int(r) for r in run.ranks],
        "meta": {key: value for key, value in run.meta.to_dict().items()
                 if key not in ("ranks", "config", "env")},
        "steps": step_means(run.steps),
        "per_rank": per_rank,
        "slow_ranks": _slow_ranks(run),
        "op_types": [{"type": str(row.type), "total_ms": float(row.total_ms), "share": _number(row.share),
                      "count": int(row.count)} for row in shares.itertuples(index=False)],
        "queues": {"host": queue_stats(run.host_queue), "device": queue_stats(run.device_queue)},
        "pipeline": [{"op_id": int(row.op_id), "op_type": str(row.op_type), "workers": None if pd.isna(row.workers) else int(row.workers),
                      "queue_usage": _number(row.queue_usage)}
                     for row in first_rank_pipeline.itertuples(index=False)],
        "warnings": list(run.warnings),
    }

"""Pure functions over a Run: step split, op shares, queue emptiness, the summary contract."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from .cluster import of_steps
from .model import Run
from .steady import FIRST_STEP_REASONS, first_step_verdicts

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


def _mean_of(steps: pd.DataFrame, used: np.ndarray, first: pd.DataFrame) -> dict[str, Any]:
    """Which steps the means cover, and what became of the first profiled step."""
    covered = steps[used]
    reasons = [reason for reason in first["reason"] if reason is not None]
    return {"count": int(covered.groupby("rank")["step"].nunique().max()) if len(covered) else 0,
            "first": int(covered["step"].min()) if len(covered) else None,
            "last": int(covered["step"].max()) if len(covered) else None,
            "first_step": FIRST_STEP_REASONS[reasons[0] if reasons else None]}


def step_means(steps: pd.DataFrame) -> dict[str, Any] | None:
    """Mean per step in ms of interval / fwd_bwd / tail / total (and communication where present), over
    steady.steady_steps; `count` is every profiled step, `mean_of` says which ones the means cover."""
    if not len(steps):
        return None
    if "rank" not in steps:
        steps = steps.assign(rank=0)
    used, first = first_step_verdicts(steps)
    result: dict[str, Any] = {"count": int(steps.groupby("rank")["step"].nunique().max()),
                              "mean_of": _mean_of(steps, used, first),
                              "first_step_ms": _number(first["total_ms"].mean())}
    steps = steps[used]
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
    used, first = first_step_verdicts(steps)
    covered = steps[used].groupby("rank", sort=True)["step"].agg(["nunique", "min", "max"])
    means: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # key: (mean per rank, values per rank)
    for key in STEP_KEYS + tuple(key for key in OPTIONAL_STEP_KEYS if key in steps):
        values = steps[key].to_numpy(dtype=np.float64, na_value=np.nan)
        known = used & ~np.isnan(values)
        known_count = np.bincount(rank_of_row[known], minlength=len(ranks))
        sums = np.bincount(rank_of_row[known], weights=values[known], minlength=len(ranks))
        means[key] = (np.where(known_count > 0, sums / np.maximum(known_count, 1), np.nan), known_count)
    first_total = first.set_index("rank")["total_ms"]
    first_reason = first.set_index("rank")["reason"]
    result = []
    for position, rank in enumerate(ranks.tolist()):
        span = covered.loc[rank] if rank in covered.index else None
        rank_means: dict[str, Any] = {
            "count": int(counts[position]),
            "mean_of": {"count": 0 if span is None else int(span["nunique"]),
                        "first": None if span is None else int(span["min"]),
                        "last": None if span is None else int(span["max"]),
                        "first_step": FIRST_STEP_REASONS[first_reason.get(rank)]},
            "first_step_ms": _number(first_total.get(rank))}
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


def host_cpu_busy(cpu_util: pd.DataFrame) -> dict[str, float | None]:
    """Mean host CPU busy % over the samples, as MindInsight counts it: 100 - idle (io wait is busy too);
    user and sys beside it. None where the samples do not tell."""
    def mean(column: str) -> float | None:
        value = _number(cpu_util[column].mean()) if len(cpu_util) else None
        return None if value is None else round(value, 2)
    idle = mean("idle_pct")
    return {"busy_pct": None if idle is None else round(100.0 - idle, 2),
            "user_pct": mean("user_pct"), "sys_pct": mean("sys_pct")}


# memory_record's framework allocator (formats.md §3), the most inclusive first: `PTA+GE` is torch_npu's and
# GE's together. `APP` is the whole process (reserved only) and `CANN/...` are CANN modules: not the framework's.
FRAMEWORK_COMPONENTS = ("PTA+GE", "MindSpore+GE", "MindSpore", "PTA", "GE")
# Links that leave the device; LOCAL is a copy inside it (hundreds of GB/s) and says nothing about the network.
NETWORK_LINK_TYPES = ("HCCS", "PCIE", "RDMA", "SIO")


def framework_memory(memory: pd.DataFrame) -> pd.DataFrame:
    """Each rank's samples of its framework allocator: the first of FRAMEWORK_COMPONENTS the rank has."""
    if not len(memory):
        return memory
    chosen = []
    for _, samples in memory.groupby("rank", sort=True):
        present = set(samples["component"].dropna())
        component = next((name for name in FRAMEWORK_COMPONENTS if name in present), None)
        if component is not None:
            chosen.append(samples[samples["component"] == component])
    return pd.concat(chosen, ignore_index=True) if chosen else memory.iloc[:0]


def memory_peaks(run: Run) -> dict[int, dict[str, Any]]:
    """Per rank: the framework allocator's peak allocated and reserved MB over the run, and the capacity."""
    result = {}
    for rank, samples in framework_memory(run.memory).groupby("rank", sort=True):
        result[int(rank)] = {"peak_allocated_mb": _number(samples["allocated_mb"].max()),
                             "peak_reserved_mb": _number(samples["reserved_mb"].max()),
                             "capacity_mb": _number(run.meta.memory_capacity_mb)}
    return result


def link_bandwidth(links: pd.DataFrame) -> pd.DataFrame:
    """Network links (not LOCAL) summed over steps and ops: rank, src, dst, link_type, size_mb, transit_ms,
    bandwidth_gb_s (= size / transit time: MB per ms is GB per s)."""
    network = links[links["link_type"].isin(NETWORK_LINK_TYPES)]
    summed = (network.groupby(["rank", "src", "dst", "link_type"], observed=True, sort=True)
              [["size_mb", "transit_ms"]].sum(min_count=1).reset_index())
    summed["bandwidth_gb_s"] = summed["size_mb"] / summed["transit_ms"].where(summed["transit_ms"] > 0)
    return summed


def _comm_steps(ops: pd.DataFrame) -> int:
    """Steps a rank's communication covers (a file without step numbers covers one)."""
    return max(1, int(ops["step"].nunique()))


def communication_by_rank(run: Run) -> dict[int, dict[str, Any]]:
    """Per rank, per step: collective and p2p op time (ms), the share of transfer time spent waiting
    (msprof-analyze's Wait Time Ratio: wait / (wait + transit)) and the slowest network link."""
    result = {}
    bandwidth = link_bandwidth(run.comm_links)
    for rank, ops in run.comm_ops.groupby("rank", sort=True):
        steps = _comm_steps(ops)
        wait, transit = ops["wait_ms"].sum(), ops["transit_ms"].sum()
        links = bandwidth[(bandwidth["rank"] == rank) & bandwidth["bandwidth_gb_s"].notna()]
        result[int(rank)] = {
            "collective_ms": _number(ops.loc[ops["kind"] == "collective", "elapse_ms"].sum() / steps),
            "p2p_ms": _number(ops.loc[ops["kind"] == "p2p", "elapse_ms"].sum() / steps),
            "wait_ratio": _number(wait / (wait + transit)) if wait + transit > 0 else None,
            "slowest_link": _link_dict(links.loc[links["bandwidth_gb_s"].idxmin()]) if len(links) else None,
        }
    return result


def _link_dict(link: pd.Series) -> dict[str, Any]:
    return {"src": int(link["src"]), "dst": int(link["dst"]), "link_type": str(link["link_type"]),
            "size_mb": _number(link["size_mb"]), "transit_ms": _number(link["transit_ms"]),
            "bandwidth_gb_s": _number(link["bandwidth_gb_s"])}


def memory_summary(peaks: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The run's memory: the rank with the largest peak allocated."""
    if not peaks:
        return None
    return max(peaks.values(), key=lambda entry: entry["peak_allocated_mb"] or 0.0)


def communication_summary(by_rank: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The run's communication: the mean over ranks, and the slowest link of any rank."""
    if not by_rank:
        return None
    entries = list(by_rank.values())

    def mean(key: str) -> float | None:
        values = [entry[key] for entry in entries if entry[key] is not None]
        return _number(sum(values) / len(values)) if values else None

    links = [entry["slowest_link"] for entry in entries if entry["slowest_link"]]
    return {"collective_ms": mean("collective_ms"), "p2p_ms": mean("p2p_ms"), "wait_ratio": mean("wait_ratio"),
            "slowest_link": min(links, key=lambda link: link["bandwidth_gb_s"]) if links else None}


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
    peaks, communication = memory_peaks(run), communication_by_rank(run)
    known_ranks = {entry["rank"] for entry in per_rank}
    per_rank += [{"rank": rank, "steps": None} for rank in sorted((set(peaks) | set(communication)) - known_ranks)]
    for entry in per_rank:
        entry["memory"] = peaks.get(entry["rank"])
        entry["communication"] = communication.get(entry["rank"])
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
        "memory": memory_summary(peaks),
        "communication": communication_summary(communication),
        "warnings": list(run.warnings),
    }

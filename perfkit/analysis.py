"""Pure functions over a Run: step split, op shares, queue emptiness, the top-down bound, the summary contract."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
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


# Ranks "run different ops" when one op type's share of a rank's op time is more than this apart between two
# ranks. Data-parallel ranks run one graph, so their shares agree within a few points (the real 2-rank fixtures
# msinsight_level1 and msinsight_db_level1: 0.3 and 0.2 points); ranks that run other ops move a type's share by
# tens of points (msinsight_2023: rank 1 runs no FlashAttentionScore, hcom_broadcast_ 15 % vs 82 %: 68 points),
# and so does a pipeline stage that runs other layers or waits on point-to-point transfers. At a 10-point gap the
# pooled share is off by 5 points or more for at least one of two ranks, enough to misread what a rank should tune.
OP_MIX_GAP = 0.10
# Op types listed per rank (`summary --format json` per_rank[].op_types and the terminal) when ranks differ.
PER_RANK_TOP_OP_TYPES = 5


def _type_shares(op_types: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Op types summed within each `by` group: type, total_ms, count, share (of the group's summed op time)."""
    grouped = (op_types.groupby([*by, "type"], observed=True, sort=False)
               .agg(total_ms=("total_ms", "sum"), count=("count", "sum")).reset_index())
    total = (grouped.groupby(by)["total_ms"].transform("sum") if by
             else pd.Series(grouped["total_ms"].sum(), index=grouped.index))
    grouped["share"] = (grouped["total_ms"] / total).where(total > 0)
    return grouped.sort_values([*by, "total_ms"], ascending=[True] * len(by) + [False],
                               kind="stable").reset_index(drop=True)


def op_type_shares(run: Run) -> pd.DataFrame:
    """Op types over all ranks, largest first: type, total_ms, count, share (of summed op time)."""
    if not len(run.op_types):
        return pd.DataFrame(columns=["type", "total_ms", "count", "share"])
    return _type_shares(run.op_types, [])


def op_type_shares_by_rank(run: Run) -> pd.DataFrame:
    """Op types per rank, each rank's largest first: rank, type, total_ms, count, share (of that rank's op time)."""
    if not len(run.op_types):
        return pd.DataFrame(columns=["rank", "type", "total_ms", "count", "share"])
    return _type_shares(run.op_types, ["rank"])


def op_mix_gap(by_rank: pd.DataFrame) -> float | None:
    """The largest gap (0..1) between two ranks' shares of one op type (op_type_shares_by_rank); None under two
    ranks with op data.

    A type a rank does not run has share 0 there, so a type only some ranks run counts fully.
    """
    if by_rank["rank"].nunique() < 2:
        return None
    shares = by_rank.pivot_table(index="rank", columns="type", values="share", aggfunc="sum",
                                 observed=True, fill_value=0.0)
    return float((shares.max() - shares.min()).max())


def ranks_run_different_ops(by_rank: pd.DataFrame) -> bool:
    """Whether pooling op types over ranks hides what a rank runs (a gap over OP_MIX_GAP)."""
    gap = op_mix_gap(by_rank)
    return gap is not None and gap > OP_MIX_GAP


def _op_type_items(shares: pd.DataFrame) -> list[dict[str, Any]]:
    return [{"type": str(row.type), "total_ms": float(row.total_ms), "share": _number(row.share),
             "count": int(row.count)} for row in shares.itertuples(index=False)]


def queue_stats(queue: pd.DataFrame) -> dict[str, Any] | None:
    """Samples and the percentage of them where the queue was empty (size 0) or full (size = capacity)."""
    if not len(queue):
        return None
    samples = len(queue)
    empty = int((queue["size"] == 0).sum())
    capacity = pd.to_numeric(queue["capacity"], errors="coerce")
    full = int(((capacity > 0) & (queue["size"] >= capacity)).sum())
    return {"samples": samples, "empty_pct": 100.0 * empty / samples, "full_pct": 100.0 * full / samples}


# ---------------------------------------------------------------------------------------------------------
# The top-down breakdown of a step (TensorFlow's overview page and HTA's idle-time breakdown, per MindSpore
# concept): where the mean step goes, and which part bounds it.

# Communication op kinds by name (MindSpore primitives, HCCL/NCCL kernels, `hcom_*` tasks). Point-to-point ops
# are pipeline stages passing activations (formats.md §3, communication.json's "p2p"): fusion cannot help them.
P2P_OP = re.compile(r"^(?:hcom_?)?(?:send|receive|recv|batch_?send_?recv)", re.IGNORECASE)
COLLECTIVE_OP = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast(?!_?to)|all_?to_?all", re.IGNORECASE)
# A queue with fewer samples than this is one or two batches: it tells no pattern (issue 14: one host-queue
# sample gave two contradicting findings). Three is the seed's sink runs' device-queue count.
MIN_QUEUE_SAMPLES = 3
# MindInsight: host queue empty in > 30 % of batches -> data processing is the bottleneck (formats.md §4).
QUEUE_EMPTY_PCT = 30.0
# Layouts whose op tables hold every op the device ran (so step time the ops do not cover is device idle).
# Legacy Ascend's aicore_intermediate files hold AI Core ops only: AI CPU time would read as idle there.
ALL_DEVICE_OPS_LAYOUTS = ("gpu", "cpu", "ascend_ms")
# The parts of a step, in the order they are shown.
BOUND_PARTS = ("compute", "communication", "pipeline", "data", "host", "unknown")
# A step is bound by something other than its compute when that part takes this share of it: TensorFlow's
# input analysis calls >= 20 % of the step "highly input-bound" (formats.md §4); the same bar for every part.
BOUND_MIN_SHARE = 0.20


def comm_kind(op_type: str) -> str | None:
    """"p2p", "collective" or None (not a communication op) for an op type or kernel name."""
    if P2P_OP.search(op_type):
        return "p2p"
    if COLLECTIVE_OP.search(op_type):
        return "collective"
    return None


def comm_op_ms(op_types: pd.DataFrame) -> pd.DataFrame:
    """Per rank: op time of collective and of point-to-point communication ops (0 where none)."""
    if not len(op_types):
        return pd.DataFrame(columns=["collective", "p2p"], dtype="float64")
    kinds = pd.Series([comm_kind(str(t)) for t in op_types["type"]], index=op_types.index)
    frame = op_types.assign(kind=kinds)[kinds.notna()]
    table = frame.pivot_table(index="rank", columns="kind", values="total_ms", aggfunc="sum", fill_value=0.0)
    return table.reindex(columns=["collective", "p2p"], fill_value=0.0)


def data_evidence(run: Run) -> dict[str, Any] | None:
    """The queue the device reads from (device queue, else host queue) when it has enough samples to judge:
    which, its stats, and whether it starves the device (empty in > QUEUE_EMPTY_PCT of samples)."""
    for name, queue in (("device", run.device_queue), ("host", run.host_queue)):
        stats = queue_stats(queue)
        if stats and stats["samples"] >= MIN_QUEUE_SAMPLES:
            return {"queue": name, **stats, "starving": stats["empty_pct"] > QUEUE_EMPTY_PCT}
    return None


@dataclass(frozen=True)
class Bound:
    """What bounds the mean step: its parts in ms (they add up to the step) and the evidence behind them."""

    kind: str                       # compute / communication / pipeline / data / host / unknown
    parts_ms: dict[str, float]      # BOUND_PARTS -> mean ms per step
    evidence: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "parts_ms": dict(self.parts_ms), "evidence": list(self.evidence)}

    def share(self, part: str) -> float:
        total = sum(self.parts_ms.values())
        return self.parts_ms.get(part, 0.0) / total if total > 0 else 0.0


def _value(means: dict[str, Any], key: str) -> float | None:
    value = means.get(key)
    return None if value is None else float(value)


def rank_parts(run: Run) -> pd.DataFrame:
    """Per rank, the mean step split into BOUND_PARTS (ms) plus `total`, and how idle time was judged.

    compute: the step file's Computing where it has one, else forward+backward+tail less exposed
    communication, less the in-step time no op covers where the op tables hold every device op.
    communication / pipeline: exposed collective / point-to-point communication (Bubble and receive ops are
    pipeline waits; the split from communication.json's kinds where the run has it, else from op names); where the step file does not say what overlaps, the communication op time (an upper bound).
    data: the idle time, when the queue the device reads from starves; host: the idle time in PyNative mode,
    the in-step gaps between ops (launch/dispatch), the interval in feed mode with the queues full;
    unknown: idle time nothing in the files explains. `gaps` and `transfer` say which of the host time is
    in-step launch gaps and which the feed-mode batch transfer.
    """
    per_rank = per_rank_step_means(run.steps)
    comm_ops = comm_op_ms(run.op_types)
    op_ms = run.op_types.groupby("rank")["total_ms"].sum() if len(run.op_types) else pd.Series(dtype="float64")
    feed = data_evidence(run)
    pynative = run.meta.mode == "pynative"
    comm_json = communication_by_rank(run)
    rows = []
    for entry in per_rank:
        rank, means = entry["rank"], entry["steps"]
        total = _value(means, "total_ms")
        if not total or total <= 0:
            continue
        count = max(int(means["count"]), 1)
        collective_op = float(comm_ops.loc[rank, "collective"]) / count if rank in comm_ops.index else 0.0
        p2p_op = float(comm_ops.loc[rank, "p2p"]) / count if rank in comm_ops.index else 0.0
        exposed = _value(means, "comm_exposed_ms")
        comm_source = "exposed"
        if exposed is None:
            exposed, comm_source = _value(means, "comm_ms"), "step_trace_overlap_unknown"
        if exposed is None and collective_op + p2p_op > 0:
            exposed, comm_source = collective_op + p2p_op, "ops_overlap_unknown"
        exposed = min(exposed or 0.0, total)
        bubble = _value(means, "bubble_ms") or 0.0
        p2p_share = p2p_op / (collective_op + p2p_op) if collective_op + p2p_op > 0 else 0.0
        by_kind = comm_json.get(rank)  # communication.json says which ops are p2p: better than their names
        if by_kind and (by_kind["collective_ms"] or 0.0) + (by_kind["p2p_ms"] or 0.0) > 0:
            p2p_share = (by_kind["p2p_ms"] or 0.0) / ((by_kind["collective_ms"] or 0.0) + (by_kind["p2p_ms"] or 0.0))
        pipeline = min(exposed, max(bubble, exposed * p2p_share))
        collective = exposed - pipeline
        interval = _value(means, "interval_ms") or 0.0
        computing = _value(means, "computing_ms")
        gaps = 0.0
        if computing is not None:
            compute = min(computing, total - exposed)
        else:
            fwd_bwd = _value(means, "fwd_bwd_ms")
            # steps marked by op launches alone know their total, not its split
            after_interval = total - interval if fwd_bwd is None else fwd_bwd + (_value(means, "tail_ms") or 0.0)
            compute = max(min(after_interval, total - interval) - exposed, 0.0)
            busy = float(op_ms.get(rank, 0.0)) / count - collective_op - p2p_op
            if run.meta.layout in ALL_DEVICE_OPS_LAYOUTS and rank in op_ms.index and 0 < busy < compute:
                gaps, compute = compute - busy, busy
        idle = max(total - compute - exposed, 0.0)
        data = host = transfer = 0.0
        if pynative:
            host = idle
        else:
            before = min(interval, idle)
            host = min(gaps, idle - before)
            if feed is not None and feed["starving"]:
                data = before
            elif feed is not None and run.meta.data_mode == "feed":
                transfer = before  # the batch is ready on the host: the interval is the per-step transfer
                host += transfer
        rows.append({"rank": rank, "total": total, "compute": compute, "communication": collective,
                     "pipeline": pipeline, "data": data, "host": host,
                     "unknown": max(idle - data - host, 0.0), "comm_source": comm_source, "gaps": gaps,
                     "transfer": transfer})
    return pd.DataFrame(rows, columns=["rank", "total", *BOUND_PARTS, "comm_source", "gaps", "transfer"])


def bound(run: Run) -> Bound:
    """The top-down breakdown of the mean step over ranks, and the part that bounds it."""
    parts = rank_parts(run)
    if not len(parts):
        return Bound("unknown", {}, ["no step times: the step cannot be split"])
    parts_ms = {part: round(float(parts[part].mean()), 3) for part in BOUND_PARTS}
    total = float(parts["total"].mean())
    waiting = max(BOUND_PARTS[1:], key=lambda part: parts_ms[part])
    kind = waiting if parts_ms[waiting] >= BOUND_MIN_SHARE * total else "compute"
    evidence = [f"{part} {parts_ms[part]:,.3f} ms ({100 * parts_ms[part] / total:.1f} % of the "
                f"{total:,.3f} ms step)" for part in BOUND_PARTS if parts_ms[part] > 0]
    sources = set(parts.loc[parts["communication"] + parts["pipeline"] > 0, "comm_source"])
    if "step_trace_overlap_unknown" in sources:
        evidence.append("communication: the step trace's communication op time; overlap with compute unknown")
    if "ops_overlap_unknown" in sources:
        evidence.append("communication: communication op time; overlap with compute unknown")
    if parts_ms["pipeline"] > 0:
        evidence.append("pipeline: point-to-point (send/receive) communication and bubble: stages waiting")
    feed = data_evidence(run)
    if feed is None:
        evidence.append(f"data: no data-queue evidence (fewer than {MIN_QUEUE_SAMPLES} queue samples)")
    else:
        evidence.append(f"data: {feed['queue']} queue empty in {feed['empty_pct']:.1f} % of "
                        f"{feed['samples']} samples ({'starving' if feed['starving'] else 'not starving'})")
    if run.meta.mode == "pynative":
        evidence.append("host: PyNative mode: every op is dispatched from Python")
    if float(parts["gaps"].mean()) > 0:
        evidence.append(f"host: {float(parts['gaps'].mean()):,.3f} ms per step inside the step with no op "
                        "running (launch/dispatch gaps)")
    return Bound(kind, parts_ms, evidence)


def rank_groups(run: Run) -> list[list[int]]:
    """Ranks that should take the same time per step: each pipeline stage where the files name the stages
    (stages compute different layers, so a later stage computing longer is pipeline_stage_imbalance's
    finding, not a slow rank), else all ranks."""
    ranks = sorted(int(r) for r in run.steps["rank"].unique()) if len(run.steps) else []
    stages = [[r for r in stage if r in ranks] for stage in (run.meta.pipeline_stages or [])]
    stages = [stage for stage in stages if stage]
    return stages if len(stages) > 1 else [ranks]


def slow_rank_answers(run: Run) -> list:
    """cluster.of_steps's answer for each group of ranks of `rank_groups` that has two ranks or more."""
    return [of_steps(run.path, run.steps[run.steps["rank"].isin(group)]) for group in rank_groups(run)
            if len(group) > 1]


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
    """Each rank's samples of its framework allocator: the first of FRAMEWORK_COMPONENTS the rank has.
    One pass over all ranks (a cluster run has hundreds: a loop per rank cost a second there)."""
    if not len(memory):
        return memory
    priority = memory["component"].map({name: position for position, name in enumerate(FRAMEWORK_COMPONENTS)})
    priority = pd.to_numeric(priority, errors="coerce")
    chosen = priority.notna() & (priority == priority.groupby(memory["rank"]).transform("min"))
    return memory[chosen].sort_values("rank", kind="stable").reset_index(drop=True)


def memory_peaks(run: Run) -> dict[int, dict[str, Any]]:
    """Per rank: the framework allocator's peak allocated and reserved MB over the run, and the capacity."""
    peaks = framework_memory(run.memory).groupby("rank", sort=True)[["allocated_mb", "reserved_mb"]].max()
    capacity = _number(run.meta.memory_capacity_mb)
    return {int(rank): {"peak_allocated_mb": _number(row.allocated_mb), "peak_reserved_mb": _number(row.reserved_mb),
                        "capacity_mb": capacity} for rank, row in zip(peaks.index, peaks.itertuples(index=False))}


def link_bandwidth(links: pd.DataFrame) -> pd.DataFrame:
    """Network links (not LOCAL) summed over steps and ops: rank, src, dst, link_type, size_mb, transit_ms,
    bandwidth_gb_s (= size / transit time: MB per ms is GB per s)."""
    network = links[links["link_type"].isin(NETWORK_LINK_TYPES)]
    summed = (network.groupby(["rank", "src", "dst", "link_type"], observed=True, sort=True)
              [["size_mb", "transit_ms"]].sum(min_count=1).reset_index())
    summed["bandwidth_gb_s"] = summed["size_mb"] / summed["transit_ms"].where(summed["transit_ms"] > 0)
    return summed


def communication_by_rank(run: Run) -> dict[int, dict[str, Any]]:
    """Per rank, per step: collective and p2p op time (ms), the share of transfer time spent waiting
    (msprof-analyze's Wait Time Ratio: wait / (wait + transit)) and the slowest network link.
    Grouped over all ranks at once (hundreds of ranks: a loop per rank cost a second)."""
    ops = run.comm_ops
    if not len(ops):
        return {}
    grouped = ops.groupby("rank", sort=True)
    # the steps a rank's communication covers; a file without step numbers covers one
    steps = grouped["step"].nunique().clip(lower=1)
    wait, transit = grouped["wait_ms"].sum(), grouped["transit_ms"].sum()
    by_kind = ops.groupby(["rank", "kind"], observed=True)["elapse_ms"].sum().unstack(fill_value=0.0)
    bandwidth = link_bandwidth(run.comm_links)
    measured = bandwidth[bandwidth["bandwidth_gb_s"].notna()]
    slowest = measured.loc[measured.groupby("rank")["bandwidth_gb_s"].idxmin()].set_index("rank")
    result = {}
    for rank in steps.index:
        def per_step(kind: str) -> float | None:
            return _number((by_kind.at[rank, kind] if kind in by_kind else 0.0) / steps[rank])
        moved = wait[rank] + transit[rank]
        result[int(rank)] = {
            "collective_ms": per_step("collective"), "p2p_ms": per_step("p2p"),
            "wait_ratio": _number(wait[rank] / moved) if moved > 0 else None,
            "slowest_link": _link_dict(slowest.loc[rank]) if rank in slowest.index else None,
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
    compute time), within each pipeline stage where the run has several. In data-parallel lockstep a slow
    rank's step total matches the others', so the per-rank totals alone would not show it."""
    if len(run.steps) == 0 or run.steps["rank"].nunique() < 2:
        return []
    return sorted({rank for answer in slow_rank_answers(run) for rank in answer.slow})


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
    by_rank = op_type_shares_by_rank(run)
    if ranks_run_different_ops(by_rank):  # added only then, so runs whose ranks agree keep their JSON
        for entry in per_rank:
            mine = by_rank[by_rank["rank"] == entry["rank"]]
            entry["op_types"] = _op_type_items(mine.head(PER_RANK_TOP_OP_TYPES))
    pipeline = run.pipeline.sort_values(["rank", "op_id"]) if len(run.pipeline) else run.pipeline
    first_rank_pipeline = pipeline[pipeline["rank"] == pipeline["rank"].min()] if len(pipeline) else pipeline
    return {
        "run": run.path,
        "layout": run.meta.layout,
        "device": run.meta.device,
        "ranks": [int(r) for r in run.ranks],
        "meta": {key: value for key, value in run.meta.to_dict().items()
                 if key not in ("ranks", "config", "env", "rank_folders")},
        "steps": step_means(run.steps),
        "per_rank": per_rank,
        "slow_ranks": _slow_ranks(run),
        "op_types": _op_type_items(shares),
        "queues": {"host": queue_stats(run.host_queue), "device": queue_stats(run.device_queue)},
        "pipeline": [{"op_id": int(row.op_id), "op_type": str(row.op_type), "workers": None if pd.isna(row.workers) else int(row.workers),
                      "queue_usage": _number(row.queue_usage)}
                     for row in first_rank_pipeline.itertuples(index=False)],
        "memory": memory_summary(peaks),
        "communication": communication_summary(communication),
        "warnings": list(run.warnings),
        "bound": bound(run).to_dict(),
    }

"""Pure functions over a Run: step means, op shares, queue emptiness, communication and memory measures (the
step ledger, perfkit/analysis/ledger.py, builds on them; the summary contract is perfkit/views/summary.py)."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..core.model import Run, kept_on_run
from ..core.opnames import comm_kind
from .migration import TORCH, framework_of
from .steady import FIRST_STEP_REASONS, first_step_verdicts, periodic_reason, periodic_steps, steady_steps

STEP_KEYS = ("interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms")
# Reported only where a layout measures them (step_trace_time.csv's columns).
OPTIONAL_STEP_KEYS = ("computing_ms", "comm_ms", "comm_exposed_ms", "comm_overlapped_ms", "free_ms",
                      "preparing_ms", "bubble_ms")

# Op-type families the seed's AMP story is about (docs/formats.md §3): Ascend BNTraining*/BNInfer, CPU/GPU BatchNorm*.
CAST_FAMILY = re.compile(r"^Cast")
BATCHNORM_FAMILY = re.compile(r"^(BatchNorm.*|BNTraining(Reduce|Update)(Grad)?|BNInfer.*)$")


def mapped(column: pd.Series, values: dict, dtype: str) -> pd.Series:
    """`column.map(values)` as `dtype` (NA where a value is missing or not in `values`), looked up once per
    distinct value: a cluster run's memory samples and ledger rows are millions of rows of a few strings."""
    codes, uniques = pd.factorize(column)
    lookup = pd.array([values.get(value) for value in uniques] + [None], dtype=dtype)
    return pd.Series(lookup[codes], index=column.index, name=column.name)


def json_number(value: Any) -> float | None:
    """A JSON-safe float: NaN/inf (unknown) become None."""
    if isinstance(value, float):  # float and numpy's: no pd.isna (4,096 ranks' summary asks ~100,000 times)
        return float(value) if math.isfinite(value) else None
    if value is None or pd.isna(value):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _mean_of(steps: pd.DataFrame, used: np.ndarray, first: pd.DataFrame) -> dict[str, Any]:
    """Which steps the means cover, what became of the first profiled step, and the periodic steps left out (only
    where there are: `_periodic_keys`)."""
    covered = steps[used]
    reasons = [reason for reason in first["reason"] if isinstance(reason, str)]  # None or NaN: included
    return {"count": int(covered.groupby("rank")["step"].nunique().max()) if len(covered) else 0,
            "first": int(covered["step"].min()) if len(covered) else None,
            "last": int(covered["step"].max()) if len(covered) else None,
            "first_step": FIRST_STEP_REASONS[reasons[0] if reasons else None],
            **_periodic_keys(periodic_steps(steps))}


def _periodic_keys(periodic: pd.DataFrame) -> dict[str, Any]:
    """`mean_of`'s periodic_steps (the steps left out, of the first rank that has them) and why they are left
    out; nothing where no rank has periodic steps."""
    if not len(periodic):
        return {}
    row = periodic.iloc[0]
    return {"periodic_steps": list(row["steps"]),
            "periodic": periodic_reason(int(row["period"]), float(row["mean_ms"]), float(row["median_others_ms"]))}


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
                              "first_step_ms": json_number(first["total_ms"].mean())}
    steps = steps[used]
    for key in STEP_KEYS:
        result[key] = json_number(steps[key].mean())
    for key in OPTIONAL_STEP_KEYS:
        if key in steps and steps[key].notna().any():
            result[key] = json_number(steps[key].mean())
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
    means: dict[str, tuple[list, np.ndarray]] = {}  # key: (mean per rank as JSON has it, values per rank)
    for key in STEP_KEYS + tuple(key for key in OPTIONAL_STEP_KEYS if key in steps):
        values = steps[key].to_numpy(dtype=np.float64, na_value=np.nan)
        known = used & ~np.isnan(values)
        known_count = np.bincount(rank_of_row[known], minlength=len(ranks))
        sums = np.bincount(rank_of_row[known], weights=values[known], minlength=len(ranks))
        mean = np.where(known_count > 0, sums / np.maximum(known_count, 1), np.nan)
        # each rank's mean as Python floats first: a numpy scalar per rank and key cost 0.03 s at 4,096 ranks
        means[key] = (list(map(json_number, mean.tolist())), known_count)
    first_total = first.set_index("rank")["total_ms"].to_dict()
    first_reason = first.set_index("rank")["reason"].to_dict()
    periodic = periodic_steps(steps)
    periodic_of = {rank: _periodic_keys(periodic[periodic["rank"] == rank]) for rank in periodic["rank"].tolist()}
    spans = {rank: span for rank, span in zip(covered.index, covered.to_dict("records"))}  # not .loc per rank
    result = []
    for position, rank in enumerate(ranks.tolist()):
        span = spans.get(rank)
        rank_means: dict[str, Any] = {
            "count": int(counts[position]),
            "mean_of": {"count": 0 if span is None else int(span["nunique"]),
                        "first": None if span is None else int(span["min"]),
                        "last": None if span is None else int(span["max"]),
                        "first_step": FIRST_STEP_REASONS[first_reason.get(rank)],
                        **periodic_of.get(rank, {})},
            "first_step_ms": json_number(first_total.get(rank))}
        # optional keys only where the rank measured them, as step_means
        rank_means.update({key: mean[position] for key, (mean, known_count) in means.items()
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


def steady_op_types(run: Run) -> pd.DataFrame:
    """The op time by type (rank, type, total_ms, count) of the steps the step means cover: where op executions
    are timed (op_type_steps), the steady steps' own (steady.steady_steps: a first step whose start is unknown, or
    that compiles, is in neither the step means nor the shares); elsewhere the op tables' totals over every
    profiled step, the only op time those files give."""
    per_step = run.op_type_steps
    if not len(per_step) or not len(run.steps):
        return run.op_types
    used = steady_steps(run.steps)[["rank", "step"]]
    steady = per_step.merge(used, on=["rank", "step"])
    timed = set(per_step["rank"].unique())
    rest = run.op_types[~run.op_types["rank"].isin(timed)]
    summed = steady.groupby(["rank", "type"], sort=False).agg(total_ms=("total_ms", "sum"),
                                                            count=("count", "sum")).reset_index()
    return pd.concat([rest[["rank", "type", "total_ms", "count"]], summed], ignore_index=True)


def steady_ops(run: Run) -> pd.DataFrame:
    """The op instances (run.ops) over the steps the step means cover, as steady_op_types sums the op types: where
    op runs are timed and a rank's first step is left out of the means, each op less its runs in that step or
    outside every step (`first_step_ms`, `first_step_calls`: perfkit/io/formats/steps.py), its mean call over the
    rest; elsewhere the op tables' totals over every profiled step. max_ms / min_ms stay those of every call."""
    ops = run.ops
    if not len(ops) or not len(run.steps) or ops["first_step_ms"].isna().all():
        return ops
    _, first = first_step_verdicts(run.steps)
    left_out = (ops["rank"].isin(first.loc[first["reason"].notna(), "rank"]) & ops["first_step_ms"].notna()).to_numpy()
    if not left_out.any():
        return ops
    steady = ops.copy()
    total = (ops["total_ms"] - ops["first_step_ms"]).clip(lower=0.0)
    count = (ops["count"] - ops["first_step_calls"].fillna(0).astype("int64")).clip(lower=0)
    steady["total_ms"] = np.where(left_out, total, ops["total_ms"])
    steady["count"] = np.where(left_out, count, ops["count"]).astype("int64")
    steady["avg_ms"] = np.where(left_out, (total / count.where(count > 0)).to_numpy(dtype=np.float64), ops["avg_ms"])
    return steady


def op_type_shares(run: Run) -> pd.DataFrame:
    """Op types over all ranks in the steps the means cover (steady_op_types), largest first: type, total_ms, count,
    share (of summed op time)."""
    op_types = steady_op_types(run)
    if not len(op_types):
        return pd.DataFrame(columns=["type", "total_ms", "count", "share"])
    return _type_shares(op_types, [])


def op_type_shares_by_rank(run: Run) -> pd.DataFrame:
    """Op types per rank in the steps the means cover, each rank's largest first: rank, type, total_ms, count,
    share (of that rank's op time)."""
    op_types = steady_op_types(run)
    if not len(op_types):
        return pd.DataFrame(columns=["rank", "type", "total_ms", "count", "share"])
    return _type_shares(op_types, ["rank"])


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


def op_type_items(shares: pd.DataFrame) -> list[dict[str, Any]]:
    return [{"type": str(row.type), "total_ms": float(row.total_ms), "share": json_number(row.share),
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

# A queue with fewer samples than this is one or two batches: it tells no pattern (issue 14: one host-queue
# sample gave two contradicting findings). Three is the seed's sink runs' device-queue count.
MIN_QUEUE_SAMPLES = 3
# MindInsight: host queue empty in > 30 % of batches -> data processing is the bottleneck (docs/formats.md §4).
QUEUE_EMPTY_PCT = 30.0


def comm_op_ms(op_types: pd.DataFrame) -> pd.DataFrame:
    """Per rank: op time of collective and of point-to-point communication ops (0 where none)."""
    if not len(op_types):
        return pd.DataFrame(columns=["collective", "p2p"], dtype="float64")
    codes, types = pd.factorize(op_types["type"], use_na_sentinel=False)  # each distinct type asked once
    kinds = pd.Series(np.array([comm_kind(str(t)) for t in types], dtype=object)[codes], index=op_types.index)
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


def host_cpu_busy(cpu_util: pd.DataFrame) -> dict[str, float | None]:
    """Mean host CPU busy % over the samples, as MindInsight counts it: 100 - idle (io wait is busy too);
    user and sys beside it. None where the samples do not tell."""
    def mean(column: str) -> float | None:
        value = json_number(cpu_util[column].mean()) if len(cpu_util) else None
        return None if value is None else round(value, 2)
    idle = mean("idle_pct")
    return {"busy_pct": None if idle is None else round(100.0 - idle, 2),
            "user_pct": mean("user_pct"), "sys_pct": mean("sys_pct")}


# memory_record's framework allocator (docs/formats.md §3), the most inclusive first: `PTA+GE` is torch_npu's and
# GE's together. `APP` is the whole process (reserved only) and `CANN/...` are CANN modules: not the framework's.
FRAMEWORK_COMPONENTS = ("PTA+GE", "MindSpore+GE", "MindSpore", "PTA", "GE")
# Links that leave the device; LOCAL is a copy inside it (hundreds of GB/s) and says nothing about the network.
NETWORK_LINK_TYPES = ("HCCS", "PCIE", "RDMA", "SIO", "SDMA")  # SDMA: legacy hccl_raw's on-server link


@kept_on_run
def framework_memory(run: Run) -> pd.DataFrame:
    """Each rank's samples of its framework allocator: the first of FRAMEWORK_COMPONENTS the rank has.
    One pass over all ranks (a cluster run has hundreds: a loop per rank cost a second there), once per run (the
    summary, the rule gate and two rules ask; 4,096 ranks hold 8.5 million samples: 0.3-0.4 s a pass)."""
    memory = run.memory
    if not len(memory):
        return memory
    # a component's place in FRAMEWORK_COMPONENTS (NaN: none of them) in one Arrow pass over the strings:
    # 0.05 s for 4,096 ranks' 8.5 M samples, where factorizing them took 0.57 s
    place = pc.index_in(pa.array(memory["component"]), value_set=pa.array(FRAMEWORK_COMPONENTS)
                        ).to_numpy(zero_copy_only=False)
    ranks = memory["rank"].to_numpy()
    listed = np.flatnonzero(~np.isnan(place))
    first = pd.Series(place[listed]).groupby(ranks[listed]).transform("min").to_numpy()
    chosen = np.zeros(len(memory), dtype=bool)
    chosen[listed[place[listed] == first]] = True
    samples = memory[chosen]
    if not (ranks[1:] >= ranks[:-1]).all():  # the loader's table is in rank order already
        samples = samples.sort_values("rank", kind="stable")
    return samples.reset_index(drop=True)


def memory_peaks(run: Run) -> dict[int, dict[str, Any]]:
    """Per rank: the framework allocator's peak allocated and reserved MB over the run, and the capacity."""
    peaks = framework_memory(run).groupby("rank", sort=True)[["allocated_mb", "reserved_mb"]].max()
    capacity = json_number(run.meta.memory_capacity_mb)
    return {int(rank): {"peak_allocated_mb": json_number(row.allocated_mb), "peak_reserved_mb": json_number(row.reserved_mb),
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
    Grouped over all ranks at once (hundreds of ranks: a loop per rank cost a second). Kept on the run (the
    ledger and the summary both ask: 30 ms a time at 4,096 ranks); each caller gets its own dicts."""
    return {rank: {**entry, "slowest_link": dict(entry["slowest_link"]) if entry["slowest_link"] else None}
            for rank, entry in _communication_by_rank(run).items()}


@kept_on_run
def _communication_by_rank(run: Run) -> dict[int, dict[str, Any]]:
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
    links = {rank: _link_dict(link) for rank, (_, link) in zip(slowest.index, slowest.iterrows())}
    # numpy values per rank, read once (a Series lookup per rank and kind cost 0.3 s at 4,096 ranks)
    kind_ms = {kind: by_kind[kind].reindex(steps.index).to_numpy() if kind in by_kind else None
               for kind in ("collective", "p2p")}
    step_counts, waits = steps.to_numpy(), wait.reindex(steps.index).to_numpy()
    transits = transit.reindex(steps.index).to_numpy()
    result = {}
    for position, rank in enumerate(steps.index):
        def per_step(kind: str) -> float | None:
            ms = kind_ms[kind]
            return json_number((ms[position] if ms is not None else 0.0) / step_counts[position])
        moved = waits[position] + transits[position]
        result[int(rank)] = {
            "collective_ms": per_step("collective"), "p2p_ms": per_step("p2p"),
            "wait_ratio": json_number(waits[position] / moved) if moved > 0 else None,
            "slowest_link": links.get(rank),
        }
    return result


def _link_dict(link: pd.Series) -> dict[str, Any]:
    return {"src": int(link["src"]), "dst": int(link["dst"]), "link_type": str(link["link_type"]),
            "size_mb": json_number(link["size_mb"]), "transit_ms": json_number(link["transit_ms"]),
            "bandwidth_gb_s": json_number(link["bandwidth_gb_s"])}


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
        return json_number(sum(values) / len(values)) if values else None

    links = [entry["slowest_link"] for entry in entries if entry["slowest_link"]]
    return {"collective_ms": mean("collective_ms"), "p2p_ms": mean("p2p_ms"), "wait_ratio": mean("wait_ratio"),
            "slowest_link": min(links, key=lambda link: link["bandwidth_gb_s"]) if links else None}


# ---------------------------------------------------------------- PyNative dispatch

# The op named as dispatch_inflation's example loses at least this share of all op time above its fastest calls.
EXAMPLE_MIN_SHARE = 0.01


def dispatch_inflation(run: Run, whole_profile: bool = False) -> dict[str, Any] | None:
    """How much of the op time of a PyNative run is each op waiting on the host rather than computing, where op
    calls are timed (CPU, GPU op launches): per profiled step (`whole_profile`: over the whole profile, for a run
    without steps), the compute ops' time above each op's fastest call (`above_fastest_ms`, of `op_ms`; `calls`),
    and the op whose calls spread the most (`op`, its `shapes`, `fastest_ms`, `slowest_ms`). In PyNative every
    op's duration includes the Python dispatch it waited on (a [16,10] SubExt taking 3.8-8 ms on a real MindSpore
    2.10 CPU run), so its fastest call is the nearest to what it computes. None for graph-mode runs and where
    calls are not timed."""
    ops = run.ops
    if run.meta.mode != "pynative" or not len(ops) or "min_ms" not in ops or not (whole_profile or len(run.steps)):
        return None
    types = ops["type"].astype("string").fillna("")
    timed = ops[ops["min_ms"].notna() & (ops["count"] >= 2)
                & ~types.map({t: comm_kind(t) is not None for t in types.unique()}).astype(bool)]
    if not len(timed):
        return None
    steps = (pd.Series(1, index=timed["rank"].unique()) if whole_profile
             else run.steps.groupby("rank")["step"].nunique())
    above = (timed["total_ms"] - timed["count"] * timed["min_ms"]).clip(lower=0.0)
    per_rank_above = above.groupby(timed["rank"]).sum() / steps.reindex(timed["rank"].unique()).clip(lower=1)
    per_rank_ops = timed.groupby("rank")["total_ms"].sum() / steps.reindex(timed["rank"].unique()).clip(lower=1)
    # the example shown: the op whose calls spread the most, among those losing a share of the op time (a tiny op
    # whose calls spread 80x is dispatch, not compute; a big one's spread may be a busy host too)
    spread = (timed["max_ms"] / timed["min_ms"].where(timed["min_ms"] > 0)).where(
        above >= EXAMPLE_MIN_SHARE * timed["total_ms"].sum(), 0.0).fillna(0.0)
    worst = timed.loc[spread.idxmax()]
    per_rank_calls = timed.groupby("rank")["count"].sum() / steps.reindex(timed["rank"].unique()).clip(lower=1)
    return {"above_fastest_ms": float(per_rank_above.mean()), "op_ms": float(per_rank_ops.mean()),
            "calls": float(per_rank_calls.mean()),
            "op": str(worst["name"]), "shapes": None if pd.isna(worst.get("input_shapes")) else str(worst["input_shapes"]),
            "fastest_ms": float(worst["min_ms"]), "slowest_ms": float(worst["max_ms"])}



def amp_level_shown(run: Run) -> str | None:
    """The run's AMP level as every view says it: the recorded one, else on CPU the one its Cast ops show
    (amp_from_ops), with where it comes from: "O1-O3 (from ops: 54 Cast a step)"."""
    inferred = amp_from_ops(run)
    if inferred is None:
        return run.meta.amp_level
    return f"{inferred['level']} (from ops: {inferred['cast_calls_per_step']:.0f} Cast a step)"


def amp_from_ops(run: Run) -> dict[str, Any] | None:
    """A CPU run's precision where it is not recorded, from its Cast ops in the steps the means cover: MindSpore's
    O0 graph casts nothing on CPU and O1-O3 cast around every float16 op (the real O0/O2/O3 runs in
    tests/runs/cpu_2_10_amp_*: 0, 54 and 45 Casts a step). {"level": "O0" or "O1-O3", "cast_share": of op time,
    "cast_calls_per_step"}; None where the precision is recorded, the device is not a CPU, the run is PyTorch's
    (autocast casts with aten ops, and O0-O3 are MindSpore's levels) or there is no op data."""
    if run.meta.amp_level or run.meta.compute_dtype or (run.meta.device or "").upper() != "CPU" \
            or framework_of(run) == TORCH:
        return None
    shares = op_type_shares(run)
    if not len(shares) or not len(run.steps):
        return None
    casts = shares[shares["type"] == "Cast"]
    steps = len(steady_steps(run.steps)[["rank", "step"]].drop_duplicates()) or 1
    calls = float(casts["count"].sum()) / steps
    return {"level": "O1-O3" if calls > 0 else "O0", "cast_share": float(casts["share"].sum()),
            "cast_calls_per_step": calls}

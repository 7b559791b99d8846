"""Communication rules: time the ranks spend exchanging data or waiting for each other.

communication (exposed collective communication), pipeline_stage_imbalance (point-to-point waits and bubbles
between pipeline stages), slow_rank (ranks that should match and do not), slow_link (links below their bandwidth),
comm_wait (the rank the others wait for in collectives).
"""

from __future__ import annotations

import os
import shlex

import numpy as np
import pandas as pd

from ...analysis import comm_split
from ...analysis.cluster import of_run, rank_groups, wait_caused
from ...analysis.ledger import CAUSES_OF, Claim, estimated_split, ledger, rank_parts, steady_means, steady_steps
from ...analysis.measures import NETWORK_LINK_TYPES, step_means
from ...core.causes import COMM_SOURCE_LABEL
from ...core.model import Run
from ..finding import Finding, NotChecked, severity_for
from ..registry import device_name, gain_pct, has_steps, is_torch, percent, round_ms, rule

# ---------------------------------------------------------------------------------------------------------
# communication

# msprof-analyze rates an issue High from 5 % of step time.
COMM_MIN_SHARE = 0.05


def timed_rank_parts(run: Run) -> pd.DataFrame:
    """ledger.rank_parts of the ranks with a step time: a rank without one has no share of it to judge."""
    parts = rank_parts(run)
    return parts[parts["total"] > 0]


@rule("communication", needs=("comm",), claims=("comm", "comm_transfer"))
def communication(run: Run) -> list[Finding]:
    """Exposed collective communication (ledger.rank_parts): point-to-point waits are pipeline_stage_imbalance's."""
    per_rank = timed_rank_parts(run).set_index("rank")
    if not len(per_rank):
        return []
    per_rank["share"] = per_rank["communication"] / per_rank["total"]
    share = float(per_rank["communication"].mean() / per_rank["total"].mean())
    if share < COMM_MIN_SHARE:
        return []
    worst = int(per_rank["share"].idxmax())
    name, label = COMM_SOURCE_LABEL[per_rank.loc[worst, "comm_source"]]
    gain = percent(share)
    # the evidence keeps its names (scripts read them); the values are the collective part alone now
    evidence = {f"{name}_share_pct": gain, f"{name}_ms": round_ms(per_rank["communication"].mean()),
                "step_ms": round_ms(per_rank["total"].mean())}
    if per_rank["pipeline"].sum() > 0:
        evidence["p2p_exposed_ms"] = round_ms(per_rank["pipeline"].mean())
    if len(per_rank) > 1:
        evidence["worst_rank"] = worst
        evidence["worst_rank_share_pct"] = percent(per_rank.loc[worst, "share"])
    causes = steady_means(run).reindex(per_rank.index)
    transfer = causes.get("comm_transfer", pd.Series(0.0, index=per_rank.index)).fillna(0.0)
    wait = causes.get("comm_wait", pd.Series(0.0, index=per_rank.index)).fillna(0.0)
    evidence |= _split_evidence(run)
    if float(wait.mean()) > float(transfer.mean()):
        return [_waiting_finding(run, per_rank, transfer, wait, gain, evidence, worst)]
    if is_torch(run):
        action = ("DistributedDataParallel(model, bucket_cap_mb=...) with larger buckets so gradient all-reduces "
                  "overlap backward (Megatron: --overlap-grad-reduce); a larger per-device batch hides more of it")
    else:
        action = ('ms.set_auto_parallel_context(comm_fusion={"allreduce": {"mode": "auto", "config": None}}) '
                  "to fuse gradient all-reduces so they overlap backward; a larger per-device batch hides more of it")
    if "comm_split_unknown" in evidence:
        action += ("; whether this time moves data or waits for a late rank is unknown ("
                   f"{evidence['comm_split_unknown']}): if a rank arrives late, balancing it helps and fusion does not "
                   "(perfkit ranks)")
    elif float(transfer.mean()) > 0:
        evidence |= {"comm_transfer_ms": round_ms(transfer.mean()), "comm_wait_ms": round_ms(wait.mean())}
    return [Finding(
        id="communication", severity=severity_for(gain),
        title=f"Collective communication {label}: {gain:.1f} % of the step",
        evidence=evidence, action=action,
        target=f"rank {worst}" if len(per_rank) > 1 else None, est_gain_pct=gain)]


def _split_evidence(run: Run) -> dict:
    """How the steady steps' communication was split into transfer and wait where the split is an estimate
    (comm_split), or why it is unknown where none was split; nothing where the files measure it."""
    estimated = estimated_split(run)
    if estimated is not None:
        return ({"comm_split": estimated}
                | {f"rank{rank}_arrives_last_pct": percent(share) for rank, share in _arrives_last(run).items()}
                | {f"rank{rank}_caused_wait_pct": percent(share) for rank, share in wait_caused(run).items()})
    frame = ledger(run)
    steady = frame.loc[frame["steady"], "cause"]
    if steady.isin(["comm_transfer", "comm_wait"]).any() or not (steady == "comm").any():
        return {}
    return {"comm_split_unknown": comm_split.estimate(run).why_not or "the collective ops carry no split"}


def _arrives_last(run: Run) -> pd.Series:
    """Per rank, the share (0-1) of the collectives of the steady steps, matched across ranks, it arrived at last."""
    steady = set(steady_steps(run).itertuples(index=False, name=None))
    rows = comm_split.estimate(run).rows
    in_steady = [(rank, step) in steady for rank, step in zip(rows["rank"], rows["step"])]
    matched = rows[rows["last"].notna().to_numpy() & np.asarray(in_steady, dtype=bool)]
    return matched["last"].astype(float).groupby(matched["rank"]).mean() if len(matched) else pd.Series(dtype=float)


def _waiting_finding(run: Run, per_rank: pd.DataFrame, transfer: pd.Series, wait: pd.Series, gain: float,
                     evidence: dict, worst: int) -> Finding:
    """Exposed collective time that is mostly waiting (the ledger's comm_wait above comm_transfer): fusion,
    overlap or bucket sizes shorten transfers and cannot help; the late arrival is what to fix."""
    host_ms = float(per_rank["host"].mean())
    evidence = evidence | {"comm_transfer_ms": round_ms(transfer.mean()), "comm_wait_ms": round_ms(wait.mean()),
                           "host_ms": round_ms(host_ms)}
    # the rank the others wait for is the slow rank every view names (cluster: its own time, the step less its
    # collective communication, stands out), else the one that arrives last most often, else the one that waits least
    # (among the ranks that should match the one waiting most: a pipeline stage's ranks wait within their stage)
    last = _arrives_last(run).reindex(per_rank.index).dropna()
    split = of_run(run).per_rank.set_index("rank").reindex(per_rank.index)
    group = next((set(ranks) for ranks in rank_groups(run) if int(wait.idxmax()) in ranks), set(per_rank.index))
    culprits = [rank for rank in of_run(run).slow if rank in group and rank in per_rank.index]
    late = (max(culprits, key=lambda rank: split.at[rank, "own_ms"]) if culprits
            else int(last.idxmax()) if len(last) else int(wait.idxmin()))
    late_compute = float(per_rank.loc[late, "compute"])
    others_compute = float(per_rank.drop(index=late)["compute"].mean()) if len(per_rank) > 1 else late_compute
    if culprits or late_compute - others_compute > COMM_MIN_SHARE * per_rank["total"].mean():
        peers = [rank for rank in split.index if rank in group and rank != late] or list(split.index.drop(late))
        late_own, others_own = float(split.at[late, "own_ms"]), float(split.loc[peers, "own_ms"].mean())
        late_idle = float(split.at[late, "idle_ms"])
        evidence |= {"late_rank": late, "late_rank_own_ms": round_ms(late_own),
                     "other_ranks_own_ms": round_ms(others_own), "late_rank_compute_ms": round_ms(late_compute),
                     "other_ranks_compute_ms": round_ms(others_compute), "late_rank_idle_ms": round_ms(late_idle)}
        caused = wait_caused(run)
        arrives = (f"arrives last at {100 * last[late]:.0f} % of the collectives" if len(last) else "waits least")
        if late in caused.index:
            arrives += f", where {100 * caused[late]:.0f} % of its peers' wait lies"
        fix = ("shorten what its host does before each step (its data loading, callbacks, Python in its loop: "
               "perfkit summary on its folder)" if late_idle > late_compute else
               "balance its work, data shard or device")
        causes = [(f"rank {late} {arrives}, so the others wait for it: its own time (the step less its collective "
                   f"communication and pipeline wait) is {late_own:.1f} ms a step against {others_own:.1f} ms on the "
                   f"others, of it {late_compute:.1f} ms compute and {late_idle:.1f} ms idle (data wait, host): {fix}")]
    elif _all_ranks_profiled(run, len(per_rank)):
        causes = [(f"all {len(per_rank)} ranks of the run were profiled and their own time (the step less its "
                   "collective communication and pipeline wait) matches, so no rank arrives late: the wait is a "
                   "synchronisation (a barrier, a host-side sync in the step)")]
    else:
        profiled = "the profiled ranks' compute matches, so they" if len(per_rank) > 1 else "the rank"
        causes = [f"{profiled} wait for ranks that were not profiled or for a synchronisation: profile every rank "
                  "of the group and run perfkit ranks over them to find the late one"]
    first = _first_collective_wait(run)
    if first is not None and first[0] >= FIRST_COLLECTIVE_WAIT_SHARE:
        share, name = first
        evidence |= {"wait_at_first_collective_pct": percent(share), "first_collective": name}
        causes.append(f"{percent(share):.0f} % of the wait is at each step's first collective ({name}): the ranks "
                      "reach it at different times, and the ones after it, reached in step, wait little; what runs "
                      "before it on the late rank (the rest of forward and backward, data loading, host work) is "
                      "what to shorten")
    remedy = _host_remedy(run)
    if host_ms > 0 and remedy and "late_rank" not in evidence:  # a late rank's own host time is said above
        causes.append(f"{host_ms:.1f} ms a step of host time, which the peers wait through: {remedy}")
    return Finding(
        id="communication", severity=severity_for(gain),
        title=f"Collective communication mostly waiting for peers: {gain:.1f} % of the step, "
              f"{wait.mean():.1f} ms wait against {transfer.mean():.1f} ms transfer",
        evidence=evidence,
        action="Larger fusion buckets or more overlap cannot help waiting time. " + _sentence("; ".join(causes)),
        target=f"rank {evidence.get('late_rank', worst)}" if len(per_rank) > 1 else None, est_gain_pct=gain,
        claim=Claim(("comm_wait",)))  # the wait is what a late rank or the host gap costs, not the transfer


def _host_remedy(run: Run) -> str | None:
    """What shortens a step's host time where the run can still change it: torch_npu's graph mode, MindSpore's
    graph mode (PyNative runs) or dataset sink mode (feed mode where the device can sink); None where neither
    applies (a graph-mode feed run on CPU: its host time is the loop's own, host_loop's finding)."""
    if is_torch(run):
        return "fewer host synchronisations (.item(), .cpu()) and torch_npu graph mode"
    remedies = (["graph mode / @ms.jit"] if run.meta.mode != "graph" else []) + (
        ["dataset sink mode"] if run.meta.data_mode != "sink" and device_name(run) != "CPU" else [])
    return " and ".join(remedies) or None


def _all_ranks_profiled(run: Run, ranks: int) -> bool:
    """Whether the run's files hold every rank it trained on: `perfkit profile --ranks N` records N."""
    recorded = run.meta.config.get("ranks") if isinstance(run.meta.config, dict) else None
    return isinstance(recorded, int) and recorded == ranks


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


# A step's first collective holding most of the steady steps' collective wait: the ranks reach the step's first
# exchange at different times (one still computing, loading data or on the host), and the later collectives,
# reached in step, wait little. Then the wait is arrival skew, and the work before that first collective is
# what differs (the real torch_npu Level1/Level0 exports: the first of four allReduce ops holds ~90 % of it).
FIRST_COLLECTIVE_WAIT_SHARE = 0.5


def _first_collective_wait(run: Run) -> tuple[float, str] | None:
    """The share of the steady steps' collective wait that lies in each step's first collective (by start time:
    elapse less transit where the files measure it, else comm_split's estimate), and the name of that collective
    most often; None where the ops have no start times or no wait."""
    ops = run.comm_ops
    if not len(ops) or "start_ms" not in ops or "step" not in ops:
        return None
    collective = ops[(ops["kind"] == "collective") & ops["start_ms"].notna() & ops["step"].notna()]
    wait = (collective["elapse_ms"] - collective["transit_ms"]).clip(lower=0.0)
    split = comm_split.estimate(run)
    if len(split.rows):
        wait = wait.fillna(split.rows["wait_ms"].reindex(collective.index))
    timed = collective.assign(wait=wait.to_numpy(dtype=float)).dropna(subset=["wait"])
    timed = timed.merge(steady_steps(run), on=["rank", "step"])
    if not len(timed) or timed["wait"].sum() <= 0:
        return None
    first = timed.loc[timed.groupby(["rank", "step"])["start_ms"].idxmin()]
    return float(first["wait"].sum() / timed["wait"].sum()), str(first["name"].mode().iloc[0])


# ---------------------------------------------------------------------------------------------------------
# pipeline_stage_imbalance

# A stage is imbalanced when its compute per step differs from the slowest stage's by more than msprof-analyze's
# slow-rank spread (5 % of the step, cluster.SLOW_RANK_SPREAD's rule applied to stages)...
STAGE_SPREAD = 0.05
# ...and a pipeline wait (p2p, bubble) worth a finding is 5 % of the step (msprof-analyze: an issue from 5 %).
PIPELINE_MIN_SHARE = 0.05


def stage_of_rank(run: Run) -> dict[int, int]:
    """Global rank -> pipeline stage, from the run's meta (profiler_metadata pp groups, stage_num, cluster file)."""
    return {rank: stage for stage, ranks in enumerate(run.meta.pipeline_stages or []) for rank in ranks}


@rule("pipeline_stage_imbalance", needs=("steps",), claims=("p2p",))
def pipeline_stage_imbalance(run: Run) -> list[Finding]:
    parts = timed_rank_parts(run)
    stages = stage_of_rank(run)
    parts["stage"] = parts["rank"].map(stages)
    known = parts[parts["stage"].notna()]
    wait_share = float(parts["pipeline"].mean() / parts["total"].mean()) if len(parts) else 0.0
    balanced = False  # stages known to compute about as long: the wait is no layer imbalance
    if known["stage"].nunique() < 2:
        if not stages and wait_share == 0:
            return []  # no sign of pipeline parallelism
        if wait_share < PIPELINE_MIN_SHARE:
            return []
        stage_text, evidence = "", {}
    else:
        per_stage = known.groupby("stage")[["compute", "pipeline", "total"]].mean()
        spread = float(per_stage["compute"].max() - per_stage["compute"].min()) / float(per_stage["total"].max())
        balanced = spread <= STAGE_SPREAD
        if balanced and wait_share < PIPELINE_MIN_SHARE:
            return []
        slowest = int(per_stage["compute"].idxmax())
        evidence = {f"stage{int(stage)}_compute_ms": round_ms(row["compute"]) for stage, row in per_stage.iterrows()}
        evidence |= {f"stage{int(stage)}_pipeline_wait_ms": round_ms(row["pipeline"])
                     for stage, row in per_stage.iterrows()}
        evidence["compute_spread_pct_of_step"] = percent(spread)
        stage_text = (f"the stages compute within {percent(spread):.1f} % of the step of each other; " if balanced
                      else f"stage {slowest} computes {round_ms(per_stage['compute'].max())} ms per step against "
                           f"{round_ms(per_stage['compute'].min())} ms on stage "
                           f"{int(per_stage['compute'].idxmin())}; ")
    evidence["pipeline_wait_share_pct"] = percent(wait_share)
    evidence["step_ms"] = round_ms(parts["total"].mean())
    gain = percent(wait_share)
    if is_torch(run):
        rebalance = ("Move layers from the slowest stage to the others (Megatron: --decoder-first-pipeline-num-layers "
                     "/ --decoder-last-pipeline-num-layers, or --num-layers-per-virtual-pipeline-stage for an "
                     "interleaved schedule)")
        micro = ("use more micro-batches per step (a larger global batch over the same --micro-batch-size) so the "
                 "bubble is a smaller part")
    else:
        rebalance = ("Rebalance layers across stages (cell.pipeline_stage = k for each cell, "
                     "ms.set_auto_parallel_context(pipeline_stages=N)) so each stage computes about as long")
        micro = "raise the micro-batch count (nn.PipelineCell(net, micro_size=M) with a larger M) so the bubble shrinks"
    if balanced:  # moving layers cannot help; what a stage waits for (its peers' exposed collectives) can
        action = (micro[0].upper() + micro[1:] + "; the stages are balanced, so see what each waits for: the "
                  "exposed collectives of the stage it receives from (perfkit ranks, the communication finding)")
    else:
        action = f"{rebalance}, and {micro}"
    return [Finding(
        id="pipeline_stage_imbalance", severity=severity_for(gain),
        title=f"Pipeline stages wait on each other: {stage_text}point-to-point wait and bubble are "
              f"{gain:.1f} % of the step",
        evidence=evidence, action=action, target=None, est_gain_pct=gain)]


# ---------------------------------------------------------------------------------------------------------
# slow_rank

# The spread rule and its threshold (SLOW_RANK_SPREAD, msprof-analyze's 5 %) are cluster.of_steps's, shared
# with `perfkit ranks` and the summary; this rule words its findings. Communication is left out: the rank
# with the most of it is usually waiting for a slow peer.
SLOW_RANK_ADVICE = {
    "total_ms": ("step time",
                 "Compare the named ranks' op time with the others (perfkit summary RUN per rank): a slower device, "
                 "an unbalanced pipeline stage (set_auto_parallel_context(pipeline_stages=...)) or host load"),
    "idle_ms": ("device idle time (data wait, host, unknown)",
                "The named ranks wait longer for data or the host: check their dataset shard size and host "
                "(dataset.map(..., num_parallel_workers=N), local disk)"),
    # Data-parallel ranks meet at every all-reduce, so their step times agree; a rank that computes
    # longer shows here while the others show the wait as communication.
    "own_ms": ("own time (the step less its collective communication and pipeline wait)",
               ("The others wait for the named ranks at every collective: compare their compute and idle time with a "
                "fast rank's (perfkit ranks RUN), and what their host does before each step (data loading, "
                "callbacks)")),
    "compute_ms": ("compute time",
                     "The named ranks compute longer per step while the others wait for them in communication: "
                     "compare their kernels with a fast rank's (perfkit compare RANK_DIR FAST_RANK_DIR); look for a "
                     "throttled or shared device, or more work placed on them"),
}


# The spreads that say why a rank is slow: compute it does longer, time its device stood idle (each claims other
# ms of the step, so both may be said); the step total alone only where neither explains it.
SLOW_RANK_CAUSES = ("compute_ms", "idle_ms")


# What a slow rank's finding claims on the slow ranks: the part of their step its spread is in.
SLOW_RANK_CLAIMS = {"compute_ms": CAUSES_OF["compute"],
                    "own_ms": CAUSES_OF["compute"] + CAUSES_OF["pipeline"] + CAUSES_OF["data"] + CAUSES_OF["host"]
                    + CAUSES_OF["unknown"],
                    "idle_ms": CAUSES_OF["data"] + CAUSES_OF["host"] + CAUSES_OF["unknown"],
                    "total_ms": tuple(cause for causes in CAUSES_OF.values() for cause in causes)}


@rule("slow_rank", needs=("steps", "ranks"))
def slow_rank(run: Run) -> list[Finding]:
    """Slow ranks among ranks that should match (cluster.rank_groups: within each pipeline stage), with the ranks
    cluster.of_run names: per group, a finding per explaining spread (SLOW_RANK_CAUSES), else the own time's or the
    step total's."""
    answer = of_run(run)
    per_rank = answer.per_rank.set_index("rank")
    findings = []
    for group in sorted({tuple(spread["group"]) for spread in answer.findings}):
        spreads = {spread["dimension"]: spread for spread in answer.findings
                   if tuple(spread["group"]) == group and spread["rank_is_slow"]}
        explained = [dimension for dimension in SLOW_RANK_CAUSES if dimension in spreads]
        fallback = [dimension for dimension in ("own_ms", "total_ms") if dimension in spreads][:1]
        for column in explained or fallback:
            findings.append(_slow_rank_finding(spreads[column], per_rank.loc[list(group)], per_rank))
    return findings


def _slow_rank_finding(spread_finding: dict, group: pd.DataFrame, per_rank: pd.DataFrame) -> Finding:
    column, spread, slow = spread_finding["dimension"], spread_finding["spread"], spread_finding["ranks"]
    what, action = SLOW_RANK_ADVICE[column]
    values = group[column].dropna()
    gain = percent(float(values.max() - values.median()) / float(per_rank["total_ms"].max()))
    evidence = {"spread_pct_of_step": percent(spread), "mean_step_ms": round_ms(spread_finding["mean_step_ms"])}
    shown = slow + [spread_finding["min_rank"]]  # the slow ranks and the fastest, not every rank of a cluster
    evidence |= {f"rank{r}_{column}": round_ms(values[r]) for r in shown}
    return Finding(
        id="slow_rank", severity=severity_for(gain),
        title=f"Rank{'s' if len(slow) > 1 else ''} {', '.join(map(str, slow))} stand{'' if len(slow) > 1 else 's'}"
              f" out in {what}: spread {percent(spread):.1f} % of the step",
        evidence=evidence, action=action, target=", ".join(f"rank {r}" for r in slow), est_gain_pct=gain,
        claim=Claim(SLOW_RANK_CLAIMS[column], ranks=tuple(slow)))


# ---------------------------------------------------------------------------------------------------------
# slow_link

# msprof's nominal link rates (analysis/common_func number_constant: RDMA_BANDWIDTH_V2_1_0 12.5,
# HCCS_BANDWIDTH_V2_1_0 18, PCIE_BANDWIDTH_V2_1_0 20 GB/s; Atlas A2 is faster: HCCS 28, RDMA 25). The lowest
# it lists, since the files do not say which chip ran: a link below these is slow on any Ascend device.
# SIO has no published rate, SDMA (legacy hccl_raw: HCCS or PCIE) no known one: each is compared with its peers only.
NOMINAL_LINK_GB_S = {"HCCS": 18.0, "PCIE": 20.0, "RDMA": 12.5}
# msprof's BANDWIDTH_THRESHOLD: a link below 0.8 of its rate is "inefficient"; the same bar against the
# median of the links of its type.
SLOW_LINK_UTILIZATION = 0.8
# Smaller transfers are latency-bound and never reach the rate (msprof-analyze advisor packet.yaml:
# min_sdma_size 16 MB, min_rdma_size 1 MB).
SLOW_LINK_MIN_MB = {"HCCS": 16.0, "PCIE": 16.0, "SIO": 16.0, "SDMA": 16.0, "RDMA": 1.0}
SLOW_LINKS_NAMED = 5


@rule("slow_link", needs=("comm_links",), claims=("comm", "comm_transfer"))
def slow_link(run: Run) -> list[Finding]:
    links = run.comm_links[run.comm_links["link_type"].isin(NETWORK_LINK_TYPES)].copy()
    minimum_mb = links["link_type"].map(SLOW_LINK_MIN_MB).astype("float64")  # float even when no link is left
    links = links[(links["size_mb"] >= minimum_mb) & (links["bandwidth_gb_s"] > 0)]
    if not len(links):
        raise NotChecked("no link moved enough data to judge its bandwidth "
                         "(16 MB on HCCS/PCIE/SIO, 1 MB on RDMA)")
    links["median_gb_s"] = links.groupby("link_type")["bandwidth_gb_s"].transform("median")
    links["nominal_gb_s"] = links["link_type"].map(NOMINAL_LINK_GB_S).astype("float64")
    below_peers = links["bandwidth_gb_s"] < SLOW_LINK_UTILIZATION * links["median_gb_s"]
    below_rate = links["bandwidth_gb_s"] < SLOW_LINK_UTILIZATION * links["nominal_gb_s"]
    slow = links[below_peers | below_rate].sort_values("bandwidth_gb_s")
    if not len(slow):
        return []
    # Time lost: each slow transfer's time beyond what it takes at its type's median bandwidth, per step.
    lost_ms = float((slow["transit_ms"] - slow["size_mb"] / slow["median_gb_s"]).clip(lower=0).sum())
    steps = max(1, int(run.comm_links["step"].nunique()))
    gain = gain_pct(run, lost_ms, float(run.comm_links["transit_ms"].sum()))
    worst = slow.iloc[0]
    named = slow.head(SLOW_LINKS_NAMED)
    evidence = {"slow_links": len(slow), "worst_bandwidth_gb_s": round(float(worst["bandwidth_gb_s"]), 3),
                "median_bandwidth_gb_s": round(float(worst["median_gb_s"]), 3),
                "worst_size_mb": round(float(worst["size_mb"]), 3), "lost_ms_per_step": round_ms(lost_ms / steps)}
    if not pd.isna(worst["nominal_gb_s"]):
        evidence["nominal_gb_s"] = float(worst["nominal_gb_s"])
    pairs = ", ".join(f"{int(row.src)}->{int(row.dst)} {row.link_type} {row.bandwidth_gb_s:.1f} GB/s ({row.name})"
                      for row in named.itertuples())
    return [Finding(
        id="slow_link", severity=severity_for(gain),
        title=f"{len(slow)} link transfer(s) run below {100 * SLOW_LINK_UTILIZATION:.0f} % of their type's median "
              f"or nominal bandwidth; slowest {int(worst['src'])}->{int(worst['dst'])} {worst['link_type']} at "
              f"{worst['bandwidth_gb_s']:.1f} GB/s",
        evidence=evidence,
        action=f"Check the named links ({pairs}): HCCS/PCIE - the server's link status and other jobs on the same "
               "devices (npu-smi info -t hccs-bw); RDMA - the NIC and switch port (hccn_tool -i DEVICE -link -g)",
        target=f"{int(worst['src'])}->{int(worst['dst'])} {worst['link_type']}", est_gain_pct=gain)]


# ---------------------------------------------------------------------------------------------------------
# comm_wait

# msprof-analyze (Ascend PyTorch tuning guide, "communication metrics"): when the wait ratios of the ranks
# differ by more than 0.2, the rank with the lowest wait ratio is the slow one the others wait for.
COMM_WAIT_SPREAD = 0.2
# A rank whose collectives spend more than half their transfer time waiting is dominated by waiting.
COMM_WAIT_DOMINANT = 0.5


@rule("comm_wait", needs=("comm_ops",), claims=("comm_wait",))
def comm_wait(run: Run) -> list[Finding]:
    # collectives only: a pipeline stage's receive waits for the stage before it (pipeline_stage_imbalance's
    # matter), not for a late rank of its data-parallel group
    collective = run.comm_ops[run.comm_ops["kind"] == "collective"]
    sums = collective.groupby("rank")[["wait_ms", "transit_ms"]].sum()
    moved = sums["wait_ms"] + sums["transit_ms"]
    by_rank = {int(rank): {"wait_ratio": float(sums.at[rank, "wait_ms"] / moved[rank])}
               for rank in sums.index if moved[rank] > 0}
    if not by_rank:
        split = comm_split.estimate(run)
        unmeasured = collective["transit_ms"].isna().any()
        raise NotChecked("no collective communication op with " + (
            "transit or wait time" if not unmeasured else
            f"measured transit or wait time; transfer and wait unknown: {split.why_not}" if split.why_not else
            "measured transit or wait time (the communication finding's split is estimated from the ops' timing)"))
    waiting = max(by_rank, key=lambda rank: by_rank[rank]["wait_ratio"])
    ratio = by_rank[waiting]["wait_ratio"]
    if ratio < COMM_WAIT_DOMINANT:
        return []
    # a pipeline stage's ranks reduce among themselves: the rank it waits for is one of its stage
    stage = next((set(ranks) for ranks in run.meta.pipeline_stages or [] if waiting in ranks), None)
    if stage:
        by_rank = {rank: entry for rank, entry in by_rank.items() if rank in stage}
    ops = collective[collective["rank"] == waiting]
    wait_ms = float(ops["wait_ms"].sum()) / max(1, int(ops["step"].nunique()))
    step = step_means(run.steps[run.steps["rank"] == waiting]) if has_steps(run) else None
    gain = percent(wait_ms / step["total_ms"]) if step and step["total_ms"] else None
    fastest = min(by_rank, key=lambda rank: by_rank[rank]["wait_ratio"])
    spread = ratio - by_rank[fastest]["wait_ratio"]
    evidence = {f"rank{rank}_wait_ratio": round(entry["wait_ratio"], 3) for rank, entry in by_rank.items()}
    evidence |= {"wait_ms_per_step": round_ms(wait_ms), "wait_ratio_spread": round(spread, 3)}
    if spread > COMM_WAIT_SPREAD:
        # "slow" is said of the ranks every view names slow (cluster.of_run): a rank that only arrives last, its
        # step, compute and idle time within the spread rule, is named as arriving last, not as slow
        slow_ranks = of_run(run).slow if run.steps["rank"].nunique() > 1 else []
        slow = (f"the slow one is rank {fastest}" if fastest in slow_ranks else
                f"rank {fastest} arrives last, though its step, compute and idle time match the others' (not a "
                "slow rank)")
        target = f"rank {fastest}"
        known = run.meta.rank_folders
        folders = [shlex.quote(os.path.join(run.path, known[str(rank)])) if str(rank) in known
                   else f"RANK{rank}_DIR" for rank in (fastest, waiting)]  # the run's own paths where known
        action = (f"Rank {fastest} is the one the others wait for: it reaches the collectives late. Compare its "
                  f"compute and data wait with rank {waiting}'s (perfkit compare {folders[0]} {folders[1]}): "
                  "a slower or shared device, more work placed on it, or a slower data shard")
    elif stage and stage <= set(by_rank):
        slow, target = "every rank of its pipeline stage waits about as much, so none of them is late", None
        action = ("Every rank of the stage was profiled and waits about as much: no rank arrives late. Look at what "
                  "runs before the collectives on each rank (perfkit trace: host gaps before them, a synchronisation "
                  "in the first step)")
    else:
        peers = sorted(set(run.comm_links["dst"].astype(int)) - set(by_rank)) if len(run.comm_links) else []
        slow, target = "the slow one is a rank that was not profiled", None
        action = ("Every profiled rank waits about as much: the slow rank is elsewhere. Profile the other ranks of "
                  "the group" + (f" ({', '.join(map(str, peers[:16]))})" if peers else "")
                  + " and run perfkit ranks over all of them")
    return [Finding(
        id="comm_wait", severity=severity_for(gain, default="medium"),
        title=f"Rank {waiting}'s collectives spend {100 * ratio:.0f} % of their transfer time waiting: {slow}",
        evidence=evidence, action=action, target=target, est_gain_pct=gain)]

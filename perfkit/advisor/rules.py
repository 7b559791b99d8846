"""The advisor's rules: each a small pure function of a Run returning zero or more Findings.

A rule declares the data it needs (keys of NEEDS); `advise` skips it with the stated reason when the run
lacks them. A rule raises NotChecked itself for what only it can tell (e.g. the data mode is unknown).
Thresholds sit next to the rule that uses them, relative to step time, with their source
(formats.md §4 lists what MindInsight, MindSpore's analyser, TensorFlow, PyTorch and msprof-analyze use).
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Callable

import pandas as pd

from ..analysis import (BATCHNORM_FAMILY, MIN_QUEUE_SAMPLES, NETWORK_LINK_TYPES, QUEUE_EMPTY_PCT,
                        comm_kind, communication_by_rank, framework_memory, host_cpu_busy, memory_peaks,
                        op_type_shares, queue_stats, step_means)
from ..cluster import of_run
from ..ledger import bound, rank_parts
from ..model import Run
from .finding import Finding, NotChecked, severity_for

# ---------------------------------------------------------------------------------------------------------
# What rules need, and the reason given when a run lacks it.


def _has_steps(run: Run) -> bool:
    return bool(len(run.steps)) and run.steps["total_ms"].notna().any() and run.steps["total_ms"].sum() > 0


NEEDS: dict[str, tuple[Callable[[Run], bool], str]] = {
    "steps": (_has_steps, "no step times"),
    "device": (lambda run: bool(run.meta.device), "device unknown"),
    "sinkable_device": (lambda run: _device(run) != "CPU",
                        "CPU cannot sink datasets (MindSpore falls back to feed mode)"),
    "fp16_device": (lambda run: _device(run) != "CPU",
                    "CPU has no fast float16 kernels; mixed precision would not speed it up"),
    "step_split": (lambda run: _has_steps(run) and run.steps["interval_ms"].notna().any(),
                   "no step interval (no step times, or they do not split data wait from compute)"),
    "step_tail": (lambda run: _has_steps(run) and run.steps["tail_ms"].notna().any(),
                  "no step tail (no step times, or no backward end point in them)"),
    "op_types": (lambda run: bool(len(run.op_types)) and run.op_types["total_ms"].sum() > 0,
                 "no op statistics"),
    "op_shapes": (lambda run: bool(len(run.ops)) and run.ops["input_shapes"].notna().any(),
                  "no op input shapes (framework_raw / cpu_framework / kernel_details shapes)"),
    "queues": (lambda run: bool(len(run.host_queue) or len(run.device_queue)),
               "no data queue samples (device_queue / dataset_iterator / minddata_aicpu profiling)"),
    "cpu_util": (lambda run: bool(len(run.cpu_util)), "no host CPU utilisation (minddata_cpu_utilization)"),
    "comm": (lambda run: _has_steps(run) and (
        any(col in run.steps and run.steps[col].notna().any() for col in ("comm_exposed_ms", "comm_ms"))
        or any(comm_kind(str(t)) for t in run.op_types["type"].unique())),
        "no communication times in the step data and no collective ops"),
    "ranks": (lambda run: _has_steps(run) and run.steps["rank"].nunique() > 1, "single-rank run"),
    "memory": (lambda run: bool(len(framework_memory(run.memory))) and run.memory["allocated_mb"].notna().any(),
               "no allocator memory records (profile with profile_memory=True: perfkit profile --profile-memory)"),
    "memory_capacity": (lambda run: run.meta.memory_capacity_mb is not None,
                        "device memory capacity unknown (perfkit profile records it)"),
    "comm_ops": (lambda run: bool(len(run.comm_ops)), "no communication.json"),
    "comm_links": (lambda run: bool(len(run.comm_links)), "no communication_matrix.json"),
}


@dataclass(frozen=True)
class Rule:
    id: str
    needs: tuple[str, ...]
    check: Callable[[Run], list[Finding]]

    def missing(self, run: Run) -> str | None:
        """Why this rule cannot look at `run`, or None when it has what it needs."""
        reasons = [NEEDS[need][1] for need in self.needs if not NEEDS[need][0](run)]
        return "; ".join(reasons) or None


RULES: list[Rule] = []


def rule(rule_id: str, needs: tuple[str, ...] = ()):
    def register(check: Callable[[Run], list[Finding]]):
        RULES.append(Rule(rule_id, needs, check))
        return check
    return register


# ---------------------------------------------------------------------------------------------------------
# Small shared measures.

def _device(run: Run) -> str:
    return (run.meta.device or "").upper()


def _torch(run: Run) -> bool:
    """A torch_npu run (`*_ascend_pt`): its actions are PyTorch's, not MindSpore's."""
    return run.meta.framework == "torch_npu"


def _pct(value: float) -> float:
    return round(100.0 * value, 2)


def _ms(value: float) -> float:
    return round(float(value), 3)


def _known_ms(**values: float | None) -> dict[str, float]:
    """Evidence in ms, leaving out what the run does not tell (no NaN in the JSON)."""
    return {key: _ms(value) for key, value in values.items() if value is not None and not pd.isna(value)}


def _run_step_ms(run: Run) -> float | None:
    """Step time over every rank and profiled step: the denominator for time totalled over the run.
    A step whose total is unknown (the first one when its start is not recorded) counts at the mean."""
    if not _has_steps(run):
        return None
    per_rank = run.steps.groupby("rank")["total_ms"].agg(["mean", "size"])
    return float((per_rank["mean"] * per_rank["size"]).sum())


def _gain_pct(run: Run, saved_ms_over_run: float, fallback_total_ms: float) -> float:
    """Share of step time that `saved_ms_over_run` is, capped at 100; of `fallback_total_ms` when steps are unknown."""
    basis = _run_step_ms(run) or fallback_total_ms
    return round(min(100.0, 100.0 * saved_ms_over_run / basis), 2) if basis > 0 else 0.0


# ---------------------------------------------------------------------------------------------------------
# sink_mode

# TensorFlow's input analysis calls 5-20 % of the step "moderately input-bound"; msprof-analyze rates an issue
# High from 5 % of step time. MindInsight's absolute 0.5 ms is meaningless for long steps, so: share of step.
SINK_MIN_INTERVAL_SHARE = 0.05


@rule("sink_mode", needs=("device", "sinkable_device", "step_split"))
def sink_mode(run: Run) -> list[Finding]:
    if run.meta.data_mode is None:
        raise NotChecked("data mode unknown (no device_queue / dataset_iterator file and no manifest)")
    if run.meta.data_mode == "sink":
        return []
    steps = step_means(run.steps)
    share = steps["interval_ms"] / steps["total_ms"]
    if share < SINK_MIN_INTERVAL_SHARE:
        return []
    # Sink mode overlaps the next batch's transfer with this step's compute: the interval is what it can hide.
    gain = _pct(share)
    return [Finding(
        id="sink_mode", severity=severity_for(gain),
        title=f"Feed mode: the step interval (device idle before forward: the per-step batch transfer) is "
              f"{gain:.1f} % of the step",
        evidence={"interval_share_pct": gain, **_known_ms(interval_ms=steps["interval_ms"],
                                                          fwd_bwd_ms=steps["fwd_bwd_ms"], step_ms=steps["total_ms"])},
        action="model.train(..., dataset_sink_mode=True)",
        target=None, est_gain_pct=gain)]


# ---------------------------------------------------------------------------------------------------------
# amp_level

# The seed's fp32 ResNet-50 on Ascend: Cast + BatchNorm ~ 50 % of AI Core time before amp_level O3.
# A healthy fp16 ResNet-50 still spends ~15-25 % in BatchNorm, so 30 % separates "AMP would move this" from that.
AMP_MIN_SHARE = 0.30
# Moving an op from fp32 to fp16 halves the bytes it moves; BatchNorm and Cast are memory-bound, so ~half their time.
FP16_TIME_FACTOR = 0.5
GPU_FP32_COMPUTE = re.compile(r"^(Conv2D.*|MatMul|BatchMatMul)$")  # tensor-core eligible at fp16


def _is_batchnorm(op_type: str) -> bool:
    return bool(BATCHNORM_FAMILY.match(op_type))


@rule("amp_level", needs=("device", "fp16_device", "op_types"))
def amp_level(run: Run) -> list[Finding]:
    device = _device(run)
    level = (run.meta.amp_level or "").upper()
    if level == "O3" or (not level and run.meta.compute_dtype in ("float16", "bfloat16")):
        return []
    # Precision unknown (no amp_level recorded, no op dtypes: the seed's own files): the Cast + BatchNorm share
    # alone is the evidence the seed's engineer concluded O3 from; the finding says it is conditional.
    known = bool(level) or run.meta.compute_dtype is not None
    per_type = run.op_types.groupby("type", observed=True)["total_ms"].sum()
    op_ms = float(per_type.sum())
    cast_ms = float(per_type.get("Cast", 0.0))
    bn_ms = float(sum(ms for t, ms in per_type.items() if _is_batchnorm(str(t))))
    # On Ascend Conv/MatMul always run in fp16 (hence the Casts); on GPU they run fp32, missing the tensor
    # cores, only at O0 (O1 and O2 already put them in fp16).
    convs_fp32 = device == "GPU" and (level == "O0" or (not level and run.meta.compute_dtype == "float32"))
    compute_ms = float(sum(ms for t, ms in per_type.items() if GPU_FP32_COMPUTE.match(str(t)))) \
        if convs_fp32 else 0.0
    movable_ms = cast_ms + bn_ms + compute_ms
    share = movable_ms / op_ms
    if share < AMP_MIN_SHARE:
        return []
    # Casts vanish except at the network input and the loss; the rest runs at fp16 speed.
    saved_ms = cast_ms + FP16_TIME_FACTOR * (bn_ms + compute_ms)
    gain = _gain_pct(run, saved_ms, op_ms)
    evidence = {"cast_bn_share_of_device_pct": _pct((cast_ms + bn_ms) / op_ms),
                "cast_share_of_device_pct": _pct(cast_ms / op_ms),
                "batchnorm_share_of_device_pct": _pct(bn_ms / op_ms)}
    if convs_fp32:
        evidence["fp32_conv_matmul_share_of_device_pct"] = _pct(compute_ms / op_ms)
    suggested = "O2" if device == "GPU" else "O3"  # O3 on GPU risks fp16 BatchNorm accuracy; O2 keeps it fp32
    biggest = max((("Cast", cast_ms), ("BatchNorm", bn_ms), ("Conv2D/MatMul", compute_ms)), key=lambda p: p[1])[0]
    precision = level or run.meta.compute_dtype
    title = (f"Precision {precision}: Cast and fp32 ops AMP would move take {_pct(share):.1f} % of device time"
             if known else f"Cast and BatchNorm take {_pct(share):.1f} % of device time: if the network is not "
                           f"already at amp_level {suggested}, AMP would move most of it (precision not recorded)")
    if _torch(run):
        action = ("with torch.autocast(device_type='npu', dtype=torch.bfloat16): around the forward pass "
                  "(or torch.float16 with torch.npu.amp.GradScaler), keeping BatchNorm in float32")
    else:
        action = f'Model(net, loss_fn, optimizer, amp_level="{suggested}")'
    return [Finding(
        id="amp_level", severity=severity_for(gain),
        title=title, evidence=evidence, action=action if known else f"if not already {suggested}: {action}",
        target=biggest, est_gain_pct=gain)]


# ---------------------------------------------------------------------------------------------------------
# dataset_workers, data_pipeline_ok, host_cpu

# QUEUE_EMPTY_PCT (analysis, MindInsight's 30 %) is applied to the queue the device reads from (device GetNext
# when recorded, else the host queue), as the seed does: an often empty host queue next to a full device queue
# means the device takes batches as fast as they come, not starvation. A queue with fewer than
# MIN_QUEUE_SAMPLES samples is not judged (one sample once gave two contradicting findings).
# MindInsight's pipeline rules: an op whose child's output queue usage exceeds its own by > 0.1 is the bottleneck;
# a source op with usage < 0.6 is slow; all queues >= 0.8 -> the root (batch) op is slow.
PIPELINE_USAGE_GAP = 0.1
SOURCE_SLOW_USAGE = 0.6
ALL_FULL_USAGE = 0.8
# MindSpore's analyser raises workers step by step; doubling is one step that shows in the next profile.
WORKER_FACTOR = 2


@dataclass(frozen=True)
class _DataFeed:
    queue: str                 # "device" or "host": the queue the device reads from
    empty_pct: float
    full_pct: float
    host_empty_pct: float | None
    wait_share: float | None   # share of step spent waiting for data, when the run tells
    wait_key: str | None       # evidence name saying where wait_share comes from


def _data_feed(run: Run) -> _DataFeed:
    device_stats, host_stats = queue_stats(run.device_queue), queue_stats(run.host_queue)
    judged = [(stats, name) for stats, name in ((device_stats, "device"), (host_stats, "host"))
              if stats and stats["samples"] >= MIN_QUEUE_SAMPLES]
    if not judged:
        raise NotChecked(f"fewer than {MIN_QUEUE_SAMPLES} data queue samples: too few to judge the data pipeline")
    feeding, name = judged[0]
    wait_share, wait_key = None, None
    step_ms = _run_step_ms(run)
    if step_ms and len(run.device_queue) and run.device_queue["wait_ms"].notna().any():
        wait_share, wait_key = float(run.device_queue["wait_ms"].sum()) / step_ms, "getnext_wait_share_pct"
    elif step_ms and run.steps["interval_ms"].notna().any():
        steady = step_means(run.steps)  # the interval is a per-step time: over the steady-state steps
        wait_share, wait_key = steady["interval_ms"] / steady["total_ms"], "interval_share_pct"
    return _DataFeed(name, feeding["empty_pct"], feeding["full_pct"],
                     host_stats["empty_pct"] if host_stats else None,
                     None if wait_share is None else min(wait_share, 1.0), wait_key)


def _starving(feed: _DataFeed) -> bool:
    return feed.empty_pct > QUEUE_EMPTY_PCT


def _children(value) -> list[int]:
    """Child op ids, whether a reader kept the list or the file's text (`[1, 2]`)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    if isinstance(value, str):
        return [int(v) for v in re.findall(r"\d+", value)]
    return [int(v) for v in value]


def _dataset_op_name(op_type: str) -> str:
    """`BatchOp` -> `Batch`, `ImageFolderOp` -> `ImageFolder`."""
    return re.sub(r"Op$", "", op_type)


def _bottleneck(pipeline: pd.DataFrame) -> tuple[pd.Series | None, dict[str, float]]:
    """The slow dataset op by MindInsight's queue-usage rules, with the usages it was judged on."""
    if not len(pipeline):
        return None, {}
    first_rank = pipeline[pipeline["rank"] == pipeline["rank"].min()]
    ops = {int(row.op_id): row for _, row in first_rank.iterrows()}
    gaps = []
    for op_id, row in ops.items():
        child_usages = [ops[c].queue_usage for c in _children(row.children)
                        if c in ops and pd.notna(ops[c].queue_usage)]
        if child_usages and pd.notna(row.queue_usage):
            gaps.append((max(child_usages) - row.queue_usage, op_id, max(child_usages)))
    if gaps:
        gap, op_id, child_usage = max(gaps)
        if gap > PIPELINE_USAGE_GAP:
            return ops[op_id], {"queue_usage_pct": _pct(ops[op_id].queue_usage),
                                "child_queue_usage_pct": _pct(child_usage)}
    sources = [row for row in ops.values() if not _children(row.children) and pd.notna(row.queue_usage)]
    slow_sources = [row for row in sources if row.queue_usage < SOURCE_SLOW_USAGE]
    if slow_sources:
        slowest = min(slow_sources, key=lambda row: row.queue_usage)
        return slowest, {"queue_usage_pct": _pct(slowest.queue_usage)}
    usages = [row.queue_usage for row in ops.values() if pd.notna(row.queue_usage)]
    if usages and min(usages) >= ALL_FULL_USAGE:
        top = _top_measured(ops)
        if top is not None:
            return top, {"min_queue_usage_pct": _pct(min(usages))}
    return None, {}


def _top_measured(ops: dict[int, pd.Series]) -> pd.Series | None:
    """The op nearest the pipeline's root that has a queue: the root itself (MindSpore's op 0) may have none
    (Take, or a 1.x Batch written without metrics), and MindInsight then names the op below it."""
    pending = [row for row in ops.values() if pd.isna(row.parent_id)]
    while pending:
        row = pending.pop(0)
        if pd.notna(row.queue_usage):
            return row
        pending += [ops[child] for child in _children(row.children) if child in ops]
    return None


# Source (leaf) pipeline op type -> the mindspore.dataset class a user writes, for the sources whose class takes
# num_parallel_workers (tests/test_advisor_actions.py checks each against the installed MindSpore).
SOURCE_DATASET_CLASS = {"Cifar": "Cifar10Dataset", "MindRecord": "MindDataset", "TFReader": "TFRecordDataset",
                        "ImageFolder": "ImageFolderDataset", "Mnist": "MnistDataset", "Coco": "CocoDataset",
                        "VOC": "VOCDataset", "CelebA": "CelebADataset", "Manifest": "ManifestDataset",
                        "CSV": "CSVDataset", "TextFile": "TextFileDataset", "Clue": "CLUEDataset"}


def _workers_action(op_type: str | None, workers: int) -> str:
    """The call that gives the slow op more workers; an op without a worker setting of its own (Shuffle,
    Repeat, Take, a source without a known class) gets the general map/batch advice."""
    n = max(2, WORKER_FACTOR * workers)
    if op_type == "Batch":
        return f"dataset.batch(batch_size, num_parallel_workers={n})"
    if op_type == "Map":
        return f"dataset.map(operations=..., num_parallel_workers={n})"
    if op_type == "Generator":
        return f"ds.GeneratorDataset(..., num_parallel_workers={n}, python_multiprocessing=True)"
    if op_type in SOURCE_DATASET_CLASS:
        return f"ds.{SOURCE_DATASET_CLASS[op_type]}(..., num_parallel_workers={n})"
    return f"dataset.map(operations=..., num_parallel_workers={n}) and dataset.batch(..., num_parallel_workers={n})"


def _feed_evidence(feed: _DataFeed) -> dict[str, float]:
    evidence = {f"{feed.queue}_queue_empty_pct": round(feed.empty_pct, 2),
                f"{feed.queue}_queue_full_pct": round(feed.full_pct, 2)}
    if feed.queue == "device" and feed.host_empty_pct is not None:
        evidence["host_queue_empty_pct"] = round(feed.host_empty_pct, 2)
    if feed.wait_share is not None:
        evidence[feed.wait_key] = _pct(feed.wait_share)
    return evidence


@rule("dataset_workers", needs=("queues",))
def dataset_workers(run: Run) -> list[Finding]:
    feed = _data_feed(run)
    if not _starving(feed):
        return [Finding(
            id="data_pipeline_ok", severity="low",
            title=f"Data is not the bottleneck: the {feed.queue} queue was empty in only "
                  f"{feed.empty_pct:.1f} % of samples",
            evidence=_feed_evidence(feed),
            action="none for the data pipeline: the step's bound (perfkit summary, first lines) says where the "
                   "time goes", target=None, est_gain_pct=None)]
    op, usage_evidence = _bottleneck(run.pipeline)
    op_type = _dataset_op_name(str(op.op_type)) if op is not None else None
    # an unknown worker count is taken as 1, so the advice is at least 2 workers
    workers = int(op.workers) if op is not None and pd.notna(op.workers) else 1
    gain = _pct(feed.wait_share) if feed.wait_share is not None else None
    evidence = _feed_evidence(feed) | usage_evidence
    if op is not None:
        evidence["workers"] = workers
    where = f"the {op_type} op is the slowest stage" if op_type else "no single slow op in the pipeline data"
    return [Finding(
        id="dataset_workers", severity=severity_for(gain),
        title=f"Data starves the device: the {feed.queue} queue was empty in {feed.empty_pct:.1f} % of samples; "
              f"{where}",
        evidence=evidence, action=_workers_action(op_type, workers), target=op_type, est_gain_pct=gain)]


# MindInsight: host CPU busy > 80 % -> CPU bound, busy being 100 - idle (its cpu utilisation analyser), which
# counts io wait and the rest as well as user + sys.
HOST_CPU_BUSY_PCT = 80.0


@rule("host_cpu", needs=("queues", "cpu_util"))
def host_cpu(run: Run) -> list[Finding]:
    feed = _data_feed(run)
    if not _starving(feed):
        return []  # a busy host that keeps the queues full is training, not starving the device
    util = run.cpu_util
    readings = util[(util[["user_pct", "sys_pct", "io_pct", "idle_pct"]].fillna(0).sum(axis=1)) > 0]
    if not len(readings):
        raise NotChecked("host CPU utilisation has no non-zero samples")
    busy = host_cpu_busy(readings)
    if busy["busy_pct"] < HOST_CPU_BUSY_PCT:
        return []
    gain = _pct(feed.wait_share) if feed.wait_share is not None else None
    return [Finding(
        id="host_cpu", severity=severity_for(gain),
        title=f"Host CPU {busy['busy_pct']:.1f} % busy while the device waits for data: more workers will not help",
        evidence={"host_cpu_busy_pct": busy["busy_pct"], "host_cpu_user_pct": busy["user_pct"],
                  "host_cpu_sys_pct": busy["sys_pct"], **_feed_evidence(feed)},
        action="dataset.map(operations=..., offload=True) to run augmentations on the device, "
               "or convert the data to MindRecord once so decoding leaves the training loop",
        target=None, est_gain_pct=gain)]


# ---------------------------------------------------------------------------------------------------------
# communication

# msprof-analyze rates an issue High from 5 % of step time.
COMM_MIN_SHARE = 0.05


COMM_SOURCE_LABEL = {"exposed": ("comm_exposed", "not overlapped with compute"),
                     "step_trace_overlap_unknown": ("comm", "step-trace op time, overlap with compute unknown"),
                     "ops_overlap_unknown": ("comm_ops", "op time, overlap with compute unknown")}


@rule("communication", needs=("comm",))
def communication(run: Run) -> list[Finding]:
    """Exposed collective communication (analysis.rank_parts): point-to-point waits are pipeline_stage_imbalance's."""
    per_rank = rank_parts(run).set_index("rank")
    if not len(per_rank):
        return []
    per_rank["share"] = per_rank["communication"] / per_rank["total"]
    share = float(per_rank["communication"].mean() / per_rank["total"].mean())
    if share < COMM_MIN_SHARE:
        return []
    worst = int(per_rank["share"].idxmax())
    name, label = COMM_SOURCE_LABEL[per_rank.loc[worst, "comm_source"]]
    gain = _pct(share)
    # the evidence keeps its names (scripts read them); the values are the collective part alone now
    evidence = {f"{name}_share_pct": gain, f"{name}_ms": _ms(per_rank["communication"].mean()),
                "step_ms": _ms(per_rank["total"].mean())}
    if per_rank["pipeline"].sum() > 0:
        evidence["p2p_exposed_ms"] = _ms(per_rank["pipeline"].mean())
    if len(per_rank) > 1:
        evidence["worst_rank"] = worst
        evidence["worst_rank_share_pct"] = _pct(per_rank.loc[worst, "share"])
    if _torch(run):
        action = ("DistributedDataParallel(model, bucket_cap_mb=...) with larger buckets so gradient all-reduces "
                  "overlap backward (Megatron: --overlap-grad-reduce); a larger per-device batch hides more of it")
    else:
        action = ('ms.set_auto_parallel_context(comm_fusion={"allreduce": {"mode": "auto", "config": None}}) '
                  "to fuse gradient all-reduces so they overlap backward; a larger per-device batch hides more of it")
    return [Finding(
        id="communication", severity=severity_for(gain),
        title=f"Collective communication {label}: {gain:.1f} % of the step",
        evidence=evidence, action=action,
        target=f"rank {worst}" if len(per_rank) > 1 else None, est_gain_pct=gain)]


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


@rule("pipeline_stage_imbalance", needs=("steps",))
def pipeline_stage_imbalance(run: Run) -> list[Finding]:
    parts = rank_parts(run)
    stages = stage_of_rank(run)
    parts["stage"] = parts["rank"].map(stages)
    known = parts[parts["stage"].notna()]
    wait_share = float(parts["pipeline"].mean() / parts["total"].mean()) if len(parts) else 0.0
    if known["stage"].nunique() < 2:
        if not stages and wait_share == 0:
            return []  # no sign of pipeline parallelism
        if wait_share < PIPELINE_MIN_SHARE:
            return []
        stage_text, evidence = "", {}
    else:
        per_stage = known.groupby("stage")[["compute", "pipeline", "total"]].mean()
        spread = float(per_stage["compute"].max() - per_stage["compute"].min()) / float(per_stage["total"].max())
        if spread <= STAGE_SPREAD and wait_share < PIPELINE_MIN_SHARE:
            return []
        slowest = int(per_stage["compute"].idxmax())
        evidence = {f"stage{int(stage)}_compute_ms": _ms(row["compute"]) for stage, row in per_stage.iterrows()}
        evidence |= {f"stage{int(stage)}_pipeline_wait_ms": _ms(row["pipeline"]) for stage, row in per_stage.iterrows()}
        evidence["compute_spread_pct_of_step"] = _pct(spread)
        stage_text = (f"stage {slowest} computes {_ms(per_stage['compute'].max())} ms per step against "
                      f"{_ms(per_stage['compute'].min())} ms on stage {int(per_stage['compute'].idxmin())}; ")
    evidence["pipeline_wait_share_pct"] = _pct(wait_share)
    evidence["step_ms"] = _ms(parts["total"].mean())
    gain = _pct(wait_share)
    if _torch(run):
        action = ("Move layers from the slowest stage to the others (Megatron: --decoder-first-pipeline-num-layers / "
                  "--decoder-last-pipeline-num-layers, or --num-layers-per-virtual-pipeline-stage for an interleaved "
                  "schedule) and use more micro-batches per step (a larger global batch over the same "
                  "--micro-batch-size) so the bubble is a smaller part")
    else:
        action = ("Rebalance layers across stages (cell.pipeline_stage = k for each cell, "
                  "ms.set_auto_parallel_context(pipeline_stages=N)) so each stage computes about as long, and raise "
                  "the micro-batch count (nn.PipelineCell(net, micro_size=M) with a larger M) so the bubble shrinks")
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
    "compute_ms": ("compute time",
                     "The named ranks compute longer per step while the others wait for them in communication: "
                     "compare their kernels with a fast rank's (perfkit compare RANK_DIR FAST_RANK_DIR); look for a "
                     "throttled or shared device, or more work placed on them"),
}


# The spreads that say why a rank is slow: compute it does longer, time its device stood idle (each claims other
# ms of the step, so both may be said); the step total alone only where neither explains it.
SLOW_RANK_CAUSES = ("compute_ms", "idle_ms")


@rule("slow_rank", needs=("ranks",))
def slow_rank(run: Run) -> list[Finding]:
    """Slow ranks among ranks that should match (cluster.rank_groups: within each pipeline stage), with the ranks
    cluster.of_run names: per group, a finding per explaining spread (SLOW_RANK_CAUSES), else the step total's."""
    answer = of_run(run)
    per_rank = answer.per_rank.set_index("rank")
    findings = []
    for group in sorted({tuple(spread["group"]) for spread in answer.findings}):
        spreads = {spread["dimension"]: spread for spread in answer.findings
                   if tuple(spread["group"]) == group and spread["rank_is_slow"]}
        explained = [dimension for dimension in SLOW_RANK_CAUSES if dimension in spreads]
        for column in explained or [dimension for dimension in ("total_ms",) if dimension in spreads]:
            findings.append(_slow_rank_finding(spreads[column], per_rank.loc[list(group)], per_rank))
    return findings


def _slow_rank_finding(spread_finding: dict, group: pd.DataFrame, per_rank: pd.DataFrame) -> Finding:
    column, spread, slow = spread_finding["dimension"], spread_finding["spread"], spread_finding["ranks"]
    what, action = SLOW_RANK_ADVICE[column]
    values = group[column].dropna()
    gain = _pct(float(values.max() - values.median()) / float(per_rank["total_ms"].max()))
    evidence = {"spread_pct_of_step": _pct(spread), "mean_step_ms": _ms(spread_finding["mean_step_ms"])}
    shown = slow + [spread_finding["min_rank"]]  # the slow ranks and the fastest, not every rank of a cluster
    evidence |= {f"rank{r}_{column}": _ms(values[r]) for r in shown}
    return Finding(
        id="slow_rank", severity=severity_for(gain),
        title=f"Rank{'s' if len(slow) > 1 else ''} {', '.join(map(str, slow))} stand{'' if len(slow) > 1 else 's'}"
              f" out in {what}: spread {_pct(spread):.1f} % of the step",
        evidence=evidence, action=action, target=", ".join(f"rank {r}" for r in slow), est_gain_pct=gain)


# ---------------------------------------------------------------------------------------------------------
# tail

# After backward the step still runs the optimizer update (and, multi-device, the last gradient all-reduce).
# On a healthy ResNet-50 step that is a few percent; msprof-analyze flags idle/free time above 10 % of the step,
# and the same bar marks a tail worth acting on.
TAIL_MIN_SHARE = 0.10
# Doubling the batch halves the update's cost per sample; overlapping the all-reduce hides about as much.
TAIL_RECOVERABLE = 0.5


@rule("tail", needs=("step_tail",))
def tail(run: Run) -> list[Finding]:
    steps = step_means(run.steps)
    share = steps["tail_ms"] / steps["total_ms"]
    if share < TAIL_MIN_SHARE:
        return []
    gain = _pct(share * TAIL_RECOVERABLE)
    multi_rank = run.steps["rank"].nunique() > 1
    action = ('ms.set_auto_parallel_context(comm_fusion={"allreduce": {"mode": "auto", "config": None}}) so the '
              "gradient all-reduce overlaps backward instead of trailing it") if multi_rank else \
        ("dataset.batch(2 * batch_size, ...) (with the learning rate scaled) so the fixed optimizer update is "
         "spread over more samples")
    return [Finding(
        id="tail", severity=severity_for(gain),
        title=f"The step tail after backward (optimizer update{', all-reduce' if multi_rank else ''}) is "
              f"{_pct(share):.1f} % of the step",
        evidence={"tail_share_pct": _pct(share), **_known_ms(tail_ms=steps["tail_ms"], step_ms=steps["total_ms"])},
        action=action, target=None, est_gain_pct=gain)]


# ---------------------------------------------------------------------------------------------------------
# host_bound

# "The device is idle most of the step span with no data-queue evidence" (issue 14): half the step.
HOST_BOUND_MIN_SHARE = 0.5


def _top_cell(run: Run) -> str | None:
    """The network cell the op scope names start with (`Default/network-WithLossCell/...` -> network-WithLossCell)."""
    if not len(run.ops):
        return None
    heads = run.ops["name"].astype(str).str.split("/").str[1].dropna()
    return str(heads.mode().iloc[0]) if len(heads) else None


@rule("host_bound", needs=("steps",))
def host_bound(run: Run) -> list[Finding]:
    parts = rank_parts(run)
    if not len(parts):
        return []
    host_ms = float((parts["host"] - parts["transfer"]).mean())  # the feed-mode transfer is sink_mode's
    total = float(parts["total"].mean())
    if parts["data"].sum() > 0 or host_ms / total < HOST_BOUND_MIN_SHARE:
        return []
    share = _pct(host_ms / total)
    pynative = run.meta.mode == "pynative"
    busy_ms = float(parts["compute"].mean())
    evidence = {"host_idle_share_pct": share, **_known_ms(host_idle_ms=host_ms, device_busy_ms=busy_ms, step_ms=total)}
    if _torch(run):
        title = f"Host-bound: the device is idle {share:.1f} % of the step while ops are dispatched one by one"
        action = ("model = torch.compile(model) (torch_npu: the torchair backend) so the step runs as a graph; "
                  "a larger batch gives each launched kernel more work")
    elif pynative:
        cell = _top_cell(run)
        title = (f"PyNative: the device is idle {share:.1f} % of the step while Python dispatches each op")
        action = ("ms.set_context(mode=ms.GRAPH_MODE), or decorate the step function (the one calling "
                  f"{cell or 'the network'}, its loss, grad and optimizer) with @ms.jit so it compiles to one graph")
    else:
        kind = "launch-bound" if _device(run) == "GPU" else "host-bound"
        title = (f"{kind[0].upper()}{kind[1:]}: the {run.meta.device or 'device'} runs ops only "
                 f"{_pct(busy_ms / total):.1f} % of the step; it waits for the host to launch the next one")
        action = ("a larger batch so each kernel does more work per launch; model.train(..., dataset_sink_mode=True) "
                  "so whole steps run on the device without a launch from Python each")
    return [Finding(id="host_bound", severity=severity_for(share), title=title, evidence=evidence, action=action,
                    target=_top_cell(run) if pynative else None, est_gain_pct=share)]


# ---------------------------------------------------------------------------------------------------------
# compile_or_first_call

# MindSpore's own step average leaves the first step out (it carries graph compilation); a first step longer
# than 1.5x the median of the rest is that compilation or warm-up inside the profiled window (issue 13's rule).
FIRST_STEP_OUTLIER = 1.5
# One op instance called once that takes a fifth of all op time in a multi-step window is a one-off: a first
# call (kernel compile, autotune, allocation), not the op type's steady cost.
FIRST_CALL_MIN_SHARE = 0.2


def _first_step_outliers(run: Run) -> dict[int, tuple[float, float]]:
    """rank -> (first step ms, median of the other steps) where the first step is an outlier."""
    outliers = {}
    for rank, steps in run.steps[run.steps["total_ms"].notna()].groupby("rank"):
        steps = steps.sort_values("step")
        if len(steps) < 3:
            continue
        first, rest = float(steps["total_ms"].iloc[0]), float(steps["total_ms"].iloc[1:].median())
        if rest > 0 and first > FIRST_STEP_OUTLIER * rest:
            outliers[int(rank)] = (first, rest)
    return outliers


# A call this many times longer than the same op's other calls is not its steady cost.
FIRST_CALL_OUTLIER = 10.0


def _one_off_calls(run: Run) -> pd.DataFrame:
    """Op calls that take FIRST_CALL_MIN_SHARE of their rank's op time in a multi-step window, alone: an op
    run once (where the files count calls: 1.x detail files have no count, every op reads as run once), or
    one call (`max_ms`, where calls are timed) FIRST_CALL_OUTLIER times the op's other calls. Adds `call_ms`."""
    ops = run.ops
    if not len(ops) or not _has_steps(run) or run.steps.groupby("rank")["step"].nunique().max() < 2:
        return ops.iloc[:0].assign(call_ms=pd.Series(dtype="float64"))
    op_ms = ops.groupby("rank")["total_ms"].transform("sum")
    once = (ops["count"] <= 1) & (ops["count"].median() >= 2)
    others_ms = (ops["total_ms"] - ops["max_ms"]) / (ops["count"] - 1).clip(lower=1)
    outlier = (ops["count"] >= 2) & (ops["max_ms"] > FIRST_CALL_OUTLIER * others_ms)
    call_ms = ops["total_ms"].where(once, ops["max_ms"])
    found = (once | outlier.fillna(False)) & (call_ms >= FIRST_CALL_MIN_SHARE * op_ms)
    return ops[found].assign(call_ms=call_ms[found])


@rule("compile_or_first_call", needs=("steps",))
def compile_or_first_call(run: Run) -> list[Finding]:
    steps, calls = _first_step_outliers(run), _one_off_calls(run)
    if not steps and not len(calls):
        return []
    evidence: dict[str, float] = {}
    said = []
    if steps:
        rank, (first, rest) = max(steps.items(), key=lambda item: item[1][0] / item[1][1])
        evidence |= {"first_step_ms": _ms(first), "median_other_steps_ms": _ms(rest), "rank": rank}
        said.append(f"the first profiled step takes {first / rest:.1f}x the others ({_ms(first)} ms)")
    target = None
    if len(calls):
        call = calls.loc[calls["call_ms"].idxmax()]
        op_ms = float(run.ops.loc[run.ops["rank"] == call["rank"], "total_ms"].sum())
        evidence |= {"one_call_ms": _ms(call["call_ms"]), "one_call_share_of_op_time_pct":
                     _pct(call["call_ms"] / op_ms)}
        target = str(call["name"])
        said.append(f"one call of {call['type']} is {_pct(call['call_ms'] / op_ms):.1f} % of all op time")
    # The outlier is not a cost of every step: step means and op-type shares that include it mislead.
    if _torch(run):
        action = ("profile after warm-up: torch_npu.profiler.profile(schedule=torch_npu.profiler.schedule("
                  "wait=1, warmup=1, active=N)) and prof.step() each step")
    else:
        action = ("profile after warm-up: mindspore.Profiler(schedule=mindspore.profiler.schedule(wait=1, warmup=1, "
                  "active=N)) with profiler.step() each step, or `perfkit profile --warmup 1`; then judge the op "
                  "types on the steady steps")
    return [Finding(
        id="compile_or_first_call", severity="medium",
        title="Compilation or first calls inside the profiled window: " + "; ".join(said),
        evidence=evidence, action=action, target=target, est_gain_pct=None)]


# ---------------------------------------------------------------------------------------------------------
# compute_bound

# The op types named: the largest ones until they cover this share of op time, at most COMPUTE_TOP_TYPES.
COMPUTE_TYPES_COVER = 0.5
COMPUTE_TOP_TYPES = 5


@rule("compute_bound", needs=("steps", "op_types"))
def compute_bound(run: Run) -> list[Finding]:
    """Where the step's bound is compute: which op types take the time, and what to try on this device."""
    where = bound(run)
    if where.kind != "compute":
        return []
    shares = op_type_shares(run)
    covered = shares["share"].cumsum()
    top = shares[(covered.shift(fill_value=0.0) < COMPUTE_TYPES_COVER)].head(COMPUTE_TOP_TYPES)
    device = _device(run)
    if _torch(run):
        action = ("with torch.autocast(device_type='npu', dtype=torch.bfloat16) if the model runs float32; "
                  "check the top types' shapes (channels in multiples of 16)")
    elif device == "CPU":
        action = ("ONEDNN_MAX_CPU_ISA set to the best ISA the CPU has; a larger batch per step; the ops above "
                  "are where a smaller or fused network gains")
    else:
        action = ("ms.set_context(enable_graph_kernel=True) to fuse small ops; amp_level O2/O3 if the network runs "
                  "float32; channels in multiples of 16 for the top types")
    listed = ", ".join(f"{row.type} {_pct(row.share):.1f} %" for row in top.itertuples())
    return [Finding(
        id="compute_bound", severity="low",
        title=f"Compute-bound ({_pct(where.share('compute')):.1f} % of the step computes): {listed} of op time",
        evidence={"compute_share_of_step_pct": _pct(where.share("compute")),
                  **{f"{row.type}_share_pct": _pct(row.share) for row in top.itertuples()}},
        action=action, target=str(top["type"].iloc[0]) if len(top) else None, est_gain_pct=None)]


# ---------------------------------------------------------------------------------------------------------
# kernel_efficiency

# Op types whose FLOPs follow from their input shapes, grouped into families whose members do comparable work:
# a conv layer's forward, input-gradient and filter-gradient kernels do the same multiply-adds, so their GFLOP/s
# should be close. BatchNorm is memory-bound: compared only with BatchNormGrad, by per-element arithmetic
# (forward train: mean 1, variance 3, normalise 2, scale+shift 2; backward ~ 10 with its two reductions).
DENSE_TYPES = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul")
BATCHNORM_FLOPS_PER_ELEMENT = {"BatchNorm": 8, "BatchNormGrad": 10}
# Calibrated on 7 real MindSpore 2.10 CPU ResNet-50 runs (README, "kernel_efficiency calibration"): healthy runs
# (AVX2 and default ISA, 32 and 64 px, batch 8 and 16) put their slowest big group at >= 0.33x the best
# reference; oneDNN's reference kernel is reported to run forward 3x3 Conv2D ~100x (0.01x) slower than its
# filter gradient. 0.1 ("10x slower than comparable work") leaves ~3x margin on the healthy side and 10x on the
# broken one, and keeps the ~2x uncertainty of the BatchNorm per-element counts harmless.
KERNEL_SLOW_RATIO = 0.1
# A group must take this share of op time to be worth a finding (msprof-analyze: 5 % of step is an issue)...
KERNEL_MIN_TIME_SHARE = 0.05
# ...and a reference group must do this share of its family's FLOPs, so a tiny op's lucky timing sets no bar.
KERNEL_MIN_REFERENCE_FLOPS_SHARE = 0.05
# A call under 10 MFLOP takes ~0.1 ms at CPU speeds, where the ~10-50 us a kernel launch or oneDNN primitive
# lookup costs is a large part: its rate measures overhead, not the kernel.
KERNEL_MIN_CALL_FLOPS = 1e7
# A conv whose multiply-adds per output (Cin/groups * kh * kw) are fewer than this does not fill a vector unit
# (a first layer on 3 colour channels: 27); oneDNN and cuDNN run it far below their peak by design.
KERNEL_MIN_REDUCTION = 32
# One op instance, called once, holding more than half of a group's time is a first call or a compile.
KERNEL_ONE_CALL_SHARE = 0.5


def _parse_shapes(text) -> tuple[tuple[int, ...], ...]:
    return _parse_shape_text(text) if isinstance(text, str) else ()


@functools.lru_cache(maxsize=1 << 16)
def _parse_shape_text(text: str) -> tuple[tuple[int, ...], ...]:
    """`32,3,224,224;64,3,7,7` -> ((32, 3, 224, 224), (64, 3, 7, 7)); cached: a million ops share a few
    hundred shape strings."""
    shapes = []
    for part in text.split(";"):
        dims = [d for d in part.replace("[", "").replace("]", "").split(",") if d.strip()]
        try:
            shapes.append(tuple(int(float(d)) for d in dims))
        except ValueError:
            shapes.append(())
    return tuple(shapes)


def _cell_name(name: str) -> str:
    """The Conv2d cell's own name: `A/conv2-Conv2d/Conv2D-op0` and
    `Gradients/A/conv2-Conv2d/Grad_Conv2D/Conv2DBackpropFilter-op6` both give `conv2-Conv2d`."""
    parts = name.split("/")[:-1]
    while parts and parts[-1].lower().startswith("grad"):
        parts.pop()
    return parts[-1] if parts else ""


def _matmul_flops(shapes: list[list[int]]) -> float | None:
    if len(shapes) < 2 or len(shapes[0]) != 2 or len(shapes[1]) != 2:
        return None
    (a0, a1), (b0, b1) = shapes[0], shapes[1]
    for m, k, kb, n in ((a0, a1, b0, b1), (a0, a1, b1, b0), (a1, a0, b0, b1), (a1, a0, b1, b0)):
        if k == kb:
            return 2.0 * m * k * n
    return None


def _conv_flops(rows: pd.DataFrame) -> dict[str, tuple[float, str]]:
    """FLOPs per execution and kernel size (`3x3`) of each conv op whose work the shapes determine.

    Forward Conv2D(x, w), Conv2DBackpropInput(dout, w, size) and Conv2DBackpropFilter(dout, x, size) of one
    layer do the same multiply-adds, 2*N*Cout*Hout*Wout*Cin/g*kh*kw, but each shows only two of x, w, dout.
    The missing one is looked up among the other kernels by shape: the output size (stride and padding are not
    recorded) from gradient kernels with the same weight or input, the filter from forward convs with the same
    input and output; where shapes leave a choice, the cell name (`conv2-Conv2d`) decides (scope names alone
    do not: graph mode files reused cells' gradients under the first instance's scope), else the op is left out.
    """
    convs = []
    for name, op_type, shapes in zip(rows["name"].tolist(), rows["type"].tolist(), rows["input_shapes"].tolist()):
        inputs = _parse_shapes(shapes)
        if len(inputs) >= 2 and len(inputs[0]) == 4 and len(inputs[1]) == 4:
            convs.append((name, op_type, inputs[0], inputs[1]))
    out_by_weight: dict[tuple, set] = {}
    out_by_input: dict[tuple, set] = {}
    for _, op_type, first, second in convs:
        if op_type == "Conv2DBackpropInput":                  # (dout, w)
            out_by_weight.setdefault((first[0], second), set()).add(first)
        elif op_type == "Conv2DBackpropFilter":               # (dout, x)
            out_by_input.setdefault((second, first[1]), set()).add(first)
    layers: dict[str, tuple[tuple, tuple]] = {}               # op name -> (dout, w)
    weights_by_io: dict[tuple, dict[str, set]] = {}
    for name, op_type, first, second in convs:
        if op_type == "Conv2DBackpropInput":
            layers[name] = (first, second)
        elif op_type == "Conv2D":                             # (x, w)
            outs = out_by_weight.get((first[0], second)) or out_by_input.get((first, second[0])) or set()
            if len(outs) == 1:
                dout = next(iter(outs))
                layers[name] = (dout, second)
                weights_by_io.setdefault((first, dout), {}).setdefault(_cell_name(name), set()).add(second)
    for name, op_type, first, second in convs:
        if op_type == "Conv2DBackpropFilter":
            by_cell = weights_by_io.get((second, first), {})
            candidates = set().union(*by_cell.values()) if by_cell else set()
            if len(candidates) > 1:
                candidates = by_cell.get(_cell_name(name), set())
            if len(candidates) == 1:
                layers[name] = (first, next(iter(candidates)))
    flops = {}
    for name, (dout, weight) in layers.items():
        (n, c_out, h_out, w_out), (_, c_in_per_group, kh, kw) = dout, weight
        flops[name] = (2.0 * n * c_out * h_out * w_out * c_in_per_group * kh * kw, f"{kh}x{kw}",
                       f"{dout}|{weight}", c_in_per_group * kh * kw)
    return flops


def op_flops(ops: pd.DataFrame) -> pd.DataFrame:
    """FLOPs over the run for each op whose work follows from its input shapes:
    name, type, group (type and kernel size), family (which groups are comparable), flops, total_ms,
    layer (the work's identity: a conv layer's forward and gradient kernels share it), reduction (a conv's
    multiply-adds per output element), calls."""
    rows = ops[ops["type"].isin(DENSE_TYPES + tuple(BATCHNORM_FLOPS_PER_ELEMENT))]
    conv = _conv_flops(rows[rows["type"].str.startswith("Conv2D")])
    out = []
    # plain lists: iterating Arrow-backed columns row by row costs microseconds a value
    for name, op_type, shapes, count, total_ms in zip(*(rows[c].tolist() for c in (
            "name", "type", "input_shapes", "count", "total_ms"))):
        inputs = _parse_shapes(shapes)
        reduction = math.nan
        if op_type in BATCHNORM_FLOPS_PER_ELEMENT:
            if not inputs or not inputs[0]:
                continue
            flops = float(math.prod(inputs[0])) * BATCHNORM_FLOPS_PER_ELEMENT[op_type]
            group, family, layer = op_type, "batchnorm", str(inputs[0])
        elif op_type == "MatMul":
            flops, group, family, layer = _matmul_flops(inputs), "MatMul", "dense", str(sorted(inputs[:2]))
        elif name in conv:
            flops, kernel, layer, reduction = conv[name]
            group, family = f"{op_type} {kernel}", "dense"
        else:
            continue
        if flops:
            out.append({"name": name, "type": op_type, "group": group, "family": family,
                        "flops": flops * count, "total_ms": total_ms, "layer": layer, "reduction": reduction,
                        "calls": count})
    return pd.DataFrame(out, columns=OP_FLOPS_COLUMNS)


OP_FLOPS_COLUMNS = ["name", "type", "group", "family", "flops", "total_ms", "layer", "reduction", "calls"]


def _kernel_action(run: Run, group: str) -> str:
    if _device(run) == "CPU":
        return ("export ONEDNN_MAX_CPU_ISA=AVX2 before starting Python (or os.environ['ONEDNN_MAX_CPU_ISA'] = 'AVX2' "
                "before import mindspore): oneDNN then uses its AVX2 kernels instead of the reference kernel")
    return (f"Check the input format and dtype of {group}: Ascend kernels want channels in multiples of 16 "
            "(float16), GPU tensor cores float16 with channels in multiples of 8")


def _comparable(work: pd.DataFrame) -> pd.DataFrame:
    """The ops whose speed says something about their kernel: not tiny calls, not convs too shallow to fill
    the vector units."""
    per_call = work["flops"] / work["calls"].clip(lower=1)
    shallow = work["reduction"].notna() & (work["reduction"] < KERNEL_MIN_REDUCTION)
    return work[(per_call >= KERNEL_MIN_CALL_FLOPS) & ~shallow]


def _dominated_by_one_call(group: pd.DataFrame) -> bool:
    """One op instance called once holds most of the group's time: a first call or compile, not a slow kernel
    (compile_or_first_call's finding)."""
    once = group[group["calls"] <= 1]
    return bool(len(once)) and float(once["total_ms"].max()) > KERNEL_ONE_CALL_SHARE * float(group["total_ms"].sum())


def _rate(ops: pd.DataFrame) -> float:
    return float(ops["flops"].sum()) / float(ops["total_ms"].sum()) / 1e6  # GFLOP/s


@rule("kernel_efficiency", needs=("op_shapes",))
def kernel_efficiency(run: Run) -> list[Finding]:
    """A kernel group far slower than the same work done by another group: the same layers (a conv layer's
    forward and its two gradients do the same multiply-adds; BatchNorm and its gradient read the same tensor)."""
    work = op_flops(run.ops)
    work = work[work["total_ms"] > 0]
    if not len(work):
        raise NotChecked("no Conv2D / MatMul / BatchNorm op with usable input shapes")
    op_ms = float(run.ops["total_ms"].sum())
    work = _comparable(work)
    findings = []
    for _, family in work.groupby("family"):
        family_flops = float(family["flops"].sum())
        groups = dict(tuple(family.groupby("group")))
        for name, slow in groups.items():
            slow_ms = float(slow["total_ms"].sum())
            if slow_ms / op_ms < KERNEL_MIN_TIME_SHARE or _dominated_by_one_call(slow):
                continue
            best = None  # (ratio, reference name, slow rate, reference rate) on the layers both groups run
            for reference_name, reference in groups.items():
                if reference_name == name:
                    continue
                layers = set(slow["layer"]) & set(reference["layer"])
                mine, theirs = slow[slow["layer"].isin(layers)], reference[reference["layer"].isin(layers)]
                if not layers or theirs["flops"].sum() < KERNEL_MIN_REFERENCE_FLOPS_SHARE * family_flops:
                    continue
                ratio = _rate(mine) / _rate(theirs)
                if best is None or ratio < best[0]:
                    best = (ratio, reference_name, _rate(mine), _rate(theirs))
            if best is None or best[0] >= KERNEL_SLOW_RATIO:
                continue
            ratio, reference_name, rate, reference_rate = best
            saved_ms = slow_ms * (1.0 - ratio)  # its time at the reference group's rate
            # never more than the share these ops take (of the step, and of all op time)
            gain = min(_gain_pct(run, saved_ms, op_ms), _pct(slow_ms / op_ms))
            findings.append(Finding(
                id="kernel_efficiency", severity=severity_for(gain),
                title=f"{name} runs at {rate:.2f} GFLOP/s, {1 / ratio:.0f}x slower than "
                      f"{reference_name} ({reference_rate:.2f} GFLOP/s) on the same layers' work",
                evidence={"gflops_per_s": round(rate, 3), "reference_gflops_per_s": round(reference_rate, 3),
                          "ratio_to_reference": round(float(ratio), 4),
                          "share_of_op_time_pct": _pct(slow_ms / op_ms),
                          "total_ms": _ms(slow_ms), "ops": int(len(slow))},
                action=_kernel_action(run, name), target=name, est_gain_pct=gain))
    return findings


# ---------------------------------------------------------------------------------------------------------
# memory_headroom

# Fire when the framework allocator's peak reserved memory is under this share of the capacity: the batch can
# then at least double before memory runs out (perfkit's own bar; the arithmetic in the finding says how far).
HEADROOM_MAX_USE = 0.5
# Size the batch to this share of the capacity, not all of it: the pool's fragmentation and the workspace
# kernels ask for at run time need room (MindSpeed's fragmentation guide sees 1-3 GB of 64 GB go that way).
HEADROOM_SAFETY = 0.9


@rule("memory_headroom", needs=("memory", "memory_capacity"))
def memory_headroom(run: Run) -> list[Finding]:
    capacity = float(run.meta.memory_capacity_mb)
    samples = framework_memory(run.memory)
    peaks = memory_peaks(run)
    rank = max(peaks, key=lambda r: peaks[r]["peak_allocated_mb"] or 0.0)  # the rank memory binds first
    peak = peaks[rank]["peak_allocated_mb"]
    used = peaks[rank]["peak_reserved_mb"] or peak
    if used >= HEADROOM_MAX_USE * capacity:
        return []
    # What stays allocated between steps (weights, gradients, optimizer state) does not grow with the batch;
    # the rest (activations, workspace) does, in proportion.
    static = float(samples.loc[samples["rank"] == rank, "allocated_mb"].min())
    per_batch = peak - static
    if per_batch <= 0:
        raise NotChecked("memory does not rise during the steps: the batch's share of it cannot be told")
    factor = (HEADROOM_SAFETY * capacity - static) / per_batch
    batch = run.meta.config.get("batch_size") if isinstance(run.meta.config, dict) else None
    evidence = {"peak_allocated_mb": round(peak, 1), "peak_reserved_mb": round(used, 1),
                "capacity_mb": round(capacity, 1), "static_mb": round(static, 1),
                "per_batch_mb": round(per_batch, 1), "batch_growth_factor": round(factor, 2)}
    arithmetic = (f"({HEADROOM_SAFETY:g} x {capacity:,.0f} MB capacity - {static:,.1f} MB that stays between steps) "
                  f"/ {per_batch:,.1f} MB the batch needs = {factor:.1f}x")
    if isinstance(batch, int) and batch > 0:
        fitting = int(batch * factor)
        evidence |= {"batch_size": batch, "batch_size_that_fits": fitting}
        action = (f"dataset.batch({fitting}, ...) fits in memory (batch {batch} x {arithmetic}); raise the batch "
                  "towards it, with the learning rate scaled, so each step does more work per fixed cost")
    else:
        action = (f"The batch can grow about {factor:.1f}x before memory runs out ({arithmetic}): "
                  "dataset.batch(that size, ...), with the learning rate scaled")
    where = "host" if _device(run) == "CPU" else "device"
    return [Finding(
        id="memory_headroom", severity="low",
        title=f"The peak uses {100 * used / capacity:.1f} % of the {where} memory: the batch can grow "
              f"{factor:.1f}x", evidence=evidence, action=action,
        target=f"rank {rank}" if len(peaks) > 1 else None, est_gain_pct=None)]


# ---------------------------------------------------------------------------------------------------------
# memory_fragmentation

# MindSpeed's memory-fragmentation guide: a gap of more than 1 GB between reserved and allocated memory means
# the pool is badly fragmented. The ratio keeps a big model's small relative gap out.
FRAGMENTATION_MIN_GAP_MB = 1024.0
FRAGMENTATION_MIN_RATIO = 1.5


@rule("memory_fragmentation", needs=("memory",))
def memory_fragmentation(run: Run) -> list[Finding]:
    peaks = memory_peaks(run)
    worst = max(peaks, key=lambda r: (peaks[r]["peak_reserved_mb"] or 0.0) - (peaks[r]["peak_allocated_mb"] or 0.0))
    allocated, reserved = peaks[worst]["peak_allocated_mb"], peaks[worst]["peak_reserved_mb"]
    if reserved is None or allocated is None or allocated <= 0:
        raise NotChecked("the allocator records no reserved memory")
    gap = reserved - allocated
    if gap < FRAGMENTATION_MIN_GAP_MB or reserved < FRAGMENTATION_MIN_RATIO * allocated:
        return []
    torch = "PTA" in set(framework_memory(run.memory)["component"].dropna().astype(str).str.split("+").sum())
    action = ("export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True before starting Python, so freed blocks "
              "are remapped instead of held" if torch else
              "export MS_ALLOC_CONF=enable_vmm:true before starting Python (MindSpore's virtual-memory pool, which "
              "defragments), or mindspore.runtime.set_memory(optimize_level=\"O1\") for static memory reuse")
    return [Finding(
        id="memory_fragmentation", severity="medium",
        title=f"The allocator holds {gap:,.0f} MB more than it hands out ({reserved:,.0f} MB reserved for "
              f"{allocated:,.0f} MB allocated at peak)",
        evidence={"peak_allocated_mb": round(allocated, 1), "peak_reserved_mb": round(reserved, 1),
                  "gap_mb": round(gap, 1), "reserved_to_allocated": round(reserved / allocated, 2)},
        action=action, target=f"rank {worst}" if len(peaks) > 1 else None, est_gain_pct=None)]


# ---------------------------------------------------------------------------------------------------------
# slow_link

# msprof's nominal link rates (analysis/common_func number_constant: RDMA_BANDWIDTH_V2_1_0 12.5,
# HCCS_BANDWIDTH_V2_1_0 18, PCIE_BANDWIDTH_V2_1_0 20 GB/s; Atlas A2 is faster: HCCS 28, RDMA 25). The lowest
# it lists, since the files do not say which chip ran: a link below these is slow on any Ascend device.
# SIO has no published rate: it is compared with its peers only.
NOMINAL_LINK_GB_S = {"HCCS": 18.0, "PCIE": 20.0, "RDMA": 12.5}
# msprof's BANDWIDTH_THRESHOLD: a link below 0.8 of its rate is "inefficient"; the same bar against the
# median of the links of its type.
SLOW_LINK_UTILIZATION = 0.8
# Smaller transfers are latency-bound and never reach the rate (msprof-analyze advisor packet.yaml:
# min_sdma_size 16 MB, min_rdma_size 1 MB).
SLOW_LINK_MIN_MB = {"HCCS": 16.0, "PCIE": 16.0, "SIO": 16.0, "RDMA": 1.0}
SLOW_LINKS_NAMED = 5


@rule("slow_link", needs=("comm_links",))
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
    gain = _gain_pct(run, lost_ms, float(run.comm_links["transit_ms"].sum()))
    worst = slow.iloc[0]
    named = slow.head(SLOW_LINKS_NAMED)
    evidence = {"slow_links": len(slow), "worst_bandwidth_gb_s": round(float(worst["bandwidth_gb_s"]), 3),
                "median_bandwidth_gb_s": round(float(worst["median_gb_s"]), 3),
                "worst_size_mb": round(float(worst["size_mb"]), 3), "lost_ms_per_step": _ms(lost_ms / steps)}
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


@rule("comm_wait", needs=("comm_ops",))
def comm_wait(run: Run) -> list[Finding]:
    by_rank = {rank: entry for rank, entry in communication_by_rank(run).items() if entry["wait_ratio"] is not None}
    if not by_rank:
        raise NotChecked("no communication op with transit or wait time")
    waiting = max(by_rank, key=lambda rank: by_rank[rank]["wait_ratio"])
    ratio = by_rank[waiting]["wait_ratio"]
    if ratio < COMM_WAIT_DOMINANT:
        return []
    ops = run.comm_ops[run.comm_ops["rank"] == waiting]
    wait_ms = float(ops["wait_ms"].sum()) / max(1, int(ops["step"].nunique()))
    step = step_means(run.steps[run.steps["rank"] == waiting]) if _has_steps(run) else None
    gain = _pct(wait_ms / step["total_ms"]) if step and step["total_ms"] else None
    fastest = min(by_rank, key=lambda rank: by_rank[rank]["wait_ratio"])
    spread = ratio - by_rank[fastest]["wait_ratio"]
    evidence = {f"rank{rank}_wait_ratio": round(entry["wait_ratio"], 3) for rank, entry in by_rank.items()}
    evidence |= {"wait_ms_per_step": _ms(wait_ms), "wait_ratio_spread": round(spread, 3)}
    if spread > COMM_WAIT_SPREAD:
        slow, target = f"rank {fastest}", f"rank {fastest}"
        action = (f"Rank {fastest} is the one the others wait for: it reaches the collectives late. Compare its "
                  f"compute and data wait with rank {waiting}'s (perfkit compare RANK{fastest}_DIR RANK{waiting}_DIR): "
                  "a slower or shared device, more work placed on it, or a slower data shard")
    else:
        peers = sorted(set(run.comm_links["dst"].astype(int)) - set(by_rank)) if len(run.comm_links) else []
        slow, target = "a rank that was not profiled", None
        action = ("Every profiled rank waits about as much: the slow rank is elsewhere. Profile the other ranks of "
                  "the group" + (f" ({', '.join(map(str, peers[:16]))})" if peers else "")
                  + " and run perfkit ranks over all of them")
    return [Finding(
        id="comm_wait", severity=severity_for(gain, default="medium"),
        title=f"Rank {waiting}'s collectives spend {100 * ratio:.0f} % of their transfer time waiting: "
              f"the slow one is {slow}",
        evidence=evidence, action=action, target=target, est_gain_pct=gain)]

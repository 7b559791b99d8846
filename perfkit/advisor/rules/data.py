"""Data rules: is the input pipeline what the device waits for, and what to change in it.

sink_mode (feed mode's per-step batch transfer), dataset_workers (a starving queue and the slow pipeline op; says
data_pipeline_ok when the queue the device reads from stays full), host_cpu (a host too busy for more workers).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import pandas as pd

from ...analysis.measures import MIN_QUEUE_SAMPLES, QUEUE_EMPTY_PCT, host_cpu_busy, queue_stats, step_means
from ...core.host import capped_workers, recorded_cpus
from ...core.model import Run
from ..change import Change
from ..finding import Finding, NotChecked, severity_for
from ..registry import device_name, has_steps, known_ms, percent, rule, run_step_ms

# ---------------------------------------------------------------------------------------------------------
# sink_mode

# TensorFlow's input analysis calls 5-20 % of the step "moderately input-bound"; msprof-analyze rates an issue
# High from 5 % of step time. MindInsight's absolute 0.5 ms is meaningless for long steps, so: share of step.
SINK_MIN_INTERVAL_SHARE = 0.05


def steady_interval_share(steps: dict | None) -> float | None:
    """The interval's share of the step over the steady-state steps (`step_means`; the interval is a per-step
    time); None where those steps lack either (a file may give intervals only for steps the means leave out)."""
    if not steps or not steps["total_ms"] or steps["interval_ms"] is None:
        return None
    return steps["interval_ms"] / steps["total_ms"]


def sink_mode_applies(run: Run) -> bool:
    """sink_mode's finding is given: a device that can sink, in feed mode, its step interval over
    SINK_MIN_INTERVAL_SHARE of the step (the interval it words as the per-step batch transfer)."""
    if device_name(run) == "CPU" or run.meta.data_mode != "feed" or not has_steps(run):
        return False
    share = steady_interval_share(step_means(run.steps))
    return share is not None and share >= SINK_MIN_INTERVAL_SHARE


@rule("sink_mode", needs=("device", "sinkable_device", "step_split"), claims=("host_transfer", "data_wait", "unknown"))
def sink_mode(run: Run) -> list[Finding]:
    if run.meta.data_mode is None:
        raise NotChecked("data mode unknown (no device_queue / dataset_iterator file and no manifest)")
    if run.meta.data_mode == "sink":
        return []
    steps = step_means(run.steps)
    share = steady_interval_share(steps)
    if share is None:
        raise NotChecked("no steady step with both a step time and an interval")
    if not sink_mode_applies(run):
        return []
    # Sink mode overlaps the next batch's transfer with this step's compute: the interval is what it can hide.
    gain = percent(share)
    return [Finding(
        id="sink_mode", severity=severity_for(gain),
        title=f"Feed mode: the step interval (device idle before forward: the per-step batch transfer) is "
              f"{gain:.1f} % of the step",
        evidence={"interval_share_pct": gain, **known_ms(interval_ms=steps["interval_ms"],
                                                          fwd_bwd_ms=steps["fwd_bwd_ms"], step_ms=steps["total_ms"])},
        action="model.train(..., dataset_sink_mode=True)",
        target=None, est_gain_pct=gain, change=Change("sink_mode", True))]


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
    step_ms = run_step_ms(run)
    if step_ms and len(run.device_queue) and run.device_queue["wait_ms"].notna().any():
        wait_share, wait_key = float(run.device_queue["wait_ms"].sum()) / step_ms, "getnext_wait_share_pct"
    elif step_ms and (interval_share := steady_interval_share(step_means(run.steps))) is not None:
        wait_share, wait_key = interval_share, "interval_share_pct"
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
            return ops[op_id], {"queue_usage_pct": percent(ops[op_id].queue_usage),
                                "child_queue_usage_pct": percent(child_usage)}
    sources = [row for row in ops.values() if not _children(row.children) and pd.notna(row.queue_usage)]
    slow_sources = [row for row in sources if row.queue_usage < SOURCE_SLOW_USAGE]
    if slow_sources:
        slowest = min(slow_sources, key=lambda row: row.queue_usage)
        return slowest, {"queue_usage_pct": percent(slowest.queue_usage)}
    usages = [row.queue_usage for row in ops.values() if pd.notna(row.queue_usage)]
    if usages and min(usages) >= ALL_FULL_USAGE:
        top = _top_measured(ops)
        if top is not None:
            return top, {"min_queue_usage_pct": percent(min(usages))}
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


def _workers_action(op_type: str | None, n: int) -> str:
    """The call that gives the slow op `n` workers; an op without a worker setting of its own (Shuffle,
    Repeat, Take, a source without a known class) gets the general map/batch advice."""
    if op_type == "Batch":
        return f"dataset.batch(batch_size, num_parallel_workers={n})"
    if op_type == "Map":
        return f"dataset.map(operations=..., num_parallel_workers={n})"
    if op_type == "Generator":
        return f"ds.GeneratorDataset(..., num_parallel_workers={n}, python_multiprocessing=True)"
    if op_type in SOURCE_DATASET_CLASS:
        return f"ds.{SOURCE_DATASET_CLASS[op_type]}(..., num_parallel_workers={n})"
    return f"dataset.map(operations=..., num_parallel_workers={n}) and dataset.batch(..., num_parallel_workers={n})"


def _workers_change(op_type: str | None, n: int) -> Change | None:
    """_workers_action as a setting: the named op's workers, or map and batch both; None for a source op
    without a known class, whose workers cannot be set by name."""
    if op_type in ("Batch", "Map"):
        return Change("dataset_workers", n, op=op_type.lower())
    if op_type in SOURCE_DATASET_CLASS:
        return Change("dataset_workers", n, op=SOURCE_DATASET_CLASS[op_type])
    return None if op_type == "Generator" else Change("dataset_workers", n, op="all")


def _feed_evidence(feed: _DataFeed) -> dict[str, float]:
    evidence = {f"{feed.queue}_queue_empty_pct": round(feed.empty_pct, 2),
                f"{feed.queue}_queue_full_pct": round(feed.full_pct, 2)}
    if feed.queue == "device" and feed.host_empty_pct is not None:
        evidence["host_queue_empty_pct"] = round(feed.host_empty_pct, 2)
    if feed.wait_share is not None:
        evidence[feed.wait_key] = percent(feed.wait_share)
    return evidence


@rule("dataset_workers", needs=("queues",), claims=("data_wait",))
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
    cpus, cpus_source = recorded_cpus(run.meta.host)
    n = capped_workers(max(2, WORKER_FACTOR * workers), cpus)
    evidence = _feed_evidence(feed) | usage_evidence
    if op is not None:
        evidence["workers"] = workers
    if cpus is not None:
        evidence["host_cpus"] = cpus
    where = f"the {op_type} op is the slowest stage" if op_type else "no single slow op in the pipeline data"
    title = f"Data starves the device: the {feed.queue} queue was empty in {feed.empty_pct:.1f} % of samples; {where}"
    if n <= workers:  # the host's CPUs are all working for that op already: more workers are refused
        return [Finding(
            id="dataset_workers", severity=severity_for(percent(feed.wait_share) if feed.wait_share else None),
            title=f"{title}; it already runs {workers} workers, the most MindSpore allows on this host "
                  f"({cpus_source})",
            evidence=evidence, target=op_type, est_gain_pct=None,
            action="the CPU limit is reached: more workers would be refused (num_parallel_workers at most the CPU "
                   "count). Make each sample cheaper (vectorise or cache the slow map function, decode once to "
                   "MindRecord), run augmentations on the device (dataset.map(..., offload=True)), or train on a host "
                   "with more CPUs")]
    gain = _workers_gain(feed.wait_share, n / workers)
    action = _workers_action(op_type, n)
    if cpus is None:
        action += f" (at most the training host's CPU count: MindSpore refuses more; {cpus_source})"
    elif n < WORKER_FACTOR * workers:
        action += f" ({n}: the most MindSpore allows on this host, {cpus_source})"
    return [Finding(
        id="dataset_workers", severity=severity_for(gain), title=title,
        evidence=evidence, action=action, target=op_type, est_gain_pct=gain, change=_workers_change(op_type, n))]


def _workers_gain(wait_share: float | None, factor: float) -> float | None:
    """What `factor` times the slow op's workers could win, in percent of the step: a data-bound step takes its
    pipeline's time per batch, which k times the workers divide by k at best, and never below the step's compute
    (1 - wait share); None where the wait share is unknown."""
    if wait_share is None:
        return None
    return percent(1.0 - max(1.0 - wait_share, 1.0 / factor))


# MindInsight: host CPU busy > 80 % -> CPU bound, busy being 100 - idle (its cpu utilisation analyser), which
# counts io wait and the rest as well as user + sys.
HOST_CPU_BUSY_PCT = 80.0


@rule("host_cpu", needs=("queues", "cpu_util"), claims=("data_wait",))
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
    gain = percent(feed.wait_share) if feed.wait_share is not None else None
    return [Finding(
        id="host_cpu", severity=severity_for(gain),
        title=f"Host CPU {busy['busy_pct']:.1f} % busy while the device waits for data: more workers will not help",
        evidence={"host_cpu_busy_pct": busy["busy_pct"], "host_cpu_user_pct": busy["user_pct"],
                  "host_cpu_sys_pct": busy["sys_pct"], **_feed_evidence(feed)},
        action="dataset.map(operations=..., offload=True) to run augmentations on the device, "
               "or convert the data to MindRecord once so decoding leaves the training loop",
        target=None, est_gain_pct=gain)]

"""The step ledger: every ms of every profiled step attributed once, to one cause.

`ledger(run)` has one row per (rank, step, cause): `ms`, the `source` it was read or derived from, and whether
it was `measured` (read from a file's column) or derived (op time spread per step, shares by scope, a remainder).
The identity holds for every (rank, step): the causes add up to the step's total. What the files cannot tell
is `unknown`, never spread over the other causes. Steps whose total is unknown (the first step of a run whose
steps are marked by op launches) have no ms to attribute and no rows.

Every number about where the time goes reads it: the bound (`bound`, the mean steady step rolled up into
BOUND_PARTS), the per-rank split (`rank_parts`), `perfkit ranks`, the Overview and Ranks pages, the report,
and the advisor, whose findings claim ledger ms (`claim`), so two findings never count the same time.
The causes, their labels and their sources per layout: docs/ledger.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..core.causes import BOUND_PART_LABELS, BOUND_PARTS, CAUSES, COMM_OVERLAP_UNKNOWN_LABEL
from ..core.model import Run, kept_on_run
from ..io.formats import ops_cover_device
from . import comm_split
from . import measures
from .steady import first_step_verdicts

# Launching a kernel costs the host ~10-50 us (a CPU kernel launch or oneDNN primitive lookup; an Ascend task
# launch is of the same order): a graph-mode step whose time with no op running comes to more than 1 ms per op
# call is not waiting for launches but for Python around its graph run: the train loop's callbacks, logging,
# the loop itself.
LAUNCH_GAP_MAX_MS = 1.0
# A step is bound by something other than its compute when that part takes this share of it: TensorFlow's
# input analysis calls >= 20 % of the step "highly input-bound" (docs/formats.md §4); the same bar for every part.
BOUND_MIN_SHARE = 0.20
# Step parts read from the files may exceed the step's total by rounding (10-ns ticks, µs columns): beyond
# this the files contradict themselves, which is said once per run.
PARTS_EXCEED_TOLERANCE_MS = 1e-3

COLUMNS = ["rank", "step", "cause", "ms", "source", "measured", "steady"]
# Where a step's exposed communication was measured: steps derived from timed op executions (CPU, GPU op
# launches) have it from the ops themselves, the others from a step file's column.
# PyNative op durations include the host's dispatch waits: the compute part is not all device compute.
PYNATIVE_COMPUTE_LABEL = "op time (PyNative: includes dispatch waits)"
OWN_OPS_STEP_SOURCES = ("op_timestamps", "first_op_timestamps", "recorded_step_times")
_OWN_OPS = "the step's communication op executions not overlapped by compute ops (their union)"
EXPOSED_SOURCE = {**{source: _OWN_OPS for source in OWN_OPS_STEP_SOURCES}, None: "step file: exposed communication"}


def _per_rank(series: pd.Series, ranks: np.ndarray) -> np.ndarray:
    """A per-rank value looked up for each step row (0 where the rank has none)."""
    return series.reindex(ranks).fillna(0.0).to_numpy(dtype=np.float64)


def _column(steps: pd.DataFrame, name: str) -> np.ndarray:
    if name not in steps:
        return np.full(len(steps), np.nan)
    return steps[name].to_numpy(dtype=np.float64, na_value=np.nan)


def _op_ms_by_pass(run: Run) -> pd.DataFrame:
    """Per rank, compute (non-communication) op time by scope pass (forward / backward / other), over the run."""
    passes = run.op_passes
    if not len(passes):
        return pd.DataFrame(columns=["forward", "backward", "other"], dtype="float64")
    return (passes.pivot_table(index="rank", columns="pass", values="total_ms", aggfunc="sum", fill_value=0.0,
                               observed=True)
            .reindex(columns=["forward", "backward", "other"], fill_value=0.0))


MEASURED_SPLIT = "the collective ops' transit / elapse time per rank"


def _transfer_share(run: Run) -> pd.Series:
    """Per rank, the share of collective op time spent moving data (Transit Time / Elapse Time of
    communication.json, the database's communication tables, hccl_raw); the rest of the op's time it waited
    for its peers."""
    ops = run.comm_ops
    if not len(ops):
        return pd.Series(dtype="float64")
    collective = ops[(ops["kind"] == "collective") & ops["elapse_ms"].notna() & ops["transit_ms"].notna()]
    sums = collective.groupby("rank")[["elapse_ms", "transit_ms"]].sum()
    sums = sums[sums["elapse_ms"] > 0]
    return (sums["transit_ms"] / sums["elapse_ms"]).clip(0.0, 1.0)


def ledger(run: Run) -> pd.DataFrame:
    """One row per (rank, step, cause) with ms > 0 (a step with no time keeps one `unknown` row of 0):
    rank, step, cause (CAUSES), ms, source, measured, steady (the step counts in the step means).
    `attrs["warnings"]` says where the files contradict themselves."""
    return _build(run)


@kept_on_run
def _build(run: Run) -> pd.DataFrame:
    steps = run.steps
    warnings: list[str] = []
    if not len(steps):
        return _frame([], warnings)
    used, first = first_step_verdicts(steps)
    known = steps["total_ms"].notna().to_numpy() & (steps["total_ms"].fillna(-1).to_numpy() >= 0)
    rows = steps[known].reset_index(drop=True)
    steady = used[known]
    first_left_out = set(first.loc[first["reason"].isin(["warmup", "outlier"]), "rank"].tolist())
    is_first = (rows["step"] == rows.groupby("rank")["step"].transform("min")).to_numpy()
    left_out_first = is_first & rows["rank"].isin(first_left_out).to_numpy() & ~steady
    ranks = rows["rank"].to_numpy()
    total = _column(rows, "total_ms")

    # op time per profiled step: the op tables are totals over the run
    step_count = steps.groupby("rank")["step"].nunique().clip(lower=1)
    comm_ops = measures.comm_op_ms(run.op_types)
    per_step = (lambda series: _per_rank(series.reindex(step_count.index).fillna(0.0) / step_count, ranks))
    collective_op = per_step(comm_ops["collective"]) if len(comm_ops) else np.zeros(len(rows))
    p2p_op = per_step(comm_ops["p2p"]) if len(comm_ops) else np.zeros(len(rows))
    op_total = run.op_types.groupby("rank")["total_ms"].sum() if len(run.op_types) else pd.Series(dtype="float64")
    # a step's own compute op time where op executions are timed (CPU), else the run's op time per step
    measured_busy = _column(rows, "busy_ms")
    busy = np.where(np.isnan(measured_busy), per_step(op_total) - collective_op - p2p_op, measured_busy)
    has_ops = np.isin(ranks, op_total.index.to_numpy()) | ~np.isnan(measured_busy)

    # exposed communication: measured where the step file has it, else the step trace's communication
    # streams, else the communication op time (an upper bound: overlap with compute unknown)
    exposed = _column(rows, "comm_exposed_ms")
    exposed_source = np.where(~np.isnan(exposed), EXPOSED_SOURCE.get(run.meta.step_source, EXPOSED_SOURCE[None]), "")
    stream_comm = _column(rows, "comm_ms")
    take = np.isnan(exposed) & ~np.isnan(stream_comm)
    exposed = np.where(take, stream_comm, exposed)
    exposed_source = np.where(take, "step trace: communication streams (overlap with compute unknown)",
                              exposed_source)
    take = np.isnan(exposed) & (collective_op + p2p_op > 0)
    exposed = np.where(take, collective_op + p2p_op, exposed)
    exposed_source = np.where(take, "communication op time per step (overlap with compute unknown)", exposed_source)
    exposed = np.clip(np.nan_to_num(exposed), 0.0, total)

    # point-to-point share: communication.json's kinds, else the op names; Bubble is pipeline time too
    p2p_share = np.divide(p2p_op, collective_op + p2p_op, out=np.zeros(len(rows)),
                          where=collective_op + p2p_op > 0)
    by_kind = measures.communication_by_rank(run)
    kind_share = pd.Series({rank: (entry["p2p_ms"] or 0.0) / ((entry["collective_ms"] or 0.0) + (entry["p2p_ms"] or 0.0))
                            for rank, entry in by_kind.items()
                            if (entry["collective_ms"] or 0.0) + (entry["p2p_ms"] or 0.0) > 0}, dtype="float64")
    if len(kind_share):
        p2p_share = np.where(np.isin(ranks, kind_share.index.to_numpy()), _per_rank(kind_share, ranks), p2p_share)
    bubble = np.nan_to_num(_column(rows, "bubble_ms"))
    pipeline = np.minimum(exposed, np.maximum(bubble, exposed * p2p_share))
    collective = exposed - pipeline
    transfer_share = _transfer_share(run)
    split_known = np.isin(ranks, transfer_share.index.to_numpy())
    share = _per_rank(transfer_share, ranks)
    estimated_share, split_source = _estimated_share(run, rows)
    estimated = ~split_known & ~np.isnan(estimated_share)
    share = np.where(estimated, estimated_share, share)
    split_source = np.where(estimated, split_source, MEASURED_SPLIT)
    split_known |= estimated
    comm_transfer = np.where(split_known, collective * share, 0.0)
    comm_wait = np.where(split_known, collective - comm_transfer, 0.0)
    comm_unsplit = np.where(split_known, 0.0, collective)

    # device compute: the step file's Computing, else the step's span after its interval less exposed
    # communication, less the in-step time no op covers where the op tables hold every device op
    interval = np.nan_to_num(_column(rows, "interval_ms"))
    computing = _column(rows, "computing_ms")
    fwd_bwd, tail = _column(rows, "fwd_bwd_ms"), _column(rows, "tail_ms")
    if np.any(~np.isnan(computing) & (computing + exposed > total + PARTS_EXCEED_TOLERANCE_MS)):
        warnings.append("step file: computing and exposed communication exceed the step total in some steps; "
                        "computing was capped at the rest of the step")
    after_interval = np.where(np.isnan(fwd_bwd), total - interval, fwd_bwd + np.nan_to_num(tail))
    span_compute = np.maximum(np.minimum(after_interval, total - interval) - exposed, 0.0)
    all_ops = ops_cover_device(run.meta.layout)
    gaps_apply = np.isnan(computing) & all_ops & has_ops & (busy > 0) & (busy < span_compute)
    compute = np.where(~np.isnan(computing), np.minimum(computing, total - exposed),
                       np.where(gaps_apply, busy, span_compute))
    gaps = np.where(gaps_apply, span_compute - busy, 0.0)
    compute = np.clip(compute, 0.0, None)

    # the idle rest: data wait with queue evidence, host time by mode, else unknown
    idle = np.maximum(total - compute - exposed, 0.0)
    feed = measures.data_evidence(run)
    zeros = np.zeros(len(rows))
    data = host_dispatch = host_launch = host_transfer = host_loop = loop_in_step = zeros
    if run.meta.mode == "pynative":
        host_dispatch = idle
    else:
        before = np.minimum(interval, idle)
        in_step = np.minimum(gaps, idle - before)
        loop = in_step > LAUNCH_GAP_MAX_MS * _op_calls_per_step(run, rows)
        host_launch, loop_in_step = np.where(loop, 0.0, in_step), np.where(loop, in_step, 0.0)
        host_loop = loop_in_step
        if feed is not None and feed["starving"]:
            data = before
        elif feed is not None and run.meta.data_mode == "feed":
            # the batch is ready on the host: the interval is the per-step transfer to the device; a CPU has no
            # device to copy to, so there it is the loop's own Python between two steps
            if (run.meta.device or "").upper() == "CPU":
                host_loop = host_loop + before
            else:
                host_transfer = before
    unknown = np.maximum(idle - data - host_dispatch - host_launch - host_transfer - host_loop, 0.0)
    compile_ = np.where(left_out_first, unknown, 0.0)
    unknown = np.where(left_out_first, 0.0, unknown)

    parts = {"comm_transfer": comm_transfer, "comm_wait": comm_wait, "comm": comm_unsplit, "p2p": pipeline,
             "data_wait": data, "host_dispatch": host_dispatch, "host_launch": host_launch,
             "host_transfer": host_transfer, "host_loop": host_loop, "compile": compile_}
    # Python around the graph run lies after its last op, in the tail: what the optimizer is not
    parts.update(_compute_split(run, rows, ranks, compute, exposed, tail - loop_in_step))
    parts["unknown"] = unknown
    sources = _sources(exposed_source, computing, gaps_apply & ~np.isnan(measured_busy), gaps_apply, split_known,
                       split_source, feed)
    return _frame(_long(rows, parts, sources, steady), warnings)


def _op_calls_per_step(run: Run, rows: pd.DataFrame) -> np.ndarray:
    """Per step row, its op calls: the step's own where op executions are timed (op_type_steps), else its rank's
    calls over the run per profiled step; 0 where the run counts none."""
    per_step = run.op_type_steps
    if len(per_step):
        counts = per_step.groupby(["rank", "step"])["count"].sum()
        keys = pd.MultiIndex.from_frame(rows[["rank", "step"]].astype("int64"))
        return counts.reindex(keys).fillna(0.0).to_numpy(dtype=np.float64)
    if not len(run.op_types):
        return np.zeros(len(rows))
    calls = run.op_types.groupby("rank")["count"].sum() / run.steps.groupby("rank")["step"].nunique().clip(lower=1)
    return _per_rank(calls, rows["rank"].to_numpy())


def _estimated_share(run: Run, rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per step row, the transfer share of its rank's collective op time in that step where comm_split estimates
    it (else over the rank's estimated ops of every step), NaN where it does not; and how it was estimated."""
    split = comm_split.estimate(run)
    share = np.full(len(rows), np.nan)
    source = np.full(len(rows), "", dtype=object)
    if split.why_not is not None:
        return share, source
    estimates = split.rows[split.rows["elapse_ms"] > 0]
    for keys, into in ((["rank", "step"], rows[["rank", "step"]]), (["rank"], rows[["rank"]])):
        sums = estimates.dropna(subset=keys).groupby(keys).agg(transfer=("transfer_ms", "sum"),
                                                               elapse=("elapse_ms", "sum"),
                                                               hows=("how", lambda how: frozenset(how)))
        found = pd.MultiIndex.from_frame(into.astype("int64")) if len(keys) > 1 else pd.Index(into["rank"])
        position = sums.index.get_indexer(found) if len(sums) else np.full(len(rows), -1)
        take = (position >= 0) & np.isnan(share)
        share[take] = (sums["transfer"] / sums["elapse"]).to_numpy()[position[take]]
        source[take] = [split.method(hows) for hows in sums["hows"].to_numpy()[position[take]]]
    return np.clip(share, 0.0, 1.0), source


def _compute_split(run: Run, rows: pd.DataFrame, ranks: np.ndarray, compute: np.ndarray, exposed: np.ndarray,
                   tail: np.ndarray) -> dict[str, np.ndarray]:
    """Device compute split into forward / backward / optimizer (tail) / other as finely as the files tell.

    The tail after backward (step trace) holds the optimizer and, on data-parallel runs, gradient
    communication: its compute is the tail less the communication inside it (legacy step traces place the
    communication streams, `comm_tail_ms`; elsewhere exposed communication is taken to lie in the tail first,
    where data-parallel gradient reduction lies). Forward vs backward within forward+backward, and forward /
    backward / other without a tail, follow the ops' scope time (Default/ vs Gradients/)."""
    zeros = np.zeros(len(rows))
    comm_tail = _column(rows, "comm_tail_ms")
    comm_in_tail = np.where(np.isnan(comm_tail), np.minimum(exposed, np.nan_to_num(tail)), comm_tail)
    optimizer = np.where(np.isnan(tail), 0.0, np.clip(np.nan_to_num(tail) - comm_in_tail, 0.0, compute))
    rest = compute - optimizer
    by_pass = _op_ms_by_pass(run)
    forward_w = _per_rank(by_pass["forward"], ranks) if len(by_pass) else zeros
    backward_w = _per_rank(by_pass["backward"], ranks) if len(by_pass) else zeros
    other_w = _per_rank(by_pass["other"], ranks) if len(by_pass) else zeros
    scoped = forward_w + backward_w > 0
    has_tail = ~np.isnan(tail)
    # the tail holds what is outside the network's scopes; without a tail, "other" ops get their own share
    weight = forward_w + backward_w + np.where(has_tail, 0.0, other_w)
    safe = np.where(weight > 0, weight, 1.0)
    forward = np.where(scoped, rest * forward_w / safe, 0.0)
    backward = np.where(scoped, rest * backward_w / safe, 0.0)
    other = np.where(scoped & ~has_tail, rest - forward - backward, 0.0)
    unscoped = np.where(scoped, 0.0, rest)
    return {"forward": forward, "backward": backward, "other_compute": other, "optimizer": optimizer,
            "forward_backward": np.where(has_tail, unscoped, 0.0), "compute": np.where(has_tail, 0.0, unscoped)}


def _sources(exposed_source: np.ndarray, computing: np.ndarray, own_ops: np.ndarray, gaps_apply: np.ndarray,
             split_known: np.ndarray, split_source: np.ndarray, feed: dict | None) -> dict[str, tuple[Any, bool]]:
    """cause -> (source text, per row or one for all; measured). own_ops: rows whose compute is the step's own
    op executions (busy_ms)."""
    compute_source = np.where(~np.isnan(computing), "step file: computing",
                              np.where(own_ops, "the step's compute op executions (their union)",
                                       np.where(gaps_apply, "op time per step (op tables hold every device op)",
                                                "step span after the interval, less exposed communication")))
    comm_measured = np.char.startswith(exposed_source.astype(str), "step") | (exposed_source == _OWN_OPS)
    queue = f"{feed['queue']} queue empty in {feed['empty_pct']:.1f} % of samples" if feed else ""
    split = np.char.add("; ", split_source.astype(str))
    return {
        "forward": ("compute, split by the ops' scope time (Default/)", False),
        "backward": ("compute, split by the ops' scope time (Gradients/)", False),
        "other_compute": ("compute, ops outside Default/ and Gradients/", False),
        "forward_backward": (compute_source, False),
        "compute": (compute_source, ~np.isnan(computing) | own_ops),
        "optimizer": ("step trace tail less the communication inside it", False),
        "comm_transfer": (np.char.add(exposed_source.astype(str), split), False),
        "comm_wait": (np.char.add(exposed_source.astype(str), split), False),
        "comm": (exposed_source, comm_measured & ~split_known),
        "p2p": ("point-to-point share of exposed communication, bubble", False),
        "data_wait": (f"step interval; {queue}", False),
        "host_dispatch": ("idle step time in PyNative mode", False),
        "host_launch": ("step time with no op running (launch / dispatch gaps)", False),
        "host_transfer": (f"step interval in feed mode with the data queue full; {queue}", False),
        "host_loop": ((f"step time with no op running, over {LAUNCH_GAP_MAX_MS:g} ms per op call (not launches); on "
                       f"CPU the feed-mode step interval with the data queue full; {queue}"), False),
        "compile": ("idle time of a first step left out of the means", False),
        "unknown": ("step time no file explains", False),
    }


def _long(rows: pd.DataFrame, parts: dict[str, np.ndarray], sources: dict[str, tuple[Any, Any]],
          steady: np.ndarray) -> list[pd.DataFrame]:
    frames = []
    count = len(rows)
    for cause in CAUSES:
        values = parts[cause]
        keep = values > 0
        if cause == "unknown":  # one row per step, so a step with no time at all is still in the ledger
            keep = keep | ~np.any(np.vstack([parts[c] > 0 for c in CAUSES]), axis=0)
        if not keep.any():
            continue
        source, measured = sources[cause]
        source = np.broadcast_to(np.asarray(source, dtype=object), (count,))
        measured = np.broadcast_to(np.asarray(measured, dtype=bool), (count,))
        frames.append(pd.DataFrame({"rank": rows["rank"].to_numpy()[keep], "step": rows["step"].to_numpy()[keep],
                                    "cause": cause, "ms": values[keep], "source": source[keep],
                                    "measured": measured[keep], "steady": steady[keep]}))
    return frames


def _frame(frames: list[pd.DataFrame], warnings: list[str]) -> pd.DataFrame:
    frame = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS))
    frame = frame.astype({"rank": "int64", "step": "int64", "cause": "string", "ms": "float64",
                          "source": "string", "measured": "bool", "steady": "bool"})
    frame = frame.sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    frame.attrs["warnings"] = warnings
    return frame


# ---------------------------------------------------------------------------------------------------------
# Roll-ups: what every view shows is one of these.

def group_of(causes: pd.Series) -> pd.Series:
    """The bound part (or "compile") each cause rolls up into (NA for none): looked up once per distinct cause."""
    return measures.mapped(causes, {cause: spec.group for cause, spec in CAUSES.items()}, "string")


def steady_means(run: Run, by: str = "cause") -> pd.DataFrame:
    """Per rank, the mean ms per steady step of each cause (`by="cause"`) or bound part (`by="group"`), wide,
    with `total`: the mean steady step. The columns add up to `total`. Kept on the run (the summary, its
    Cells and the rules ask several times: a pivot of the whole ledger each, seconds at thousands of ranks);
    each caller gets its own copy."""
    return (_means_by_cause(run) if by == "cause" else _means_by_group(run)).copy()


@kept_on_run
def _means_by_cause(run: Run) -> pd.DataFrame:
    return _steady_means(run, "cause")


@kept_on_run
def _means_by_group(run: Run) -> pd.DataFrame:
    return _steady_means(run, "group")


def _steady_means(run: Run, by: str) -> pd.DataFrame:
    frame = ledger(run)
    frame = frame[frame["steady"]]
    if not len(frame):
        return pd.DataFrame(columns=["total"], dtype="float64")
    key = frame["cause"] if by == "cause" else group_of(frame["cause"])
    steps = frame.groupby("rank")["step"].nunique()
    sums = frame.assign(key=key).pivot_table(index="rank", columns="key", values="ms", aggfunc="sum",
                                             fill_value=0.0, observed=True)
    order = list(CAUSES) if by == "cause" else [*BOUND_PARTS, "compile"]
    means = sums.reindex(columns=[c for c in order if c in sums.columns]).div(steps, axis=0)
    means["total"] = means.sum(axis=1)
    means.columns.name = None
    return means


def _comm_source(frame: pd.DataFrame) -> pd.Series:
    """Per rank, how its communication was measured: exposed (the step file says what overlaps), the step
    trace's streams or the communication ops (overlap with compute unknown)."""
    comm = frame[group_of(frame["cause"]).isin(["communication", "pipeline"]) & frame["steady"]]
    text = comm.groupby("rank")["source"].first().astype(str)
    return text.map(lambda s: "step_trace_overlap_unknown" if s.startswith("step trace")
                    else "ops_overlap_unknown" if s.startswith("communication op") else "exposed")


def rank_parts(run: Run) -> pd.DataFrame:
    """Per rank, the mean steady step rolled up into BOUND_PARTS (ms, adding up to `total`), how its
    communication was measured (`comm_source`), and of its host time the in-step launch gaps (`gaps`), the
    feed-mode batch transfer (`transfer`) and the work between steps (`loop`). Kept on the run as steady_means
    is; each caller gets its own copy."""
    return _rank_parts(run).copy()


@kept_on_run
def _rank_parts(run: Run) -> pd.DataFrame:
    columns = ["rank", "total", *BOUND_PARTS, "comm_source", "gaps", "transfer", "loop"]
    groups = steady_means(run, by="group")
    if not len(groups):
        return pd.DataFrame(columns=columns)
    causes = steady_means(run, by="cause")
    parts = groups.reindex(columns=[*BOUND_PARTS], fill_value=0.0)
    parts["total"] = groups["total"]
    parts["comm_source"] = _comm_source(ledger(run)).reindex(parts.index).fillna("exposed")
    parts["gaps"] = causes["host_launch"] if "host_launch" in causes else 0.0
    parts["transfer"] = causes["host_transfer"] if "host_transfer" in causes else 0.0
    parts["loop"] = causes["host_loop"] if "host_loop" in causes else 0.0
    return parts.rename_axis("rank").reset_index()[columns]


@dataclass(frozen=True)
class Bound:
    """What bounds the mean step: its parts in ms (they add up to the step) and the evidence behind them."""

    kind: str                       # compute / communication / pipeline / data / host / unknown
    parts_ms: dict[str, float]      # BOUND_PARTS -> mean ms per step
    evidence: list[str]
    labels: dict[str, str] = field(default_factory=lambda: dict(BOUND_PART_LABELS))  # how every view names a part

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "parts_ms": dict(self.parts_ms), "evidence": list(self.evidence),
                "labels": dict(self.labels)}

    def share(self, part: str) -> float:
        total = sum(self.parts_ms.values())
        return self.parts_ms.get(part, 0.0) / total if total > 0 else 0.0


def bound(run: Run) -> Bound:
    """The top-down breakdown of the mean steady step over ranks (the ledger rolled up), and the part that
    bounds it: the largest non-compute part when it reaches BOUND_MIN_SHARE of the step, else compute."""
    parts = rank_parts(run)
    if not len(parts):
        return Bound("unknown", {}, ["no step times: the step cannot be split"])
    if run.meta.status == "incomplete":  # the loader's mark: a rank has step totals but no op data to split them
        return Bound("unknown", {}, ["the profiler wrote no op data: step times are known, their split is not"])
    parts_ms = {part: round(float(parts[part].mean()), 3) for part in BOUND_PARTS}
    total = float(parts["total"].mean())
    waiting = max(BOUND_PARTS[1:], key=lambda part: parts_ms[part])
    kind = waiting if parts_ms[waiting] >= BOUND_MIN_SHARE * total else "compute"
    evidence = [f"{part} {parts_ms[part]:,.3f} ms ({100 * parts_ms[part] / total:.1f} % of the "
                f"{total:,.3f} ms step)" for part in BOUND_PARTS if parts_ms[part] > 0]
    evidence += _evidence(run, parts)
    labels = dict(BOUND_PART_LABELS)
    if run.meta.mode == "pynative":  # op durations carry the host's dispatch waits (measures.dispatch_inflation)
        labels["compute"] = PYNATIVE_COMPUTE_LABEL
    if set(parts["comm_source"].unique()) & {"step_trace_overlap_unknown", "ops_overlap_unknown"}:
        labels["communication"] = COMM_OVERLAP_UNKNOWN_LABEL
    return Bound(kind, parts_ms, evidence, labels)


def steady_steps(run: Run) -> pd.DataFrame:
    """The (rank, step) pairs of the steady steps, once each."""
    frame = ledger(run)
    return frame.loc[frame["steady"], ["rank", "step"]].drop_duplicates()


def estimated_split(run: Run) -> str | None:
    """How the steady steps' communication was split into transfer and wait where comm_split estimated it (its
    words, from the ledger's sources); None where the files measure the split or nothing was split."""
    frame = ledger(run)
    split = frame.loc[frame["steady"] & frame["cause"].isin(["comm_transfer", "comm_wait"]), "source"].astype(str)
    return next((text[text.index(comm_split.ESTIMATE):] for text in split.unique() if comm_split.ESTIMATE in text),
                None)  # the distinct sources, in order: 4,096 ranks' steady steps are 160,000 rows of a few texts


def _evidence(run: Run, parts: pd.DataFrame) -> list[str]:
    evidence = []
    sources = set(parts.loc[parts["communication"] + parts["pipeline"] > 0, "comm_source"])
    if "step_trace_overlap_unknown" in sources:
        evidence.append("communication: the step trace's communication op time; overlap with compute unknown")
    if "ops_overlap_unknown" in sources:
        evidence.append("communication: communication op time; overlap with compute unknown")
    causes = steady_means(run, by="cause").mean()
    if causes.get("comm_transfer", 0.0) + causes.get("comm_wait", 0.0) > 0:
        how = estimated_split(run) or "the collective ops' transit vs elapse time"
        evidence.append(f"communication: {causes.get('comm_transfer', 0.0):,.3f} ms transfer, "
                        f"{causes.get('comm_wait', 0.0):,.3f} ms waiting for peers per step ({how})")
    if float(parts["pipeline"].mean()) > 0:
        evidence.append("pipeline: point-to-point (send/receive) communication and bubble: stages waiting")
    feed = measures.data_evidence(run)
    if feed is None:
        evidence.append(f"data: no data-queue evidence (fewer than {measures.MIN_QUEUE_SAMPLES} queue samples)")
    else:
        evidence.append(f"data: {feed['queue']} queue empty in {feed['empty_pct']:.1f} % of "
                        f"{feed['samples']} samples ({'starving' if feed['starving'] else 'not starving'})")
    if run.meta.mode == "pynative":
        evidence.append("host: PyNative mode: every op is dispatched from Python")
        inflation = measures.dispatch_inflation(run)
        if inflation:
            evidence.append(f"compute: op durations include dispatch waits: {inflation['above_fastest_ms']:,.3f} ms "
                            f"of the {inflation['op_ms']:,.3f} ms of op time per step is above each op's fastest "
                            "call")
    if float(parts["gaps"].mean()) > 0:
        evidence.append(f"host: {float(parts['gaps'].mean()):,.3f} ms per step inside the step with no op "
                        "running (launch/dispatch gaps)")
    return evidence



# ---------------------------------------------------------------------------------------------------------
# Claims: what a finding could save, in ledger ms, so that no two findings count the same time.

# The causes of each bound part, for claims worded by part.
CAUSES_OF = {group: tuple(cause for cause, spec in CAUSES.items() if spec.group == group)
             for group in (*BOUND_PARTS, "compile")}


@dataclass(frozen=True)
class Claim:
    """The ledger ms a finding could win back: of these causes, on these ranks (None: all), in the steady steps
    or in the first steps left out of the means, at most `cap_ms` in all (None: all of them)."""

    causes: tuple[str, ...]
    ranks: tuple[int, ...] | None = None
    first_step: bool = False
    cap_ms: float | None = None


def steady_ms(run: Run) -> float:
    """The ms of every rank's steady steps (those the step means cover): the one denominator of every finding's
    share, so the shares of claims on steady steps add up to at most 100 %."""
    frame = ledger(run)
    return float(frame.loc[frame["steady"], "ms"].sum())


def allocate(run: Run, claims: list[Claim]) -> list[dict[str, float]]:
    """Per claim, in order (the most important first), the ms it gets of each cause: what the earlier claims
    left of the rows it names, up to its cap, taken from each row in proportion. No ledger ms is given twice,
    so the claims together never exceed the run's steps."""
    frame = ledger(run)
    remaining = frame["ms"].to_numpy(dtype=np.float64).copy()
    causes = frame["cause"].to_numpy(dtype=object)
    ranks = frame["rank"].to_numpy()
    steady = frame["steady"].to_numpy(dtype=bool)
    given = []
    for claim in claims:
        rows = np.isin(causes, list(claim.causes)) & (~steady if claim.first_step else steady)
        if claim.ranks is not None:
            rows &= np.isin(ranks, list(claim.ranks))
        available = float(remaining[rows].sum())
        take = available if claim.cap_ms is None else min(available, max(claim.cap_ms, 0.0))
        share = take / available if available > 0 else 0.0
        taken = remaining * np.where(rows, share, 0.0)
        remaining -= taken
        by_cause = pd.Series(taken[rows], index=causes[rows]).groupby(level=0).sum() if rows.any() else pd.Series()
        given.append({str(cause): float(ms) for cause, ms in by_cause.items() if ms > 0})
    return given

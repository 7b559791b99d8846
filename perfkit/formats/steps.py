"""Steps from op executions, for layouts that write no step trace (CPU).

Each step splits into interval (before the first forward op: waiting for data or the host),
fwd_bwd (first forward op start to last backward op end) and tail (after the last backward op:
optimizer, all-reduce tail). Forward/backward come from the ops' scope names (base.op_passes).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .base import op_passes

NS_PER_MS = 1e6
STEP_COLUMNS = ["step", "interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms"]


def derive_steps(op_events: pd.DataFrame, step_times: pd.DataFrame | None) -> tuple[pd.DataFrame, str]:
    """(steps table, how it was derived). An empty table comes with the reason in `how`.

    With step_times (step, begin_ns, end_ns recorded by `perfkit profile`), each op execution
    belongs to the step whose [begin, end) holds its start, and interval + fwd_bwd + tail equals
    end - begin exactly. Without, the k-th execution of every op is step k, which holds in graph
    mode where each kernel runs once per step; a step then ends with its last op and its interval
    starts where the previous step ended (unknown for the first step).
    """
    if not len(op_events):
        return pd.DataFrame(columns=STEP_COLUMNS), "unknown: no op executions"
    recorded = step_times is not None and len(step_times)
    # Epoch ns exceed float64's exact integers: work in ns since the earliest time, which stay exact.
    origin = int(op_events["start_ns"].min())
    if recorded:
        origin = min(origin, int(step_times["begin_ns"].min()))
    events = _with_pass(op_events, origin)
    if recorded:
        return _from_step_times(events, step_times, origin), "recorded_step_times"
    return _from_occurrences(events)


def steps_from_times(step_times: pd.DataFrame) -> pd.DataFrame:
    """Steps from the bounds `perfkit profile` recorded, when the profiler wrote no op data (a run killed
    before MindSpore's analysis): each step's total is known, its split is not."""
    times = step_times.sort_values("step").reset_index(drop=True)
    total_ms = (times["end_ns"] - times["begin_ns"]).to_numpy(dtype=np.int64) / NS_PER_MS
    unknown = np.full(len(times), np.nan)
    return pd.DataFrame({"step": times["step"].astype("int64"), "interval_ms": unknown, "fwd_bwd_ms": unknown,
                         "tail_ms": unknown, "total_ms": total_ms})


def _with_pass(op_events: pd.DataFrame, origin: int) -> pd.DataFrame:
    """start/end in int64 ns since `origin` and the pass of each execution (computed once per distinct name)."""
    events = op_events[op_events["name"].notna() & op_events["start_ns"].notna()]
    names = events["name"].astype("category")
    per_name = op_passes(names.cat.categories)
    start = events["start_ns"].to_numpy(dtype=np.int64) - origin
    end = start + np.rint(events["dur_ms"].fillna(0.0).to_numpy(dtype=np.float64) * NS_PER_MS).astype(np.int64)
    return pd.DataFrame({"name": names.cat.codes.to_numpy(), "start": start, "end": end,
                         "pass": per_name[names.cat.codes.to_numpy()]})


def _bounds(events: pd.DataFrame, step: np.ndarray) -> pd.DataFrame:
    """Per step: first op start, last op end, first forward start, last backward end (ns)."""
    grouped = pd.DataFrame({"step": step, "start": events["start"].to_numpy(), "end": events["end"].to_numpy()})
    forward = (events["pass"] == "forward").to_numpy()
    backward = (events["pass"] == "backward").to_numpy()
    if not backward.any():
        # no Gradients/ scope anywhere (PyNative names, or inference): `Default/` then also holds
        # the optimizer, so neither bound can be told
        forward = np.zeros_like(backward)
    bounds = grouped.groupby("step").agg(first_start=("start", "min"), last_end=("end", "max"))
    bounds["forward_start"] = grouped[forward].groupby("step")["start"].min()
    bounds["backward_end"] = grouped[backward].groupby("step")["end"].max()
    return bounds


def _from_step_times(events: pd.DataFrame, step_times: pd.DataFrame, origin: int) -> pd.DataFrame:
    times = step_times.sort_values("begin_ns").reset_index(drop=True)
    begin = times["begin_ns"].to_numpy(dtype=np.int64) - origin
    end = times["end_ns"].to_numpy(dtype=np.int64) - origin
    index = np.searchsorted(begin, events["start"].to_numpy(), side="right") - 1
    inside = (index >= 0) & (events["start"].to_numpy() < end[np.clip(index, 0, None)])
    bounds = _bounds(events[inside], times["step"].to_numpy()[index[inside]])
    bounds = bounds.reindex(times["step"])
    forward_start = bounds["forward_start"].to_numpy(dtype=np.float64)
    backward_end = bounds["backward_end"].to_numpy(dtype=np.float64)
    return pd.DataFrame({
        "step": times["step"].astype("int64"),
        "interval_ms": (forward_start - begin) / NS_PER_MS,
        "fwd_bwd_ms": (backward_end - forward_start) / NS_PER_MS,
        "tail_ms": (end - backward_end) / NS_PER_MS,
        "total_ms": (end - begin) / NS_PER_MS,
    })


def _from_occurrences(events: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    per_op = events.groupby("name").size()
    if per_op.min() != per_op.max():
        return (pd.DataFrame(columns=STEP_COLUMNS),
                f"unknown: ops ran different numbers of times ({per_op.min()} to {per_op.max()}), so the k-th "
                f"run of an op is not step k (PyNative or control flow); record step times with `perfkit profile`")
    ordered = events.sort_values("start", kind="stable")
    step = ordered.groupby("name").cumcount().to_numpy() + 1
    bounds = _bounds(ordered, step)
    previous_end = bounds["last_end"].shift(1)
    forward_start, backward_end = bounds["forward_start"], bounds["backward_end"]
    steps = pd.DataFrame({
        "step": bounds.index.astype("int64"),
        "interval_ms": (forward_start - previous_end) / NS_PER_MS,
        "fwd_bwd_ms": (backward_end - forward_start) / NS_PER_MS,
        "tail_ms": (bounds["last_end"] - backward_end) / NS_PER_MS,
        # step 1 began at an unknown time before its first op, so its total is unknown too
        "total_ms": (bounds["last_end"] - previous_end) / NS_PER_MS,
    })
    return steps.reset_index(drop=True).astype({c: "float64" for c in STEP_COLUMNS[1:]}), "op_timestamps"

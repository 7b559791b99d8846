"""Steps from op executions, for layouts that write no step trace (CPU).

Each step splits into interval (before the first forward op: waiting for data or the host),
fwd_bwd (first forward op start to last backward op end) and tail (after the last backward op:
optimizer, all-reduce tail). Forward/backward come from the ops' scope names (core/opnames.op_passes).
busy_ms is the step's time with a compute op running (communication ops left out): the step ledger's
device compute of that very step, where the op tables only give totals over every profiled step.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from ...core.errors import FileFormatError
from ...core.opnames import op_passes, op_types_of
from ...core.units import NS_PER_MS, US_PER_MS
from .base import Derivation
from .files import read_text
from .tables import as_pandas

if TYPE_CHECKING:
    import pandas as pd

STEP_COLUMNS = ["step", "interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms", "busy_ms"]


def derive_steps(op_events: pd.DataFrame, step_times: pd.DataFrame | None) -> tuple[pd.DataFrame, str]:
    """(steps table, how it was derived). An empty table comes with the reason in `how`.

    With step_times (step, begin_ns, end_ns recorded by `perfkit profile`), each op execution
    belongs to the step whose [begin, end) holds its start, and interval + fwd_bwd + tail equals
    end - begin exactly. Without, the k-th execution of every op is step k, which holds in graph
    mode where each kernel runs once per step; a step then ends with its last op and its interval
    starts where the previous step ended (unknown for the first step). Where ops ran different numbers of
    times (PyNative, control flow), the runs of the loop's marker op start the steps (`loop_marker`).
    """
    steps, how, _, _ = _derive(op_events, step_times)
    return steps, how


# What _derive answers: the steps table, how it was derived, what a warning says of the marker op (steps marked by
# one op's runs) and the op executions (_with_pass) with the step each belongs to (0: outside every step).
Derived = tuple["pd.DataFrame", str, "str | None", "pd.DataFrame"]


def _derive(op_events: pd.DataFrame, step_times: pd.DataFrame | None) -> Derived:
    import pandas as pd
    if not len(op_events):
        return pd.DataFrame(columns=STEP_COLUMNS), "unknown: no op executions", None, _with_pass(op_events, 0)
    recorded = step_times is not None and len(step_times)
    # Epoch ns exceed float64's exact integers: work in ns since the earliest time, which stay exact.
    origin = int(op_events["start_ns"].min())
    if recorded:
        origin = min(origin, int(step_times["begin_ns"].min()))
    events = _with_pass(op_events, origin)
    if recorded:
        steps, step = _from_step_times(events, step_times, origin)
        return steps, "recorded_step_times", None, events.assign(step=step)
    return _from_occurrences(events)


def derived_steps(rank: int, tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame | None, dict, list[str]]:
    """Steps for a rank no reader gave a step table: from its op events (CPU, bounded by perfkit's recorded
    step times where there are some), else the recorded step times alone (the DERIVATION below)."""
    if "op_events" in tables:
        steps, how, marker, _ = _derive(tables["op_events"], tables.get("step_times"))
        if not len(steps):
            return None, {}, [f"rank {rank}: steps unknown: {how}"]
        if how == "first_op_timestamps":
            return steps, {"step_source": how}, [
                f"rank {rank}: steps derived from op launch times: {marker}; no step markers split them into "
                "interval / forward+backward / tail"]
        return steps, {"step_source": how}, []
    return steps_from_times(tables["step_times"]), {"step_source": "recorded_step_times", "no_op_data": True}, [
        f"rank {rank}: the profiler wrote no op data (stopped before its analysis?): step times are the ones "
        "perfkit profile recorded, their split is unknown"]


DERIVATION = Derivation(table="steps", needs=("op_events", "step_times"), derive=derived_steps)


def derived_op_type_steps(rank: int, tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame | None, dict, list[str]]:
    """Per step, op time and calls by op type, from the op executions assigned to steps as derive_steps assigns
    them (OP_TYPE_STEPS below): what the op-type shares of the steady steps are made of."""
    import pandas as pd
    if "op_events" not in tables:
        return None, {}, []
    steps, _, _, events = _derive(tables["op_events"], tables.get("step_times"))
    type_of = np.asarray(op_types_of(events.attrs.get("names", [])), dtype=object)  # per name code
    events = events[events["step"] > 0]
    if not len(steps) or not len(events):
        return None, {}, []
    types = type_of[events["name"].to_numpy()]
    frame = pd.DataFrame({"step": events["step"].to_numpy(dtype=np.int64), "type": types,
                          "dur_ms": (events["end"] - events["start"]).to_numpy(dtype=np.float64) / NS_PER_MS})
    summed = frame.groupby(["step", "type"], sort=True).agg(total_ms=("dur_ms", "sum"), count=("dur_ms", "size"))
    return summed.reset_index(), {}, []


OP_TYPE_STEPS = Derivation(table="op_type_steps", needs=("op_events",), derive=derived_op_type_steps)


def with_first_step_time(tables: dict) -> None:
    """A rank's ops, in place, with the time and calls of each op's runs in its first step or outside every step
    (`first_step_ms`, `first_step_calls`; Reader.finish of the layouts whose op runs are timed): the op time the
    steady steps leave out where the first step is left out of the step means (a compile, a first call), which the
    op tables' totals over every profiled step hold (perfkit/analysis/cells.py: Cells per steady step)."""
    import pandas as pd
    ops, op_events = tables.get("ops"), tables.get("op_events")
    if ops is None or op_events is None or not len(ops):
        return
    steps, _, _, events = _derive(as_pandas(op_events), as_pandas(tables["step_times"])
                                  if tables.get("step_times") is not None else None)
    if not len(steps):
        return
    events = events[events["step"].to_numpy() <= int(steps["step"].min())]  # 0: outside every step
    names = np.asarray(events.attrs.get("names", []), dtype=object)[events["name"].to_numpy()]
    left_out = pd.DataFrame({"name": names, "ms": (events["end"] - events["start"]).to_numpy() / NS_PER_MS})
    summed = left_out.groupby("name", sort=False)["ms"].agg(["sum", "size"])
    ops = as_pandas(ops)
    tables["ops"] = ops.assign(first_step_ms=ops["name"].map(summed["sum"]).fillna(0.0).astype("float64"),
                               first_step_calls=ops["name"].map(summed["size"]).fillna(0).astype("Int64"))


def derived_comm_ops(rank: int, tables: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame | None, dict, list[str]]:
    """comm_ops from the communication op executions (CPU, GPU op launches): one row per execution with its
    start (epoch ms) and elapse time, in the step derive_steps puts it in (NA outside every step); transfer,
    wait and size unknown (COMM_OPS below): what the ledger's transfer/wait estimate matches across ranks."""
    import pandas as pd
    if "op_events" not in tables:
        return None, {}, []
    from ...core.opnames import comm_kind
    _, _, _, events = _derive(tables["op_events"], tables.get("step_times"))
    events = events[events["communication"].to_numpy(dtype=bool)]
    if not len(events):
        return None, {}, []
    names = np.asarray(events.attrs.get("names", []), dtype=object)[events["name"].to_numpy()]
    kinds = {name: comm_kind(op_type) for name, op_type in zip(set(names), op_types_of(list(set(names))))}
    step = events["step"]
    return pd.DataFrame({
        "step": step.where(step > 0).astype("Int64").to_numpy(), "name": names, "kind": [kinds[name] for name in names],
        "elapse_ms": (events["end"] - events["start"]).to_numpy(dtype=np.float64) / NS_PER_MS,
        "transit_ms": np.nan, "wait_ms": np.nan, "synchronization_ms": np.nan,
        # epoch ms: the start in ns since `origin` (exact) plus the origin, rounded once to float64's 0.25 µs
        "start_ms": events.attrs["origin"] / NS_PER_MS + events["start"].to_numpy(dtype=np.float64) / NS_PER_MS,
    }), {}, []


COMM_OPS = Derivation(table="comm_ops", needs=("op_events",), derive=derived_comm_ops)


def steps_from_times(step_times: pd.DataFrame) -> pd.DataFrame:
    """Steps from the bounds `perfkit profile` recorded, when the profiler wrote no op data (a run killed
    before MindSpore's analysis): each step's total is known, its split is not."""
    import pandas as pd
    times = step_times.sort_values("step").reset_index(drop=True)
    total_ms = (times["end_ns"] - times["begin_ns"]).to_numpy(dtype=np.int64) / NS_PER_MS
    unknown = np.full(len(times), np.nan)
    return pd.DataFrame({"step": times["step"].astype("int64"), "interval_ms": unknown, "fwd_bwd_ms": unknown,
                         "tail_ms": unknown, "total_ms": total_ms})


def _with_pass(op_events: pd.DataFrame, origin: int) -> pd.DataFrame:
    """start/end in int64 ns since `origin`, the pass of each execution and whether it is a communication op
    (both computed once per distinct name)."""
    import pandas as pd

    from ...core.opnames import comm_kind
    events = op_events[op_events["name"].notna() & op_events["start_ns"].notna()]
    names = events["name"].astype("category")
    per_name = op_passes(names.cat.categories)
    communication = np.array([comm_kind(op_type) is not None for op_type in op_types_of(names.cat.categories)],
                             dtype=bool)
    start = events["start_ns"].to_numpy(dtype=np.int64) - origin
    end = start + np.rint(events["dur_ms"].fillna(0.0).to_numpy(dtype=np.float64) * NS_PER_MS).astype(np.int64)
    codes = names.cat.codes.to_numpy()
    frame = pd.DataFrame({"name": codes, "start": start, "end": end, "pass": per_name[codes],
                          "communication": communication[codes]})
    frame.attrs["names"] = list(names.cat.categories)  # code -> op name, for messages
    frame.attrs["origin"] = origin  # epoch ns of start 0
    return frame


def _bounds(events: pd.DataFrame, step: np.ndarray) -> pd.DataFrame:
    """Per step: first op start, last op end, first forward start, last backward end (ns), and the time with
    a compute op running (busy), with a communication op running (comm) and with only communication running
    (comm_exposed: the union of all ops less the union of compute ops)."""
    import pandas as pd
    grouped = pd.DataFrame({"step": step, "start": events["start"].to_numpy(), "end": events["end"].to_numpy()})
    forward = (events["pass"] == "forward").to_numpy()
    backward = (events["pass"] == "backward").to_numpy()
    if not backward.any():
        # no Gradients/ scope anywhere (PyNative names, or inference): `Default/` then also holds
        # the optimizer, so neither bound can be told
        forward = np.zeros_like(backward)
    communication = events["communication"].to_numpy()
    bounds = grouped.groupby("step").agg(first_start=("start", "min"), last_end=("end", "max"))
    bounds["forward_start"] = grouped[forward].groupby("step")["start"].min()
    bounds["backward_end"] = grouped[backward].groupby("step")["end"].max()
    bounds["busy"] = _covered(grouped[~communication]).reindex(bounds.index, fill_value=0)
    if communication.any():
        bounds["comm"] = _covered(grouped[communication]).reindex(bounds.index, fill_value=0)
        bounds["comm_exposed"] = _covered(grouped).reindex(bounds.index, fill_value=0) - bounds["busy"]
    return bounds


def _comm_columns(bounds: pd.DataFrame) -> dict[str, np.ndarray]:
    """The steps' comm_ms / comm_exposed_ms where the rank ran communication ops (measured per step from the
    op executions: no run-wide op time spread over the steps), else nothing."""
    if "comm" not in bounds:
        return {}
    return {"comm_ms": bounds["comm"].to_numpy(dtype=np.float64) / NS_PER_MS,
            "comm_exposed_ms": bounds["comm_exposed"].to_numpy(dtype=np.float64) / NS_PER_MS}


def _covered(intervals: pd.DataFrame) -> pd.Series:
    """Per step, the ns covered by at least one of its (start, end) intervals: ops on parallel threads
    overlap, and their durations added up would exceed the step."""
    import pandas as pd
    ordered = intervals.sort_values(["step", "start"], kind="stable")
    reach = ordered.groupby("step")["end"].cummax().groupby(ordered["step"]).shift(1)
    start = np.maximum(ordered["start"].to_numpy(), reach.fillna(np.iinfo(np.int64).min).to_numpy())
    added = np.clip(ordered["end"].to_numpy() - start, 0, None)
    return pd.Series(added, index=ordered.index).groupby(ordered["step"]).sum()


def _from_step_times(events: pd.DataFrame, step_times: pd.DataFrame, origin: int) -> pd.DataFrame:
    import pandas as pd
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
        "busy_ms": bounds["busy"].to_numpy(dtype=np.float64) / NS_PER_MS,
        **_comm_columns(bounds),
    }), np.where(inside, times["step"].to_numpy()[np.clip(index, 0, None)], 0)


def _from_occurrences(events: pd.DataFrame) -> Derived:
    import pandas as pd
    per_op = events.groupby("name").size()
    if per_op.min() != per_op.max():
        return _from_marker(events, per_op)
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
        "busy_ms": bounds["busy"] / NS_PER_MS,
        **_comm_columns(bounds),
    })
    return (steps.reset_index(drop=True).astype({c: "float64" for c in steps.columns if c != "step"}),
            "op_timestamps", None, events.assign(step=pd.Series(step, index=ordered.index)))


# The loop's marker op must run at least this many times for its runs to mark steps (one run is one window).
MIN_MARKER_RUNS = 2


def loop_marker(events: pd.DataFrame, per_op: pd.Series) -> tuple[object, int] | None:
    """(the op whose runs start the loop's iterations, how many times it ran), or None when no op marks them.

    Where ops ran different numbers of times (PyNative: each op is launched from Python), the loop's iteration
    count is the run count that the most ops' counts are whole multiples of: an op run once per iteration runs
    N times, one run twice (two layers of one kind) 2N, and a set-up call before the loop (1) or an op skipped
    once (N - 1) does not divide the rest. Of the ops run exactly N times, the one whose runs start earliest
    starts each iteration. Issue 23 describes a real MindSpore 2.2.14 GPU PyNative run so (19 ops run 1, 14, 15,
    30 or 60 times over 15 iterations; the first op launched was the set-up call)."""
    counts = sorted(set(int(count) for count in per_op if count >= MIN_MARKER_RUNS))
    if not counts:
        return None
    runs = per_op.to_numpy()
    divides = {count: int(np.count_nonzero(runs % count == 0)) for count in counts}
    iterations = max(counts, key=lambda count: (divides[count], count))
    first_start = events.groupby("name")["start"].min().reindex(per_op.index)
    marker = first_start[runs == iterations].idxmin()
    # Only ops run fewer times (set-up calls, an op skipped in some iteration) may start before the loop does:
    # an op run as often or more starting earlier means the marker does not start the iterations.
    if (first_start[runs >= iterations] < first_start[marker]).any():
        return None
    return marker, iterations


def marker_starts(events: pd.DataFrame, marker) -> np.ndarray:
    """The sorted starts of the marker op's runs (columns name, start)."""
    return np.sort(events.loc[events["name"] == marker, "start"].to_numpy())


def _from_marker(events: pd.DataFrame, per_op: pd.Series) -> Derived:
    """Steps where ops ran different numbers of times (PyNative, control flow): the k-th run of the loop's
    marker op (loop_marker) starts step k (docs/formats.md, GPU: what MindSpore's own GPU step parser relies on, with
    the first op), the last step ends with the last op; ops before the marker's first run are outside the
    steps. The step trace's markers are missing, so the totals are not split into interval / fwd+bwd / tail;
    the time with a compute op running (busy) is known."""
    import pandas as pd
    found = loop_marker(events, per_op)
    if found is None:
        return (pd.DataFrame(columns=STEP_COLUMNS),
                f"unknown: ops ran different numbers of times ({per_op.min()} to {per_op.max()}) and no op marks "
                "the loop's iterations (none run as often as the loop that starts before the others); mark the "
                "steps: `prof.step()` at the end of each inside `with perfkit.profiling() as prof:`, or Model.train",
                None, events.assign(step=0))
    marker, iterations = found
    starts = marker_starts(events, marker)
    ends = np.append(starts[1:], events["end"].max())
    step = np.searchsorted(starts, events["start"].to_numpy(), side="right")
    inside = step > 0
    bounds = _bounds(events[inside], step[inside]).reindex(np.arange(1, len(starts) + 1))
    unknown = np.full(len(starts), np.nan)
    steps = pd.DataFrame({"step": np.arange(1, len(starts) + 1, dtype="int64"), "interval_ms": unknown,
                          "fwd_bwd_ms": unknown, "tail_ms": unknown, "total_ms": (ends - starts) / NS_PER_MS,
                          "busy_ms": bounds["busy"].fillna(0).to_numpy(dtype=np.float64) / NS_PER_MS,
                          **_comm_columns(bounds.fillna(0))})
    before = int(np.count_nonzero(~inside))
    said = (f"{events.attrs['names'][marker]} marks the steps: of the ops run {iterations} times (the count most "
            f"ops' counts are multiples of; ops ran {per_op.min()} to {per_op.max()} times) it starts earliest"
            + (f"; {before} op run(s) before its first run are outside the steps" if before else ""))
    return steps, "first_op_timestamps", said, events.assign(step=step)


def longest_call_ms(op_events: pd.DataFrame) -> pd.Series:
    """Op name -> its longest single execution (ms): a first call or compile hides in an op's mean."""
    return op_events.groupby("name", observed=True)["dur_ms"].max()


def shortest_call_ms(op_events: pd.DataFrame) -> pd.Series:
    """Op name -> its shortest single execution (ms): what the op costs when nothing else holds it up (PyNative
    op durations include the host's dispatch waits, so one op's calls spread several-fold)."""
    return op_events.groupby("name", observed=True)["dur_ms"].min()


# An execution's duration field in {cpu,gpu}_op_execute_timestamp files -> ms.
DURATION_TO_MS = {"dur_ms": 1.0, "dur_us": 1 / US_PER_MS}


def read_execute_timestamps(path: Path, warnings: list[str], fields: tuple[str, ...]) -> pd.DataFrame:
    """`{cpu,gpu}_op_execute_timestamp_{r}.txt` -> name, start_ns, dur_ms: one row per execution.

    MindSpore's DataSaver::WriteOpTimestamp writes `full_op_name;HostCpuOps;start_ns,dur_ms,tid ...` on CPU
    and `full_op_name;GpuOps;start_ns,dur_us ...` on GPU (GPUProfiler::OpDataProducerEnd stores
    cudaEventElapsedTime's ms * kTimeUnit, logged as "Host Time Elapsed(us)"): `fields` names one
    execution's fields, its duration `dur_ms` or `dur_us`.

    Lines are split in Python (one per op, not per execution); the executions are parsed as one
    CSV by pyarrow, a few times faster than converting 100k+ Python strings.
    """
    import pandas as pd
    names: list[str] = []
    counts: list[int] = []
    records: list[str] = []
    bad_lines = 0
    columns = list(fields)
    for line in read_text(path).splitlines():
        fields = line.split(";", 2)
        if len(fields) < 3:
            bad_lines += line.strip() != ""
            continue
        executions = fields[2].split()
        if not executions or fields[2].count(",") != (len(columns) - 1) * len(executions):
            bad_lines += 1
            continue
        names.append(fields[0])
        counts.append(len(executions))
        records.append("\n".join(executions))
    if bad_lines:
        warnings.append(f"{path.name}: skipped {bad_lines} malformed line(s)")
    if not names:
        raise FileFormatError("has no op execution records", path)
    duration = next(column for column in columns if column in DURATION_TO_MS)
    try:
        table = pacsv.read_csv(
            io.BytesIO("\n".join(records).encode()),
            read_options=pacsv.ReadOptions(column_names=columns),
            convert_options=pacsv.ConvertOptions(include_columns=["start_ns", duration],
                                                 column_types={"start_ns": pa.int64(), duration: pa.float64()}))
    except pa.ArrowInvalid:
        raise FileFormatError("has a start time or duration that is not a number", path) from None
    start_ns = table.column("start_ns").to_numpy()
    dur_ms = table.column(duration).to_numpy() * DURATION_TO_MS[duration]
    line_codes, unique_names = pd.factorize(pd.Index(names))  # an op may have several lines
    return pd.DataFrame({
        "name": pd.Categorical.from_codes(np.repeat(line_codes, counts), categories=unique_names),
        "start_ns": start_ns, "dur_ms": dur_ms})

"""The one data model every command and chart works from.

A `Run` is a handful of typed pandas DataFrames plus metadata. Every table carries a `rank`
column, so a multi-rank run is the same tables with more ranks in them. Times are ms, shares
are fractions 0-1, queue sizes are element counts. Readers build their tables with `table()`,
which checks them against `SCHEMA`: no raw header or unit leaks past a reader.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

# name -> {column: dtype}. Columns marked optional in OPTIONAL_COLUMNS may be absent;
# every other column is always present (NaN where a layout cannot tell).
SCHEMA: dict[str, dict[str, str]] = {
    # One row per operator type: total time over all profiled steps. share = total_ms / the rank's summed
    # total_ms of all its types (computed here, in `table`, for every layout: one definition everywhere).
    # file_share = the file's own percent as a fraction, where the file has one, whose denominator is
    # MindSpore's: legacy aicore_intermediate_*_type.csv divides by the "total op" line of
    # output_op_compute_time_{r}.txt (every AI Core task of the profiled steps, including tasks the framework
    # file does not name, so the listed percents can sum below 100); op_statistic.csv's Ratio(%) and the
    # CPU/GPU type files' percent divide by the sum of their own rows (= share, up to rounding).
    "op_types": {"rank": "int64", "type": "string", "total_ms": "float64",
                 "count": "int64", "share": "float64", "file_share": "float64"},
    # One row per operator instance (full scope name); pass is forward/backward/optimizer/other (PASSES).
    "ops": {"rank": "int64", "name": "string", "type": "string", "avg_ms": "float64",
            "count": "int64", "total_ms": "float64", "pass": "string",
            "input_shapes": "string", "input_dtypes": "string", "max_ms": "float64",
            "min_ms": "float64", "first_step_ms": "float64", "first_step_calls": "Int64"},
    # One row per profiled step. interval = waiting for data/host before forward starts, fwd_bwd = forward+backward
    # compute, tail = after backward (optimizer, all-reduce tail); a layout that knows only each step's total (a
    # training log, recorded step times) leaves the three NA. comm_ms = time inside the step covered by communication
    # (the union of its intervals, never above the step); comm_exposed_ms = communication not overlapped by computation
    # (MindSpore's "communication alone"); comm_receive_ms / comm_collective_ms = pipeline receive wait / collective
    # time (cluster-analyse files); comm_tail_ms = the part of comm_ms after backward ends (legacy step trace: the
    # communication streams clipped to bp_point..end_point); busy_ms = time inside the step with a compute op running
    # (the union of the step's non-communication op intervals, where op executions are timed). warmup = a step
    # MindSpore's own average leaves out (legacy step trace: the first); steady.steady_steps decides which steps the
    # means cover.
    "steps": {"rank": "int64", "step": "int64", "interval_ms": "float64", "fwd_bwd_ms": "float64",
              "tail_ms": "float64", "total_ms": "float64",
              "computing_ms": "float64", "comm_ms": "float64", "comm_exposed_ms": "float64",
              "comm_overlapped_ms": "float64", "comm_receive_ms": "float64", "comm_collective_ms": "float64",
              "comm_tail_ms": "float64", "busy_ms": "float64", "free_ms": "float64", "preparing_ms": "float64", "bubble_ms": "float64", "warmup": "boolean"},
    # Per profiled step, op time and calls by operator type, where op executions are timed (CPU, GPU op launches;
    # derived from them by the loader): the op-type shares of the steps the step means cover (steady.steady_steps),
    # where op_types can only give totals over every profiled step.
    "op_type_steps": {"rank": "int64", "step": "int64", "type": "string", "total_ms": "float64", "count": "int64"},
    # Per rank and op pass (forward / backward / other): summed op time of the compute (non-communication) ops,
    # derived from `ops` by the loader, so the step ledger's forward/backward split needs no op rows
    # (a warm `perfkit summary` of a million-op run never reads them).
    "op_passes": {"rank": "int64", "pass": "string", "total_ms": "float64"},
    # Per rank and network Cell (scope path, `(no cell)` for unscoped ops): the ops placed in that Cell itself
    # (not its children), summed over the profiled steps, derived from `ops` by the loader (perfkit/analysis/cells.py:
    # backward kernels placed by their shapes), so `perfkit summary`'s Cell tree needs no op rows. calls:
    # executions; flops / flops_ms: the work of the ops with a FLOP model and their time; ops: op rows;
    # moved_ops / shared_ops: backward kernels moved by shapes to one Cell / to a shared ancestor;
    # dense_unknown_*: dense ops whose shapes give no FLOPs.
    "cells": {"rank": "int64", "path": "string", "forward_ms": "float64", "backward_ms": "float64",
              "other_ms": "float64", "calls": "float64", "flops": "float64", "flops_ms": "float64",
              "ops": "int64", "moved_ops": "int64", "shared_ops": "int64", "dense_unknown_ops": "int64",
              "dense_unknown_ms": "float64", "first_forward_ms": "float64", "first_backward_ms": "float64",
              "first_other_ms": "float64", "first_calls": "float64", "first_flops_ms": "float64"},
    # Host-side data queue (MindData -> device/iterator), one sample per batch.
    "host_queue": {"rank": "int64", "batch": "int64", "size": "int64", "capacity": "int64"},
    # Device-side data queue (Ascend GetNext on chip, GPU getnext), one sample per dequeue.
    "device_queue": {"rank": "int64", "batch": "int64", "size": "int64", "capacity": "Int64",
                     "wait_ms": "float64"},
    # MindData pipeline: one row per dataset op. queue_usage is mean output-queue fill 0-1; workers is NA
    # where the file does not say (never 0: no dataset op runs on no worker).
    "pipeline": {"rank": "int64", "op_id": "int64", "op_type": "string", "workers": "Int64",
                 "queue_usage": "float64", "queue_empty_pct": "float64", "queue_length": "Int64",
                 "parent_id": "Int64", "children": "object"},
    # Host CPU utilisation samples (percent 0-100).
    "cpu_util": {"rank": "int64", "sample": "int64", "user_pct": "float64", "sys_pct": "float64",
                 "io_pct": "float64", "idle_pct": "float64", "process_user_pct": "float64",
                 "process_sys_pct": "float64"},
    # Allocator samples over time. time_ms: since the run's start (the rank's first profiled step when
    # perfkit profile recorded step times, else its first memory sample); step: the profiled step the
    # sample falls in (NA outside steps or where steps have no wall-clock bounds). component: who
    # allocates (`MindSpore`, `PTA`, `GE`, `PTA+GE`: the framework allocator; `APP`: the whole
    # process, reserved only; CANN modules from npu_module_mem.csv); an unknown size is NA, never 0.
    "memory": {"rank": "int64", "time_ms": "float64", "allocated_mb": "float64", "reserved_mb": "float64",
               "active_mb": "float64", "component": "string", "device": "string", "step": "Int64"},
    # One row per operator memory block: allocated at / released at on the memory table's clock,
    # released_at_ms and duration_ms NA when the block outlived the profile.
    "op_memory": {"rank": "int64", "name": "string", "size_mb": "float64", "allocated_at_ms": "float64",
                  "released_at_ms": "float64", "duration_ms": "float64", "stream": "string",
                  "device": "string"},
    # One row per communication op per step. kind: collective | p2p; group: the communication group
    # (the hash after `@` in the op name); size_mb: data moved over every link type but LOCAL (where only the
    # op's payload is known, its payload). start_ms: the op's start in epoch ms (a clock the ranks of one host
    # share; float64 holds it to 0.25 µs), where the files time each execution: what transfer/wait estimates
    # match across ranks.
    "comm_ops": {"rank": "int64", "step": "Int64", "name": "string", "kind": "string", "group": "string",
                 "elapse_ms": "float64", "transit_ms": "float64", "wait_ms": "float64",
                 "synchronization_ms": "float64", "size_mb": "float64", "start_ms": "float64"},
    # One row per (step, op, src rank, dst rank) link: link_type HCCS | PCIE | RDMA | SIO | LOCAL (legacy hccl_raw:
    # SDMA, the on-server link, or RDMA; its ranks as HCCL's tasks number them),
    # bandwidth_gb_s = size_mb / transit_ms (MB/ms = GB/s). name: the op, or for MindStudio's
    # per-op-type totals (`allreduce-total`) the op type.
    "comm_links": {"rank": "int64", "step": "Int64", "name": "string", "group": "string", "src": "int64",
                   "dst": "int64", "link_type": "string", "size_mb": "float64", "transit_ms": "float64",
                   "bandwidth_gb_s": "float64"},
}

OPTIONAL_COLUMNS: dict[str, set[str]] = {
    "op_types": {"share", "file_share"},
    # max_ms / min_ms: longest / shortest single call, where calls are timed; first_step_ms / first_step_calls:
    # the op's runs in the rank's first step or outside every step, where runs are timed (formats/steps.py)
    "ops": {"input_shapes", "input_dtypes", "max_ms", "min_ms", "first_step_ms", "first_step_calls"},
    # first_*: the Cell's op time and calls in the first step or outside every step, where op runs are timed
    "cells": {"first_forward_ms", "first_backward_ms", "first_other_ms", "first_calls", "first_flops_ms"},
    "steps": {"interval_ms", "fwd_bwd_ms", "tail_ms", "computing_ms", "comm_ms", "comm_exposed_ms",
              "comm_overlapped_ms", "comm_receive_ms", "comm_collective_ms", "comm_tail_ms", "busy_ms", "free_ms",
              "preparing_ms", "bubble_ms", "warmup"},
    "memory": {"active_mb", "component", "device", "step"},
    "op_memory": {"stream", "device"},
    "comm_ops": {"step", "group", "size_mb", "start_ms"},
    "comm_links": {"step", "name", "group"},
}

# An op's pass (core/opnames.op_passes): the optimizer's updates apart from the other ops outside the network.
PASSES = ("forward", "backward", "optimizer", "other")


def empty(name: str) -> pd.DataFrame:
    """An empty table with the schema's columns and dtypes: a copy of one made once (made anew, 1 ms a table,
    and a large run's assembly and summary ask for dozens)."""
    return _empty_template(name).copy()


@functools.cache
def _empty_template(name: str) -> pd.DataFrame:
    return pd.DataFrame({col: pd.Series(dtype=dtype) for col, dtype in SCHEMA[name].items()})


class SchemaError(ValueError):
    """A reader's table breaks SCHEMA (a required column missing, values of the wrong kind): the loader says
    it in one line naming the reader and its folder, never as a traceback."""


def missing_columns(name: str, columns) -> list[str]:
    """The required columns of table `name` that `columns` lacks (a check that costs no coercion)."""
    optional = OPTIONAL_COLUMNS.get(name, set())
    return [col for col in SCHEMA[name] if col not in optional and col not in columns]


def table(name: str, data: pd.DataFrame | dict | list, rank: int | None = None, owned: bool = False
          ) -> pd.DataFrame:
    """Coerce reader output to the schema of table `name`.

    Missing optional columns are filled with NA, unknown columns are dropped, dtypes are enforced.
    A missing required column or values that are not of the column's kind raise SchemaError.
    `owned`: `data` is a DataFrame no one else holds (the loader's concatenation of every rank's pieces), changed
    in place rather than copied first (the memory samples of 4,096 ranks, 8.5 million rows: 0.7 s a copy).
    """
    frame = data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)
    if not owned:
        frame = frame.copy()
    if rank is not None:
        frame["rank"] = rank
    columns = SCHEMA[name]
    missing = missing_columns(name, frame.columns) if len(frame) else []
    if missing:
        raise SchemaError(f"table {name!r} lacks column(s) {', '.join(missing)}")
    for col in columns:
        if col not in frame.columns:
            frame[col] = _unknown(columns[col], frame.index)
    frame = frame[list(columns)]
    for col, dtype in columns.items():
        try:
            frame[col] = _coerced(frame[col], dtype)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"table {name!r} column {col!r} holds values that are not {dtype} "
                              f"({str(exc).splitlines()[0][:120]})") from None
    if name == "op_types":
        rank_total = frame.groupby("rank")["total_ms"].transform("sum")
        frame["share"] = (frame["total_ms"] / rank_total.where(rank_total > 0)).astype("float64")
        # largest first within each rank, as every op-type table perfkit shows (views: analysis.op_type_shares)
        frame = frame.sort_values(["rank", "total_ms"], ascending=[True, False], kind="stable")
    return frame.reset_index(drop=True)


def _unknown(dtype: str, index: pd.Index) -> pd.Series:
    """An absent column: what _coerced makes of NA (NA, NaN, 0 for int64) in every row, made at its dtype (a
    column of NA objects coerced cost 0.2 s for the memory samples of 1,024 ranks without step numbers)."""
    one = _coerced(pd.Series([pd.NA], dtype=object), dtype)
    return pd.Series(one.array.take(np.zeros(len(index), dtype=np.intp)), index=index)


def _coerced(column: pd.Series, dtype: str) -> pd.Series:
    if dtype == "object" or (dtype in ("float64", "int64") and column.dtype == dtype):
        return column  # already so: to_numeric and astype would copy millions of rows to the same values
    if dtype == "float64":
        return pd.to_numeric(column, errors="coerce").astype("float64")
    if dtype == "int64":
        return pd.to_numeric(column, errors="coerce").fillna(0).astype("int64")
    if dtype == "Int64":
        return pd.to_numeric(column, errors="coerce").astype("Int64")
    return column.astype(dtype)


@dataclass
class Meta:
    """What is known about how the run was made. None means the files do not tell."""

    device: str | None = None            # "Ascend" | "GPU" | "CPU"
    # "legacy" | "ascend_ms" | "ascend_db" | "cpu" | "gpu" | "kineto" | "minddata" | "manifest"
    layout: str | None = None
    ms_version: str | None = None
    mode: str | None = None              # "graph" | "pynative"
    ranks: list[int] = field(default_factory=list)
    data_mode: str | None = None         # "feed" | "sink"
    amp_level: str | None = None         # recorded by `perfkit profile`, else inferred from dtypes
    compute_dtype: str | None = None     # "float32" | "float16" | "bfloat16" | "mixed", from op input dtypes
    step_source: str | None = None       # where the step split came from, e.g. "step_trace"
    export: str | None = None            # "text" | "db": which export of an ASCEND_PROFILER_OUTPUT/ was read
    chip: str | None = None              # e.g. "Ascend910B" (NPU_INFO of the database export)
    synthetic_data: bool | None = None
    status: str | None = None            # manifest status: ok / interrupted / failed
    # "mindspore" | "torch_npu" (`*_ascend_pt` folders) | "torch" (torch.profiler traces): the wording of actions
    framework: str | None = None
    pipeline_stages: list[list[int]] | None = None  # global ranks of each pipeline stage, where the files tell
    memory_capacity_mb: float | None = None  # device (CPU: host) memory, recorded by `perfkit profile`
    host: dict[str, Any] = field(default_factory=dict)  # the host CPU's facts (flops.cpu_facts), recorded by `perfkit profile`
    env: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    script: str | None = None            # the user's script `perfkit profile --` ran (its path, from the manifest)
    # rank (as text: the cache keeps meta as JSON) -> the folder holding that rank's files alone (relative to the
    # run), where one does: a path to load or compare one rank by (`rank_1`, `rank1_ascend_pt`)
    rank_folders: dict[str, str] = field(default_factory=dict)
    # which of several profiler runs of each rank the folder holds was read (1-based in profiling order: schedule
    # cycles, dynamic-profiler windows; load's `cycle`): "last" where ranks hold different numbers of runs (each
    # rank's folder is in rank_folders); None where each rank has one
    cycle: int | str | None = None
    # the ranks whose op-level tables (io/formats/base.py: OP_LEVEL_TABLES) were read, where not every rank's: a
    # large run's representative ranks or those asked for (docs/many-ranks.md); None where every rank's were
    op_ranks: list[int] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields, their containers copied (dataclasses.asdict's answer; it deep-copies each string of a large
        run's rank_folders on its own: 15 ms at 4,096 ranks)."""
        return {name: _copied(getattr(self, name)) for name in self.__dataclass_fields__}


def _copied(value: Any) -> Any:
    """`value` with every dict, list and tuple in it copied, as dataclasses.asdict copies a field's value."""
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return kind(_copied(item) for item in value)
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def kept_on_run(build: Callable[["Run"], Any]) -> Callable[["Run"], Any]:
    """`build(run)`, computed once per run and kept on it until one of its tables is replaced: the ledger and the
    Cell tree are read by every view and every rule."""
    slot = f"_kept_{build.__module__}.{build.__qualname__}"

    @functools.wraps(build)
    def kept(run: "Run") -> Any:
        versions = run.table_versions()
        held = run.__dict__.get(slot)
        if held is not None and held[0] == versions:
            return held[1]
        value = build(run)
        run.__dict__[slot] = (versions, value)
        return value
    return kept


class _Table:
    """A Run table that may be given as a zero-argument function, called on first access.

    A warm load of a million-op run reads its op rows from the cache only when a command asks for
    them: `perfkit summary` and the dashboard's first page never do. Absent: an empty table.
    """

    def __set_name__(self, owner, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    def __get__(self, run, owner=None):
        if run is None:
            return None  # the dataclass default; __set__ makes it an empty table
        value = run.__dict__[self.slot]
        if callable(value):
            value = run.__dict__[self.slot] = value()
        return value

    def __set__(self, run, value) -> None:
        run.__dict__[self.slot] = empty(self.name) if value is None else value


@dataclass
class Run:
    """A loaded profiler run. Build one with `perfkit.load(path)`."""

    path: str
    meta: Meta
    op_types: pd.DataFrame = _Table()
    ops: pd.DataFrame = _Table()
    op_passes: pd.DataFrame = _Table()
    cells: pd.DataFrame = _Table()
    steps: pd.DataFrame = _Table()
    op_type_steps: pd.DataFrame = _Table()
    host_queue: pd.DataFrame = _Table()
    device_queue: pd.DataFrame = _Table()
    pipeline: pd.DataFrame = _Table()
    cpu_util: pd.DataFrame = _Table()
    memory: pd.DataFrame = _Table()
    op_memory: pd.DataFrame = _Table()
    comm_ops: pd.DataFrame = _Table()
    comm_links: pd.DataFrame = _Table()
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        """What a run is in one line (`print(run)`): its path, layout, ranks, steps, mode and status; its tables
        are its attributes (`run.steps`), the summary is `perfkit.summarize(run)`."""
        meta = self.meta
        steps = self.steps["step"].nunique() if len(self.steps) else 0
        ranks = meta.ranks if len(meta.ranks) <= 8 else f"{len(meta.ranks)} ranks"
        return (f"Run({self.path!r}, layout={meta.layout or 'unknown'}, ranks={ranks}, steps={steps}, "
                f"mode={meta.mode or 'unknown'}, status={meta.status or 'not recorded'})")

    def table_versions(self) -> tuple[int, ...]:
        """Identities of the tables as stored, without reading a deferred one (for memo keys)."""
        return tuple(id(self.__dict__[f"_{name}"]) for name in SCHEMA)

    @property
    def ranks(self) -> list[int]:
        return list(self.meta.ranks)

    @property
    def name(self) -> str:
        import os
        return os.path.basename(os.path.normpath(self.path)) or self.path

    def tables(self) -> dict[str, pd.DataFrame]:
        return {name: getattr(self, name) for name in SCHEMA}

    def rank(self, rank: int) -> "Run":
        """The same run restricted to one rank."""
        parts = {name: df[df["rank"] == rank].reset_index(drop=True) for name, df in self.tables().items()}
        meta = Meta(**{**self.meta.to_dict(), "ranks": [rank]})
        return Run(path=self.path, meta=meta, warnings=list(self.warnings), **parts)

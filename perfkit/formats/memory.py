"""Memory the allocators report: `memory` (samples over time) and `op_memory` (one row per op's block).

New layout (`ASCEND_PROFILER_OUTPUT/`, formats.md §3): `memory_record.csv` (per component: the
framework allocator `MindSpore`/`PTA`/`GE`/`PTA+GE`, and `APP`, the whole process, reserved only),
`npu_module_mem.csv` (reserved per CANN module, kept as component `CANN/<module>`) and
`operator_memory.csv` (KB and µs). CPU (MindSpore 2.10, `profile_memory=True`, formats.md §2):
`FRAMEWORK/cpu_ms_memory_record_{r}.txt` (ns and bytes). An empty cell is unknown (NA), never 0.

Times leave this reader as epoch ms; `on_run_clock` (called by the loader, which alone sees the step
times `perfkit profile` records next to the profiler's folder) turns them into ms since the run's start.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import FileFormatError
from ..units import BYTES_PER_MB, KB_PER_MB, NS_PER_MS, US_PER_MS
from .ascend_ms import OUTPUT_DIR, _codes, _read_profiler_info
from .base import Parts, Reader, float_columns, guarded, has_match, rank_of, read_csv_table, with_column

MEMORY_RECORD = "memory_record.csv"
OPERATOR_MEMORY = "operator_memory.csv"
MODULE_MEMORY = "npu_module_mem.csv"
FRAMEWORK_DIR = "FRAMEWORK"
CPU_MEMORY = "cpu_ms_memory_record_{}.txt"
CPU_MEMORY_GLOB = "cpu_ms_memory_record_*.txt"
# Component given to the CPU allocator's samples and prefixed to CANN module names (npu_module_mem has
# its own `APP`, which is not memory_record's whole-process `APP`).
CPU_COMPONENT = "MindSpore"
MODULE_PREFIX = "CANN/"

# Header aliases, {canonical: accepted headers}. Timestamps are text ending in a TAB: read as strings.
MEMORY_RECORD_COLUMNS = {
    "component": ("Component",),
    "time": ("Timestamp(us)",),
    "allocated_mb": ("Total Allocated(MB)",),
    "reserved_mb": ("Total Reserved(MB)",),
    "active_mb": ("Total Active(MB)",),
    "device": ("Device Type", "Device"),
}
MODULE_MEMORY_COLUMNS = {
    "component": ("Component",),
    "time": ("Timestamp(us)",),
    "reserved_mb": ("Total Reserved(MB)",),
    "device": ("Device", "Device Type"),
}
OPERATOR_MEMORY_COLUMNS = {
    "name": ("Name",),
    "size_kb": ("Size(KB)",),
    "allocated_at": ("Allocation Time(us)",),
    "released_at": ("Release Time(us)",),
    "duration": ("Duration(us)",),
    "stream": ("Stream Ptr",),
    "device": ("Device Type", "Device"),
}
CPU_MEMORY_COLUMNS = {
    "time": ("Timestamp(ns)",),
    "allocated_b": ("Total Allocated(Byte)",),
    "reserved_b": ("Total Reserved(Byte)",),
    "active_b": ("Total Active(Byte)",),
}
TEXT = pa.string()
# Read as text: names, and times (they end in a TAB); every other column is a float.
TEXT_COLUMNS = {"component", "device", "name", "stream", "time", "allocated_at", "released_at", "duration"}


def detect(folder: Path) -> bool:
    output = folder / OUTPUT_DIR
    return (has_match(output, (MEMORY_RECORD, OPERATOR_MEMORY, MODULE_MEMORY))
            or has_match(folder / FRAMEWORK_DIR, (CPU_MEMORY_GLOB,)))


def read(folder: Path) -> dict[int, Parts]:
    result: dict[int, Parts] = {}
    output = folder / OUTPUT_DIR
    if has_match(output, (MEMORY_RECORD, OPERATOR_MEMORY, MODULE_MEMORY)):
        parts = Parts()
        rank = _read_profiler_info(folder, parts)
        parts.meta = {}  # the layout reader gives the run's meta; this one only its memory
        _read_new_layout(output, parts)
        result[rank] = parts
    framework = folder / FRAMEWORK_DIR
    for path in sorted(framework.glob(CPU_MEMORY_GLOB)):
        rank = rank_of(path.name)
        if rank is None or rank in result:
            continue
        parts = Parts()
        memory = guarded(parts, path, lambda p: _read_cpu(p, parts.warnings))
        if memory is not None:
            parts.tables["memory"] = memory
        result[rank] = parts
    return result


def _read_new_layout(output: Path, parts: Parts) -> None:
    def load(name, aliases, required):
        types = {column: TEXT if column in TEXT_COLUMNS else pa.float64() for column in aliases}
        return guarded(parts, output / name, lambda p: read_csv_table(p, aliases, required, types, parts.warnings))

    samples = []
    record = load(MEMORY_RECORD, MEMORY_RECORD_COLUMNS, ("component", "time", "reserved_mb"))
    if record is not None:
        samples.append(_samples(record, MEMORY_RECORD, parts.warnings))
    modules = load(MODULE_MEMORY, MODULE_MEMORY_COLUMNS, ("component", "time", "reserved_mb"))
    if modules is not None:
        prefixed = pc.binary_join_element_wise(MODULE_PREFIX, modules.column("component").cast(pa.string()), "")
        modules = modules.set_column(modules.column_names.index("component"), "component", prefixed)
        samples.append(_samples(modules, MODULE_MEMORY, parts.warnings))
    samples = [table for table in samples if table.num_rows]
    if samples:
        # Arrow, made pandas once for all ranks by the loader: a cluster run has thousands of these small tables
        parts.tables["memory"] = pa.concat_tables(samples)
    blocks = load(OPERATOR_MEMORY, OPERATOR_MEMORY_COLUMNS, ("name", "size_kb", "allocated_at"))
    if blocks is not None:
        parts.tables["op_memory"] = _op_memory(blocks, parts.warnings)


def _numbers(column: pa.ChunkedArray, path_name: str, label: str, warnings: list[str]) -> np.ndarray:
    """A text column of numbers (profiler timestamps end in a TAB) as floats; an empty cell is NaN, a cell that
    is no number too, and said."""
    trimmed = pc.utf8_trim_whitespace(column.cast(pa.string()))
    try:  # every cell a number or empty: one cast in Arrow
        return pc.cast(trimmed, pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    text = pd.Series(trimmed.to_numpy(zero_copy_only=False))
    values = pd.to_numeric(text, errors="coerce").to_numpy(np.float64)
    unparsable = int((np.isnan(values) & text.fillna("").astype(bool).to_numpy()).sum())
    if unparsable:
        warnings.append(f"{path_name}: {unparsable} {label} value(s) that are not numbers treated as unknown")
    return values


def _sizes(values: np.ndarray, present: np.ndarray, path_name: str, label: str,
           warnings: list[str]) -> np.ndarray:
    """Sizes with negative or NaN values (a broken writer: a size cannot be either) made unknown and said;
    an empty cell (`present` False) is unknown already and says nothing."""
    bad = present & (np.isnan(values) | (values < 0) | np.isinf(values))
    if bad.any():
        warnings.append(f"{path_name}: {int(bad.sum())} negative or NaN {label} value(s) treated as unknown")
        values = np.where(bad, np.nan, values)
    return values


def _size_column(table: pa.Table, column: str, path_name: str, warnings: list[str], scale: float = 1.0):
    """A size column in MB (`scale`: the file's unit per MB); absent: all unknown."""
    if column not in table.column_names:
        return np.full(table.num_rows, np.nan)
    array = table.column(column)
    values = array.cast(pa.float64()).to_numpy().astype(np.float64, copy=False) / scale
    present = pc.is_valid(array).to_numpy(zero_copy_only=False)
    label = column.rpartition("_")[0]  # allocated_mb -> allocated
    return _sizes(values, present, path_name, label, warnings)


def _texts(table: pa.Table, column: str) -> pa.ChunkedArray:
    """A text column (null where empty); absent: all null."""
    if column not in table.column_names:
        return pa.chunked_array([pa.nulls(table.num_rows, pa.string())])
    return table.column(column).cast(pa.string())


def _samples(table: pa.Table, path_name: str, warnings: list[str]) -> pa.Table:
    """memory_record / npu_module_mem rows as memory sample columns, epoch ms, ordered by time within a
    component."""
    components, _ = _codes(table.column("component"))
    columns = {
        "time_ms": _numbers(table.column("time"), path_name, "timestamp", warnings) / US_PER_MS,
        "allocated_mb": _size_column(table, "allocated_mb", path_name, warnings),
        "reserved_mb": _size_column(table, "reserved_mb", path_name, warnings),
        "active_mb": _size_column(table, "active_mb", path_name, warnings),
        "component": _texts(table, "component"),
        "device": _texts(table, "device"),
    }
    return _in_time_order(columns, components, path_name, warnings)


def _in_time_order(columns: dict, components: np.ndarray, path_name: str, warnings: list[str]) -> pa.Table:
    """The columns as a table, without the rows that have no time, and sorted by time where rows within a
    component (`components`: a code per row) are out of time order. Both said. numpy and Arrow, not pandas: a
    cluster run has two of these tables per rank."""
    time_ms = columns["time_ms"]
    table = pa.table(columns)
    timed = ~np.isnan(time_ms)
    if not timed.all():
        warnings.append(f"{path_name}: skipped {int((~timed).sum())} row(s) without a timestamp")
        table, components, time_ms = table.filter(pa.array(timed)), components[timed], time_ms[timed]
    by_component = np.argsort(components, kind="stable")
    code, in_component = components[by_component], time_ms[by_component]
    backwards = int(((code[1:] == code[:-1]) & (in_component[1:] < in_component[:-1])).sum())
    if backwards:
        warnings.append(f"{path_name}: {backwards} row(s) out of time order; sorted by time")
    order = np.argsort(time_ms, kind="stable")
    return table if (order == np.arange(len(order))).all() else table.take(pa.array(order))


def _op_memory(table: pa.Table, warnings: list[str]) -> pa.Table:
    allocated_at = _numbers(table.column("allocated_at"), OPERATOR_MEMORY, "allocation time", warnings)
    released_at = (_numbers(table.column("released_at"), OPERATOR_MEMORY, "release time", warnings)
                   if "released_at" in table.column_names else np.full(table.num_rows, np.nan))
    duration_us = (_numbers(table.column("duration"), OPERATOR_MEMORY, "duration", warnings)
                   if "duration" in table.column_names else released_at - allocated_at)
    columns = {
        "name": _texts(table, "name"),
        "size_mb": _size_column(table, "size_kb", OPERATOR_MEMORY, warnings, scale=KB_PER_MB),
        "allocated_at_ms": allocated_at / US_PER_MS,
        "released_at_ms": released_at / US_PER_MS,
        "duration_ms": duration_us / US_PER_MS,
        "stream": _texts(table, "stream"),
        "device": _texts(table, "device"),
    }
    blocks = pa.table(columns)
    timed = ~np.isnan(allocated_at)
    if not timed.all():
        warnings.append(f"{OPERATOR_MEMORY}: skipped {int((~timed).sum())} row(s) without an allocation time")
        blocks = blocks.filter(pa.array(timed))
    return blocks


def _read_cpu(path: Path, warnings: list[str]) -> pa.Table:
    """cpu_ms_memory_record_{r}.txt: one sample per allocator event, epoch ns and bytes."""
    types = {"time": TEXT, "allocated_b": pa.float64(), "reserved_b": pa.float64(), "active_b": pa.float64()}
    table = read_csv_table(path, CPU_MEMORY_COLUMNS, ("time", "allocated_b"), types, warnings)
    rows = table.num_rows
    samples = _in_time_order({
        # epoch ns as float64 keep about 0.25 µs: far below the ms the table reports
        "time_ms": _numbers(table.column("time"), path.name, "timestamp", warnings) / NS_PER_MS,
        "allocated_mb": _size_column(table, "allocated_b", path.name, warnings, scale=BYTES_PER_MB),
        "reserved_mb": _size_column(table, "reserved_b", path.name, warnings, scale=BYTES_PER_MB),
        "active_mb": _size_column(table, "active_b", path.name, warnings, scale=BYTES_PER_MB),
        "component": pa.repeat(pa.scalar(CPU_COMPONENT), rows),
        "device": pa.repeat(pa.scalar("CPU"), rows),
    }, np.zeros(rows, dtype=np.int64), path.name, warnings)
    if not samples.num_rows:
        raise FileFormatError("has no row with a timestamp", path)
    return samples


def on_run_clock(tables: dict) -> None:
    """A rank's memory and op_memory times from epoch ms to ms since the run's start, in place (pandas or Arrow
    tables, kept as they are: a cluster run calls this once per rank).

    The run starts at the rank's first memory sample or block, or where its first profiled step began
    if earlier. With the step times `perfkit profile` records ("step_times", epoch ns, the clock
    MindSpore's CPU profiler stamps its memory records with) each sample also gets the step it falls in.
    """
    memory, blocks = tables.get("memory"), tables.get("op_memory")
    if memory is None and blocks is None:
        return
    step_times = tables.get("step_times")
    sample_ms = float_columns(memory, ["time_ms"])[:, 0] if memory is not None else None
    allocated_ms = float_columns(blocks, ["allocated_at_ms"])[:, 0] if blocks is not None else None
    starts = [_earliest(times) for times in (sample_ms, allocated_ms) if times is not None and len(times)]
    has_steps = step_times is not None and len(step_times) > 0
    if has_steps:  # a sample taken as the profiler started, before step 1's stamp, must not come out negative
        starts.append(step_times["begin_ns"].min() / NS_PER_MS)
    origin = min(starts)
    if memory is not None:
        sample_ms = sample_ms - origin
        memory = with_column(memory, "time_ms", sample_ms)
        if has_steps:
            times = step_times.sort_values("begin_ns")
            begin = times["begin_ns"].to_numpy(np.float64) / NS_PER_MS - origin
            end = times["end_ns"].to_numpy(np.float64) / NS_PER_MS - origin
            position = np.searchsorted(begin, sample_ms, side="right") - 1
            inside = (position >= 0) & (sample_ms < end[np.clip(position, 0, None)])
            step = pd.array(np.where(inside, times["step"].to_numpy()[np.clip(position, 0, None)], 0),
                            dtype="Int64")
            step[~inside] = pd.NA
            memory = with_column(memory, "step", step)
        tables["memory"] = memory
    if blocks is not None:
        released_ms = float_columns(blocks, ["released_at_ms"])[:, 0]
        tables["op_memory"] = with_column(with_column(blocks, "allocated_at_ms", allocated_ms - origin),
                                          "released_at_ms", released_ms - origin)


def _earliest(times: np.ndarray) -> float:
    """The smallest time, NaN where none is known (as pandas' min)."""
    known = times[~np.isnan(times)]
    return float(known.min()) if len(known) else np.nan


# Not a unit: memory files add to the rank whose profiler folder they sit in.
READER = Reader(name="memory", provides=frozenset({"memory", "op_memory"}), detect=detect, read=read, unit=False,
                finish=on_run_clock)

"""Memory the allocators report: `memory` (samples over time) and `op_memory` (one row per op's block).

New layout (`ASCEND_PROFILER_OUTPUT/`, docs/formats.md §3): `memory_record.csv` (per component: the
framework allocator `MindSpore`/`PTA`/`GE`/`PTA+GE`, and `APP`, the whole process, reserved only),
`npu_module_mem.csv` (reserved per CANN module, kept as component `CANN/<module>`) and
`operator_memory.csv` (KB and µs). CPU (MindSpore 2.10, `profile_memory=True`, docs/formats.md §2):
`FRAMEWORK/cpu_ms_memory_record_{r}.txt` (ns and bytes). An empty cell is unknown (NA), never 0.

Times leave this reader as epoch ms; `on_run_clock` (called by the loader, which alone sees the step
times `perfkit profile` records next to the profiler's folder) turns them into ms since the run's start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...core.errors import FileFormatError
from ...core.units import BYTES_PER_MB, KB_PER_MB, NS_PER_MS, US_PER_MS
from ..discovery import has_match
from .ascend_ms import OUTPUT_DIR, read_profiler_info
from .base import Parts, Reader
from .files import guarded, rank_of, read_csv_table
from .tables import float_columns, string_codes, strings_at, with_column

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
# Component names as codes into their few distinct values: samples are grouped by them, and a module's prefix
# goes on each distinct name, not on every row.
CODED = pa.dictionary(pa.int32(), pa.string())
# Every column not named here is read as a float; times too (see _read_csv).
TYPES = {"component": CODED, "device": TEXT, "name": TEXT, "stream": TEXT}
TIME_COLUMNS = {"time", "allocated_at", "released_at", "duration"}
NEW_LAYOUT_FILES = {MEMORY_RECORD, OPERATOR_MEMORY, MODULE_MEMORY}


def detect(folder: Path) -> bool:
    return (has_match(os.path.join(folder, OUTPUT_DIR), NEW_LAYOUT_FILES)
            or has_match(os.path.join(folder, FRAMEWORK_DIR), (CPU_MEMORY_GLOB,)))


def read(folder: Path) -> dict[int, Parts]:
    result: dict[int, Parts] = {}
    output = folder / OUTPUT_DIR
    present = NEW_LAYOUT_FILES.intersection(_names(output))  # one listing; an absent file is not looked at again
    if present:
        parts = Parts()
        rank = read_profiler_info(folder, parts)
        parts.meta = {}  # the layout reader gives the run's meta; this one only its memory
        _read_new_layout(output, present, parts)
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


def _names(folder: Path) -> list[str]:
    """The entry names of `folder`; none where it cannot be listed (has_match's view of it)."""
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _read_new_layout(output: Path, present: set[str], parts: Parts) -> None:
    def load(name, aliases, required):
        if name not in present:
            return None
        return guarded(parts, output / name, lambda p: _read_csv(p, aliases, required, parts.warnings))

    samples = []
    record = load(MEMORY_RECORD, MEMORY_RECORD_COLUMNS, ("component", "time", "reserved_mb"))
    if record is not None:
        samples.append(_samples(record, MEMORY_RECORD, parts.warnings))
    modules = load(MODULE_MEMORY, MODULE_MEMORY_COLUMNS, ("component", "time", "reserved_mb"))
    if modules is not None:
        samples.append(_samples(modules, MODULE_MEMORY, parts.warnings, prefix=MODULE_PREFIX))
    memory = _sample_table(samples)
    if memory is not None:
        # Arrow, made pandas once for all ranks by the loader: a cluster run has thousands of these small tables
        parts.tables["memory"] = memory
    blocks = load(OPERATOR_MEMORY, OPERATOR_MEMORY_COLUMNS, ("name", "size_kb", "allocated_at"))
    if blocks is not None:
        parts.tables["op_memory"] = _op_memory(blocks, parts.warnings)


def _read_csv(path: Path, aliases: dict[str, tuple[str, ...]], required: tuple[str, ...],
              warnings: list[str]) -> pa.Table:
    """The file's columns typed as they leave this reader, times as floats: Arrow's CSV parser trims the TAB a
    profiler timestamp ends in, and no cast follows. Where some time cell is no number that read fails, and
    the file is read again with its times as text, for `_numbers` to parse and say (any other fault the
    second read meets too, and reports as it would have)."""
    types = {column: TYPES.get(column, pa.float64()) for column in aliases}
    first_warnings: list[str] = []
    try:
        table = read_csv_table(path, aliases, required, types, first_warnings)
    except FileFormatError:
        types.update((column, TEXT) for column in TIME_COLUMNS.intersection(aliases))
        return read_csv_table(path, aliases, required, types, warnings)
    warnings += first_warnings
    return table


def _numbers(column: pa.ChunkedArray, path_name: str, label: str, warnings: list[str]) -> np.ndarray:
    """A column of numbers as floats, an empty cell NaN. Read as text (`_read_csv`: some cell is no number):
    trimmed (profiler timestamps end in a TAB) and parsed, a cell that is no number NaN too, and said."""
    import pandas as pd
    if pa.types.is_floating(column.type):
        return column.to_numpy()
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


def _sizes(table: pa.Table, columns: tuple[str, ...], path_name: str, warnings: list[str],
           scale: float = 1.0) -> np.ndarray:
    """Size columns in MB (`scale`: the file's unit per MB), one row of the array per column of `columns`, an
    absent one all unknown: numpy on them all at once. Negative or NaN values (a broken writer: a size cannot be
    either) are made unknown and said; an empty cell is unknown already and says nothing."""
    present = table.schema.names
    arrays = [table.column(column) if column in present else None for column in columns]
    values = np.array([array.to_numpy() if array is not None else np.full(table.num_rows, np.nan)
                       for array in arrays])
    if scale != 1.0:
        values /= scale
    bad = ~(values >= 0) | (values == np.inf)  # and the empty cells, NaN in `values`: counted, not said
    bad_counts = bad.sum(axis=1)
    said = False
    for column, array, count in zip(columns, arrays, bad_counts):
        count -= array.null_count if array is not None else table.num_rows
        if count:
            label = column.rpartition("_")[0]  # allocated_mb -> allocated
            warnings.append(f"{path_name}: {count} negative or NaN {label} value(s) treated as unknown")
            said = True
    if said:
        values[bad] = np.nan
    return values


def _texts(table: pa.Table, column: str) -> pa.ChunkedArray:
    """A text column (null where empty); absent: all null."""
    if column not in table.schema.names:
        return pa.chunked_array([pa.nulls(table.num_rows, pa.string())])
    return table.column(column)


SAMPLE_SIZES = ("allocated_mb", "reserved_mb", "active_mb")


class _FileSamples(NamedTuple):
    """A memory_record / npu_module_mem file's samples, every row as read."""

    time_ms: np.ndarray           # epoch ms
    sizes: np.ndarray             # MB, a row per SAMPLE_SIZES column
    components: np.ndarray        # a code per row into `names`, -1 where none
    names: pa.Array
    device: pa.ChunkedArray
    rows: np.ndarray | None       # the rows kept (those with a time), in time order; None: all, as they are


def _samples(table: pa.Table, path_name: str, warnings: list[str], prefix: str = "") -> _FileSamples:
    """The file's samples, `prefix` put before each component name."""
    time_ms = _numbers(table.column("time"), path_name, "timestamp", warnings) / US_PER_MS
    sizes = _sizes(table, SAMPLE_SIZES, path_name, warnings)
    components, names = string_codes(table.column("component"))
    if prefix:
        names = pc.binary_join_element_wise(prefix, names, "")
    rows = _time_order(time_ms, components, path_name, warnings)
    return _FileSamples(time_ms, sizes, components, names, _texts(table, "device"), rows)


def _sample_table(files: list[_FileSamples]) -> pa.Table | None:
    """The files' rows kept, file after file, as one table, None where there is none: one reordering for all
    the files (a cluster run reads thousands of ranks, and each call costs more than its ~1,000 rows)."""
    files = [file for file in files if file.rows is None or len(file.rows)]
    if not files:
        return None
    codes, rows, first_code, first_row = [], [], 0, 0
    for file in files:
        codes.append(np.where(file.components >= 0, file.components + first_code, -1) if first_code else
                     file.components)
        rows.append(file.rows + first_row if file.rows is not None else
                    np.arange(first_row, first_row + len(file.time_ms)))
        first_code += len(file.names)
        first_row += len(file.time_ms)
    time_ms, codes = np.concatenate([file.time_ms for file in files]), np.concatenate(codes)
    sizes = np.concatenate([file.sizes for file in files], axis=1)
    device = pa.chunked_array([chunk for file in files for chunk in file.device.chunks], pa.string())
    if any(file.rows is not None for file in files):
        rows = np.concatenate(rows)
        time_ms, sizes, codes, device = time_ms[rows], sizes[:, rows], codes[rows], device.take(rows)
    return pa.table({"time_ms": time_ms, **dict(zip(SAMPLE_SIZES, sizes)),
                     "component": strings_at(codes, pa.concat_arrays([file.names for file in files])),
                     "device": device})


def _time_order(time_ms: np.ndarray, components: np.ndarray | None, path_name: str,
                warnings: list[str]) -> np.ndarray | None:
    """The rows to keep, in the order to keep them: those that have a time, sorted by time where rows within a
    component (`components`: a code per row; None: one component) are out of time order. Both said. None: every
    row as it is. numpy, not pandas: a cluster run has two of these tables per rank."""
    rows = None
    untimed = np.isnan(time_ms)
    if untimed.any():
        warnings.append(f"{path_name}: skipped {int(untimed.sum())} row(s) without a timestamp")
        rows = np.flatnonzero(~untimed)
        time_ms = time_ms[rows]
        components = components[rows] if components is not None else None
    if (time_ms[1:] >= time_ms[:-1]).all():  # in order: so within each component too
        return rows
    if components is None:
        backwards = int((time_ms[1:] < time_ms[:-1]).sum())
    else:
        by_component = np.argsort(components, kind="stable")
        code, in_component = components[by_component], time_ms[by_component]
        backwards = int(((code[1:] == code[:-1]) & (in_component[1:] < in_component[:-1])).sum())
    if backwards:
        warnings.append(f"{path_name}: {backwards} row(s) out of time order; sorted by time")
    order = np.argsort(time_ms, kind="stable")
    return order if rows is None else rows[order]


def _op_memory(table: pa.Table, warnings: list[str]) -> pa.Table:
    present = table.schema.names
    allocated_at = _numbers(table.column("allocated_at"), OPERATOR_MEMORY, "allocation time", warnings)
    released_at = (_numbers(table.column("released_at"), OPERATOR_MEMORY, "release time", warnings)
                   if "released_at" in present else np.full(table.num_rows, np.nan))
    duration_us = (_numbers(table.column("duration"), OPERATOR_MEMORY, "duration", warnings)
                   if "duration" in present else released_at - allocated_at)
    columns = {
        "name": _texts(table, "name"),
        "size_mb": _sizes(table, ("size_kb",), OPERATOR_MEMORY, warnings, scale=KB_PER_MB)[0],
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
    table = _read_csv(path, CPU_MEMORY_COLUMNS, ("time", "allocated_b"), warnings)
    # epoch ns as float64 keep about 0.25 µs: far below the ms the table reports
    time_ms = _numbers(table.column("time"), path.name, "timestamp", warnings) / NS_PER_MS
    sizes = _sizes(table, ("allocated_b", "reserved_b", "active_b"), path.name, warnings, scale=BYTES_PER_MB)
    rows = _time_order(time_ms, None, path.name, warnings)
    if rows is not None:
        time_ms, sizes = time_ms[rows], sizes[:, rows]
    if not len(time_ms):
        raise FileFormatError("has no row with a timestamp", path)
    return pa.table({"time_ms": time_ms, **dict(zip(SAMPLE_SIZES, sizes)),
                     "component": pa.repeat(pa.scalar(CPU_COMPONENT), len(time_ms)),
                     "device": pa.repeat(pa.scalar("CPU"), len(time_ms))})


def on_run_clock(tables: dict) -> None:
    """A rank's memory and op_memory times from epoch ms to ms since the run's start, in place (pandas or Arrow
    tables, kept as they are: a cluster run calls this once per rank).

    The run starts at the rank's first memory sample or block, or where its first profiled step began
    if earlier. With the step times `perfkit profile` records ("step_times", epoch ns, the clock
    MindSpore's CPU profiler stamps its memory records with) each sample also gets the step it falls in.
    """
    import pandas as pd
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

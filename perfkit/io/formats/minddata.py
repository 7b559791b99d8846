"""MindData (dataset pipeline) profiling files, in any layout's folder (docs/formats.md §1, §2).

pipeline <- pipeline_profiling_{r}.json (raw queue-size samples, topology built as MindSpore's parser builds
            minddata_pipeline_raw_{r}.csv), else that CSV; a warning when both are there and differ; else
            MindSpore's analysis of it, minddata_pipeline_summary_{r}.json (ASCEND_PROFILER_OUTPUT/, MindSpore >= 2.3);
host_queue <- device_queue_profiling_{r}.txt (sink), else dataset_iterator_profiling_{r}.txt (feed);
device_queue <- minddata_aicpu_{r}.txt (Ascend, µs), else minddata_getnext_profiling_{r}.txt (GPU, ns);
cpu_util <- minddata_cpu_utilization_{r}.json.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.units import NS_PER_MS, US_PER_MS
from ..discovery import has_match
from .base import Parts, Reader
from .files import (
    guarded,
    is_readable_file,
    is_real_number,
    ranks_in,
    read_csv,
    read_json_object,
    read_text,
    with_folder_notes,
)
from .integers import COUNT, ID, checked, whole, wholes

if TYPE_CHECKING:
    import pandas as pd

PIPELINE_JSON = "pipeline_profiling_{}.json"
PIPELINE_CSV = "minddata_pipeline_raw_{}.csv"
# MindSpore's pipeline analysis (MindDataPiplineSummaryViewer, ASCEND_PROFILER_OUTPUT/ of MindSpore >= 2.3): per-op
# lists keyed by field, op_ids in order; percentages 0-100, -1 where an op has no queue or no parent.
PIPELINE_SUMMARY_JSON = "minddata_pipeline_summary_{}.json"
SINK_QUEUE_FILE = "device_queue_profiling_{}.txt"
FEED_QUEUE_FILE = "dataset_iterator_profiling_{}.txt"
ASCEND_GETNEXT_FILE = "minddata_aicpu_{}.txt"
GPU_GETNEXT_FILE = "minddata_getnext_profiling_{}.txt"
CPU_FILE = "minddata_cpu_utilization_{}.json"
PATTERNS = ("pipeline_profiling_*.json", "minddata_pipeline_raw_*.csv", "minddata_pipeline_summary_*.json",
            "device_queue_profiling_*.txt",
            "dataset_iterator_profiling_*.txt", "minddata_aicpu_*.txt", "minddata_getnext_profiling_*.txt",
            "minddata_cpu_utilization_*.json")

PIPELINE_COLUMNS = {
    "op_id": ("op_id",),
    "op_type": ("op_type",),
    "workers": ("num_workers",),
    "queue_sizes": ("output_queue_size",),
    "queue_length": ("output_queue_length",),
    "queue_usage": ("output_queue_usage_rate",),
    "parent_id": ("parent_id",),
    "children": ("children_id",),
}
PIPELINE_TYPES = {"op_id": pa.int64(), "op_type": pa.string(), "workers": pa.float64(), "queue_sizes": pa.string(),
                  "queue_length": pa.float64(), "queue_usage": pa.float64(), "parent_id": pa.float64(),
                  "children": pa.string()}
# Queue record lines: `type extra batch value [timestamp]`; type 1 = queue size sample.
QUEUE_RECORD = 1
QUEUE_MIN_FIELDS = 4
# GetNext lines: `name start end queue_size`; Ascend writes µs, GPU ns.
GETNEXT_FIELDS = 4
# minddata_cpu_utilization device_info / process_info keys -> cpu_util columns.
DEVICE_CPU_KEYS = {"user_pct": "user_utilization", "sys_pct": "sys_utilization",
                   "io_pct": "io_utilization", "idle_pct": "idle_utilization"}
PROCESS_CPU_KEYS = {"process_user_pct": "user_utilization", "process_sys_pct": "sys_utilization"}


def detect(folder: Path) -> bool:
    return has_match(folder, PATTERNS)


def read(folder: Path) -> dict[int, Parts]:
    notes: list[str] = []
    ranks = ranks_in(folder, PATTERNS, notes)
    if not ranks and notes:
        raise FileFormatError(notes[0], folder)
    return with_folder_notes({rank: _read_rank(folder, rank) for rank in ranks}, notes)


def _read_rank(folder: Path, rank: int) -> Parts:
    parts = Parts()
    present = {pattern: (folder / pattern.format(rank)) for pattern in
               (PIPELINE_JSON, PIPELINE_CSV, PIPELINE_SUMMARY_JSON, SINK_QUEUE_FILE, FEED_QUEUE_FILE, ASCEND_GETNEXT_FILE,
                GPU_GETNEXT_FILE, CPU_FILE)}
    present = {pattern: path for pattern, path in present.items() if is_readable_file(parts, path)}

    def first(*readers):
        """The first of (pattern, reader) whose file exists and reads."""
        for pattern, reader in readers:
            if pattern in present:
                result = guarded(parts, present[pattern], reader)
                if result is not None:
                    return result
        return None

    tables = {
        "pipeline": _pipeline(present, parts, first),
        "host_queue": first((SINK_QUEUE_FILE, lambda p: _read_host_queue(p, parts.warnings)),
                            (FEED_QUEUE_FILE, lambda p: _read_host_queue(p, parts.warnings))),
        "device_queue": first((ASCEND_GETNEXT_FILE, lambda p: _read_getnext(p, US_PER_MS, parts.warnings)),
                              (GPU_GETNEXT_FILE, lambda p: _read_getnext(p, NS_PER_MS, parts.warnings))),
        "cpu_util": first((CPU_FILE, lambda p: _read_cpu(p, parts.warnings))),
    }
    parts.tables = {name: frame for name, frame in tables.items() if frame is not None}
    if not parts.tables:
        names = ", ".join(path.name for path in present.values())
        raise FileFormatError(f"has no readable MindData file for rank {rank} ({names}: "
                              + "; ".join(parts.warnings) + ")", folder)
    # Only the on-chip GetNext files tell the device; a pipeline or host queue is written on every device.
    if ASCEND_GETNEXT_FILE in present:
        parts.meta["device"] = "Ascend"
    elif GPU_GETNEXT_FILE in present:
        parts.meta["device"] = "GPU"
    if {SINK_QUEUE_FILE, ASCEND_GETNEXT_FILE, GPU_GETNEXT_FILE} & present.keys():
        parts.meta["data_mode"] = "sink"
    elif FEED_QUEUE_FILE in present:
        parts.meta["data_mode"] = "feed"
    return parts



def _pipeline(present: dict[str, Path], parts: Parts, first) -> pd.DataFrame | None:
    """The pipeline from the raw JSON, else the CSV MindSpore parsed from it; when a folder holds both and
    their topologies differ (op ids, types, children), the JSON is used and a warning names both files."""
    from_json = first((PIPELINE_JSON, lambda p: _read_pipeline_json(p, parts.warnings)))
    from_csv = first((PIPELINE_CSV, lambda p: _read_pipeline_csv(p, parts.warnings)))
    if from_json is not None and from_csv is not None and _topology(from_json) != _topology(from_csv):
        parts.warnings.append(f"{present[PIPELINE_JSON].name} and {present[PIPELINE_CSV].name} describe "
                              f"different pipelines ({_topology_text(from_json)} vs {_topology_text(from_csv)}): "
                              f"using {present[PIPELINE_JSON].name}")
    if from_json is not None or from_csv is not None:
        return from_json if from_json is not None else from_csv
    return first((PIPELINE_SUMMARY_JSON, lambda p: _read_pipeline_summary(p, parts.warnings)))


SUMMARY_FIELDS = {"op_id": "op_ids", "op_type": "op_names", "workers": "num_workers",
                  "queue_usage": "queue_utilization_pct", "queue_empty_pct": "queue_empty_freq_pct",
                  "parent_id": "parent_id", "children": "children_ids"}


def _read_pipeline_summary(path: Path, warnings: list[str]) -> pd.DataFrame:
    """The pipeline from MindSpore's summary, where neither raw pipeline file is there: its per-op lists,
    queue usage as a 0-1 fraction; -1 (no queue, no parent) is unknown. Lists of unequal length or values that
    are no numbers are refused, naming the file."""
    import pandas as pd
    data = read_json_object(path, warnings)
    lists = {column: data.get(key) for column, key in SUMMARY_FIELDS.items()}
    if not isinstance(lists["op_id"], list) or not lists["op_id"]:
        raise FileFormatError("has no op_ids list", path)
    count = len(lists["op_id"])
    uneven = [SUMMARY_FIELDS[c] for c, values in lists.items() if values is not None
              and (not isinstance(values, list) or len(values) != count)]
    if uneven:
        raise FileFormatError(f"has per-op lists of another length than op_ids: {', '.join(uneven)}", path)
    frame = pd.DataFrame({column: values if values is not None else [None] * count for column, values in lists.items()})

    def known(column: str, scale: float = 1.0) -> pd.Series:
        values = pd.to_numeric(frame[column], errors="coerce")
        return values.where(values >= 0) / scale

    def counts(column: str) -> pd.Series:
        """A column of whole numbers, NA where -1 (none) or, said once, where the value is no whole number."""
        numbers, counted = wholes(frame[column].tolist(), ID)
        written = [value is not None and value != -1 for value in frame[column]]
        refused = int((~counted & written).sum())
        if refused:
            warnings.append(f"{path.name}: {refused} {SUMMARY_FIELDS[column]} value(s) not a whole number "
                            f"0-{ID.high:,}, treated as unknown")
        return pd.Series(pd.array(numbers, dtype="Int64")).where(counted)

    op_ids, counted = wholes(frame["op_id"].tolist(), ID)
    if not counted.all():
        raise FileFormatError("has op_ids that are not whole numbers", path)
    children = [[_op_id(child) for child in kids] if isinstance(kids, list) else [] for kids in frame["children"]]
    refused = sum(child is None for kids in children for child in kids)
    if refused:
        warnings.append(f"{path.name}: {refused} children_ids value(s) not an op id, left out")
    return pd.DataFrame({
        "op_id": op_ids, "op_type": frame["op_type"].astype("string"),
        "workers": counts("workers").where(lambda w: w > 0),
        "queue_usage": known("queue_usage", 100.0), "queue_empty_pct": known("queue_empty_pct"),
        "queue_length": pd.Series(pd.NA, index=frame.index, dtype="Int64"),
        "parent_id": counts("parent_id"),
        "children": [[child for child in kids if child is not None] for kids in children]})


def _op_id(value) -> int | None:
    """An op id of a JSON list: an integer that is a whole number of integers.ID (no float, no bool)."""
    return whole(value, ID) if type(value) is int else None


def _topology(pipeline: pd.DataFrame) -> list[tuple[int, str, tuple[int, ...]]]:
    return sorted((int(row.op_id), _op_name(row.op_type), tuple(sorted(int(c) for c in row.children)))
                  for row in pipeline.itertuples(index=False))


def _op_name(op_type) -> str:
    """`BatchOp` (MindSpore 1.x JSON) and `Batch` (its CSV, later JSON) name the same op."""
    return str(op_type).removesuffix("Op")


def _topology_text(pipeline: pd.DataFrame) -> str:
    return ", ".join(f"{op_id} {op_type}" for op_id, op_type, _ in _topology(pipeline))


def _read_pipeline_json(path: Path, warnings: list[str]) -> pd.DataFrame:
    """The ops as MindSpore's pipeline parser writes them to minddata_pipeline_raw_{r}.csv: from op 0 down,
    an op without output-queue metrics (EpochCtrl, a cache or repeat op) is dropped and its children are
    attached to its nearest kept ancestor; ops not under op 0 are not part of the pipeline."""
    import pandas as pd
    ops = read_json_object(path, warnings).get("op_info")
    if not isinstance(ops, list) or not ops:
        raise FileFormatError("has no op_info list", path)
    by_id = {}
    for op in ops:
        if not isinstance(op, dict) or not _is_count(op.get("op_id")):
            raise FileFormatError("has an op_info entry without an integer op_id", path)
        by_id[op["op_id"]] = op
        _check_op(op, path)
    if 0 not in by_id:
        raise FileFormatError("has no op 0 (the pipeline's root)", path)
    rows, parent_of, pending, placed, refused = [], {0: None}, deque([0]), {0}, 0
    while pending:
        op = by_id[pending.popleft()]
        workers = op.get("num_workers")
        if workers is not None and whole(workers, COUNT) is None:
            refused += 1
            workers = None
        children = _measured_children(op, by_id)
        queue = _output_queue(op)
        sizes = np.asarray(queue.get("size") or [], dtype="float64")
        length = queue.get("length")
        rows.append({
            "op_id": op["op_id"], "op_type": op.get("op_type"), "workers": workers,
            "queue_usage": sizes.mean() / length if len(sizes) and length else np.nan,
            "queue_empty_pct": 100.0 * (sizes == 0).mean() if len(sizes) else np.nan,
            "queue_length": length, "children": children, "parent_id": parent_of[op["op_id"]]})
        for child in children:
            parent_of[child] = op["op_id"]
        pending += [child for child in children if child not in placed]
        placed.update(children)
    if refused:
        warnings.append(f"{path.name}: {refused} num_workers value(s) not a count (a whole number 0-{COUNT.high:,}), "
                        "treated as unknown")
    return pd.DataFrame(rows).sort_values("op_id").reset_index(drop=True)


def _is_count(value) -> bool:
    """An op id as the pipeline files write it: an integer (no float, no bool) within integers.ID."""
    return type(value) is int and whole(value, ID) is not None


def _output_queue(op: dict) -> dict:
    """An op's output-queue metrics ({} where it has none); the op passed _check_op."""
    return (op.get("metrics") or {}).get("output_queue") or {}


def _check_op(op: dict, path: Path) -> None:
    """An op whose fields are not what MindSpore writes (children a list of op ids, metrics.output_queue an
    object with `size` a list of numbers and `length` a number >= 0) makes the file unusable: said in one
    line naming the op and the field, not a traceback from wherever the value would first be used."""
    def bad(field: str, what: str) -> FileFormatError:
        return FileFormatError(f"op {op['op_id']}: {field} is not {what}", path)
    children = op.get("children")
    if children is not None and not (isinstance(children, list) and all(map(_is_count, children))):
        raise bad("children", "a list of op ids")
    metrics = op.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        raise bad("metrics", "an object")
    queue = (metrics or {}).get("output_queue")
    if queue is None:
        return
    if not isinstance(queue, dict):
        raise bad("metrics.output_queue", "an object")
    sizes, length = queue.get("size"), queue.get("length")
    if sizes is not None and not (isinstance(sizes, list) and all(map(is_real_number, sizes))):
        raise bad("metrics.output_queue.size", "a list of numbers")
    if length is not None and not (is_real_number(length) and length >= 0):
        raise bad("metrics.output_queue.length", "a number >= 0")


def _measured_children(op: dict, by_id: dict) -> list[int]:
    """An op's children, each one without output-queue metrics replaced by its own children, recursively."""
    children, pending, seen = [], deque(op.get("children") or []), set()
    while pending:
        child_id = pending.popleft()
        child = by_id.get(child_id)
        if child is None or child_id in seen:
            continue  # a dangling id, or a cycle in a corrupt file
        seen.add(child_id)
        if _output_queue(child):
            children.append(child_id)
        else:
            pending += list(child.get("children") or [])
    return children


def _json_list(cell) -> list:
    if cell is None or (isinstance(cell, float) and np.isnan(cell)) or not str(cell).strip():
        return []
    try:
        value = boundedjson.loads(cell)
    except boundedjson.JSONError:
        return []
    return value if isinstance(value, list) else [value]


def _read_pipeline_csv(path: Path, warnings: list[str]) -> pd.DataFrame:
    frame = read_csv(path, PIPELINE_COLUMNS, ("op_id", "op_type"), PIPELINE_TYPES, warnings)

    def cells(column: str, holds, what: str) -> list[list]:
        """The column's JSON lists; a list holding anything else makes the file unusable, naming the op."""
        values = [_json_list(cell) for cell in frame.get(column, [None] * len(frame))]
        for op_id, value in zip(frame["op_id"], values):
            if not all(map(holds, value)):
                raise FileFormatError(f"op {op_id}: {PIPELINE_COLUMNS[column][0]} is not {what}", path)
        return values
    sizes = [np.asarray(value, dtype="float64") for value in cells("queue_sizes", is_real_number, "a list of numbers")]
    frame["queue_empty_pct"] = [100.0 * (s == 0).mean() if len(s) else np.nan for s in sizes]
    frame["children"] = cells("children", _is_count, "a list of op ids")
    # The writer puts 0 in output_queue_usage_rate for ops without a queue; an op without samples has none.
    if "queue_usage" in frame:
        frame.loc[[len(s) == 0 for s in sizes], "queue_usage"] = np.nan
    return frame.drop(columns="queue_sizes", errors="ignore")


def _whitespace_rows(path: Path, min_fields: int, warnings: list[str]) -> list[list[str]]:
    rows, bad = [], 0
    for line in read_text(path).splitlines():
        fields = line.split()
        if not fields:
            continue
        if len(fields) < min_fields:
            bad += 1
            continue
        rows.append(fields)
    if bad:
        warnings.append(f"{path.name}: skipped {bad} line(s) with fewer than {min_fields} fields (truncated)")
    return rows


def _read_host_queue(path: Path, warnings: list[str]) -> pd.DataFrame:
    """Queue records (`1 capacity batch size [timestamp]`) -> batch, size, capacity."""
    import pandas as pd
    rows = _whitespace_rows(path, QUEUE_MIN_FIELDS, warnings)
    kinds, typed = wholes([r[0] for r in rows], COUNT)
    records = [r for r, kind in zip(rows, kinds * typed) if kind == QUEUE_RECORD]  # other records' fields are not read
    columns = ["capacity", "batch", "size"]
    fields = [wholes([r[at] for r in records], COUNT) for at in range(1, QUEUE_MIN_FIELDS)]
    counted = np.logical_and.reduce([keep for _, keep in fields]) if records else np.zeros(0, bool)
    bad = int((~typed).sum() + (~counted).sum())
    if bad:
        warnings.append(f"{path.name}: skipped {bad} line(s) with a field that is not a count (a whole number "
                        f"0-{COUNT.high:,})")
    queue = pd.DataFrame({column: numbers[counted] for column, (numbers, _) in zip(columns, fields)})
    if not len(queue):
        raise FileFormatError("has no queue records (lines starting with 1)", path)
    return queue[["batch", "size", "capacity"]].reset_index(drop=True)


def _read_getnext(path: Path, ticks_per_ms: float, warnings: list[str]) -> pd.DataFrame:
    """`GetNext[_dequeue_wait] start end queue_size` -> one row per dequeue."""
    import pandas as pd
    rows = [r for r in _whitespace_rows(path, GETNEXT_FIELDS, warnings) if r[0].startswith("GetNext")]
    frame = pd.DataFrame([r[1:GETNEXT_FIELDS] for r in rows], columns=["start", "end", "size"])
    times = frame[["start", "end"]].apply(pd.to_numeric, errors="coerce")
    sizes, counted = checked(frame["size"], COUNT, path.name, "queue size", warnings)
    timed = times.notna().all(axis=1).to_numpy()
    frame, sizes = times[timed & counted], sizes[timed & counted]
    if not len(frame):
        raise FileFormatError("has no GetNext records", path)
    return pd.DataFrame({"batch": np.arange(1, len(frame) + 1), "size": sizes,
                         "capacity": pd.NA, "wait_ms": ((frame["end"] - frame["start"]) / ticks_per_ms).to_numpy()})


def _read_cpu(path: Path, warnings: list[str]) -> pd.DataFrame:
    """Per-sample CPU percentages. Series of different lengths (seen in MindSpore 2.10 files)
    are padded with NaN to the longest."""
    import pandas as pd
    data = read_json_object(path, warnings)
    device = data.get("device_info") or {}
    process = data.get("process_info") or {}
    if not isinstance(device, dict) or not isinstance(process, dict) or not (device or process):
        raise FileFormatError("has no device_info or process_info", path)
    series = {column: pd.to_numeric(pd.Series(source.get(key) if isinstance(source.get(key), list) else [],
                                              dtype="object"), errors="coerce").astype("float64")
              for keys, source in ((DEVICE_CPU_KEYS, device), (PROCESS_CPU_KEYS, process))
              for column, key in keys.items()}
    frame = pd.DataFrame(series)  # aligned on the sample index: shorter series end in NaN
    if not len(frame):
        raise FileFormatError("has no CPU samples", path)
    frame["sample"] = np.arange(len(frame))
    return frame


READER = Reader(name="minddata", provides=frozenset({"pipeline", "host_queue", "device_queue", "cpu_util"}),
                detect=detect, read=read, unit=False,
                looks_for="pipeline_profiling_*")

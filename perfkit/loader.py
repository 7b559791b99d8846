"""The one loader: discover -> cache lookup -> read -> assemble -> store.

Layouts are detected, never configured: the user may point at a legacy flat folder, the `profiler/`
folder or its parent, a `*_ascend_ms` folder, its `ASCEND_PROFILER_OUTPUT/`, a `perfkit profile`
output, or a parent holding one folder per rank. Every folder under the path is offered to every
reader of the registry (formats.READERS); each folder a reader claims is read into per-rank `Parts`,
and the Parts of all folders are assembled into one `Run`, cached as Parquet until a file changes.

>>> run = load("profiler_v1")          # doctest: +SKIP
>>> run.op_types.head()                 # doctest: +SKIP
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from . import cache, dask_ingest, model
from .errors import FileFormatError, LayoutError
from .formats import BY_NAME, READERS, db
from .formats.base import RUN_WIDE, Parts, Reader, merged_stages, screened
from .formats.steps import derive_steps, steps_from_times
from .model import Meta, Run
from .parallel import map_folders

# Folders that hold raw or internal files the readers reach from their unit root.
SKIP_DIRS = ("PROF_", "logs", "FRAMEWORK", "__pycache__")
MAX_DEPTH = 5
# The code a cached Run is built by: a change to any of it makes every entry stale.
PACKAGE = Path(__file__).resolve().parent
CODE = (PACKAGE / "formats", PACKAGE / "model.py", PACKAGE / "loader.py", PACKAGE / "cache.py")

Job = tuple[Reader, Path]
Warning = tuple[str, str]  # (where under the run's root, "." for the root itself; what)
# A message that many folders share is said once, naming this many of them.
NAMED_FOLDERS = 3


# ---------------------------------------------------------------- discover

def _walk(root: Path):
    """Folders under root, breadth first, not following symlinks (a link loop cannot trap us)."""
    queue = [(root, 0)]
    while queue:
        folder, depth = queue.pop(0)
        yield folder
        if depth >= MAX_DEPTH:
            continue
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(SKIP_DIRS):
                queue.append((Path(entry.path), depth + 1))


def _normalize(path: Path) -> Path:
    if path.name in ("ASCEND_PROFILER_OUTPUT", "FRAMEWORK"):
        return path.parent
    return path


def discover(path: str | os.PathLike) -> tuple[Path, list[Job]]:
    """The run's root and every (reader, folder) under it whose files that reader reads."""
    root = Path(path).expanduser()
    if not root.exists():
        raise LayoutError("does not exist", root)
    if not root.is_dir():
        raise LayoutError("is not a folder (pass the profiler output folder)", root)
    root = _normalize(root.resolve())
    return root, [(reader, folder) for folder in _walk(root) for reader in READERS if reader.detect(folder)]


# ---------------------------------------------------------------- load

def load(path: str | os.PathLike, dask: dask_ingest.Target | None = None) -> Run:
    """Read any MindSpore profiler folder into a `Run`: from the cache when the run's files are as they were.

    Read in worker processes here, or, with `dask` (else $PERFKIT_DASK, see dask_ingest.target), one task per
    rank folder on that Dask cluster; the Run is the same.
    """
    root, jobs = discover(path)
    entry = cache.run_entry(root, [(reader.name, folder) for reader, folder in jobs], CODE)
    run = cache.fetch(entry, reload=lambda name: getattr(load(root), name)) if entry is not None else None
    if run is None:
        results = _read_all(_read_folder, jobs, dask)
        run = assemble(root, jobs, results)
        if entry is not None:
            cache.store(entry, run)
    return run


def _read_all(function, jobs: list[Job], dask: dask_ingest.Target | None) -> list:
    """`function(reader name, folder)` for each job: in worker processes here, or on the Dask cluster."""
    arguments = [(reader.name, str(folder)) for reader, folder in jobs]
    where = dask or dask_ingest.target()
    if where is None:
        return map_folders(function, arguments)
    return dask_ingest.read_folders(where, arguments, function, cache.code_digest(CODE))


def _read_folder(reader_name: str, folder: str) -> dict[int, Parts] | FileFormatError:
    """One folder's Parts, screened; a folder whose files are all broken comes back as its error, not
    raised: it must not stop the other folders being read (module-level: run in worker processes)."""
    try:
        return screened(BY_NAME[reader_name].read(Path(folder)))
    except FileFormatError as exc:
        return exc


def _read_steps(reader_name: str, folder: str) -> dict[int, Parts]:
    """One folder's steps, screened (module-level: run in worker processes)."""
    return screened(BY_NAME[reader_name].read_steps(Path(folder)))


def load_steps(path: str | os.PathLike, dask: dask_ingest.Target | None = None
               ) -> tuple[Path, pd.DataFrame, list[str]]:
    """(root, the steps table of every rank, warnings): the cheap read behind questions across ranks.

    Layouts with `read_steps` (ascend_ms, legacy) read only their step file, about 1 ms a rank instead
    of every kernel table; a run with any unit folder whose layout has none (CPU, GPU: steps derived
    from op events) is loaded whole, through the cache.
    """
    root, jobs = discover(path)
    units = [(reader, folder) for reader, folder in jobs if reader.unit]
    if not units or any(reader.read_steps is None for reader, _ in units):
        run = load(root, dask)
        return root, run.steps, run.warnings
    results = _read_all(_read_steps, units, dask)
    failures = [result for result in results if isinstance(result, FileFormatError)]  # only from Dask
    by_rank = _by_rank((unit, result) for unit, result in zip(units, results)
                       if not isinstance(result, FileFormatError))
    _check_one_unit_per_rank(root, by_rank)
    warnings: list[Warning] = _skipped(root, failures)
    pieces: list[tuple[int, pd.DataFrame]] = []
    for rank in sorted(by_rank):
        for _, folder, parts in by_rank[rank]:
            warnings += _located(root, folder, parts.warnings)
            if len(parts.tables.get("steps", ())):
                pieces.append((rank, parts.tables["steps"]))
    return root, _combine("steps", pieces), _worded(warnings)


# ---------------------------------------------------------------- assemble

def assemble(root: Path, jobs: list[Job], results: list) -> Run:
    """The Run made of every folder's reader results (`results[i]` is jobs[i]'s {rank: Parts} or its error)."""
    failures = [result for result in results if isinstance(result, FileFormatError)]
    by_rank = _by_rank((job, result) for job, result in zip(jobs, results) if not isinstance(result, FileFormatError))
    run_wide = by_rank.pop(RUN_WIDE, [])
    _check_one_unit_per_rank(root, by_rank)
    _require_data(root, by_rank, failures)
    meta_fields: dict = {}
    warnings: list[Warning] = _skipped(root, failures)
    for _, _, parts in run_wide:
        _merge_meta(meta_fields, parts.meta)
        warnings += [(".", w) for w in parts.warnings]
    # Per-rank frames are tagged with their rank and validated once per table, not once per rank:
    # with hundreds of ranks, per-rank validation dominated the warm load time.
    tables: dict[str, list[tuple[int, pd.DataFrame]]] = {name: [] for name in model.SCHEMA}
    for rank in sorted(by_rank):
        for _, folder, parts in by_rank[rank]:
            _merge_meta(meta_fields, parts.meta)
            warnings += _located(root, folder, parts.warnings)
        rank_tables = _preferred_tables(by_rank[rank])
        if "steps" not in rank_tables:
            warnings += _derive_steps(rank, rank_tables, meta_fields)
        for reader in READERS:
            if reader.finish is not None:
                reader.finish(rank_tables)
        for name in model.SCHEMA:
            if name in rank_tables:
                tables[name].append((rank, rank_tables[name]))
    meta = Meta(**{k: v for k, v in meta_fields.items() if k in Meta.__dataclass_fields__})
    meta.ranks = sorted(by_rank)
    if meta.layout is None:  # no unit reader named a layout: only dataset files, or only perfkit's manifest
        readers = [reader for entries in by_rank.values() for reader, _, _ in entries]
        meta.layout = next((reader.name for reader in readers if _gives_run_tables(reader)), readers[0].name)
    warnings += _step_coverage(tables["steps"], by_rank)
    warnings += _op_coverage(tables["op_types"], by_rank)
    frames = {name: _combine(name, pieces) for name, pieces in tables.items()}
    frames["op_passes"] = op_pass_ms(frames["ops"])
    return Run(path=str(root), meta=meta, warnings=_worded(warnings), **frames)


def op_pass_ms(ops: pd.DataFrame) -> pd.DataFrame:
    """The op_passes table: per rank and pass, the summed time of the ops that are not communication."""
    from .analysis import comm_kind
    if not len(ops):
        return model.empty("op_passes")
    types = ops["type"].astype("string").fillna("")
    communication = types.map({t: comm_kind(t) is not None for t in types.unique()}).astype(bool)
    summed = (ops[~communication].groupby(["rank", "pass"], observed=True, sort=True)["total_ms"].sum()
              .reset_index())
    return model.table("op_passes", summed)


Entry = tuple[Reader, Path, Parts]


def _skipped(root: Path, failures: list[FileFormatError]) -> list[Warning]:
    """A folder none of whose files could be read (or that a Dask worker could not read): the rest of the run
    still loads, with a warning naming it."""
    folders: dict[str, list[str]] = {}
    for exc in failures:
        where = os.path.relpath(exc.path, root) if exc.path else "?"
        if where not in folders.setdefault(exc.message, []):  # one folder, several readers
            folders[exc.message].append(where)
    return [(".", f"skipped {_named(where)}: {message}") for message, where in folders.items()]


def _by_rank(read) -> dict[int, list[Entry]]:
    """((reader, folder), {rank: Parts}) pairs grouped by rank: {rank: [(reader, folder, parts), ...]}."""
    by_rank: dict[int, list[Entry]] = {}
    for (reader, folder), result in read:
        for rank, parts in result.items():
            by_rank.setdefault(rank, []).append((reader, folder, parts))
    return by_rank


def _require_data(root: Path, by_rank: dict[int, list[Entry]], failures: list[FileFormatError]) -> None:
    """A run needs a folder of a reader that gives Run tables, or recorded step times: a manifest that
    records nothing is no profile."""
    if any(_gives_run_tables(reader) or len(parts.tables.get("step_times", ()))
           for entries in by_rank.values() for reader, _, parts in entries):
        return
    if failures:
        raise failures[0]  # nothing else to show: the broken folder is the answer
    raise LayoutError(db.raw_data_hint(root) or (
        "no MindSpore profiler files found (looked for aicore_intermediate_*, step_trace_raw_*, "
        "ASCEND_PROFILER_OUTPUT/ text or database export, FRAMEWORK/cpu_op_*, gpu_op_*, pipeline_profiling_*, "
        "perfkit_run.json)" + db.unusable_note(root)), root)


def _gives_run_tables(reader: Reader) -> bool:
    return bool(reader.provides & model.SCHEMA.keys())


def _preferred_tables(entries: list[Entry]) -> dict[str, pd.DataFrame]:
    """A rank's tables, each from the first reader (in registry order) that gave it rows."""
    tables: dict[str, pd.DataFrame] = {}
    for _, _, parts in entries:
        for name, frame in parts.tables.items():
            if frame is not None and len(frame) and name not in tables:
                tables[name] = frame
    return tables


def _derive_steps(rank: int, tables: dict[str, pd.DataFrame], meta_fields: dict) -> list[Warning]:
    """Steps for a rank no reader gave a step table: from its op events (CPU, bounded by perfkit's recorded
    step times where there are some), else the recorded step times alone. Adds "steps" to `tables`."""
    if "op_events" in tables:
        steps, how = derive_steps(tables["op_events"], tables.get("step_times"))
        if not len(steps):
            return [(".", f"rank {rank}: steps unknown: {how}")]
        tables["steps"] = steps
        meta_fields.setdefault("step_source", how)
        if how == "first_op_timestamps":
            return [(".", f"rank {rank}: steps derived from op launch times (the k-th run of the first op starts "
                          "step k; ops ran different numbers of times): totals only, no interval/compute split")]
        return []
    if "step_times" in tables:
        tables["steps"] = steps_from_times(tables["step_times"])
        meta_fields.setdefault("step_source", "recorded_step_times")
        return [(".", f"rank {rank}: the profiler wrote no op data (stopped before its analysis?): step "
                      "times are the ones perfkit profile recorded, their split is unknown")]
    return []


def _op_coverage(op_types: list[tuple[int, pd.DataFrame]], by_rank: dict) -> list[Warning]:
    """A warning naming the ranks without op data when others have it: op-type totals and shares pool the
    ranks that have them, which may not stand for the rest (a pipeline stage, a rank whose files are missing)."""
    with_ops = {rank for rank, frame in op_types if len(frame)}
    without = sorted(set(by_rank) - with_ops)
    if not with_ops or not without:
        return []
    return [(".", f"op statistics only on rank(s) {sorted(with_ops)}; none on rank(s) {without}: op types are "
                  "over the ranks that have them")]


def _step_coverage(steps: list[tuple[int, pd.DataFrame]], by_rank: dict) -> list[Warning]:
    """A warning when no rank, or not every rank, has step times."""
    if not steps:
        return [(".", "steps unknown: no step trace, step_trace_time.csv or recorded step times")]
    without_steps = sorted(set(by_rank) - {rank for rank, _ in steps})
    if without_steps:
        return [(".", f"steps unknown on rank(s) {without_steps} (no step trace or step_trace_time.csv): "
                      "step times are over the other ranks only")]
    return []


def _combine(name: str, pieces: list[tuple[int, pd.DataFrame]]) -> pd.DataFrame:
    """One schema table from per-rank pieces."""
    if not pieces:
        return model.empty(name)
    combined = pd.concat([piece for _, piece in pieces], ignore_index=True)
    # one column for all ranks: an assign per rank cost more than the data with hundreds of ranks
    combined["rank"] = np.repeat([rank for rank, _ in pieces], [len(piece) for _, piece in pieces])
    return model.table(name, combined)


def _merge_meta(into: dict, new: dict) -> None:
    for key, value in new.items():
        if value is None:
            continue
        if key in ("env", "config"):
            into.setdefault(key, {}).update(value)
        elif key == "pipeline_stages" and key in into:
            into[key] = merged_stages(into[key], value)
        else:
            into.setdefault(key, value)


def _check_one_unit_per_rank(root: Path, by_rank: dict[int, list[Entry]]) -> None:
    """Two unit folders for one rank (or, in a run without unit folders, two folders of the same
    supplementary reader) are two runs side by side: the user must pick one."""
    for rank, entries in by_rank.items():
        folders = sorted({folder for reader, folder, _ in entries if reader.unit})
        if not folders:
            for name in {reader.name for reader, _, _ in entries if reader.name != "manifest"}:
                same = sorted({folder for reader, folder, _ in entries if reader.name == name})
                if len(same) > 1:
                    folders = same
                    break
        if len(folders) < 2:
            continue
        names = ", ".join(os.path.relpath(f, root) for f in folders)
        raise LayoutError(f"holds several runs for rank {rank} ({names}); pass one of them", root)


# ---------------------------------------------------------------- warnings

def _located(root: Path, folder: Path, warnings: list[str]) -> list[Warning]:
    """A folder's warnings, with where it is under the run's root."""
    where = os.path.relpath(folder, root)
    return [(where, w) for w in warnings]


def _worded(warnings: list[Warning]) -> list[str]:
    """Warnings as text, each message once: one that every rank's folder gives (the same file missing
    on 256 ranks) is one line naming how many folders and a few of them, not 256 lines."""
    places: dict[str, list[str]] = {}
    for where, message in warnings:
        places.setdefault(message, [])
        if where != "." and where not in places[message]:
            places[message].append(where)
    return [f"{_named(folders)}: {message}" if folders else message for message, folders in places.items()]


def _named(folders: list[str]) -> str:
    """Folders as a warning names them: all of a few, else how many and a few of them."""
    if len(folders) > NAMED_FOLDERS:
        return f"{len(folders)} folders ({', '.join(folders[:NAMED_FOLDERS - 1])}, …, {folders[-1]})"
    return ", ".join(folders)

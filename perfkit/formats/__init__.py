"""Find the profiler files under a path, read each layout, and assemble one `Run`.

Layouts are detected, never configured: the user may point at a legacy flat folder, the
`profiler/` folder or its parent, a `*_ascend_ms` folder, its `ASCEND_PROFILER_OUTPUT/`, a
`perfkit profile` output, or a parent holding one folder per rank. Each reader module says
whether a folder is its own (`detect`) and turns it into `Parts` per rank (`read`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pandas as pd

from .. import cache, model
from ..errors import FileFormatError, LayoutError
from ..model import Meta, Run
from . import ascend_ms, cpu, db, gpu, legacy, manifest, minddata
from .base import RUN_WIDE, Parts, screened
from .steps import derive_steps, steps_from_times

# Order matters: when two readers give the same table for a rank, the first one wins.
READERS = (manifest, ascend_ms, db, cpu, gpu, legacy, minddata)
# Readers whose folders are a rank's main data; two such folders with one rank are two runs.
UNIT_READERS = {ascend_ms, db, cpu, gpu, legacy}
# Folders that hold raw or internal files the readers above reach from their unit root.
SKIP_DIRS = ("PROF_", "logs", "FRAMEWORK", "__pycache__")
MAX_DEPTH = 5


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


def discover(path: str | os.PathLike) -> tuple[Path, list[tuple[object, Path]]]:
    """The run's root and every (reader, folder) under it whose files that reader reads."""
    root = Path(path).expanduser()
    if not root.exists():
        raise LayoutError("does not exist", root)
    if not root.is_dir():
        raise LayoutError("is not a folder (pass the profiler output folder)", root)
    root = _normalize(root.resolve())
    return root, [(reader, folder) for folder in _walk(root) for reader in READERS if reader.detect(folder)]


def _read_folder(reader_name: str, folder: str) -> dict[int, Parts] | FileFormatError:
    """One folder's Parts, screened; a folder whose files are all broken comes back as its error, not
    raised: it must not stop the other folders being read (module-level: run in worker processes)."""
    try:
        return screened(importlib.import_module(reader_name).read(Path(folder)))
    except FileFormatError as exc:
        return exc


def _by_rank(read) -> dict[int, list[tuple[object, Path, Parts]]]:
    """((reader, folder), {rank: Parts}) pairs grouped by rank: {rank: [(reader, folder, parts), ...]}."""
    by_rank: dict[int, list[tuple[object, Path, Parts]]] = {}
    for (reader, folder), result in read:
        for rank, parts in result.items():
            by_rank.setdefault(rank, []).append((reader, folder, parts))
    return by_rank


Warning = tuple[str, str]  # (where under the run's root, "." for the root itself; what)
# A message that many folders share is said once, naming this many of them.
NAMED_FOLDERS = 3


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
    lines = []
    for message, folders in places.items():
        if len(folders) > NAMED_FOLDERS:
            shown = ", ".join(folders[:NAMED_FOLDERS - 1])
            folders = [f"{len(folders)} folders ({shown}, …, {folders[-1]})"]
        lines.append(f"{', '.join(folders)}: {message}" if folders else message)
    return lines


def load(path: str | os.PathLike) -> Run:
    """Read any MindSpore profiler folder into a `Run`: from the cache when the run's files are as they were.

    >>> run = load("profiler_v1")          # doctest: +SKIP
    >>> run.op_types.head()                 # doctest: +SKIP
    """
    root, jobs = discover(path)
    entry = cache.run_entry(root, jobs)
    run = cache.fetch(entry) if entry is not None else None
    if run is None:
        run = _assemble(root, jobs)
        if entry is not None:
            cache.store(entry, run)
    return run


def _assemble(root: Path, jobs: list[tuple[object, Path]]) -> Run:
    """The Run made of every folder's reader results."""
    results = cache.map_folders(_read_folder, [(reader.__name__, str(folder)) for reader, folder in jobs])
    by_rank = _by_rank([(job, result) for job, result in zip(jobs, results) if not isinstance(result, FileFormatError)])
    failures = [result for result in results if isinstance(result, FileFormatError)]
    run_wide = by_rank.pop(RUN_WIDE, [])
    _check_one_unit_per_rank(root, by_rank)
    if not any(reader in UNIT_READERS or reader is minddata or "step_times" in parts.tables
               for entries in by_rank.values() for reader, _, parts in entries):
        if failures:
            raise failures[0]  # nothing else to show: the broken folder is the answer
        raise LayoutError(db.raw_data_hint(root) or (
            "no MindSpore profiler files found (looked for aicore_intermediate_*, step_trace_raw_*, "
            "ASCEND_PROFILER_OUTPUT/ text or database export, FRAMEWORK/cpu_op_*, gpu_op_*, pipeline_profiling_*, "
            "perfkit_run.json)" + db.unusable_note(root)), root)
    meta_fields: dict = {}
    # a folder none of whose files could be read: the rest of the run still loads
    warnings: list[Warning] = [(".", f"skipped {os.path.relpath(exc.path, root) if exc.path else '?'}: {exc.message}")
                               for exc in failures]
    # Per-rank frames are tagged with their rank and validated once per table, not once per rank:
    # with hundreds of ranks, per-rank validation dominated the warm load time.
    tables: dict[str, list[tuple[int, pd.DataFrame]]] = {name: [] for name in model.SCHEMA}
    for _, folder, parts in run_wide:
        _merge_meta(meta_fields, parts.meta)
        warnings += [(".", w) for w in parts.warnings]
    for rank in sorted(by_rank):
        rank_tables: dict[str, pd.DataFrame] = {}
        for reader, folder, parts in by_rank[rank]:
            _merge_meta(meta_fields, parts.meta)
            warnings += _located(root, folder, parts.warnings)
            for name, frame in parts.tables.items():
                if frame is None or not len(frame):
                    continue
                if name in rank_tables:
                    continue  # an earlier, preferred reader already gave this table
                rank_tables[name] = frame
        if "steps" not in rank_tables and "op_events" in rank_tables:
            steps, how = derive_steps(rank_tables["op_events"], rank_tables.get("step_times"))
            if len(steps):
                rank_tables["steps"] = steps
                meta_fields.setdefault("step_source", how)
            else:
                warnings.append((".", f"rank {rank}: steps unknown: {how}"))
        elif "steps" not in rank_tables and "step_times" in rank_tables:
            rank_tables["steps"] = steps_from_times(rank_tables["step_times"])
            meta_fields.setdefault("step_source", "recorded_step_times")
            warnings.append((".", f"rank {rank}: the profiler wrote no op data (stopped before its analysis?): step "
                                  "times are the ones perfkit profile recorded, their split is unknown"))
        for name in model.SCHEMA:
            if name in rank_tables:
                tables[name].append((rank, rank_tables[name]))
    meta = Meta(**{k: v for k, v in meta_fields.items() if k in Meta.__dataclass_fields__})
    meta.ranks = sorted(by_rank)
    if meta.layout is None:  # no unit reader named a layout: only dataset files, or only perfkit's manifest
        readers = {reader for entries in by_rank.values() for reader, _, _ in entries}
        meta.layout = "minddata" if minddata in readers else "manifest"
    if not tables["steps"]:
        warnings.append((".", "steps unknown: no step trace, step_trace_time.csv or recorded step times"))
    else:
        without_steps = sorted(set(by_rank) - {rank for rank, _ in tables["steps"]})
        if without_steps:
            warnings.append((".", f"steps unknown on rank(s) {without_steps} (no step trace or step_trace_time.csv): "
                                  "step times are over the other ranks only"))
    frames = {name: _combine(name, pieces) for name, pieces in tables.items()}
    return Run(path=str(root), meta=meta, warnings=_worded(warnings), **frames)


def _read_steps(reader_name: str, folder: str) -> dict[int, Parts]:
    """One folder's steps, screened (module-level: run in worker processes by cache.map_folders)."""
    return screened(importlib.import_module(reader_name).read_steps(Path(folder)))


def _combine(name: str, pieces: list[tuple[int, pd.DataFrame]]) -> pd.DataFrame:
    """One schema table from per-rank pieces."""
    if not pieces:
        return model.empty(name)
    combined = pd.concat([piece for _, piece in pieces], ignore_index=True)
    # one column for all ranks: an assign per rank cost more than the data with hundreds of ranks
    combined["rank"] = np.repeat([rank for rank, _ in pieces], [len(piece) for _, piece in pieces])
    return model.table(name, combined)


def load_steps(path: str | os.PathLike) -> tuple[Path, pd.DataFrame, list[str]]:
    """(root, the steps table of every rank, warnings): the cheap read behind questions across ranks.

    Layouts whose steps come from a step file alone (ascend_ms, legacy: `read_steps`) read only that
    file, about 1 ms a rank instead of every kernel table; layouts whose steps are derived from op
    events (CPU, GPU) are loaded whole, through the cache.
    """
    root, jobs = discover(path)
    units = [(reader, folder) for reader, folder in jobs if reader in UNIT_READERS]
    if not units or not all(hasattr(reader, "read_steps") for reader, _ in units):
        run = load(root)
        return root, run.steps, run.warnings
    results = cache.map_folders(_read_steps, [(reader.__name__, str(folder)) for reader, folder in units])
    by_rank = _by_rank(zip(units, results))
    _check_one_unit_per_rank(root, by_rank)
    warnings: list[Warning] = []
    pieces: list[tuple[int, pd.DataFrame]] = []
    for rank in sorted(by_rank):
        for _, folder, parts in by_rank[rank]:
            warnings += _located(root, folder, parts.warnings)
            if len(parts.tables.get("steps", ())):
                pieces.append((rank, parts.tables["steps"]))
    return root, _combine("steps", pieces), _worded(warnings)


def _merge_meta(into: dict, new: dict) -> None:
    for key, value in new.items():
        if value is None:
            continue
        if key in ("env", "config"):
            into.setdefault(key, {}).update(value)
        else:
            into.setdefault(key, value)


def _check_one_unit_per_rank(root: Path, by_rank: dict) -> None:
    for rank, entries in by_rank.items():
        folders = sorted({folder for reader, folder, _ in entries if reader in UNIT_READERS})
        if len(folders) < 2:
            folders = sorted({folder for reader, folder, _ in entries if reader is minddata})
            if len(folders) < 2 or any(reader in UNIT_READERS for reader, _, _ in entries):
                continue
        names = ", ".join(os.path.relpath(f, root) for f in folders)
        raise LayoutError(f"holds several runs for rank {rank} ({names}); pass one of them", root)

"""The one loader: discover -> cache lookup -> read -> assemble -> store.

Layouts are detected, never configured: the user may point at a legacy flat folder, the `profiler/`
folder or its parent, a `*_ascend_ms` folder, its `ASCEND_PROFILER_OUTPUT/`, a `perfkit profile`
output, or a parent holding one folder per rank. Every folder under the path is offered to every
reader (formats.readers(): the registry, then installed plugins); each folder a reader claims is read into per-rank `Parts`,
and the Parts of all folders are assembled into one `Run`, cached as Parquet until a file changes.

>>> run = load("profiler_v1")          # doctest: +SKIP
>>> run.op_types.head()                 # doctest: +SKIP
"""

from __future__ import annotations

import functools
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from ..core import model, plugins
from ..core.errors import FileFormatError, LayoutError
from ..core.model import Meta, Run
from ..core.scopes import cell_table
from . import cache, dask_ingest
from .formats import DERIVATIONS, by_name, plugin_problems, readers
from .formats.base import (
    INTERMEDIATE_TABLES,
    RUN_WIDE,
    Parts,
    Reader,
    as_pandas,
    column_names,
    is_arrow,
    listings_kept,
    merged_stages,
    screened,
    walk_names,
)
from .parallel import map_folders

# Folders that hold raw or internal files the readers reach from their unit root.
SKIP_DIRS = ("PROF_", "logs", "FRAMEWORK", "__pycache__")
MAX_DEPTH = 5
# The code a cached Run is built by: a change to any of it, or to an installed plugin's (plugins.code_paths),
# makes every entry stale. core/ holds the model and the op rules (scopes, op_work, opnames) that derive the
# Run's cells and op_passes tables.
PACKAGE = Path(__file__).resolve().parents[1]
CODE = (PACKAGE / "core", PACKAGE / "io" / "formats", PACKAGE / "io" / "loader.py", PACKAGE / "io" / "cache.py")
# How deep the "no profiler files" message looks for files that no reader took, and how many it names.
UNUSABLE_DEPTH = 3
SHOWN_UNUSABLE = 5

Job = tuple[Reader, Path]
Warning = tuple[str, str]  # (where under the run's root, "." for the root itself; what)
# A message that many folders share is said once, naming this many of them.
NAMED_FOLDERS = 3
# `cycle` of load/load_steps/timeline: which of several profiler runs of one rank to read, 1-based in profiling
# order, or LAST_CYCLE; None: a folder holding several is refused (several_runs).
Cycle = int | str | None
LAST_CYCLE = "last"


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
    root, jobs, _ = _discover(path)
    return root, jobs


def _discover(path: str | os.PathLike) -> tuple[Path, list[Job], list[Warning]]:
    """discover's answer, and a warning for each plugin reader whose detect raised (it then claims nothing)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise LayoutError("does not exist", root)
    if not root.is_dir():
        raise LayoutError("is not a folder (pass the profiler output folder)", root)
    root = _normalize(root.resolve())
    jobs: list[Job] = []
    problems: list[Warning] = []
    with listings_kept():
        for folder in _walk(root):
            for reader in readers():
                try:
                    if reader.detect(folder):
                        jobs.append((reader, folder))
                except Exception as exc:  # noqa: BLE001 - only a plugin's: perfkit's own detect raising is a bug
                    if reader.plugin is None:
                        raise
                    problems.append((os.path.relpath(folder, root), plugins.failure(reader.plugin, "detect", exc)))
    return root, jobs, problems


# ---------------------------------------------------------------- load

def load(path: str | os.PathLike, dask: dask_ingest.Target | None = None, cycle: Cycle = None) -> Run:
    """Read any MindSpore profiler folder into a `Run`: from the cache when the run's files are as they were.

    Read in worker processes here, or, with `dask` (else $PERFKIT_DASK, see dask_ingest.target), one task per
    rank folder on that Dask cluster; the Run is the same. `cycle`: which of several profiler runs of one rank
    the folder holds to read (1, 2, ... in profiling order, or "last"; see chosen_cycle); without it such a
    folder is refused.
    """
    root, jobs, problems = _discover(path)
    entry = cache.run_entry(root, [(reader.name, folder) for reader, folder in jobs], CODE + plugins.code_paths(),
                            "" if cycle is None else str(cycle))
    run = (cache.fetch(entry, reload=lambda name: getattr(load(root, dask, cycle), name)) if entry is not None
           else None)
    if run is None:
        results = _read_all(_read_folder, jobs, dask)
        run = assemble(root, jobs, results, problems, cycle)
        if entry is not None:
            cache.store_soon(entry, run)
    return run


def _read_all(function, jobs: list[Job], dask: dask_ingest.Target | None) -> list:
    """`function(reader name, folder)` for each job: in worker processes here, or on the Dask cluster."""
    arguments = [(reader.name, str(folder)) for reader, folder in jobs]
    where = dask or dask_ingest.target()
    if where is None:
        return map_folders(function, arguments)
    return dask_ingest.read_folders(where, arguments, function, cache.code_digest(CODE + plugins.code_paths()))


def _read_steps(reader_name: str, folder: str) -> dict[int, Parts] | FileFormatError:
    """One folder's steps alone (`read_steps`), as _read_folder reads them (module-level: run in workers)."""
    return _read_folder(reader_name, folder, steps_only=True)


def _read_folder(reader_name: str, folder: str, steps_only: bool = False) -> dict[int, Parts] | FileFormatError:
    """One folder's Parts (only its steps: `read_steps`), checked and screened; a folder whose files are all
    broken, whose reader gave nothing the schema allows, or whose plugin reader raised comes back as its
    error, not raised: it must not stop the other folders being read (module-level: run in worker processes)."""
    reader, path = by_name(reader_name), Path(folder)
    try:
        return screened(_checked(reader, path, (reader.read_steps if steps_only else reader.read)(path)))
    except FileFormatError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - only a plugin's: perfkit's own reader raising is a bug to see
        if reader.plugin is None:
            raise
        return FileFormatError(plugins.failure(reader.plugin, "reading this folder", exc), path)


def _checked(reader: Reader, folder: Path, result) -> dict[int, Parts]:
    """`result` without the tables that break the schema, each said in a warning naming the reader and the
    files it read; a result left without any table is that error, which names the folder."""
    if not isinstance(result, dict) or not all(isinstance(rank, int) and isinstance(parts, Parts)
                                               for rank, parts in result.items()):
        raise FileFormatError(f"{reader.label} returned {type(result).__name__}, not {{rank: Parts}}", folder)
    problems = []
    for rank, parts in result.items():
        for name, frame in list(parts.tables.items()):
            problem = _table_problem(name, frame, rank, values=reader.plugin is not None)
            if problem is not None:
                del parts.tables[name]
                read = f" (read from {', '.join(os.path.basename(s) for s in parts.sources[:3])})" if parts.sources else ""
                problems.append(f"{reader.label} gave table {name!r} {problem}{read}")
                parts.warnings.append(problems[-1] + "; left out")
    if problems and not any(parts.tables for parts in result.values()):
        raise FileFormatError(problems[0], folder)
    return result


def _table_problem(name: str, frame, rank: int, values: bool) -> str | None:
    """What makes a reader's table unusable, or None. Its values are checked here only for a plugin's reader
    (`values`): perfkit's own readers' tables are coerced once per table over all ranks, in _combine, which
    with hundreds of ranks costs a fraction of a coercion per rank; a plugin's broken table must be left out
    before it takes precedence over another source's."""
    if frame is None:
        return None
    if not isinstance(frame, pd.DataFrame) and not is_arrow(frame):
        return f"that is a {type(frame).__name__}, not a DataFrame"
    if name not in model.SCHEMA and name not in INTERMEDIATE_TABLES:
        return f"that the schema does not have (model.SCHEMA: {', '.join(model.SCHEMA)})"
    if not len(frame):
        return None
    columns = set(column_names(frame)) | {"rank"}
    missing = (model.missing_columns(name, columns) if name in model.SCHEMA
               else [c for c in INTERMEDIATE_TABLES[name] if c not in columns])
    if missing:
        return f"without column(s) {', '.join(missing)}"
    if values and name in model.SCHEMA:
        try:
            model.table(name, as_pandas(frame).drop(columns="rank", errors="ignore"), rank=0)
        except model.SchemaError as exc:
            return f"whose {str(exc).removeprefix(f'table {name!r} ')}"
    if rank == RUN_WIDE and "rank" in column_names(frame) \
            and pd.to_numeric(as_pandas(frame)["rank"], errors="coerce").isna().any():
        return "whose rank column holds values that are not ranks"
    return None


def load_steps(path: str | os.PathLike, dask: dask_ingest.Target | None = None, cycle: Cycle = None
               ) -> tuple[Path, pd.DataFrame, list[str]]:
    """(root, the steps table of every rank, warnings): the cheap read behind questions across ranks.

    Layouts with `read_steps` (ascend_ms, legacy) read only their step file, about 1 ms a rank instead
    of every kernel table; a run with any unit folder whose layout has none (CPU, GPU: steps derived
    from op events) is loaded whole, through the cache.
    """
    root, jobs, _ = _discover(path)
    units = [(reader, folder) for reader, folder in jobs if reader.unit]
    if not units or any(reader.read_steps is None for reader, _ in units):
        run = load(root, dask, cycle)
        return root, run.steps, run.warnings
    results = _read_all(_read_steps, units, dask)
    failures = [result for result in results if isinstance(result, FileFormatError)]
    by_rank = _by_rank((job, result) for job, result in zip(units, results) if not isinstance(result, FileFormatError))
    if not by_rank and failures:
        raise failures[0]
    by_rank = _of_cycle(by_rank, chosen_cycle(root, _runs_by_rank(by_rank), cycle)[0])
    warnings = _skipped(root, failures)
    pieces: list[Piece] = []
    for rank in sorted(by_rank):
        for reader, folder, parts in by_rank[rank]:
            warnings += _located(root, folder, parts.warnings)
            if len(parts.tables.get("steps", ())):
                pieces.append((rank, parts.tables["steps"], (folder, reader)))
    steps, unusable = _combine(root, "steps", pieces)
    return root, steps, _worded(warnings + unusable)


# ---------------------------------------------------------------- assemble

Entry = tuple[Reader, Path, Parts]
Piece = tuple[int, pd.DataFrame, tuple[Path, Reader]]  # (rank, table, where it came from)


def assemble(root: Path, jobs: list[Job], results: list, problems: list[Warning] = (), cycle: Cycle = None) -> Run:
    """The Run made of every folder's reader results (`results[i]` is jobs[i]'s {rank: Parts} or its error);
    `problems`: what discovery has to say (a plugin's detect that raised); `cycle`: as load's."""
    failures = [result for result in results if isinstance(result, FileFormatError)]
    by_rank = _by_rank((job, result) for job, result in zip(jobs, results) if not isinstance(result, FileFormatError))
    left_out, chosen = chosen_cycle(root, _runs_by_rank(by_rank), cycle)
    by_rank = _of_cycle(by_rank, left_out)
    run_wide = by_rank.pop(RUN_WIDE, [])
    _require_data(root, by_rank, run_wide, failures)
    meta_fields: dict = {}
    warnings: list[Warning] = [(".", problem) for problem in plugin_problems()] + list(problems)
    warnings += _skipped(root, failures)
    for _, folder, parts in run_wide:
        _merge_meta(meta_fields, parts.meta)
        warnings += _located(root, folder, parts.warnings)
    for rank, entries in _spread(run_wide, sorted(by_rank)).items():
        by_rank.setdefault(rank, []).extend(entries)
    # Per-rank frames are tagged with their rank and validated once per table, not once per rank:
    # with hundreds of ranks, per-rank validation dominated the warm load time.
    tables: dict[str, list[Piece]] = {name: [] for name in model.SCHEMA}
    for rank in sorted(by_rank):
        for _, folder, parts in by_rank[rank]:
            _merge_meta(meta_fields, parts.meta)
            warnings += _located(root, folder, parts.warnings)
        rank_tables, origins = _rank_tables(root, rank, by_rank[rank], meta_fields, warnings)
        for reader in readers():
            if reader.finish is not None:
                warnings += _finished(reader, rank_tables)
        for name in model.SCHEMA:
            if name in rank_tables:
                tables[name].append((rank, rank_tables[name], origins[name]))
    if meta_fields.get("no_op_data") and meta_fields.get("status") in (None, "ok"):
        meta_fields["status"] = "incomplete"  # ended "ok", yet the profiler wrote no op data: the split is unknown
    meta = Meta(**{k: v for k, v in meta_fields.items() if k in Meta.__dataclass_fields__})
    meta.ranks = sorted(by_rank)
    meta.rank_folders = _rank_folders(root, by_rank)
    meta.cycle = chosen
    if meta.layout is None:  # no unit reader named a layout: only dataset files, or only perfkit's manifest
        named = [reader for entries in [*by_rank.values(), run_wide] for reader, _, _ in entries]
        meta.layout = next((reader.name for reader in named if _gives_run_tables(reader)), named[0].name)
    frames, unusable = {}, []
    for name, pieces in tables.items():
        frames[name], left_out = _combine(root, name, pieces)
        unusable += left_out
    if unusable and not any(len(frame) for frame in frames.values()):
        where, message = unusable[0]
        raise FileFormatError(message.removesuffix("; left out"), root / where)  # nothing else to show
    warnings += unusable
    warnings += _step_coverage(tables["steps"], by_rank)
    warnings += _op_coverage(tables["op_types"], by_rank)
    frames["op_passes"] = op_pass_ms(frames["ops"])
    frames["cells"] = cell_table(frames["ops"])
    return Run(path=str(root), meta=meta, warnings=_worded(warnings), **frames)


def op_pass_ms(ops: pd.DataFrame) -> pd.DataFrame:
    """The op_passes table: per rank and pass, the summed time of the ops that are not communication."""
    from ..core.opnames import comm_kind
    if not len(ops):
        return model.empty("op_passes")
    types = ops["type"].astype("string").fillna("")
    communication = types.map({t: comm_kind(t) is not None for t in types.unique()}).astype(bool)
    summed = (ops[~communication].groupby(["rank", "pass"], observed=True, sort=True)["total_ms"].sum()
              .reset_index())
    return model.table("op_passes", summed)


def _finished(reader: Reader, tables: dict) -> list[Warning]:
    """reader.finish(tables); a plugin's that raises is a warning naming it (the tables as they were). perfkit's
    own finish takes Arrow tables as they are; a plugin's is given DataFrames, as it always was."""
    if reader.plugin is not None:
        tables.update({name: as_pandas(frame) for name, frame in tables.items()})
    try:
        reader.finish(tables)
    except Exception as exc:  # noqa: BLE001 - only a plugin's: perfkit's own finish raising is a bug to see
        if reader.plugin is None:
            raise
        return [(".", plugins.failure(reader.plugin, "finish", exc))]
    return []


def _rank_folders(root: Path, by_rank: dict[int, list[Entry]]) -> dict[str, str]:
    """Per rank, the folder (relative to `root`) that holds every file of that rank and none of another's:
    `rank_1` of a `perfkit profile --ranks 2` run, `rank1_ascend_pt` of a cluster export. Ranks sharing a folder
    (a legacy folder of several ranks' files, a single-rank run at the root) have none."""
    common = {rank: os.path.commonpath([str(folder) for _, folder, _ in entries])
              for rank, entries in by_rank.items() if rank != RUN_WIDE}
    # sets of folders and of their ancestors, not every pair of ranks: 4,096 ranks made 16 million pairs;
    # as text, not Paths (whose parents cost 0.1 ms a rank)
    shared = Counter(common.values())
    above = {parent for folder in shared for parent in _ancestors(folder)}
    return {str(rank): _relative(folder, root) for rank, folder in common.items()
            if folder != str(root) and shared[folder] == 1 and folder not in above
            and not any(parent in shared for parent in _ancestors(folder))}


def _relative(folder: str, root: Path) -> str:
    """os.path.relpath(folder, root) for a folder under `root` (both absolute and normalised, as discovery
    makes them): the text cut, as relpath's own normalising cost a 4,096-rank load ~0.3 s; `root` itself and
    anything else, relpath's answer."""
    start = os.path.join(str(root), "")
    return folder[len(start):] if folder.startswith(start) else os.path.relpath(folder, root)


@functools.lru_cache(maxsize=1024)
def _ancestors(path: str) -> tuple[str, ...]:
    """The folders above an absolute path, nearest first, up to `/` (Path.parents, as text). Kept for the folders
    asked of most: the parents shared by a cluster run's thousands of rank folders."""
    parent = os.path.dirname(path)
    return () if parent == path else (parent, *_ancestors(parent))


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


def _spread(run_wide: list[Entry], ranks: list[int]) -> dict[int, list[Entry]]:
    """The tables of RUN_WIDE Parts as per-rank entries: a table with a rank column split by it, one without
    given to every rank of the run (`ranks` and those the rank columns name; rank 0 where there is none)."""
    given = [{name: as_pandas(frame) for name, frame in parts.tables.items() if frame is not None and len(frame)}
             for _, _, parts in run_wide]
    rank_columns = {id(frame): pd.to_numeric(frame["rank"]).astype("int64")
                    for tables in given for frame in tables.values() if "rank" in frame.columns}
    every = sorted(set(ranks).union(*(set(column) for column in rank_columns.values()))) or [0]
    spread: dict[int, list[Entry]] = {}
    for (reader, folder, _), tables in zip(run_wide, given):
        per_rank: dict[int, Parts] = {}
        for name, frame in tables.items():
            if id(frame) in rank_columns:
                pieces = {int(rank): piece.drop(columns="rank") for rank, piece in frame.groupby(rank_columns[id(frame)])}
            else:
                pieces = {rank: frame for rank in every}
            for rank, piece in pieces.items():
                per_rank.setdefault(rank, Parts()).tables[name] = piece
        for rank, parts in per_rank.items():
            spread.setdefault(rank, []).append((reader, folder, parts))
    return spread


def _require_data(root: Path, by_rank: dict[int, list[Entry]], run_wide: list[Entry],
                  failures: list[FileFormatError]) -> None:
    """A run needs a folder of a reader that gives Run tables, or a table a derivation turns into one (recorded
    step times): a manifest that records nothing is no profile."""
    needs = {need for derivation in DERIVATIONS for need in derivation.needs}
    if any(_gives_run_tables(reader) or any(len(parts.tables.get(need, ())) for need in needs)
           for entries in [*by_rank.values(), run_wide] for reader, _, parts in entries):
        return
    if failures:
        raise failures[0]  # nothing else to show: the broken folder is the answer
    hint = next((hint for reader in readers() if reader.raw_data_hint is not None
                 for hint in [reader.raw_data_hint(root)] if hint), None)
    looked_for = ", ".join(reader.looks_for for reader in readers() if reader.looks_for)
    raise LayoutError(hint or f"no MindSpore profiler files found (looked for {looked_for}){_unusable_note(root)}",
                      root)


def _unusable_note(root: Path) -> str:
    """'; found only files perfkit does not read: …' naming a few files under root that look like profiler
    output (csv, json, txt, db, pb), or that there are none."""
    found = [os.path.relpath(folder / name, root) for folder, names in walk_names(root, UNUSABLE_DEPTH)
             for name in names if name.endswith((".csv", ".json", ".txt", ".db", ".pb")) and (folder / name).is_file()]
    if not found:
        return "; the folder holds no such files"
    shown = ", ".join(found[:SHOWN_UNUSABLE]) + (f" and {len(found) - SHOWN_UNUSABLE} more"
                                                 if len(found) > SHOWN_UNUSABLE else "")
    return f"; found only files perfkit does not read: {shown}"


def _gives_run_tables(reader: Reader) -> bool:
    return bool(reader.provides & model.SCHEMA.keys())


def _rank_tables(root: Path, rank: int, entries: list[Entry], meta_fields: dict, warnings: list[Warning]
                 ) -> tuple[dict[str, pd.DataFrame], dict[str, tuple[Path, Reader]]]:
    """A rank's tables and where each came from, by the precedence base.Reader states: the first reader in
    priority that gives the table (and does not merely fill it), else a derivation, else a reader that fills
    it. What a winner replaces from another reader is said in `warnings`."""
    priority = {reader.name: index for index, reader in enumerate(readers())}
    ordered = sorted(entries, key=lambda entry: priority[entry[0].name])
    given = [(name, frame, reader, folder) for reader, folder, parts in ordered
             for name, frame in parts.tables.items() if frame is not None and len(frame)]
    tables: dict[str, pd.DataFrame] = {}
    origins: dict[str, tuple[Path, Reader]] = {}
    for name, frame, reader, folder in given:
        if name not in reader.fills and name not in tables:
            tables[name], origins[name] = frame, (folder, reader)
    for derivation in DERIVATIONS:
        sources = [(reader, folder) for name, _, reader, folder in given if name in derivation.needs]
        if derivation.table in tables:
            winner = origins[derivation.table][1]
            warnings += [(os.path.relpath(origins[derivation.table][0], root),
                          f"{derivation.table}: {winner.label}'s table replaces the one {reader.label} "
                          f"would give through {'/'.join(derivation.needs)}")
                         for reader in {reader.name: reader for reader, _ in sources
                                        if reader is not winner and reader.unit}.values()]
        elif sources:
            frame, meta, said = derivation.derive(rank, {name: as_pandas(tables[name]) for name in tables})
            _merge_meta(meta_fields, meta)
            warnings += [(".", line) for line in said]
            if frame is not None and len(frame):
                tables[derivation.table], origins[derivation.table] = frame, sources[0][::-1]
    for name, frame, reader, folder in given:
        if name in reader.fills and name not in tables:
            tables[name], origins[name] = frame, (folder, reader)
    for name, frame, reader, folder in given:  # another reader's table of the same name, left out
        winner = origins.get(name, (None, reader))[1]
        if reader is not winner and reader.unit and name not in reader.fills and name in model.SCHEMA:
            warnings.append((os.path.relpath(folder, root), f"{name}: {winner.label}'s table is used, "
                                                            f"{reader.label}'s left out"))
    return tables, origins


def _op_coverage(op_types: list[Piece], by_rank: dict) -> list[Warning]:
    """A warning naming the ranks without op data when others have it: op-type totals and shares pool the
    ranks that have them, which may not stand for the rest (a pipeline stage, a rank whose files are missing)."""
    with_ops = {rank for rank, frame, _ in op_types if len(frame)}
    without = sorted(set(by_rank) - with_ops)
    if not with_ops or not without:
        return []
    return [(".", f"op statistics only on rank(s) {sorted(with_ops)}; none on rank(s) {without}: op types are "
                  "over the ranks that have them")]


def _step_coverage(steps: list[Piece], by_rank: dict) -> list[Warning]:
    """A warning when no rank, or not every rank, has step times."""
    if not steps:
        return [(".", "steps unknown: no step trace, step_trace_time.csv or recorded step times")]
    without_steps = sorted(set(by_rank) - {rank for rank, _, _ in steps})
    if without_steps:
        return [(".", f"steps unknown on rank(s) {without_steps} (no step trace or step_trace_time.csv): "
                      "step times are over the other ranks only")]
    return []


def _combine(root: Path, name: str, pieces: list[Piece]) -> tuple[pd.DataFrame, list[Warning]]:
    """One schema table from per-rank pieces, and a warning for each reader's piece whose values break the
    schema (those are found piece by piece only when the whole fails: one coercion per table, not per rank)."""
    if not pieces:
        return model.empty(name), []
    combined = _concatenated([frame for _, frame, _ in pieces])
    # one column for all ranks: an assign per rank cost more than the data with hundreds of ranks
    combined["rank"] = np.repeat([rank for rank, _, _ in pieces], [len(frame) for _, frame, _ in pieces])
    try:
        return model.table(name, combined, owned=True), []
    except model.SchemaError:
        pass
    kept, unusable = [], []
    for piece in pieces:
        rank, frame, (folder, reader) = piece
        try:
            model.table(name, as_pandas(frame), rank=rank)
            kept.append(piece)
        except model.SchemaError as exc:
            unusable.append((os.path.relpath(folder, root), f"{reader.label}: {exc}; left out"))
    return _combine(root, name, kept)[0], unusable


def _concatenated(frames: list) -> pd.DataFrame:
    """One DataFrame of the ranks' pieces of a table: Arrow pieces concatenated as Arrow and made pandas once
    (the pieces' columns unified: a column one rank lacks is null there, as pandas' concat makes it NA);
    otherwise, or where Arrow cannot unify the pieces' types, each made pandas and concatenated by pandas."""
    if all(is_arrow(frame) for frame in frames):
        import pyarrow as pa
        try:
            return pa.concat_tables(frames, promote_options="permissive").to_pandas()
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
    return pd.concat([as_pandas(frame) for frame in frames], ignore_index=True)


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


def _runs_by_rank(by_rank: dict[int, list[Entry]]) -> dict[int, list[Path]]:
    """Per rank, the folders that each hold a whole run of it: its unit folders (or, in a run without unit
    folders, the folders of one supplementary reader). Two for one rank are two runs side by side: schedule
    cycles, dynamic-profiler windows."""
    runs: dict[int, list[Path]] = {}
    for rank, entries in by_rank.items():
        if rank == RUN_WIDE:
            continue
        folders = sorted({folder for reader, folder, _ in entries if reader.unit})
        if not folders:
            # a reader that gives no schema table (perfkit's manifest) only adds facts to the folders beside it
            for name in {reader.name for reader, _, _ in entries if _gives_run_tables(reader)}:
                same = sorted({folder for reader, folder, _ in entries if reader.name == name})
                if len(same) > len(folders):
                    folders = same
        runs[rank] = folders
    return runs


def chosen_cycle(root: Path, runs: dict[int, list[Path]], cycle: Cycle) -> tuple[set[Path], Cycle]:
    """(the folders of the runs not chosen, which run was read where a rank has several, else None).
    Which run: its number where every rank read the same one, else `cycle` as given ("last" over ranks holding
    different numbers of runs: their numbers differ, and choosing again by any one of them would read another
    run or none). Without a `cycle`, a rank with several runs is refused (several_runs); a cycle a rank does not
    have is one line naming that rank's runs. The one choice of every command (perfkit --cycle N, the API's
    cycle=N)."""
    ordered = {rank: sorted(set(folders), key=_profiling_order) for rank, folders in sorted(runs.items())
               if folders}  # a rank only other files speak of (a manifest's) has no run to choose among
    if cycle is None:
        for rank, folders in ordered.items():
            if len(folders) > 1:
                raise several_runs(root, rank, folders)
        return set(), None
    left_out: set[Path] = set()
    numbers = set()
    for rank, folders in ordered.items():
        number = len(folders) if cycle == LAST_CYCLE else cycle
        if not (isinstance(number, int) and 1 <= number <= len(folders)):
            choices = "1" if len(folders) == 1 else f"1-{len(folders)}"
            raise LayoutError(f"has no profiler run {cycle!r} for rank {rank} (--cycle): it holds "
                              f"{_runs_named(root, folders)}; choose {choices} or last", root)
        left_out.update(folders[:number - 1] + folders[number:])
        numbers.add(number)
    if not any(len(folders) > 1 for folders in ordered.values()):
        return left_out, None
    return left_out, numbers.pop() if len(numbers) == 1 else cycle


def _of_cycle(by_rank: dict[int, list[Entry]], left_out: set[Path]) -> dict[int, list[Entry]]:
    """by_rank without the entries read from the runs not chosen (their folders and what lies under them)."""
    if not left_out:
        return by_rank
    kept = {rank: [entry for entry in entries if not inside(entry[1], left_out)] for rank, entries in by_rank.items()}
    return {rank: entries for rank, entries in kept.items() if entries}


def inside(folder: Path, folders: set[Path]) -> bool:
    """Whether `folder` is one of `folders` or lies under one."""
    return folder in folders or any(parent in folders for parent in folder.parents)


# MindSpore names each profiler folder {worker}_{start time, yyyymmddHHMMSSmmm}_ascend_ms.
_FOLDER_STARTED = re.compile(r"_(\d{17})_ascend_ms$")


def _profiling_order(folder: Path) -> tuple:
    """A profiler folder's place in time: its name's start time, else its path (never the text order of its
    parent alone: a dynamic-profiler window "rank0_start12_stop13" sorts before "rank0_start3_stop4")."""
    started = _FOLDER_STARTED.search(folder.name)
    return (0, started.group(1), str(folder)) if started else (1, "", str(folder))


def several_runs(root: Path, rank: int, folders) -> LayoutError:
    """The one refusal of every command (summary, advise, ranks, compare, report, dash, trace) for a folder
    holding several profiler runs of one rank (schedule cycles with repeat > 1, dynamic-profiler windows, two
    runs side by side): they are never merged nor one picked silently; the user chooses one by its number
    (--cycle) or passes its folder."""
    ordered = sorted(set(folders), key=_profiling_order)
    return LayoutError(f"holds several runs for rank {rank}, in profiling order: {_runs_named(root, ordered)}; "
                       f"choose one with --cycle N (1-{len(ordered)}, or last) or pass its folder "
                       f"(e.g. {ordered[-1]})", root)


def _runs_named(root: Path, ordered: list[Path]) -> str:
    """`1) a, 2) b`: runs in profiling order, by their folder under the run's root (the root by its name)."""
    return ", ".join(f"{number}) {os.path.relpath(folder, root) if folder != root else folder.name}"
                     for number, folder in enumerate(ordered, 1))


# ---------------------------------------------------------------- warnings

def _located(root: Path, folder: Path, warnings: list[str]) -> list[Warning]:
    """A folder's warnings, with where it is under the run's root."""
    if not warnings:
        return []  # nothing to place for the thousands of folders that have nothing to say
    where = _relative(str(folder), root)
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

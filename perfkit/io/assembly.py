"""Assembling a Run: every folder's reader results (per-rank Parts) made into one `Run`, by the precedence the
reader protocol states (base.Reader), with the derivations, the chosen profiler cycle and one wording of warnings.

perfkit/io/loader.py reads the folders (here, in worker processes or on Dask) and hands the results here; so does
a Dask client after its workers read them (perfkit/io/dask_ingest.py).
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from pathlib import Path
from typing import Collection

import numpy as np
import pandas as pd

from ..core import model, plugins
from ..core.errors import FileFormatError, LayoutError
from ..core.model import Meta, Run
from ..core.scopes import cell_table
from .cycles import Cycle, Entry, check_read, chosen_cycle, of_cycle, runs_by_rank
from .discovery import Job, Warning, common_folder, walk
from .formats import DERIVATIONS, plugin_problems, readers
from .formats.base import INTERMEDIATE_TABLES, OP_LEVEL_TABLES, RUN_WIDE, Parts, Reader
from .formats.stages import merged_stages
from .formats.tables import as_pandas, column_names, is_arrow

# How deep the "no profiler files" message looks for files that no reader took, and how many it names.
UNUSABLE_DEPTH = 3
SHOWN_UNUSABLE = 5
# A message that many folders share is said once, naming this many of them.
NAMED_FOLDERS = 3

Piece = tuple[int, pd.DataFrame, tuple[Path, Reader]]  # (rank, table, where it came from)


def assemble(root: Path, jobs: list[Job], results: list, problems: list[Warning] = (), cycle: Cycle = None,
             op_ranks: Collection[int] | None = None, unread: dict[Path, list[Path]] | None = None) -> Run:
    """The Run made of every folder's reader results (`results[i]` is jobs[i]'s {rank: Parts} or its error);
    `problems`: what discovery has to say (a plugin's detect that raised); `cycle`: as load's; `op_ranks`: the
    ranks that keep their op-level tables (base.OP_LEVEL_TABLES; None: every rank), said in meta.op_ranks;
    `unread`: the cycles cycles.unread_cycles left unread (UnreadCycleChosen where one of them is chosen)."""
    failures = [result for result in results if isinstance(result, FileFormatError)]
    by_rank = grouped_by_rank((job, result) for job, result in zip(jobs, results)
                              if not isinstance(result, FileFormatError))
    runs = runs_by_rank(by_rank, unread)
    left_out, chosen = chosen_cycle(root, runs, cycle)
    check_read(runs, left_out, unread)
    by_rank = of_cycle(by_rank, left_out)
    run_wide = by_rank.pop(RUN_WIDE, [])
    _require_data(root, by_rank, run_wide, failures)
    meta_fields: dict = {}
    warnings: list[Warning] = [(".", problem) for problem in plugin_problems()] + list(problems)
    warnings += skipped(root, failures)
    for _, folder, parts in run_wide:
        merge_meta(meta_fields, parts.meta)
        warnings += located(root, folder, parts.warnings)
    for rank, entries in _spread(run_wide, sorted(by_rank)).items():
        by_rank.setdefault(rank, []).extend(entries)
    # Per-rank frames are tagged with their rank and validated once per table, not once per rank:
    # with hundreds of ranks, per-rank validation dominated the warm load time.
    tables: dict[str, list[Piece]] = {name: [] for name in model.SCHEMA}
    for rank in sorted(by_rank):
        for _, folder, parts in by_rank[rank]:
            merge_meta(meta_fields, parts.meta)
            warnings += located(root, folder, parts.warnings)
        rank_tables, origins = _rank_tables(root, rank, by_rank[rank], meta_fields, warnings)
        if op_ranks is not None and rank not in op_ranks:  # after the derivations: steps from op events stay
            rank_tables = {name: frame for name, frame in rank_tables.items() if name not in OP_LEVEL_TABLES}
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
    if op_ranks is not None and not set(meta.ranks) <= set(op_ranks):
        meta.op_ranks = sorted(set(meta.ranks) & set(op_ranks))
    if meta.layout is None:  # no unit reader named a layout: only dataset files, or only perfkit's manifest
        named = [reader for entries in [*by_rank.values(), run_wide] for reader, _, _ in entries]
        meta.layout = next((reader.name for reader in named if reader.gives_run_tables), named[0].name)
    frames, unusable = {}, []
    for name, pieces in tables.items():
        frames[name], left_out = combine(root, name, pieces)
        unusable += left_out
    if unusable and not any(len(frame) for frame in frames.values()):
        where, message = unusable[0]
        raise FileFormatError(message.removesuffix("; left out"), root / where)  # nothing else to show
    warnings += unusable
    warnings += _step_coverage(tables["steps"], by_rank)
    warnings += _op_coverage(tables["op_types"], [rank for rank in by_rank if op_ranks is None or rank in op_ranks])
    frames["op_passes"] = op_pass_ms(frames["ops"])
    frames["cells"] = cell_table(frames["ops"])
    return Run(path=str(root), meta=meta, warnings=worded(warnings), **frames)


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
    common = {rank: common_folder([str(folder) for _, folder, _ in entries])
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


def skipped(root: Path, failures: list[FileFormatError]) -> list[Warning]:
    """A folder none of whose files could be read (or that a Dask worker could not read): the rest of the run
    still loads, with a warning naming it."""
    folders: dict[str, list[str]] = {}
    for exc in failures:
        where = os.path.relpath(exc.path, root) if exc.path else "?"
        if where not in folders.setdefault(exc.message, []):  # one folder, several readers
            folders[exc.message].append(where)
    return [(".", f"skipped {_named(where)}: {message}") for message, where in folders.items()]


def grouped_by_rank(read) -> dict[int, list[Entry]]:
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
                pieces = {int(rank): piece.drop(columns="rank")
                          for rank, piece in frame.groupby(rank_columns[id(frame)])}
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
    if any(reader.gives_run_tables or any(len(parts.tables.get(need, ())) for need in needs)
           for entries in [*by_rank.values(), run_wide] for reader, _, parts in entries):
        return
    if failures:
        raise failures[0]  # nothing else to show: the broken folder is the answer
    ended = next((parts for entries in [*by_rank.values(), run_wide] for _, _, parts in entries
                  if parts.meta.get("status") not in (None, "ok")), None)
    if ended is not None:  # a run that ended before it profiled anything: how it ended, as recorded, is the answer
        raise LayoutError("; ".join(ended.warnings) or f"run {ended.meta['status']}: nothing was profiled", root)
    hint = next((hint for reader in readers() if reader.raw_data_hint is not None
                 for hint in [reader.raw_data_hint(root)] if hint), None)
    looked_for = ", ".join(reader.looks_for for reader in readers() if reader.looks_for)
    raise LayoutError(hint or f"no MindSpore profiler files found (looked for {looked_for}){_unusable_note(root)}",
                      root)


def _unusable_note(root: Path) -> str:
    """'; found only files perfkit does not read: …' naming a few files under root that look like profiler
    output (csv, json, txt, db, pb), or that there are none."""
    found = [os.path.relpath(folder / name, root) for folder, entries in walk(root, UNUSABLE_DEPTH)
             for name in [entry.name for entry in entries]
             if name.endswith((".csv", ".json", ".txt", ".db", ".pb")) and (folder / name).is_file()]
    if not found:
        return "; the folder holds no such files"
    shown = ", ".join(found[:SHOWN_UNUSABLE]) + (f" and {len(found) - SHOWN_UNUSABLE} more"
                                                 if len(found) > SHOWN_UNUSABLE else "")
    return f"; found only files perfkit does not read: {shown}"


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
            merge_meta(meta_fields, meta)
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


def _op_coverage(op_types: list[Piece], read: list[int]) -> list[Warning]:
    """A warning naming the ranks without op data when others of those `read` have it: op-type totals and shares
    pool the ranks that have them, which may not stand for the rest (a pipeline stage, a rank whose files are
    missing)."""
    with_ops = {rank for rank, frame, _ in op_types if len(frame)}
    without = sorted(set(read) - with_ops)
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


def combine(root: Path, name: str, pieces: list[Piece]) -> tuple[pd.DataFrame, list[Warning]]:
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
    return combine(root, name, kept)[0], unusable


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


def merge_meta(into: dict, new: dict) -> None:
    for key, value in new.items():
        if value is None:
            continue
        if key in ("env", "config"):
            into.setdefault(key, {}).update(value)
        elif key == "pipeline_stages" and key in into:
            into[key] = merged_stages(into[key], value)
        else:
            into.setdefault(key, value)



def checked(reader: Reader, folder: Path, result) -> dict[int, Parts]:
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
                read = (f" (read from {', '.join(os.path.basename(s) for s in parts.sources[:3])})"
                        if parts.sources else "")
                problems.append(f"{reader.label} gave table {name!r} {problem}{read}")
                parts.warnings.append(problems[-1] + "; left out")
    if problems and not any(parts.tables for parts in result.values()):
        raise FileFormatError(problems[0], folder)
    return result


def _table_problem(name: str, frame, rank: int, values: bool) -> str | None:
    """What makes a reader's table unusable, or None. Its values are checked here only for a plugin's reader
    (`values`): perfkit's own readers' tables are coerced once per table over all ranks, in combine, which
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


# ---------------------------------------------------------------- warnings

def located(root: Path, folder: Path, warnings: list[str]) -> list[Warning]:
    """A folder's warnings, with where it is under the run's root."""
    if not warnings:
        return []  # nothing to place for the thousands of folders that have nothing to say
    where = _relative(str(folder), root)
    return [(where, w) for w in warnings]


def worded(warnings: list[Warning]) -> list[str]:
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

"""The one loader: discover -> cache lookup -> read -> assemble -> store.

Every folder under the path is offered to every reader (formats.readers(): the registry, then installed plugins;
discovery.py); each folder a reader claims is read into per-rank `Parts`, here in worker processes
(parallel.py) or on a Dask cluster (dask_ingest.py), and the Parts of all folders are assembled into one `Run`
(assembly.py; of the profiler cycle chosen, cycles.py), cached as Parquet until a file changes (cache.py).

>>> run = load("profiler_v1")          # doctest: +SKIP
>>> run.op_types.head()                 # doctest: +SKIP
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Collection, Iterable, NamedTuple, Sequence, Union

import pandas as pd

from ..core import plugins
from ..core.errors import FileFormatError, LayoutError
from ..core.model import Run
from ..core.units import BYTES_PER_MB
from . import cache, dask_ingest
from .assembly import Piece, assemble, checked, combine, grouped_by_rank, located, skipped, worded
from .cycles import Cycle, UnreadCycleChosen, chosen_cycle, of_cycle, runs_by_rank, unread_cycles
from .discovery import Job, discover, files_listed
from .formats import by_name, readers
from .formats.base import OP_LEVEL_TABLES, Parts, Reader
from .formats.screening import screened, screened_many
from .parallel import map_folders

# The code a cached Run is built by: a change to any of it, or to an installed plugin's (plugins.code_paths),
# makes every entry stale. core/ holds the model and the op rules (scopes, op_work, opnames) that derive the
# Run's cells and op_passes tables; formats/ the readers; the others find, read and assemble the folders, and what
# they import.
PACKAGE = Path(__file__).resolve().parents[1]
CODE = (PACKAGE / "core", PACKAGE / "io" / "formats",
        *(PACKAGE / "io" / name for name in ("loader.py", "discovery.py", "cycles.py", "assembly.py", "cache.py",
                                             "parallel.py", "dask_ingest.py", "trace_json.py", "trace_text.py")))


# A run of at most this many rank folders is read whole when `load` is given a function choosing the ranks:
# every answer about it covers every rank, as it always did.
SMALL_RUN_RANKS = 16

# The shown ranks' folders are read whole in this process where their files hold at most this many bytes (the
# representative ranks of a run of small ranks): forked workers cost more than they save there, and each holds the
# pages of the cluster-level Run it was forked with (at 4,096 ranks of 230 KB: 0.72-0.78 GB peak for the process
# tree with two workers, 0.30-0.31 GB without).
IN_PROCESS_BYTES = 64 * BYTES_PER_MB

# The cluster-level read goes to worker processes from this many folders on (a run of 1,024 ranks): below it,
# forking the workers and sending their results back cost more than the wall time they save (256 ranks, load 6:
# 2.7 s of CPU and 0.27 GB of process-tree peak with them, 2.4 s and 0.16 GB without, the wall time alike).
CLUSTER_WORKERS_FROM = 2048

# Whose op-level tables `load` reads (formats/base.py: OP_LEVEL_TABLES): None, every rank's; those ranks; or a
# function that chooses them from the Run of every rank's cluster-level tables.
Ranks = Union[None, Collection[int], Callable[[Run], Iterable[int]]]


# ---------------------------------------------------------------- load

def load(path: str | os.PathLike, dask: dask_ingest.Target | None = None, cycle: Cycle = None,
         ranks: Ranks = None) -> Run:
    """Read any MindSpore profiler folder into a `Run`: from the cache when the run's files are as they were.

    Read in worker processes here, or, with `dask` (else $PERFKIT_DASK, see dask_ingest.target), a few rank
    folders a task on that Dask cluster; the Run is the same. `cycle`: which of several profiler runs of one rank
    the folder holds to read (1, 2, ... in profiling order, or "last"; see chosen_cycle); without it such a
    folder is refused. `ranks`: whose op-level tables to read (formats/base.py: OP_LEVEL_TABLES; every rank's
    cluster-level tables are read): None, every rank's; a collection of ranks; or a function given the Run of
    every rank's cluster-level tables that returns the ranks (a run of at most SMALL_RUN_RANKS rank folders is
    read whole without asking it). The Run's meta.op_ranks says which ranks they are where not all.
    """
    listed: dict[str, list] = {}  # each folder's files for the cache key, stat'ed where discovery lists them
    with files_listed(listed, cache.folder_files) if cache.enabled() else nullcontext():
        root, jobs, problems = discover(path, readers())
    if callable(ranks) and sum(1 for reader, _ in jobs if reader.unit) <= SMALL_RUN_RANKS:
        ranks = None
    code = CODE + plugins.code_paths()
    selection = "" if cycle is None else str(cycle)
    if ranks is not None:  # each choice of ranks its own entry; a function's choice depends on the analysis code
        code += (PACKAGE / "analysis",) if callable(ranks) else ()
        selection += "\0ranks:" + (f"{ranks.__module__}.{ranks.__qualname__}" if callable(ranks)
                                   else ",".join(str(rank) for rank in sorted(set(ranks))))
    entry = cache.run_entry(root, [(reader.name, folder) for reader, folder in jobs], code, selection, listed)
    run = (cache.fetch(entry, reload=lambda name: getattr(load(root, dask, cycle, ranks), name))
           if entry is not None else None)
    if run is not None:  # read from every file under its folders, as its entry's key says
        cache.note_reads((folder, None) for _, folder in jobs)
    else:
        try:
            run = _read_and_assemble(root, *unread_cycles(jobs, cycle), problems, dask, cycle, ranks)
        except UnreadCycleChosen:
            run = _read_and_assemble(root, jobs, {}, problems, dask, cycle, ranks)
        if entry is not None:
            cache.store_soon(entry, run)
    return run


def _read_and_assemble(root: Path, jobs: list[Job], unread: dict[Path, list[Path]], problems: list,
                       dask: dask_ingest.Target | None, cycle: Cycle, ranks: Ranks) -> Run:
    """The Run of `jobs` (the cycles in `unread` counted, not read: cycles.unread_cycles)."""
    dask_ingest.forget_clusters()  # a cluster given up on in an earlier load (a dashboard's) is tried again
    if ranks is None:
        cache.note_reads((folder, None) for _, folder in jobs)
        return assemble(root, jobs, _read_all(_read_folder, jobs, dask), problems, cycle, unread=unread)
    return _load_op_ranks(root, jobs, unread, problems, dask, cycle, ranks)


def _load_op_ranks(root: Path, jobs: list[Job], unread: dict[Path, list[Path]], problems: list,
                   dask: dask_ingest.Target | None, cycle: Cycle,
                   ranks: Collection[int] | Callable[[Run], Iterable[int]]) -> Run:
    """The Run of every rank's cluster-level tables and the op-level tables of `ranks` (or of the ranks
    `ranks(run)` chooses from the Run of the cluster-level tables alone): each folder is read as its reader
    declares (_cluster_read), then the folders of those ranks whole."""
    how = [_cluster_read(reader) for reader, _ in jobs]
    results: list = [{}] * len(jobs)
    chosen = [index for index, kind in enumerate(how) if kind != "skip"]
    for index, result in zip(chosen, _read_all(_read_cluster_folder, [jobs[index] for index in chosen], dask,
                                               len(chosen) < CLUSTER_WORKERS_FROM, many=_read_cluster_folders)):
        results[index] = result
    if callable(ranks):
        ranks = ranks(assemble(root, jobs, results, problems, cycle, op_ranks=(), unread=unread))
    shown = {int(rank) for rank in ranks}
    held = _ranks_by_folder(jobs, results)
    present = set().union(*held.values())
    unknown = sorted(shown - present)
    if unknown:
        raise LayoutError(f"no rank {', '.join(map(str, unknown))} in this run (its {len(present):,} ranks: "
                          f"{min(present, default='none')} to {max(present, default='none')})", root)
    near = [_held_near(held, str(folder)) for _, folder in jobs]
    again = [index for index, kind in enumerate(how)
             if kind != "whole" and (near[index] is None or shown & near[index])]
    if again:
        in_process = _bytes_under([str(jobs[index][1]) for index in again], IN_PROCESS_BYTES)
        for index, result in zip(again, _read_all(_read_folder, [jobs[index] for index in again], dask, in_process)):
            if isinstance(result, FileFormatError) and not isinstance(results[index], FileFormatError):
                shown -= near[index] or set()  # its cluster-level tables stand; its op-level ones were not read
                problems.append((os.path.relpath(result.path, root) if result.path else ".",
                                 f"op-level tables not read ({result.message}); its cluster-level tables stand"))
                continue
            results[index] = result
    whole = set(again)
    cache.note_reads((folder, None if index in whole else reader.cluster_files)
                     for index, (reader, folder) in enumerate(jobs) if index in whole or how[index] != "skip")
    return assemble(root, jobs, results, problems, cycle, op_ranks=shown, unread=unread)


def _bytes_under(folders: list[str], limit: int) -> bool:
    """Whether the files under `folders` (each counted once) hold at most `limit` bytes."""
    total = 0
    for folder in sorted(set(folders)):
        for place, _, names in os.walk(folder):
            for name in names:
                try:
                    total += os.stat(os.path.join(place, name), follow_symlinks=False).st_size
                except OSError:
                    continue
                if total > limit:
                    return False
    return True


def _cluster_read(reader: Reader) -> str:
    """How a reader's folder is read for the cluster-level tables (formats/base.py: Reader.read_cluster):
    "skip" (its tables are all op-level), "whole" (none is, or it cannot read the others alone: its op-level
    tables are left out at assembly) or "cluster" (its read_cluster)."""
    if reader.provides <= OP_LEVEL_TABLES:
        return "skip"
    if reader.read_cluster is None or not reader.provides & OP_LEVEL_TABLES:
        return "whole"
    return "cluster"


def _read_cluster_folder(reader_name: str, folder: str) -> dict[int, Parts] | FileFormatError:
    """One folder's cluster-level read, as _read_folder reads it (module-level: run in workers)."""
    return _read_folder(reader_name, folder, cluster=True)


def _read_cluster_folders(arguments: Sequence[tuple[str, str]]) -> list[dict[int, Parts] | FileFormatError]:
    """_read_cluster_folder of each (reader name, folder) of a task, the same results: a reader's folders read at
    once where it reads many (Reader.read_cluster_many), and all the results screened at once (screened_many)
    (module-level: run in workers)."""
    results: list = [None] * len(arguments)
    by_reader: dict[str, list[int]] = {}
    for index, (name, _) in enumerate(arguments):
        by_reader.setdefault(name, []).append(index)
    for name, indexes in by_reader.items():
        reader = by_name(name)
        paths = [Path(arguments[index][1]) for index in indexes]
        read = reader.read_cluster or reader.read
        many = _read_many(reader, paths) if reader.read_cluster_many is not None else None
        for position, (index, path) in enumerate(zip(indexes, paths)):
            results[index] = _checked(reader, path, (lambda: many[position]) if many is not None
                                      else (lambda: read(path)))
    return screened_many(results)


def _read_many(reader: Reader, paths: list[Path]) -> list | None:
    """reader.read_cluster_many(paths), or None where it raised (each folder is then read alone: its error its own)."""
    try:
        results = reader.read_cluster_many(paths)
    except FileFormatError:
        return None
    except Exception:  # noqa: BLE001 - only a plugin's: perfkit's own reader raising is a bug to see
        if reader.plugin is None:
            raise
        return None
    return list(results) if len(results) == len(paths) else None


def _ranks_by_folder(jobs: list[Job], results: list) -> dict[str, set[int]]:
    """The ranks each folder gave (RUN_WIDE facts left out)."""
    held: dict[str, set[int]] = {}
    for (_, folder), result in zip(jobs, results):
        if not isinstance(result, FileFormatError):
            held.setdefault(str(folder), set()).update(rank for rank in result if rank >= 0)
    return {folder: ranks for folder, ranks in held.items() if ranks}


def _held_near(held: dict[str, set[int]], folder: str) -> set[int] | None:
    """The ranks read in `folder` or the nearest folder above it that gave ranks (a reader not read for the
    cluster-level tables claims a rank's folder, or one inside it), or None."""
    while True:
        if folder in held:
            return held[folder]
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def _read_all(function, jobs: list[Job], dask: dask_ingest.Target | None, in_process: bool = False,
              many: Callable[[Sequence[tuple[str, str]]], list] | None = None) -> list:
    """`function(reader name, folder)` for each job: in worker processes here (in this one where `in_process`),
    or on the Dask cluster; `many`, where given, gives the same results of many jobs at once (a task's, here)."""
    arguments = [(reader.name, str(folder)) for reader, folder in jobs]
    where = dask or dask_ingest.target()
    if where is None and in_process:
        return many(arguments) if many is not None else [function(*args) for args in arguments]
    if where is None:
        return map_folders(many or function, arguments, pack=_packed, unpack=_unpacked, per_task=many is not None)
    return dask_ingest.read_folders(where, arguments, function, cache.code_digest(CODE + plugins.code_paths()))


class _Slice(NamedTuple):
    """Where a rank's Arrow table lies in the tables a worker's task gathered (_packed)."""
    table: int
    offset: int
    length: int


def _packed(results: list) -> tuple[list, list]:
    """(a task's `results` of _read_folder, each Arrow table in them replaced by a _Slice, the tables those slices
    are of): the ranks' tables of one name and schema gathered into one table. Pickled one by one, 8,192 folders'
    small tables (a rank's steps, communication ops and links) cost ~1.5 s to send and as much to take apart, as
    much as reading them; gathered, little more than their bytes. Tables with dictionary columns are sent as they
    are (gathering would merge their dictionaries)."""
    import pyarrow as pa

    groups: dict[tuple, list] = {}
    for result in results:
        if not isinstance(result, dict):
            continue
        for parts in result.values():
            for name, table in parts.tables.items():
                if type(table) is not pa.Table or any(pa.types.is_dictionary(kind) for kind in table.schema.types):
                    continue
                group = groups.setdefault((name, table.schema, repr(table.schema.metadata)), [len(groups), [], 0])
                parts.tables[name] = _Slice(group[0], group[2], table.num_rows)
                group[1].append(table)
                group[2] += table.num_rows
    gathered = [pa.concat_tables(tables).combine_chunks() for _, tables, _ in groups.values()]
    return results, gathered


def _unpacked(sent: tuple[list, list]) -> list:
    """The results _packed packed, each rank's table a slice of the gathered one (no copy)."""
    results, gathered = sent
    for result in results:
        if isinstance(result, dict):
            for parts in result.values():
                for name, table in parts.tables.items():
                    if type(table) is _Slice:
                        parts.tables[name] = gathered[table.table].slice(table.offset, table.length)
    return results


def _read_steps(reader_name: str, folder: str) -> dict[int, Parts] | FileFormatError:
    """One folder's steps alone (`read_steps`), as _read_folder reads them (module-level: run in workers)."""
    return _read_folder(reader_name, folder, steps_only=True)


def _read_folder(reader_name: str, folder: str, steps_only: bool = False, cluster: bool = False
                 ) -> dict[int, Parts] | FileFormatError:
    """One folder's Parts (only its steps: `read_steps`; its cluster-level tables: `read_cluster`, where the reader
    has one), checked and screened (module-level: run in worker processes)."""
    reader, path = by_name(reader_name), Path(folder)
    read = (reader.read_steps if steps_only else reader.read_cluster if cluster and reader.read_cluster
            else reader.read)
    result = _checked(reader, path, lambda: read(path))
    return result if isinstance(result, FileFormatError) else screened(result)


def _checked(reader: Reader, path: Path, read: Callable[[], object]) -> dict[int, Parts] | FileFormatError:
    """checked(read()): a folder whose files are all broken, whose reader gave nothing the schema allows, or whose
    plugin reader raised comes back as its error, not raised: it must not stop the other folders being read."""
    try:
        return checked(reader, path, read())
    except FileFormatError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - only a plugin's: perfkit's own reader raising is a bug to see
        if reader.plugin is None:
            raise
        return FileFormatError(plugins.failure(reader.plugin, "reading this folder", exc), path)


def load_steps(path: str | os.PathLike, dask: dask_ingest.Target | None = None, cycle: Cycle = None
               ) -> tuple[Path, pd.DataFrame, list[str]]:
    """(root, the steps table of every rank, warnings): the cheap read behind questions across ranks.

    Layouts with `read_steps` (ascend_ms, legacy) read only their step file, about 1 ms a rank instead
    of every kernel table; a run with any unit folder whose layout has none (CPU, GPU: steps derived
    from op events) is loaded whole, through the cache.
    """
    root, jobs, _ = discover(path, readers())
    units = [(reader, folder) for reader, folder in jobs if reader.unit]
    if not units or any(reader.read_steps is None for reader, _ in units):
        run = load(root, dask, cycle)
        return root, run.steps, run.warnings
    results = _read_all(_read_steps, units, dask)
    failures = [result for result in results if isinstance(result, FileFormatError)]
    by_rank = grouped_by_rank((job, result) for job, result in zip(units, results)
                              if not isinstance(result, FileFormatError))
    if not by_rank and failures:
        raise failures[0]
    by_rank = of_cycle(by_rank, chosen_cycle(root, runs_by_rank(by_rank), cycle)[0])
    warnings = skipped(root, failures)
    pieces: list[Piece] = []
    for rank in sorted(by_rank):
        for reader, folder, parts in by_rank[rank]:
            warnings += located(root, folder, parts.warnings)
            if len(parts.tables.get("steps", ())):
                pieces.append((rank, parts.tables["steps"], (folder, reader)))
    steps, unusable = combine(root, "steps", pieces)
    return root, steps, worded(warnings + unusable)

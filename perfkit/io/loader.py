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
from pathlib import Path

import pandas as pd

from ..core import plugins
from ..core.errors import FileFormatError
from ..core.model import Run
from . import cache, dask_ingest
from .assembly import Piece, assemble, checked, combine, grouped_by_rank, located, skipped, worded
from .cycles import Cycle, chosen_cycle, of_cycle, runs_by_rank
from .discovery import Job, discover
from .formats import by_name, readers
from .formats.base import Parts
from .formats.screening import screened
from .parallel import map_folders

# The code a cached Run is built by: a change to any of it, or to an installed plugin's (plugins.code_paths),
# makes every entry stale. core/ holds the model and the op rules (scopes, op_work, opnames) that derive the
# Run's cells and op_passes tables; formats/ the readers; the others find, read and assemble the folders, and what
# they import.
PACKAGE = Path(__file__).resolve().parents[1]
CODE = (PACKAGE / "core", PACKAGE / "io" / "formats",
        *(PACKAGE / "io" / name for name in ("loader.py", "discovery.py", "cycles.py", "assembly.py", "cache.py",
                                             "parallel.py", "dask_ingest.py", "trace_json.py", "trace_text.py")))


# ---------------------------------------------------------------- load

def load(path: str | os.PathLike, dask: dask_ingest.Target | None = None, cycle: Cycle = None) -> Run:
    """Read any MindSpore profiler folder into a `Run`: from the cache when the run's files are as they were.

    Read in worker processes here, or, with `dask` (else $PERFKIT_DASK, see dask_ingest.target), one task per
    rank folder on that Dask cluster; the Run is the same. `cycle`: which of several profiler runs of one rank
    the folder holds to read (1, 2, ... in profiling order, or "last"; see chosen_cycle); without it such a
    folder is refused.
    """
    root, jobs, problems = discover(path, readers())
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
        return screened(checked(reader, path, (reader.read_steps if steps_only else reader.read)(path)))
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

"""Work in forked worker processes: a cluster run's rank folders (map_folders), the blocks of a trace and the
row chunks of a profiler database for the timeline index (map_ahead); and sparing a process that needs no
DataFrame the import of pandas that pyarrow makes (pyarrow_without_pandas).

Every worker is tied to the process that forked it (_tied_to): killed the moment that process dies,
whatever killed it. Without this, a `perfkit trace` stopped by SIGTERM, SIGHUP or SIGKILL while it built
an index left its workers running for ever under PID 1, ~125 MB each, blocked on the pool's pipe (issue 25):
no handler runs in a process killed by SIGKILL, and Python's default SIGTERM/SIGHUP end it without cleanup.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import sys
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..core.units import BYTES_PER_MB

# Folders are read in worker processes only from this many on: a pool of forked workers costs tens of
# ms to start and its results must be pickled back, which a few small folders do not repay.
PARALLEL_MIN_FOLDERS = 8
# Folders a worker reads per task: a task's results cross to this process as one pickle. 4,096 ranks
# (12,288 folders) in tasks of 1,536 folders sent ~90 MB pickles, each built, sent, received and taken apart
# whole: 550 k page faults here instead of 215 k, and the last task's unpickling after the workers had
# finished; 27-36 s instead of 23-25 s for the read (tasks of 16 to 128 folders measured alike).
MAX_FOLDERS_PER_TASK = 64
# prctl(2): the signal the kernel sends this process when its parent dies.
PR_SET_PDEATHSIG = 1
# mallopt(3) (glibc): allocations from this size up are mapped afresh and unmapped when freed; freed memory
# at the heap's top is given back to the system from this size up.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
# A worker keeps what it freed for the next folder: with glibc's defaults every folder's arrays were mapped
# anew and every page of them faulted in again (4,096 ranks: ~340 k page faults in the workers, 4-5 s of
# kernel time; with these ~55 k and ~3 s). At most WORKER_TRIM_THRESHOLD sits unused in a worker between folders.
WORKER_MMAP_THRESHOLD = 32 * BYTES_PER_MB
WORKER_TRIM_THRESHOLD = 128 * BYTES_PER_MB


def can_fork() -> bool:
    """Whether this process can fork workers: the platform has fork, and this is not a daemonic worker of
    multiprocessing (a user's Pool calling perfkit.load), which may have no children."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


def _pool(workers: int, collecting: bool | None = None, arrow_only: bool = False) -> ProcessPoolExecutor:
    """A pool of `workers` forked processes tied to this one, their garbage collector on where `collecting`
    (default: as this process's is now); `arrow_only`: their tasks take and give no DataFrame
    (pyarrow_without_pandas in each).
    fork: workers start in milliseconds with perfkit imported and, unlike spawn/forkserver, never re-run the
    user's __main__ script; Arrow resets its thread pools in a forked child."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"),
                               initializer=_tied_to,
                               initargs=(os.getpid(), gc.isenabled() if collecting is None else collecting,
                                         arrow_only))


def _tied_to(parent: int, collecting: bool = True, arrow_only: bool = False) -> None:
    """In each worker, first: be killed when `parent` dies (PR_SET_PDEATHSIG; the kernel sends it when the
    thread that forked this worker ends: the pool's caller, which waits for the pool to shut down). Linux
    only, as is the rest of this module (os.sched_getaffinity). The garbage collector as the parent had it
    when it made the pool (map_folders pauses the parent's while the workers are forked). Freed memory kept
    for the next folder (WORKER_TRIM_THRESHOLD)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died between the fork and the prctl
        os._exit(1)
    if hasattr(libc, "mallopt"):  # glibc's; another C library keeps its own ways
        libc.mallopt(M_MMAP_THRESHOLD, WORKER_MMAP_THRESHOLD)
        libc.mallopt(M_TRIM_THRESHOLD, WORKER_TRIM_THRESHOLD)
    if collecting:
        gc.enable()  # over what the worker makes: the parent's objects were frozen before the fork
    if arrow_only:
        pyarrow_without_pandas()


def map_folders(function, arguments: Sequence[tuple], pack: Callable[[list], Any] | None = None,
                unpack: Callable[[Any], list] | None = None, per_task: bool = False) -> list:
    """`function(*args)` for each of `arguments` (one per folder), in worker processes when there are many; with
    `per_task`, `function(task)` gives the results of a task's arguments at once (loader.py: a reader reading many
    folders at once).

    `function` must be a module-level function of picklable arguments and results. `pack` (run in the worker on
    a task's list of results) and `unpack` (run here on what `pack` gave: the list again), module-level too, let
    a task's results cross as a few large objects instead of thousands of small ones (loader.py: the ranks'
    small Arrow tables, each pickled on its own, cost as much to send and take apart as to read).
    """
    if per_task:
        return _map_tasks(function, arguments, pack, unpack)
    return _map_tasks(_each, [(function, args) for args in arguments], pack, unpack)


def _each(calls: Sequence[tuple]) -> list:
    """`function(*args)` for each (function, args) of `calls`."""
    return [function(*args) for function, args in calls]


def _map_tasks(function: Callable[[Sequence[tuple]], list], arguments: Sequence[tuple],
               pack: Callable[[list], Any] | None, unpack: Callable[[Any], list] | None) -> list:
    """`function(task)` of each task of `arguments`, concatenated: in this process when they are few."""
    if len(arguments) < PARALLEL_MIN_FOLDERS or not can_fork():
        return function(arguments)
    workers = min(len(os.sched_getaffinity(0)), len(arguments))
    size = task_size(len(arguments), workers)
    tasks = [arguments[start:start + size] for start in range(0, len(arguments), size)]
    collecting = gc.isenabled()
    try:
        with _collection_paused(collecting), _pool(workers, collecting) as pool:
            results: list = []
            for sent in pool.map(_task, [function] * len(tasks), tasks, [pack] * len(tasks)):
                results += unpack(sent) if unpack is not None else sent
            return results
    except BrokenProcessPool:  # a worker died (e.g. killed for memory): run here instead
        return function(arguments)


def _task(function, arguments: Sequence[tuple], pack: Callable[[list], Any] | None) -> Any:
    """In a worker: `function(arguments)`, a task's results, packed by `pack` where given."""
    results = function(arguments)
    return pack(results) if pack is not None else results


def task_size(folders: int, workers: int) -> int:
    """Folders per task: a quarter of each worker's share (few round trips on a few hundred folders; a slow
    folder's task does not keep the others waiting), at most MAX_FOLDERS_PER_TASK."""
    return max(1, min(MAX_FOLDERS_PER_TASK, folders // (workers * 4)))


@contextmanager
def _collection_paused(collecting: bool):
    """Python's cyclic garbage collector kept off the objects this process holds while the workers read, and
    off here while their results arrive:
    - frozen (gc.freeze) before the workers are forked, so a worker's collections skip the parent's objects
      (pandas, pyarrow and perfkit imported: every collection walked them all, and wrote to their pages, which
      the fork then copied): 1,024 ranks took 16 s of worker CPU with it, 13 s without;
    - disabled here meanwhile: each of thousands of unpickled results set off collections over everything
      received so far (4,096 ranks: 8 s of this process's CPU taking the results in, while the workers wanted
      both cores). The results hold no cycles.
    `collecting`: whether the collector was on; it is as it was after."""
    gc.disable()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
        if collecting:
            gc.enable()


def map_ahead(function: Callable, arguments: Iterable[tuple], workers: int) -> Iterator[tuple[tuple, Any]]:
    """(args, function(*args)) for each of `arguments`, in order, computed in `workers` forked processes
    ahead of the caller: one call queued per worker keeps them busy while the caller takes the oldest, so
    memory holds only the calls in flight. In this process when `workers` <= 1 or fork is unavailable, and
    for the calls a dead worker held (killed for memory) and all after them. An exception `function`
    raises reaches the caller at its turn. `function` and its arguments and results must be picklable, and
    take and give no DataFrame: the workers convert to Arrow without pandas (pyarrow_without_pandas; the
    index's caller may not have imported it, and each worker would then import it, ~0.4 s, for nothing).
    """
    arguments = iter(arguments)
    if workers > 1 and can_fork():
        yield from _ahead_in_workers(function, arguments, workers)
    for args in arguments:  # all of them, or the rest when a worker died
        yield args, function(*args)


def _ahead_in_workers(function: Callable, arguments: Iterator[tuple], workers: int) -> Iterator[tuple[tuple, Any]]:
    """As map_ahead, in workers; stops early, leaving the rest of `arguments`, if a worker dies."""
    pool = _pool(workers, arrow_only=True)
    ahead: deque = deque()  # [args, future] in order
    try:
        for args in arguments:
            ahead.append([args, None])  # in `ahead` before submit, which may find the pool broken
            ahead[-1][1] = pool.submit(function, *args)
            if len(ahead) > workers:
                yield ahead[0][0], ahead[0][1].result()
                ahead.popleft()
        while ahead:
            yield ahead[0][0], ahead[0][1].result()
            ahead.popleft()
    except BrokenProcessPool:  # a worker died: the calls it held are made here
        while ahead:
            args, _ = ahead.popleft()
            yield args, function(*args)
    finally:
        for _, future in ahead:
            if future is not None:
                future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


class _NoPandas:
    """An import finder that fails `import pandas` (see pyarrow_without_pandas)."""

    def find_spec(self, name, path=None, target=None):
        if name == "pandas":
            raise ImportError("pandas hidden from pyarrow's first look (perfkit.io.parallel.pyarrow_without_pandas)")
        return None


def pyarrow_without_pandas() -> None:
    """For a process that needs no DataFrame (`perfkit trace`, map_ahead's workers): spare it pandas' import
    (~0.4 s).

    pyarrow (26) imports pandas the first time it converts any Python value, only to ask whether the value
    is a pandas object. Here that first look finds no pandas, so pyarrow stops asking; it still imports
    pandas when a DataFrame is asked for (to_pandas retries the import). Nothing once pandas is loaded."""
    if "pandas" in sys.modules:
        return
    import pyarrow as pa  # here, not at the top: map_folders' callers need no pyarrow of this module
    finder = _NoPandas()
    sys.meta_path.insert(0, finder)
    try:
        pa.array([0])
    finally:
        sys.meta_path.remove(finder)

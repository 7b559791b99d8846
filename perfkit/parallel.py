"""Many folders at once: a cluster run's rank folders read in worker processes."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Sequence

# Folders are read in worker processes only from this many on: a pool of forked workers costs tens of
# ms to start and its results must be pickled back, which a few small folders do not repay.
PARALLEL_MIN_FOLDERS = 8


def map_folders(function, arguments: Sequence[tuple]) -> list:
    """`function(*args)` for each of `arguments` (one per folder), in worker processes when there are many.

    `function` must be a module-level function of picklable arguments and results.
    """
    if len(arguments) < PARALLEL_MIN_FOLDERS or "fork" not in multiprocessing.get_all_start_methods():
        return [function(*args) for args in arguments]
    workers = min(len(os.sched_getaffinity(0)), len(arguments))
    # fork: workers start in milliseconds with perfkit imported and, unlike spawn/forkserver, never
    # re-run the user's __main__ script; Arrow resets its thread pools in a forked child.
    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            return list(pool.map(function, *zip(*arguments), chunksize=max(1, len(arguments) // (workers * 4))))
    except BrokenProcessPool:  # a worker died (e.g. killed for memory): run here instead
        return [function(*args) for args in arguments]

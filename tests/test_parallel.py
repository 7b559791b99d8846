"""perfkit.io.parallel.map_ahead: results in order, computed in forked workers, whatever happens to a worker."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO

from perfkit.io.parallel import map_ahead

PARENT = os.getpid()  # a forked worker inherits this value and has another pid


def _square_or_die(number: int, die_at: int) -> int:
    if number == die_at and os.getpid() != PARENT:
        os._exit(1)  # as a worker killed for memory
    return number * number


def _square_or_raise(number: int) -> int:
    if number == 7:
        raise ValueError("seven")
    return number * number


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_results_come_in_order_with_their_arguments(workers):
    calls = [(number, -1) for number in range(25)]
    assert list(map_ahead(_square_or_die, iter(calls), workers)) == [(call, call[0] ** 2) for call in calls]


def test_a_dead_worker_leaves_its_calls_and_the_rest_to_this_process():
    calls = [(number, 5) for number in range(25)]
    assert [result for _, result in map_ahead(_square_or_die, calls, 2)] == [n * n for n in range(25)]


def test_an_exception_reaches_the_caller_at_its_turn():
    seen = []
    with pytest.raises(ValueError, match="seven"):
        for (number,), result in map_ahead(_square_or_raise, [(n,) for n in range(20)], 2):
            seen.append(result)
    assert seen == [n * n for n in range(7)]


def _collector_state(number: int) -> tuple[int, bool, int]:
    import gc
    return number, gc.isenabled(), gc.get_freeze_count()


@pytest.mark.parametrize("collecting", [True, False])
def test_map_folders_leaves_the_garbage_collector_as_it_was(collecting):
    """map_folders pauses this process's collector and freezes its objects while workers read; after, both are
    as before, and each worker collects (its own objects) exactly where this process did."""
    import gc

    from perfkit.io.parallel import PARALLEL_MIN_FOLDERS, map_folders
    was = gc.isenabled()
    (gc.enable if collecting else gc.disable)()
    try:
        results = map_folders(_collector_state, [(n,) for n in range(PARALLEL_MIN_FOLDERS)])
        assert gc.isenabled() is collecting and gc.get_freeze_count() == 0
    finally:
        (gc.enable if was else gc.disable)()
    assert [number for number, _, _ in results] == list(range(PARALLEL_MIN_FOLDERS))
    assert {enabled for _, enabled, _ in results} == {collecting}
    assert all(frozen > 0 for _, _, frozen in results)  # the parent's objects, frozen before the fork


def _heap_or_mapped(size: int) -> tuple[int, bool]:
    """(this process's pid, whether malloc(size) came as a fresh mapping): glibc marks such a chunk IS_MMAPPED
    (bit 2) in the size word just before the pointer it returns."""
    import ctypes
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    pointer = libc.malloc(size)
    mapped = bool(ctypes.c_size_t.from_address(pointer - ctypes.sizeof(ctypes.c_size_t)).value & 2)
    libc.free(ctypes.c_void_p(pointer))
    return os.getpid(), mapped


# In a fresh interpreter: glibc raises its mapping threshold as mappings are freed, and a child inherits that, so
# in this long-lived test process the contrast with glibc's defaults could be gone before the test runs.
HEAP_OR_MAPPED_SCRIPT = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from test_parallel import PARENT, _heap_or_mapped
from perfkit.io.parallel import PARALLEL_MIN_FOLDERS, map_folders
size = int(sys.argv[3])
workers = map_folders(_heap_or_mapped, [(size,)] * PARALLEL_MIN_FOLDERS)
print(json.dumps({"workers": workers, "here": _heap_or_mapped(size)}))
"""


@pytest.mark.skipif(not hasattr(__import__("ctypes").CDLL(None), "mallopt"), reason="glibc's malloc only")
def test_workers_keep_what_they_free_for_the_next_folder():
    """A worker's arrays of a few MB come from its heap and stay there when freed (WORKER_MMAP_THRESHOLD): with
    glibc's defaults, as in the process that forked them, each folder's were mapped afresh and every page faulted
    in again."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    from perfkit.core.units import BYTES_PER_MB
    from perfkit.io.parallel import WORKER_MMAP_THRESHOLD
    size = 24 * BYTES_PER_MB
    assert size < WORKER_MMAP_THRESHOLD
    done = subprocess.run([sys.executable, "-c", HEAP_OR_MAPPED_SCRIPT, str(REPO), str(REPO / "tests"), str(size)],
                          capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout)
    parent_pid, parent_mapped = result["here"]
    assert parent_mapped  # glibc's default there
    assert {pid for pid, _ in result["workers"]} - {parent_pid}  # read in workers
    assert not any(mapped for _, mapped in result["workers"])


def test_a_task_carries_at_most_max_folders_per_task():
    """A task's results cross as one pickle: a 4,096-rank run in tasks of 1,536 folders cost seconds."""
    from perfkit.io.parallel import MAX_FOLDERS_PER_TASK, task_size
    assert task_size(12288, 2) == MAX_FOLDERS_PER_TASK == 64
    assert task_size(96, 2) == 12 and task_size(5, 2) == 1


def _pid_and(number: int) -> tuple[int, int]:
    return os.getpid(), number


def _pack_in_worker(results: list) -> tuple[int, list]:
    return os.getpid(), results[::-1]


def _unpack_here(sent: tuple[int, list]) -> list:
    packer, results = sent
    assert packer != os.getpid() and {pid for pid, _ in results} == {packer}  # packed by the worker that read them
    return results[::-1]


def test_map_folders_sends_each_task_s_results_packed():
    """`pack` runs in the worker on a task's results, `unpack` here on what it gave: the results come back in order,
    each task packed once."""
    from perfkit.io.parallel import PARALLEL_MIN_FOLDERS, map_folders, task_size
    count = PARALLEL_MIN_FOLDERS * 3
    results = map_folders(_pid_and, [(n,) for n in range(count)], pack=_pack_in_worker, unpack=_unpack_here)
    assert [number for _, number in results] == list(range(count))
    assert len({pid for pid, _ in results}) <= len(os.sched_getaffinity(0)) and os.getpid() not in dict(results)
    assert task_size(count, 2) < count  # several tasks, each packed on its own


def _read_in_a_daemon(queue) -> None:
    """In a daemonic process (a worker of the user's multiprocessing.Pool): a folder-parallel read there."""
    from perfkit.io.parallel import PARALLEL_MIN_FOLDERS, map_folders
    queue.put(map_folders(_square, [(n,) for n in range(PARALLEL_MIN_FOLDERS)]))


def _square(n: int) -> int:
    return n * n


def test_a_daemonic_process_reads_in_itself():
    """A daemonic process may have no children (multiprocessing raises AssertionError): map_folders runs the
    calls in it instead of failing."""
    import multiprocessing

    from perfkit.io.parallel import PARALLEL_MIN_FOLDERS
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=_read_in_a_daemon, args=(queue,), daemon=True)
    process.start()
    got = queue.get(timeout=60)
    process.join(timeout=60)
    assert got == [n * n for n in range(PARALLEL_MIN_FOLDERS)] and process.exitcode == 0


def test_workers_convert_to_arrow_without_importing_pandas():
    """A caller without pandas (`perfkit trace`, or perfkit.timeline before any DataFrame): its workers' Arrow
    conversions, which make pyarrow look for pandas, import none (~0.4 s each); without pyarrow_without_pandas
    in each worker, every one imported it on its first block."""
    code = ("import sys\n"
            "import pyarrow as pa\n"
            "from perfkit.io.parallel import map_ahead\n"
            "def convert(number):\n"
            "    return len(pa.table({'x': pa.array([float(number)])})), 'pandas' in sys.modules\n"
            "seen = [answer for _, answer in map_ahead(convert, [(n,) for n in range(6)], 2)]\n"
            "print(seen == [(1, False)] * 6, 'pandas' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]

"""The per-rank read on an existing Dask cluster (`perfkit summary RUN --dask ADDRESS`, or PERFKIT_DASK).

Each task on a worker takes a few rank folders (parallel.task_size: about four tasks per worker thread, at most
64 folders each), and for each reads the folder with every reader that claimed it (as loader.load does in
process), writes what it read as the folder's entry to storage that this machine and every worker share (a path
or an fsspec URL; PERFKIT_DASK_STORAGE, default perfkit's cache dir), and says what it did in a small outcome
file there. A rank's files and tables never pass through the scheduler. This machine then reads the entries and
assembles the Run exactly as after an in-process read (assembly.assemble), so every answer is the same. An entry
is keyed by the folder's files (name, size, mtime) and perfkit's code: a folder whose entry is already there is
not read, so a second run after one rank changed reads that rank only. A folder keeps an entry for each kind of
read (its cluster-level read, its whole read), so reading a large run's representative ranks whole does not
replace the entries of their cluster-level read.

What goes wrong, and what the user sees:
  - no scheduler at the address, no worker within PERFKIT_DASK_TIMEOUT seconds (default 10): one line, exit 2;
  - storage this machine cannot write, or that the workers do not see (a local path on a cluster): one line;
  - a worker that dies mid-run: Dask runs its tasks again on the others; a folder whose task failed anyway,
    or that was left when no worker remained for PERFKIT_DASK_TIMEOUT seconds, is left out of the run and
    named in its warnings, as is a folder a worker cannot read.

dask and distributed are imported only here, and only when asked for (`pip install 'perfkit[dask]'`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..core.errors import FileFormatError, PerfkitError
from ..core.version import __version__
from . import cache
from .parallel import task_size

ADDRESS_ENV = "PERFKIT_DASK"
STORAGE_ENV = "PERFKIT_DASK_STORAGE"
TIMEOUT_ENV = "PERFKIT_DASK_TIMEOUT"
DEFAULT_TIMEOUT_S = 10.0
# A task that raised (not a dead worker: Dask reruns those itself, up to its allowed-failures) is tried again.
RETRIES = 1
# How often, while no task finishes, the wait looks whether any worker is left.
POLL_S = 1.0
ENTRY_FORMAT = 3  # 3: a reader's Arrow tables are kept as Arrow
ENTRY_KIND = "ranks"  # <storage>/ranks/<place: the folder>/<key: its files and perfkit's code>
# An entry is one file: MAGIC, the length of its description (8 bytes, little-endian), the description (JSON:
# every reader's facts, and where each table lies after it), then every table as an Arrow IPC stream: one file
# to write and read a rank, not six small Parquet files (with as_completed below, the client's CPU for 256
# ranks went from 5.9 to 4.0 s and the workers' from 9.9 to 7.5 s, benchmarks/bench_ranks.py).
MAGIC = b"perfkit-rank-entry\n"
# <storage>/ranks/outcomes-<run>/<task>.json: what each task of a run did (its entry's name, or why it read
# nothing); removed when the run is read
OUTCOMES = "outcomes"
# Entries are read back with this many threads: file reads on shared storage wait, and release the GIL.
READ_THREADS = 8


@dataclass(frozen=True)
class Target:
    address: str
    storage: str


def target(address: str | None = None, storage: str | None = None) -> Target | None:
    """The cluster to read on: `address`, else $PERFKIT_DASK; None (read in process) when neither is set."""
    address = (address or os.environ.get(ADDRESS_ENV, "")).strip()
    if not address:
        return None
    return Target(address, storage or os.environ.get(STORAGE_ENV) or str(cache.cache_root()))


def _failure(future) -> str:
    """Why a task failed, asked within timeout_s(): the scheduler may be too starved or gone to answer (a CI run
    waited past 180 s in future.exception(), which waits without end by default)."""
    try:
        exc = future.exception(timeout=timeout_s())
    except Exception:  # noqa: BLE001 - distributed raises its own timeout and comm errors; any means no answer
        return f"the scheduler did not say why within {timeout_s():g} s"
    return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


# Clusters given up on during one load's reads (no worker left, or a scheduler that stopped answering), with why:
# a later read of the same load (the loader's second pass) gives up at once, for a new client would wait on a
# silent scheduler's handshake past its timeout or find no worker. Each load starts afresh (forget_clusters).
GIVEN_UP: dict[str, str] = {}
# Schedulers one load has connected to: a later pass that cannot connect keeps what the earlier read.
CONNECTED: set[str] = set()


class SchedulerUnreachable(PerfkitError):
    """No client of the scheduler could start within the waits."""


class NoWorker(PerfkitError):
    """The scheduler answers, and no worker is connected to it within the wait."""


def forget_clusters() -> None:
    """Start a load afresh: no cluster given up on or connected to yet (a dashboard's earlier load may have)."""
    GIVEN_UP.clear()
    CONNECTED.clear()


# A client's start is waited for this many timeouts (its own, then the handshake's) before it is given up on.
CONNECT_WAITS = 2
# Past this PERFKIT_DASK_TIMEOUT is no bound (an hour per wait), and Dask's own timeouts refuse non-finite ones.
MAX_TIMEOUT_S = 3600.0
# The longest host name DNS allows: a longer address is no scheduler's, and is said before any connection.
MAX_HOST_CHARS = 253


def timeout_s() -> float:
    """PERFKIT_DASK_TIMEOUT in seconds (default 10, at least 0.1); a value that is not a number of seconds up to
    an hour is the user's error."""
    raw = os.environ.get(TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise PerfkitError(f"{TIMEOUT_ENV}={raw[:40]!r}: give seconds, more than 0 and at most {MAX_TIMEOUT_S:g}")
    return max(0.1, seconds)


# ---------------------------------------------------------------- this machine

def read_folders(where: Target, jobs: list[tuple[str, str]], function: Callable, code: str) -> list:
    """For each (reader name, folder) of `jobs`, what `function(reader name, folder)` gives for it ({rank: Parts},
    or a FileFormatError for a folder that was not read), each folder read on a worker. `function` is a loader's
    module-level function (workers import it by name); `code`: the digest of the code it runs, for the keys."""
    distributed = _distributed()
    timeout_s()  # a bad PERFKIT_DASK_TIMEOUT is said before anything starts
    if where.address in GIVEN_UP:  # a second pass of one load: connecting again would wait or fail as the first
        return [FileFormatError(f"not read: {GIVEN_UP[where.address]}", folder) for _, folder in jobs]
    fs, base = _filesystem(where.storage)
    probe = _probe(fs, base, where.storage)
    outcomes_folder = f"{base}/{ENTRY_KIND}/{OUTCOMES}-{uuid.uuid4().hex}"  # this run's: others may share the storage
    readers_of: dict[str, list[str]] = {}
    for reader_name, folder in jobs:
        readers_of.setdefault(folder, []).append(reader_name)
    try:
        client = _connect(distributed, where.address)
    except SchedulerUnreachable:
        if where.address not in CONNECTED:
            raise
        # a later pass of a load that read through this scheduler: what the earlier pass read stands
        GIVEN_UP[where.address] = f"the Dask scheduler did not answer for {CONNECT_WAITS * timeout_s():g} s"
        return [FileFormatError(f"not read: {GIVEN_UP[where.address]}", folder) for _, folder in jobs]
    try:
        _check_workers_see(client, distributed, where, probe)
    except PerfkitError as failed:
        _remove(fs, probe)
        _close(client, distributed)
        if not isinstance(failed, NoWorker) or where.address not in CONNECTED:
            raise
        GIVEN_UP[where.address] = failed.message  # a later pass: what the earlier pass read stands
        return [FileFormatError(f"not read: {failed.message}", folder) for _, folder in jobs]
    CONNECTED.add(where.address)
    try:
        folders = list(readers_of)
        # a task per folder cost the scheduler ~2 ms and the worker ~4 ms besides the read (10,000 ranks: 19 s
        # and 41 s of CPU with every entry already written): a task takes several
        size = task_size(len(folders), sum((_workers(client, distributed) or {"": 1}).values()))
        futures = {}
        for start in range(0, len(folders), size):
            batch = [(folder, readers_of[folder], f"{outcomes_folder}/{uuid.uuid4().hex}.json")
                     for folder in folders[start:start + size]]
            task = client.submit(_ingest_all, batch, function, code, where.storage, pure=False, retries=RETRIES,
                                 key=f"perfkit-{function.__name__}-{uuid.uuid4().hex}")
            futures[task] = [(folder, outcome) for folder, _, outcome in batch]
        outcomes = _gather(client, distributed, futures, where, fs)
        with ThreadPoolExecutor(READ_THREADS) as pool:
            read = dict(zip(folders, pool.map(lambda f: _results(fs, outcomes[f], readers_of[f], f, where),
                                              folders)))
    finally:
        _remove(fs, probe)
        _remove(fs, outcomes_folder)
        _close(client, distributed)
    return [read[folder][reader_name] for reader_name, folder in jobs]


def _close(client, distributed) -> None:
    """Close the client within timeout_s(); one that takes longer (a scheduler gone or slow to answer) is left
    to the interpreter's exit: what was read is read, and a TimeoutError here would hide the answer."""
    try:
        client.close(timeout=timeout_s())
    except (TimeoutError, distributed.TimeoutError, OSError):
        pass


def _distributed():
    try:
        import distributed
    except ImportError:
        raise PerfkitError("--dask / PERFKIT_DASK needs Dask: pip install 'perfkit[dask]'") from None
    return distributed


def _connect(distributed, address: str):
    """A client of the scheduler at `address`, within timeout_s(); never a wait without end."""
    import logging

    # distributed logs each failed attempt to connect, and each worker lost: the user gets one line or a warning
    for name in ["distributed", *(name for name in logging.root.manager.loggerDict if name.startswith("distributed."))]:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    from distributed.comm.addressing import get_address_host_port

    try:  # an address Dask cannot even parse fails here, before a Client exists to complain as it goes
        host, _ = get_address_host_port(address)
    except (ValueError, TypeError, NotImplementedError) as exc:
        raise PerfkitError(f"is no Dask scheduler address ({str(exc)[:200]}); e.g. tcp://10.0.0.5:8786",
                           address[:300]) from None
    if len(str(host)) > MAX_HOST_CHARS:
        raise PerfkitError(f"is no Dask scheduler address (a host name of {len(str(host)):,} characters; DNS allows "
                           f"{MAX_HOST_CHARS}); e.g. tcp://10.0.0.5:8786", address[:80] + "…")
    if address.startswith("tls://") and not _tls_configured():
        raise PerfkitError("is a TLS address, and Dask has no TLS settings here (distributed.comm.tls: ca-file, "
                           "client.cert, client.key, in the Dask config or DASK_DISTRIBUTED__COMM__TLS__*)", address)
    made = []

    class Client(distributed.Client):
        """Remembers itself, so a client whose start failed can be closed here and not by its __del__ at
        exit (where a close that times out prints a traceback)."""

        def __init__(self, *args, **kwargs):
            made.append(self)
            super().__init__(*args, **kwargs)

    started: list = []

    def start() -> None:
        try:
            started.append(Client(address, timeout=timeout_s(), set_as_default=False))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread, which decides
            started.append(exc)

    # A scheduler that accepts the connection and never answers (stopped, starved) holds the client's start past
    # its own timeout: it starts on a thread of its own, given up on (left to exit with the process) after that.
    starter = threading.Thread(target=start, name="perfkit-dask-connect", daemon=True)
    starter.start()
    starter.join(CONNECT_WAITS * timeout_s())
    outcome = started[0] if started else TimeoutError(f"no answer within {CONNECT_WAITS * timeout_s():g} s")
    if isinstance(outcome, distributed.Client):
        return outcome
    if not isinstance(outcome, (OSError, TimeoutError, ValueError, TypeError)):
        raise outcome
    for client in made:
        if started:
            with contextlib.suppress(Exception):  # any failure to close leaves nothing to close
                client.close(timeout=min(timeout_s(), 2.0))
        client.__dict__["_Client__loop"] = None  # Client.__del__ closes nothing without a loop
    raise SchedulerUnreachable(f"cannot reach the Dask scheduler within {timeout_s():g} s "
                               f"({str(outcome).splitlines()[0][:200] or type(outcome).__name__})", address[:300])


def _tls_configured() -> bool:
    """Whether the Dask config gives the client a certificate (a tls:// connection cannot start without one)."""
    import dask

    return bool(dask.config.get("distributed.comm.tls.client.cert", None)
                or dask.config.get("distributed.comm.tls.ca-file", None))


def _check_workers_see(client, distributed, where: Target, probe: str) -> None:
    """Every worker sees the file this machine just wrote to the storage: else their entries would not
    reach this machine either (a local path on workers of other machines)."""
    try:
        client.wait_for_workers(1, timeout=timeout_s())
    except (TimeoutError, distributed.TimeoutError, OSError):
        raise NoWorker(f"no Dask worker is connected to the scheduler (waited {timeout_s():g} s)",
                       where.address) from None
    seen = client.run(_sees, where.storage, probe)
    blind = sorted(worker for worker, sees in seen.items() if not sees)
    if blind:
        raise PerfkitError(f"Dask worker(s) {', '.join(blind[:3])} do not see what this machine writes there: "
                           "the storage must be shared by this machine and every worker "
                           f"(set {STORAGE_ENV} to a shared path or URL)", where.storage)


def _gather(client, distributed, futures: dict, where: Target, fs) -> dict[str, Any]:
    """{folder: the path of its outcome file, or why it was not read}, for the [(folder, outcome file)] of each
    task in `futures`: waits while tasks finish or workers remain; once no worker has been left (or the scheduler
    has not answered) for timeout_s(), the folders not read yet are given up.
    A finished task is not asked for its result (the worker holding it may be dead by then): it wrote each
    folder's outcome to the storage before it finished. Of a task that failed or was given up, the folders whose
    outcome it wrote before are read."""
    outcomes: dict[str, Any] = {}
    pending = set(futures)
    # told by the scheduler as tasks finish: distributed.wait over every pending future, again after each one
    # finished, costs the client in proportion to the square of the ranks; as_completed finds "the current client"
    with client.as_current():
        completed = distributed.as_completed(list(futures))
    workerless_since, looked = None, time.monotonic()
    while pending:
        batch = completed.next_batch(block=False)
        for future in batch:
            pending.discard(future)
            if future.status == "cancelled":
                raise PerfkitError("lost the Dask scheduler in the middle of the run", where.address)
            why = None
            for folder, outcome in futures[future]:
                # told done, then its result lost with the worker killed just after (status "lost", no
                # exception), or failed after some of its folders: the outcomes written are in the storage
                if future.status == "finished" or _written(fs, outcome):
                    outcomes[folder] = outcome
                    continue
                why = why or _failure(future)
                outcomes[folder] = FileFormatError(f"not read: its Dask task failed ({why})", folder)
        if batch or not pending:
            workerless_since = None
            continue
        time.sleep(0.02)
        if time.monotonic() - looked < POLL_S:
            continue
        looked = time.monotonic()
        if client.status not in ("running", "connecting"):
            raise PerfkitError("lost the Dask scheduler in the middle of the run", where.address)
        workers = _workers(client, distributed)
        if workers:
            workerless_since = None
        elif workerless_since is None:
            workerless_since = time.monotonic()
        elif time.monotonic() - workerless_since > timeout_s():
            why = (f"no Dask worker left to read it (none for {timeout_s():g} s)" if workers is not None else
                   f"the Dask scheduler did not answer for {timeout_s():g} s")
            GIVEN_UP[where.address] = why
            for future in pending:
                for folder, outcome in futures[future]:
                    outcomes[folder] = outcome if _written(fs, outcome) else FileFormatError(f"not read: {why}",
                                                                                            folder)
            client.cancel(list(pending))  # one message to the scheduler, not one call per task
            pending = set()
    return outcomes


def _written(fs, outcome: str) -> bool:
    try:
        return bool(fs.exists(outcome))
    except OSError:
        return False


def _workers(client, distributed) -> dict | None:
    """The scheduler's workers now, or None where it did not answer within timeout_s(): the one call of the wait
    that goes to the scheduler, which a scheduler that stopped answering (its connection still open) would
    otherwise make a wait without end. No answer counts as no worker: the wait stays bounded either way."""
    try:
        return client.nthreads(callback_timeout=timeout_s())
    except (TimeoutError, distributed.TimeoutError, OSError):
        return None


def _results(fs, outcome: Any, readers: list[str], folder: str, where: Target) -> dict[str, Any]:
    """{reader name: its result for `folder`} from a task's outcome: its entry in the storage, read here."""
    try:
        if not isinstance(outcome, FileFormatError):
            told = json.loads(fs.cat_file(outcome))
            outcome = FileFormatError(told["error"], folder) if "error" in told else told["entry"]
        if isinstance(outcome, FileFormatError):
            return {reader_name: outcome for reader_name in readers}
        return _read_entry(fs.cat_file(outcome))
    except (OSError, ValueError, KeyError) as exc:
        raise PerfkitError(f"cannot read what a Dask worker wrote there for {folder} ({exc}): the storage must be "
                           f"shared by this machine and every worker", where.storage) from None


def _read_entry(data: bytes) -> dict[str, Any]:
    """{reader name: its result} of an entry's bytes (_entry_bytes)."""
    import pyarrow as pa

    from .formats.base import Parts

    if not data.startswith(MAGIC):
        raise ValueError("not a perfkit rank entry")
    start = len(MAGIC) + 8
    length = int.from_bytes(data[len(MAGIC):start], "little")
    described = json.loads(data[start:start + length])
    tables_at = start + length
    buffer = pa.py_buffer(data)
    results: dict[str, Any] = {}
    for item in described["results"]:
        if "error" in item:
            results[item["reader"]] = FileFormatError(item["error"], item["path"])
            continue
        results[item["reader"]] = result = {}
        for rank, facts in item["ranks"].items():
            tables = {}
            for name, spec in facts["tables"].items():
                table = pa.ipc.open_stream(buffer.slice(tables_at + spec["at"], spec["bytes"])).read_all()
                tables[name] = table if spec.get("arrow") else cache.pandas_frame(table, spec)
            result[int(rank)] = Parts(tables=tables, meta=facts["meta"], warnings=facts["warnings"],
                                      sources=facts["sources"])
    return results


# ---------------------------------------------------------------- the storage

def _filesystem(storage: str):
    """(fsspec filesystem, path within it) of a path or URL."""
    from fsspec.core import url_to_fs

    try:
        fs, base = url_to_fs(storage)
    except (ImportError, ValueError, OSError) as exc:
        raise PerfkitError(f"is no storage perfkit can use ({exc})", storage) from None
    return fs, base.rstrip("/")


def _probe(fs, base: str, storage: str) -> str:
    """Write a file the workers must see; one line when this machine cannot write the storage."""
    probe = f"{base}/{ENTRY_KIND}/probe-{uuid.uuid4().hex}"
    try:
        fs.makedirs(f"{base}/{ENTRY_KIND}", exist_ok=True)
        with fs.open(probe, "wb") as handle:
            handle.write(b"perfkit")
    except (OSError, ValueError) as exc:
        raise PerfkitError(f"cannot write the Dask storage here ({getattr(exc, 'strerror', None) or exc})",
                           storage) from None
    return probe


def _remove(fs, path: str) -> None:
    try:
        fs.rm(path, recursive=True)
    except (OSError, ValueError):
        pass


def _sees(storage: str, probe: str) -> bool:
    """On a worker: whether the probe file this machine wrote is there."""
    fs, _ = _filesystem(storage)
    try:
        return fs.exists(probe)
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------- on a worker

def _ingest_all(batch: list[tuple[str, list[str], str]], function: Callable, code: str, storage: str) -> None:
    """On a worker: each (folder, readers, outcome file) of a task, in turn (_ingest)."""
    fs, base = _filesystem(storage)
    for folder, readers, outcome in batch:
        _ingest(fs, base, folder, readers, function, code, outcome)


def _ingest(fs, base: str, folder: str, readers: list[str], function: Callable, code: str, outcome: str) -> None:
    """On a worker: read `folder` with `readers`, write its entry (unless it is there), then the outcome file
    naming the entry (or saying why the folder cannot be read here)."""
    unseen = _unseen(folder, readers)
    if unseen is not None:
        _write_atomically(fs, outcome, json.dumps({"error": f"cannot be read on Dask worker {_worker_name()} "
                                                            f"({unseen})"}).encode())
        return
    digest = hashlib.sha256(f"{ENTRY_FORMAT}\0{__version__}\0{code}\0{function.__name__}\0{','.join(readers)}\0"
                            .encode())
    cache.add_folder(digest, folder)
    place = f"{base}/{ENTRY_KIND}/{hashlib.sha256(folder.encode()).hexdigest()[:24]}"
    kind = hashlib.sha256(f"{function.__name__}\0{','.join(readers)}".encode()).hexdigest()[:8]
    entry = f"{place}/{kind}-{digest.hexdigest()[:32]}"
    if not fs.exists(entry):
        _write_atomically(fs, entry, _entry_bytes([(name, _read(name, folder, function)) for name in readers]))
        for stale in fs.ls(place, detail=False):  # the folder's entries of this read for its files as they were
            name = stale.rstrip("/").rpartition("/")[2]
            if name.startswith(f"{kind}-") and stale.rstrip("/") != entry.rstrip("/") and ".tmp-" not in name:
                _remove(fs, stale)
    _write_atomically(fs, outcome, json.dumps({"entry": entry}).encode())


def _read(reader_name: str, folder: str, function: Callable):
    try:
        return function(reader_name, folder)
    except FileFormatError as exc:
        return exc
    except OSError as exc:
        return FileFormatError(f"cannot be read on Dask worker {_worker_name()} ({exc.strerror or exc})", folder)


def _unseen(folder: str, readers: list[str]) -> str | None:
    """Why this worker does not see `folder` as the client did, or None: it cannot list the folder or one in it
    (no permission), or a reader that claimed it there finds none of its files here (not mounted alike).
    Unchecked, a reader would take a folder it sees empty for rank 0's."""
    from .formats import by_name

    try:
        for entry in os.scandir(folder):
            if entry.is_dir():
                os.listdir(entry.path)
    except OSError as exc:
        return f"{exc.strerror or exc}: {exc.filename}"
    lost = [name for name in readers if not by_name(name).detect(Path(folder))]
    if lost:
        return f"the {', '.join(lost)} files found there on this machine are not there on the worker"
    return None


def _worker_name() -> str:
    try:
        from distributed import get_worker
        return get_worker().address
    except (ImportError, ValueError):
        return "?"


def _entry_bytes(results: list[tuple[str, Any]]) -> bytes:
    """An entry (MAGIC) of every reader's result: the tables as Arrow IPC streams after the description."""
    import pyarrow as pa

    from .formats.tables import is_arrow

    described: dict[str, Any] = {"format": ENTRY_FORMAT, "results": []}
    streams: list[bytes] = []
    at = 0  # from the end of the description
    for reader_name, result in results:
        if isinstance(result, FileFormatError):
            described["results"].append({"reader": reader_name, "error": result.message, "path": result.path})
            continue
        ranks = {}
        for rank, parts in result.items():
            tables = {}
            for name, frame in parts.tables.items():
                if frame is None:
                    continue
                # a reader's Arrow table stays Arrow (the loader makes all ranks' pieces pandas at once)
                table, spec = (frame, {"arrow": True}) if is_arrow(frame) else cache.arrow_table(frame)
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, table.schema) as writer:
                    writer.write_table(table)
                streams.append(sink.getvalue().to_pybytes())
                tables[name] = {**spec, "at": at, "bytes": len(streams[-1])}
                at += len(streams[-1])
            ranks[str(rank)] = {"tables": tables, "meta": parts.meta, "warnings": parts.warnings,
                                "sources": parts.sources}
        described["results"].append({"reader": reader_name, "ranks": ranks})
    text = json.dumps(described, default=cache.jsonable).encode()
    return MAGIC + len(text).to_bytes(8, "little") + text + b"".join(streams)


def _write_atomically(fs, path: str, data: bytes) -> None:
    """Written under a temporary name, then renamed: whoever reads `path` reads all of it."""
    staging = f"{path}.tmp-{uuid.uuid4().hex}"
    fs.makedirs(path.rpartition("/")[0], exist_ok=True)
    fs.pipe_file(staging, data)
    fs.mv(staging, path)

"""A cache of what each reader returned for a folder, as Parquet, so the second load is near-instant.

An entry holds one reader's `{rank: Parts}` for one folder: every table as a Parquet file and the
meta, warnings and sources as JSON. It lives under the user's cache dir ($PERFKIT_CACHE_DIR, else
$XDG_CACHE_HOME/perfkit, else ~/.cache/perfkit), never inside the run being read, and is keyed by
the reader (and the code it runs), the folder's absolute path and the (name, size, mtime_ns) of
every file under that folder: touching or rewriting any file makes the next load a cold read.

Entries are written to a temporary folder and renamed into place, so a reader never sees half an
entry; an entry that cannot be read back is deleted and the folder is read cold. A cache that
cannot be written (read-only home, full disk) only costs speed. PERFKIT_NO_CACHE=1 turns it off.
The cache is kept under $PERFKIT_CACHE_MAX_MB (default 2 GB) by dropping the least recently used entries.

Many folders (a cluster run with one folder per rank) are read cold in parallel processes.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import multiprocessing
import os
import shutil
import uuid
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Iterable, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import __version__
from .errors import FileFormatError
from .formats.base import Parts, screened

# Bump when the layout of an entry on disk changes; old entries are then simply never found.
ENTRY_FORMAT = 2
# Folders are read in worker processes only from this many on: a pool of forked workers costs tens of
# ms to start and its results must be pickled back, which a few small folders do not repay.
PARALLEL_MIN_FOLDERS = 8
# How deep under a reader's folder files count towards its key: readers reach at most
# ASCEND_PROFILER_OUTPUT/, FRAMEWORK/ or PROF_*/device_*/data/ below their folder.
FINGERPRINT_DEPTH = 4
# Code the cached tables depend on besides the reader module itself.
SHARED_CODE = ("formats/base.py", "formats/steps.py", "model.py")
META_FILE = "entry.json"
# Arrow's thread pool pays off only on big tables; for the many small per-rank tables of a cluster
# run, starting it costs more than decoding (0.5 ms vs 4 ms per table measured on 256 ranks).
THREADED_READ_BYTES = 4 * 1024 * 1024
# Tables read from an entry only when a command first uses them (model.Run defers them): op rows are
# most of a big run's entry (a million rows: 0.4 s of a 1.1 s warm `perfkit summary` that never uses them).
DEFERRED_TABLES = ("ops",)
# After a load that stored entries, the cache is trimmed to $PERFKIT_CACHE_MAX_MB (else this), least recently
# used entries first and never the load's own; the benchmark runs take 10-150 MB each.
DEFAULT_MAX_BYTES = 2 * 1024**3

Job = tuple[Any, Path]  # (reader module, folder)


def enabled() -> bool:
    return os.environ.get("PERFKIT_NO_CACHE", "").strip() not in ("1", "true", "yes")


def cache_root() -> Path:
    """Where entries live: $PERFKIT_CACHE_DIR, else $XDG_CACHE_HOME/perfkit, else ~/.cache/perfkit."""
    if os.environ.get("PERFKIT_CACHE_DIR"):
        return Path(os.environ["PERFKIT_CACHE_DIR"]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base).expanduser() / "perfkit").resolve()


def max_bytes() -> int:
    try:
        return int(float(os.environ["PERFKIT_CACHE_MAX_MB"]) * 1024**2)
    except (KeyError, ValueError):
        return DEFAULT_MAX_BYTES


def usable_root(run_root: Path) -> Path | None:
    """The cache root, or None when caching is off or the root lies inside the run being read."""
    if not enabled():
        return None
    root = cache_root()
    if root == run_root or run_root in root.parents:
        return None
    return root


# ---------------------------------------------------------------- keys

def _files_under(folder: Path, depth: int = 0) -> Iterable[tuple[str, int, int]]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=True):
                stat = entry.stat()
                yield entry.path, stat.st_size, stat.st_mtime_ns
            elif entry.is_dir(follow_symlinks=False) and depth < FINGERPRINT_DEPTH:
                yield from _files_under(Path(entry.path), depth + 1)
        except OSError:
            continue  # vanished or unreadable: the reader will say so


def _code_files(reader) -> list[Path]:
    package = Path(__file__).resolve().parent
    return [Path(reader.__file__).resolve()] + [package / name for name in SHARED_CODE]


def entry_dir(root: Path, reader, folder: Path) -> Path:
    """The entry's path for the folder as it is on disk now."""
    folder = folder.resolve()
    digest = hashlib.sha256(f"{ENTRY_FORMAT}\0{__version__}\0{reader.__name__}\0".encode())
    for path in _code_files(reader):
        stat = path.stat()
        digest.update(f"{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    for path, size, mtime_ns in _files_under(folder):
        digest.update(f"{os.path.relpath(path, folder)}\0{size}\0{mtime_ns}\0".encode())
    place = hashlib.sha256(f"{reader.__name__}\0{folder}".encode()).hexdigest()[:24]
    return root / "parts" / place / digest.hexdigest()[:32]


# ---------------------------------------------------------------- one entry

def _jsonable(value: Any) -> Any:
    """json.dumps fallback: numpy scalars/arrays and paths; anything else is not cacheable."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _json_column(series: pd.Series) -> bool:
    """Object columns holding anything but strings (lists, dicts) are stored as JSON text."""
    values = series.dropna()
    return series.dtype == object and not values.map(lambda v: isinstance(v, str)).all()


def _write_table(frame: pd.DataFrame, path: Path) -> dict:
    json_columns = [name for name in frame.columns if _json_column(frame[name])]
    stored = frame.copy() if json_columns else frame
    for name in json_columns:
        stored[name] = stored[name].map(lambda v: None if v is None else json.dumps(v, default=_jsonable))
    pq.write_table(pa.Table.from_pandas(stored, preserve_index=None), path)
    return {"file": path.name, "rows": len(frame), "json_columns": json_columns,
            "dtypes": {str(name): str(dtype) for name, dtype in frame.dtypes.items()}}


def _read_table(folder: Path, spec: dict) -> pd.DataFrame:
    path = folder / spec["file"]
    threaded = path.stat().st_size > THREADED_READ_BYTES
    table = pq.ParquetFile(path).read(use_threads=threaded)
    frame = table.to_pandas(use_threads=threaded)
    for name in spec["json_columns"]:
        frame[name] = pd.Series([None if v is None else json.loads(v) for v in table.column(name).to_pylist()],
                                index=frame.index, dtype=object)
    for name, dtype in spec["dtypes"].items():
        if str(frame[name].dtype) != dtype:
            frame[name] = frame[name].astype(dtype)
    return frame


class Deferred:
    """A table of a cache entry, read when called. Its row count is known without reading it.

    The entry may be gone by then (replaced after its files changed, or cleaned up): the folder is
    then read again and the rank's table taken from that, so the files stay the truth.
    """

    def __init__(self, folder: Path, spec: dict, reader_name: str, source: Path, rank: int, name: str):
        self.folder, self.spec, self.rows = folder, spec, spec["rows"]
        self.reader_name, self.source, self.rank, self.name = reader_name, source, rank, name

    def __len__(self) -> int:
        return self.rows

    def __call__(self) -> pd.DataFrame:
        try:
            return _read_table(self.folder, self.spec)
        except (OSError, ValueError, KeyError, pa.ArrowException):
            parts = screened(importlib.import_module(self.reader_name).read(self.source)).get(self.rank)
            frame = None if parts is None else parts.tables.get(self.name)
            return frame if frame is not None else pd.DataFrame()


def store(entry: Path, result: dict[int, Parts]) -> bool:
    """Write `result` as the entry at `entry`, atomically; False when it cannot be cached."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    staging = entry.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        staging.mkdir()
        ranks = {}
        for rank, parts in result.items():
            rank_dir = staging / f"r{rank}"
            rank_dir.mkdir()
            tables = {name: _write_table(frame, rank_dir / f"{name}.parquet")
                      for name, frame in parts.tables.items() if frame is not None}
            ranks[str(rank)] = {"meta": parts.meta, "warnings": parts.warnings, "sources": parts.sources,
                                "tables": tables}
        text = json.dumps({"format": ENTRY_FORMAT, "ranks": ranks}, default=_jsonable)
        decoded = json.loads(text)["ranks"]
        if any((decoded[str(rank)]["meta"], decoded[str(rank)]["warnings"], decoded[str(rank)]["sources"])
               != (parts.meta, parts.warnings, parts.sources) for rank, parts in result.items()):
            raise TypeError("meta does not survive JSON unchanged")  # e.g. tuples: the cold read wins
        (staging / META_FILE).write_text(text)
        os.rename(staging, entry)  # atomic; fails if another process stored the same entry first
    except (OSError, TypeError, ValueError, pa.ArrowException):
        shutil.rmtree(staging, ignore_errors=True)
        return entry.is_dir()
    for stale in entry.parent.iterdir():  # entries for earlier versions of the folder's files
        if stale != entry and not stale.name.startswith(".tmp-"):
            shutil.rmtree(stale, ignore_errors=True)
    return True


def fetch(entry: Path, source: Job | None = None) -> dict[int, Parts] | None:
    """The cached result at `entry`; None when there is none or it is broken (then it is removed).

    Given the `source` (reader, folder) the entry was made from, DEFERRED_TABLES come back as
    `Deferred`, read on first use.
    """
    if not entry.is_dir():
        return None
    try:
        described = json.loads((entry / META_FILE).read_text())
        if described["format"] != ENTRY_FORMAT:
            raise ValueError("entry format")
        result = {}
        for rank, stored in described["ranks"].items():
            folder = entry / f"r{rank}"
            tables = {name: (Deferred(folder, spec, source[0].__name__, source[1], int(rank), name)
                             if source is not None and name in DEFERRED_TABLES and spec["rows"]
                             else _read_table(folder, spec))
                      for name, spec in stored["tables"].items()}
            result[int(rank)] = Parts(tables=tables, meta=stored["meta"], warnings=stored["warnings"],
                                      sources=stored["sources"])
        os.utime(entry / META_FILE)  # last use, for trim()
        return result
    except Exception:  # noqa: BLE001 - whatever is wrong with a cache entry, the files are the truth
        shutil.rmtree(entry, ignore_errors=True)
        return None


# ---------------------------------------------------------------- many folders

def _cold(reader_name: str, folder: str, root: str | None) -> dict[int, Parts] | FileFormatError:
    """Read one folder and store it in the cache under `root` (None: no cache). A folder whose files are
    all broken comes back as its error, not raised: it must not stop the other folders being read."""
    reader = importlib.import_module(reader_name)
    # Keyed on the files as they were before reading: a file rewritten meanwhile misses next time.
    entry = entry_dir(Path(root), reader, Path(folder)) if root else None
    try:
        result = screened(reader.read(Path(folder)))
    except FileFormatError as exc:
        return exc
    if entry is not None:
        store(entry, result)
    return result


def _map_cold(jobs: Sequence[Job], root: Path | None) -> list[dict[int, Parts] | FileFormatError]:
    """`_cold` over jobs, in worker processes when there are many."""
    return map_folders(_cold, [(reader.__name__, str(folder), str(root) if root else None) for reader, folder in jobs])


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


def read_all(jobs: Sequence[Job], run_root: Path) -> list[dict[int, Parts] | FileFormatError]:
    """Each job's `reader.read(folder)` (or the FileFormatError it raised), from the cache where it is
    current, else read and cached."""
    root = usable_root(run_root)
    results: list[dict[int, Parts] | None] = [None] * len(jobs)
    entries = [entry_dir(root, reader, folder) for reader, folder in jobs] if root is not None else []
    for index, entry in enumerate(entries):
        results[index] = fetch(entry, jobs[index])
    missing = [index for index, result in enumerate(results) if result is None]
    for index, result in zip(missing, _map_cold([jobs[i] for i in missing], root)):
        results[index] = result
    if root is not None and missing:
        trim(root, keep=set(entries))
    return results


def trim(root: Path, keep: set[Path]) -> None:
    """Remove the least recently used entries until the cache fits in max_bytes(); never those in `keep`."""
    entries = []
    for place in _subfolders(root / "parts"):
        for entry in _subfolders(place):
            if entry.name.startswith(".tmp-"):
                continue  # being written by another process
            try:
                used = (entry / META_FILE).stat().st_mtime
            except OSError:
                continue
            entries.append((used, sum(size for _, size, _ in _files_under(entry)), entry))
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries):
        if total <= max_bytes():
            break
        if entry not in keep:
            shutil.rmtree(entry, ignore_errors=True)
            total -= size


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [Path(entry.path) for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []

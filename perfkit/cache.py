"""A cache of loaded runs, as Parquet, so the second load of a run is near-instant.

An entry holds one `Run`: every table as a Parquet file, its meta and warnings as JSON. It lives
under the user's cache dir ($PERFKIT_CACHE_DIR, else $XDG_CACHE_HOME/perfkit, else ~/.cache/perfkit),
never inside the run being read, and is keyed by the run's path, the code that builds a Run, and
for every folder a reader reads, the reader and the (name, size, mtime_ns) of every file under it:
touching or rewriting any file makes the next load a cold read.

One entry per run, not per folder: a warm load of 256 ranks then reads three Parquet files instead
of a thousand, and a cold one writes three instead of a thousand.

Entries are written to a temporary folder and renamed into place, so a reader never sees half an
entry; an entry that cannot be read back is deleted and the run is read cold. A cache that cannot
be written (read-only home, full disk) only costs speed. PERFKIT_NO_CACHE=1 turns it off. The cache
is kept under $PERFKIT_CACHE_MAX_MB (default 2 GB) by dropping the least recently used entries.

Many folders (a cluster run with one folder per rank) are read cold in parallel processes.
"""

from __future__ import annotations

import functools
import hashlib
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
from .model import SCHEMA, Meta, Run

# Bump when the layout of an entry on disk changes; old entries are then simply never found.
ENTRY_FORMAT = 3
# Folders are read in worker processes only from this many on: a pool of forked workers costs tens of
# ms to start and its results must be pickled back, which a few small folders do not repay.
PARALLEL_MIN_FOLDERS = 8
# How deep under a reader's folder files count towards its key: readers reach at most
# ASCEND_PROFILER_OUTPUT/, FRAMEWORK/ or PROF_*/device_*/data/ below their folder.
FINGERPRINT_DEPTH = 4
# The code a cached Run depends on: the readers and the assembly of their results.
CODE = ("formats", "model.py", "cache.py")
META_FILE = "entry.json"
# Arrow's thread pool pays off only on big tables; for small ones starting it costs more than decoding.
THREADED_READ_BYTES = 4 * 1024 * 1024
# Tables read from an entry only when a command first uses them (model.Run defers them): op rows are
# most of a big run's entry (a million rows: 0.4 s of a 1.1 s warm `perfkit summary` that never uses them).
DEFERRED_TABLES = ("ops",)
# After a load that stored an entry, the cache is trimmed to $PERFKIT_CACHE_MAX_MB (else this), least
# recently used entries first and never the load's own; the benchmark runs take 1-150 MB each.
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


@functools.lru_cache(maxsize=1)
def _code_digest() -> str:
    """(name, size, mtime) of every source file a Run is built by, hashed once per process."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for name in CODE:
        path = package / name
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            stat = source.stat()
            digest.update(f"{source.relative_to(package)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def run_entry(run_root: Path, jobs: Sequence[Job]) -> Path | None:
    """The entry's path for the run at `run_root` (its folders `jobs`) as it is on disk now; None when
    there is no usable cache."""
    root = usable_root(run_root)
    if root is None:
        return None
    digest = hashlib.sha256(f"{ENTRY_FORMAT}\0{__version__}\0{_code_digest()}\0{run_root}\0".encode())
    for reader, folder in jobs:
        digest.update(f"{reader.__name__}\0{folder}\0".encode())
        for path, size, mtime_ns in _files_under(folder):
            digest.update(f"{os.path.relpath(path, folder)}\0{size}\0{mtime_ns}\0".encode())
    place = hashlib.sha256(str(run_root).encode()).hexdigest()[:24]
    return root / "runs" / place / digest.hexdigest()[:32]


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
    return series.dtype == object and not series.dropna().map(lambda v: isinstance(v, str)).all()


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

    The entry may be gone by then (replaced after its files changed, or cleaned up): the run is then
    loaded again and the table taken from that, so the files stay the truth.
    """

    def __init__(self, folder: Path, spec: dict, run_path: str, name: str):
        self.folder, self.spec, self.rows = folder, spec, spec["rows"]
        self.run_path, self.name = run_path, name

    def __len__(self) -> int:
        return self.rows

    def __call__(self) -> pd.DataFrame:
        try:
            return _read_table(self.folder, self.spec)
        except (OSError, ValueError, KeyError, pa.ArrowException):
            from .formats import load
            return getattr(load(self.run_path), self.name)


def store(entry: Path, run: Run) -> bool:
    """Write `run` as the entry at `entry`, atomically, then trim the cache; False when it cannot be cached."""
    described = {"format": ENTRY_FORMAT, "run": run.path, "meta": run.meta.to_dict(), "warnings": run.warnings}
    try:
        if json.loads(json.dumps(described, default=_jsonable)) != described:
            return False  # e.g. tuples would come back as lists: the cold read wins
    except (TypeError, ValueError):
        return False
    staging = entry.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        described["tables"] = {name: _write_table(frame, staging / f"{name}.parquet")
                               for name, frame in run.tables().items() if len(frame)}
        (staging / META_FILE).write_text(json.dumps(described, default=_jsonable))
        os.rename(staging, entry)  # atomic; fails if another process stored the same entry first
    except (OSError, TypeError, ValueError, pa.ArrowException):
        shutil.rmtree(staging, ignore_errors=True)
        return entry.is_dir()
    for stale in entry.parent.iterdir():  # entries for earlier versions of the run's files
        if stale != entry and not stale.name.startswith(".tmp-"):
            shutil.rmtree(stale, ignore_errors=True)
    trim(entry.parents[2], keep={entry})
    return True


def fetch(entry: Path) -> Run | None:
    """The Run cached at `entry`, DEFERRED_TABLES read on first use; None when there is none or it is
    broken (then it is removed)."""
    if not entry.is_dir():
        return None
    try:
        described = json.loads((entry / META_FILE).read_text())
        if described["format"] != ENTRY_FORMAT:
            raise ValueError("entry format")
        tables = {name: (Deferred(entry, spec, described["run"], name) if name in DEFERRED_TABLES
                         else _read_table(entry, spec))
                  for name, spec in described["tables"].items() if name in SCHEMA}
        run = Run(path=described["run"], meta=Meta(**described["meta"]), warnings=described["warnings"], **tables)
        os.utime(entry / META_FILE)  # last use, for trim()
        return run
    except Exception:  # noqa: BLE001 - whatever is wrong with a cache entry, the files are the truth
        shutil.rmtree(entry, ignore_errors=True)
        return None


# ---------------------------------------------------------------- many folders

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


def trim(root: Path, keep: set[Path]) -> None:
    """Remove the least recently used entries until the cache fits in max_bytes(); never those in `keep`."""
    entries = []
    for place in _subfolders(root / "runs"):
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

"""perfkit's cache: loaded runs as Parquet entries, and finished answers as text.

**Run entries.** An entry holds one `Run`: every table as a Parquet file, its meta and warnings as JSON.
It is keyed by the run's path, the code that builds a Run (the loader passes its files), and for every
folder read, the reader's name and the (name, size, mtime_ns) of every file under it: touching or
rewriting any file makes the next load a cold read. One entry per run, not per folder: a warm load of
256 ranks reads three Parquet files instead of a thousand. This module knows Parquet, not formats:
perfkit/loader.py decides what is read and how.

**Answers.** `perfkit summary`, `advise` and `ranks` keep their finished output, keyed by the command,
its options, perfkit's code and every file under the run: when nothing changed, the answer is printed
without importing pandas or pyarrow (0.7 s of a 1.1 s warm summary was importing pandas). This module
imports them only where a Run entry is read or written, for that reason.

Everything lives under the user's cache dir ($PERFKIT_CACHE_DIR, else $XDG_CACHE_HOME/perfkit, else
~/.cache/perfkit), never inside the run being read. Entries are written to a temporary name and renamed
into place, so a reader never sees half an entry; one that cannot be read back is deleted and the run is
read cold. A cache that cannot be written (read-only home, full disk) only costs speed. PERFKIT_NO_CACHE=1
turns it off. The cache is kept under $PERFKIT_CACHE_MAX_MB (default 2 GB) by dropping the least recently
used entries: runs, answers and timeline indexes alike.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from . import __version__

# Bump when the layout of an entry on disk changes; old entries are then simply never found.
ENTRY_FORMAT = 3
# How deep under a reader's folder files count towards its key: readers reach at most
# ASCEND_PROFILER_OUTPUT/, FRAMEWORK/ or PROF_*/device_*/data/ below their folder.
FINGERPRINT_DEPTH = 4
META_FILE = "entry.json"
# Arrow's thread pool pays off only on big tables; for small ones starting it costs more than decoding.
THREADED_READ_BYTES = 4 * 1024 * 1024
# Tables read from an entry only when a command first uses them (model.Run defers them): op rows are
# most of a big run's entry (a million rows: 0.4 s of a 1.1 s warm `perfkit summary` that never uses them).
DEFERRED_TABLES = ("ops",)
# After a load that stored an entry, the cache is trimmed to $PERFKIT_CACHE_MAX_MB (else this), least
# recently used entries first and never the load's own; the benchmark runs take 1-150 MB each.
DEFAULT_MAX_BYTES = 2 * 1024**3
# Answers: folders under a run that no reader reads (raw CANN data, logs) do not count towards the key;
# a run's own folders are at most this deep (a cluster parent / rank folder / *_ascend_ms / FRAMEWORK).
ANSWER_SKIP_DIRS = ("PROF_", "logs", "__pycache__")
ANSWER_DEPTH = 8
ANSWER_FORMAT = 1
# What the cache holds, one folder each under its root, as <kind>/<place>/<entry>: run entries (this
# module), kept answers (this module), timeline indexes (perfkit/timeline.py) and the rank folders Dask workers
# read (perfkit/dask_ingest.py, when the cache is their storage). trim() counts them all.
ENTRY_KINDS = ("runs", "answers", "timeline", "ranks")

Job = tuple[str, Path]  # (reader name, folder)


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

def _files_under(folder: Path, max_depth: int, skip: tuple[str, ...] = (), depth: int = 0
                 ) -> Iterable[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every file under `folder` down to `max_depth` folders, leaving out folders
    whose names start with `skip`, not following links into folders (a link loop cannot trap the walk); a
    linked file counts by its target, a broken link as (-1, -1): its state is part of what a key says."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            folder_entry = entry.is_dir(follow_symlinks=False)
        except OSError:
            folder_entry = False
        if folder_entry:
            if depth < max_depth and not entry.name.startswith(skip):
                yield from _files_under(Path(entry.path), max_depth, skip, depth + 1)
        else:
            yield (entry.path, *_size_and_mtime(entry))


def _size_and_mtime(entry: os.DirEntry) -> tuple[int, int]:
    """(size, mtime_ns) of a file (a link's target), (-1, -1) where it cannot be read (a broken link)."""
    try:
        stat = entry.stat()
        return stat.st_size, stat.st_mtime_ns
    except OSError:
        return -1, -1


@functools.lru_cache(maxsize=4)
def code_digest(code: tuple[Path, ...]) -> str:
    """(name, size, mtime) of every Python file in `code` (files or packages), hashed once per process."""
    digest = hashlib.sha256()
    for path in code:
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            stat = source.stat()
            digest.update(f"{source}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def run_entry(run_root: Path, jobs: Sequence[Job], code: Sequence[Path]) -> Path | None:
    """The entry's path for the run at `run_root` (its folders `jobs`, built by the Python files `code`)
    as it is on disk now; None when there is no usable cache."""
    root = usable_root(run_root)
    if root is None:
        return None
    digest = hashlib.sha256(f"{ENTRY_FORMAT}\0{__version__}\0{code_digest(tuple(code))}\0{run_root}\0".encode())
    for reader_name, folder in jobs:
        digest.update(f"{reader_name}\0".encode())
        add_folder(digest, folder)
    place = hashlib.sha256(str(run_root).encode()).hexdigest()[:24]
    return root / "runs" / place / digest.hexdigest()[:32]


def add_folder(digest, folder: str | os.PathLike) -> None:
    """Add a reader's folder to a key: its path and the (name, size, mtime_ns) of every file under it."""
    digest.update(f"{folder}\0".encode())
    _add_files(digest, Path(folder), FINGERPRINT_DEPTH)


def _add_files(digest, folder: Path, max_depth: int, skip: tuple[str, ...] = ()) -> None:
    """Add (path under `folder`, size, mtime_ns) of every file under it (_files_under) to a key. The paths
    start with the folder's: cut, not os.path.relpath, which cost most of a 4,096-rank run's key."""
    start = len(os.path.join(str(folder), ""))
    for path, size, mtime_ns in _files_under(folder, max_depth, skip):
        digest.update(f"{path[start:]}\0{size}\0{mtime_ns}\0".encode())


# ---------------------------------------------------------------- one entry

def _jsonable(value: Any) -> Any:
    """json.dumps fallback: numpy scalars/arrays and paths; anything else is not cacheable."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def _json_column(series) -> bool:
    """Object columns holding anything but strings (lists, dicts) are stored as JSON text."""
    return series.dtype == object and not series.dropna().map(lambda v: isinstance(v, str)).all()


def _write_table(frame, path: Path) -> dict:
    import pyarrow.parquet as pq

    table, spec = arrow_table(frame)
    pq.write_table(table, path)
    return {"file": path.name, **spec}


def arrow_table(frame):
    """(a DataFrame as an Arrow table, the spec that `pandas_frame` makes the same DataFrame of again)."""
    import pyarrow as pa

    json_columns = [name for name in frame.columns if _json_column(frame[name])]
    stored = frame.copy() if json_columns else frame
    for name in json_columns:
        stored[name] = stored[name].map(lambda v: None if v is None else json.dumps(v, default=_jsonable))
    return (pa.Table.from_pandas(stored, preserve_index=None),
            {"rows": len(frame), "json_columns": json_columns,
             "dtypes": {str(name): str(dtype) for name, dtype in frame.dtypes.items()}})


def _read_table(folder: Path, spec: dict):
    import pyarrow.parquet as pq

    path = folder / spec["file"]
    threaded = path.stat().st_size > THREADED_READ_BYTES
    return pandas_frame(pq.ParquetFile(path).read(use_threads=threaded), spec, threaded)


def pandas_frame(table, spec: dict, threaded: bool = False):
    """The DataFrame `arrow_table` gave `table` and `spec` of."""
    import pandas as pd

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

    The entry may be gone by then (replaced after its files changed, or cleaned up): `reload(name)`
    (the loader's: load the run again, take the table) then gives it, so the files stay the truth.
    """

    def __init__(self, folder: Path, spec: dict, name: str, reload: Callable[[str], Any]):
        self.folder, self.spec, self.rows = folder, spec, spec["rows"]
        self.name, self.reload = name, reload

    def __len__(self) -> int:
        return self.rows

    def __call__(self):
        import pyarrow as pa

        try:
            return _read_table(self.folder, self.spec)
        except (OSError, ValueError, KeyError, pa.ArrowException):
            return self.reload(self.name)


def store(entry: Path, run) -> bool:
    """Write `run` as the entry at `entry`, atomically, then trim the cache; False when it cannot be cached."""
    import pyarrow as pa

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
    _remove_siblings(entry)
    trim(entry.parents[2], keep={entry})
    return True


def fetch(entry: Path, reload: Callable[[str], Any]):
    """The Run cached at `entry`, DEFERRED_TABLES read on first use (through `reload(name)` if the entry
    is gone by then); None when there is none or it is broken (then it is removed)."""
    from .model import SCHEMA, Meta, Run

    if not entry.is_dir():
        return None
    try:
        described = json.loads((entry / META_FILE).read_text())
        if described["format"] != ENTRY_FORMAT:
            raise ValueError("entry format")
        tables = {name: (Deferred(entry, spec, name, reload) if name in DEFERRED_TABLES
                         else _read_table(entry, spec))
                  for name, spec in described["tables"].items() if name in SCHEMA}
        run = Run(path=described["run"], meta=Meta(**described["meta"]), warnings=described["warnings"], **tables)
        os.utime(entry / META_FILE)  # last use, for trim()
        return run
    except Exception:  # noqa: BLE001 - whatever is wrong with a cache entry, the files are the truth
        shutil.rmtree(entry, ignore_errors=True)
        return None


def _remove_siblings(entry: Path) -> None:
    """Entries for earlier versions of the same run's files (or of the same answer)."""
    for stale in entry.parent.iterdir():
        if stale != entry and not stale.name.startswith(".tmp-"):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


# ---------------------------------------------------------------- answers

def answer_entry(run_path: str | os.PathLike, question: Sequence[str], code: Sequence[Path]) -> Path | None:
    """Where the answer to `question` (command and options) about the run at `run_path` is kept, for the
    run's files and perfkit's `code` as they are now; None when there is no usable cache or no such folder."""
    root = Path(run_path).expanduser()
    try:
        root = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not root.is_dir():
        return None
    cache = usable_root(root)
    if cache is None:
        return None
    asked = "\0".join(question)
    digest = hashlib.sha256(f"{ANSWER_FORMAT}\0{__version__}\0{code_digest(tuple(code))}\0{root}\0{asked}\0"
                            .encode())
    _add_files(digest, root, ANSWER_DEPTH, ANSWER_SKIP_DIRS)
    place = hashlib.sha256(f"{root}\0{asked}".encode()).hexdigest()[:24]
    return cache / "answers" / place / f"{digest.hexdigest()[:32]}.json"


def fetch_answer(entry: Path) -> tuple[str, int] | None:
    """(output, exit code) kept at `entry`, or None."""
    try:
        answer = json.loads(entry.read_text())
        os.utime(entry)  # last use, for trim()
        return str(answer["output"]), int(answer["exit_code"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def store_answer(entry: Path, output: str, exit_code: int) -> None:
    """Keep an answer (atomically; a cache that cannot be written only costs speed)."""
    staging = entry.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex}"
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps({"output": output, "exit_code": exit_code}))
        os.replace(staging, entry)
    except OSError:
        staging.unlink(missing_ok=True)
        return
    _remove_siblings(entry)


# ---------------------------------------------------------------- size

def trim(root: Path, keep: set[Path]) -> None:
    """Remove the least recently used entries of every kind (ENTRY_KINDS) until the cache fits in
    max_bytes(); never those in `keep`. An entry's last use is the newest mtime of its files: whoever reads
    an entry touches one of them (fetch, fetch_answer, the timeline's index.json)."""
    entries = []
    for kind in ENTRY_KINDS:
        for place in _subfolders(root / kind):
            try:
                found = list(os.scandir(place))
            except OSError:
                continue
            for entry in found:
                if entry.name.startswith(".tmp-"):
                    continue  # being written by another process
                files = (list(_files_under(Path(entry.path), FINGERPRINT_DEPTH))
                         if entry.is_dir(follow_symlinks=False) else [(entry.path, *_size_and_mtime(entry))])
                if files:
                    entries.append((max(mtime for _, _, mtime in files), sum(max(size, 0) for _, size, _ in files),
                                    Path(entry.path)))
    total = sum(size for _, size, _ in entries)
    for _, size, entry in sorted(entries):
        if total <= max_bytes():
            break
        if entry not in keep:
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            total -= size


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [Path(entry.path) for entry in os.scandir(folder) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []

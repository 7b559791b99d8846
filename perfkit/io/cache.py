"""perfkit's cache: loaded runs as Parquet entries, and finished answers as text.

**Run entries.** An entry holds one `Run`: every table as a Parquet file, its meta and warnings as JSON.
It is keyed by the run's path, the code that builds a Run (the loader passes its files), and for every
folder read, the reader's name and the (name, size, mtime_ns) of every file under it that the one walk sees
(discovery.walk: not in raw CANN data or logs, which no reader reads): touching or rewriting any such file makes
the next load a cold read. One entry per run, not per folder: a warm load of
256 ranks reads three Parquet files instead of a thousand. This module knows Parquet, not formats:
perfkit/io/loader.py decides what is read and how.

**Answers.** `perfkit summary`, `advise` and `ranks` keep their finished output, keyed by the command,
its options, perfkit's code and the run's files: when nothing changed, the answer is printed
without importing pandas or pyarrow (0.7 s of a 1.1 s warm summary was importing pandas). This module
imports them only where a Run entry is read or written, for that reason. `ranks` (and the timeline's index
location) key theirs by every file under the run; `summary` and `advise` by what they read (AnswerReads: the folders
the walks listed, with their mtimes, and each file the load read, with its size and mtime, a large run's
op-level files only for its representative ranks), kept beside the answer and checked by a stat of each.

Everything lives under the user's cache dir ($PERFKIT_CACHE_DIR, else $XDG_CACHE_HOME/perfkit, else
~/.cache/perfkit), never inside the run being read. Entries are written to a temporary name and renamed
into place, so a reader never sees half an entry; one that cannot be read back is deleted and the run is
read cold. A cache that cannot be written (read-only home, full disk) only costs speed. PERFKIT_NO_CACHE=1
turns it off. The cache is kept under $PERFKIT_CACHE_MAX_MB (default 2 GB) by dropping the least recently
used entries: runs, answers and timeline indexes alike.

**Optional.** Whatever is wrong with the cache dir (PERFKIT_CACHE_DIR naming a file or a symlink loop, a
read-only file system holding stale entries, a full disk, PERFKIT_CACHE_MAX_MB=inf), every public function
here is `_optional`: the fault is said once per process, on stderr, the cache is off for the rest of it
(under the same settings), and the caller computes its answer from the files as if there were no cache.
"""

from __future__ import annotations

import contextvars
import errno
import functools
import hashlib
import json
import math
import os
import shutil
import sys
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..core import boundedjson
from ..core.errors import FileFormatError
from ..core.files import open_regular
from ..core.units import BYTES_PER_MB
from ..core.version import __version__
from .discovery import common_folder, folder_mtime, folders_seen, is_folder, walk

# Bump when the layout of an entry on disk changes; old entries are then simply never found.
ENTRY_FORMAT = 3
# How deep under a reader's folder files count towards its key (the one walk's: discovery.walk, which leaves out
# the folders no reader reads): readers reach at most ASCEND_PROFILER_OUTPUT/ or FRAMEWORK/ below their folder.
FINGERPRINT_DEPTH = 4
META_FILE = "entry.json"
# Arrow's thread pool pays off only on big tables; for small ones starting it costs more than decoding.
THREADED_READ_BYTES = 4 * BYTES_PER_MB
# Tables read from an entry only when a command first uses them (model.Run defers them): op rows are
# most of a big run's entry (a million rows: 0.4 s of a 1.1 s warm `perfkit summary` that never uses them).
DEFERRED_TABLES = ("ops",)
# After a load that stored an entry, the cache is trimmed to $PERFKIT_CACHE_MAX_MB (else this), least
# recently used entries first and never the load's own; the benchmark runs take 1-150 MB each.
DEFAULT_MAX_BYTES = 2048 * BYTES_PER_MB
# Answers are keyed by every file under the run that the one walk sees (discovery.walk leaves out the folders no
# reader reads: raw CANN data, logs); a run's own folders are at most this deep (a cluster parent / rank folder /
# *_ascend_ms / FRAMEWORK).
ANSWER_DEPTH = 8
ANSWER_FORMAT = 1
# What the cache holds, one folder each under its root, as <kind>/<place>/<entry>: run entries (this
# module), kept answers (this module), timeline indexes (perfkit/io/timeline.py) and the rank folders Dask workers
# read (perfkit/io/dask_ingest.py, when the cache is their storage). trim() counts them all.
ENTRY_KINDS = ("runs", "answers", "timeline", "ranks")

Job = tuple[str, Path]  # (reader name, folder)


# Why the cache is off for the rest of this process, for the settings (_settings) under which a fault was
# found in it (said once): other settings (another PERFKIT_CACHE_DIR) are tried afresh.
_faults: dict[tuple, str] = {}
# What a cache fault is: the file system's errors, Path.resolve's symlink loop (RuntimeError), an entry's
# JSON or Arrow data that is not what this module wrote (ValueError; pyarrow's errors derive from it).
FAULTS = (OSError, RuntimeError, ValueError)


def _optional(default: Any = None):
    """Decorator of the public functions: a fault in the cache dir turns the cache off (said once), and the
    function answers `default`, what it answers when there is no cache."""
    def decorate(function):
        @functools.wraps(function)
        def optional(*args, **kwargs):
            if _settings() in _faults:
                return default
            try:
                return function(*args, **kwargs)
            except FAULTS as exc:
                turn_off(exc)
                return default
        return optional
    return decorate


def turn_off(cause: BaseException) -> None:
    """Stop using the cache (as now set) in this process, and say why on stderr (the first time)."""
    if _settings() in _faults:
        return
    where = getattr(cause, "filename", None)
    why = _faults[_settings()] = f"{where}: {cause.strerror}" if where and getattr(cause, "strerror", None) \
        else str(cause)
    sys.stderr.write(f"perfkit: warning: the cache is not used ({why}); answers are computed from the files "
                     "without it\n")


def _settings() -> tuple:
    return tuple(os.environ.get(name) for name in ("PERFKIT_CACHE_DIR", "XDG_CACHE_HOME", "HOME",
                                                   "PERFKIT_CACHE_MAX_MB"))


def enabled() -> bool:
    return os.environ.get("PERFKIT_NO_CACHE", "").strip() not in ("1", "true", "yes")


def cache_root() -> Path:
    """Where entries live: $PERFKIT_CACHE_DIR, else $XDG_CACHE_HOME/perfkit, else ~/.cache/perfkit."""
    if os.environ.get("PERFKIT_CACHE_DIR"):
        return Path(os.environ["PERFKIT_CACHE_DIR"]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return (Path(base).expanduser() / "perfkit").resolve()


def max_bytes() -> int:
    """$PERFKIT_CACHE_MAX_MB in bytes (DEFAULT_MAX_BYTES where unset); ValueError where it is not a finite
    number of MB from 0 on (`inf`, `nan`, `-1`, `lots`): a cache fault, as a cache dir that is a file."""
    setting = os.environ.get("PERFKIT_CACHE_MAX_MB")
    if setting is None or not setting.strip():
        return DEFAULT_MAX_BYTES
    try:
        megabytes = float(setting)
    except ValueError:
        megabytes = math.nan
    if not (math.isfinite(megabytes) and megabytes >= 0):
        raise ValueError(f"PERFKIT_CACHE_MAX_MB={setting!r} is not a size in MB")
    return int(megabytes * BYTES_PER_MB)


@_optional()
def usable_root(run_root: Path) -> Path | None:
    """The cache root, or None when caching is off or the root lies inside the run being read. A root that
    cannot hold the cache (a file, a link loop, a bad size limit) is a fault: said once, then None."""
    if not enabled():
        return None
    root = cache_root()
    if root == run_root or run_root in root.parents:
        return None
    if os.path.lexists(root) and not root.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(root))
    max_bytes()  # a bad limit is said now, before anything is stored
    return root


# ---------------------------------------------------------------- keys

def _files_under(folder: Path, max_depth: int) -> Iterable[tuple[str, int, int]]:
    """(path, size, mtime_ns) of every file under `folder` down to `max_depth` folders, as the one walk
    (discovery.walk) finds them: a linked file counts by its target, a broken link as (-1, -1): its state is part
    of what a key says."""
    for _, entries in walk(folder, max_depth):
        for entry in entries:
            if not is_folder(entry):
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


@_optional()
def run_entry(run_root: Path, jobs: Sequence[Job], code: Sequence[Path], selection: str = "",
              listed: dict[str, list[tuple[str, int, int]]] | None = None) -> Path | None:
    """The entry's path for the run at `run_root` (its folders `jobs`, built by the Python files `code`; of
    them, `selection`: the profiler cycle chosen, "" for all) as it is on disk now; None when there is no
    usable cache. Each selection has its own place, so reading cycle 1 does not evict cycle 2. `listed`: the
    folders' folder_files where discovery listed them already (discovery.files_listed)."""
    root = usable_root(run_root)
    if root is None:
        return None
    digest = hashlib.sha256(f"{ENTRY_FORMAT}\0{__version__}\0{code_digest(tuple(code))}\0{run_root}\0"
                            f"{selection}\0".encode())
    files: dict[str, bytes] = {}  # a folder's part of the key, walked once for all the readers that read it
    for reader_name, folder in jobs:
        digest.update(f"{reader_name}\0".encode())
        if str(folder) not in files:
            files[str(folder)] = _folder_key(folder, (listed or {}).get(str(folder)))
        digest.update(files[str(folder)])
    placed = f"{run_root}\0{selection}" if selection else str(run_root)  # all cycles: the place it always had
    place = hashlib.sha256(placed.encode()).hexdigest()[:24]
    return root / "runs" / place / digest.hexdigest()[:32]


def add_folder(digest, folder: str | os.PathLike) -> None:
    """Add a reader's folder to a key: its path and the (name, size, mtime_ns) of every file under it."""
    digest.update(_folder_key(folder))


def _folder_key(folder: str | os.PathLike, files: list[tuple[str, int, int]] | None = None) -> bytes:
    """What add_folder adds to a key for `folder` (its folder_files, where they were listed already)."""
    return f"{folder}\0".encode() + _files_key(Path(folder), FINGERPRINT_DEPTH, files)


def folder_files(folder: str | os.PathLike) -> list[tuple[str, int, int]]:
    """(path under `folder`, size, mtime_ns) of every file under it as a Run entry's key takes them: discovery asks
    it of each folder a reader claims, where it lists the folder (in its workers for a large run)."""
    return _files_under_relative(Path(folder), FINGERPRINT_DEPTH)


def _files_under_relative(folder: Path, max_depth: int) -> list[tuple[str, int, int]]:
    """_files_under with each path under `folder`: cut, not os.path.relpath, which cost most of a 4,096-rank run's
    key."""
    start = len(os.path.join(str(folder), ""))
    return [(path[start:], size, mtime_ns) for path, size, mtime_ns in _files_under(folder, max_depth)]


def _files_key(folder: Path, max_depth: int, files: list[tuple[str, int, int]] | None = None) -> bytes:
    """(path under `folder`, size, mtime_ns) of every file under it (_files_under_relative, unless given), as a
    key's bytes (within answer_reads(), kept for the answer's key too)."""
    if files is None:
        files = _files_under_relative(folder, max_depth)
    reads = _READS.get()
    if reads is not None:
        reads.files.setdefault(str(folder), files)
    return "".join(f"{path}\0{size}\0{mtime_ns}\0" for path, size, mtime_ns in files).encode()


# ---------------------------------------------------------------- one entry

def jsonable(value: Any) -> Any:
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
        stored[name] = stored[name].map(lambda v: None if v is None else json.dumps(v, default=jsonable))
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
        values = table.column(name).to_pylist()
        frame[name] = pd.Series([None if v is None else boundedjson.loads(v) for v in values], index=frame.index,
                                dtype=object)
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


@_optional(False)
def store(entry: Path, run) -> bool:
    """Write `run` as the entry at `entry`, atomically, then trim the cache; False when it cannot be cached."""
    import pyarrow as pa

    described = {"format": ENTRY_FORMAT, "run": run.path, "meta": run.meta.to_dict(), "warnings": run.warnings}
    try:
        # read back as fetch reads it: tuples would come back as lists, an integer past int64 (a 30-digit rank) as
        # None, a non-finite float as None; the cold read wins
        if boundedjson.loads(json.dumps(described, default=jsonable)) != described:
            return False
    except (TypeError, ValueError):
        return False
    staging = staging_name(entry)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging.mkdir()
        described["tables"] = {name: _write_table(frame, staging / f"{name}.parquet")
                               for name, frame in run.tables().items() if len(frame)}
        (staging / META_FILE).write_text(json.dumps(described, default=jsonable))
        os.rename(staging, entry)  # atomic; fails if another process stored the same entry first
    except (TypeError, ValueError, pa.ArrowException):  # a table pyarrow cannot store: the cold read wins
        shutil.rmtree(staging, ignore_errors=True)
        return False
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if entry.is_dir():
            return True  # another process stored the same entry first
        raise  # a cache that cannot be written: said once (_optional)
    remove_siblings(entry)
    trim(entry.parents[2], keep={entry})
    return True


# Within stores_in_background(): the entries being written meanwhile, as futures; else None.
_BACKGROUND: contextvars.ContextVar[list | None] = contextvars.ContextVar("perfkit_background_stores", default=None)


@contextmanager
def stores_in_background():
    """Within this block, store_soon writes a Run's entry on a thread of its own, all finished when the block ends
    (an error one of them met raised there). A command computes its answer on one core meanwhile: the entry's
    Parquet files, written with the GIL released, take the other (4,096 ranks: ~1 s of a cold summary)."""
    writing: list = []
    token = _BACKGROUND.set(writing)
    try:
        yield
    finally:
        _BACKGROUND.reset(token)
        failures = [future.exception() for _, future in writing]  # each waited for
        for thread, _ in writing:
            thread.shutdown(wait=True)  # its thread ended too: a command's process has nothing left running
    failure = next((failure for failure in failures if failure is not None), None)
    if failure is not None:
        raise failure


def store_soon(entry: Path, run) -> None:
    """store(entry, run): on a thread within stores_in_background(), else now. The Run must not change meanwhile
    (the loader's caller only reads it)."""
    writing = _BACKGROUND.get()
    if writing is None:
        store(entry, run)
        return
    from concurrent.futures import ThreadPoolExecutor

    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="perfkit-cache-store")
    writing.append((thread, thread.submit(store, entry, run)))


@_optional()
def fetch(entry: Path, reload: Callable[[str], Any]):
    """The Run cached at `entry`, DEFERRED_TABLES read on first use (through `reload(name)` if the entry
    is gone by then); None when there is none or it is broken (then it is removed)."""
    from ..core.model import SCHEMA, Meta, Run

    if not entry.is_dir():
        return None
    try:
        described = read_json(entry / META_FILE)
        if described["format"] != ENTRY_FORMAT:
            raise ValueError("entry format")
        tables = {name: (Deferred(entry, spec, name, reload) if name in DEFERRED_TABLES
                         else _read_table(entry, spec))
                  for name, spec in described["tables"].items() if name in SCHEMA}
        run = Run(path=described["run"], meta=Meta(**described["meta"]), warnings=described["warnings"], **tables)
    except Exception:  # noqa: BLE001 - whatever is wrong with a cache entry, the files are the truth
        shutil.rmtree(entry, ignore_errors=True)
        return None
    touch(entry / META_FILE)
    return run


def read_json(path: Path) -> Any:
    """One of the cache's JSON files: a regular file only (files.open_regular), through the bounded decoder."""
    with open_regular(path) as handle:
        return boundedjson.loads(handle.read().decode("utf-8"))


def touch(path: Path) -> None:
    """Mark an entry's last use, for trim(); a read-only cache is still read."""
    try:
        os.utime(path)
    except OSError:
        pass


def staging_name(entry: Path) -> Path:
    """A temporary name beside `entry` to write it under before it is renamed into place; it names the
    writing process, so that one left by a killed writer can be told from one being written (_being_written)."""
    return entry.parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex}"


def _being_written(path: Path) -> bool:
    """Whether `path` is a staging name of a process still running (a killed `perfkit trace` leaves its
    half-written index behind: that one is stale, removed with the other stale entries)."""
    if not path.name.startswith(".tmp-"):
        return False
    try:
        os.kill(int(path.name.split("-")[1]), 0)
    except ProcessLookupError:
        return False
    except (ValueError, IndexError, OSError):
        return True  # not our name, or a process of another user: leave it
    return True


@_optional()
def remove_siblings(entry: Path) -> None:
    """Entries for earlier versions of the same run's files (or of the same answer or index), and what
    writers killed meanwhile left there."""
    for stale in entry.parent.iterdir():
        if stale != entry and not _being_written(stale):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


# ---------------------------------------------------------------- answers

@_optional()
def answer_entry(run_path: str | os.PathLike, question: Sequence[str], code: Sequence[Path]) -> Path | None:
    """Where the answer to `question` (command and options) about the run at `run_path` is kept, for the
    run's files and perfkit's `code` as they are now; None when there is no usable cache or no such folder."""
    place = _answer_place(run_path, question, code)
    if place is None:
        return None
    folder, root, digest = place
    digest.update(_files_key(root, ANSWER_DEPTH))
    return folder / f"{digest.hexdigest()[:32]}.json"


def _answer_place(run_path: str | os.PathLike, question: Sequence[str], code: Sequence[Path]) -> tuple | None:
    """(the folder an answer about the run at `run_path` is kept in, the run's resolved root, the sha256 of the
    question and the code), or None when there is no usable cache or no such folder."""
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
    return cache / "answers" / hashlib.sha256(f"{root}\0{asked}".encode()).hexdigest()[:24], root, digest


@_optional()
def fetch_answer(entry: Path) -> tuple[str, int] | None:
    """(output, exit code) kept at `entry`, or None."""
    try:
        answer = read_json(entry)
        kept = str(answer["output"]), int(answer["exit_code"])
    except (OSError, ValueError, KeyError, TypeError, FileFormatError):
        return None
    touch(entry)
    return kept


@_optional()
def store_answer(entry: Path, output: str, exit_code: int) -> None:
    """Keep an answer (atomically; a cache that cannot be written only costs speed)."""
    staging = staging_name(entry)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps({"output": output, "exit_code": exit_code}))
        os.replace(staging, entry)
    except OSError:
        try:
            staging.unlink(missing_ok=True)
        except OSError:  # a read-only file system says so even for a name that is not there
            pass
        raise  # said once (_optional)
    remove_siblings(entry)


# ---------------------------------------------------------------- answers keyed by what they read

class AnswerReads:
    """What a command's answer read, collected while it is computed (answer_reads()): the folders the walks
    listed, with their mtime_ns before each listing (discovery.folders_seen); each keyed folder's files as its
    Run entry's key saw them, before they were read; and (note_reads) the folders the loader read, with the glob
    patterns of the files it read there (None: every file under it)."""

    def __init__(self) -> None:
        self.folders: dict[str, int] = {}
        self.files: dict[str, list[tuple[str, int, int]]] = {}
        self.read: list[tuple[str, tuple[str, ...] | None]] = []

    def manifest(self) -> dict:
        """{"folders": {path: mtime_ns}, "files": {path: [size, mtime_ns]}} of what was read."""
        files: dict[str, list[int]] = {}
        matched: dict[tuple, dict[str, bool]] = {}  # the names under a cluster's folders repeat from rank to rank
        for folder, patterns in self.read:
            listing = self.files.get(folder)
            if listing is None:  # not keyed in this process (no Run entry asked for): as the walk finds it now
                listing = _files_under_relative(Path(folder), FINGERPRINT_DEPTH)
            start = os.path.join(folder, "")
            if patterns is None:
                files.update((start + name, [size, mtime_ns]) for name, size, mtime_ns in listing)
                continue
            chosen, known = _patterns(patterns), matched.setdefault(patterns, {})
            for name, size, mtime_ns in listing:
                taken = known.get(name)
                if taken is None:
                    taken = known[name] = chosen.fullmatch(name) is not None
                if taken:
                    files[start + name] = [size, mtime_ns]
        return {"folders": self.folders, "files": files}


_READS: contextvars.ContextVar[AnswerReads | None] = contextvars.ContextVar("perfkit_answer_reads", default=None)


@functools.lru_cache(maxsize=64)
def _patterns(patterns: tuple[str, ...]):
    """One regex for glob patterns of paths under a folder (`*` within a name, as glob has it)."""
    import fnmatch
    import re
    return re.compile("|".join(f"(?:{fnmatch.translate(pattern).replace('.*', '[^/]*')})" for pattern in patterns))


@contextmanager
def answer_reads() -> Iterator[AnswerReads]:
    """Collect what the answer computed within this block reads (AnswerReads), for store_read_answer."""
    reads = AnswerReads()
    token = _READS.set(reads)
    try:
        with folders_seen(reads.folders):
            yield reads
    finally:
        _READS.reset(token)


def note_reads(read: Iterable[tuple[str | os.PathLike, tuple[str, ...] | None]]) -> None:
    """The loader's word, within answer_reads(), on the folders it read and which of their files (glob patterns
    under the folder; None: all of them)."""
    reads = _READS.get()
    if reads is not None:
        reads.read += [(os.fspath(folder), patterns) for folder, patterns in read]


@_optional()
def read_answer_entry(run_path: str | os.PathLike, question: Sequence[str], code: Sequence[Path]) -> Path | None:
    """Where the answer to `question` about the run at `run_path` is kept, keyed by what it read (its manifest,
    checked by fetch_read_answer) rather than by every file under the run; None as answer_entry."""
    place = _answer_place(run_path, question, code)
    if place is None:
        return None
    folder, _, digest = place
    return folder / f"{digest.hexdigest()[:32]}.read"


@_optional()
def fetch_read_answer(entry: Path) -> tuple[str, int] | None:
    """(output, exit code) kept at `entry` where every folder and file it read is as it was then, else None: a
    stat of each, no walk (4,096 ranks: 8,193 folders and 16,432 files instead of 49,152 files listed)."""
    try:
        with open_regular(entry) as handle:
            header, _, output = handle.read().decode("utf-8").partition("\n")
        kept = boundedjson.loads(header)
        base, folders, files, exit_code = kept["base"], kept["folders"], kept["files"], int(kept["exit_code"])
        if not (isinstance(base, str) and isinstance(folders, dict) and isinstance(files, dict) and files):
            return None
        for folder, mtime_ns in folders.items():
            if folder_mtime(os.path.join(base, folder)) != mtime_ns:
                return None
        for path, state in files.items():
            try:
                stat = os.stat(os.path.join(base, path))
                now = [stat.st_size, stat.st_mtime_ns]
            except OSError:
                now = [-1, -1]
            if now != state:
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError, FileFormatError,
            boundedjson.JSONError):
        return None
    touch(entry)
    return output, exit_code


@_optional()
def store_read_answer(entry: Path, output: str, exit_code: int, reads: AnswerReads) -> None:
    """Keep an answer: a line of JSON with what it read (its paths under the folder they all lie in) and its exit
    code, then the output as it is. Nothing where the loader said nothing of what it read (the answer came from
    elsewhere: it is not kept)."""
    if not reads.read:
        return
    manifest = reads.manifest()
    base = common_folder([*manifest["folders"], *manifest["files"]])
    start = len(os.path.join(base, ""))
    header = {"exit_code": exit_code, "base": base,
              **{kind: {path[start:]: state for path, state in manifest[kind].items()} for kind in manifest}}
    staging = staging_name(entry)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging.write_text(json.dumps(header, separators=(",", ":")) + "\n" + output)
        os.replace(staging, entry)
    except OSError:
        try:
            staging.unlink(missing_ok=True)
        except OSError:
            pass
        raise  # said once (_optional)
    remove_siblings(entry)


# ---------------------------------------------------------------- size

@_optional()
def trim(root: Path, keep: set[Path]) -> None:
    """Remove the least recently used entries of every kind (ENTRY_KINDS) until the cache fits in
    max_bytes(); never those in `keep`. An entry's last use is the newest mtime of its files: whoever reads
    an entry touches one of them (fetch, fetch_answer, the timeline's index.json)."""
    entries = []
    for entry in _entries(root):
        if _being_written(Path(entry.path)):
            continue
        files = (list(_files_under(Path(entry.path), FINGERPRINT_DEPTH)) if is_folder(entry)
                 else [(entry.path, *_size_and_mtime(entry))])
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


def _entries(root: Path) -> Iterator[os.DirEntry]:
    """Every entry in the cache at `root`: <kind>/<place>/<entry>, as the one walk (discovery.walk) lists them."""
    for kind in ENTRY_KINDS:
        for folder, listing in walk(root / kind, 1):
            if folder != root / kind:
                yield from listing

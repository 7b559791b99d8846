"""Discovery: the one folder walker, the folder listings readers' `detect` asks, and which reader claims which
folder under a run's path.

Layouts are detected, never configured: the user may point at a legacy flat folder, the `profiler/` folder or its
parent, a `*_ascend_ms` folder, its `ASCEND_PROFILER_OUTPUT/`, a `perfkit profile` output, or a parent holding one
folder per rank. Every folder under the path (but FRAMEWORK/, the raw files of the folder above it) is offered to
every reader; the folders a reader claims are its jobs. Below a root with many folders (a cluster's rank folders:
PARALLEL_DISCOVERY_FROM) they are offered in forked workers, a share each, and the claims merged in the order one walk
gives.

`walk` is the only walk over a folder tree in perfkit/io: discovery, the cache's keys (perfkit/io/cache.py), the
messages about what a folder holds and the raw-data hints all go through it, so all leave out the same folders
(SKIPPED). Nothing here imports a reader: the caller passes them (formats.readers()), and the readers import
`has_match` from here.
"""

from __future__ import annotations

import contextvars
import errno
import fnmatch
import functools
import os
import re
from collections import deque
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, NamedTuple, Sequence

from ..core import plugins
from ..core.errors import LayoutError

if TYPE_CHECKING:
    from .formats.base import Reader

# Folders no reader reads and no run lies in: raw CANN data (PROF_*: its analysed output is the folder the readers
# read), the profiler's logs, Python's bytecode. No walk enters them: a run is never found in one, and a change
# inside one makes no cached run or answer stale (base.Reader: a reader reads nothing there).
SKIPPED = ("PROF_", "logs", "__pycache__")
# How deep under the given path discovery looks for the folders readers claim (a cluster parent / rank folder /
# *_ascend_ms / ASCEND_PROFILER_OUTPUT, FRAMEWORK, and room for a parent or two above them).
MAX_DEPTH = 5
# Folders that are a part of the profiler folder above them: a path naming one means that folder.
PARTS_OF_A_RUN_FOLDER = ("ASCEND_PROFILER_OUTPUT", "FRAMEWORK")
# The framework's raw files, which the readers read from the profiler folder above (CPU ops, host memory): walked
# (its files key the cache) and listed for the readers' detect, but never offered to them as a folder of its own,
# which on every rank of a 4,096-rank run costs a tenth of a second. ASCEND_PROFILER_OUTPUT is offered: the dataset
# reader may find its files there.
FRAMEWORK = "FRAMEWORK"

Job = tuple["Reader", Path]
Warning = tuple[str, str]  # (where under the run's root, "." for the root itself; what)


def walk(root: Path, depth: int) -> Iterator[tuple[Path, list[os.DirEntry]]]:
    """(folder, its entries sorted by name) for `root` and every folder under it down to `depth` levels, breadth
    first; never entering a SKIPPED folder, nor following a link into a folder (a link loop cannot trap it). A
    folder that cannot be listed has no entries."""
    queue = deque([(Path(root), 0)])
    seen = _FOLDERS_SEEN.get()
    while queue:
        folder, level = queue.popleft()
        if seen is not None and os.fspath(folder) not in seen:  # before its first listing: a change moves it on
            seen[os.fspath(folder)] = folder_mtime(folder)
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError:
            entries = []
        yield folder, entries
        below = [entry for entry in entries if is_folder(entry) and not entry.name.startswith(SKIPPED)]
        if level < depth:
            queue.extend((Path(entry.path), level + 1) for entry in below)
        elif seen is not None:  # not listed here, but a reader's detect may look into them
            for entry in below:
                seen.setdefault(entry.path, folder_mtime(entry.path))


# Within folders_seen(): each folder a walk listed, with its mtime_ns when it was listed.
_FOLDERS_SEEN: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("perfkit_folders_seen",
                                                                                      default=None)


# Within files_listed(): (where to put them, what to ask) of the files under each folder a reader claims.
_FILES_LISTED: contextvars.ContextVar[tuple[dict, Callable[[str], list]] | None] = contextvars.ContextVar(
    "perfkit_files_listed", default=None)


@contextmanager
def files_listed(into: dict[str, list], lister: Callable[[str], list]):
    """Within this block discovery puts in `into`, for each folder a reader claims, `lister(folder)` (the files a
    cache key takes under it, cache.folder_files), made where it lists the folder: in its workers for a large root,
    so that a cluster's 49,152 files are stat'ed on every core before the read, not after discovery on one.
    `lister` must be a module-level function (sent to the workers)."""
    token = _FILES_LISTED.set((into, lister))
    try:
        yield into
    finally:
        _FILES_LISTED.reset(token)


@contextmanager
def folders_seen(into: dict[str, int]):
    """Within this block every walk records in `into` each folder it lists, with its mtime_ns taken before its
    first listing (-1 where it has none): a name added, removed or renamed in it since moves that on
    (perfkit/io/cache.py: what an answer read)."""
    token = _FOLDERS_SEEN.set(into)
    try:
        yield into
    finally:
        _FOLDERS_SEEN.reset(token)


def folder_mtime(folder: str | os.PathLike) -> int:
    """A folder's mtime_ns, -1 where it cannot be read."""
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return -1


def common_folder(paths: Sequence[str]) -> str:
    """os.path.commonpath of absolute, normalised paths (as discovery makes them), by their common characters (one
    min and max) cut back to where every path's name ends: commonpath splits every path into its names, 0.04 s for
    the 24,000 paths a 4,096-rank answer reads."""
    first, last = min(paths), max(paths)
    if first == last:  # one path (a cluster rank's readers all claim its folder)
        return first.rstrip(os.sep) or os.sep
    prefix = os.path.commonprefix([first, last])
    end = len(prefix)
    if not all(len(path) == end or path[end] == os.sep for path in paths):
        prefix = prefix[:prefix.rfind(os.sep) + 1]
    return prefix.rstrip(os.sep) or os.sep


def is_folder(entry: os.DirEntry) -> bool:
    """Whether `entry` is a folder itself (a link to one is not)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


# ---------------------------------------------------------------- the listings detect asks

GLOB_CHARACTERS = re.compile(r"[*?\[]")
_LISTINGS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("perfkit_listings", default=None)


def has_match(folder: str | os.PathLike, patterns: Iterable[str]) -> bool:
    """Whether an entry of `folder` matches one of the glob `patterns`: one directory listing for all
    patterns, and within `listings_kept()` one for all readers, the walk's own (discovery runs every reader's
    detect on every folder of a 4,096-rank tree: ~17 questions a folder)."""
    kept = _LISTINGS.get()
    place = os.fspath(folder)  # a str key: hashing a Path rebuilds its parts, tens of thousands of times here
    names = kept.get(place) if kept is not None else None
    if names is None and kept is not None:  # a name the walk did not find in its folder: nothing to list there
        parent, _, name = place.rpartition(os.sep)
        if name not in kept.get(parent, (name,)):
            names = kept[place] = frozenset()
    if names is None:
        try:
            with os.scandir(place) as listing:
                names = frozenset(entry.name for entry in listing)
        except OSError:
            names = frozenset()
        if kept is not None:
            kept[place] = names
    literal, globbed = _split_patterns(tuple(patterns))
    if not names.isdisjoint(literal):
        return True
    return globbed is not None and any(globbed.match(name) for name in names)


@functools.lru_cache(maxsize=256)
def _split_patterns(patterns: tuple[str, ...]) -> tuple[frozenset[str], re.Pattern | None]:
    """(the patterns that are plain file names, one regex for the rest): most detect patterns name one file,
    a set lookup; fnmatch.filter once per pattern and folder was a third of discovering a 4,096-rank run.
    Case-sensitive, as fnmatch is on POSIX."""
    literal = frozenset(pattern for pattern in patterns if not GLOB_CHARACTERS.search(pattern))
    globbed = [pattern for pattern in patterns if pattern not in literal]
    return literal, (re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in globbed))
                     if globbed else None)


@contextmanager
def listings_kept():
    """has_match lists each folder once inside this block (one discovery: the tree does not change under it)."""
    token = _LISTINGS.set({})
    try:
        yield
    finally:
        _LISTINGS.reset(token)


def _keep_listing(folder: Path, entries: list[os.DirEntry]) -> None:
    """What the walk listed of `folder`, for has_match within listings_kept()."""
    _LISTINGS.get()[os.fspath(folder)] = frozenset(entry.name for entry in entries)


# ---------------------------------------------------------------- discover

def discover(path: str | os.PathLike, readers: Sequence[Reader]) -> tuple[Path, list[Job], list[Warning]]:
    """The run's root, every (reader, folder) under it whose files that reader reads (of `readers`, in their
    order: formats.readers()), and a warning for each plugin reader whose detect raised (it then claims nothing)."""
    root = Path(path).expanduser()
    if not root.exists():
        raise LayoutError("is reached through a symbolic link that loops or whose target is gone"
                          if root.is_symlink() or _through_a_link_loop(root) else "does not exist", root)
    if not root.is_dir():
        raise LayoutError("is not a folder (pass the profiler output folder)", root)
    root = root.resolve()
    if root.name in PARTS_OF_A_RUN_FOLDER:
        root = root.parent
    below = _folders_below(root)
    if len(below) >= PARALLEL_DISCOVERY_FROM:
        found = _found_in_workers(root, below, readers)
    else:
        found = _found(root, [root], MAX_DEPTH, readers)
    paths: dict[str, Path] = {}  # one Path a folder, whichever readers claim it
    jobs: list[Job] = [(readers[index], paths.get(folder) or paths.setdefault(folder, Path(folder)))
                       for index, folder in found.jobs]
    problems = list(found.problems)
    deeper = Path(found.deeper) if found.deeper is not None else None
    if not jobs and deeper is not None:
        raise LayoutError(f"no profiler files within {MAX_DEPTH} folder levels of it, and it goes deeper (e.g. "
                          f"{os.path.relpath(deeper, root)}): pass the folder that holds the run", root)
    jobs, left_out = _without_summaries_of_ranks(jobs)
    problems += [(os.path.relpath(folder, root), f"not read: {reader.summary_of_ranks}; the ranks' own folders are")
                 for reader, folder in left_out]
    return root, jobs, problems


# A root with this many folders right below it (a cluster's rank folders) has them discovered in forked workers, a
# share each: one core took ~0.5 s for 4,096 rank folders (8,193 folders listed, every reader's detect on each).
PARALLEL_DISCOVERY_FROM = 1024
# How many shares those folders are cut into (round robin: neighbours differ little in size).
SHARES = 8


class _Found(NamedTuple):
    """What discovery found under some folders, in the one walk's order: (position in the readers given, folder) of
    each claim, the plugin detects that raised, the first folder below the deepest level looked at."""

    jobs: list[tuple[int, str]]
    problems: list[Warning]
    deeper: str | None


def _found(root: Path, tops: list[Path], depth: int, readers: Sequence[Reader]) -> _Found:
    """The claims of `readers` on each folder of `tops` and the folders under them down to `depth` levels: each
    folder's in the readers' order, the folders in walk's order under each top, the tops one after the other."""
    jobs: list[tuple[int, str]] = []
    problems: list[Warning] = []
    deeper: str | None = None
    deepest = len(root.parts) + MAX_DEPTH  # the walk's folders are Paths under root as it is: no relative_to each
    files = _FILES_LISTED.get()
    with listings_kept():
        for top in tops:
            for folder, entries in walk(top, depth):
                _keep_listing(folder, entries)
                if deeper is None and len(folder.parts) == deepest:
                    deeper = next((entry.path for entry in entries if is_folder(entry)
                                   and not entry.name.startswith(SKIPPED)), None)
                if folder.name == FRAMEWORK:
                    continue
                claimed = len(jobs)
                for index, reader in enumerate(readers):
                    try:
                        if reader.detect(folder):
                            jobs.append((index, str(folder)))
                    except Exception as exc:  # noqa: BLE001 - only a plugin's: perfkit's own detect raising is a bug
                        if reader.plugin is None:
                            raise
                        problems.append((os.path.relpath(folder, root),
                                         plugins.failure(reader.plugin, "detect", exc)))
                if files is not None and len(jobs) > claimed and str(folder) not in files[0]:
                    files[0][str(folder)] = files[1](str(folder))
    return _Found(jobs, problems, deeper)


def _folders_below(root: Path) -> list[str]:
    """The folders right below `root` that the walk enters, by name."""
    try:
        with os.scandir(root) as listing:
            return [entry.path for entry in sorted(listing, key=lambda entry: entry.name)
                    if is_folder(entry) and not entry.name.startswith(SKIPPED)]
    except OSError:
        return []


# The readers a discovery in workers asks (_found_in_workers): forked workers find them here, so that a plugin's
# reader need not pickle.
_WORKERS_READERS: Sequence[Reader] = ()


def _found_in_workers(root: Path, below: list[str], readers: Sequence[Reader]) -> _Found:
    """_found of `root` (its own folder here, the folders `below` it in forked workers, a share each), in the order
    one walk of the whole tree gives: breadth first, each level by name. Within folders_seen() (a kept answer's
    reads) the folders the workers listed are recorded here too."""
    global _WORKERS_READERS
    from .parallel import map_folders  # multiprocessing's import, here: a kept answer's walk needs no worker

    seen, files = _FOLDERS_SEEN.get(), _FILES_LISTED.get()
    here = _found(root, [root], 0, readers)
    shares = [(below[start::SHARES], str(root), seen is not None, files[1] if files is not None else None)
              for start in range(SHARES)]
    _WORKERS_READERS = readers
    try:
        results = map_folders(_found_below, shares)
    finally:
        _WORKERS_READERS = ()
    for _, listed, files_of in results:
        for folder, mtime in listed.items():
            seen.setdefault(folder, mtime)
        for folder, under in files_of.items():
            files[0].setdefault(folder, under)
    pieces = [here, *(found for found, _, _ in results)]
    def walk_order(folder: str) -> tuple[int, list[str]]:  # the names from the root's down, compared as sorted
        names = folder.split(os.sep)
        return len(names), names

    return _Found(sorted((job for found in pieces for job in found.jobs), key=lambda job: (walk_order(job[1]), job[0])),
                  sorted((problem for found in pieces for problem in found.problems),
                         key=lambda problem: walk_order(os.path.normpath(os.path.join(root, problem[0])))),
                  min((found.deeper for found in pieces if found.deeper is not None), key=walk_order, default=None))


def _found_below(folders: list[str], root: str, record_seen: bool, lister: Callable[[str], list] | None
                 ) -> tuple[_Found, dict[str, int], dict[str, list]]:
    """In a worker: _found of `folders` below `root` by _WORKERS_READERS; where `record_seen`, the folders its walks
    listed, with their mtimes; with a `lister`, what files_listed puts for each folder claimed (module-level: run in
    workers)."""
    listed: dict[str, int] = {}
    files: dict[str, list] = {}
    with folders_seen(listed) if record_seen else nullcontext(), \
            files_listed(files, lister) if lister is not None else nullcontext():
        found = _found(Path(root), [Path(folder) for folder in folders], MAX_DEPTH - 1, _WORKERS_READERS)
    return found, listed, files


def _through_a_link_loop(path: Path) -> bool:
    """Whether resolving `path` goes round a loop of symbolic links (in it or in a folder above it)."""
    try:
        path.resolve(strict=True)
    except RuntimeError:  # Python < 3.13 reports a loop so
        return True
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _without_summaries_of_ranks(jobs: list[Job]) -> tuple[list[Job], list[Job]]:
    """(the jobs to read, the summaries left out): a folder another tool made from the rank folders beside it
    (Reader.summary_of_ranks) is left out where another reader's unit folder lies outside it: the ranks' own
    files say all it says and more, and read together each rank would have two runs."""
    summaries = [(reader, folder) for reader, folder in jobs if reader.summary_of_ranks]
    left_out = [(reader, folder) for reader, folder in summaries
                if any(other.unit and not other.summary_of_ranks and folder not in (place, *place.parents)
                       for other, place in jobs)]
    return [job for job in jobs if job not in left_out], left_out

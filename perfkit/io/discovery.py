"""Discovery: the one folder walker, the folder listings readers' `detect` asks, and which reader claims which
folder under a run's path.

Layouts are detected, never configured: the user may point at a legacy flat folder, the `profiler/` folder or its
parent, a `*_ascend_ms` folder, its `ASCEND_PROFILER_OUTPUT/`, a `perfkit profile` output, or a parent holding one
folder per rank. Every folder under the path (but FRAMEWORK/, the raw files of the folder above it) is offered to
every reader; the folders a reader claims are its jobs.

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
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence

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
    jobs: list[Job] = []
    problems: list[Warning] = []
    deeper: Path | None = None  # a folder below the deepest level looked at, for the message when nothing is found
    deepest = len(root.parts) + MAX_DEPTH  # the walk's folders are Paths under root as it is: no relative_to each
    with listings_kept():
        for folder, entries in walk(root, MAX_DEPTH):
            _keep_listing(folder, entries)
            if deeper is None and len(folder.parts) == deepest:
                deeper = next((Path(entry.path) for entry in entries if is_folder(entry)
                               and not entry.name.startswith(SKIPPED)), None)
            if folder.name == FRAMEWORK:
                continue
            for reader in readers:
                try:
                    if reader.detect(folder):
                        jobs.append((reader, folder))
                except Exception as exc:  # noqa: BLE001 - only a plugin's: perfkit's own detect raising is a bug
                    if reader.plugin is None:
                        raise
                    problems.append((os.path.relpath(folder, root), plugins.failure(reader.plugin, "detect", exc)))
    if not jobs and deeper is not None:
        raise LayoutError(f"no profiler files within {MAX_DEPTH} folder levels of it, and it goes deeper (e.g. "
                          f"{os.path.relpath(deeper, root)}): pass the folder that holds the run", root)
    jobs, left_out = _without_summaries_of_ranks(jobs)
    problems += [(os.path.relpath(folder, root), f"not read: {reader.summary_of_ranks}; the ranks' own folders are")
                 for reader, folder in left_out]
    return root, jobs, problems


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

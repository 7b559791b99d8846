"""The reader protocol: what a layout's `Reader` declares and what every reader returns (`Parts`), the
derivations that make a schema table from other tables, and a rank's trace as a reader finds it (`TraceFile`).

Each layout module under perfkit/io/formats/ declares one `Reader` (`READER = Reader(...)` at its end) and
perfkit/io/formats/__init__.py lists them in priority order. The loader (perfkit/io/loader.py, with discovery.py,
cycles.py and assembly.py) and the timeline (perfkit/io/timeline.py) only talk to readers through this protocol.
The helpers readers share are beside it: tables.py (pandas or Arrow), files.py (reading files), screening.py (the
check of every number), stages.py (pipeline stages); perfkit/io/discovery.py has the folder listing `detect` asks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import pandas as pd

    from .tables import Table


@dataclass
class Parts:
    """A reader's contribution to one rank of a Run (or, keyed RUN_WIDE, to every rank).

    `tables` maps schema table names (see model.SCHEMA) to tables without the rank column: pandas DataFrames,
    or pyarrow Tables, which the loader keeps as Arrow until it has every rank's piece of a table and then
    makes one DataFrame of them all (a reader that runs once per rank of a cluster gives Arrow: thousands of
    small DataFrames, each built, screened and concatenated on its own, cost more than the bytes they hold).
    It may also hold the INTERMEDIATE_TABLES that a derivation (formats.DERIVATIONS) turns into a schema table.
    A RUN_WIDE Parts' table with a `rank` column is split by it; one without goes to every rank of the run.
    `meta` holds Meta field values the files tell; `sources` the files read (for messages).
    """

    tables: dict[str, "Table"] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


RUN_WIDE = -1  # Parts key for facts that hold for every rank (a top-level perfkit_run.json)

# The op-level tables: what a multi-rank answer reads only for the ranks a view shows (docs/many-ranks.md: every
# rank of a small run, the representative ranks of a large one, any other on demand). Every other table (steps,
# communication, data queues) and the meta are cluster-level: read for every rank, as `msprof-analyze cluster`
# reads the step, communication and profiler_info/metadata files of every rank.
OP_LEVEL_TABLES = frozenset({"ops", "op_types", "op_type_steps", "op_passes", "cells", "memory", "op_memory"})

# Tables a reader may give besides the schema's (model.SCHEMA), which a derivation turns into a schema table,
# with their columns:
INTERMEDIATE_TABLES: dict[str, tuple[str, ...]] = {
    "op_events": ("name", "start_ns", "dur_ms"),    # one row per op execution; start_ns: int64 epoch ns
    "step_times": ("step", "begin_ns", "end_ns"),   # step wall-clock bounds recorded by `perfkit profile`
}


@dataclass
class Reader:
    """One on-disk layout: which folders are its own, and how to read them.

    `detect(folder)` must be cheap (file names only): discovery runs every reader's detect on every folder
    of a 256-rank tree. `read(folder)` returns {rank: Parts} for the ranks found there (RUN_WIDE for facts
    that hold for every rank). `read_steps(folder)`, where a layout can give its steps from one small
    file, answers cross-rank questions (`perfkit ranks`) without reading every kernel table; layouts
    without it are loaded whole for those questions.

    Where two sources give a rank the same table, the loader takes, in this order: the table of the
    reader first in priority (formats.readers(): perfkit's registry order, then installed plugins) among
    those that do not merely fill it; the table a derivation makes (steps from op events or recorded step
    times); the table of a reader that `fills` it. A table that replaces what another reader gave or what a
    derivation would make from another reader's tables is said in a warning: never silently.

    A reader reads its folder and what lies under it, except the folders no walk enters (discovery.SKIPPED: raw
    CANN data, logs): a cached Run is keyed by every other file under the folders read (perfkit/io/cache.py).
    `traces(folder)` lists the rank traces its folder holds (TraceFile: one per rank at most) for the timeline
    (perfkit/io/timeline.py: `perfkit trace`, the dashboard's Timeline page); a layout without one has no timeline.
    """

    name: str                                   # the layout's name, Meta.layout of the runs it reads
    provides: frozenset[str]                    # the tables its Parts may hold (schema or INTERMEDIATE_TABLES)
    detect: Callable[[Path], bool]
    read: Callable[[Path], "dict[int, Parts]"]
    read_steps: Callable[[Path], "dict[int, Parts]"] | None = None
    # A unit reader's folder is a rank's main data: two of its folders for one rank are two runs, not one.
    # The others (dataset profiling, perfkit's manifest) add to a rank whichever folder they sit in.
    unit: bool = True
    # Called once per rank with all of that rank's tables, from every reader, to finish this reader's
    # tables in place where they need another reader's (memory samples put on the clock of the steps
    # perfkit profile recorded).
    finish: Callable[[dict], None] | None = None
    # Tables of `provides` this reader gives only where nothing else does (see the class doc): step totals
    # from a training log must not replace the steps, with their split, that a profiler's op events give.
    fills: frozenset[str] = frozenset()
    # What the loader says when nothing under a path is read: the files this reader looks for ...
    looks_for: str = ""
    # ... and, asked of every reader, a sentence about what the folder holds instead and how to make it
    # readable (raw CANN data: the command that analyses it), or None.
    raw_data_hint: Callable[[Path], str | None] | None = None
    # Whether its op tables hold every op the device ran, so that step time no op covers is device idle (the
    # ledger's gaps). Legacy Ascend's aicore_intermediate files hold AI Core ops only: AI CPU time would read as idle.
    ops_cover_device: bool = False
    # What its folder is where another tool made it from the rank folders beside it (msprof-analyze's cluster
    # summary), else "": beside another reader's unit folders it is left out, said once (discovery.discover),
    # rather than compete with the ranks' own files as a second run of each rank.
    summary_of_ranks: str = ""
    # Its cluster-level tables (those of `provides` outside OP_LEVEL_TABLES) and meta, read without its op-level
    # files (ascend_ms: step_trace_time.csv and the profiler_info/metadata JSON, not kernel_details.csv). A reader
    # whose tables are all op-level is not read for a rank no view shows; one whose tables are all cluster-level
    # is read whole; any other without it is read whole and its op-level tables left out for such a rank.
    read_cluster: Callable[[Path], "dict[int, Parts]"] | None = None
    # read_cluster of many folders at once (a worker's task of a large run: thousands of small files, where per
    # folder the tables' set-up costs more than the bytes), each folder's result in order, the same as
    # read_cluster gives it; or None: read_cluster (else read) folder by folder.
    read_cluster_many: Callable[[list[Path]], "list[dict[int, Parts]]"] | None = None
    # Glob patterns, relative to its folder, of every file its cluster-level read opens (read_cluster's, or read's
    # for a reader whose tables are all cluster-level), or None: any file under the folder. A kept answer about a
    # large run is keyed by these files of each rank read so (perfkit/io/cache.py: what an answer read); a file
    # left out of them must not change what that read gives (tests/test_cache_reads.py checks the files opened).
    cluster_files: tuple[str, ...] | None = None
    # Its ranks' traces in one of its folders (see the class doc), or None.
    traces: Callable[[Path], "list[TraceFile]"] | None = None
    # The installed package it comes from ("entry point name = module:attribute"), None for perfkit's own.
    plugin: str | None = None

    def __repr__(self) -> str:  # shown in test ids and messages; the functions' reprs say nothing
        return f"Reader({self.name})"

    @property
    def label(self) -> str:
        """The reader as messages name it."""
        return f"the {self.name} reader" + (f" (plugin {self.plugin})" if self.plugin else "")

    @property
    def gives_run_tables(self) -> bool:
        """Whether it gives a table of the Run (model.SCHEMA), not only tables a derivation turns into one."""
        from ...core.model import SCHEMA
        return bool(self.provides & SCHEMA.keys())


@dataclass(frozen=True)
class Derivation:
    """A schema table the loader makes for a rank that no reader gave it, from the rank's other tables.

    `derive(rank, tables)` gets the rank's tables when any of `needs` is among them and returns
    (the table or None, Meta field values, warnings). Among the values, `no_op_data: True` says the table holds
    totals the profiler's op data could not split: the loader marks such a run `incomplete`.
    """

    table: str
    needs: tuple[str, ...]
    derive: Callable[[int, "dict[str, pd.DataFrame]"], "tuple[pd.DataFrame | None, dict[str, Any], list[str]]"]


@dataclass(frozen=True)
class TraceFile:
    """One rank's trace as its reader finds it (Reader.traces), for the timeline index (perfkit/io/timeline.py).

    `path` holds the events: a Chrome trace JSON (read block by block, trace_json.map_blocks), the op times
    MindSpore writes as text (`.txt`, trace_text), or a file of another kind that `events` reads: called as
    `events(path, each, stats, progress, workers)`, it yields `each(number, block)` for each block of Chrome trace
    events (schema trace_json.OUTPUT), as trace_json.map_blocks does.

    Where the trace marks no step (no ProfilerStep#N event), `step_bounds(step_file)` gives them: {step: [start_us,
    end_us]} on the trace's clock, {} when the file cannot tell. A changed `step_file` makes a new index.
    """

    rank: int
    path: Path
    folder: Path  # the reader's folder it was found in
    step_file: Path | None = None
    step_bounds: Callable[[Path], "dict[int, list[float]]"] | None = None
    events: Callable[..., Iterator] | None = None

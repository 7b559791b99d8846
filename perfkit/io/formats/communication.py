"""Communication ops and links: `comm_ops` and `comm_links` (docs/formats.md §3).

`ASCEND_PROFILER_OUTPUT/communication.json`: `{"step50": {"p2p": {op: info}, "collective": {...}}}`,
each op with its `Communication Time Info` (ms) and `Communication Bandwidth Info` per link type
(MB, ms, GB/s). `communication_matrix.json`: per step and kind, `{op: {"src-dst": link}}`. MindStudio
writes the matrix either per op (with a `Total Op Info` sum) or, newer, per op type (`allreduce-top1`,
`-middle`, `-bottom1..3`: single ops; `allreduce-total`: every op of the type): per-op entries are read
when there are no per-type totals, else only the totals, so no byte is counted twice.

The op name's part after `@` is the communication group. `SDMA` in communication.json is the sum of
the on-chip types (HCCS, PCIE, SIO), so an op's size leaves it out. A link type perfkit does not know
is skipped with a warning, never guessed.
"""

from __future__ import annotations

import math
import os
import re
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import msgspec
import numpy as np
import pyarrow as pa

from ...core import boundedjson
from ...core.errors import FileFormatError
from ...core.files import read_regular
from ...core.units import US_PER_MS
from ..discovery import has_match
from .ascend_ms import OUTPUT_DIR, PROFILER_INFO, read_profiler_info
from .base import Parts, Reader
from .files import is_real_number, json_object
from .integers import RANK, whole

if TYPE_CHECKING:
    import pandas as pd

COMMUNICATION = "communication.json"
MATRIX = "communication_matrix.json"
KINDS = ("collective", "p2p")
LINK_TYPES = ("HCCS", "PCIE", "RDMA", "SIO", "LOCAL")
# Bandwidth-info keys of communication.json that are sums of others (SDMA = HCCS + PCIE + SIO).
SUM_LINK_TYPES = ("SDMA",)
TOTAL_OP = "Total Op Info"
PER_TYPE_TOTAL = re.compile(r"^[^@]*-total(@|$)")
STEP_NUMBER = re.compile(r"(\d+)$")
TIME_FIELDS = {"elapse_ms": "Elapse Time(ms)", "transit_ms": "Transit Time(ms)", "wait_ms": "Wait Time(ms)",
               "synchronization_ms": "Synchronization Time(ms)"}
START_FIELD = "Start Timestamp(us)"  # epoch microseconds
OP_COLUMNS = ["step", "name", "kind", "group", *TIME_FIELDS, "size_mb", "start_ms"]


def detect(folder: Path) -> bool:
    return has_match(os.path.join(folder, OUTPUT_DIR), (COMMUNICATION, MATRIX))


def read(folder: Path) -> dict[int, Parts]:
    return read_many([folder])[0]


def read_many(folders: list[Path]) -> list[dict[int, Parts]]:
    """read of each of `folders` (a worker's task of a large run): the comm_ops of the plain files among them
    (_plain_ops) made one table, each folder's a slice of it (_tables_of)."""
    read = []
    for folder in folders:
        parts = Parts()
        rank = read_profiler_info(folder, parts)
        parts.meta = {}  # the layout reader gives the run's meta; this one only its communication
        output = os.path.join(folder, OUTPUT_DIR)  # text: a Path a file costs 5 µs a rank
        ops_file = os.path.join(output, COMMUNICATION)
        read.append((rank, parts, output, ops_file, _plain_ops(ops_file)))
    plain = _tables_of([columns for *_, columns in read])
    for (_, parts, output, ops_file, _), table in zip(read, plain):
        if table is not None:
            parts.tables["comm_ops"] = table
            parts.sources.append(ops_file)
        elif (ops := json_object(parts, ops_file)) is not None:
            parts.tables["comm_ops"] = comm_ops_table(ops, parts.warnings)
        matrix = json_object(parts, os.path.join(output, MATRIX))
        if matrix is not None:
            parts.tables["comm_links"] = comm_links_table(matrix, parts.warnings)
    return [{rank: parts} for rank, parts, *_ in read]


class _Skipped:
    """Counts what a file's entries lacked, to be said in one warning per kind of problem."""

    def __init__(self, file_name: str):
        self.file_name, self.counts = file_name, {}

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def said(self, warnings: list[str]) -> None:
        warnings += [f"{self.file_name}: {what} ({count})" for what, count in self.counts.items()]


def _number(value, skipped: _Skipped, what: str) -> float:
    """A measured non-negative number, else NaN (counted in `skipped`): a size or time cannot be negative."""
    if value is None:
        return math.nan
    if not is_real_number(value) or value < 0:
        skipped.add(f"{what} not a non-negative number, treated as unknown")
        return math.nan
    return float(value)


def _steps(data: dict, skipped: _Skipped):
    """(step number or None, {kind: entries}) for each step of a communication file."""
    for step_key, kinds in data.items():
        match = STEP_NUMBER.search(str(step_key))
        if not isinstance(kinds, dict):
            skipped.add(f"step {step_key!r} is not an object, skipped")
            continue
        for kind, entries in kinds.items():
            if kind not in KINDS or not isinstance(entries, dict):
                skipped.add(f"{kind!r} entries of step {step_key!r} are not collective/p2p ops, skipped")
                continue
            yield (int(match.group(1)) if match else None), kind, entries


def _name_and_group(key: str) -> tuple[str, str | None]:
    name, at, group = str(key).partition("@")
    return name, (group if at else None)


def comm_ops_table(data: dict, warnings: list[str], file_name: str = COMMUNICATION) -> pa.Table | pd.DataFrame:
    skipped = _Skipped(file_name)
    rows = []
    for step, kind, entries in _steps(data, skipped):
        for key, info in entries.items():
            if key == TOTAL_OP:
                continue  # the sum of the step's ops
            if not isinstance(info, dict) or not isinstance(info.get("Communication Time Info"), dict):
                skipped.add("op(s) without Communication Time Info, skipped")
                continue
            times = info["Communication Time Info"]
            name, group = _name_and_group(key)
            rows.append((step, name, kind, group,
                         *(_number(times.get(field), skipped, field) for field in TIME_FIELDS.values()),
                         _op_size(info.get("Communication Bandwidth Info"), skipped),
                         _number(times.get(START_FIELD), skipped, START_FIELD) / US_PER_MS))
    skipped.said(warnings)
    return _frame(rows, OP_COLUMNS)


# A cluster reads a communication.json per rank (~100 KB, 80 ops), and decoding every value into dicts (and collecting
# them), walking them for the bounds (boundedjson) and reading them row by row made the reader cost ~1.45 ms of CPU per
# rank. A plain file (nothing that comm_ops_table would skip or say, nothing boundedjson would change) is instead
# checked for the bounds on its bytes (boundedjson.needs_no_bounds, ~0.17 ms), decoded by msgspec into the fields
# comm_ops_table reads alone (the links' packet statistics, SDMA's sums and the ratios skipped unbuilt, ~0.13 ms), and
# read a column at a time (~0.2 ms): ~0.75 ms for the reader. msgspec refuses any other shape, as _plain_columns does
# anything else comm_ops_table would say something about: such a file is read by json_object and comm_ops_table, which
# word it.
_Number = Union[int, float, None]  # int kept as int: numpy makes it a double as _number's float() does
_Link = msgspec.defstruct("_Link", [("size_mb", _Number, None)], rename={"size_mb": "Transit Size(MB)"}, gc=False)
# A link type perfkit does not know is refused (_op_size warns of it); a sum type is taken as any JSON, unbuilt.
_Bandwidth = msgspec.defstruct("_Bandwidth", [(link_type, Optional[_Link], None) for link_type in LINK_TYPES]
                               + [(link_type, msgspec.Raw, msgspec.Raw(b"")) for link_type in SUM_LINK_TYPES],
                               forbid_unknown_fields=True, gc=False)
_TIME_COLUMNS = (*TIME_FIELDS, "start_us")
_Times = msgspec.defstruct("_Times", [(column, _Number, None) for column in _TIME_COLUMNS],
                           rename={**TIME_FIELDS, "start_us": START_FIELD}, gc=False)
_Op = msgspec.defstruct("_Op", [("times", _Times), ("bandwidth", Optional[_Bandwidth], None)],
                        rename={"times": "Communication Time Info", "bandwidth": "Communication Bandwidth Info"},
                        gc=False)
_LINKS_OF, _TIMES_OF = attrgetter(*LINK_TYPES), attrgetter(*_TIME_COLUMNS)
_PLAIN_FILE = msgspec.json.Decoder(dict[str, dict[str, dict[str, _Op]]])


def _plain_ops(path: str) -> dict[str, list | np.ndarray] | None:
    """comm_ops_table's columns of a plain communication.json (above); None for any other file, or one not there."""
    try:
        raw = read_regular(path)
    except (OSError, FileFormatError):  # json_object meets it again and says it
        return None
    if not (raw.isascii() and boundedjson.needs_no_bounds(raw)):  # not ASCII: read_text checks the UTF-8
        return None
    try:
        return _plain_columns(_PLAIN_FILE.decode(raw))
    except (msgspec.DecodeError, ValueError):
        return None


def _plain_columns(steps: dict[str, dict[str, dict[str, "_Op"]]]) -> dict[str, list | np.ndarray] | None:
    """The ops as comm_ops_table reads them where it would skip or say nothing, a column at a time; else None."""
    step_column, kind_column, keys, ops = [], [], [], []
    for step_key, kinds in steps.items():
        match = STEP_NUMBER.search(step_key)
        step = int(match.group(1)) if match else None
        for kind, entries in kinds.items():
            if kind not in KINDS:
                return None
            entries.pop(TOTAL_OP, None)  # the sum of the step's ops
            keys += entries
            ops += entries.values()
            step_column += [step] * len(entries)
            kind_column += [kind] * len(entries)
    bandwidths = list(map(attrgetter("bandwidth"), ops))
    if not ops or None in bandwidths:  # no bandwidth: _op_size's NaN, left to it
        return None
    # [column][op], an absent number NaN (numpy reads a flat list faster than nested ones)
    numbers = np.array(list(chain.from_iterable(map(_TIMES_OF, map(attrgetter("times"), ops)))),
                       dtype=np.float64).reshape(len(ops), -1).T.copy()
    # [op][link type], an absent link 0 (_op_size adds nothing for it), an absent size NaN
    sizes = np.array([0.0 if link is None else link.size_mb for links in map(_LINKS_OF, bandwidths) for link in links],
                     dtype=np.float64).reshape(len(ops), -1)
    if (numbers < 0).any() or (sizes < 0).any():  # _number says these (none is past a double: msgspec refuses it)
        return None
    # _op_size adds the sizes in the file's order of link types from 0.0, numpy in its own: the same sum where an
    # op moved bytes over at most two link types (IEEE addition commutes, adding a zero changes nothing; + 0.0
    # makes a sum of -0.0 sizes 0.0 as _op_size's, whatever numpy starts from); a third term could round otherwise
    if np.count_nonzero(sizes, axis=1).max() > 2:
        return None
    size = sizes.sum(axis=1) + 0.0
    names, ats, groups = zip(*(key.partition("@") for key in keys))
    columns = [step_column, list(names), kind_column, [group if at else None for at, group in zip(ats, groups)],
               *numbers[:len(TIME_FIELDS)], size, numbers[len(TIME_FIELDS)] / US_PER_MS]
    return dict(zip(OP_COLUMNS, columns))


def _tables_of(plain: list[dict[str, list | np.ndarray] | None]) -> list[pa.Table | None]:
    """The comm_ops table of each file's _plain_columns (None: not a plain file): the files whose text columns are
    alike in which hold no value at all (Arrow types such a column null, not string) made one table, each file's
    rows a slice of it (a table's set-up per file cost as much as decoding the file); a file alone where its group's
    table cannot be made, and None for one whose values Arrow cannot hold (comm_ops_table reads it)."""
    groups: dict[tuple, list[int]] = {}
    for index, columns in enumerate(plain):
        if columns is not None:
            empty = tuple(all(value is None for value in values) for values in columns.values()
                          if isinstance(values, list))
            groups.setdefault(empty, []).append(index)
    tables: list[pa.Table | None] = [None] * len(plain)
    for members in groups.values():
        together = _arrow_table({name: [value for index in members for value in plain[index][name]]
                                 if isinstance(plain[members[0]][name], list)
                                 else np.concatenate([plain[index][name] for index in members])
                                 for name in OP_COLUMNS}) if len(members) > 1 else None
        offset = 0
        for index in members:
            rows = len(plain[index]["step"])
            tables[index] = together.slice(offset, rows) if together is not None else _arrow_table(plain[index])
            offset += rows
    return tables


def _arrow_table(columns: dict[str, list | np.ndarray]) -> pa.Table | None:
    try:
        return pa.table({name: pa.array(values) for name, values in columns.items()})
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):  # _frame makes such a table a DataFrame
        return None


def _frame(rows: list[tuple], columns: list[str]) -> pa.Table | pd.DataFrame:
    """Rows as an Arrow table built from columns (made pandas once for all ranks by the loader); a DataFrame
    where a column holds what Arrow cannot (a rank number past 64 bits), screened value by value as such."""
    import pandas as pd
    values = list(zip(*rows)) if rows else [()] * len(columns)
    try:
        return pa.table({column: pa.array(list(cells)) for column, cells in zip(columns, values)})
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
        return pd.DataFrame({column: list(cells) for column, cells in zip(columns, values)})


def _op_size(bandwidth: object, skipped: _Skipped) -> float:
    """MB the op moved over every link type (the sums in SUM_LINK_TYPES left out)."""
    if not isinstance(bandwidth, dict):
        return math.nan
    total = 0.0
    for link_type, link in bandwidth.items():
        if link_type in SUM_LINK_TYPES:
            continue
        if link_type not in LINK_TYPES:
            skipped.add(f"link type {link_type!r} unknown to perfkit, its size left out")
            continue
        if isinstance(link, dict):
            total += _number(link.get("Transit Size(MB)"), skipped, "Transit Size(MB)")
    return total


def comm_links_table(data: dict, warnings: list[str], file_name: str = MATRIX) -> pa.Table | pd.DataFrame:
    skipped = _Skipped(file_name)
    rows = []
    for step, kind, entries in _steps(data, skipped):
        per_type = [key for key in entries if PER_TYPE_TOTAL.match(str(key))]
        for key in per_type or [key for key in entries if key != TOTAL_OP]:
            links = entries[key]
            if not isinstance(links, dict):
                skipped.add("op(s) whose links are not an object, skipped")
                continue
            name, group = _name_and_group(key)
            for pair, link in links.items():
                row = _link(pair, link, skipped)
                if row is not None:
                    rows.append((step, name, group, *row))
    skipped.said(warnings)
    return _frame(rows, ["step", "name", "group", "src", "dst", "link_type", "size_mb", "transit_ms",
                         "bandwidth_gb_s"])


def _link(pair: str, link: object, skipped: _Skipped) -> tuple | None:
    """(src, dst, link_type, size_mb, transit_ms, bandwidth_gb_s) of one "src-dst" entry; None when skipped."""
    src, dash, dst = str(pair).partition("-")
    src, dst = whole(src, RANK), whole(dst, RANK)
    if not (dash and src is not None and dst is not None) or not isinstance(link, dict):
        skipped.add("link(s) not written as \"src-dst\" of two ranks: {...}, skipped")
        return None
    link_type = link.get("Transport Type")
    if link_type not in LINK_TYPES:
        skipped.add(f"link(s) of type {link_type!r}, unknown to perfkit, skipped")
        return None
    size_mb = _number(link.get("Transit Size(MB)"), skipped, "Transit Size(MB)")
    transit_ms = _number(link.get("Transit Time(ms)"), skipped, "Transit Time(ms)")
    bandwidth = _number(link.get("Bandwidth(GB/s)"), skipped, "Bandwidth(GB/s)")
    if math.isnan(bandwidth) and transit_ms > 0:
        bandwidth = size_mb / transit_ms  # MB per ms is GB per s
    return src, dst, link_type, size_mb, transit_ms, bandwidth


# Not a unit: communication files add to the rank whose profiler folder they sit in.
READER = Reader(name="communication", provides=frozenset({"comm_ops", "comm_links"}), detect=detect, read=read,
                unit=False, read_cluster=read, read_cluster_many=read_many,
                cluster_files=(PROFILER_INFO, f"{OUTPUT_DIR}/{COMMUNICATION}", f"{OUTPUT_DIR}/{MATRIX}"))

"""The reader registry: one `Reader` per on-disk layout, in priority order, and the derivations.

Each layout module here declares its reader (`READER`, see base.Reader): the files it recognises (`detect`),
the tables it gives (`provides`, and which of them it only `fills`), how to read a folder into per-rank
`Parts` (`read`, and `read_steps` where the steps alone are cheap), what it looks for and what it can say
about a folder nothing reads (`looks_for`, `raw_data_hint`), whether its op tables hold every device op
(`ops_cover_device`, for the ledger) and its ranks' trace files (`traces`, for the timeline). perfkit/io/loader.py
and perfkit/io/timeline.py run them through that protocol alone; the other modules here are what readers share
(base, tables, files, screening, stages, steps' derivations, db_files, db_timeline).

Adding a layout: one module with its READER, one line below, and its test file. An installed package adds
one through the entry point group `perfkit.readers` (perfkit/core/plugins.py); `readers()` lists both.
"""

from __future__ import annotations

import dataclasses
import functools

from ...core import plugins
from . import (ascend_ms, cluster_output, communication, cpu, db, gpu, kineto, legacy, manifest, memory, minddata,
               steps)
from .base import RUN_WIDE, Derivation, Parts, Reader

# Order is priority: when two readers give the same table for a rank, the earlier one wins (base.Reader).
READERS: tuple[Reader, ...] = (
    manifest.READER,
    ascend_ms.READER,
    db.READER,
    cpu.READER,
    gpu.READER,
    legacy.READER,
    kineto.READER,
    cluster_output.READER,
    minddata.READER,
    memory.READER,
    communication.READER,
)
# Schema tables made for a rank that no reader gave them, in order.
DERIVATIONS: tuple[Derivation, ...] = (steps.DERIVATION, steps.OP_TYPE_STEPS, steps.COMM_OPS)


@functools.lru_cache(maxsize=None)
def _installed() -> tuple[tuple[Reader, ...], tuple[str, ...]]:
    loaded = plugins.load(plugins.READERS, Reader, "reader", key=lambda reader: reader.name,
                          taken=(reader.name for reader in READERS))
    return (tuple(dataclasses.replace(reader, plugin=plugin) for reader, plugin in loaded.items),
            tuple(map(str, loaded.problems)))


def readers() -> tuple[Reader, ...]:
    """perfkit's readers, then those of installed plugins (after them in priority)."""
    return READERS + _installed()[0]


def plugin_problems() -> tuple[str, ...]:
    """One warning per reader plugin that could not be used."""
    return _installed()[1]


def by_name(name: str) -> Reader:
    return next(reader for reader in readers() if reader.name == name)


def ops_cover_device(layout: str | None) -> bool:
    """Whether the reader of `layout` (a Run's meta.layout) gives op tables that hold every op the device ran;
    False for a layout no installed reader has (a cached run of a plugin since removed)."""
    return any(reader.ops_cover_device for reader in readers() if reader.name == layout)


__all__ = ["DERIVATIONS", "READERS", "RUN_WIDE", "Parts", "Reader", "by_name", "ops_cover_device", "plugin_problems",
           "readers"]

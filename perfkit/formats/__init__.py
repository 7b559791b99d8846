"""The reader registry: one `Reader` per on-disk layout, in priority order.

Each module here declares its reader (`READER`, see base.Reader): the files it recognises (`detect`),
the tables it gives (`provides`) and how to read a folder into per-rank `Parts` (`read`, and
`read_steps` where the steps alone are cheap). perfkit/loader.py runs them; nothing else here.

Adding a layout: one module with its READER, one line below, and its test file.
"""

from __future__ import annotations

from . import ascend_ms, communication, cpu, db, gpu, legacy, manifest, memory, minddata
from .base import RUN_WIDE, Parts, Reader

# Order is priority: when two readers give the same table for a rank, the earlier one wins.
READERS: tuple[Reader, ...] = (
    manifest.READER,
    ascend_ms.READER,
    db.READER,
    cpu.READER,
    gpu.READER,
    legacy.READER,
    minddata.READER,
    memory.READER,
    communication.READER,
)
BY_NAME: dict[str, Reader] = {reader.name: reader for reader in READERS}

__all__ = ["BY_NAME", "READERS", "RUN_WIDE", "Parts", "Reader"]

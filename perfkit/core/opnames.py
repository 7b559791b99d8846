"""Op-name rules every layer shares: which op names are communication, and of which kind; an op's type and its
pass (forward, backward) from its full scope name; HCCL's op types without their id separator."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# Communication op kinds by name (MindSpore primitives, HCCL/NCCL kernels, `hcom_*` tasks). Point-to-point ops
# are pipeline stages passing activations (docs/formats.md §3, communication.json's "p2p"): fusion cannot help them.
P2P_OP = re.compile(r"^(?:hcom_?)?(?:send|receive|recv|batch_?send_?recv)", re.IGNORECASE)


COLLECTIVE_OP = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast(?!_?to)|all_?to_?all", re.IGNORECASE)


def comm_kind(op_type: str) -> str | None:
    """"p2p", "collective" or None (not a communication op) for an op type or kernel name."""
    if P2P_OP.search(op_type):
        return "p2p"
    if COLLECTIVE_OP.search(op_type):
        return "collective"
    return None


def trim_type_separator(types):
    """Op types (a pyarrow string array) without a trailing `_`. HCCL writes a collective's type as its kernel
    name less the ids (`hcom_allReduce__586_0_1` -> `hcom_allReduce_`, in kernel_details.csv and the database's
    COMMUNICATION_OP alike): the `_` is the separator before the ids, not part of the type."""
    import pyarrow.compute as pc
    return pc.utf8_rtrim(types, characters="_")


def op_passes(full_names: Sequence[str] | pd.Series | pd.Index) -> np.ndarray:
    """forward / backward / other for each op full scope name.

    MindSpore puts backward kernels under `Gradients/` and forward ones under `Default/`;
    optimizer updates live under `Default/optimizer-*` and are neither. Arrow's string kernels:
    a legacy or GPU detail table holds a million distinct names, a cluster run hundreds of small
    tables, where pandas' str accessor costs more per call than the names.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pc.fill_null(pa.array(full_names, type=pa.string(), from_pandas=True), "")
    backward = pc.starts_with(names, "Gradients/").to_numpy(zero_copy_only=False)
    forward = pc.and_(pc.starts_with(names, "Default/"),
                      pc.invert(pc.match_substring(names, "/optimizer"))).to_numpy(zero_copy_only=False)
    return np.select([backward, forward], ["backward", "forward"], "other").astype(object)


def op_types_of(full_names: Iterable[str]) -> list[str]:
    """`Default/net/conv1-Conv2d/Conv2D-op13` -> `Conv2D`, for each name.

    str.rpartition instead of a regex: 0.5 s instead of 3 s over a million names.
    """
    types = []
    for name in full_names:
        base = name.rpartition("/")[2]
        head, separator, number = base.rpartition("-op")
        types.append(head if separator and number.isdecimal() else base)
    return types

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


# `broadcast` but not shape broadcasting: MindSpore's BroadcastTo, torch's aten::broadcast_to / broadcast_tensors
COLLECTIVE_OP = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast(?!_?to|_?tensors)|all_?to_?all",
                           re.IGNORECASE)


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


# MindSpore's optimizer update primitives (mindspore.ops: the nn optimizers' kernels). Under a custom loop (a
# train step function under ms.jit, PyNative) the optimizer is no Cell scope of the graph: its kernels are named
# `Default/SGD-op3`, and only their type says they update the weights.
OPTIMIZER_TYPES = re.compile(
    r"^(?:SGD|Momentum|Adam|AdamWeightDecay|AdamNoUpdateParam|Fused\w*Adam\w*|FusedSparse\w+|Lamb\w*|LARSUpdate|"
    r"LarsUpdate|SparseApply\w+|Apply(?:Momentum|KerasMomentum|Adam|AdamWithAmsgrad\w*|AdaMax|Adadelta|Adagrad|"
    r"AdagradV2|AdagradDA|AddSign|PowerSign|CenteredRMSProp|RMSProp|Ftrl|GradientDescent|ProximalAdagrad|"
    r"ProximalGradientDescent))$")
# MindSpore's graph-kernel expander names the kernels of an expanded composite op `Expand/_<Primitive>/...`, outside
# the network's scopes; an expanded gradient (`Expand/_SoftmaxBackward/Mul-op0`) is backward work.
EXPANDED_BACKWARD = r"^Expand/_\w+Backward/"
# An op name's type, as op_types_of reads it: the last scope segment less its `-opN` id.
_TYPE_OF_NAME = r"^(?:.*/)?(.*?)(?:-op\d+)?$"


def op_passes(full_names: Sequence[str] | pd.Series | pd.Index) -> np.ndarray:
    """forward / backward / optimizer / other for each op full scope name (core/model.PASSES).

    MindSpore puts backward kernels under `Gradients/` (and an expanded gradient under `Expand/_XBackward/`) and
    forward ones under `Default/`; optimizer updates live
    under `Default/optimizer-*` (a network trained as a Cell) or are named by their type alone (`Default/SGD-op3`
    of a custom loop: OPTIMIZER_TYPES). Arrow's string kernels: a legacy or GPU detail table holds a million
    distinct names, a cluster run hundreds of small tables, where pandas' str accessor costs more per call than
    the names.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pc.fill_null(pa.array(full_names, type=pa.string(), from_pandas=True), "")
    backward = pc.or_(pc.starts_with(names, "Gradients/"),
                      pc.match_substring_regex(names, EXPANDED_BACKWARD)).to_numpy(zero_copy_only=False)
    types = pc.replace_substring_regex(names, _TYPE_OF_NAME, r"\1")
    optimizer = pc.and_(pc.invert(pa.array(backward)),
                        pc.or_(pc.match_substring(names, "/optimizer"),
                               pc.match_substring_regex(types, OPTIMIZER_TYPES.pattern))).to_numpy(zero_copy_only=False)
    forward = pc.starts_with(names, "Default/").to_numpy(zero_copy_only=False) & ~optimizer
    return np.select([backward, optimizer, forward], ["backward", "optimizer", "forward"], "other").astype(object)


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

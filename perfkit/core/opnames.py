"""Op-name rules every layer shares: which op names are communication, and of which kind."""

from __future__ import annotations

import re

# Communication op kinds by name (MindSpore primitives, HCCL/NCCL kernels, `hcom_*` tasks). Point-to-point ops
# are pipeline stages passing activations (formats.md §3, communication.json's "p2p"): fusion cannot help them.
P2P_OP = re.compile(r"^(?:hcom_?)?(?:send|receive|recv|batch_?send_?recv)", re.IGNORECASE)


COLLECTIVE_OP = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|broadcast(?!_?to)|all_?to_?all", re.IGNORECASE)


def comm_kind(op_type: str) -> str | None:
    """"p2p", "collective" or None (not a communication op) for an op type or kernel name."""
    if P2P_OP.search(op_type):
        return "p2p"
    if COLLECTIVE_OP.search(op_type):
        return "collective"
    return None

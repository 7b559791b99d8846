"""The causes a step's time is attributed to (perfkit/analysis/ledger.py), with the one label every view prints.

Kept apart from the ledger so that text output (perfkit/render/text.py), which a warm `perfkit summary` runs without
pandas, names them from the same table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    group: str      # the bound part it rolls up into (BOUND_PARTS), or "compile"
    label: str      # how every view names it


# One label per cause, in the order views list them. Compute is split as finely as the files allow: by the step
# trace's backward end (forward+backward vs the tail after it) and by the ops' scopes (Default/ vs Gradients/).
CAUSES: dict[str, Cause] = {
    "forward": Cause("compute", "forward compute"),
    "backward": Cause("compute", "backward compute"),
    "forward_backward": Cause("compute", "forward+backward compute"),
    "optimizer": Cause("compute", "optimizer / tail compute"),
    "other_compute": Cause("compute", "other compute (outside the network's scopes)"),
    "compute": Cause("compute", "device compute"),
    "comm_transfer": Cause("communication", "collective communication: transfer"),
    "comm_wait": Cause("communication", "collective communication: wait"),
    "comm": Cause("communication", "collective communication (exposed)"),
    "p2p": Cause("pipeline", "pipeline wait (p2p, bubble)"),
    "data_wait": Cause("data", "data wait (queue evidence)"),
    "host_dispatch": Cause("host", "host: PyNative dispatch"),
    "host_launch": Cause("host", "host: launch gaps inside the step"),
    "host_transfer": Cause("host", "host: feed-mode batch transfer"),
    "host_loop": Cause("host", "host: work between steps (callbacks, logging, Python in the loop)"),
    "compile": Cause("compile", "first step: compile / warm-up"),
    "unknown": Cause("unknown", "idle, cause unknown"),
}
# The parts of a step, in the order they are shown (the bound's roll-up of the causes).
BOUND_PARTS = ("compute", "communication", "pipeline", "data", "host", "unknown")
# How the bound's parts are named in every view.
BOUND_PART_LABELS = {"compute": "device compute", "communication": "collective communication (exposed)",
                     "pipeline": "pipeline wait (p2p, bubble)", "data": "data wait (queue evidence)",
                     "host": "host-bound (launch, dispatch, transfer, loop)",
                     "unknown": "idle, cause unknown"}
# Where the files do not say what overlaps with compute, the communication part is the communication ops' time
# (an upper bound of what is exposed): said so wherever it is named.
COMM_OVERLAP_UNKNOWN_LABEL = "collective communication (overlap with compute unknown)"
# The parts as column headings in narrow tables (`perfkit ranks`).
PART_HEADINGS = {"compute": "compute", "communication": "communication", "pipeline": "pipeline wait",
                 "data": "data wait", "host": "host", "unknown": "idle unknown"}
# How the ledger measured a rank's communication (rank_parts' comm_source) -> (the name a finding's evidence and
# the views give that measure, what it says about overlap with compute).
COMM_SOURCE_LABEL = {"exposed": ("comm_exposed", "not overlapped with compute"),
                     "step_trace_overlap_unknown": ("comm", "step-trace op time, overlap with compute unknown"),
                     "ops_overlap_unknown": ("comm_ops", "op time, overlap with compute unknown")}


# Which steps analysis.steady_op_types sums, as every view words it.
OP_TYPES_SUMMED_OVER = "ranks and the steady steps (every profiled step where op runs are not timed)"

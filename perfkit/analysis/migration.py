"""A PyTorch reference beside its MindSpore port: op families matched across the two frameworks (docs/migration.md).

Op types do not map one to one: torch's `aten::convolution_backward` is MindSpore's Conv2DBackpropInput and
Conv2DBackpropFilter, `aten::linear` is MatMul + BiasAdd, a residual add is `aten::add` against Add (graph) or AddExt
(PyNative), and MindSpore's MatMul or AddN run in forward, backward and the optimizer alike. So a family is matched by
op type and pass (forward / backward / other) on each side; the op kinds of one side that no family names are listed
by name as without a partner, never forced into a ratio. Everything outside forward and backward (the optimizer,
weight decay, loss scaling, bookkeeping) is one family on both sides: torch's single-tensor Adam is thousands of small
ops where MindSpore's fused Adam is one kernel per parameter, and no finer match is honest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..core.model import Run

TORCH, MINDSPORE = "torch", "mindspore"
ANY_PASS = ("forward", "backward", "optimizer", "other")


@dataclass(frozen=True)
class Family:
    """One op family: the torch op types (kineto families, perfkit/io/formats/kineto.py) and the MindSpore op types
    that do its work, in the passes given; `any_type`: every op type of those passes (the optimizer family)."""

    name: str
    passes: tuple[str, ...]
    torch: tuple[str, ...]
    mindspore: tuple[str, ...]
    any_type: bool = False


FAMILIES: tuple[Family, ...] = (
    Family("convolution", ("forward",), ("aten::conv2d", "aten::convolution", "aten::_convolution"),
           ("Conv2D", "Conv2DExt")),
    Family("convolution backward", ("backward",), ("aten::convolution_backward",),
           ("Conv2DBackpropInput", "Conv2DBackpropFilter", "ConvolutionGrad")),
    Family("batch norm", ("forward",), ("aten::batch_norm", "aten::native_batch_norm"), ("BatchNorm", "BatchNormExt")),
    Family("batch norm backward", ("backward",), ("aten::native_batch_norm_backward",),
           ("BatchNormGrad", "BatchNormGradExt")),
    Family("ReLU", ("forward",), ("aten::relu", "aten::relu_"), ("ReLU",)),
    Family("ReLU backward", ("backward",), ("aten::threshold_backward",), ("ReluGrad",)),
    Family("max pool", ("forward",), ("aten::max_pool2d",), ("MaxPool", "MaxPoolWithArgmax")),
    Family("max pool backward", ("backward",), ("aten::max_pool2d_with_indices_backward",),
           ("MaxPoolGrad", "MaxPoolGradWithArgmax")),
    Family("residual add", ("forward",), ("aten::add",), ("Add", "AddExt")),
    Family("gradient sum (branches)", ("backward",), ("aten::add", "aten::add_"), ("AddN", "Add", "AddExt")),
    Family("dense (matmul + bias)", ("forward",), ("aten::linear", "aten::addmm", "aten::matmul", "aten::mm"),
           ("MatMul", "MatMulExt", "BiasAdd", "Dense")),
    Family("dense backward", ("backward",), ("aten::mm", "aten::sum"), ("MatMul", "MatMulExt", "BiasAddGrad")),
    Family("global average pool", ("forward",), ("aten::adaptive_avg_pool2d", "aten::mean"),
           ("ReduceMean", "AdaptiveAvgPool2D", "MeanExt")),
    Family("global average pool backward", ("backward",), ("aten::_adaptive_avg_pool2d_backward",),
           ("AdaptiveAvgPool2DGrad", "MeanGrad")),
    Family("loss", ("forward",), ("aten::cross_entropy_loss", "aten::log_softmax", "aten::nll_loss"),
           ("SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits", "CrossEntropy")),
    Family("loss backward", ("backward",), ("aten::_log_softmax_backward_data", "aten::nll_loss_backward"),
           ("SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits",
            "SparseSoftmaxCrossEntropyWithLogitsGrad")),
    Family("optimizer and updates (outside forward and backward)", ("optimizer", "other"), (), (), any_type=True),
)


def framework_of(run: Run) -> str:
    """"torch" for a kineto trace, "mindspore" for MindSpore's profilers (torch_npu's traces are PyTorch too)."""
    return TORCH if run.meta.framework in ("torch", "torch_npu") else MINDSPORE


def framework_version(run: Run) -> str | None:
    """The framework's version as the run records it: MindSpore's from its files or perfkit's manifest, torch's
    from the sidecar perfkit profile --reference writes (a trace alone records none)."""
    return run.meta.config.get("torch_version") if framework_of(run) == TORCH else run.meta.ms_version


def execution_mode(run: Run) -> str | None:
    """How the step ran: MindSpore's graph or pynative, torch's mode from the sidecar (eager, compiled)."""
    return run.meta.config.get("mode") if framework_of(run) == TORCH else run.meta.mode


def family_of(framework: str, op_type: str, op_pass: str) -> str | None:
    for family in FAMILIES:
        if op_pass in family.passes and (family.any_type or op_type in getattr(family, framework)):
            return family.name
    return None


def op_kinds_per_step(run: Run, type_ms_per_step: pd.Series, steps: float) -> pd.DataFrame:
    """Per op type and pass: ms per step (the type's ms per step, `type_ms_per_step`, split between its passes as its
    ops' time is) and calls per step (its ops' calls over `steps` profiled steps and ranks)."""
    ops = run.ops
    if not len(ops):
        return pd.DataFrame(columns=["type", "pass", "ms_per_step", "calls_per_step"])
    by_kind = ops.assign(type=ops["type"].astype(str), **{"pass": ops["pass"].astype(str)}).groupby(
        ["type", "pass"], as_index=False).agg(total_ms=("total_ms", "sum"), count=("count", "sum"))
    type_total = by_kind.groupby("type")["total_ms"].transform("sum")
    share = (by_kind["total_ms"] / type_total.where(type_total > 0)).fillna(0.0)
    by_kind["ms_per_step"] = by_kind["type"].map(type_ms_per_step).fillna(0.0) * share
    by_kind["calls_per_step"] = by_kind["count"] / steps if steps else float("nan")
    return by_kind[["type", "pass", "ms_per_step", "calls_per_step"]]


def match_families(torch_kinds: pd.DataFrame, port_kinds: pd.DataFrame) -> dict[str, Any]:
    """{"families": per family on both sides, "unmatched": per side the op kinds no family of both sides holds}.
    A family holds ms per step and the op kinds each side counted in it; `ratio` (port / reference) only where both
    sides ran it."""
    sides = {"reference": (TORCH, torch_kinds), "port": (MINDSPORE, port_kinds)}
    placed: dict[str, dict[str, list[dict]]] = {family.name: {"reference": [], "port": []} for family in FAMILIES}
    unmatched: dict[str, list[dict]] = {"reference": [], "port": []}
    for side, (framework, kinds) in sides.items():
        for kind in kinds.to_dict("records"):
            item = {"type": kind["type"], "pass": kind["pass"], "ms_per_step": float(kind["ms_per_step"]),
                    "calls_per_step": float(kind["calls_per_step"])}
            name = family_of(framework, item["type"], item["pass"])
            (placed[name][side] if name else unmatched[side]).append(item)
    families = []
    for family in FAMILIES:
        held = placed[family.name]
        if not held["reference"] and not held["port"]:
            continue
        if not held["reference"] or not held["port"]:  # one side only: its kinds have no partner
            side = "reference" if held["reference"] else "port"
            unmatched[side] += held[side]
            continue
        row = {"family": family.name}
        for side in ("reference", "port"):
            kinds = sorted(held[side], key=lambda item: -item["ms_per_step"])
            row[f"{side}_ms_per_step"] = sum(item["ms_per_step"] for item in kinds)
            row[f"{side}_ops"] = kinds
        ref_ms, port_ms = row["reference_ms_per_step"], row["port_ms_per_step"]
        row["ratio"] = port_ms / ref_ms if ref_ms > 0 and port_ms > 0 else None
        families.append(row)
    families.sort(key=lambda row: -max(row["reference_ms_per_step"], row["port_ms_per_step"]))
    for side in unmatched:
        unmatched[side].sort(key=lambda item: -item["ms_per_step"])
    return {"families": families, "unmatched": unmatched}

"""`perfkit compare REFERENCE PORT` across frameworks: a PyTorch reference beside its MindSpore port (the dict
`--format json` prints; perfkit/render/migration.py words it; docs/migration.md).

In order: the settings each side ran with (what a verdict needs equal, and what differs), step time and samples/s per
side with the runs' spread, the verdict (refused when a setting that changes the answer differs, or within the
runs' spread: analysis/statistics.verdict), op families in ms per step with the op kinds each side counted
(analysis/migration.py; kinds without a partner listed, never in a ratio), each side's data wait in its own
definition, and where the port loses, the MindSpore change for it.
"""

from __future__ import annotations

from typing import Any, Sequence

import pandas as pd

from ..analysis.cells import cells
from ..analysis.measures import step_means
from ..analysis.migration import (
    FAMILIES,
    MINDSPORE,
    TORCH,
    execution_mode,
    framework_of,
    framework_version,
    match_families,
    op_kinds_per_step,
)
from ..analysis.statistics import NOISE_FLOOR_PCT, per_rank_batch, samples_per_s, spread, step_totals, verdict
from ..core.errors import PerfkitError
from ..core.model import Run
from ..core.scopes import NO_CELL, WRAPPER_NAMES
from .compare import BACKBONE, op_type_ms_per_step

# Settings that change the answer: a speedup is refused while they differ (both sides known). The execution mode is
# shown, not required equal: eager PyTorch against a MindSpore graph is what a migration compares.
BLOCKING = ("network", "device", "batch_size", "image_size", "precision", "isa_cap", "threads")
# MindSpore's optimizer kernels, as its op tables name them.
MINDSPORE_OPTIMIZERS = ("Adam", "ApplyAdam", "AdamWeightDecay", "FusedAdam", "FusedAdamWeightDecay", "ApplyMomentum",
                        "SGD", "Lamb", "ApplyAdagrad", "ApplyRMSProp", "LARSUpdate")
# The forward convolution of each side, whose first 3-channel input gives the image size.
CONVOLUTIONS = ("aten::conv2d", "Conv2D", "Conv2DExt")
ISA_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
# A family the port runs this much slower than the reference (and at least PORT_LOSS_MIN_MS per step) is a loss.
PORT_LOSS_RATIO = 1.2
PORT_LOSS_MIN_MS = 1.0
DATA_WAIT = {TORCH: "time inside the DataLoader's __next__ spans (the main process building or waiting for a batch; "
                    "worker processes are not traced)",
             MINDSPORE: "the step's interval before its first forward op (waiting for the dataset pipeline or the "
                        "host)"}


def is_cross_framework(run_a: Run, run_b: Run) -> bool:
    return framework_of(run_a) != framework_of(run_b)


def compare_across(side_a: Sequence[Run], side_b: Sequence[Run], noise_floor_pct: float = NOISE_FLOOR_PCT
                   ) -> dict[str, Any] | None:
    """compare_frameworks of two sides given in either order (a PyTorch reference and its MindSpore port), the
    one dispatch of `perfkit compare` and `perfkit.compare`; None where both sides are of one framework."""
    if not is_cross_framework(side_a[0], side_b[0]):
        return None
    reference, port = (side_a, side_b) if framework_of(side_a[0]) == TORCH else (side_b, side_a)
    return compare_frameworks(reference, port, noise_floor_pct)


def side_settings(run: Run, runs: int) -> dict[str, Any]:
    """How one side ran, as far as its files tell (None: not recorded)."""
    framework, config, env = framework_of(run), run.meta.config, run.meta.env
    return {
        "framework": framework,
        "network": network(run),
        "version": framework_version(run),
        "mode": execution_mode(run),
        "device": run.meta.device,
        "op_time": op_time(run),
        "threads": config.get("threads"),
        "isa_cap": next((f"{key}={env[key]}" for key in ISA_ENV if key in env), "none" if env or config else None),
        "cpu_capability": config.get("cpu_capability"),
        "batch_size": per_rank_batch(run) if framework == MINDSPORE else config.get("batch_size"),
        "image_size": image_size(run),
        "precision": precision(run),
        "optimizer": optimizer(run),
        "data_workers": config.get("workers") if framework == MINDSPORE else None,
        "runs": runs,
    }


def op_time(run: Run) -> str:
    """What an op family's time is on this side (docs/migration.md): a torch trace with GPU kernels counts their
    device time (host self time for families that launched none: io/formats/kineto.py's op-time rule), one without
    its host self time; MindSpore's op tables time each kernel where it ran."""
    if framework_of(run) == TORCH:
        return "device kernels (else host self time)" if run.meta.device == "GPU" else "host self time"
    return f"{run.meta.device or 'device'} kernel time"


def image_size(run: Run) -> int | None:
    """The recorded image size, else the height of the first 3-channel convolution input (NCHW)."""
    recorded = run.meta.config.get("image_size")
    if isinstance(recorded, int):
        return recorded
    if not len(run.ops) or "input_shapes" not in run.ops:
        return None
    convs = run.ops[run.ops["type"].astype(str).isin(CONVOLUTIONS) & (run.ops["pass"].astype(str) == "forward")]
    shapes = convs["input_shapes"].dropna().astype(str)
    stems = shapes[shapes.str.match(r"^\d+,3,\d+,\d+;")]
    return int(stems.iloc[0].split(";")[0].split(",")[2]) if len(stems) else None


def network(run: Run) -> str | None:
    """The network's class: MindSpore's `_backbone-ResNet50` scope, torch's outermost module span (the most common
    first scope part of the op names); None where the names carry no scope."""
    if not len(run.ops):
        return None
    names = pd.Series(run.ops["name"].unique()).astype(str)
    if framework_of(run) == MINDSPORE:
        found = names.str.extract(BACKBONE, expand=False).dropna()
    else:
        found = names[names.str.contains("/")].str.split("/").str[0]
        found = found[~found.str.contains("-")]  # a root span, not a child's `name-Class`
    return str(found.value_counts().index[0]) if len(found) else None


def optimizer(run: Run) -> str | None:
    """The optimizer and how it runs: torch's from its `optimizer-Adam` scope (single-tensor, foreach or fused by
    its ops), MindSpore's from the optimizer kernel outside forward and backward (one kernel per parameter)."""
    ops = run.ops[run.ops["pass"].astype(str).isin(("optimizer", "other"))] if len(run.ops) else run.ops
    if not len(ops):
        return None
    types = set(ops["type"].astype(str))
    if framework_of(run) == TORCH:
        names = ops["name"].astype(str).str.extract(r"^optimizer-(\w+)/", expand=False).dropna()
        if not len(names):
            return None
        how = ("fused" if any(kind.startswith("aten::_fused") for kind in types) else
               "foreach" if any(kind.startswith("aten::_foreach") for kind in types) else "single-tensor")
        return f"{names.iloc[0]} ({how})"
    kernel = next((kind for kind in MINDSPORE_OPTIMIZERS if kind in types), None)
    return None if kernel is None else f"{kernel} (one kernel per parameter)"


def precision(run: Run) -> str | None:
    """float32 / mixed / ...: MindSpore's AMP level or compute dtype; torch's convolution and matmul input types."""
    if framework_of(run) == MINDSPORE:
        if run.meta.amp_level:
            return "float32" if run.meta.amp_level == "O0" else f"amp {run.meta.amp_level}"
        return run.meta.compute_dtype
    if not len(run.ops) or "input_dtypes" not in run.ops:
        return None
    dense = run.ops[run.ops["type"].astype(str).isin(("aten::conv2d", "aten::linear", "aten::addmm", "aten::matmul"))]
    kinds = {kind.split(";")[0] for kind in dense["input_dtypes"].dropna().astype(str)}
    names = {"float": "float32", "c10::Half": "float16", "c10::BFloat16": "bfloat16"}
    found = {names.get(kind, kind) for kind in kinds}
    return None if not found else found.pop() if len(found) == 1 else "mixed"


def compare_frameworks(reference: Sequence[Run], port: Sequence[Run],
                       noise_floor_pct: float = NOISE_FLOOR_PCT) -> dict[str, Any]:
    """The cross-framework comparison (module docstring): `reference` the PyTorch runs, `port` the MindSpore runs
    (a folder of repeat_N runs gives several), each side's first run for the per-op detail."""
    ref, prt = reference[0], port[0]
    if framework_of(ref) != TORCH or framework_of(prt) != MINDSPORE:
        raise PerfkitError(f"the cross-framework comparison takes a PyTorch reference then its MindSpore port: "
                           f"{ref.path} is {framework_of(ref)}, {prt.path} is {framework_of(prt)}")
    settings = {"reference": side_settings(ref, len(reference)), "port": side_settings(prt, len(port))}
    differing, unchecked = [], []
    for key in BLOCKING:
        a, b = settings["reference"][key], settings["port"][key]
        if a is None or b is None:
            unchecked.append(key)
        elif str(a).lower() != str(b).lower():
            differing.append({"setting": key, "reference": a, "port": b})
    sides = {}
    for side, run, group in (("reference", ref, reference), ("port", prt, port)):
        means = step_means(run.steps) or {}
        sides[side] = {"run": run.path, "runs": [r.path for r in group], "step_ms": means.get("total_ms"),
                       "samples_per_s": samples_per_s(run), "spread": spread(step_totals(run.steps)),
                       "data_wait_ms": means.get("interval_ms"), "data_wait_is": DATA_WAIT[framework_of(run)]}
    judged = _verdict(reference, port, differing, noise_floor_pct)
    matched = match_families(_kinds(ref), _kinds(prt))
    return {"kind": "cross_framework", "reference": ref.path, "port": prt.path, "settings": settings,
            "differing": differing, "not_checked": unchecked, **sides_of(sides), "verdict": judged, **matched,
            **match_stages(stages(ref), stages(prt)),
            "changes": port_changes(settings, sides, matched["families"], judged)}


def sides_of(sides: dict[str, dict]) -> dict[str, dict]:
    return {"reference_run": sides["reference"], "port_run": sides["port"]}


def stages(run: Run) -> dict[str, dict[str, Any]]:
    """The network's stages (its top-level modules or Cells: conv1, layer1, ..., fc) by attribute name: class and
    forward / backward ms per profiled step (analysis/cells.py: torch's backward ops in the module of the forward
    op their flow names, MindSpore's backward kernels placed by shapes). The network is the largest top-level
    Cell, below MindSpore's wrappers (Default, network, _backbone)."""
    tree = cells(run)
    if not len(tree):
        return {}
    rank = tree["rank"].iloc[0]
    tree = tree[tree["rank"].isna()] if pd.isna(rank) else tree[tree["rank"] == rank]
    tree = tree[tree["path"] != NO_CELL]
    if not len(tree):
        return {}

    def wrapper(row) -> bool:
        return row["path"].rsplit("/", 1)[-1].split("-", 1)[0] in WRAPPER_NAMES

    node = tree[tree["depth"] == 1].sort_values("total_ms").iloc[-1]
    while wrapper(node):  # Default > network > _backbone: the last wrapper is the network itself
        children = tree[tree["parent"] == node["path"]]
        largest = children.sort_values("total_ms").iloc[-1] if len(children) else None
        if largest is None or not wrapper(largest):
            break
        node = largest
    children = tree[tree["parent"] == node["path"]]
    return {str(row.path).rsplit("/", 1)[-1].split("-", 1)[0]: {
        "class": row.cell_type, "forward_ms": float(row.forward_ms), "backward_ms": float(row.backward_ms)}
        for row in children.itertuples(index=False)}


def match_stages(reference: dict[str, dict], port: dict[str, dict]) -> dict[str, Any]:
    """Stages matched by attribute name (tree position), both classes shown; a stage one side lacks is listed."""
    rows = [{"stage": name, "reference": reference[name], "port": port[name]} for name in reference if name in port]
    rows.sort(key=lambda row: -max(sum(row[side][k] for k in ("forward_ms", "backward_ms"))
                                   for side in ("reference", "port")))
    return {"stages": rows, "unmatched_stages": {"reference": sorted(set(reference) - set(port)),
                                                 "port": sorted(set(port) - set(reference))}}


def _kinds(run: Run):
    table = op_type_ms_per_step(run).set_index("type")["ms_per_step"]
    steps = step_means(run.steps)
    ranks = max(1, len(run.meta.ranks))
    return op_kinds_per_step(run, table, (steps["count"] if steps else 0) * ranks)


def _verdict(reference: Sequence[Run], port: Sequence[Run], differing: list[dict], floor: float) -> dict[str, Any]:
    if differing:
        return {"kind": "refused", "why": "settings differ: " + ", ".join(
            f"{row['setting']} {row['reference']} (reference) vs {row['port']} (port)" for row in differing)}
    judged = verdict(reference, port, floor)
    kind = {"faster": "port faster", "slower": "port slower"}.get(judged.kind, "within the runs' spread")
    return {"kind": kind, "speedup": judged.speedup, "interval": list(judged.interval), "basis": judged.basis,
            "noise_floor_pct": judged.noise_floor_pct, "per_sample": judged.per_sample,
            "why": None if kind != "within the runs' spread" else f"the difference is within the runs' spread "
            f"({judged.basis})"}


def port_changes(settings: dict, sides: dict, families: list[dict], judged: dict) -> list[dict[str, str]]:
    """Where the port loses (a family PORT_LOSS_RATIO slower, more data wait, a setting), the MindSpore change."""
    ref, port = settings["reference"], settings["port"]
    changes = []
    losing = [row for row in families if row["ratio"] is not None and row["ratio"] >= PORT_LOSS_RATIO
              and row["port_ms_per_step"] - row["reference_ms_per_step"] >= PORT_LOSS_MIN_MS]
    if port["mode"] == "pynative":
        changes.append({"where": "mode", "change": "mindspore.set_context(mode=mindspore.GRAPH_MODE) (or @jit on the "
                        "train step): PyNative runs op by op, as eager torch does, without graph fusion"})
    conv = [row["family"] for row in losing if row["family"].startswith("convolution")]
    if conv and port["device"] == "CPU":
        changes.append({"where": ", ".join(conv), "change": "ONEDNN_MAX_CPU_ISA set to the best ISA oneDNN runs well "
                        "on this CPU (perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2): MindSpore's oneDNN on an "
                        "AVX-512 host can fall back to reference convolutions (docs/migration.md)"})
    if port["precision"] == "float32" and ref["precision"] not in (None, "float32"):
        changes.append({"where": "precision", "change": "Model(..., amp_level=\"O2\") (perfkit profile --amp-level "
                        "O2): the reference computes in " + str(ref["precision"])})
    ref_wait, port_wait = sides["reference"]["data_wait_ms"], sides["port"]["data_wait_ms"]
    if ref_wait is not None and port_wait is not None and port_wait - ref_wait >= PORT_LOSS_MIN_MS \
            and port_wait > 2 * ref_wait:
        changes.append({"where": "data wait", "change": "more dataset workers: num_parallel_workers on the map and "
                        "batch ops (perfkit profile --workers N), or dataset sink mode where the device has one"})
    for row in losing:
        if not any(row["family"] in change["where"] for change in changes):
            changes.append({"where": row["family"], "change": f"{row['ratio']:.1f}x the reference's time: check the "
                            "API mapping of these ops (docs/migration.md) and `perfkit advise PORT`"})
    return changes


__all__ = ["BLOCKING", "FAMILIES", "compare_frameworks", "is_cross_framework"]

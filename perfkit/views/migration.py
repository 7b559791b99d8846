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

from ..analysis.cells import cells, placed_per_step
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
from ..core.scopes import NO_CELL, WRAPPER_NAMES, common_ancestor
from .compare import BACKBONE, op_type_ms_per_step

# Settings that change the answer: a speedup is refused while they differ (both sides known). The execution mode is
# shown, not required equal: eager PyTorch against a MindSpore graph is what a migration compares.
BLOCKING = ("network", "device", "batch_size", "image_size", "precision", "isa_cap", "threads")
# Settings listed where they differ without refusing the verdict (docs/migration.md says why): their cost is ops
# the comparison shows (a scaling side's unscale and overflow check are ops without a partner).
SHOWN = ("loss_scale",)
# The ops loss scaling leaves in a trace. torch: GradScaler's unscale-and-check of the gradients (scaler.step) and
# its scale update (scaler.update). MindSpore: the overflow check of TrainOneStepWithLossScaleCell
# (mindspore/nn/wrap/loss_scale.py: NPU float status on Ascend, FloatStatus elsewhere, or AllFinite); a fixed scale
# that never drops an update (the only one MindSpore 2.10 runs on CPU) leaves no op of its own.
LOSS_SCALE_OPS = {TORCH: ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_"),
                  MINDSPORE: ("NPUGetFloatStatusV2", "NPUClearFloatStatusV2", "NPUAllocFloatStatus",
                              "NPUGetFloatStatus", "NPUClearFloatStatus", "FloatStatus", "AllFinite")}
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


def data_wait_is(run: Run) -> str:
    """What a side's data wait is: on a torch GPU trace only the DataLoader time the GPU sat idle through (the
    kineto reader's interval over the step's window)."""
    if framework_of(run) == TORCH and run.meta.device == "GPU":
        return "the part of the step's GPU idle time the main process spent in the DataLoader's __next__"
    return DATA_WAIT[framework_of(run)]


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
        "loss_scale": loss_scale(run),
        "data_workers": config.get("workers") if framework == MINDSPORE else None,
        "runs": runs,
    }


def op_time(run: Run) -> str:
    """What an op family's time is on this side (docs/migration.md): a torch trace with GPU kernels counts their
    device time (0 for families that launched none: io/formats/kineto.py's op-time rule), one without its host
    self time; MindSpore's op tables time each kernel where it ran."""
    if framework_of(run) == TORCH:
        return "device kernels (none: 0)" if run.meta.device == "GPU" else "host self time"
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


def loss_scale(run: Run) -> dict[str, Any] | None:
    """Whether the run scales its loss, with the evidence: {scaling: "none" / "fixed 1024" / "dynamic, from 1024",
    evidence}; None where neither the files nor perfkit's record tell. Evidence: perfkit's record (the reference
    runner's GradScaler, the profile hook's Model loss_scale_manager: config.loss_scale) and the ops
    (LOSS_SCALE_OPS, calls per step). A torch trace without GradScaler's ops is a run without it: scaler.step
    unscales every step."""
    framework = framework_of(run)
    record = run.meta.config.get("loss_scale")
    record = record if isinstance(record, dict) else None
    kinds = run.ops["type"].astype(str) if len(run.ops) else pd.Series(dtype=str)
    counts = run.ops.loc[kinds.isin(LOSS_SCALE_OPS[framework]), ["type", "count"]] if len(run.ops) else None
    steps = max(int(run.steps["step"].nunique()) if len(run.steps) else 1, 1)
    ops = ([f"{kind} x{calls / steps:.0f}/step" for kind, calls in
            counts.groupby("type", observed=True)["count"].sum().items()] if counts is not None else [])
    evidence = [] if not ops else [", ".join(ops)]
    scaling = None
    if framework == TORCH and record is not None and record.get("scaler"):
        scaling = (f"dynamic, from {record['scale']:g} ({record['scaler']}: x{record['growth_factor']:g} every "
                   f"{record['growth_interval']} steps without inf, x{record['backoff_factor']:g} on one)"
                   if record.get("enabled") else "none")
        evidence.insert(0, f"{record['scaler']}(enabled={record.get('enabled')}) recorded by perfkit's runner")
    elif framework == TORCH:
        scaling = "dynamic (GradScaler)" if ops else "none"
        if not ops:
            evidence.append("no GradScaler op (aten::_amp_*) in the trace")
    elif record is not None and "manager" in record:
        manager = record["manager"]
        scaling = ("none" if manager is None else f"dynamic, from {record.get('scale', 0):g}"
                   if manager.startswith("Dynamic") else f"fixed {record.get('scale', 0):g}"
                   + (", overflow drops the update" if record.get("drop_overflow_update") else ""))
        evidence.insert(0, f"Model(loss_scale_manager={manager}) through {record.get('train_cell')}, recorded by "
                           "perfkit's hook")
    elif ops:
        scaling = "overflow-checked (a dynamic scale, or a fixed one that drops overflowing updates)"
    return None if scaling is None else {"scaling": scaling, "evidence": "; ".join(evidence)}


def _differs(a: Any, b: Any, key: str) -> bool:
    if key == "loss_scale":  # scaling on one side only; scales that differ are shown, not a difference
        return (a["scaling"] == "none") != (b["scaling"] == "none")
    return str(a).lower() != str(b).lower()


def compare_frameworks(reference: Sequence[Run], port: Sequence[Run],
                       noise_floor_pct: float = NOISE_FLOOR_PCT) -> dict[str, Any]:
    """The cross-framework comparison (module docstring): `reference` the PyTorch runs, `port` the MindSpore runs
    (a folder of repeat_N runs gives several), each side's first run for the per-op detail."""
    ref, prt = reference[0], port[0]
    if framework_of(ref) != TORCH or framework_of(prt) != MINDSPORE:
        raise PerfkitError(f"the cross-framework comparison takes a PyTorch reference then its MindSpore port: "
                           f"{ref.path} is {framework_of(ref)}, {prt.path} is {framework_of(prt)}")
    settings = {"reference": side_settings(ref, len(reference)), "port": side_settings(prt, len(port))}
    differing, shown, unchecked = [], [], []
    for key in BLOCKING + SHOWN:
        a, b = settings["reference"][key], settings["port"][key]
        if a is None or b is None:
            unchecked.append(key)
        elif _differs(a, b, key):
            (differing if key in BLOCKING else shown).append({"setting": key, "reference": a, "port": b})
    sides = {}
    for side, run, group in (("reference", ref, reference), ("port", prt, port)):
        means = step_means(run.steps) or {}
        sides[side] = {"run": run.path, "runs": [r.path for r in group], "step_ms": means.get("total_ms"),
                       "samples_per_s": samples_per_s(run), "spread": spread(step_totals(run.steps)),
                       "data_wait_ms": means.get("interval_ms"), "data_wait_is": data_wait_is(run)}
    judged = _verdict(reference, port, differing, noise_floor_pct)
    matched = match_families(_kinds(ref), _kinds(prt))
    return {"kind": "cross_framework", "reference": ref.path, "port": prt.path, "settings": settings,
            "differing": differing, "differing_not_blocking": shown, "not_checked": unchecked, **sides_of(sides),
            "verdict": judged, **matched,
            **match_stages(stages(ref)[0], *stages(prt)),
            "changes": port_changes(settings, sides, matched["families"], judged)}


def sides_of(sides: dict[str, dict]) -> dict[str, dict]:
    return {"reference_run": sides["reference"], "port_run": sides["port"]}


# A torch module class -> the MindSpore Cell classes that do its work (docs/migration.md, "Stages"); a class not
# listed (the network's own: Bottleneck, ResNet50) maps to the Cell class of the same name.
CLASS_MAP = {"Sequential": ("SequentialCell",), "ModuleList": ("CellList",), "Linear": ("Dense",),
             "Conv1d": ("Conv1d",), "Conv2d": ("Conv2d",), "BatchNorm1d": ("BatchNorm1d",),
             "BatchNorm2d": ("BatchNorm2d",), "LayerNorm": ("LayerNorm",), "ReLU": ("ReLU",), "GELU": ("GELU",),
             "MaxPool2d": ("MaxPool2d",), "AvgPool2d": ("AvgPool2d",), "AdaptiveAvgPool2d": ("AdaptiveAvgPool2d",),
             "Flatten": ("Flatten",), "Dropout": ("Dropout",), "Embedding": ("Embedding",), "Softmax": ("Softmax",)}
# The depth of stages `perfkit compare` shows in text and markdown (1: the network's top-level modules); JSON holds all.
STAGE_DEPTH = 2


def classes_map(torch_class: str, mindspore_class: str) -> bool:
    return mindspore_class in CLASS_MAP.get(torch_class, (torch_class,))


def network_path(run: Run) -> str | None:
    """The network's Cell path: the largest top-level Cell, below MindSpore's wrappers (Default, network,
    _backbone); torch's outermost module."""
    tree = cells(run)
    if not len(tree):
        return None
    rank = tree["rank"].iloc[0]
    tree = tree[tree["rank"].isna()] if pd.isna(rank) else tree[tree["rank"] == rank]
    tree = tree[tree["path"] != NO_CELL]
    if not len(tree):
        return None

    def wrapper(row) -> bool:
        return row["path"].rsplit("/", 1)[-1].split("-", 1)[0] in WRAPPER_NAMES

    node = tree[tree["depth"] == 1].sort_values("total_ms").iloc[-1]
    while wrapper(node):  # Default > network > _backbone: the last wrapper is the network itself
        children = tree[tree["parent"] == node["path"]]
        largest = children.sort_values("total_ms").iloc[-1] if len(children) else None
        if largest is None or not wrapper(largest):
            break
        node = largest
    return str(node["path"])


def stages(run: Run) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Every Cell (module) under the network, by its dotted label below it (`layer1.0.conv1`): class, depth (1: the
    network's top-level modules), parent label, forward ms per steady step (every forward op is in its Cell by
    name) and backward ms per steady step where the Cell's backward is its own: torch's backward ops sit in the
    module of the forward op their flow names; MindSpore's backward kernels were placed by shapes
    (core/scopes.py), and a kernel whose shapes fit several Cells (identical blocks: layer1.1 and layer1.2) sits
    on their shared ancestor. Such Cells hold their backward as a group: `backward_ms` None, `backward_with` the
    labels of the smallest group of siblings (the Cell's or an ancestor's) whose backward is whole, and the group's
    ms in the groups, never split by guess. Returned: ({label: row}, [{parent, stages, backward_ms}])."""
    root = network_path(run)
    if root is None:
        return {}, []
    placed = placed_per_step(run)
    placed = placed[placed["path"].astype(str).str.startswith(root + "/")]
    passes = placed["pass"].astype(str)
    nodes: dict[str, dict[str, Any]] = {}
    for path in placed["path"].unique():
        parts = str(path)[len(root) + 1:].split("/")
        for depth in range(1, len(parts) + 1):
            nodes.setdefault("/".join(parts[:depth]), {"depth": depth})
    forward = _subtree_sums(placed.loc[passes == "forward"], root)
    backward = placed.loc[passes == "backward"]
    own_backward = _subtree_sums(backward, root)
    parent_of = {key: key.rsplit("/", 1)[0] if "/" in key else "" for key in nodes}
    # Union-find over siblings: a kernel whose candidate Cells lie under two children of their shared ancestor
    # joins those children; one whose candidates meet above a Cell's parent makes that Cell's backward not its own.
    group = {key: key for key in nodes}

    def find(key: str) -> str:
        while group[key] != key:
            group[key] = group[group[key]]
            key = group[key]
        return key

    beyond: set[str] = set()
    at_parent: dict[tuple[str, str], float] = {}  # (parent, group root) -> ms of kernels placed on the parent
    for candidates, ms in zip(backward["candidates"], backward["ms"]):
        relative = [str(c)[len(root) + 1:] if str(c).startswith(root + "/") else None for c in candidates]
        ancestor = common_ancestor(relative) if all(relative) else None
        ancestor = "" if ancestor == NO_CELL else ancestor  # candidates in two top-level Cells meet at the network
        touched = {"/".join(r.split("/")[:depth]) for r in relative if r is not None
                   for depth in range(1, r.count("/") + 2)}
        touched = {key for key in touched if key in nodes and (ancestor is None or _below(key, ancestor))}
        # sorted: a set's order changes with each process's string hashing, and with it the sums' last digits
        children = sorted(key for key in touched if ancestor is not None and parent_of[key] == ancestor)
        beyond |= touched - set(children)
        for child in children[1:]:
            group[find(child)] = find(children[0])
        if len(children) > 1:
            at_parent[(ancestor, children[0])] = at_parent.get((ancestor, children[0]), 0.0) + float(ms)
    members: dict[str, list[str]] = {}
    for key in nodes:
        members.setdefault(find(key), []).append(key)
    whole: dict[str, bool] = {head: not (set(keys) & beyond) for head, keys in members.items()}

    def label(key: str) -> str:
        return ".".join(part.split("-", 1)[0] for part in key.split("/"))

    def backward_with(key: str) -> list[str] | None:
        while key:
            head = find(key)
            if whole[head] and len(members[head]) > 1:
                return sorted(label(k) for k in members[head])
            key = parent_of[key]
        return None

    rows: dict[str, dict[str, Any]] = {}
    for key, node in nodes.items():
        alone = whole[find(key)] and len(members[find(key)]) == 1
        last = key.rsplit("/", 1)[-1]
        rows[label(key)] = {"class": last.split("-", 1)[1] if "-" in last else "", "depth": node["depth"],
                            "parent": label(parent_of[key]) if parent_of[key] else "",
                            "forward_ms": forward.get(key, 0.0),
                            "backward_ms": own_backward.get(key, 0.0) if alone else None,
                            "backward_with": None if alone else backward_with(key)}
    groups = []
    for head, keys in members.items():
        if len(keys) > 1 and whole[head]:
            parent = parent_of[keys[0]]
            placed_on_parent = sum(ms for (on, first), ms in at_parent.items() if on == parent and find(first) == head)
            groups.append({"parent": label(parent) if parent else "", "stages": sorted(label(k) for k in keys),
                           "backward_ms": sum(own_backward.get(k, 0.0) for k in keys) + placed_on_parent})
    return rows, groups


def _below(key: str, ancestor: str) -> bool:
    return ancestor == "" or key.startswith(ancestor + "/")


def _subtree_sums(ops: pd.DataFrame, root: str) -> dict[str, float]:
    """ms per step of the ops placed in each Cell or below it, by Cell key relative to the network `root`."""
    sums: dict[str, float] = {}
    for path, ms in ops.groupby("path", sort=False)["ms"].sum().items():
        parts = str(path)[len(root) + 1:].split("/")
        for depth in range(1, len(parts) + 1):
            key = "/".join(parts[:depth])
            sums[key] = sums.get(key, 0.0) + float(ms)
    return sums


def attribute_of(label: str) -> str:
    """A stage's own attribute name: `downsample` of `layer1.0.downsample`."""
    return label.rpartition(".")[2]


def _pairs_by_name_then_class(reference: dict[str, dict], port: dict[str, dict], ref_keys: set[str],
                              port_keys: set[str]) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """Sibling modules and Cells paired by attribute name, then the rest where a class occurs once among each side's
    unpaired siblings and maps (a port that renamed `downsample` to `down_sample`); what is left is one side's
    alone."""
    port_by_name = {attribute_of(key): key for key in port_keys}
    pairs = [(key, port_by_name[attribute_of(key)]) for key in ref_keys if attribute_of(key) in port_by_name]
    ref_left = sorted(ref_keys - {r for r, _ in pairs}, key=_natural)
    port_left = sorted(port_keys - {p for _, p in pairs}, key=_natural)
    for ref_key in list(ref_left):
        ref_class = reference[ref_key]["class"]
        if sum(reference[k]["class"] == ref_class for k in ref_left) != 1:
            continue
        fits = [k for k in port_left if classes_map(ref_class, port[k]["class"])]
        if len(fits) == 1 and sum(classes_map(reference[k]["class"], port[fits[0]]["class"]) for k in ref_left) == 1:
            pairs.append((ref_key, fits[0]))
            ref_left.remove(ref_key)
            port_left.remove(fits[0])
    return sorted(pairs, key=lambda pair: _natural(pair[0])), ref_left, port_left


def match_stages(reference: dict[str, dict], port: dict[str, dict], port_groups: list[dict]) -> dict[str, Any]:
    """Modules and Cells matched down the tree by position (the attribute name among siblings, else the one
    sibling of a mapping class) and class (classes_map): a pair whose classes do not map is listed, not matched,
    and its children are not compared; a Cell one side lacks is listed. Rows, labelled by the reference's names
    (`port_stage` where the port's differs), in display order: the top level by time, largest first, each followed
    by its matched children in attribute order. Groups: MindSpore's backward held by sibling Cells together
    (stages), beside the reference's backward of the same modules."""
    matched: dict[str, dict] = {}
    reference_of: dict[str, str] = {}  # port label -> the reference label it is shown as
    mismatched, only = [], {"reference": [], "port": []}

    def visit(parent: str, port_parent: str) -> None:
        ref_children = {k for k, row in reference.items() if row["parent"] == parent}
        port_children = {k for k, row in port.items() if row["parent"] == port_parent}
        pairs, ref_left, port_left = _pairs_by_name_then_class(reference, port, ref_children, port_children)
        only["reference"] += ref_left
        only["port"] += port_left
        for key, port_key in pairs:
            ref, prt = reference[key], port[port_key]
            if not classes_map(ref["class"], prt["class"]):
                mismatched.append({"stage": key, "reference": ref["class"], "port": prt["class"]})
                continue
            reference_of[port_key] = key
            matched[key] = {"stage": key, "depth": ref["depth"], "parent": parent,
                            **({"port_stage": port_key} if port_key != key else {}),
                            "reference": {k: ref[k] for k in ("class", "forward_ms", "backward_ms")},
                            "port": {k: prt[k] for k in ("class", "forward_ms", "backward_ms", "backward_with")}}
            visit(key, port_key)

    visit("", "")
    rows: list[dict] = []

    def total(row: dict) -> float:
        return max(row[side]["forward_ms"] + (row[side]["backward_ms"] or 0.0) for side in ("reference", "port"))

    def emit(parent: str) -> None:
        children = [row for row in matched.values() if row["parent"] == parent]
        children.sort(key=(lambda row: -total(row)) if parent == "" else (lambda row: _natural(row["stage"])))
        for row in children:
            rows.append(row)
            emit(row["stage"])

    emit("")
    groups = []
    for entry in port_groups:
        shown = [reference_of.get(stage) for stage in entry["stages"]]
        if not any(shown):
            continue
        groups.append({**entry, "reference_backward_ms": sum(reference[k]["backward_ms"] for k in shown)
                       if all(shown) else None})
    groups.sort(key=lambda entry: _natural(entry["stages"][0]))
    return {"stages": rows, "stage_groups": groups, "stage_class_mismatches": mismatched,
            "unmatched_stages": {side: sorted(keys, key=_natural) for side, keys in only.items()}}


def _natural(label: str) -> tuple:
    """`layer1.10` after `layer1.9`: numbers compare as numbers."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in label.split("."))


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

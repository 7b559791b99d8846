"""An op's network Cell from its scope name, backward ops placed by their shapes: the Run's `cells` table, which
the loader derives from the op table and perfkit/analysis/cells.py folds into the Cell tree.

Graph mode names a reused gradient graph after the first Cell it was built for: on the ResNet-50 sample runs
all 53 BatchNormGrad kernels sit under the stem's `bn1-BatchNorm2d`, 49 ReluGrads under the stem's
`relu-ReLU`, and layer3's 1x1 Conv2DBackpropInput under `layer1/0-Bottleneck/conv3`. Taken at their word, those
names would make the stem the slowest backward Cell. So a backward kernel is placed by its shapes: among the
forward kernels of the primitive its `Grad_X` scope names, those with the same tensors (a conv: the same
layer identity, op_work.conv_flops' `dout|weight`; a MatMul or BatchMatMul: the pair of tensors one of its two
gradients reads, the forward output's shape with its weight or with its input, `matmul_gradient_pairs`; others:
a shared input shape) are its candidates. On a small transformer MindSpore 2.10 names all 22 backward MatMuls of
the encoder after the classifier head (`head-Dense/Grad_MatMul/MatMul-op0..21`): by their shapes two stay there,
the others go to the encoder's Dense layers (or, where layers of one shape cannot be told apart, their
shared ancestor). It stays
under its named Cell when that Cell is a candidate and has as many forward kernels of that primitive as
backward ones are named there, goes to the one candidate Cell when there is one, and otherwise to the
deepest Cell all candidates share (layer3, for a 1x1 gradient that any of layer3's blocks could own): never
a guess below what the shapes tell. Kernels without a candidate keep their named Cell.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
import pandas as pd

from .model import empty, table
from .op_work import op_flops, parse_shapes

NO_CELL = "(no cell)"


GRADIENTS = "Gradients"


# A gradient component inside a backward scope: `Grad_Conv2D` (MindSpore 1.6+) or `gradConv2D` (older);
# its group is the forward primitive whose backward the kernels below it compute.
GRAD_COMPONENT = re.compile(r"^(?:Grad_|grad(?=[A-Z]))(.+)$")


# An expanded composite gradient (core/opnames.EXPANDED_BACKWARD): `Expand/_SoftmaxBackward/Mul-op0` is backward
# work of the Softmax it names, outside every Cell scope: placed by its shapes as a `Grad_Softmax` kernel is.
EXPANDED_GRADIENT = re.compile(r"^_(\w+)Backward$")
EXPANDED = "Expand"


# Cell attribute names that only wrap the network (TrainOneStepCell.network, WithLossCell._backbone):
# left out of a Cell's short label (`layer4.0.conv3`), kept in its path.
WRAPPER_NAMES = {"Default", "network", "_backbone"}


def scope_of(name: str) -> tuple[list[str], str | None]:
    """(the Cell scope components of an op name, the forward primitive a gradient component names or None):
    `Gradients/Default/a-A/Grad_Conv2D/Conv2DBackpropFilter-op6` -> (["Default", "a-A"], "Conv2D");
    a name without a scope (`Conv2D1`, `ReluGrad`) -> ([], None)."""
    scope, grad_of = _scope(name.rpartition("/")[0])
    return list(scope), grad_of


@functools.lru_cache(maxsize=1 << 16)
def _scope(text: str) -> tuple[tuple[str, ...], str | None]:
    """scope_of of the part before the kernel's name, cached: a million kernels run in a few thousand scopes."""
    parts = text.split("/") if text else []
    if parts and parts[0] == GRADIENTS:
        parts = parts[1:]
    expanded = EXPANDED_GRADIENT.match(parts[1]) if len(parts) == 2 and parts[0] == EXPANDED else None
    if expanded:
        return (), expanded.group(1)
    scope, grad_of = [], None
    for part in parts:
        match = GRAD_COMPONENT.match(part)
        if match:
            grad_of = match.group(1)
        else:
            scope.append(part)
    return tuple(scope), grad_of


def label_of(path: str) -> str:
    """A Cell path's short name, by attribute: `Default/network-WithLossCell/_backbone-ResNet50/
    layer4-SequentialCell/0-Bottleneck/conv3-Conv2d` -> `layer4.0.conv3`; wrappers alone keep their name."""
    if path == NO_CELL:
        return path
    names = [part.split("-", 1)[0] for part in path.split("/")]
    short = [name for name in names if name not in WRAPPER_NAMES]
    return ".".join(short) if short else names[-1]


def cell_label(op_name: str) -> str | None:
    """The Cell an op runs in, in words for a finding's target ("layer4.0.conv3"); None without a scope.
    A backward kernel's own scope may name a reused Cell (module docstring): `cells(run)` places it by shapes."""
    scope, _ = scope_of(op_name)
    return label_of("/".join(scope)) if scope else None


# Matrix products: a forward call has two gradient calls (input and weight), each of the same type, that read
# the forward output's gradient with one of the forward inputs (matched by `matmul_gradient_pairs`).
MATMUL_TYPES = ("MatMul", "BatchMatMul")
MATMUL_GRADIENTS_PER_CALL = 2
MATMUL_TENSORS = "matmul "


# Op types whose FLOPs the shapes should give (op_work.op_flops): where they do not, the Cells say so.
FLOPS_EXPECTED_TYPES = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul", "BatchMatMul")


def place(ops: pd.DataFrame) -> pd.DataFrame:
    """placed_ops of an op table (all ranks): columns path, flops, placed and candidates (the Cells a kernel's
    shapes could belong to, a tuple: the shared ancestor's candidates for "shared", its own Cell otherwise).
    Vectorised over ops: the Python work is per distinct scope and
    per distinct (primitive, named Cell, tensors) question, a few thousand on a million-kernel run. Ranks whose
    op rows read the same (name, type, pass, input shapes), in the same order, are placed once for all of them
    (data-parallel ranks run one graph): what a rank's ops are placed by is those four columns alone, and its
    FLOPs are the shared FLOPs of one call times its own call counts, as for a rank placed alone."""
    if not len(ops):
        return ops.assign(path=pd.Series(dtype=object), flops=pd.Series(dtype="float64"),
                          placed=pd.Series(dtype=object), candidates=pd.Series(dtype=object))
    ranks = ops["rank"].to_numpy()
    ordered = ops if (np.diff(ranks) >= 0).all() else ops.iloc[np.argsort(ranks, kind="stable")]
    ordered = ordered.reset_index(drop=True)
    ranks = ordered["rank"].to_numpy()
    starts = np.flatnonzero(np.r_[True, ranks[1:] != ranks[:-1]])
    ends = np.r_[starts[1:], len(ranks)]
    codes = _row_codes(ordered, ["name", "type", "pass", "input_shapes"])
    shapes: dict[bytes, int] = {}       # a rank's rows as codes -> its group
    firsts: list[int] = []              # each group's first rank (its start row)
    group_of = np.empty(len(starts), dtype=np.int64)
    for index, (start, end) in enumerate(zip(starts, ends)):
        group = shapes.setdefault(codes[start:end].tobytes(), len(shapes))
        if group == len(firsts):
            firsts.append(index)
        group_of[index] = group
    row_group = np.repeat(group_of, ends - starts)
    within = np.arange(len(ranks)) - np.repeat(starts, ends - starts)
    path, placed = np.empty(len(ranks), dtype=object), np.empty(len(ranks), dtype=object)
    candidates = np.empty(len(ranks), dtype=object)
    flops_per_call = np.empty(len(ranks), dtype=np.float64)
    for group, index in enumerate(firsts):
        rows = row_group == group
        shared = _placed_rank(ordered.iloc[starts[index]:ends[index]].reset_index(drop=True))
        for out, value in zip((path, placed, flops_per_call, candidates), shared):
            out[rows] = value[within[rows]]
    flops = flops_per_call * ordered["count"].to_numpy(dtype=np.float64)
    return ordered.assign(path=path, flops=flops, placed=placed, candidates=candidates)


def _row_codes(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """One integer per row, equal for rows equal in `columns` (NA equal to NA)."""
    codes = np.zeros(len(frame), dtype=np.int64)
    for column in columns:
        mine, uniques = pd.factorize(frame[column], use_na_sentinel=False)
        codes = pd.factorize(codes * (len(uniques) + 1) + mine)[0].astype(np.int64)
    return codes


def _placed_rank(mine: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(Cell path, how placed, FLOPs of one call or NaN, candidate Cells) of each op of one rank, in row order."""
    prefixes = mine["name"].astype("string").fillna("").str.rpartition("/")[0]
    scopes = {prefix: _scope(prefix) for prefix in prefixes.unique()}
    paths = prefixes.map({prefix: "/".join(scope) or NO_CELL for prefix, (scope, _) in scopes.items()})
    grad_of = prefixes.map({prefix: grad for prefix, (_, grad) in scopes.items()})
    # count 1: each op's FLOPs of one call. The work is keyed by name (as conv_flops finds it); a name listed
    # twice in one rank's file gets its first row's.
    work = op_flops(mine.assign(count=1)).drop_duplicates("name").set_index("name")
    flops = mine["name"].map(work["flops"]).to_numpy(dtype=np.float64) if len(work) else np.full(len(mine), np.nan)
    layers = mine["name"].map(work["layer"]) if len(work) else pd.Series([None] * len(mine), dtype=object)
    path, placed, candidates = _place_backward(mine, paths.astype(object), grad_of.astype(object),
                                               layers.astype(object))
    return path, placed, flops, candidates


def cell_table(ops: pd.DataFrame) -> pd.DataFrame:
    """The run's `cells` table (model.SCHEMA), derived from its ops by the loader, so that `perfkit summary`
    needs no op rows: per rank and Cell path, the ops placed in that Cell itself (not its children), summed
    over the profiled steps."""
    if not len(ops):  # a large run's ranks without op-level tables: the groupbys below cost 10 ms for no row
        return empty("cells")
    placed = place(ops)
    passes = placed["pass"].astype(str)
    known = placed["flops"].notna()
    unknown = ~known & placed["type"].isin(FLOPS_EXPECTED_TYPES)
    summed = pd.DataFrame({
        "rank": placed["rank"], "path": placed["path"],
        "forward_ms": placed["total_ms"].where(passes == "forward", 0.0),
        "backward_ms": placed["total_ms"].where(passes == "backward", 0.0),
        "other_ms": placed["total_ms"].where(~passes.isin(["forward", "backward"]), 0.0),
        "calls": placed["count"].astype("float64"), "flops": placed["flops"].fillna(0.0),
        "flops_ms": placed["total_ms"].where(known, 0.0), "ops": 1,
        "moved_ops": (placed["placed"] == "moved").astype("int64"),
        "shared_ops": (placed["placed"] == "shared").astype("int64"),
        "dense_unknown_ops": unknown.astype("int64"), "dense_unknown_ms": placed["total_ms"].where(unknown, 0.0),
    }).groupby(["rank", "path"], sort=True).sum().reset_index()
    # The first step's share of each Cell (where op runs are timed; NaN elsewhere): what Cells per steady step
    # leave out with the step means' first step (perfkit/analysis/cells.py).
    first = placed["first_step_ms"] if "first_step_ms" in placed else pd.Series(np.nan, index=placed.index)
    first_calls = (placed["first_step_calls"] if "first_step_calls" in placed
                   else pd.Series(np.nan, index=placed.index)).astype("float64")
    firsts = pd.DataFrame({
        "rank": placed["rank"], "path": placed["path"],
        "first_forward_ms": first.where(passes == "forward", 0.0).where(first.notna()),
        "first_backward_ms": first.where(passes == "backward", 0.0).where(first.notna()),
        "first_other_ms": first.where(~passes.isin(["forward", "backward"]), 0.0).where(first.notna()),
        "first_calls": first_calls.where(first.notna()),
        "first_flops_ms": first.where(known, 0.0).where(first.notna()),
    }).groupby(["rank", "path"], sort=True).sum(min_count=1).reset_index()
    return table("cells", summed.merge(firsts, on=["rank", "path"], how="left"))


@functools.lru_cache(maxsize=1 << 16)
def _shapes_key(text: Any) -> tuple:
    """The tensors an op reads, for matching a gradient to its forward op: its shapes of 2+ dimensions
    (vectors such as a BatchNorm's per-channel scale match too many layers), else all of them; sorted, once."""
    shapes = [shape for shape in parse_shapes(text) if shape]
    wide = [shape for shape in shapes if len(shape) >= 2]
    return tuple(sorted(set(wide or shapes)))


def _place_backward(ops: pd.DataFrame, paths: pd.Series, grad_of: pd.Series,
                    layers: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(each op's Cell, how it was placed, the Cells its shapes could belong to): backward kernels named after a
    reused Cell re-placed by their shapes (module docstring). How: "named" (by its scope), "moved" (to the one
    Cell its shapes name), "shared" (to the Cell all the Cells its shapes could belong to share). Forward Cells
    are indexed by (type, layer) and (type, shape); kernels asking the same question (primitive, named Cell,
    tensors) share one answer."""
    types = ops["type"].astype(str).to_numpy()
    shapes = ops["input_shapes"].astype(object).fillna("").astype(str)
    frame = pd.DataFrame({"path": paths, "grad_of": grad_of, "type": types,
                          "pass": ops["pass"].astype(str).to_numpy(),
                          "tensors": np.where(np.isin(types, MATMUL_TYPES), MATMUL_TENSORS + shapes,
                                              np.where(layers.notna(), "layer " + layers.astype(str), shapes))})
    out_paths, placed = frame["path"].to_numpy(dtype=object).copy(), np.full(len(frame), "named", dtype=object)
    candidates = np.empty(len(frame), dtype=object)
    for row, path in enumerate(out_paths):  # one tuple per element: numpy would make a list of tuples a 2-D array
        candidates[row] = (path,)
    forward = frame[frame["pass"] == "forward"]
    backward = frame[(frame["pass"] == "backward") & frame["grad_of"].notna()]
    if not len(forward) or not len(backward):
        return out_paths, placed, candidates
    named_count = backward.groupby(["path", "grad_of"]).size().to_dict()
    forward_count = forward.groupby(["path", "type"]).size().to_dict()
    cells_by_key: dict[tuple, set] = {}   # (type, layer) or (type, shape) -> forward Cells
    for path, op_type, tensors in forward[["path", "type", "tensors"]].drop_duplicates().itertuples(index=False):
        for key in _tensor_keys(tensors, forward=True):
            cells_by_key.setdefault((op_type, key), set()).add(path)
    forward_types = sorted(forward["type"].unique())
    questions = backward[["grad_of", "path", "tensors"]].drop_duplicates()
    answers = {}
    for primitive, named, tensors in questions.itertuples(index=False):
        types = [t for t in forward_types if t.startswith(primitive)]
        answers[(primitive, named, tensors)] = _placement(primitive, named, _tensor_keys(tensors), types,
                                                          cells_by_key, forward_count, named_count)
    keyed = pd.Series(list(zip(backward["grad_of"], backward["path"], backward["tensors"])), index=backward.index)
    answered = keyed.map(answers)
    out_paths[backward.index] = [answer[0] for answer in answered]
    placed[backward.index] = [answer[1] for answer in answered]
    for row, answer in zip(backward.index, answered):
        candidates[row] = answer[2]
    return out_paths, placed, candidates


def _tensor_keys(tensors: str, forward: bool = False) -> tuple:
    """What a kernel's tensors are matched by: its conv layer identity (`layer ...`); a matrix product's pair of
    tensors (a gradient's own inputs; a forward call's, the pairs its gradients read: matmul_gradient_pairs);
    else its shapes."""
    if tensors.startswith("layer "):
        return (tensors,)
    if tensors.startswith(MATMUL_TENSORS):
        shapes = tuple(shape for shape in parse_shapes(tensors[len(MATMUL_TENSORS):]) if len(shape) >= 2)[:2]
        if len(shapes) < 2:
            return ()
        return matmul_gradient_pairs(*shapes) if forward else (tuple(sorted(shapes)),)
    return _shapes_key(tensors)


@functools.lru_cache(maxsize=1 << 12)
def matmul_gradient_pairs(first: tuple[int, ...], second: tuple[int, ...]) -> tuple:
    """The input pairs (each sorted) that the two gradient calls of a matrix product of `first` and `second` read:
    the output's gradient with the second input (the first's gradient) and with the first (the second's). The
    output is [..., M, N] for every transposition of the two inputs whose inner sizes agree (the files do not say
    which was used); leading (batch) dimensions are the longer input's."""
    batch = first[:-2] if len(first) >= len(second) else second[:-2]
    pairs = set()
    for m, k in ((first[-2], first[-1]), (first[-1], first[-2])):
        for k_other, n in ((second[-2], second[-1]), (second[-1], second[-2])):
            if k == k_other:
                output = (*batch, m, n)
                pairs.add(tuple(sorted((output, second))))
                pairs.add(tuple(sorted((output, first))))
    return tuple(sorted(pairs))


def _placement(primitive: str, named: str, tensors: tuple, types: list[str], cells_by_key: dict,
               forward_count: dict, named_count: dict) -> tuple[str, str, tuple[str, ...]]:
    """(Cell, how, candidate Cells) for the backward kernels of `primitive` named under `named` that read
    `tensors`."""
    keys = [(t, key) for t in types for key in tensors]
    cells_of = sorted(set().union(*(cells_by_key.get(key, set()) for key in keys)))
    if not cells_of:
        return named, "named", (named,)
    forward_here = sum(forward_count.get((named, t), 0) for t in types)
    if primitive in MATMUL_TYPES:
        forward_here *= MATMUL_GRADIENTS_PER_CALL
    if named in cells_of and named_count[(named, primitive)] <= forward_here:
        return named, "named", (named,)
    if len(cells_of) == 1:
        return cells_of[0], "moved", (cells_of[0],)
    return common_ancestor(cells_of), "shared", tuple(cells_of)


def common_ancestor(paths: list[str]) -> str:
    """The deepest Cell path every one of `paths` lies in (a path is in itself); NO_CELL where they share none."""
    parts = [path.split("/") for path in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    return "/".join(common) if common else NO_CELL

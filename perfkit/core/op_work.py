"""FLOPs from op input shapes: how much work each Conv2D, MatMul and BatchNorm op of a run does.

The files record no FLOPs; they record input shapes (framework_raw / cpu_framework / kernel_details), from which
the work of the dense and normalisation ops follows. `op_flops(run.ops)` gives one row per op whose work the shapes
determine; the advisor's kernel_efficiency rule compares the rates of kernels doing the same work with it, and the
view layer finds the ops of a kernel group (`Conv2DBackpropFilter 3x3`) with it.

>>> work = op_flops(run.ops)                                 # doctest: +SKIP
>>> work["flops"].sum()                                      # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math

import pandas as pd

# Op types whose FLOPs follow from their input shapes, grouped into families whose members do comparable work:
# a conv layer's forward, input-gradient and filter-gradient kernels do the same multiply-adds, so their GFLOP/s
# should be close. BatchNorm is memory-bound: compared only with BatchNormGrad, by per-element arithmetic
# (forward train: mean 1, variance 3, normalise 2, scale+shift 2; backward ~ 10 with its two reductions).
DENSE_TYPES = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MatMul")


BATCHNORM_FLOPS_PER_ELEMENT = {"BatchNorm": 8, "BatchNormGrad": 10}


# op_flops' columns: op name and type; group (type and kernel size: `Conv2D 3x3`); family (which groups do
# comparable work: "dense" or "batchnorm"); flops over the run; total_ms; layer (the work's identity: a conv
# layer's forward and gradient kernels share it); reduction (a conv's multiply-adds per output element, NaN
# for the others); calls.
OP_FLOPS_COLUMNS = ["name", "type", "group", "family", "flops", "total_ms", "layer", "reduction", "calls"]


# A shape with a dimension past MAX_DIM (`1e400`, `inf` in a damaged file) or with more dimensions than MindSpore's
# tensors have is no tensor's: it reads as unknown, so that every FLOP count stays a finite float (at most
# MAX_DIM ** MAX_DIMS = 2**320; a product of such shapes as Python ints would overflow float()).
MAX_DIM = 2**40
MAX_DIMS = 8


def parse_shapes(text) -> tuple[tuple[int, ...], ...]:
    """An op's input shapes from the files' text (`32,3,224,224;64,3,7,7` -> ((32, 3, 224, 224), (64, 3, 7, 7)));
    () where there is no text. A shape that is not a list of whole numbers within MAX_DIM, or of more than MAX_DIMS,
    reads as ()."""
    return _parse_shape_text(text) if isinstance(text, str) else ()


@functools.lru_cache(maxsize=1 << 16)
def _parse_shape_text(text: str) -> tuple[tuple[int, ...], ...]:
    """parse_shapes of a string, cached: a million ops share a few hundred shape strings."""
    shapes = []
    for part in text.split(";"):
        dims = [d for d in part.replace("[", "").replace("]", "").split(",") if d.strip()]
        try:
            numbers = [float(d) for d in dims]
        except ValueError:
            numbers = None
        if numbers is None or len(numbers) > MAX_DIMS or not all(abs(n) <= MAX_DIM for n in numbers):
            shapes.append(())  # abs(nan) <= MAX_DIM is False too
        else:
            shapes.append(tuple(int(n) for n in numbers))
    return tuple(shapes)


def unbounded_shapes(texts) -> int:
    """How many of the distinct shape texts `texts` hold a list of numbers that parse_shapes refuses for its size
    (a dimension not finite or past MAX_DIM, more than MAX_DIMS dimensions): what a reader's screening says."""
    return sum(isinstance(text, str) and any(
        not shape and _numbers(part) for part, shape in zip(text.split(";"), _parse_shape_text(text)))
        for text in set(texts))


def _numbers(part: str) -> bool:
    """Whether a shape's text is a non-empty list of numbers (NaN is none)."""
    dims = [d for d in part.replace("[", "").replace("]", "").split(",") if d.strip()]
    try:
        return bool(dims) and all(float(d) == float(d) for d in dims)
    except ValueError:
        return False


def cell_name(op_name: str) -> str:
    """The name of the cell an op runs in, gradient scopes stripped: `A/conv2-Conv2d/Conv2D-op0` and
    `Gradients/A/conv2-Conv2d/Grad_Conv2D/Conv2DBackpropFilter-op6` both give `conv2-Conv2d`; "" for an op
    name without a scope."""
    parts = op_name.split("/")[:-1]
    while parts and parts[-1].lower().startswith("grad"):
        parts.pop()
    return parts[-1] if parts else ""


def matmul_flops(shapes) -> float | None:
    """FLOPs of one MatMul call (2*M*K*N) from its two 2-D input shapes, whichever of them is transposed;
    None when the shapes do not determine it."""
    if len(shapes) < 2 or len(shapes[0]) != 2 or len(shapes[1]) != 2:
        return None
    (a0, a1), (b0, b1) = shapes[0], shapes[1]
    for m, k, kb, n in ((a0, a1, b0, b1), (a0, a1, b1, b0), (a1, a0, b0, b1), (a1, a0, b1, b0)):
        if k == kb:
            return 2.0 * m * k * n
    return None


def batchnorm_flops(op_type: str, shapes) -> float | None:
    """FLOPs of one BatchNorm or BatchNormGrad call: elements of its first input times the per-element
    arithmetic (BATCHNORM_FLOPS_PER_ELEMENT); None without a shape."""
    if op_type not in BATCHNORM_FLOPS_PER_ELEMENT or not shapes or not shapes[0]:
        return None
    return float(math.prod(shapes[0])) * BATCHNORM_FLOPS_PER_ELEMENT[op_type]


def conv_flops(rows: pd.DataFrame) -> dict[str, tuple[float, str, str, int]]:
    """Per conv op (by name) whose work the shapes determine: (FLOPs of one call, kernel size `3x3`, the
    layer's identity, multiply-adds per output element). `rows`: ops with name, type, input_shapes.

    Forward Conv2D(x, w), Conv2DBackpropInput(dout, w, size) and Conv2DBackpropFilter(dout, x, size) of one
    layer do the same multiply-adds, 2*N*Cout*Hout*Wout*Cin/g*kh*kw, but each shows only two of x, w, dout.
    The missing one is looked up among the other kernels by shape: the output size (stride and padding are not
    recorded) from gradient kernels with the same weight or input, the filter from forward convs with the same
    input and output; where shapes leave a choice, the cell name (`conv2-Conv2d`) decides (scope names alone
    do not: graph mode files reused cells' gradients under the first instance's scope), else the op is left out.
    """
    convs = []
    for name, op_type, shapes in zip(rows["name"].tolist(), rows["type"].tolist(), rows["input_shapes"].tolist()):
        inputs = parse_shapes(shapes)
        if len(inputs) >= 2 and len(inputs[0]) == 4 and len(inputs[1]) == 4:
            convs.append((name, op_type, inputs[0], inputs[1]))
    out_by_weight: dict[tuple, set] = {}
    out_by_input: dict[tuple, set] = {}
    for _, op_type, first, second in convs:
        if op_type == "Conv2DBackpropInput":                  # (dout, w)
            out_by_weight.setdefault((first[0], second), set()).add(first)
        elif op_type == "Conv2DBackpropFilter":               # (dout, x)
            out_by_input.setdefault((second, first[1]), set()).add(first)
    layers: dict[str, tuple[tuple, tuple]] = {}               # op name -> (dout, w)
    weights_by_io: dict[tuple, dict[str, set]] = {}
    for name, op_type, first, second in convs:
        if op_type == "Conv2DBackpropInput":
            layers[name] = (first, second)
        elif op_type == "Conv2D":                             # (x, w)
            outs = out_by_weight.get((first[0], second)) or out_by_input.get((first, second[0])) or set()
            if len(outs) == 1:
                dout = next(iter(outs))
                layers[name] = (dout, second)
                weights_by_io.setdefault((first, dout), {}).setdefault(cell_name(name), set()).add(second)
    for name, op_type, first, second in convs:
        if op_type == "Conv2DBackpropFilter":
            by_cell = weights_by_io.get((second, first), {})
            candidates = set().union(*by_cell.values()) if by_cell else set()
            if len(candidates) > 1:
                candidates = by_cell.get(cell_name(name), set())
            if len(candidates) == 1:
                layers[name] = (first, next(iter(candidates)))
    flops = {}
    for name, (dout, weight) in layers.items():
        (n, c_out, h_out, w_out), (_, c_in_per_group, kh, kw) = dout, weight
        flops[name] = (2.0 * n * c_out * h_out * w_out * c_in_per_group * kh * kw, f"{kh}x{kw}",
                       f"{dout}|{weight}", c_in_per_group * kh * kw)
    return flops


def op_flops(ops: pd.DataFrame) -> pd.DataFrame:
    """FLOPs over the run of each op whose work follows from its input shapes, in OP_FLOPS_COLUMNS.
    `ops`: the run's op table (name, type, input_shapes, count, total_ms); pass all of it, since a conv's work
    follows from its gradients' shapes too."""
    rows = ops[ops["type"].isin(DENSE_TYPES + tuple(BATCHNORM_FLOPS_PER_ELEMENT))]
    conv = conv_flops(rows[rows["type"].str.startswith("Conv2D")])
    out = []
    # plain lists: iterating Arrow-backed columns row by row costs microseconds a value
    for name, op_type, shapes, count, total_ms in zip(*(rows[c].tolist() for c in (
            "name", "type", "input_shapes", "count", "total_ms"))):
        inputs = parse_shapes(shapes)
        reduction = math.nan
        if op_type in BATCHNORM_FLOPS_PER_ELEMENT:
            flops = batchnorm_flops(op_type, inputs)
            group, family, layer = op_type, "batchnorm", str(inputs[0]) if inputs else ""
        elif op_type == "MatMul":
            flops, group, family, layer = matmul_flops(inputs), "MatMul", "dense", str(sorted(inputs[:2]))
        elif name in conv:
            flops, kernel, layer, reduction = conv[name]
            group, family = f"{op_type} {kernel}", "dense"
        else:
            continue
        if flops:
            out.append({"name": name, "type": op_type, "group": group, "family": family,
                        "flops": flops * count, "total_ms": total_ms, "layer": layer, "reduction": reduction,
                        "calls": count})
    return pd.DataFrame(out, columns=OP_FLOPS_COLUMNS)

"""FLOPs from op input shapes: how much work each Conv2D, MatMul and BatchNorm op of a run does.

The files record no FLOPs; they record input shapes (framework_raw / cpu_framework / kernel_details), from which
the work of the dense and normalisation ops follows. `op_flops(run.ops)` gives one row per op whose work the shapes
determine; the advisor's kernel_efficiency rule compares the rates of kernels doing the same work with it, and the
view layer finds the ops of a kernel group (`Conv2DBackpropFilter 3x3`) with it.

>>> work = op_flops(run.ops)                                 # doctest: +SKIP
>>> gflops_per_s(work["flops"].sum(), work["total_ms"].sum())  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd

from .units import FLOP_PER_GFLOP, FLOP_PER_TFLOP, GFLOP_PER_TFLOP, HZ_PER_MHZ, MS_PER_S

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


def parse_shapes(text) -> tuple[tuple[int, ...], ...]:
    """An op's input shapes from the files' text (`32,3,224,224;64,3,7,7` -> ((32, 3, 224, 224), (64, 3, 7, 7)));
    () where there is no text. A shape that is not a list of numbers reads as ()."""
    return _parse_shape_text(text) if isinstance(text, str) else ()


@functools.lru_cache(maxsize=1 << 16)
def _parse_shape_text(text: str) -> tuple[tuple[int, ...], ...]:
    """parse_shapes of a string, cached: a million ops share a few hundred shape strings."""
    shapes = []
    for part in text.split(";"):
        dims = [d for d in part.replace("[", "").replace("]", "").split(",") if d.strip()]
        try:
            shapes.append(tuple(int(float(d)) for d in dims))
        except ValueError:
            shapes.append(())
    return tuple(shapes)


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


def tflops_per_s(flops, ms):
    """The rate of `flops` done in `ms` milliseconds, in TFLOP/s (numbers or pandas Series alike)."""
    return flops / ms * MS_PER_S / FLOP_PER_TFLOP


def gflops_per_s(flops: float, ms: float) -> float:
    """The rate of `flops` done in `ms` milliseconds, in GFLOP/s."""
    return flops / ms / (FLOP_PER_GFLOP / MS_PER_S)


# ---------------------------------------------------------------------------------------------------------
# Peaks: what a chip could do, for model FLOPs utilisation (MFU = achieved model FLOP/s / peak).

@dataclass(frozen=True)
class Peak:
    """A chip's peak rate for one compute dtype, with where the number comes from and how it follows."""

    chip: str
    dtype: str
    tflops_per_s: float
    source: str
    derivation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"chip": self.chip, "dtype": self.dtype, "tflops_per_s": self.tflops_per_s, "source": self.source,
                "derivation": self.derivation}


# Vendor peaks, dense (no structured sparsity), TFLOP/s, by chip name as the files write it (NPU_INFO, GPU
# names) and compute dtype. Ascend 910B variants (910B1..B4) are left out on purpose: Huawei publishes no
# per-variant peak, and the numbers quoted around differ by 30 %: MFU there is "unknown" unless a peak is given.
CHIP_PEAKS: dict[str, dict[str, tuple[float, str]]] = {
    "Ascend910A": {"float16": (256.0, "Huawei, Ascend 910 launch (2019-08-23): 256 TFLOPS FP16")},
    "A100": {dtype: (312.0, "NVIDIA A100 datasheet: FP16/BF16 Tensor Core 312 TFLOPS dense")
             for dtype in ("float16", "bfloat16")} | {
        "float32": (19.5, "NVIDIA A100 datasheet: FP32 19.5 TFLOPS (non-tensor)")},
    "V100": {"float16": (125.0, "NVIDIA V100 SXM2 datasheet: Tensor Core 125 TFLOPS"),
             "float32": (15.7, "NVIDIA V100 SXM2 datasheet: FP32 15.7 TFLOPS")},
    "H100": {dtype: (989.4, "NVIDIA H100 SXM datasheet: FP16/BF16 Tensor Core 1,979 TFLOPS with sparsity, "
                            "989.4 dense") for dtype in ("float16", "bfloat16")} | {
        "float32": (67.0, "NVIDIA H100 SXM datasheet: FP32 67 TFLOPS")},
}
CHIP_ALIASES = {"Ascend910": "Ascend910A", "Ascend910ProA": "Ascend910A", "Ascend910PremiumA": "Ascend910A"}


def chip_peak(chip: str | None, dtype: str | None) -> Peak | None:
    """The vendor peak of `chip` (`Ascend910A`, `NVIDIA A100-SXM4-80GB`) for `dtype`; None where unknown."""
    if not chip or not dtype:
        return None
    name = CHIP_ALIASES.get(chip, chip)
    for key, by_dtype in CHIP_PEAKS.items():
        if name == key or (not key.startswith("Ascend") and key in re.split(r"[\s\-_]+", name.upper())):
            if dtype in by_dtype:
                tflops, source = by_dtype[dtype]
                return Peak(chip, dtype, tflops, source, f"vendor figure for {key}, {dtype}")
    return None


# A CPU core's float32 FLOPs per cycle: vector lanes x 2 (a fused multiply-add is two FLOPs) x FMA units.
# Two FMA units per core: Intel since Haswell (Xeon Gold/Platinum for AVX-512), AMD since Zen 2; AMD's Zen 4
# runs AVX-512 on 256-bit units, so its lanes count as AVX2's. /proc/cpuinfo says none of this: an assumption,
# stated in every derivation.
FMA_UNITS = 2


# The /proc/cpuinfo flags a CPU peak follows from (cpu_facts keeps only these).
CPU_FLAGS = ("fma", "avx2", "avx512f")


def cpu_facts(cpuinfo: str) -> dict[str, Any] | None:
    """What a CPU peak follows from, read from the text of /proc/cpuinfo: cpu_model, vendor, cpu_mhz, cores (the
    host's physical cores: distinct physical id / core id pairs), flags (of CPU_FLAGS); None where the text lacks
    the clock or the flags. `perfkit profile` records these in its manifest (`host`)."""
    blocks = [block for block in cpuinfo.split("\n\n") if block.strip()]
    fields = [dict((key.strip(), value.strip()) for key, _, value in
                   (line.partition(":") for line in block.splitlines()) if _) for block in blocks]
    if not fields or "flags" not in fields[0] or "cpu MHz" not in fields[0]:
        return None
    first = fields[0]
    try:
        mhz = float(first["cpu MHz"])
    except ValueError:
        return None
    flags = set(first["flags"].split())
    return {"cpu_model": first.get("model name", "CPU"), "vendor": first.get("vendor_id", ""), "cpu_mhz": mhz,
            "cores": len({(f.get("physical id", "0"), f.get("core id", str(i))) for i, f in enumerate(fields)}),
            "flags": [flag for flag in CPU_FLAGS if flag in flags]}


def cpu_peak_of(facts: Any, source: str) -> Peak | None:
    """A CPU's float32 peak from cpu_facts' dict: cores x lanes x 2 (FMA) x FMA_UNITS x clock, with its
    derivation; None where the facts are missing, malformed (a manifest is input) or the CPU has no FMA."""
    if not isinstance(facts, dict):
        return None
    mhz, cores, flags = facts.get("cpu_mhz"), facts.get("cores"), facts.get("flags")
    if (not isinstance(mhz, (int, float)) or not math.isfinite(mhz) or not 0 < mhz < 1e5
            or not isinstance(cores, int) or isinstance(cores, bool) or not 0 < cores < 1 << 20
            or not isinstance(flags, list)):
        return None
    amd = facts.get("vendor") == "AuthenticAMD"
    if "avx512f" in flags and not amd:
        bits, isa = 512, "AVX-512"
    elif "avx2" in flags and "fma" in flags:
        bits, isa = 256, "AVX2+FMA" + (" (AMD runs AVX-512 on 256-bit units)" if "avx512f" in flags else "")
    else:
        return None  # no FMA: the lanes x 2 model does not hold
    lanes = bits // 32
    tflops = cores * lanes * 2 * FMA_UNITS * mhz * HZ_PER_MHZ / FLOP_PER_TFLOP
    return Peak(str(facts.get("cpu_model") or "CPU"), "float32", tflops, source,
                f"{cores} cores x {lanes} float32 lanes ({isa}) x 2 (FMA) x {FMA_UNITS} FMA units per core "
                f"(assumed) x {mhz:.0f} MHz = {tflops * GFLOP_PER_TFLOP:.1f} GFLOP/s")


def cpu_peak(cpuinfo: str) -> Peak | None:
    """cpu_peak_of the facts in the text of /proc/cpuinfo."""
    return cpu_peak_of(cpu_facts(cpuinfo), "/proc/cpuinfo (cpu MHz, flags, core ids)")


def host_cpu_facts() -> dict[str, Any] | None:
    """This host's cpu_facts; None off Linux."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            return cpu_facts(file.read())
    except OSError:
        return None


def host_cpu_peak() -> Peak | None:
    """This host's CPU peak; None off Linux. Valid for runs made on this host."""
    return cpu_peak_of(host_cpu_facts(), "/proc/cpuinfo of this host (cpu MHz, flags, core ids)")

"""FLOP rates and peaks: the TFLOP/s of work done in a time, and the peak a chip or this host's CPU reaches
(the Cells' MFU and the kernel_efficiency rule divide by it). The work itself: core/op_work.py."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..core.units import FLOP_PER_GFLOP, FLOP_PER_TFLOP, GFLOP_PER_TFLOP, HZ_PER_MHZ, MS_PER_S


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
    host's physical cores: distinct physical id / core id pairs), cpus (logical CPUs: what MindSpore's dataset
    worker limit counts, core/host.py), flags (of CPU_FLAGS); None where the text lacks the clock or the flags.
    `perfkit profile` records these in its manifest (`host`)."""
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
            "cpus": len(fields),
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

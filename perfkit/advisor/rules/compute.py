"""Compute rules: what the device spends its time on, and how to make it faster or busier.

amp_level (Cast and fp32 ops that mixed precision moves), host_bound (a device idle while the host launches ops),
compute_bound (which op types take a compute-bound step), kernel_efficiency (a kernel group far slower than others
doing the same work, by perfkit.analysis.flops).
"""

from __future__ import annotations

import re

import pandas as pd

from ...analysis.flops import cpu_peak_of, gflops_per_s
from ...analysis.ledger import CAUSES_OF, bound, rank_parts
from ...analysis.measures import BATCHNORM_FAMILY, amp_from_ops, op_type_shares
from ...core.host import has_avx512
from ...core.model import Run
from ...core.units import FLOP_PER_GFLOP, GFLOP_PER_TFLOP, MS_PER_S
from ...core.op_work import op_flops
from ..change import Change
from ..finding import Finding, NotChecked, severity_for
from ..registry import device_name, gain_pct, is_torch, known_ms, percent, round_ms, rule, torch_device

# The ledger's compute causes: what a faster kernel or a lower precision wins back.
COMPUTE = CAUSES_OF["compute"]


# ---------------------------------------------------------------------------------------------------------
# amp_level

# The seed's fp32 ResNet-50 on Ascend: Cast + BatchNorm ~ 50 % of AI Core time before amp_level O3.
# A healthy fp16 ResNet-50 still spends ~15-25 % in BatchNorm, so 30 % separates "AMP would move this" from that.
AMP_MIN_SHARE = 0.30
# Moving an op from fp32 to fp16 halves the bytes it moves; BatchNorm and Cast are memory-bound, so ~half their time.
FP16_TIME_FACTOR = 0.5
GPU_FP32_COMPUTE = re.compile(r"^(Conv2D.*|MatMul|BatchMatMul)$")  # tensor-core eligible at fp16


def _is_batchnorm(op_type: str) -> bool:
    return bool(BATCHNORM_FAMILY.match(op_type))


# float16 on a CPU: oneDNN has no fast float16 kernels, so every level above O0 runs slower, by at least the Cast
# ops it adds (the real CPU runs tests/runs/cpu_2_10_amp_o0/o2/o3: O0 28.7 ms a step, O2 82.6, O3 84.2).
CPU_CAST_MIN_SHARE = 0.05


@rule("amp_level", needs=("device", "op_types"), claims=COMPUTE)
def amp_level(run: Run) -> list[Finding]:
    device = device_name(run)
    if device == "CPU":
        return _cpu_amp_level(run)
    level = (run.meta.amp_level or "").upper()
    if level == "O3" or (not level and run.meta.compute_dtype in ("float16", "bfloat16")):
        return []
    # Precision unknown (no amp_level recorded, no op dtypes: the seed's own files): the Cast + BatchNorm share
    # alone is the evidence the seed's engineer concluded O3 from; the finding says it is conditional.
    known = bool(level) or run.meta.compute_dtype is not None
    per_type = run.op_types.groupby("type", observed=True)["total_ms"].sum()
    op_ms = float(per_type.sum())
    cast_ms = float(per_type.get("Cast", 0.0))
    bn_ms = float(sum(ms for t, ms in per_type.items() if _is_batchnorm(str(t))))
    # On Ascend Conv/MatMul always run in fp16 (hence the Casts); on GPU they run fp32, missing the tensor
    # cores, only at O0 (O1 and O2 already put them in fp16).
    convs_fp32 = device == "GPU" and (level == "O0" or (not level and run.meta.compute_dtype == "float32"))
    compute_ms = float(sum(ms for t, ms in per_type.items() if GPU_FP32_COMPUTE.match(str(t)))) \
        if convs_fp32 else 0.0
    movable_ms = cast_ms + bn_ms + compute_ms
    share = movable_ms / op_ms
    if share < AMP_MIN_SHARE:
        return []
    # Casts vanish except at the network input and the loss; the rest runs at fp16 speed.
    saved_ms = cast_ms + FP16_TIME_FACTOR * (bn_ms + compute_ms)
    gain = gain_pct(run, saved_ms, op_ms)
    evidence = {"cast_bn_share_of_device_pct": percent((cast_ms + bn_ms) / op_ms),
                "cast_share_of_device_pct": percent(cast_ms / op_ms),
                "batchnorm_share_of_device_pct": percent(bn_ms / op_ms)}
    if convs_fp32:
        evidence["fp32_conv_matmul_share_of_device_pct"] = percent(compute_ms / op_ms)
    suggested = "O2" if device == "GPU" else "O3"  # O3 on GPU risks fp16 BatchNorm accuracy; O2 keeps it fp32
    biggest = max((("Cast", cast_ms), ("BatchNorm", bn_ms), ("Conv2D/MatMul", compute_ms)), key=lambda p: p[1])[0]
    precision = level or run.meta.compute_dtype
    title = (f"Precision {precision}: Cast and fp32 ops AMP would move take {percent(share):.1f} % of device time"
             if known else f"Cast and BatchNorm take {percent(share):.1f} % of device time: if the network is not "
                           f"already at amp_level {suggested}, AMP would move most of it (precision not recorded)")
    if is_torch(run):
        scaler = "torch.npu.amp.GradScaler" if torch_device(run) == "npu" else "torch.amp.GradScaler"
        action = (f"with torch.autocast(device_type='{torch_device(run)}', dtype=torch.bfloat16): around the forward "
                  f"pass (or torch.float16 with {scaler}), keeping BatchNorm in float32")
    else:
        action = f'Model(net, loss_fn, optimizer, amp_level="{suggested}")'
    return [Finding(
        id="amp_level", severity=severity_for(gain),
        title=title, evidence=evidence, action=action if known else f"if not already {suggested}: {action}",
        target=biggest, est_gain_pct=gain, change=None if is_torch(run) else Change("amp_level", suggested))]


def _cpu_amp_level(run: Run) -> list[Finding]:
    """A CPU run in float16 (AMP O1-O3, from its Cast ops where the level is not recorded): O0 is faster."""
    level = (run.meta.amp_level or "").upper()
    if level == "O0" or run.meta.compute_dtype == "float32":
        raise NotChecked("CPU has no fast float16 kernels and this run is float32 (amp_level O0): nothing to move")
    inferred = amp_from_ops(run)
    shares = op_type_shares(run)
    cast_share = float(shares.loc[shares["type"] == "Cast", "share"].sum())
    if not level and (inferred is None or inferred["level"] == "O0"):
        raise NotChecked("CPU has no fast float16 kernels; mixed precision would not speed it up, and this run "
                         "has no Cast op (float32)")
    if not level and cast_share < CPU_CAST_MIN_SHARE:
        return []
    gain = percent(cast_share)
    precision = (f"amp_level {level}" if level
                 else f"float16 (AMP {inferred['level']}: {inferred['cast_calls_per_step']:.0f} Cast ops a step)")
    return [Finding(
        id="amp_level", severity=severity_for(gain),
        title=f"{precision} on a CPU: O0 is faster on CPU (no fast float16 kernels); the Casts alone take "
              f"{gain:.1f} % of op time",
        evidence={"cast_share_of_device_pct": gain} | (
            {"cast_calls_per_step": round(inferred["cast_calls_per_step"], 1)} if inferred else {}),
        action='Model(net, loss_fn, optimizer, amp_level="O0") (the default: float32), or leave out '
               "auto_mixed_precision / .to_float(ms.float16) on CPU",
        target="Cast", est_gain_pct=gain, change=Change("amp_level", "O0"))]


# ---------------------------------------------------------------------------------------------------------
# host_bound

# "The device is idle most of the step span with no data-queue evidence" (issue 14): half the step.
HOST_BOUND_MIN_SHARE = 0.5


@rule("host_bound", needs=("steps",), claims=("host_dispatch", "host_launch"))
def host_bound(run: Run) -> list[Finding]:
    parts = rank_parts(run)
    if not len(parts) or (run.meta.mode == "pynative" and not is_torch(run)):
        return []  # a MindSpore PyNative step's host time is graph_mode's (rules/mode.py), with the same change
    # the feed-mode transfer is sink_mode's, the work between steps host_loop's
    host_ms = float((parts["host"] - parts["transfer"] - parts["loop"]).mean())
    total = float(parts["total"].mean())
    if not total > 0 or parts["data"].sum() > 0 or host_ms / total < HOST_BOUND_MIN_SHARE:
        return []
    share = percent(host_ms / total)
    busy_ms = float(parts["compute"].mean())
    evidence = {"host_idle_share_pct": share, **known_ms(host_idle_ms=host_ms, device_busy_ms=busy_ms, step_ms=total)}
    if is_torch(run):
        title = f"Host-bound: the device is idle {share:.1f} % of the step while ops are dispatched one by one"
        action = ("model = torch.compile(model) (torch_npu: the torchair backend) so the step runs as a graph; "
                  "a larger batch gives each launched kernel more work")
    else:
        kind = "launch-bound" if device_name(run) == "GPU" else "host-bound"
        title = (f"{kind[0].upper()}{kind[1:]}: the {run.meta.device or 'device'} runs ops only "
                 f"{percent(busy_ms / total):.1f} % of the step; it waits for the host to launch the next one")
        action = ("a larger batch so each kernel does more work per launch; model.train(..., dataset_sink_mode=True) "
                  "so whole steps run on the device without a launch from Python each")
    return [Finding(id="host_bound", severity=severity_for(share), title=title, evidence=evidence, action=action,
                    target=None, est_gain_pct=share)]


# ---------------------------------------------------------------------------------------------------------
# compute_bound

# The op types named: the largest ones until they cover this share of op time, at most COMPUTE_TOP_TYPES.
COMPUTE_TYPES_COVER = 0.5
COMPUTE_TOP_TYPES = 5


@rule("compute_bound", needs=("steps", "op_types"))
def compute_bound(run: Run) -> list[Finding]:
    """Where the step's bound is compute: which op types take the time, and what to try on this device."""
    where = bound(run)
    if where.kind != "compute":
        return []
    shares = op_type_shares(run)
    if not len(shares):
        raise NotChecked("no op runs in the steps the means cover: no op type to name")
    covered = shares["share"].cumsum()
    top = shares[(covered.shift(fill_value=0.0) < COMPUTE_TYPES_COVER)].head(COMPUTE_TOP_TYPES)
    device = device_name(run)
    if is_torch(run):
        action = (f"with torch.autocast(device_type='{torch_device(run)}', dtype=torch.bfloat16) if the model runs "
                  "float32; "
                  "check the top types' shapes (channels in multiples of 16)")
    elif device == "CPU":
        isa = cpu_isa_advice(run)
        action = (f"{isa + '; ' if isa else ''}a larger batch per step; the ops above are where a smaller or fused "
                  "network gains")
    else:
        action = ("ms.set_context(enable_graph_kernel=True) to fuse small ops; amp_level O2/O3 if the network runs "
                  "float32; channels in multiples of 16 for the top types")
    listed = ", ".join(f"{row.type} {percent(row.share):.1f} %" for row in top.itertuples())
    return [Finding(
        id="compute_bound", severity="low",
        title=f"Compute-bound ({percent(where.share('compute')):.1f} % of the step computes): {listed} of op time",
        evidence={"compute_share_of_step_pct": percent(where.share("compute")),
                  **{f"{row.type}_share_pct": percent(row.share) for row in top.itertuples()}},
        action=action, target=str(top["type"].iloc[0]) if len(top) else None, est_gain_pct=None)]


# ---------------------------------------------------------------------------------------------------------
# kernel_efficiency

# The work of each op comes from perfkit.analysis.flops (Conv2D and its gradients, MatMul, BatchNorm and its gradient).
# Calibrated on 7 real MindSpore 2.10 CPU ResNet-50 runs (docs/advice.md, the kernel_efficiency row): healthy runs
# (AVX2 and default ISA, 32 and 64 px, batch 8 and 16) put their slowest big group at >= 0.33x the best
# reference; oneDNN's reference kernel is reported to run forward 3x3 Conv2D ~100x (0.01x) slower than its
# filter gradient. 0.1 ("10x slower than comparable work") leaves ~3x margin on the healthy side and 10x on the
# broken one, and keeps the ~2x uncertainty of the BatchNorm per-element counts harmless.
KERNEL_SLOW_RATIO = 0.1
# A group must take this share of op time to be worth a finding (msprof-analyze: 5 % of step is an issue)...
KERNEL_MIN_TIME_SHARE = 0.05
# ...and a reference group must do this share of its family's FLOPs, so a tiny op's lucky timing sets no bar.
KERNEL_MIN_REFERENCE_FLOPS_SHARE = 0.05
# A call under 10 MFLOP takes ~0.1 ms at CPU speeds, where the ~10-50 us a kernel launch or oneDNN primitive
# lookup costs is a large part: its rate measures overhead, not the kernel.
KERNEL_MIN_CALL_FLOPS = 1e7
# A conv whose multiply-adds per output (Cin/groups * kh * kw) are fewer than this does not fill a vector unit
# (a first layer on 3 colour channels: 27); oneDNN and cuDNN run it far below their peak by design.
KERNEL_MIN_REDUCTION = 32
# One op instance, called once, holding more than half of a group's time is a first call or a compile.
KERNEL_ONE_CALL_SHARE = 0.5
# oneDNN's reference convolution runs at ~0.02-0.1 % of the CPU's float32 peak (real MindSpore 2.10 runs on a
# 2-core AVX-512 host of 332.8 GFLOP/s: tests/runs/cpu_2_10_amp_o0_avx512's 3x3 Conv2D 0.25 GFLOP/s; a 3-channel
# first conv 0.06 GFLOP/s), its jit kernels at 3-23 % of it on the same host (cpu_2_10_amp_o0, the sample runs; ~1 %
# under 3x load). Below this fraction a convolution is the reference kernel whatever its depth, and needs no faster
# group of the same run to tell (a net whose every conv takes the reference path has none).
KERNEL_REFERENCE_PEAK_FRACTION = 0.005


# What oneDNN does on AVX-512 CPUs (MindSpore 2.10 CPU, docs/advice.md, the kernel_efficiency row): for 3x3
# convolutions it may pick its reference kernel, far slower than its AVX2 one; ONEDNN_MAX_CPU_ISA=AVX2 caps it.
ISA_CAP = "AVX2"
SET_ISA_CAP = (f"export ONEDNN_MAX_CPU_ISA={ISA_CAP} before starting Python (or os.environ['ONEDNN_MAX_CPU_ISA'] = "
               f"'{ISA_CAP}' before import mindspore)")


def _is_convolution(types: pd.Series) -> pd.Series:
    """Which op types are convolutions, forward or gradient (Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter...)."""
    return types.astype(str).str.startswith("Conv")


def _runs_no_convolution(run: Run) -> bool:
    """The run's op types are known and none is a convolution."""
    types = run.op_types
    return bool(len(types)) and not _is_convolution(types["type"]).any()


def cpu_isa_advice(run: Run) -> str | None:
    """What to set of oneDNN's ISA on the host that ran the run (its recorded facts, never this machine's): the
    AVX2 cap where that CPU has AVX-512 and the run did not set it, a conditional one where the run records no
    host, nothing where the CPU has no AVX-512 (its best ISA is oneDNN's default), the cap is set, or the run runs
    no convolution (the reference kernels the cap avoids are oneDNN's convolutions)."""
    if str(run.meta.env.get("ONEDNN_MAX_CPU_ISA", "")).upper() == ISA_CAP or _runs_no_convolution(run):
        return None
    avx512 = has_avx512(run.meta.host)
    if avx512 is None:
        return (f"if the host has AVX-512 and the run did not cap the ISA (it records neither host facts nor its "
                f"environment): {SET_ISA_CAP}, so oneDNN uses its AVX2 kernels, not its slow reference convolutions")
    return f"{SET_ISA_CAP}: this AVX-512 host's oneDNN may otherwise pick slow reference convolutions" if avx512 \
        else None


def _kernel_action(run: Run, group: str) -> str:
    if device_name(run) == "CPU":
        isa = cpu_isa_advice(run)
        if isa:
            return isa
        return (f"Find the kernel oneDNN picks for {group} (ONEDNN_VERBOSE=1 prints it; `ref` is its reference "
                "kernel): an unusual layout, dtype or shape of its inputs, or an ISA cap (ONEDNN_MAX_CPU_ISA) too "
                "low for this CPU")
    return (f"Check the input format and dtype of {group}: Ascend kernels want channels in multiples of 16 "
            "(float16), GPU tensor cores float16 with channels in multiples of 8")


def _comparable(work: pd.DataFrame) -> pd.DataFrame:
    """The ops whose speed says something about their kernel: not tiny calls, not convs too shallow to fill
    the vector units."""
    per_call = work["flops"] / work["calls"].clip(lower=1)
    shallow = work["reduction"].notna() & (work["reduction"] < KERNEL_MIN_REDUCTION)
    return work[(per_call >= KERNEL_MIN_CALL_FLOPS) & ~shallow]


def _dominated_by_one_call(group: pd.DataFrame) -> bool:
    """One op instance called once holds most of the group's time: a first call or compile, not a slow kernel
    (compile_or_first_call's finding)."""
    once = group[group["calls"] <= 1]
    return bool(len(once)) and float(once["total_ms"].max()) > KERNEL_ONE_CALL_SHARE * float(group["total_ms"].sum())


def _rate(ops: pd.DataFrame) -> float:
    return gflops_per_s(float(ops["flops"].sum()), float(ops["total_ms"].sum()))


@rule("kernel_efficiency", needs=("op_shapes",), claims=COMPUTE)
def kernel_efficiency(run: Run) -> list[Finding]:
    """A kernel group far slower than the same work done by another group: the same layers (a conv layer's
    forward and its two gradients do the same multiply-adds; BatchNorm and its gradient read the same tensor)."""
    timed = op_flops(run.ops)
    timed = timed[timed["total_ms"] > 0]
    if not len(timed):
        raise NotChecked("no Conv2D / MatMul / BatchNorm op with usable input shapes")
    op_ms = float(run.ops["total_ms"].sum())
    work = _comparable(timed)
    findings = []
    for _, family in work.groupby("family"):
        family_flops = float(family["flops"].sum())
        groups = dict(tuple(family.groupby("group")))
        for name, slow in groups.items():
            slow_ms = float(slow["total_ms"].sum())
            if slow_ms / op_ms < KERNEL_MIN_TIME_SHARE or _dominated_by_one_call(slow):
                continue
            best = None  # (ratio, reference name, slow rate, reference rate) on the layers both groups run
            for reference_name, reference in groups.items():
                if reference_name == name:
                    continue
                layers = set(slow["layer"]) & set(reference["layer"])
                mine, theirs = slow[slow["layer"].isin(layers)], reference[reference["layer"].isin(layers)]
                if not layers or theirs["flops"].sum() < KERNEL_MIN_REFERENCE_FLOPS_SHARE * family_flops:
                    continue
                ratio = _rate(mine) / _rate(theirs)
                if best is None or ratio < best[0]:
                    best = (ratio, reference_name, _rate(mine), _rate(theirs))
            if best is None or best[0] >= KERNEL_SLOW_RATIO:
                continue
            ratio, reference_name, rate, reference_rate = best
            saved_ms = slow_ms * (1.0 - ratio)  # its time at the reference group's rate
            # never more than the share these ops take (of the step, and of all op time)
            gain = min(gain_pct(run, saved_ms, op_ms), percent(slow_ms / op_ms))
            findings.append(Finding(
                id="kernel_efficiency", severity=severity_for(gain),
                title=f"{name} runs at {rate:.2f} GFLOP/s, {1 / ratio:.0f}x slower than "
                      f"{reference_name} ({reference_rate:.2f} GFLOP/s) on the same layers' work",
                evidence={"gflops_per_s": round(rate, 3), "reference_gflops_per_s": round(reference_rate, 3),
                          "ratio_to_reference": round(float(ratio), 4),
                          "share_of_op_time_pct": percent(slow_ms / op_ms),
                          "total_ms": round_ms(slow_ms), "ops": int(len(slow))},
                action=_kernel_action(run, name), target=name, est_gain_pct=gain,
                change=Change("env", ISA_CAP, name="ONEDNN_MAX_CPU_ISA")
                if device_name(run) == "CPU" and cpu_isa_advice(run) else None))
    reported = {finding.target for finding in findings}
    return findings + _reference_convolutions(run, timed, op_ms, reported)


def _reference_convolutions(run: Run, work: pd.DataFrame, op_ms: float, reported: set[str]) -> list[Finding]:
    """Of `work` (op_flops' timed rows, every depth), the convolution groups of a CPU run whose recorded host has
    AVX-512 (the ISA uncapped) running below KERNEL_REFERENCE_PEAK_FRACTION of that host's float32 peak: oneDNN's
    reference kernels, even where no group of the run is faster to compare with. Their gain: the time they would
    take at that fraction of the peak."""
    if device_name(run) != "CPU" or not has_avx512(run.meta.host) or not cpu_isa_advice(run):
        return []
    peak = cpu_peak_of(run.meta.host, "the host perfkit profile recorded")
    if peak is None:
        return []
    floor = peak.tflops_per_s * GFLOP_PER_TFLOP * KERNEL_REFERENCE_PEAK_FRACTION
    convolutions = work[_is_convolution(work["type"])]
    findings = []
    for name, group in convolutions.groupby("group"):
        slow_ms, rate = float(group["total_ms"].sum()), _rate(group)
        if name in reported or slow_ms / op_ms < KERNEL_MIN_TIME_SHARE or rate >= floor:
            continue
        saved_ms = slow_ms - float(group["flops"].sum()) / (floor * FLOP_PER_GFLOP / MS_PER_S)
        gain = min(gain_pct(run, saved_ms, op_ms), percent(slow_ms / op_ms))
        findings.append(Finding(
            id="kernel_efficiency", severity=severity_for(gain),
            title=f"{name} runs at {rate:.2f} GFLOP/s, {percent(rate / (peak.tflops_per_s * GFLOP_PER_TFLOP))} % "
                  f"of this AVX-512 host's {peak.tflops_per_s * GFLOP_PER_TFLOP:.1f} GFLOP/s float32 peak: "
                  "oneDNN's reference convolution",
            evidence={"gflops_per_s": round(rate, 3), "peak_gflops_per_s": round(peak.tflops_per_s
                                                                                 * GFLOP_PER_TFLOP, 1),
                      "reference_kernel_below_gflops_per_s": round(floor, 3),
                      "share_of_op_time_pct": percent(slow_ms / op_ms), "total_ms": round_ms(slow_ms),
                      "ops": int(len(group))},
            action=cpu_isa_advice(run), target=name, est_gain_pct=gain,
            change=Change("env", ISA_CAP, name="ONEDNN_MAX_CPU_ISA")))
    return findings

"""Memory rules: device memory left unused (memory_headroom) or held by a fragmented pool (memory_fragmentation).
"""

from __future__ import annotations

from ...analysis.measures import framework_memory, memory_peaks
from ...core.model import Run
from ..change import Change
from ..finding import Finding, NotChecked
from ..registry import device_name, rule

# ---------------------------------------------------------------------------------------------------------
# memory_headroom

# Fire when the framework allocator's peak reserved memory is under this share of the capacity: the batch can
# then at least double before memory runs out (perfkit's own bar; the arithmetic in the finding says how far).
HEADROOM_MAX_USE = 0.5
# Size the batch to this share of the capacity, not all of it: the pool's fragmentation and the workspace
# kernels ask for at run time need room (MindSpeed's fragmentation guide sees 1-3 GB of 64 GB go that way).
HEADROOM_SAFETY = 0.9


@rule("memory_headroom", needs=("memory", "memory_capacity"))
def memory_headroom(run: Run) -> list[Finding]:
    capacity = float(run.meta.memory_capacity_mb)
    samples = framework_memory(run)
    peaks = memory_peaks(run)
    rank = max(peaks, key=lambda r: peaks[r]["peak_allocated_mb"] or 0.0)  # the rank memory binds first
    peak = peaks[rank]["peak_allocated_mb"]
    used = peaks[rank]["peak_reserved_mb"] or peak
    if used >= HEADROOM_MAX_USE * capacity:
        return []
    # What stays allocated between steps (weights, gradients, optimizer state) does not grow with the batch;
    # the rest (activations, workspace) does, in proportion.
    static = float(samples.loc[samples["rank"] == rank, "allocated_mb"].min())
    per_batch = peak - static
    if per_batch <= 0:
        raise NotChecked("memory does not rise during the steps: the batch's share of it cannot be told")
    factor = (HEADROOM_SAFETY * capacity - static) / per_batch
    batch = run.meta.config.get("batch_size") if isinstance(run.meta.config, dict) else None
    evidence = {"peak_allocated_mb": round(peak, 1), "peak_reserved_mb": round(used, 1),
                "capacity_mb": round(capacity, 1), "static_mb": round(static, 1),
                "per_batch_mb": round(per_batch, 1), "batch_growth_factor": round(factor, 2)}
    arithmetic = (f"({HEADROOM_SAFETY:g} x {capacity:,.0f} MB capacity - {static:,.1f} MB that stays between steps) "
                  f"/ {per_batch:,.1f} MB the batch needs = {factor:.1f}x")
    if isinstance(batch, int) and batch > 0:
        fitting = int(batch * factor)
        evidence |= {"batch_size": batch, "batch_size_that_fits": fitting}
        action = (f"dataset.batch({fitting}, ...) fits in memory (batch {batch} x {arithmetic}); raise the batch "
                  "towards it, with the learning rate scaled, so each step does more work per fixed cost")
        change = Change("batch_size", fitting) if fitting > batch else None
    else:
        action = (f"The batch can grow about {factor:.1f}x before memory runs out ({arithmetic}): "
                  "dataset.batch(that size, ...), with the learning rate scaled")
        change = None
    where = "host" if device_name(run) == "CPU" else "device"
    return [Finding(
        id="memory_headroom", severity="low",
        title=f"The peak uses {100 * used / capacity:.1f} % of the {where} memory: the batch can grow "
              f"{factor:.1f}x", evidence=evidence, action=action,
        target=f"rank {rank}" if len(peaks) > 1 else None, est_gain_pct=None, change=change)]


# ---------------------------------------------------------------------------------------------------------
# memory_fragmentation

# MindSpeed's memory-fragmentation guide: a gap of more than 1 GB between reserved and allocated memory means
# the pool is badly fragmented. The ratio keeps a big model's small relative gap out.
FRAGMENTATION_MIN_GAP_MB = 1024.0
FRAGMENTATION_MIN_RATIO = 1.5


@rule("memory_fragmentation", needs=("memory",))
def memory_fragmentation(run: Run) -> list[Finding]:
    peaks = memory_peaks(run)
    worst = max(peaks, key=lambda r: (peaks[r]["peak_reserved_mb"] or 0.0) - (peaks[r]["peak_allocated_mb"] or 0.0))
    allocated, reserved = peaks[worst]["peak_allocated_mb"], peaks[worst]["peak_reserved_mb"]
    if reserved is None or allocated is None or allocated <= 0:
        raise NotChecked("the allocator records no reserved memory")
    gap = reserved - allocated
    if gap < FRAGMENTATION_MIN_GAP_MB or reserved < FRAGMENTATION_MIN_RATIO * allocated:
        return []
    torch = any("PTA" in str(component).split("+")  # per distinct component: millions of samples
                for component in framework_memory(run)["component"].dropna().unique())
    action = ("export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True before starting Python, so freed blocks "
              "are remapped instead of held" if torch else
              "export MS_ALLOC_CONF=enable_vmm:true before starting Python (MindSpore's virtual-memory pool, which "
              "defragments), or mindspore.runtime.set_memory(optimize_level=\"O1\") for static memory reuse")
    return [Finding(
        id="memory_fragmentation", severity="medium",
        title=f"The allocator holds {gap:,.0f} MB more than it hands out ({reserved:,.0f} MB reserved for "
              f"{allocated:,.0f} MB allocated at peak)",
        evidence={"peak_allocated_mb": round(allocated, 1), "peak_reserved_mb": round(reserved, 1),
                  "gap_mb": round(gap, 1), "reserved_to_allocated": round(reserved / allocated, 2)},
        action=action, target=f"rank {worst}" if len(peaks) > 1 else None, est_gain_pct=None,
        change=None if torch else Change("env", "enable_vmm:true", name="MS_ALLOC_CONF"))]

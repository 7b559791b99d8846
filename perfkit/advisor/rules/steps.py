"""Step rules: where the shape of the steps themselves costs time.

tail (the optimizer update and trailing all-reduce after backward), host_loop (the host's own work between steps:
callbacks, logging, Python in the loop), idle_unexplained (step time no op covers and no file explains),
compile_or_first_call (compilation or first calls inside the profiled window: a first step the means leave out, or
one op call far above the others), periodic_steps (every N-th step heavier: work the loop does every N steps, which
the means leave out).
"""

from __future__ import annotations

import pandas as pd

from ...analysis.ledger import steady_means
from ...analysis.measures import step_means
from ...analysis.steady import first_step_verdicts, periodic_steps as periodic_step_table
from ...core.model import Run
from ..change import Change
from ..finding import Finding, severity_for
from ..registry import device_name, has_steps, is_torch, known_ms, percent, round_ms, rule
from .data import sink_mode_applies

# ---------------------------------------------------------------------------------------------------------
# tail

# After backward the step still runs the optimizer update (and, multi-device, the last gradient all-reduce, which
# the communication rule weighs). On a healthy ResNet-50 step the update is a few percent; msprof-analyze flags
# idle/free time above 10 % of the step, and the same bar marks an update worth acting on. The step ledger splits
# the tail: its `optimizer` cause is the tail less the communication inside it, so the same all-reduce ms is never
# the tail's and the communication rule's finding both.
TAIL_MIN_SHARE = 0.10
# Doubling the batch halves the update's cost per sample.
TAIL_RECOVERABLE = 0.5


@rule("tail", needs=("step_tail",), claims=("optimizer",))
def tail(run: Run) -> list[Finding]:
    steps = step_means(run.steps)
    causes = steady_means(run, by="cause").mean()
    optimizer = float(causes.get("optimizer", 0.0))
    if not steps["total_ms"]:
        return []
    share = optimizer / steps["total_ms"]
    if share < TAIL_MIN_SHARE:
        return []
    gain = percent(share * TAIL_RECOVERABLE)
    return [Finding(
        id="tail", severity=severity_for(gain),
        title=f"The optimizer update after backward is {percent(share):.1f} % of the step (the step tail less the "
              "communication inside it)",
        evidence={"optimizer_share_pct": percent(share),
                  **known_ms(optimizer_ms=optimizer, tail_ms=steps["tail_ms"], step_ms=steps["total_ms"])},
        action=(("DataLoader(dataset, batch_size=2 * batch_size)" if is_torch(run) else
                 "dataset.batch(2 * batch_size, ...)") + " (with the learning rate scaled) so the fixed optimizer "
                "update is spread over more samples"
                + ("; torch.optim.Adam(..., foreach=True) or fused=True batches the per-parameter update ops"
                   if is_torch(run) else "")),
        target=None, est_gain_pct=gain, change=None if is_torch(run) else _batch_change(run, 2))]


def _batch_change(run: Run, factor: float) -> Change | None:
    """The recorded batch size times `factor`, as a change; None when the run does not record its batch."""
    batch = run.meta.config.get("batch_size") if isinstance(run.meta.config, dict) else None
    return Change("batch_size", int(batch * factor)) if isinstance(batch, int) and batch * factor >= 1 else None


# ---------------------------------------------------------------------------------------------------------
# host_loop

# msprof-analyze rates an issue from 5 % of step time; the same bar for the host's own work between steps.
HOST_LOOP_MIN_SHARE = 0.05
# What MindSpore 2.10's own training loop takes between steps on CPU with the data ready and no per-step work of
# the script's (Model.train, graph, feed mode: fetching the batch, launching the step): 0.7-19.7 ms a step in the
# real runs of tests/runs and sample_runs without a callback of their own (the most on a busy host, cpu_avx2_b16),
# against 108 ms with a 100 ms callback (cpu_2_10_slow_callback). Up to this much is the loop's fixed cost, which a
# larger batch spreads, not callbacks to move.
HOST_LOOP_FRAMEWORK_MS = 20.0


@rule("host_loop", needs=("steps",), claims=("host_loop",))
def host_loop(run: Run) -> list[Finding]:
    """The step time the ledger gives to the host's work between steps (`host_loop`: no op running for longer
    than launches take, or on CPU the feed-mode interval with the data queue full): Python the loop runs each
    step, which no data or device setting shortens."""
    causes = steady_means(run, by="cause")
    if "host_loop" not in causes or not len(causes):
        return []
    loop_ms, total = float(causes["host_loop"].mean()), float(causes["total"].mean())
    share = loop_ms / total if total > 0 else 0.0
    if share < HOST_LOOP_MIN_SHARE:
        return []
    gain = percent(share)
    if loop_ms <= HOST_LOOP_FRAMEWORK_MS and not is_torch(run):
        # doubling the batch halves this fixed cost per sample: the gain that setting can claim
        return [Finding(
            id="host_loop", severity=severity_for(gain / 2),
            title=f"{gain:.0f} % of each step ({loop_ms:.1f} ms) is the training loop's own work between steps, with "
                  f"the data ready and no op running: about what MindSpore's loop takes with no per-step work of the "
                  f"script's (up to {HOST_LOOP_FRAMEWORK_MS:.0f} ms here), a fixed cost of each step",
            evidence={"host_loop_share_pct": gain, **known_ms(host_loop_ms=loop_ms, step_ms=total),
                      "framework_loop_up_to_ms": HOST_LOOP_FRAMEWORK_MS},
            action="A larger batch per step (dataset.batch(2 * batch_size), the learning rate scaled) spreads this "
                   "fixed cost over more samples; if the script does work every step (callbacks, logging), the "
                   "timeline's host lanes show it",
            target=None, est_gain_pct=round(gain / 2, 2))]
    if is_torch(run):
        where = ("the host's Python between steps (the timeline's host lanes): per-step logging, .item() or .cpu() "
                 "calls, metrics; do them every N steps")
    else:
        where = ("what runs between steps: the timeline's host lanes (perfkit dash RUN, Timeline page) and the "
                 "callbacks given to Model.train(..., callbacks=[...]) (per-step logging, metrics, checkpoints; in a "
                 "custom loop, print / .asnumpy() each step): do that work every N steps (on_train_step_end with "
                 "`if cb_params.cur_step_num % N == 0`) or at epoch end")
    return [Finding(
        id="host_loop", severity=severity_for(gain),
        title=f"{gain:.0f} % of each step is host work between steps (callbacks, logging, Python in the loop), "
              "with the data ready and no op running",
        evidence={"host_loop_share_pct": gain, **known_ms(host_loop_ms=loop_ms, step_ms=total)},
        action="Look at " + where, target=None, est_gain_pct=gain)]


# ---------------------------------------------------------------------------------------------------------
# idle_unexplained

# msprof-analyze reports free time (the device running nothing) above 10 % of the step as an issue; the same bar for
# the ledger's `unknown`: step time no op covers and no file explains (no data queue, no manifest of the loop).
IDLE_UNEXPLAINED_MIN_SHARE = 0.10
# From a quarter of the step, the first thing to find out.
IDLE_UNEXPLAINED_MEDIUM_SHARE = 0.25


@rule("idle_unexplained", needs=("steps",))
def idle_unexplained(run: Run) -> list[Finding]:
    """The step time the ledger can give no cause (`unknown`): what would tell data wait from the host's own work.
    Where sink_mode's finding words the interval as the batch transfer, it is that finding's. No gain: the cause,
    and so what removes it, is unknown."""
    causes = steady_means(run, by="cause")
    if "unknown" not in causes or not len(causes) or sink_mode_applies(run):
        return []
    unknown_ms, total = float(causes["unknown"].mean()), float(causes["total"].mean())
    share = unknown_ms / total if total > 0 else 0.0
    if share < IDLE_UNEXPLAINED_MIN_SHARE:
        return []
    if is_torch(run):
        tell = ("the Timeline page (perfkit dash RUN) shows where in the step the gap lies: the host lanes hold the "
                "DataLoader's wait (its enumerate(DataLoader) span) and the Python between ops; if it is the "
                "DataLoader, more workers (num_workers) and pin_memory=True")
    elif device_name(run) == "CPU":
        tell = ("the Timeline page (perfkit dash RUN) shows where in the step the gap lies; MindSpore's profiler "
                "records no dataset data on CPU, so data wait and the host's work look alike here. In a custom loop "
                "the usual causes are the Python between steps: next() on the dataset iterator, .asnumpy() or print "
                "each step, the profiler's own step(); time them in the loop (time.perf_counter), or run the step "
                "on tensors made once, to tell")
    else:
        tell = ("profile the dataset too (mindspore.Profiler(data_process=True)) so data wait is told from host "
                "work; the Timeline page (perfkit dash RUN) shows where in the step the gap lies")
    return [Finding(
        id="idle_unexplained",
        severity="medium" if share >= IDLE_UNEXPLAINED_MEDIUM_SHARE else "low",
        title=f"{percent(share):.0f} % of each step ({unknown_ms:.1f} ms) no op runs and no recorded file says why "
              "(data wait or the host's own work)",
        evidence={"unknown_share_pct": percent(share), **known_ms(unknown_ms=unknown_ms, step_ms=total)},
        action="Find out what it is: " + tell, target=None, est_gain_pct=None)]


# ---------------------------------------------------------------------------------------------------------
# compile_or_first_call

# One op instance called once that takes a fifth of all op time in a multi-step window is a one-off: a first
# call (kernel compile, autotune, allocation), not the op type's steady cost.
FIRST_CALL_MIN_SHARE = 0.2


def _first_step_outliers(run: Run) -> dict[int, tuple[float, float]]:
    """rank -> (first step ms, median of the other steps) where the first step is an outlier: compilation or
    warm-up inside the profiled window (issue 13's rule). The outlier rule is the one every step mean applies
    (steady.first_step_verdicts: over FIRST_STEP_OUTLIER, 1.5x, the median of the rank's other steps)."""
    _, first = first_step_verdicts(run.steps)
    outliers = first[first["outlier"] & (first["median_others_ms"] > 0)]
    return {int(row.rank): (float(row.total_ms), float(row.median_others_ms)) for row in outliers.itertuples()}


# A call this many times longer than the same op's other calls is not its steady cost.
FIRST_CALL_OUTLIER = 10.0


def _one_off_calls(run: Run) -> pd.DataFrame:
    """Op calls that take FIRST_CALL_MIN_SHARE of their rank's op time in a multi-step window, alone: an op
    run once (where the files count calls: 1.x detail files have no count, every op reads as run once), or
    one call (`max_ms`, where calls are timed) FIRST_CALL_OUTLIER times the op's other calls. Adds `call_ms`."""
    ops = run.ops
    if not len(ops) or not has_steps(run) or run.steps.groupby("rank")["step"].nunique().max() < 2:
        return ops.iloc[:0].assign(call_ms=pd.Series(dtype="float64"))
    op_ms = ops.groupby("rank")["total_ms"].transform("sum")
    once = (ops["count"] <= 1) & (ops["count"].median() >= 2)
    others_ms = (ops["total_ms"] - ops["max_ms"]) / (ops["count"] - 1).clip(lower=1)
    outlier = (ops["count"] >= 2) & (ops["max_ms"] > FIRST_CALL_OUTLIER * others_ms)
    call_ms = ops["total_ms"].where(once, ops["max_ms"])
    found = (once | outlier.fillna(False)) & (call_ms >= FIRST_CALL_MIN_SHARE * op_ms)
    return ops[found].assign(call_ms=call_ms[found])


@rule("compile_or_first_call", needs=("steps",))
def compile_or_first_call(run: Run) -> list[Finding]:
    steps, calls = _first_step_outliers(run), _one_off_calls(run)
    if not steps and not len(calls):
        return []
    evidence: dict[str, float] = {}
    said = []
    if steps:
        rank, (first, rest) = max(steps.items(), key=lambda item: item[1][0] / item[1][1])
        evidence |= {"first_step_ms": round_ms(first), "median_other_steps_ms": round_ms(rest), "rank": rank}
        said.append(f"the first profiled step takes {first / rest:.1f}x the others ({round_ms(first)} ms)")
    target = None
    if len(calls):
        call = calls.loc[calls["call_ms"].idxmax()]
        op_ms = float(run.ops.loc[run.ops["rank"] == call["rank"], "total_ms"].sum())
        evidence |= {"one_call_ms": round_ms(call["call_ms"]), "one_call_share_of_op_time_pct":
                     percent(call["call_ms"] / op_ms)}
        target = str(call["name"])
        said.append(f"one call of {call['type']} is {percent(call['call_ms'] / op_ms):.1f} % of all op time")
    # The outlier is not a cost of every step: step means and op-type shares that include it mislead.
    if is_torch(run):
        profiler = "torch_npu.profiler" if run.meta.framework == "torch_npu" else "torch.profiler"
        action = (f"profile after warm-up: {profiler}.profile(schedule={profiler}.schedule("
                  "wait=1, warmup=1, active=N)) and prof.step() each step")
    else:
        action = ("profile after warm-up: mindspore.Profiler(schedule=mindspore.profiler.schedule(wait=1, warmup=1, "
                  "active=N)) with profiler.step() each step, or `perfkit profile --warmup 1`; then judge the op "
                  "types on the steady steps")
    return [Finding(
        id="compile_or_first_call", severity="medium",
        title="Compilation or first calls inside the profiled window: " + "; ".join(said),
        evidence=evidence, action=action, target=target, est_gain_pct=None,
        change=None if is_torch(run) else Change("profiler_warmup", 1))]


# ---------------------------------------------------------------------------------------------------------
# periodic_steps

# From a quarter of the profiled time, the extra work is the first thing to look at.
PERIODIC_MEDIUM_SHARE = 0.25


@rule("periodic_steps", needs=("steps",))
def periodic_steps(run: Run) -> list[Finding]:
    """Steps a loop makes heavier at a fixed period (steady.periodic_steps), which every step mean leaves out: what
    the extra work costs, so that neither the means nor the tail or host-loop findings count it as the step's."""
    periodic = periodic_step_table(run.steps)
    if not len(periodic):
        return []
    factors = periodic["mean_ms"] / periodic["median_others_ms"]
    row = periodic.loc[factors.idxmax()]
    rank, period, steps, factor = int(row["rank"]), int(row["period"]), list(row["steps"]), float(factors.max())
    totals = run.steps.loc[run.steps["rank"] == rank, "total_ms"]
    extra = len(steps) * (float(row["mean_ms"]) - float(row["median_others_ms"]))
    share = extra / float(totals.sum()) if totals.sum() > 0 else 0.0
    listed = ", ".join(map(str, steps))
    return [Finding(
        id="periodic_steps", severity="medium" if share >= PERIODIC_MEDIUM_SHARE else "low",
        title=f"Every {period} steps the loop does more: steps {listed} take {factor:.1f}x the median of the others;"
              f" the extra {percent(share):.1f} % of the profiled time is work done every "
              f"{period} steps (an evaluation pass, checkpoints, logging), left out of the step means",
        evidence={"period": period, "periodic_steps": steps, "rank": rank, "extra_share_pct": percent(share),
                  **known_ms(periodic_step_ms=row["mean_ms"], median_other_steps_ms=row["median_others_ms"],
                             extra_ms=extra)},
        action=(f"If it is evaluation or a checkpoint, it costs {percent(share):.1f} % of the training time: run it "
                f"less often or on fewer batches. To see what it is, open one such step: `perfkit trace RUN --step "
                f"{steps[0]}` or the dashboard's Timeline page at step {steps[0]}"),
        target=None, est_gain_pct=None)]

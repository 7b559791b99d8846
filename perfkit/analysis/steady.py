"""Which profiled steps a step mean covers: one rule for every mean perfkit prints (summary, ranks, advise,
compare, figures): every profiled step but a first one that is compilation or warm-up, and but the steps a loop makes
heavier at a fixed period (an evaluation pass every N steps). Kept apart from analysis.py so that cluster.py, which
analysis imports, can use it too."""

from __future__ import annotations

import numpy as np
import pandas as pd

# The first profiled step carries graph compilation and warm-up. It is left out of the step means where
# MindSpore's own average leaves it out (the legacy step trace's average row is the mean of steps 2..n, on
# every multi-step fixture), and wherever it is an outlier: over this many times the median of the rank's
# other steps. 1.5x sits above the steady-state spread seen here (CPU sample runs: steps within 1.3x of
# each other, Ascend/GPU step traces within 1.05x) and far below a compiling first step (13x on a 4-rank
# pipeline-parallel Ascend run: 2,376 ms against 179 ms), so a slow-but-normal step is never dropped.
FIRST_STEP_OUTLIER = 1.5
# Why a rank's first profiled step is not in its means (`mean_of.first_step`).
FIRST_STEP_REASONS = {
    "warmup": "left out, as MindSpore's own average leaves it out",
    "outlier": f"left out: over {FIRST_STEP_OUTLIER}x the median of the other steps (compilation, warm-up)",
    "unknown_total": "left out: its start is unknown (no step boundary before the first op)",
    None: None,  # included
}


# A loop that does more every N steps (an evaluation pass, a checkpoint, logging) makes every N-th step heavier: those
# steps are not the training step, and a mean over them says neither what a step costs nor what the extra work
# costs. They are left out where at least PERIODIC_MIN_STEPS steps at one period (the smallest found) each take
# over PERIODIC_OUTLIER times the median of the rank's other steps (the first step's bar: above the steady spread).
# The advisor's periodic_steps finding says what they cost.
PERIODIC_OUTLIER = FIRST_STEP_OUTLIER
PERIODIC_MIN_STEPS = 3


def first_step_verdicts(steps: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """(row mask of the steps the means cover, per rank: first step number, its total, why it is left out,
    the median total of the rank's other steps, and whether the first step is an outlier against it). The mask
    leaves out the periodic steps too (`periodic_steps`)."""
    used, first = _first_step_verdicts(steps)
    periodic, _ = _periodic(steps, used)
    return used & ~periodic, first


def periodic_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Per rank whose steps a loop makes heavier at a fixed period (PERIODIC_OUTLIER): its period, the steps left
    out (a tuple), their mean total and the median total of the rank's other steps the means cover."""
    used, _ = _first_step_verdicts(steps)
    _, found = _periodic(steps, used)
    return found


def periodic_reason(period: int, mean_ms: float, median_others_ms: float) -> str:
    """Why a rank's periodic steps are not in its means (`mean_of.periodic`)."""
    suffix = "th" if period % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(period % 10, "th")
    nth = f"{period}{suffix}"
    return (f"left out: every {nth} step, {mean_ms / median_others_ms:.1f}x the median of the others (work the loop "
            f"does every {period} steps: evaluation, checkpoints, logging)")


def _periodic(steps: pd.DataFrame, used: np.ndarray) -> tuple[np.ndarray, pd.DataFrame]:
    """(row mask of the periodic steps, `periodic_steps`' table) among the rows `used`."""
    mask = np.zeros(len(steps), dtype=bool)
    columns = {"rank": [], "period": [], "steps": [], "mean_ms": [], "median_others_ms": []}
    total = steps["total_ms"].to_numpy(dtype=np.float64, na_value=np.nan)
    candidates = used & ~np.isnan(total)
    if candidates.sum() >= 2 * PERIODIC_MIN_STEPS:
        rows = pd.DataFrame({"rank": steps["rank"].to_numpy()[candidates], "total": total[candidates]})
        # The others are at least half the steps (period 2 or more), so their median is at least the steps' lower
        # quartile: fewer than PERIODIC_MIN_STEPS steps over that bar and the rank has no period to look for.
        bar = PERIODIC_OUTLIER * rows["rank"].map(rows.groupby("rank")["total"].quantile(0.25))
        heavy = (rows["total"] > bar).groupby(rows["rank"]).sum()
        for rank in heavy.index[heavy >= PERIODIC_MIN_STEPS]:
            positions = np.flatnonzero(candidates & (steps["rank"].to_numpy() == rank))
            found = _period(steps["step"].to_numpy()[positions], total[positions])
            if found is None:
                continue
            period, members = found
            mask[positions[members]] = True
            others = total[positions[~members]]
            columns["rank"].append(rank)
            columns["period"].append(period)
            columns["steps"].append(tuple(int(step) for step in steps["step"].to_numpy()[positions[members]]))
            columns["mean_ms"].append(float(total[positions[members]].mean()))
            columns["median_others_ms"].append(float(np.median(others)))
    return mask, pd.DataFrame(columns)


# Periods tried per rank, and phases per period: a true period shows among the first; the bound keeps a long noisy run
# (100,000 steps) to a few passes over its steps.
PERIODIC_TRIES = 8


def _period(numbers: np.ndarray, totals: np.ndarray) -> tuple[int, np.ndarray] | None:
    """(period, member mask) of the smallest period at which every step of one phase (PERIODIC_MIN_STEPS or more)
    takes over PERIODIC_OUTLIER times the median of the other steps; None where no period fits. The periods tried
    are the commonest gaps between consecutive heavy steps, the phases those steps': heavy over PERIODIC_OUTLIER
    times the median of all steps (noise among the others does not break the gaps) or, where the members are half
    the steps (that median between the two kinds), times the lower quartile."""
    offsets = numbers - numbers.min()
    tries: dict[int, np.ndarray] = {}
    for bar in (np.median(totals), np.quantile(totals, 0.25)):
        heavy = np.sort(offsets[totals > PERIODIC_OUTLIER * bar])
        gaps, counts = np.unique(np.diff(heavy), return_counts=True)
        for gap in gaps[np.argsort(-counts, kind="stable")][:PERIODIC_TRIES].tolist():
            tries.setdefault(int(gap), heavy)
    for period in sorted(gap for gap in tries if 2 <= gap <= int(offsets.max()) // (PERIODIC_MIN_STEPS - 1)):
        phases, seen = np.unique(tries[period] % period, return_counts=True)
        for phase in phases[np.argsort(-seen, kind="stable")][:PERIODIC_TRIES]:
            members = offsets % period == phase
            if members.sum() < PERIODIC_MIN_STEPS or not (~members).any():
                continue
            if totals[members].min() > PERIODIC_OUTLIER * np.median(totals[~members]):
                # heavy steps the majority (every 2nd of an odd count): the light ones are the exception, not the rule
                return (period, members) if members.sum() <= (~members).sum() else None
    return None


def _first_step_verdicts(steps: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    rank, step, total = steps["rank"], steps["step"], steps["total_ms"]
    known = total.notna()
    # A step whose start is unknown (the first one, derived from op timestamps) has parts but no total;
    # averaging its parts with the other steps' totals would make the parts exceed the whole.
    keep = (known | ~known.groupby(rank).transform("any")).to_numpy()
    is_first = (step == step.groupby(rank).transform("min")).to_numpy()
    others = total.where(keep & ~is_first)
    median_others = others.groupby(rank).transform("median").to_numpy()
    has_others = others.notna().groupby(rank).transform("any").to_numpy()
    warmup = (steps["warmup"].fillna(False).to_numpy(dtype=bool) if "warmup" in steps
              else np.zeros(len(steps), dtype=bool))
    with np.errstate(invalid="ignore"):
        outlier = total.to_numpy(dtype=np.float64, na_value=np.nan) > FIRST_STEP_OUTLIER * median_others
    left_out = is_first & keep & has_others & (warmup | outlier)
    reason = np.where(left_out & warmup, "warmup", np.where(left_out, "outlier", None))
    reason = np.where(is_first & ~keep, "unknown_total", reason)
    # an object column keeps None for a kept step (a string column would turn it into NaN beside a reason)
    first = pd.DataFrame({"rank": rank.to_numpy()[is_first], "step": step.to_numpy()[is_first],
                          "total_ms": total.to_numpy()[is_first], "reason": pd.Series(reason[is_first], dtype=object),
                          "median_others_ms": median_others[is_first],
                          "outlier": (keep & has_others & outlier)[is_first]})
    return keep & ~left_out, first.drop_duplicates("rank").sort_values("rank").reset_index(drop=True)


def steady_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The steps every mean covers: per rank, all profiled steps but a first one that MindSpore's own
    average leaves out, that is an outlier (FIRST_STEP_OUTLIER), or whose total is unknown. Every step
    mean perfkit prints (summary, ranks, advise, compare, figures) is a mean over these rows."""
    if not len(steps):
        return steps
    used, _ = first_step_verdicts(steps)
    return steps[used]

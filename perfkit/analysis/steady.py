"""Which profiled steps a step mean covers: one rule for every mean perfkit prints (summary, ranks, advise,
compare, figures). Kept apart from analysis.py so that cluster.py, which analysis imports, can use it too."""

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


def first_step_verdicts(steps: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """(row mask of the steps the means cover, per rank: first step number, its total, why it is left out,
    the median total of the rank's other steps, and whether the first step is an outlier against it)."""
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

"""The statistics of a comparison: each run's per-step spread, and whether two groups of runs (repeats) differ
by more than run-to-run noise (`verdict`), with the Student t distribution it needs (Welch's test, the t quantile,
the regularized incomplete beta function), throughput per sample and per token.

Pure functions of Runs and numbers: no advisor, no reading from disk. B is judged against A (the baseline):
speedup = A's mean step / B's mean step, so > 1 means B is faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..core.errors import PerfkitError
from ..core.model import Run
from ..core.units import MS_PER_S
from .steady import steady_steps

# The verdict is over runs, each counted once by its mean steady step (`verdict`): steps of one run are not
# independent draws of the run-to-run variation (a busy machine, a data order, another process slow them all),
# so a test over steps calls noise significant (issue 24: identical settings read "71.4 % slower, p = 0.009").
# With repeats on both sides: Welch's t-test on the logarithms of the run means. On the log scale, because
# step-time noise is proportional (a busy machine stretches every step by a factor) and the difference tested is
# then the ratio of the runs' geometric means, what a speedup is; Welch's form, because one side's runs may be
# noisier than the other's. One run against repeats is judged by the repeats' spread; with one run on each side
# there is no run-to-run spread to test: a floor decides, the measured one below or, on a quiet machine, one from the
# runs' own step spread (`noise_floor`).
# A step's spread within one run is shown as a description of that run, never as a verdict.
SIGNIFICANCE_P = 0.05
# Below this change a difference is never called a speedup or a slowdown, however many repeats make it
# "significant": a 1 % change passes the t-test with enough runs yet is not worth a code change.
MIN_EFFECT_PCT = 2.0
# How far apart two single runs of the same settings land by chance, in % of the step time: the 95th percentile
# of |log ratio| over the 45 pairs of 10 same-settings runs of benchmarks/compare_noise.py (perfkit profile
# --image-size 16 --batch-size 8 --steps 4, real MindSpore 2.10 CPU, the shared 2-core VM at load 1.9-6.7 while
# other agents worked: mean steps 407-1,361 ms; benchmarks/results/compare_noise.txt). With one run a side a
# change must exceed this to be called; repeats (run means) judge far smaller changes.
NOISE_FLOOR_PCT = 215.0
# The load those runs started at, per logical CPU (1.9-6.7 on 2 CPUs): the measured floor holds for a machine that
# busy. `perfkit profile` records the load average as a run starts (perfkit_run.json: host.load_average,
# host.logical_cpus); runs that all started below QUIET_LOAD_PER_CPU (under half the CPUs busy) ran on a quieter
# machine than the floor was measured on, and one run a side is judged by the runs' own step spread instead
# (`noise_floor`), never by less than QUIET_FLOOR_MIN_PCT: the sample runs, made on the VM with other work
# running, differ by about 10 % from run to run (sample_runs/README.md).
MEASURED_LOAD_PER_CPU = (0.95, 3.35)
QUIET_LOAD_PER_CPU = 0.5
QUIET_FLOOR_MIN_PCT = 10.0
# A run's step spread is its own noise estimate only over this many steady steps (t with 4 degrees of freedom or
# more for two runs); with fewer the measured floor stays.
MIN_SPREAD_STEPS = 3
# What decides a change that one run a side cannot: repeats of each side, judged over their run means.
REPEAT_ADVICE = "perfkit profile --repeat 3"
NO_CHANGE = "no significant change"
# manifest config keys that give the tokens per sample (a user's script may record one)
SEQUENCE_LENGTH_KEYS = ("seq_len", "seq_length", "sequence_length")
SAME_RUN = "same run"


def step_totals(steps: pd.DataFrame) -> np.ndarray:
    """Each step's total in ms, in step order, over the steps `step_means` averages (steady_steps: without a
    warm-up or outlier first step), the mean over ranks; the mean of these is step_means' total_ms when every
    rank has every step."""
    steady = steady_steps(steps)
    if not len(steady):
        return np.empty(0)
    totals = steady.groupby("step", sort=True)["total_ms"].mean().dropna()  # a rank without totals: none known
    return totals.to_numpy(dtype=np.float64)


def spread(totals: np.ndarray) -> dict[str, Any] | None:
    """n, mean, median, standard deviation (n - 1), interquartile range, min and max of per-step totals, in ms."""
    if not len(totals):
        return None
    q1, median, q3 = np.percentile(totals, [25, 50, 75])
    std = float(np.std(totals, ddof=1)) if len(totals) > 1 else None
    mean = float(np.mean(totals))
    return {"n": int(len(totals)), "mean_ms": mean, "median_ms": float(median), "std_ms": std,
            "iqr_ms": float(q3 - q1), "min_ms": float(totals.min()), "max_ms": float(totals.max()),
            "cv_pct": 100 * std / mean if std is not None and mean else None}


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) by its continued fraction (Numerical Recipes 6.4, modified Lentz): the Student t tail needs it
    and numpy has none; scipy would be a 40 MB dependency for this one function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only below this point: use the symmetry
        return 1.0 - regularized_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * fraction


def welch_test(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """Welch's t-test of mean(b) - mean(a): t, the Welch-Satterthwaite degrees of freedom, two-sided p
    (scipy.stats.ttest_ind(b, a, equal_var=False))."""
    var_a, var_b = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    difference = float(np.mean(b) - np.mean(a))
    if var_a + var_b == 0:  # both sides perfectly steady: any difference is real, none is noise
        return {"t": math.copysign(math.inf, difference) if difference else 0.0, "df": float(len(a) + len(b) - 2),
                "p": 0.0 if difference else 1.0}
    t = difference / math.sqrt(var_a + var_b)
    df = (var_a + var_b) ** 2 / (var_a ** 2 / (len(a) - 1) + var_b ** 2 / (len(b) - 1))
    return {"t": float(t), "df": float(df), "p": regularized_beta(float(df) / 2, 0.5, float(df / (df + t * t)))}


def per_rank_batch(run: Run) -> int | None:
    """The batch `perfkit profile` recorded, else the most common first dimension of Conv2D inputs (NCHW and
    Ascend's NC1HWC0 both start with N); None when neither is there."""
    recorded = run.meta.config.get("batch_size")
    if isinstance(recorded, int):
        return recorded
    if not len(run.ops) or "input_shapes" not in run.ops:
        return None
    convs = run.ops.loc[run.ops["type"].astype(str) == "Conv2D", "input_shapes"].dropna().astype(str)
    first_dims = convs.str.extract(r"^(\d+),", expand=False).dropna()
    return int(first_dims.value_counts().index[0]) if len(first_dims) else None


def load_per_cpu(run: Run) -> float | None:
    """The 1-minute load average per logical CPU as the run started (perfkit_run.json's host, written by `perfkit
    profile`); None where the manifest does not record it or records something that is not a load."""
    host = run.meta.host or {}
    loads, cpus = host.get("load_average"), host.get("logical_cpus")
    if (not isinstance(loads, list) or not loads or not isinstance(loads[0], (int, float)) or isinstance(loads[0], bool)
            or not isinstance(cpus, int) or isinstance(cpus, bool) or cpus <= 0
            or not math.isfinite(loads[0]) or loads[0] < 0):
        return None
    return float(loads[0]) / cpus


def step_spread_floor_pct(run_a: Run, run_b: Run) -> float | None:
    """The change two single runs' means show by chance if runs differ as much as their steps do: the 95 % t
    half-width of a difference of one step of each (t(df) x sqrt(s_a² + s_b²) on the log scale, s each run's
    standard deviation of its log steady step totals, df = their steps - 2), in %; None with under
    MIN_SPREAD_STEPS steps in either. Not divided by the steps' count: steps of one run are no independent draws of
    the run-to-run noise."""
    logs = [np.log(totals[totals > 0]) for totals in (step_totals(run_a.steps), step_totals(run_b.steps))]
    if any(len(values) < MIN_SPREAD_STEPS for values in logs):
        return None
    half = t_quantile(len(logs[0]) + len(logs[1]) - 2) * math.sqrt(sum(np.var(values, ddof=1) for values in logs))
    return 100 * math.expm1(half)


@dataclass(frozen=True)
class NoiseFloor:
    """The change one run a side must exceed (pct) and where that number comes from, in words (`source`)."""
    pct: float
    source: str


def noise_floor(run_a: Run, run_b: Run, given_pct: float | None = None) -> NoiseFloor:
    """The floor for one run a side: the user's (`given_pct`: --noise-floor); where both runs record a quiet start
    (load under QUIET_LOAD_PER_CPU) and enough steps, the runs' own step spread (`step_spread_floor_pct`, at least
    QUIET_FLOOR_MIN_PCT); else the measured NOISE_FLOOR_PCT, or the step spread where that is wider."""
    if given_pct is not None:
        return NoiseFloor(given_pct, "given")
    loads = [load_per_cpu(run) for run in (run_a, run_b)]
    known = [load for load in loads if load is not None]
    started = ("the runs' load not recorded" if not known else
               f"the runs started at load {' and '.join(f'{load:.2f}' for load in known)} per CPU"
               + ("" if len(known) == 2 else " (the other's not recorded)"))
    spread_pct = step_spread_floor_pct(run_a, run_b)
    if len(known) == 2 and max(known) < QUIET_LOAD_PER_CPU and spread_pct is not None:
        pct = max(spread_pct, QUIET_FLOOR_MIN_PCT)
        return NoiseFloor(pct, f"from the runs' step spread: {started}" if pct > QUIET_FLOOR_MIN_PCT else
                          f"a quiet machine's minimum: {started}")
    low, high = MEASURED_LOAD_PER_CPU
    if spread_pct is not None and spread_pct > NOISE_FLOOR_PCT:
        return NoiseFloor(spread_pct, f"from the runs' step spread, wider than the measured {NOISE_FLOOR_PCT:g} %; "
                                      f"{started}")
    return NoiseFloor(NOISE_FLOOR_PCT, f"measured at load {low:g}-{high:g} per CPU; {started}")


@dataclass(frozen=True)
class Verdict:
    """B against A over groups of runs. speedup > 1 means B is faster; per sample when the batches differ.
    interval: the 95 % interval of the speedup; basis: "run means" (repeats on both sides: Welch t over the
    log run means), "one run against repeats" (the single run judged by the t prediction interval of the other
    side's repeats) or "noise floor" (one run a side: the difference must exceed noise_floor_pct, from
    noise_floor_source: `noise_floor`)."""
    kind: str  # "faster", "slower", NO_CHANGE or SAME_RUN
    speedup: float
    interval: tuple[float, float]
    noise_floor_pct: float | None
    basis: str
    per_sample: bool
    n_a: int
    n_b: int
    p_value: float | None = None
    batch_a: int | None = None  # samples per step over all ranks (the first run's of a side); None: unknown
    batch_b: int | None = None
    noise_floor_source: str | None = None  # where the floor comes from (`noise_floor`), with one run a side


def t_quantile(df: float, two_sided_p: float = SIGNIFICANCE_P) -> float:
    """The t with two-sided tail two_sided_p at df degrees of freedom, by bisection on the Student tail."""
    low, high = 0.0, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        tail = regularized_beta(df / 2, 0.5, df / (df + mid * mid))
        low, high = (mid, high) if tail > two_sided_p else (low, mid)
    return (low + high) / 2


def global_batch(run: Run, batch_size: int | None = None) -> int | None:
    """Samples per step over all ranks (data parallel: each rank takes its own batch); else `batch_size`, the
    user's global batch (`compare --batch-size`) for a run whose files do not tell it; None when unknown."""
    batch = per_rank_batch(run)
    return batch_size if batch is None else batch * (len(run.meta.ranks) or 1)


def sequence_length(run: Run, seq_len: int | None = None) -> int | None:
    """Tokens per sample: the manifest config's (SEQUENCE_LENGTH_KEYS), else the user's `seq_len`; None unknown."""
    recorded = next((run.meta.config[key] for key in SEQUENCE_LENGTH_KEYS if isinstance(run.meta.config.get(key), int)),
                    None)
    return seq_len if recorded is None else recorded


def run_mean_ms(run: Run, per_sample: bool, batch_size: int | None = None) -> float | None:
    """The run's mean steady step in ms, or per sample of the global batch (`global_batch`) when per_sample."""
    totals = step_totals(run.steps)
    totals = totals[totals > 0]
    if not len(totals):
        return None
    mean = float(np.mean(totals))
    return mean / global_batch(run, batch_size) if per_sample else mean


def samples_per_s(run: Run, batch_size: int | None = None) -> float | None:
    """Global batch (`global_batch`) per mean steady step; None when the batch is unknown."""
    batch, mean = global_batch(run, batch_size), run_mean_ms(run, per_sample=False)
    return None if batch is None or not mean else batch * MS_PER_S / mean


def tokens_per_s(run: Run, batch_size: int | None = None, seq_len: int | None = None) -> float | None:
    """samples/s x tokens per sample (`sequence_length`); None when either is unknown."""
    rate, length = samples_per_s(run, batch_size), sequence_length(run, seq_len)
    return None if rate is None or length is None else rate * length


def verdict(group_a: Sequence[Run], group_b: Sequence[Run], noise_floor_pct: float | None = None,
            batch_size: int | None = None) -> Verdict:
    """Whether the runs of B differ from those of A by more than run-to-run noise (see Verdict).

    Steps of one run are not independent draws of the run-to-run variation (a busy machine slows them all), so
    each run counts once, by its mean. Per sample when both global batches are known (`batch_size`: the user's,
    for runs whose files do not tell it) and differ. `noise_floor_pct`: the floor for one run a side; None: from
    the runs' recorded load and step spread (`noise_floor`)."""
    if not group_a or not group_b:
        raise PerfkitError("compare needs at least one run on each side")
    if sorted((run.path, str(run.meta.cycle)) for run in group_a) == sorted((run.path, str(run.meta.cycle))
                                                                            for run in group_b):
        return Verdict(SAME_RUN, 1.0, (1.0, 1.0), None, SAME_RUN, False, len(group_a), len(group_b), 1.0,
                       global_batch(group_a[0], batch_size), global_batch(group_b[0], batch_size))
    batches_a = {global_batch(run, batch_size) for run in group_a}
    batches_b = {global_batch(run, batch_size) for run in group_b}
    per_sample = None not in batches_a | batches_b and batches_a != batches_b
    logs = []
    for group in (group_a, group_b):
        means = [run_mean_ms(run, per_sample, batch_size) for run in group]
        unknown = [run.path for run, mean in zip(group, means) if not mean]
        if unknown:
            raise PerfkitError(f"{unknown[0]}: no step times to compare")
        logs.append(np.log(np.array(means, dtype=np.float64)))
    log_a, log_b = logs
    log_ratio = float(np.mean(log_a) - np.mean(log_b))  # > 0: B's time is shorter, B is faster
    p_value, floor_source = None, None
    if len(log_a) >= 2 and len(log_b) >= 2:
        test = welch_test(log_b, log_a)
        half = t_quantile(test["df"]) * math.sqrt(np.var(log_a, ddof=1) / len(log_a)
                                                    + np.var(log_b, ddof=1) / len(log_b))
        basis, floor, p_value = "run means", None, test["p"]
        significant = test["p"] < SIGNIFICANCE_P
    elif len(log_a) >= 2 or len(log_b) >= 2:
        # one run against repeats: the repeats' spread is the run-to-run noise, and the single run is judged as a
        # new draw from it (the t prediction interval: a single run varies by sd, the repeats' mean by sd/sqrt(n))
        repeats = log_a if len(log_a) >= 2 else log_b
        df = len(repeats) - 1
        scale = float(np.std(repeats, ddof=1)) * math.sqrt(1 + 1 / len(repeats))
        half = t_quantile(df) * scale
        p_value = (regularized_beta(df / 2, 0.5, df / (df + (log_ratio / scale) ** 2)) if scale
                   else float(log_ratio == 0))
        basis, floor = "one run against repeats", None
        significant = p_value < SIGNIFICANCE_P
    else:
        floor_ = noise_floor(group_a[0], group_b[0], noise_floor_pct)
        half = math.log1p(floor_.pct / 100)
        basis, floor, floor_source = "noise floor", floor_.pct, floor_.source
        significant = abs(log_ratio) > half
    significant = significant and abs(math.expm1(-log_ratio)) * 100 >= MIN_EFFECT_PCT
    kind = NO_CHANGE if not significant else ("faster" if log_ratio > 0 else "slower")
    return Verdict(kind, math.exp(log_ratio), (math.exp(log_ratio - half), math.exp(log_ratio + half)), floor,
                   basis, per_sample, len(log_a), len(log_b), p_value, global_batch(group_a[0], batch_size),
                   global_batch(group_b[0], batch_size), floor_source)

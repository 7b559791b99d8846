"""Before/after: what changed between two runs of the same training script, and whether it is more than noise.

B is judged against A (the baseline): speedup = A's mean step / B's mean step, so > 1 means B is faster.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
import re
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .advisor import SEVERITIES, advise
from .advisor.finding import INFORMATIONAL
from .analysis import STEP_KEYS, op_type_shares, queue_stats, step_means
from .errors import PerfkitError
from .model import Run
from .steady import steady_steps
from .units import MS_PER_S
from .views.format import NUMBER_SPEC, ms, number, pct, percent

# The noise test: Welch's t-test on the logarithms of the per-step totals, and a minimum effect size.
# - A test of the step time, because the speedup and the gate are about it. On the log scale, because step-time
#   noise is proportional: a machine that is busy stretches every step by a factor, and a run three times slower
#   jitters three times as much in ms; in logs both runs' spreads are comparable and the difference tested is
#   the ratio of the runs (geometric means), what a speedup is.
# - Welch's form, because it does not assume both runs are equally noisy: a machine that was busy during one
#   run widens that run's spread (the case of issue 17: identical settings reported as 1.72x), and the test must
#   widen its doubt with it.
# - It works from 2 steps per run. `perfkit profile` records 3 steps by default; with 3 against 3 a rank test
#   (Mann-Whitney) cannot go below p = 0.1 whatever the data, and a bootstrap has only 10 distinct resamples
#   of 3 values, so neither could ever call a real 3x slowdown significant.
# - Steps of one run are not independent draws (a slow machine slows them all), so the test catches noise
#   within the runs, not a whole run made on a quieter machine: the README says to repeat a run when in doubt.
SIGNIFICANCE_P = 0.05
# Below this change of the mean step a difference is never called a speedup or a slowdown, however many steps
# make it "significant". A chosen floor, not a measured one: the sample runs on the shared 2-core VM have a
# per-step spread (std/mean) of 3-13 % and differ ~10 % from run to run (sample_runs/README.md); a 1 % change in
# a run of hundreds of steps passes the t-test yet is within what a rerun moves, and not worth a code change.
MIN_EFFECT_PCT = 2.0
# How far apart two single runs of the same settings land by chance, in % of the step time: the 95th percentile
# of |log ratio| over the 45 pairs of 10 same-settings runs of benchmarks/compare_noise.py (perfkit profile
# --image-size 16 --batch-size 8 --steps 4, real MindSpore 2.10 CPU, the shared 2-core VM at load 1.9-6.7 while
# other agents worked: mean steps 407-1,361 ms; benchmarks/results/compare_noise.txt). With one run a side a
# change must exceed this to be called; repeats (run means) judge far smaller changes.
NOISE_FLOOR_PCT = 215.0
NO_CHANGE = "no significant change"
TOO_FEW_STEPS = "too few steps to judge the noise"

# The gate only judges runs of one setup: these settings must match (device, network, per-rank batch size).
GATE_SETTINGS = ("device", "network", "batch_size")
# MindSpore's op scope names the network cell: Default/network-WithLossCell/_backbone-ResNet50/layer1-...
BACKBONE = re.compile(r"_backbone-([A-Za-z_][A-Za-z0-9_]*)")
# manifest config keys shown under another name (from meta: what was used, not what was asked) or not a setting
CONFIG_NOT_COMPARED = {"output", "env", "device", "ranks", "sink", "amp_level", "mode", "batch_size"}


class IncomparableRunsError(PerfkitError):
    """The gate was asked to judge runs of different devices, networks or batch sizes."""


# ---------------------------------------------------------------------------------------------------------
# Per-step spread and the noise test


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


def _regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) by its continued fraction (Numerical Recipes 6.4, modified Lentz): the Student t tail needs it
    and numpy has none; scipy would be a 40 MB dependency for this one function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only below this point: use the symmetry
        return 1.0 - _regularized_beta(b, a, 1.0 - x)
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
    if var_a + var_b == 0:  # both runs perfectly steady: any difference is real, none is noise
        return {"t": math.copysign(math.inf, difference) if difference else 0.0, "df": float(len(a) + len(b) - 2),
                "p": 0.0 if difference else 1.0}
    t = difference / math.sqrt(var_a + var_b)
    df = (var_a + var_b) ** 2 / (var_a ** 2 / (len(a) - 1) + var_b ** 2 / (len(b) - 1))
    return {"t": float(t), "df": float(df), "p": _regularized_beta(float(df) / 2, 0.5, float(df / (df + t * t)))}


def noise_verdict(totals_a: np.ndarray, totals_b: np.ndarray) -> dict[str, Any] | None:
    """Whether B's mean step differs from A's by more than the noise: "faster", "slower", NO_CHANGE, or
    TOO_FEW_STEPS when a run has fewer than 2 steps (no spread to judge by); change_pct (of the mean step) > 0
    means B is slower. Totals of 0 ms or less (no real step lasts that) are left out."""
    totals_a, totals_b = totals_a[totals_a > 0], totals_b[totals_b > 0]
    if not len(totals_a) or not len(totals_b):
        return None
    mean_a, mean_b = float(np.mean(totals_a)), float(np.mean(totals_b))
    change_pct = 100 * (mean_b - mean_a) / mean_a
    verdict: dict[str, Any] = {"test": "welch_t_log", "alpha": SIGNIFICANCE_P, "min_effect_pct": MIN_EFFECT_PCT,
                               "n_a": int(len(totals_a)), "n_b": int(len(totals_b)), "change_pct": change_pct,
                               "t": None, "df": None, "p_value": None, "significant": None}
    if len(totals_a) < 2 or len(totals_b) < 2:
        verdict["verdict"] = TOO_FEW_STEPS
        return verdict
    test = welch_test(np.log(totals_a), np.log(totals_b))
    significant = bool(test["p"] < SIGNIFICANCE_P and abs(change_pct) >= MIN_EFFECT_PCT)
    verdict.update(t=test["t"] if math.isfinite(test["t"]) else None, df=test["df"], p_value=test["p"],
                   significant=significant,
                   verdict=NO_CHANGE if not significant else ("slower" if change_pct > 0 else "faster"))
    return verdict


def verdict_words(verdict: dict[str, Any] | None) -> str:
    """One phrase: "B is 4.8 % faster (p = 0.003)", "no significant change (-5.2 %, p = 0.29)", ..."""
    if verdict is None:
        return "steps unknown"
    change = verdict["change_pct"]
    if verdict["verdict"] == TOO_FEW_STEPS:
        return f"{change:+.1f} %, {TOO_FEW_STEPS} (n = {verdict['n_a']} and {verdict['n_b']})"
    p = f"p = {verdict['p_value']:.2g}"
    if verdict["verdict"] == NO_CHANGE:
        why = p if verdict["p_value"] >= SIGNIFICANCE_P else f"under {MIN_EFFECT_PCT:g} %"
        return f"{NO_CHANGE} ({change:+.1f} %, {why})"
    return f"B is {abs(change):.1f} % {verdict['verdict']} ({p})"


# ---------------------------------------------------------------------------------------------------------
# What differed between the runs


def _network_name(run: Run) -> str | None:
    """The network cell named in the op scopes (`_backbone-ResNet50`), the one most op names carry; None if
    unnamed (op names without scopes, e.g. the new layout's `Conv2D1`)."""
    if not len(run.ops):
        return None
    names = pd.Series(run.ops["name"].unique()).astype(str).str.extract(BACKBONE, expand=False).dropna()
    return str(names.value_counts().index[0]) if len(names) else None


def _batch_size(run: Run) -> int | None:
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


def run_settings(run: Run) -> dict[str, Any]:
    """How the run was made, as far as its files tell: meta, the manifest's config and env, the network."""
    meta = run.meta
    settings: dict[str, Any] = {
        "device": meta.device, "ranks": len(meta.ranks) or None, "network": _network_name(run),
        "batch_size": _batch_size(run),
        "mode": meta.mode, "data_mode": meta.data_mode, "amp_level": meta.amp_level,
        "compute_dtype": meta.compute_dtype, "ms_version": meta.ms_version, "synthetic_data": meta.synthetic_data,
    }
    settings.update({key: value for key, value in meta.config.items() if key not in CONFIG_NOT_COMPARED})
    settings.update({f"env.{key}": value for key, value in sorted(meta.env.items())})
    return settings


def differences(settings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The settings whose values are not all equal: {"setting", "values": one per run, None = not recorded}."""
    keys = list(dict.fromkeys(key for run_settings_ in settings for key in run_settings_))
    rows = []
    for key in keys:
        values = [run_settings_.get(key) for run_settings_ in settings]
        if any(value != values[0] for value in values[1:]):
            rows.append({"setting": key, "values": values})
    return rows


def incomparable(settings_a: dict[str, Any], settings_b: dict[str, Any]) -> list[str]:
    """The GATE_SETTINGS (device, network, batch size) both runs record, with different values."""
    return [key for key in GATE_SETTINGS
            if settings_a[key] is not None and settings_b[key] is not None and settings_a[key] != settings_b[key]]


def default_selection(runs: Sequence[Run]) -> list[int]:
    """The runs a compare view starts with: the first and every later run of its setup (device, network, batch
    size as far as recorded); the first two when no other run shares its setup. Never all runs by default:
    a speedup across networks is no result."""
    if len(runs) < 2:
        return list(range(len(runs)))
    settings = [run_settings(run) for run in runs]
    same = [index for index in range(1, len(runs)) if not incomparable(settings[0], settings[index])]
    return [0, *same] if same else [0, 1]


def check_comparable(result: dict[str, Any]) -> list[str]:
    """Raise IncomparableRunsError (one line) when A and B differ in device, network or batch size; return a
    note for each of these that a run does not record (not checked)."""
    a, b = result["settings_a"], result["settings_b"]
    notes = []
    for key in GATE_SETTINGS:
        if a[key] is not None and b[key] is not None and a[key] != b[key]:
            raise IncomparableRunsError(f"the gate compares runs of one setup, these differ in {key}: "
                                        f"{a[key]} in {result['run_a']}, {b[key]} in {result['run_b']}")
        unknown = [result[f"run_{name}"] for name, settings in (("a", a), ("b", b)) if settings[key] is None]
        if unknown:
            notes.append(f"{key} not checked: unknown in {' and '.join(unknown)}")
    return notes


# ---------------------------------------------------------------------------------------------------------
# Op types, queues, findings


def op_type_ms_per_step(run: Run) -> pd.DataFrame:
    """Op types (all ranks) with total_ms, share and ms_per_step: op time per step and rank (NaN without steps).
    The op time is the steady steps' where op executions are timed (analysis.steady_op_types), else every
    profiled step's: the per-step figure averages over those same steps."""
    shares = op_type_shares(run)
    steps = step_means(run.steps)
    ranks = run.op_types["rank"].nunique() if len(run.op_types) else 0
    covered = (steps["mean_of"]["count"] if len(run.op_type_steps) else steps["count"]) if steps else 0
    per = covered * ranks if steps and ranks else None
    return shares.assign(ms_per_step=shares["total_ms"] / per if per else float("nan"))


def ms_per_step_of(table: pd.DataFrame, op_type: str) -> float | None:
    """One op type's ms per step from an `op_type_ms_per_step` table indexed by type."""
    if not table["ms_per_step"].notna().any():
        return None  # no steps in this run: no per-step figure
    return float(table["ms_per_step"].get(op_type, 0.0))  # a type the run does not have took 0 ms


def _op_type_deltas(run_a: Run, run_b: Run) -> list[dict[str, Any]]:
    """Per op type: share of op time and ms per step in A and B; ordered by the largest share change."""
    table_a = op_type_ms_per_step(run_a).set_index("type")
    table_b = op_type_ms_per_step(run_b).set_index("type")
    deltas = []
    for op_type in table_a.index.union(table_b.index):
        share_a, share_b = float(table_a["share"].get(op_type, 0.0)), float(table_b["share"].get(op_type, 0.0))
        ms_a, ms_b = ms_per_step_of(table_a, op_type), ms_per_step_of(table_b, op_type)
        deltas.append({"type": str(op_type), "share_a": share_a, "share_b": share_b, "delta": share_b - share_a,
                       "ms_per_step_a": ms_a, "ms_per_step_b": ms_b,
                       "delta_ms_per_step": ms_b - ms_a if ms_a is not None and ms_b is not None else None})
    return sorted(deltas, key=lambda d: (-abs(d["delta"]), d["type"]))


def _queue_change(queue_a, queue_b) -> dict[str, Any]:
    stats_a, stats_b = queue_stats(queue_a), queue_stats(queue_b)
    return {"empty_pct_a": stats_a["empty_pct"] if stats_a else None,
            "empty_pct_b": stats_b["empty_pct"] if stats_b else None}


REPEAT_FOLDER = re.compile(r"repeat_(\d+)")
# settings that differ between repeats of one setting by nature (where each wrote, when)
NOT_A_SETTING = {"output"}


def repeat_folders(path: str | Path) -> list[str]:
    """The runs a compare side names: a folder's repeat_1..N subfolders (what `perfkit profile --repeat N`
    writes), in order, else the folder itself."""
    folder = Path(path)
    repeats = sorted((child for child in folder.iterdir() if child.is_dir() and REPEAT_FOLDER.fullmatch(child.name)),
                     key=lambda child: int(child.name.split("_")[1])) if folder.is_dir() else []
    return [str(repeat) for repeat in repeats] or [str(path)]


def check_group(runs: Sequence[Run]) -> None:
    """Raise PerfkitError (one line) when runs given as repeats of one setting were made with different ones."""
    settings = [{key: value for key, value in run_settings(run).items() if key not in NOT_A_SETTING}
                for run in runs]
    for run, other in zip(runs[1:], settings[1:]):
        differing = differences([settings[0], other])
        if differing:
            row = differing[0]
            raise PerfkitError(f"{run.path}: not a repeat of {runs[0].path}: {row['setting']} is "
                               f"{setting_value(row['values'][1])}, not {setting_value(row['values'][0])}")


def compare(run_a: Run, run_b: Run, repeats_a: Sequence[Run] = (), repeats_b: Sequence[Run] = (),
            noise_floor_pct: float = NOISE_FLOOR_PCT) -> dict[str, Any]:
    """The `perfkit compare --format json` contract: B relative to A (speedup > 1 means B is faster). The
    step tables are the first runs'; the verdict is over all runs of each side (run_a + repeats_a, ...)."""
    group_a, group_b = [run_a, *repeats_a], [run_b, *repeats_b]
    check_group(group_a)
    check_group(group_b)
    steps_a, steps_b = step_means(run_a.steps), step_means(run_b.steps)
    speedup = None
    step_deltas = {}
    if steps_a and steps_b:
        if steps_a["total_ms"] and steps_b["total_ms"]:
            speedup = steps_a["total_ms"] / steps_b["total_ms"]
        step_deltas = {key: (steps_b[key] - steps_a[key]
                             if steps_a[key] is not None and steps_b[key] is not None else None)
                       for key in STEP_KEYS}
    totals_a, totals_b = step_totals(run_a.steps), step_totals(run_b.steps)
    settings_a, settings_b = run_settings(run_a), run_settings(run_b)
    advice_a, advice_b = advise(run_a), advise(run_b)
    ids_a, ids_b = advice_a.ids(), advice_b.ids()
    new = set(ids_b) - set(ids_a) - INFORMATIONAL
    return {
        "run_a": run_a.path, "run_b": run_b.path,
        "a": steps_a, "b": steps_b,
        "speedup": speedup,
        "spread_a": spread(totals_a), "spread_b": spread(totals_b),
        "noise": noise_verdict(totals_a, totals_b),
        "verdict": asdict(verdict(group_a, group_b, noise_floor_pct)) if steps_a and steps_b else None,
        "runs_a": [run.path for run in group_a], "runs_b": [run.path for run in group_b],
        "samples_per_s_a": samples_per_s(run_a), "samples_per_s_b": samples_per_s(run_b),
        "incomparable": incomparable(settings_a, settings_b),
        "step_deltas_ms": step_deltas,
        "settings_a": settings_a, "settings_b": settings_b,
        "differences": [{"setting": row["setting"], "a": row["values"][0], "b": row["values"][1]}
                        for row in differences([settings_a, settings_b])],
        "op_type_deltas": _op_type_deltas(run_a, run_b),
        "queues": {"host": _queue_change(run_a.host_queue, run_b.host_queue),
                   "device": _queue_change(run_a.device_queue, run_b.device_queue)},
        "findings_a": ids_a, "findings_b": ids_b,
        # problems only: an all-clear or a where-the-time-goes finding is neither resolved nor new
        "resolved": sorted(set(ids_a) - set(ids_b) - INFORMATIONAL),
        "new": sorted(new),
        "new_findings": [{"id": f.id, "severity": f.severity, "title": f.title}
                         for f in advice_b.findings if f.id in new],
    }


# ---------------------------------------------------------------------------------------------------------
# The regression gate


def gate(result: dict[str, Any], fail_if_slower_pct: float | None = None,
         fail_on_new: str | None = None) -> dict[str, Any]:
    """The CI verdict on a `compare` result: {"failed", "reasons", "notes"}, one line each.

    Slower fails when the mean step grew by more than `fail_if_slower_pct` and the run-to-run `verdict` calls
    it slower; a larger change within the noise passes with a note (a CI gate that fails on noise gets switched
    off).
    Raises IncomparableRunsError for runs of different devices, networks or batch sizes.
    """
    notes = check_comparable(result)
    reasons = []
    noise = result["noise"]
    if fail_if_slower_pct is not None:
        if noise is None:
            raise PerfkitError("the gate needs step times in both runs: "
                               + " and ".join(path for path, steps in ((result["run_a"], result["a"]),
                                                                       (result["run_b"], result["b"])) if not steps)
                               + " has none")
        change = noise["change_pct"]
        spread_a, spread_b = result["spread_a"], result["spread_b"]
        step_line = (f"B is {change:+.1f} % against A (limit +{fail_if_slower_pct:g} %): mean step "
                     f"{ms(spread_b['mean_ms'])} ({_spread_brief(spread_b)}) vs {ms(spread_a['mean_ms'])} "
                     f"({_spread_brief(spread_a)})")
        if change > fail_if_slower_pct:
            # the run-to-run verdict decides: steps of one run do not show how much a rerun moves
            if result["verdict"]["kind"] == "slower":
                reasons.append(f"slower: {step_line}, {run_verdict_words(result['verdict'])}")
            else:
                notes.append(f"not failed, within the noise: {step_line}, {run_verdict_words(result['verdict'])}")
    if fail_on_new is not None:
        new = [f for f in result["new_findings"] if SEVERITIES.index(f["severity"]) <= SEVERITIES.index(fail_on_new)]
        if new:
            reasons.append(f"new finding{'s' if len(new) > 1 else ''} at or above {fail_on_new}: "
                           + ", ".join(f"{f['id']} ({f['severity']})" for f in new))
    return {"fail_if_slower_pct": fail_if_slower_pct, "fail_on_new": fail_on_new, "failed": bool(reasons),
            "reasons": reasons, "notes": notes}


# ---------------------------------------------------------------------------------------------------------
# Text and markdown


def _spread_words(spread_: dict[str, Any] | None) -> str:
    """"n = 3, median 1,185.9 ms, IQR 67.4 ms, std 72.5 ms" (per-step totals)."""
    if spread_ is None:
        return "no steps"
    std = "n/a" if spread_["std_ms"] is None else f"{spread_['std_ms']:,.1f} ms"
    return (f"n = {spread_['n']}, median {spread_['median_ms']:,.1f} ms, IQR {spread_['iqr_ms']:,.1f} ms, "
            f"std {std}")


def _spread_brief(spread_: dict[str, Any]) -> str:
    return f"n = {spread_['n']}" + ("" if spread_["std_ms"] is None else f", std {spread_['std_ms']:,.1f} ms")


def setting_value(value: Any) -> str:
    return "-" if value is None else str(value)


def _op_rows_by_time(result: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """The op types whose time per step changed most (largest |B - A| ms per step), else by share change."""
    deltas = result["op_type_deltas"]
    if any(d["delta_ms_per_step"] is not None for d in deltas):
        deltas = sorted(deltas, key=lambda d: (-abs(d["delta_ms_per_step"] or 0.0), d["type"]))
    return deltas[:top]


def compare_text(result: dict[str, Any], top: int = 10) -> str:
    """The terminal form of `compare`: steps side by side with their spread, the noise verdict, the speedup,
    what differed, the op types whose time per step changed most."""
    lines = [f"A  {result['run_a']}", f"B  {result['run_b']}", ""]
    if result["incomparable"]:
        lines += [incomparable_banner(result), ""]
    a, b = result["a"], result["b"]
    if a and b:
        lines.append(f"{'mean per step':<24}{'A':>16}{'B':>16}{'B - A':>16}")
        for key in STEP_KEYS:
            delta = result["step_deltas_ms"].get(key)
            lines.append(f"  {key:<22}{ms(a[key]):>16}{ms(b[key]):>16}{ms(delta):>16}")
    else:
        lines.append("steps unknown in " + " and ".join(name for name, s in (("A", a), ("B", b)) if not s))
    lines += ["", "step total spread", f"  A  {_spread_words(result['spread_a'])}",
              f"  B  {_spread_words(result['spread_b'])}"]
    speedup = result["speedup"]
    within_noise = result["noise"] is not None and result["noise"]["verdict"] == NO_CHANGE
    lines += ["", f"speedup A/B  {'unknown' if speedup is None else f'{speedup:.2f}x'}"
                  + (" (within the noise)" if speedup is not None and within_noise else ""),
              f"verdict      {verdict_words(result['noise'])}",
              f"samples/s    {throughput_words(result)}"]
    if result["verdict"] is not None:
        lines.append(f"run-to-run   {run_verdict_words(result['verdict'])}")
    if result["differences"]:
        lines += ["", "what differed (A -> B)"]
        lines += [f"  {row['setting']:<24}{setting_value(row['a'])} -> {setting_value(row['b'])}"
                  for row in result["differences"]]
    else:
        lines += ["", "what differed  nothing the files record"]
    rows = _op_rows_by_time(result, top)
    if rows:
        lines += ["", f"op types, ms per step (largest changes, top {top})",
                  f"  {'type':<30}{'A':>12}{'B':>12}{'B - A':>12}   share A -> B"]
        for row in rows:
            lines.append(f"  {row['type']:<30}{number(row['ms_per_step_a']):>12}{number(row['ms_per_step_b']):>12}"
                         f"{_signed(row['delta_ms_per_step']):>12}   {pct(row['share_a'])} -> {pct(row['share_b'])}")
    for which, change in result["queues"].items():
        if change["empty_pct_a"] is not None or change["empty_pct_b"] is not None:
            lines.append(f"{which} queue empty  {percent(change['empty_pct_a'])} -> {percent(change['empty_pct_b'])}")
    lines += ["", f"resolved  {', '.join(result['resolved']) or '-'}",
              f"new       {', '.join(result['new']) or '-'}"]
    return "\n".join(lines)


def incomparable_banner(result: dict[str, Any]) -> str:
    """One line saying which of device, network, batch size make A and B not the same setup."""
    return banner_words(result["incomparable"], result["settings_a"], result["settings_b"])


def banner_words(keys: Sequence[str], settings_a: dict[str, Any], settings_b: dict[str, Any]) -> str:
    return "NOT LIKE WITH LIKE: A and B differ in " + ", ".join(
        f"{key} ({setting_value(settings_a[key])} vs {setting_value(settings_b[key])})" for key in keys)


def throughput_words(result: dict[str, Any]) -> str:
    """"27.7 -> 13.9 (-50.0 %)", or why it is unknown (no batch size known)."""
    a, b = result["samples_per_s_a"], result["samples_per_s_b"]
    if a is None or b is None:
        return "unknown (batch size unknown: step time compared instead)"
    return f"{a:,.1f} -> {b:,.1f} ({100 * (b - a) / a:+.1f} %)"


def run_verdict_words(verdict_: dict[str, Any]) -> str:
    """The run-level verdict: "no significant change: speedup 1.03x (95 % 0.94-1.14x, noise floor 10 %)"."""
    low, high = verdict_["interval"]
    basis = (f"noise floor {verdict_['noise_floor_pct']:g} %" if verdict_["basis"] == "noise floor"
             else f"{verdict_['basis']}, {verdict_['n_a']} vs {verdict_['n_b']} runs")
    per = ", per sample: batch sizes differ" if verdict_["per_sample"] else ""
    return (f"{verdict_['kind']}: speedup {verdict_['speedup']:.2f}x "
            f"(95 % {low:.2f}-{high:.2f}x, {basis}{per})")


def _signed(value: float | None) -> str:
    """A change in ms as `number` writes it, with its sign: `+40.788`, `-20.083`."""
    return "unknown" if value is None else format(value, "+" + NUMBER_SPEC)


def compare_markdown(result: dict[str, Any], gate_result: dict[str, Any] | None = None, top: int = 10) -> str:
    """A pull-request comment: the gate's outcome, the verdict, spread, what differed, op types per step."""
    lines = [f"### perfkit compare: `{result['run_a']}` → `{result['run_b']}`", ""]
    if gate_result is not None:
        lines.append("**Gate: failed** — " + "; ".join(gate_result["reasons"]) if gate_result["failed"]
                     else "**Gate: passed**")
        lines += [f"> {note}" for note in gate_result["notes"]]
        lines.append("")
    speedup = result["speedup"]
    lines += [f"**{verdict_words(result['noise'])}**"
              + ("" if speedup is None else f" · speedup A/B {speedup:.2f}x"), "",
              "| run | steps | mean | median | IQR | std |", "|---|---:|---:|---:|---:|---:|"]
    for name, spread_ in (("A", result["spread_a"]), ("B", result["spread_b"])):
        if spread_ is None:
            lines.append(f"| {name} | 0 | | | | |")
        else:
            std = "" if spread_["std_ms"] is None else f"{spread_['std_ms']:,.1f}"
            lines.append(f"| {name} | {spread_['n']} | {spread_['mean_ms']:,.1f} ms | {spread_['median_ms']:,.1f} ms "
                         f"| {spread_['iqr_ms']:,.1f} ms | {std} ms |")
    if result["differences"]:
        lines += ["", "| setting | A | B |", "|---|---|---|"]
        lines += [f"| {row['setting']} | {setting_value(row['a'])} | {setting_value(row['b'])} |"
                  for row in result["differences"]]
    rows = _op_rows_by_time(result, top)
    if rows:
        lines += ["", "| op type | A ms/step | B ms/step | B − A | share A → B |", "|---|---:|---:|---:|---|"]
        lines += [f"| {row['type']} | {number(row['ms_per_step_a'])} | {number(row['ms_per_step_b'])} "
                  f"| {_signed(row['delta_ms_per_step'])} "
                  f"| {pct(row['share_a'])} → {pct(row['share_b'])} |"
                  for row in rows]
    resolved = ", ".join(f"`{finding_id}`" for finding_id in result["resolved"]) or "none"
    new = ", ".join(f"`{finding['id']}` ({finding['severity']})" for finding in result["new_findings"]) or "none"
    lines += ["", f"Resolved findings: {resolved} · new: {new}"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# The verdict over groups of runs (repeats): run-to-run noise, throughput, an interval of the speedup

SAME_RUN = "same run"


@dataclass(frozen=True)
class Verdict:
    """B against A over groups of runs. speedup > 1 means B is faster; per sample when the batches differ.
    interval: the 95 % interval of the speedup; basis: "run means" (repeats on both sides: Welch t over the
    log run means) or "noise floor" (a single run on a side: the difference must exceed noise_floor_pct)."""
    kind: str  # "faster", "slower", NO_CHANGE or SAME_RUN
    speedup: float
    interval: tuple[float, float]
    noise_floor_pct: float | None
    basis: str
    per_sample: bool
    n_a: int
    n_b: int
    p_value: float | None = None


def _t_quantile(df: float, two_sided_p: float = SIGNIFICANCE_P) -> float:
    """The t with two-sided tail two_sided_p at df degrees of freedom, by bisection on the Student tail."""
    low, high = 0.0, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        tail = _regularized_beta(df / 2, 0.5, df / (df + mid * mid))
        low, high = (mid, high) if tail > two_sided_p else (low, mid)
    return (low + high) / 2


def global_batch(run: Run) -> int | None:
    """Samples per step over all ranks (data parallel: each rank takes its own batch); None when unknown."""
    batch = _batch_size(run)
    return None if batch is None else batch * (len(run.meta.ranks) or 1)


def run_mean_ms(run: Run, per_sample: bool) -> float | None:
    """The run's mean steady step in ms, or per sample of the global batch (batch x ranks) when per_sample."""
    totals = step_totals(run.steps)
    totals = totals[totals > 0]
    if not len(totals):
        return None
    mean = float(np.mean(totals))
    return mean / global_batch(run) if per_sample else mean


def samples_per_s(run: Run) -> float | None:
    """Global batch (per-rank batch x ranks) per mean steady step; None when the batch is unknown."""
    batch, mean = global_batch(run), run_mean_ms(run, per_sample=False)
    return None if batch is None or not mean else batch * MS_PER_S / mean


def verdict(group_a: Sequence[Run], group_b: Sequence[Run], noise_floor_pct: float = NOISE_FLOOR_PCT) -> Verdict:
    """Whether the runs of B differ from those of A by more than run-to-run noise (see Verdict).

    Steps of one run are not independent draws of the run-to-run variation (a busy machine slows them all), so
    each run counts once, by its mean. Per sample when both batches are known and differ."""
    if not group_a or not group_b:
        raise PerfkitError("compare needs at least one run on each side")
    if sorted(run.path for run in group_a) == sorted(run.path for run in group_b):
        return Verdict(SAME_RUN, 1.0, (1.0, 1.0), None, SAME_RUN, False, len(group_a), len(group_b), 1.0)
    batches_a = {global_batch(run) for run in group_a}
    batches_b = {global_batch(run) for run in group_b}
    per_sample = None not in batches_a | batches_b and batches_a != batches_b
    logs = []
    for group in (group_a, group_b):
        means = [run_mean_ms(run, per_sample) for run in group]
        unknown = [run.path for run, mean in zip(group, means) if not mean]
        if unknown:
            raise PerfkitError(f"{unknown[0]}: no step times to compare")
        logs.append(np.log(np.array(means, dtype=np.float64)))
    log_a, log_b = logs
    log_ratio = float(np.mean(log_a) - np.mean(log_b))  # > 0: B's time is shorter, B is faster
    p_value = None
    if len(log_a) >= 2 and len(log_b) >= 2:
        test = welch_test(log_b, log_a)
        half = _t_quantile(test["df"]) * math.sqrt(np.var(log_a, ddof=1) / len(log_a)
                                                    + np.var(log_b, ddof=1) / len(log_b))
        basis, floor, p_value = "run means", None, test["p"]
        significant = test["p"] < SIGNIFICANCE_P
    else:
        half = math.log1p(noise_floor_pct / 100)
        basis, floor = "noise floor", noise_floor_pct
        significant = abs(log_ratio) > half
    significant = significant and abs(math.expm1(-log_ratio)) * 100 >= MIN_EFFECT_PCT
    kind = NO_CHANGE if not significant else ("faster" if log_ratio > 0 else "slower")
    return Verdict(kind, math.exp(log_ratio), (math.exp(log_ratio - half), math.exp(log_ratio + half)), floor,
                   basis, per_sample, len(log_a), len(log_b), p_value)

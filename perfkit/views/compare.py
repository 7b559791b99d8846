"""Before/after: what changed between two runs of the same training script, and whether it is more than noise.

B is judged against A (the baseline): speedup = A's mean step / B's mean step, so > 1 means B is faster.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..advisor import SEVERITIES, advise
from ..advisor.finding import INFORMATIONAL
from ..analysis import cells
from ..analysis.ledger import steady_means
from ..analysis.measures import STEP_KEYS, op_type_shares, queue_stats, step_means
from ..analysis.steady import steady_steps
from ..core.causes import CAUSES
from ..core.errors import PerfkitError
from ..core.model import Run
from ..core.units import MS_PER_S
from .format import NUMBER_SPEC, ms, number, pct, percent

# The verdict is over runs, each counted once by its mean steady step (`verdict`): steps of one run are not
# independent draws of the run-to-run variation (a busy machine, a data order, another process slow them all),
# so a test over steps calls noise significant (issue 24: identical settings read "71.4 % slower, p = 0.009").
# With repeats on both sides: Welch's t-test on the logarithms of the run means. On the log scale, because
# step-time noise is proportional (a busy machine stretches every step by a factor) and the difference tested is
# then the ratio of the runs' geometric means, what a speedup is; Welch's form, because one side's runs may be
# noisier than the other's. One run against repeats is judged by the repeats' spread; with one run on each side
# there is no spread to test: the measured floor below decides.
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
NO_CHANGE = "no significant change"
# How every view heads the per-step spread: it describes a run, it does not judge a change.
SPREAD_TITLE = "within-run step spread (describes each run; the verdict compares runs)"
# The verdict block names this many causes of the step ledger, the largest changes first (JSON: all of them).
CAUSE_DELTAS_SHOWN = 4

# The gate only judges runs of one setup: these settings must match (device, network). A batch size change is
# like with like: the verdict and the gate judge time per sample then, and say so.
GATE_SETTINGS = ("device", "network")
# MindSpore's op scope names the network cell: Default/network-WithLossCell/_backbone-ResNet50/layer1-...
BACKBONE = re.compile(r"_backbone-([A-Za-z_][A-Za-z0-9_]*)")
# manifest config keys shown under another name (from meta: what was used, not what was asked) or not a setting
# manifest config keys that give the tokens per sample (a user's script may record one)
SEQUENCE_LENGTH_KEYS = ("seq_len", "seq_length", "sequence_length")
CONFIG_NOT_COMPARED = {"output", "env", "device", "ranks", "sink", "amp_level", "mode", "batch_size"}


class Comparison(dict):
    """`perfkit.compare(a, b)`: the `perfkit compare --format json` dict, with the two runs it compares (`runs`),
    so a notebook can show it as the dashboard's compare page does (render/notebook.py)."""

    def __init__(self, result: dict[str, Any], runs: tuple[Run, Run]):
        super().__init__(result)
        self.runs = runs


class IncomparableRunsError(PerfkitError):
    """The gate was asked to judge runs of different devices or networks."""


# ---------------------------------------------------------------------------------------------------------
# Per-step spread (a description of one run) and the t-test


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
    if var_a + var_b == 0:  # both sides perfectly steady: any difference is real, none is noise
        return {"t": math.copysign(math.inf, difference) if difference else 0.0, "df": float(len(a) + len(b) - 2),
                "p": 0.0 if difference else 1.0}
    t = difference / math.sqrt(var_a + var_b)
    df = (var_a + var_b) ** 2 / (var_a ** 2 / (len(a) - 1) + var_b ** 2 / (len(b) - 1))
    return {"t": float(t), "df": float(df), "p": _regularized_beta(float(df) / 2, 0.5, float(df / (df + t * t)))}


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
    """The GATE_SETTINGS (device, network) both runs record, with different values."""
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
    """Raise IncomparableRunsError (one line) when A and B differ in device or network; return a
    note for each of these that a run does not record (not checked)."""
    a, b = result["settings_a"], result["settings_b"]
    differing = incomparable(a, b)
    if differing:
        key = differing[0]
        raise IncomparableRunsError(f"the gate compares runs of one setup, these differ in {key}: "
                                    f"{a[key]} in {result['run_a']}, {b[key]} in {result['run_b']}")
    notes = []
    for key in GATE_SETTINGS:
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


def _cause_means(group: Sequence[Run]) -> pd.Series:
    """The side's mean ms per steady step of each ledger cause: per run the mean over its ranks, then the mean
    over the side's runs (a cause a run does not have took 0 ms in it)."""
    per_run = [steady_means(run, by="cause").drop(columns="total").mean(axis=0) for run in group]
    return pd.concat(per_run, axis=1).fillna(0.0).mean(axis=1) if per_run else pd.Series(dtype="float64")


def cause_deltas(group_a: Sequence[Run], group_b: Sequence[Run]) -> list[dict[str, Any]]:
    """Per cause of the step ledger (perfkit.analysis.ledger.steady_means by cause): ms per steady step on each side and
    B - A, the largest change first; empty when a side has no steady steps."""
    means_a, means_b = _cause_means(group_a), _cause_means(group_b)
    if not len(means_a) or not len(means_b):
        return []
    causes = [cause for cause in CAUSES if cause in means_a.index or cause in means_b.index]
    rows = [{"cause": cause, "label": CAUSES[cause].label, "ms_a": float(means_a.get(cause, 0.0)),
             "ms_b": float(means_b.get(cause, 0.0))} for cause in causes]
    for row in rows:
        row["delta_ms"] = row["ms_b"] - row["ms_a"]
    return sorted(rows, key=lambda row: -abs(row["delta_ms"]))  # stable: CAUSES order among equal changes


def cause_delta_words(deltas: Sequence[dict[str, Any]]) -> str:
    """"forward+backward compute -381.0 ms, data wait (queue evidence) +12.0 ms per step": the largest changes."""
    shown = [row for row in deltas[:CAUSE_DELTAS_SHOWN] if round(row["delta_ms"], 1)]
    if not shown:
        return "no cause changed by 0.1 ms or more per step" if deltas else "unknown (no steady steps)"
    return ", ".join(f"{row['label']} {row['delta_ms']:+,.1f} ms" for row in shown) + " per step"


def compare(run_a: Run, run_b: Run, repeats_a: Sequence[Run] = (), repeats_b: Sequence[Run] = (),
            noise_floor_pct: float = NOISE_FLOOR_PCT, batch_size: int | None = None,
            seq_len: int | None = None) -> dict[str, Any]:
    """The `perfkit compare --format json` contract: B relative to A. The verdict, speedup (> 1: B is faster)
    and throughput (`judge`) are over all runs of each side (run_a + repeats_a, ...); the step tables, the
    within-run spread (a description of each first run) and the op types are the first runs'."""
    group_a, group_b = [run_a, *repeats_a], [run_b, *repeats_b]
    check_group(group_a)
    check_group(group_b)
    judged = judge(group_a, group_b, noise_floor_pct, batch_size, seq_len)
    steps_a, steps_b = step_means(run_a.steps), step_means(run_b.steps)
    step_deltas = {}
    if steps_a and steps_b:
        step_deltas = {key: (steps_b[key] - steps_a[key]
                             if steps_a[key] is not None and steps_b[key] is not None else None)
                       for key in STEP_KEYS}
    settings_a, settings_b = judged["settings_a"], judged["settings_b"]
    advice_a, advice_b = advise(run_a), advise(run_b)
    ids_a, ids_b = advice_a.ids(), advice_b.ids()
    new = set(ids_b) - set(ids_a) - INFORMATIONAL
    return {
        "run_a": run_a.path, "run_b": run_b.path,
        **judged,
        "a": steps_a, "b": steps_b,
        "spread_a": spread(step_totals(run_a.steps)), "spread_b": spread(step_totals(run_b.steps)),
        "runs_a": [run.path for run in group_a], "runs_b": [run.path for run in group_b],
        "cycle_a": run_a.meta.cycle, "cycle_b": run_b.meta.cycle,  # of several profiler runs per rank (--cycle)
        "step_deltas_ms": step_deltas,
        "differences": [{"setting": row["setting"], "a": row["values"][0], "b": row["values"][1]}
                        for row in differences([settings_a, settings_b])],
        "op_type_deltas": _op_type_deltas(run_a, run_b),
        "cell_deltas": cells.delta_items(run_a, run_b),
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

    Slower fails when the mean step grew by more than `fail_if_slower_pct` and the run-to-run verdict (the one
    `compare` shows) calls it slower; a larger change within the noise passes with a note (a CI gate that fails
    on noise gets switched off).
    Raises IncomparableRunsError for runs of different devices or networks.
    """
    notes = check_comparable(result)
    reasons = []
    verdict_ = result["verdict"]
    if fail_if_slower_pct is not None:
        if verdict_ is None:
            raise PerfkitError("the gate needs step times in both runs: "
                               + " and ".join(result["missing_steps"]) + " has none")
        change = 100 * (1 / verdict_["speedup"] - 1)  # of A's mean step (per sample when the batches differ)
        step_line = (f"B is {change:+.1f} % against A (limit +{fail_if_slower_pct:g} %), "
                     f"{run_verdict_words(verdict_)}")
        if change > fail_if_slower_pct:
            # the run-to-run verdict decides: steps of one run do not show how much a rerun moves
            if verdict_["kind"] == "slower":
                reasons.append(f"slower: {step_line}")
            else:
                notes.append(f"not failed, within the noise: {step_line}")
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


def setting_value(value: Any) -> str:
    return "-" if value is None else str(value)


def _op_rows_by_time(result: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """The op types whose time per step changed most (largest |B - A| ms per step), else by share change."""
    deltas = result["op_type_deltas"]
    if any(d["delta_ms_per_step"] is not None for d in deltas):
        deltas = sorted(deltas, key=lambda d: (-abs(d["delta_ms_per_step"] or 0.0), d["type"]))
    return deltas[:top]


def compare_text(result: dict[str, Any], top: int = 10) -> str:
    """The terminal form of `compare`: the verdict block (`verdict_lines`, as every view shows it), the first
    runs' mean step parts side by side and their within-run spread, what differed, the op types whose time per
    step changed most."""
    lines = [f"A  {_side_words(result, 'a')}", f"B  {_side_words(result, 'b')}", ""]
    if result["incomparable"]:
        lines += [incomparable_banner(result), ""]
    lines += [f"{label:<13}{text}" for label, text in verdict_lines(result)]
    a, b = result["a"], result["b"]
    lines.append("")
    if a and b:
        lines.append(f"{'mean per step':<24}{'A':>16}{'B':>16}{'B - A':>16}")
        for key in STEP_KEYS:
            delta = result["step_deltas_ms"].get(key)
            lines.append(f"  {key:<22}{ms(a[key]):>16}{ms(b[key]):>16}{ms(delta):>16}")
    else:
        lines.append("steps unknown in " + " and ".join(name for name, s in (("A", a), ("B", b)) if not s))
    lines += ["", f"{SPREAD_TITLE}", f"  A  {_spread_words(result['spread_a'])}",
              f"  B  {_spread_words(result['spread_b'])}"]
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
    lines += cells.delta_lines(result.get("cell_deltas", []))
    for which, change in result["queues"].items():
        if change["empty_pct_a"] is not None or change["empty_pct_b"] is not None:
            lines.append(f"{which} queue empty  {percent(change['empty_pct_a'])} -> {percent(change['empty_pct_b'])}")
    lines += ["", f"resolved  {', '.join(result['resolved']) or '-'}",
              f"new       {', '.join(result['new']) or '-'}"]
    return "\n".join(lines)


def incomparable_banner(result: dict[str, Any]) -> str:
    """One line saying which of device and network make A and B not the same setup."""
    return banner_words(result["incomparable"], result["settings_a"], result["settings_b"])


def banner_words(keys: Sequence[str], settings_a: dict[str, Any], settings_b: dict[str, Any]) -> str:
    return "NOT LIKE WITH LIKE: A and B differ in " + ", ".join(
        f"{key} ({setting_value(settings_a[key])} vs {setting_value(settings_b[key])})" for key in keys)


def throughput_words(result: dict[str, Any], unit: str = "samples") -> str:
    """"27.7 -> 13.9 (-50.0 %)" samples (or tokens) per s, or why it is unknown (no batch size known)."""
    a, b = result[f"{unit}_per_s_a"], result[f"{unit}_per_s_b"]
    if a is None or b is None:
        return (f"unknown (batch size unknown in {' and '.join(result['batch_unknown'])}: step time compared "
                "instead; --batch-size N gives the global batch)")
    return f"{a:,.1f} -> {b:,.1f} ({100 * (b - a) / a:+.1f} %)"


def _side_words(result: dict[str, Any], side: str) -> str:
    """A side's first run, and how many runs of it the verdict is over when there are repeats."""
    runs, cycle = result[f"runs_{side}"], result.get(f"cycle_{side}")
    return (runs[0] + (f", profiler cycle {cycle}" if cycle is not None else "")
            + (f" (+ {len(runs) - 1} repeats of its settings: {len(runs)} runs)" if len(runs) > 1 else ""))


def verdict_lines(judged: dict[str, Any]) -> list[tuple[str, str]]:
    """The verdict block, (label, text) pairs, as `perfkit compare` (text and markdown), the dashboard's Compare
    cards and the report's compare section all show it: the run verdict, the throughput (tokens/s where both
    sides' sequence length is known), the step ledger's causes that changed most."""
    verdict_ = judged["verdict"]
    return [("verdict", f"unknown: no step times in {' and '.join(judged['missing_steps'])}" if verdict_ is None
             else run_verdict_words(verdict_)),
            ("samples/s", throughput_words(judged)),
            *([("tokens/s", throughput_words(judged, "tokens"))]
              if judged["tokens_per_s_a"] is not None and judged["tokens_per_s_b"] is not None else []),
            ("by cause", cause_delta_words(judged["cause_deltas"]))]


def run_verdict_words(verdict_: dict[str, Any]) -> str:
    """The run-level verdict: "no significant change: speedup 1.03x (95 % 0.94-1.14x, noise floor 10 %)"."""
    if verdict_["kind"] == SAME_RUN:
        return "no change: A and B are the same run"
    low, high = verdict_["interval"]
    basis = (f"noise floor {verdict_['noise_floor_pct']:g} %" if verdict_["basis"] == "noise floor"
             else f"{verdict_['basis']}, {verdict_['n_a']} vs {verdict_['n_b']} runs")
    per = (f", per sample: global batch {verdict_['batch_a']} vs {verdict_['batch_b']}" if verdict_["per_sample"]
           else "")
    return (f"{verdict_['kind']}: speedup {verdict_['speedup']:.2f}x "
            f"(95 % {low:.2f}-{high:.2f}x, {basis}{per})")


def _signed(value: float | None) -> str:
    """A change in ms as `number` writes it, with its sign: `+40.788`, `-20.083`."""
    return "unknown" if value is None else format(value, "+" + NUMBER_SPEC)


def compare_markdown(result: dict[str, Any], gate_result: dict[str, Any] | None = None, top: int = 10) -> str:
    """A pull-request comment: the gate's outcome, the verdict block, the within-run spread, what differed, op
    types per step."""
    lines = [f"### perfkit compare: `{result['run_a']}` → `{result['run_b']}`", ""]
    if gate_result is not None:
        lines.append("**Gate: failed** — " + "; ".join(gate_result["reasons"]) if gate_result["failed"]
                     else "**Gate: passed**")
        lines += [f"> {note}" for note in gate_result["notes"]]
        lines.append("")
    if result["incomparable"]:
        lines += [f"> **{incomparable_banner(result)}**", ""]
    lines += [f"**{label}** {text}  " for label, text in verdict_lines(result)]
    lines += ["", f"{SPREAD_TITLE[0].upper()}{SPREAD_TITLE[1:]}:", "",
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
    log run means), "one run against repeats" (the single run judged by the t prediction interval of the other
    side's repeats) or "noise floor" (one run a side: the difference must exceed noise_floor_pct)."""
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


def t_quantile(df: float, two_sided_p: float = SIGNIFICANCE_P) -> float:
    """The t with two-sided tail two_sided_p at df degrees of freedom, by bisection on the Student tail."""
    low, high = 0.0, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        tail = _regularized_beta(df / 2, 0.5, df / (df + mid * mid))
        low, high = (mid, high) if tail > two_sided_p else (low, mid)
    return (low + high) / 2


def global_batch(run: Run, batch_size: int | None = None) -> int | None:
    """Samples per step over all ranks (data parallel: each rank takes its own batch); else `batch_size`, the
    user's global batch (`compare --batch-size`) for a run whose files do not tell it; None when unknown."""
    batch = _batch_size(run)
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


def _side_mean(values: Sequence[float | None]) -> float | None:
    """The mean over a side's runs; None when a run's value is unknown."""
    return None if not values or None in values else float(np.mean(values))


def judge(group_a: Sequence[Run], group_b: Sequence[Run], noise_floor_pct: float = NOISE_FLOOR_PCT,
          batch_size: int | None = None, seq_len: int | None = None) -> dict[str, Any]:
    """What every compare view shows alike (`verdict_lines`), B's runs against A's: the run `verdict` (None when a
    run has no step times, named in missing_steps) and its speedup, each side's samples/s (the mean over its
    runs), the step ledger's per-cause deltas (`cause_deltas`), and which of device, network, batch size make the
    first runs of the sides not like with like. `batch_size`: the global batch of runs whose files do not tell
    it; `seq_len`: tokens per sample where the manifest does not say (tokens/s)."""
    settings_a, settings_b = run_settings(group_a[0]), run_settings(group_b[0])
    runs = (*group_a, *group_b)
    missing = list(dict.fromkeys(run.path for run in runs if run_mean_ms(run, per_sample=False) is None))
    judged = None if missing else verdict(group_a, group_b, noise_floor_pct, batch_size)
    sides = (("a", group_a), ("b", group_b))
    return {"verdict": None if judged is None else asdict(judged), "missing_steps": missing,
            "speedup": None if judged is None else judged.speedup,
            "batch_unknown": list(dict.fromkeys(run.path for run in runs if global_batch(run, batch_size) is None)),
            **{f"samples_per_s_{side}": _side_mean([samples_per_s(run, batch_size) for run in group])
               for side, group in sides},
            **{f"tokens_per_s_{side}": _side_mean([tokens_per_s(run, batch_size, seq_len) for run in group])
               for side, group in sides},
            "cause_deltas": cause_deltas(group_a, group_b),
            "incomparable": incomparable(settings_a, settings_b), "settings_a": settings_a, "settings_b": settings_b}


def verdict(group_a: Sequence[Run], group_b: Sequence[Run], noise_floor_pct: float = NOISE_FLOOR_PCT,
            batch_size: int | None = None) -> Verdict:
    """Whether the runs of B differ from those of A by more than run-to-run noise (see Verdict).

    Steps of one run are not independent draws of the run-to-run variation (a busy machine slows them all), so
    each run counts once, by its mean. Per sample when both global batches are known (`batch_size`: the user's,
    for runs whose files do not tell it) and differ."""
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
    p_value = None
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
        p_value = (_regularized_beta(df / 2, 0.5, df / (df + (log_ratio / scale) ** 2)) if scale
                   else float(log_ratio == 0))
        basis, floor = "one run against repeats", None
        significant = p_value < SIGNIFICANCE_P
    else:
        half = math.log1p(noise_floor_pct / 100)
        basis, floor = "noise floor", noise_floor_pct
        significant = abs(log_ratio) > half
    significant = significant and abs(math.expm1(-log_ratio)) * 100 >= MIN_EFFECT_PCT
    kind = NO_CHANGE if not significant else ("faster" if log_ratio > 0 else "slower")
    return Verdict(kind, math.exp(log_ratio), (math.exp(log_ratio - half), math.exp(log_ratio + half)), floor,
                   basis, per_sample, len(log_a), len(log_b), p_value, global_batch(group_a[0], batch_size),
                   global_batch(group_b[0], batch_size))

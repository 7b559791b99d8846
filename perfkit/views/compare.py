"""Before/after: the comparison of two runs of the same training script (the `perfkit compare --format json`
dict): what differed between them, the verdict and throughput over their repeats (analysis/statistics.py), the
step ledger's per-cause deltas, the findings resolved and new, the CI gate, and the verdict block's words that
every compare view shows (the terminal's and markdown's text: perfkit/render/compare.py).

B is judged against A (the baseline): speedup = A's mean step / B's mean step, so > 1 means B is faster.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import PurePath
from typing import Any, Sequence

import numpy as np
import pandas as pd

from ..advisor import SEVERITIES, advise
from ..advisor.finding import INFORMATIONAL
from ..analysis import cells
from ..analysis.ledger import steady_means
from ..analysis.measures import STEP_KEYS, amp_level_shown, op_type_shares, queue_stats, step_means
from ..analysis.statistics import (
    NO_CHANGE,
    REPEAT_ADVICE,
    SAME_RUN,
    global_batch,
    per_rank_batch,
    run_mean_ms,
    samples_per_s,
    spread,
    step_totals,
    tokens_per_s,
    verdict,
)
from ..core.causes import CAUSES
from ..core.errors import PerfkitError
from ..core.model import Run

# How every view heads the per-step spread: it describes a run, it does not judge a change.
SPREAD_TITLE = "within-run step spread (describes each run; the verdict compares runs)"
# The verdict block names this many causes of the step ledger, the largest changes first (JSON: all of them).
CAUSE_DELTAS_SHOWN = 4

# The gate only judges runs of one setup: these settings must match (device, network, the user's script where
# `perfkit profile --` recorded it: a script's own options may change, another script is another setup). A batch
# size change is like with like: the verdict and the gate judge time per sample then, and say so.
GATE_SETTINGS = ("device", "network", "script")
# A setting of GATE_SETTINGS that a run does not record is said in a gate note, but for the script: only runs of a
# user's script record one.
NOTED_WHEN_UNKNOWN = ("device", "network")
# MindSpore's op scope names the network cell: Default/network-WithLossCell/_backbone-ResNet50/layer1-...
BACKBONE = re.compile(r"_backbone-([A-Za-z_][A-Za-z0-9_]*)")
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
# What differed between the runs


def _network_name(run: Run) -> str | None:
    """The network cell named in the op scopes (`_backbone-ResNet50`), the one most op names carry; None if
    unnamed (op names without scopes, e.g. the new layout's `Conv2D1`)."""
    if not len(run.ops):
        return None
    names = pd.Series(run.ops["name"].unique()).astype(str).str.extract(BACKBONE, expand=False).dropna()
    return str(names.value_counts().index[0]) if len(names) else None


def run_settings(run: Run) -> dict[str, Any]:
    """How the run was made, as far as its files tell: meta, the manifest's config and env, the network."""
    meta = run.meta
    settings: dict[str, Any] = {
        "device": meta.device, "ranks": len(meta.ranks) or None, "network": _network_name(run),
        # the script by its file name: the same train.py in two checkouts (old and new code) is one setup
        "script": PurePath(meta.script).name if meta.script else None,
        "batch_size": per_rank_batch(run),
        "mode": meta.mode, "data_mode": meta.data_mode, "amp_level": amp_level_shown(run),
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
    """The GATE_SETTINGS (device, network, script) both runs record, with different values."""
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
    """Raise IncomparableRunsError (one line) when A and B differ in device, network or script; return a
    note for each of device and network that a run does not record (not checked)."""
    a, b = result["settings_a"], result["settings_b"]
    differing = incomparable(a, b)
    if differing:
        key = differing[0]
        raise IncomparableRunsError(f"the gate compares runs of one setup, these differ in {key}: "
                                    f"{a[key]} in {result['run_a']}, {b[key]} in {result['run_b']}")
    notes = []
    for key in NOTED_WHEN_UNKNOWN:
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


# settings that differ between repeats of one setting by nature (where each wrote, when)
NOT_A_SETTING = {"output"}


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
            noise_floor_pct: float | None = None, batch_size: int | None = None,
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


def setting_value(value: Any) -> str:
    return "-" if value is None else str(value)


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


def verdict_headline(judged: dict[str, Any]) -> str:
    """The verdict in a few words, a card's value: "faster 2.08x", "no significant change", "same run", "unknown"
    (the speedup is named only where the verdict calls it; `run_verdict_words` says the rest)."""
    verdict_ = judged["verdict"]
    if verdict_ is None:
        return "unknown"
    if verdict_["kind"] in (NO_CHANGE, SAME_RUN):
        return verdict_["kind"]
    return f"{verdict_['kind']} {verdict_['speedup']:.2f}x"


def run_verdict_words(verdict_: dict[str, Any]) -> str:
    """The run-level verdict: "no significant change: speedup 1.03x (95 % 0.94-1.14x, noise floor 10 %)", and where
    a side has one run and the change is within the noise, what would decide it (REPEAT_ADVICE)."""
    if verdict_["kind"] == SAME_RUN:
        return "no change: A and B are the same run"
    low, high = verdict_["interval"]
    source = verdict_.get("noise_floor_source")
    floor = verdict_["noise_floor_pct"]
    if verdict_["basis"] == "noise floor":
        basis = (f"noise floor {round(floor, 1) if floor < 100 else round(floor):g} %"
                 + (f", {source}" if source not in (None, "given") else ""))
    else:
        basis = f"{verdict_['basis']}, {verdict_['n_a']} vs {verdict_['n_b']} runs"
    per = (f", per sample: global batch {verdict_['batch_a']} vs {verdict_['batch_b']}" if verdict_["per_sample"]
           else "")
    single = [side for side in ("a", "b") if verdict_[f"n_{side}"] == 1]
    undecided = (f"; one run {'a side' if len(single) == 2 else 'in ' + single[0].upper()} cannot decide: "
                 f"{REPEAT_ADVICE} {'each side' if len(single) == 2 else 'for ' + single[0].upper()}, "
                 "then compare the folders" if verdict_["kind"] == NO_CHANGE and single else "")
    return (f"{verdict_['kind']}: speedup {verdict_['speedup']:.2f}x "
            f"(95 % {low:.2f}-{high:.2f}x, {basis}{per}){undecided}")


# ---------------------------------------------------------------------------------------------------------
# The verdict over groups of runs (repeats): run-to-run noise, throughput, the causes that changed


def _side_mean(values: Sequence[float | None]) -> float | None:
    """The mean over a side's runs; None when a run's value is unknown."""
    return None if not values or None in values else float(np.mean(values))


def judge(group_a: Sequence[Run], group_b: Sequence[Run], noise_floor_pct: float | None = None,
          batch_size: int | None = None, seq_len: int | None = None) -> dict[str, Any]:
    """What every compare view shows alike (`verdict_lines`), B's runs against A's: the run `verdict` (None when a
    run has no step times, named in missing_steps) and its speedup, each side's samples/s (the mean over its
    runs), the step ledger's per-cause deltas (`cause_deltas`), and which of device, network, script make the
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

"""`perfkit compare`'s text: the terminal's (`compare_text`) and a pull-request comment's (`compare_markdown`),
both over the comparison dict (views/compare.py) and its verdict block, worded there once for every view."""

from __future__ import annotations

from typing import Any

from ..analysis import cells
from ..analysis.measures import STEP_KEYS
from ..views.compare import SPREAD_TITLE, banner_words, setting_value, verdict_lines
from ..views.format import NUMBER_SPEC, ms, number, pct, percent


def _side_words(result: dict[str, Any], side: str) -> str:
    """A side's first run, and how many runs of it the verdict is over when there are repeats."""
    runs, cycle = result[f"runs_{side}"], result.get(f"cycle_{side}")
    return (runs[0] + (f", profiler cycle {cycle}" if cycle is not None else "")
            + (f" (+ {len(runs) - 1} repeats of its settings: {len(runs)} runs)" if len(runs) > 1 else ""))


def _spread_words(spread_: dict[str, Any] | None) -> str:
    """"n = 3, median 1,185.9 ms, IQR 67.4 ms, std 72.5 ms" (per-step totals)."""
    if spread_ is None:
        return "no steps"
    std = "n/a" if spread_["std_ms"] is None else f"{spread_['std_ms']:,.1f} ms"
    return (f"n = {spread_['n']}, median {spread_['median_ms']:,.1f} ms, IQR {spread_['iqr_ms']:,.1f} ms, "
            f"std {std}")


def _signed(value: float | None) -> str:
    """A change in ms as `number` writes it, with its sign: `+40.788`, `-20.083`."""
    return "unknown" if value is None else format(value, "+" + NUMBER_SPEC)


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
    """One line saying which of device, network and script make A and B not the same setup."""
    return banner_words(result["incomparable"], result["settings_a"], result["settings_b"])


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

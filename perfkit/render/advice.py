"""Advice for people: a ranked terminal text (numbers first) and markdown for CI comments."""

from __future__ import annotations

from ..advisor import Advice
from ..advisor.finding import Finding
from ..views.format import evidence
from ..views.lines import bound_text, op_ranks_label, op_ranks_line, run_line, status_lines
from ..views.summary import run_panel


def _gain(finding: Finding) -> str:
    return "gain unknown" if finding.est_gain_pct is None else f"up to {finding.est_gain_pct:.1f} % of step"


def _evidence(finding: Finding, sep: str) -> str:
    return sep.join(f"{key} {evidence(value)}" for key, value in finding.evidence.items())


def _heading(advice: Advice) -> list[str]:
    """The run panel every terminal answer starts with, where the Advice knows its run; else its path and device."""
    if advice.source is not None:
        return status_lines(run_panel(advice.source))
    return [run_line(advice.run, None), f"device   {advice.device or 'unknown'}", *op_ranks_line(advice.op_ranks)]


def advice_text(advice: Advice) -> str:
    lines = _heading(advice)
    if advice.caveat:
        lines.insert(0, f"WARNING: {advice.caveat}")
    lines += ["", *bound_text(advice.bound), ""]
    if not advice.findings:
        lines.append("no findings")
    else:
        lines.append(f"{len(advice.findings)} finding{'s' if len(advice.findings) > 1 else ''}, "
                     "most important first")
    for number, finding in enumerate(advice.findings, 1):
        target = f"  [{finding.target}]" if finding.target else ""
        lines += ["", f"{number}. {finding.severity.upper():<6} {finding.id:<18} {_gain(finding)}{target}",
                  f"   {_evidence(finding, '   ')}",
                  f"   {finding.title}",
                  f"   do: {finding.action}"]
    if advice.passed:
        lines += ["", f"checked, nothing found: {', '.join(advice.passed)}"]
    if advice.not_checked:
        lines.append("")
        lines += [f"not checked: {rule_id}: {reason}" for rule_id, reason in advice.not_checked.items()]
    return "\n".join(lines)


def advice_markdown(advice: Advice) -> str:
    cycle = advice.source.meta.cycle if advice.source is not None else None
    lines = [f"### perfkit advise: `{advice.run}`{f' (profiler cycle {cycle})' if cycle is not None else ''} "
             f"({advice.device or 'device unknown'})", ""]
    if advice.caveat:
        lines += [f"**Warning: {advice.caveat}**", ""]
    if advice.bound:
        lines += [f"Bound: **{advice.bound['kind']}**", ""]
    if advice.op_ranks:
        lines += [f"Op-level numbers (op types, memory, Cells): {op_ranks_label(advice.op_ranks)}", ""]
    if not advice.findings:
        lines.append("No findings.")
    else:
        lines += ["| # | severity | rule | est. gain | target | finding |", "|---|---|---|---|---|---|"]
        for number, f in enumerate(advice.findings, 1):
            gain = "" if f.est_gain_pct is None else f"{f.est_gain_pct:.1f} %"
            lines.append(f"| {number} | {f.severity} | `{f.id}` | {gain} | {f.target or ''} | {f.title} |")
        for number, f in enumerate(advice.findings, 1):
            lines += ["", f"**{number}. `{f.id}`**: {_evidence(f, ', ')}", "", f"```\n{f.action}\n```"]
    if advice.not_checked:
        lines += ["", "Not checked: " + "; ".join(f"`{rule_id}` ({reason})"
                                                 for rule_id, reason in advice.not_checked.items())]
    return "\n".join(lines)

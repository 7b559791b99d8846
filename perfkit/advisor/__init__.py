"""Tuning advice: run every rule over a Run and rank what they find.

>>> advice = advise(perfkit.load("profiler_v1"))   # doctest: +SKIP
>>> [f.id for f in advice.findings]                # doctest: +SKIP
['sink_mode', 'amp_level']
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..analysis.ledger import Claim, allocate, bound, steady_ms
from ..analysis.representatives import op_coverage
from ..core.model import Run
from .finding import SEVERITIES, Finding, NotChecked, at_or_above, rank_key, severity_for
from .registry import PluginFailed, Rule, checked_by_plugin, installed_rules, needs_met, rule
from .rules import RULES

__all__ = ["Advice", "Finding", "NotChecked", "Rule", "SEVERITIES", "advise", "at_or_above", "needs_met", "rule"]

# A run that failed or was interrupted with fewer profiled steps than this is not advised on: one or two steps
# of a broken run are start-up (compilation, first batches), not the training the user wants to speed up.
MIN_STEPS_OF_INCOMPLETE_RUN = 3
INCOMPLETE = ("failed", "interrupted", "running")


@dataclass
class Advice:
    run: str
    device: str | None
    findings: list[Finding]                                  # most important first
    not_checked: dict[str, str] = field(default_factory=dict)  # rule id -> why it could not look
    passed: list[str] = field(default_factory=list)          # rules that looked and found nothing
    bound: dict[str, Any] | None = None                      # ledger.bound(run).to_dict()
    caveat: str | None = None                                # said before anything else (a failed run)
    # the ranks the op-level numbers cover where not every rank's (representatives.op_coverage)
    op_ranks: dict[str, Any] | None = None
    # the run advised on, for the run panel its terminal and markdown forms start with; not part of the JSON
    source: Run | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The `perfkit advise --format json` contract."""
        return {"run": self.run, "device": self.device, "caveat": self.caveat, "bound": self.bound,
                "findings": [f.to_dict() for f in self.findings],
                "not_checked": [{"rule": rule_id, "reason": reason} for rule_id, reason in self.not_checked.items()],
                "passed": list(self.passed),
                **({"op_ranks": self.op_ranks} if self.op_ranks is not None else {})}

    def ids(self) -> list[str]:
        return [f.id for f in self.findings]


def _caveat(run: Run) -> tuple[str | None, str | None]:
    """What to say first about a run that did not finish, and why no rule may look at it (None: they may)."""
    if run.meta.status not in INCOMPLETE:
        return None, None
    steps = int(run.steps.groupby("rank")["step"].nunique().max()) if len(run.steps) else 0
    said = f"the run {run.meta.status} after {steps} profiled step(s): its numbers cover only that part"
    if steps < MIN_STEPS_OF_INCOMPLETE_RUN:
        return said + "; too few steps to advise from", f"run {run.meta.status} after {steps} profiled step(s)"
    return said, None


def claimed(run: Run, findings: list[Finding], rule_claims: dict[str, tuple[str, ...]]) -> list[Finding]:
    """The findings with the ledger ms each claims (most important first: ledger.allocate gives no ms twice), their
    gain the claim's share of the run and their severity from it. A finding claims the causes its rule declares,
    or its own `claim`, up to the gain its rule estimated; one without a gain or causes claims nothing."""
    basis = steady_ms(run)
    requests = []
    for finding in findings:
        spec = finding.claim or (Claim(rule_claims[finding.id]) if rule_claims.get(finding.id) else None)
        if spec is None or finding.est_gain_pct is None or basis <= 0:
            requests.append(None)
            continue
        requests.append(replace(spec, cap_ms=finding.est_gain_pct / 100.0 * basis))
    given = iter(allocate(run, [request for request in requests if request is not None]))
    result = []
    for finding, request in zip(findings, requests):
        if request is None:
            result.append(finding)
            continue
        claims = next(given)
        gain = round(100.0 * sum(claims.values()) / basis, 2)
        result.append(replace(finding, claims={cause: round(ms, 3) for cause, ms in claims.items()},
                              est_gain_pct=gain, severity=severity_for(gain)))
    return result


def advise(run: Run) -> Advice:
    findings: list[Finding] = []
    not_checked: dict[str, str] = {}
    passed: list[str] = []
    caveat, refused = _caveat(run)
    plugin_rules, plugin_problems = installed_rules()
    for each_rule in [*RULES, *plugin_rules]:
        missing = refused or each_rule.missing(run)
        if missing:
            not_checked[each_rule.id] = missing
            continue
        try:
            found = checked_by_plugin(each_rule, run) if each_rule.plugin else each_rule.check(run)
        except (NotChecked, PluginFailed) as skip:
            not_checked[each_rule.id] = skip.reason
            continue
        findings.extend(found)
        if not found:
            passed.append(each_rule.id)
    # a plugin that could not be imported, or some of whose rules were refused, is one line naming it
    not_checked |= plugin_problems
    rule_claims = {each.id: each.claims for each in [*RULES, *plugin_rules]}
    findings = claimed(run, sorted(findings, key=rank_key), rule_claims)
    return Advice(run=run.path, device=run.meta.device, findings=sorted(findings, key=rank_key),
                  not_checked=not_checked, passed=passed, bound=bound(run).to_dict(), caveat=caveat,
                  op_ranks=op_coverage(run), source=run)

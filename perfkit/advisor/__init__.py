"""Tuning advice: run every rule over a Run and rank what they find.

>>> advice = advise(perfkit.load("profiler_v1"))   # doctest: +SKIP
>>> [f.id for f in advice.findings]                # doctest: +SKIP
['sink_mode', 'amp_level']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ledger import bound
from ..model import Run
from .finding import SEVERITIES, Finding, NotChecked, at_or_above, rank_key
from .rules import RULES

__all__ = ["Advice", "Finding", "NotChecked", "SEVERITIES", "advise", "at_or_above"]

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

    def to_dict(self) -> dict[str, Any]:
        """The `perfkit advise --format json` contract."""
        return {"run": self.run, "device": self.device, "caveat": self.caveat, "bound": self.bound,
                "findings": [f.to_dict() for f in self.findings],
                "not_checked": [{"rule": rule_id, "reason": reason} for rule_id, reason in self.not_checked.items()],
                "passed": list(self.passed)}

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


def advise(run: Run) -> Advice:
    findings: list[Finding] = []
    not_checked: dict[str, str] = {}
    passed: list[str] = []
    caveat, refused = _caveat(run)
    for rule in RULES:
        missing = refused or rule.missing(run)
        if missing:
            not_checked[rule.id] = missing
            continue
        try:
            found = rule.check(run)
        except NotChecked as skip:
            not_checked[rule.id] = skip.reason
            continue
        findings.extend(found)
        if not found:
            passed.append(rule.id)
    return Advice(run=run.path, device=run.meta.device, findings=sorted(findings, key=rank_key),
                  not_checked=not_checked, passed=passed, bound=bound(run).to_dict(), caveat=caveat)

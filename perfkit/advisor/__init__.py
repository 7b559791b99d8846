"""Tuning advice: run every rule over a Run and rank what they find.

>>> advice = advise(perfkit.load("profiler_v1"))   # doctest: +SKIP
>>> [f.id for f in advice.findings]                # doctest: +SKIP
['sink_mode', 'amp_level']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import Run
from .finding import SEVERITIES, Finding, NotChecked, at_or_above, rank_key
from .rules import RULES

__all__ = ["Advice", "Finding", "NotChecked", "SEVERITIES", "advise", "at_or_above"]


@dataclass
class Advice:
    run: str
    device: str | None
    findings: list[Finding]                                  # most important first
    not_checked: dict[str, str] = field(default_factory=dict)  # rule id -> why it could not look

    def to_dict(self) -> dict[str, Any]:
        """The `perfkit advise --format json` contract."""
        return {"run": self.run, "device": self.device, "findings": [f.to_dict() for f in self.findings]}

    def ids(self) -> list[str]:
        return [f.id for f in self.findings]


def advise(run: Run) -> Advice:
    findings: list[Finding] = []
    not_checked: dict[str, str] = {}
    for rule in RULES:
        missing = rule.missing(run)
        if missing:
            not_checked[rule.id] = missing
            continue
        try:
            findings.extend(rule.check(run))
        except NotChecked as skip:
            not_checked[rule.id] = skip.reason
    return Advice(run=run.path, device=run.meta.device, findings=sorted(findings, key=rank_key),
                  not_checked=not_checked)

"""What a rule returns: a Finding (something to change, with the numbers behind it), or NotChecked."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .change import Change

SEVERITIES = ("high", "medium", "low")

# Severity from the share of step time a change can win back. msprof-analyze calls an issue High at >= 5 %
# and Medium at >= 3 % of step time (docs/formats.md §4); perfkit's rules only fire at >= 5 % in the first place,
# so High is raised to 10 %: a tenth of every step back is what a user should do first.
HIGH_GAIN_PCT = 10.0
MEDIUM_GAIN_PCT = 3.0


@dataclass(frozen=True)
class Finding:
    id: str                        # rule id, stable: scripts match on it
    severity: str                  # high / medium / low
    title: str
    evidence: dict[str, float]     # the numbers the rule decided on; units in the key names
    action: str                    # the exact change to make in the user's script or environment
    target: str | None = None      # the op type, dataset op or rank the finding is about
    est_gain_pct: float | None = None  # share of step time the change can win back (upper bound), or None
    # What it claims of the step ledger (perfkit/analysis/ledger.py), set by `advise`: cause -> ms over the run. Two
    # findings never claim the same ms, so est_gain_pct, the claim's share of the run, never adds up past the step.
    claims: dict[str, float] = field(default_factory=dict)
    claim: Any = field(default=None, compare=False, repr=False)  # a ledger.Claim overriding the rule's causes
    # the action as a setting a program can apply (perfkit tune), where the action is one; None otherwise
    change: Change | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, claim=None))
        del data["claim"]
        data["change"] = self.change.to_dict() if self.change is not None else None
        data["claimed_ms"] = round(sum(self.claims.values()), 3)
        return data


class NotChecked(Exception):
    """Raised by a rule that cannot judge this run (data missing, or the advice cannot apply on this device)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def severity_for(est_gain_pct: float | None, default: str = "medium") -> str:
    if est_gain_pct is None:
        return default
    if est_gain_pct >= HIGH_GAIN_PCT:
        return "high"
    if est_gain_pct >= MEDIUM_GAIN_PCT:
        return "medium"
    return "low"


def rank_key(finding: Finding) -> tuple:
    """Most important first: severity, then the larger estimated gain, then the id for a stable order."""
    gain = finding.est_gain_pct if finding.est_gain_pct is not None else -1.0
    return (SEVERITIES.index(finding.severity), -gain, finding.id)


# Findings that say where things stand rather than what is wrong: they never fail a CI gate (`--fail-on low`).
INFORMATIONAL = frozenset({"data_pipeline_ok", "compute_bound"})


def at_or_above(finding: Finding, severity: str) -> bool:
    """Whether `finding` is a problem at `severity` or worse (informational findings never are)."""
    return finding.id not in INFORMATIONAL and SEVERITIES.index(finding.severity) <= SEVERITIES.index(severity)

"""Cluster-wide questions over many ranks: which ranks are slow.

`perfkit.load` on a 256-rank run reads every kernel table of every rank. The slow-rank question
needs only each rank's step times, so it reads only the step files (`loader.load_steps`): 256
ranks in about a second, cold, with nothing to cache.

>>> answer = slow_ranks("cluster_run")          # doctest: +SKIP
>>> answer.slow, answer.per_rank.head()          # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .errors import LayoutError
from .loader import load_steps
from .steady import steady_steps

# msprof-analyze: slow rank when (max - min) / mean > 5 %. Every spread is taken relative to the mean
# step (not the mean of that dimension) so that a 0.1 ms interval next to a 0.2 ms one is not a
# "100 % slower" rank. The advisor's slow_rank rule and `perfkit summary` use this answer too.
SLOW_RANK_SPREAD = 0.05

# Per-step means compared across ranks, and whether a rank that is higher than the others is itself
# the slow one. A rank with more communication is usually waiting for a slow peer, so it is reported
# (as msprof-analyze does, max and min rank) but does not make that rank slow.
DIMENSIONS = {"total_ms": True, "interval_ms": True, "computing_ms": True, "comm_ms": False}
# Shown beside them, not judged: the communication not overlapped with compute, which `advise` weighs
# (analysis.rank_parts) where the step files measure it.
SHOWN = ("comm_exposed_ms",)


@dataclass
class SlowRanks:
    """Per-rank mean step times and the dimensions whose spread across ranks exceeds SLOW_RANK_SPREAD."""

    path: str
    per_rank: pd.DataFrame                  # rank, steps, and the mean of each DIMENSIONS column
    findings: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def slow(self) -> list[int]:
        """Ranks that stand out in a dimension where more time means the rank itself is slow."""
        return sorted({rank for finding in self.findings if finding["rank_is_slow"] for rank in finding["ranks"]})

    def to_dict(self) -> dict[str, Any]:
        frame = self.per_rank.astype(object).where(self.per_rank.notna(), None)
        return {"run": self.path, "threshold": SLOW_RANK_SPREAD, "slow_ranks": self.slow,
                "findings": self.findings, "per_rank": frame.to_dict(orient="records"), "warnings": self.warnings}


def slow_ranks(path: str | os.PathLike, dask=None) -> SlowRanks:
    """Which ranks are slow, by msprof-analyze's rule: (max - min) / mean step > SLOW_RANK_SPREAD. `dask`: read
    the step files on that Dask cluster (loader.load_steps)."""
    root, steps, warnings = load_steps(path, dask)
    if not len(steps):
        raise LayoutError("no per-step times found in any rank (step_trace_time.csv / step_trace_raw_*)", root)
    return of_steps(str(root), steps, warnings)


def of_steps(path: str, steps: pd.DataFrame, warnings: list[str] | None = None) -> SlowRanks:
    """The slow-rank answer from a steps table (the Run's, or the step files' alone): per-rank means over
    the steady-state steps (steady.steady_steps), `steps` counting every profiled one."""
    means = (steady_steps(steps).groupby("rank", sort=True)
             .agg(**{column: (column, "mean") for column in (*DIMENSIONS, *SHOWN) if column in steps}))
    per_rank = (steps.groupby("rank", sort=True).agg(steps=("step", "size")).join(means).reset_index())
    return SlowRanks(path=path, per_rank=per_rank, findings=_findings(per_rank), warnings=list(warnings or []))


def _findings(per_rank: pd.DataFrame) -> list[dict[str, Any]]:
    mean_total = float(per_rank["total_ms"].mean())
    findings = []
    for column, rank_is_slow in DIMENSIONS.items():
        values = per_rank.set_index("rank")[column].dropna()
        if len(values) < 2 or not mean_total > 0:
            continue
        spread = float(values.max() - values.min()) / mean_total
        if spread <= SLOW_RANK_SPREAD:
            continue
        standing_out = values[(values - values.min()) / mean_total > SLOW_RANK_SPREAD]
        findings.append({
            "dimension": column, "spread": spread, "mean_step_ms": mean_total, "rank_is_slow": rank_is_slow,
            "max_rank": int(values.idxmax()), "min_rank": int(values.idxmin()),
            "ranks": [int(rank) for rank in standing_out.index],
        })
    return findings

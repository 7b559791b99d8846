"""Cluster-wide questions over many ranks: which ranks are slow.

Every view that names slow ranks (`perfkit ranks`, `summary`, `advise`'s slow_rank and communication findings, the
Ranks page, the report) takes this answer, and it reads the step ledger's per-rank roll-up (ledger.rank_parts): the
same compute, communication and idle ms per rank that the summary and the Ranks page show.

Ranks that meet at collectives (data parallel) end each step together: the ones that arrive early wait for the
last. A rank's extra compute or idle time that lies inside that wait costs nothing, so a rank is slow there only
when its own time (the step less its collective communication and pipeline wait, where it waits for its peers:
`own_ms`) stands out: the culprit the others wait for, never its waiters.

>>> answer = slow_ranks("cluster_run")          # doctest: +SKIP
>>> answer.slow, answer.per_rank.head()          # doctest: +SKIP
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..core.causes import BOUND_PARTS
from ..core.errors import LayoutError
from ..core.model import Run

# msprof-analyze: slow rank when (max - min) / mean > 5 %. Every spread is taken relative to the mean
# step (not the mean of that dimension) so that a 0.1 ms idle time next to a 0.2 ms one is not a
# "100 % slower" rank. The advisor's slow_rank rule and `perfkit summary` use this answer too.
SLOW_RANK_SPREAD = 0.05

# Per-rank means of the ledger compared across ranks, and whether a rank that is higher than the others is
# itself the slow one. Data-parallel ranks meet at every collective, so their step totals agree: a rank that
# computes longer shows in compute while the others show the wait as communication, so a rank with more
# communication is reported (as msprof-analyze does, max and min rank) but is not made slow by it.
# idle_ms: the step's time with the device idle (data wait, host, unknown). own_ms: the step less the rank's
# collective communication and pipeline wait (module docstring).
DIMENSIONS = {"total_ms": True, "own_ms": True, "idle_ms": True, "compute_ms": True, "communication_ms": False}
# The per-rank columns: the ledger's bound parts per steady step.
PART_COLUMNS = {part: f"{part}_ms" for part in BOUND_PARTS}


@dataclass
class SlowRanks:
    """Per-rank mean step split (the ledger's) and the dimensions whose spread across ranks that should
    match exceeds SLOW_RANK_SPREAD."""

    path: str
    per_rank: pd.DataFrame                  # rank, steps, total_ms, the bound parts (compute_ms, ...), idle_ms
    findings: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cycle: int | str | None = None          # the profiler cycle read (--cycle), None where not chosen

    @property
    def slow(self) -> list[int]:
        """Ranks that stand out in a dimension where more time means the rank itself is slow."""
        return sorted({rank for finding in self.findings if finding["rank_is_slow"] for rank in finding["ranks"]})

    def to_dict(self) -> dict[str, Any]:
        frame = self.per_rank.astype(object).where(self.per_rank.notna(), None)
        return {"run": self.path, "cycle": self.cycle, "threshold": SLOW_RANK_SPREAD, "slow_ranks": self.slow,
                "findings": self.findings, "per_rank": frame.to_dict(orient="records"), "warnings": self.warnings}


def slow_ranks(path: str | os.PathLike, dask=None, cycle=None, ranks=None) -> SlowRanks:
    """Which ranks are slow, by msprof-analyze's rule: (max - min) / mean step > SLOW_RANK_SPREAD. `dask`: read
    the ranks on that Dask cluster; `cycle`: which profiler cycle of each rank; `ranks`: whose op-level tables
    (loader.load)."""
    from ..io.loader import load
    run = load(path, dask, cycle, ranks)
    if not len(run.steps):
        raise LayoutError("no per-step times found in any rank (step_trace_time.csv / step_trace_raw_*)", run.path)
    return of_run(run)


def rank_groups(run: Run) -> list[list[int]]:
    """Ranks that should take the same time per step: each pipeline stage where the files name the stages
    (stages compute different layers, so a later stage computing longer is pipeline_stage_imbalance's
    finding, not a slow rank), else all ranks."""
    ranks = sorted(int(r) for r in run.steps["rank"].unique()) if len(run.steps) else []
    stages = [[r for r in stage if r in ranks] for stage in (run.meta.pipeline_stages or [])]
    stages = [stage for stage in stages if stage]
    return stages if len(stages) > 1 else [ranks]


def per_rank_split(run: Run) -> pd.DataFrame:
    """rank, steps (every profiled one), total_ms and each bound part's mean ms per steady step, idle_ms and
    own_ms (the step less its collective communication and pipeline wait: the time the rank does not wait for its
    peers; the transfer inside a collective ends together on its ranks, so it shifts every rank alike)."""
    from .ledger import rank_parts
    parts = rank_parts(run)
    frame = parts[["rank", "total", *BOUND_PARTS]].rename(columns={"total": "total_ms", **PART_COLUMNS})
    frame = frame.astype({column: "float64" for column in frame.columns if column != "rank"})
    frame["idle_ms"] = frame[["data_ms", "host_ms", "unknown_ms"]].sum(axis=1)
    frame["own_ms"] = frame["total_ms"] - frame["communication_ms"] - frame["pipeline_ms"]
    counts = run.steps.groupby("rank", sort=True)["step"].nunique().rename("steps")
    return (counts.reset_index().merge(frame, on="rank", how="left")
            .sort_values("rank", kind="stable").reset_index(drop=True))


@dataclass
class _Memo:
    answer: SlowRanks
    versions: tuple


def of_run(run: Run) -> SlowRanks:
    """The slow-rank answer of a run: the spread rule within each group of `rank_groups` with two ranks or
    more (findings name their group), over the ledger's per-rank split."""
    kept = run.__dict__.get("_slow_ranks")
    if kept is not None and kept.versions == run.table_versions():
        return kept.answer
    per_rank = per_rank_split(run)
    findings = []
    for group in rank_groups(run):
        if len(group) > 1:
            members = per_rank[per_rank["rank"].isin(group)]
            findings += [{**finding, "group": group} for finding in _findings(members)]
    answer = SlowRanks(path=run.path, per_rank=per_rank, findings=findings, warnings=list(run.warnings),
                       cycle=run.meta.cycle)
    run.__dict__["_slow_ranks"] = _Memo(answer, run.table_versions())
    return answer


def _findings(per_rank: pd.DataFrame) -> list[dict[str, Any]]:
    """The spread of each dimension over ranks that should match. Where the ranks wait for each other at
    collectives, only ranks standing out in own_ms are named slow in any dimension: a rank with more compute or
    idle time that still waits for a peer is not what the step waits for (its dimension then names none)."""
    findings = _spreads(per_rank)
    if float(per_rank["communication_ms"].fillna(0.0).max()) <= 0:
        return [finding for finding in findings if finding["dimension"] != "own_ms"]
    culprits = next((set(finding["ranks"]) for finding in findings if finding["dimension"] == "own_ms"), set())
    for finding in findings:
        if finding["rank_is_slow"]:
            finding["ranks"] = [rank for rank in finding["ranks"] if rank in culprits]
            finding["rank_is_slow"] = bool(finding["ranks"])
    return findings


def _spreads(per_rank: pd.DataFrame) -> list[dict[str, Any]]:
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


def wait_caused(run: Run) -> pd.Series:
    """Per rank, the share (0-1) of its peers' wait at the steady steps' collectives that lies at collectives it
    arrived at last (comm_split's arrival estimate: ranks matched on one collective by step, name and occurrence);
    empty where arrivals were not compared. Each collective's wait is what its last rank cost the others."""
    from . import comm_split
    from .ledger import steady_steps
    rows = comm_split.estimate(run).rows
    rows = rows[rows["last"].notna()]
    if not len(rows):
        return pd.Series(dtype="float64")
    ops = run.comm_ops.loc[rows.index]
    rows = rows.assign(name=ops["name"].astype(str).str.replace(comm_split.STREAM_PREFIX, "", regex=True),
                       start=ops["start_ms"].to_numpy(dtype=np.float64))
    rows = rows.merge(steady_steps(run), on=["rank", "step"]).sort_values("start", kind="stable")
    rows["occurrence"] = rows.groupby(["rank", "step", "name"]).cumcount()
    key = ["step", "name", "occurrence"]
    rows["instance_wait"] = rows.groupby(key)["wait_ms"].transform("sum")
    last = rows[rows["last"].astype(bool)]
    total = float(last.drop_duplicates(key)["instance_wait"].sum())
    if total <= 0:
        return pd.Series(dtype="float64")
    return last.groupby("rank")["instance_wait"].sum() / total

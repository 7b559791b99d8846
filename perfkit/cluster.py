"""Cluster-wide questions over many ranks, answered with DuckDB on the cached Parquet step tables.

`perfkit.load` on a 256-rank run builds one Run with every table of every rank in one process.
The slow-rank question needs only each rank's mean step, so here the per-rank step tables are
made sure to be in the cache (read cold in parallel processes where they are not) and DuckDB
aggregates the Parquet files directly; no rank's tables are loaded into this process.

>>> answer = slow_ranks("cluster_run")          # doctest: +SKIP
>>> answer.slow, answer.per_rank.head()          # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from . import cache
from .advisor.rules import SLOW_RANK_SPREAD  # the advisor's slow_rank rule and this answer agree
from .errors import LayoutError
from .formats import discover

# Per-step means compared across ranks, and whether a rank that is higher than the others is itself
# the slow one. A rank with more communication is usually waiting for a slow peer, so it is reported
# (as msprof-analyze does, max and min rank) but does not make that rank slow.
DIMENSIONS = {"total_ms": True, "interval_ms": True, "computing_ms": True, "comm_ms": False}


@dataclass
class SlowRanks:
    """Per-rank mean step times and the dimensions whose spread across ranks exceeds SLOW_RANK_SPREAD."""

    path: str
    per_rank: pd.DataFrame                  # rank, steps, and the mean of each DIMENSIONS column
    findings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def slow(self) -> list[int]:
        """Ranks that stand out in a dimension where more time means the rank itself is slow."""
        return sorted({rank for finding in self.findings if finding["rank_is_slow"] for rank in finding["ranks"]})

    def to_dict(self) -> dict[str, Any]:
        frame = self.per_rank.astype(object).where(self.per_rank.notna(), None)
        return {"run": self.path, "threshold": SLOW_RANK_SPREAD, "slow_ranks": self.slow,
                "findings": self.findings, "per_rank": frame.to_dict(orient="records")}


def slow_ranks(path: str | os.PathLike) -> SlowRanks:
    """Which ranks are slow, by msprof-analyze's rule: (max - min) / mean step > SLOW_RANK_SPREAD."""
    root, jobs = discover(path)
    cache_root = cache.usable_root(root)
    if cache_root is not None:
        try:
            return _answer(root, jobs, cache_root)
        except OSError:
            pass  # cache not writable: answer from a private, temporary one instead
    with tempfile.TemporaryDirectory(prefix="perfkit-cluster-") as scratch:
        return _answer(root, jobs, Path(scratch))


def _answer(root: Path, jobs: list, cache_root: Path) -> SlowRanks:
    files = _step_files(cache.entries(jobs, cache_root))
    if not files:
        raise LayoutError("no per-step times found in any rank (step_trace_time.csv / step_trace_raw_*)", root)
    per_rank = _per_rank_means(files)
    return SlowRanks(path=str(root), per_rank=per_rank, findings=_findings(per_rank))


def _step_files(entries: list[Path]) -> dict[int, Path]:
    """rank -> its steps Parquet file; the first reader giving a rank steps wins, as in `load`."""
    files: dict[int, Path] = {}
    for entry in entries:
        described = json.loads((entry / cache.META_FILE).read_text())
        for rank, stored in described["ranks"].items():
            if int(rank) >= 0 and "steps" in stored["tables"] and int(rank) not in files:
                files[int(rank)] = entry / f"r{rank}" / stored["tables"]["steps"]["file"]
    return files


def _per_rank_means(files: dict[int, Path]) -> pd.DataFrame:
    with duckdb.connect() as db:
        db.execute("CREATE TEMP TABLE rank_file (rank BIGINT, filename VARCHAR)")
        db.executemany("INSERT INTO rank_file VALUES (?, ?)", [(r, str(p)) for r, p in files.items()])
        source = "read_parquet($files, filename = true, union_by_name = true)"
        paths = {"files": [str(p) for p in files.values()]}
        present = {row[0] for row in db.execute(f"DESCRIBE SELECT * FROM {source}", paths).fetchall()}
        means = ", ".join(f"avg({col}) AS {col}" if col in present else f"NULL::DOUBLE AS {col}"
                          for col in DIMENSIONS)
        return db.execute(
            f"SELECT rank, count(*) AS steps, {means} FROM {source} JOIN rank_file USING (filename) "
            "GROUP BY rank ORDER BY rank", paths).df()


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

"""Which ranks of a large run a first answer reads op-level tables of: the representative ranks.

A multi-rank answer reads every rank's cluster-level tables (steps, communication, profiler_info/metadata: what
`msprof-analyze cluster` reads) and the op-level ones (io/formats/base.py: OP_LEVEL_TABLES: kernels, op types,
memory, Cells) of the ranks a view shows: every rank of a run of at most loader.SMALL_RUN_RANKS ranks; of a larger
one, in each group of ranks that should take the same time per step (cluster.rank_groups: each pipeline stage)
the slowest, the fastest and the median rank by mean step time (cluster.per_rank_split, the step ledger's), the
slow ranks and the highest and lowest rank of each slow-rank finding (cluster.of_run; a finding in communication
time lists every rank that waited, in lockstep most of them, so only its extremes). Any other rank is read on
demand (`--rank`, `perfkit.load(..., ranks=...)`), all of them with `--all-ranks`. docs/many-ranks.md.

>>> run = perfkit.load("cluster_run")          # doctest: +SKIP
>>> run.meta.op_ranks                           # doctest: +SKIP
[17, 2048, 4001]
"""

from __future__ import annotations

from typing import Any

from ..core.model import Run
from ..io.loader import SMALL_RUN_RANKS
from .cluster import of_run, per_rank_split, rank_groups


def representative_ranks(run: Run) -> list[int]:
    """The ranks whose op-level tables a first answer about `run` reads (the module doc); `run` needs only its
    cluster-level tables. A run without step times: its first, middle and last rank."""
    ranks = sorted(int(rank) for rank in run.ranks)
    if len(ranks) <= SMALL_RUN_RANKS:
        return ranks
    if not len(run.steps):
        return sorted({ranks[0], ranks[(len(ranks) - 1) // 2], ranks[-1]})
    totals = per_rank_split(run).set_index("rank")["total_ms"].dropna()
    chosen: set[int] = set()
    for group in rank_groups(run):
        timed = totals[totals.index.isin(group)]
        if not len(timed):
            continue
        by_time = sorted(zip(timed.to_numpy().tolist(), timed.index.tolist()))  # ties by rank
        chosen.update({by_time[0][1], by_time[(len(by_time) - 1) // 2][1], by_time[-1][1]})
    answer = of_run(run)
    chosen.update(answer.slow)  # the slow ranks every view names, and each finding's highest and lowest rank
    chosen.update(rank for finding in answer.findings for rank in (finding["max_rank"], finding["min_rank"]))
    return sorted(int(rank) for rank in chosen) or ranks[:1]


def op_coverage(run: Run) -> dict[str, Any] | None:
    """{"ranks": the ranks whose op-level tables were read, "of": how many ranks the run has} where not every
    rank's were (meta.op_ranks), else None: what every view says beside its op-level numbers."""
    if run.meta.op_ranks is None:
        return None
    return {"ranks": [int(rank) for rank in run.meta.op_ranks], "of": len(run.ranks)}

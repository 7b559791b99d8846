"""Which ranks of a large run a first answer reads op-level tables of: the representative ranks.

A multi-rank answer reads every rank's cluster-level tables (steps, communication, profiler_info/metadata: what
`msprof-analyze cluster` reads) and the op-level ones (io/formats/base.py: OP_LEVEL_TABLES: kernels, op types,
memory, Cells) of the ranks a view shows: every rank of a run of at most loader.SMALL_RUN_RANKS ranks; of a larger
one, in each group of ranks that should take the same time per step (cluster.rank_groups: each pipeline stage)
the slowest, the fastest and the median rank by mean step time (cluster.per_rank_split, the step ledger's), and of
each slow-rank finding (cluster.of_run) its highest and lowest rank and its slow ranks, the SLOW_RANKS_READ farthest
out (a finding in communication time lists every rank that waited, in lockstep most of them: only its extremes).
Any other rank is read on demand (`--rank`, `perfkit.load(..., ranks=...)`), all of them with `--all-ranks`.
docs/many-ranks.md.

>>> run = perfkit.load("cluster_run")          # doctest: +SKIP
>>> run.meta.op_ranks                           # doctest: +SKIP
[17, 2048, 4001]
"""

from __future__ import annotations

from typing import Any

from ..core.model import Run
from ..io.loader import SMALL_RUN_RANKS
from .cluster import of_run, rank_groups

# Of each slow-rank finding's ranks, this many farthest out are read: with one profiled step, or noisy steps, the
# 5 % rule can call most ranks of a large run slow (one step per rank of the generated 4,096-rank run: 2,500), and
# reading them all is the full read again; the others are one --rank away, and every view names the ranks it read.
SLOW_RANKS_READ = 8


def representative_ranks(run: Run) -> list[int]:
    """The ranks whose op-level tables a first answer about `run` reads (the module doc); `run` needs only its
    cluster-level tables. A run without step times: its first, middle and last rank."""
    ranks = sorted(int(rank) for rank in run.ranks)
    if len(ranks) <= SMALL_RUN_RANKS:
        return ranks
    if not len(run.steps):
        return sorted({ranks[0], ranks[(len(ranks) - 1) // 2], ranks[-1]})
    answer = of_run(run)
    per_rank = answer.per_rank.set_index("rank")
    totals = per_rank["total_ms"].dropna()
    chosen: set[int] = set()
    for group in rank_groups(run):
        timed = totals[totals.index.isin(group)]
        if not len(timed):
            continue
        by_time = sorted(zip(timed.to_numpy().tolist(), timed.index.tolist()))  # ties by rank
        chosen.update({by_time[0][1], by_time[(len(by_time) - 1) // 2][1], by_time[-1][1]})
    for finding in answer.findings:
        chosen.update((finding["max_rank"], finding["min_rank"]))
        if finding["rank_is_slow"]:
            farthest = per_rank.loc[finding["ranks"], finding["dimension"]].sort_values(ascending=False, kind="stable")
            chosen.update(farthest.index[:SLOW_RANKS_READ].tolist())
    return sorted(int(rank) for rank in chosen) or ranks[:1]


def op_coverage(run: Run) -> dict[str, Any] | None:
    """{"ranks": the ranks whose op-level tables were read, "of": how many ranks the run has} where not every
    rank's were (meta.op_ranks), else None: what every view says beside its op-level numbers."""
    if run.meta.op_ranks is None:
        return None
    return {"ranks": [int(rank) for rank in run.meta.op_ranks], "of": len(run.ranks)}

"""The Cells of many ranks at once (perfkit/analysis/cells.py: ranks with the same op rows placed once, the tree of all
ranks in one groupby) equal what each rank gives on its own, and the FLOPs equal the FLOP model's per rank.

The ranks are made from the real ResNet-50 CPU run (sample_runs/cpu_default: 684 ops, 208 backward kernels
placed by shapes, 267 with FLOPs): identical ranks with their own call counts and times (data parallel), and ranks
whose rows differ in order, in number and in shapes, so that both the shared and the own placement are taken.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import REPO

import perfkit
from perfkit.analysis import cells as cells_module
from perfkit.core import scopes
from perfkit.core.model import Meta, Run
from perfkit.core.op_work import op_flops
from perfkit.io.assembly import op_pass_ms

SAMPLE = REPO / "sample_runs" / "cpu_default"
SAME_RANKS = 5  # ranks 0-4 hold the sample's rows in its order


@pytest.fixture(scope="module")
def sample() -> Run:
    return perfkit.load(SAMPLE)


def _rank_ops(ops: pd.DataFrame, rank: int) -> pd.DataFrame:
    """Rank `rank`'s op rows: the sample's, its counts and times scaled per rank; from SAME_RANKS on, changed."""
    mine = ops.assign(rank=rank, count=ops["count"] * (1 + rank % 3), total_ms=ops["total_ms"] * (1 + 0.1 * rank))
    if rank == SAME_RANKS:        # the same rows in another order
        mine = mine.iloc[::-1]
    elif rank == SAME_RANKS + 1:  # fewer rows: a forward conv gone, so its gradients are placed otherwise
        mine = mine[mine["name"] != mine.loc[mine["type"] == "Conv2D", "name"].iloc[0]]
    elif rank == SAME_RANKS + 2:  # other shapes: the first batch dimension halved
        mine = mine.assign(input_shapes=mine["input_shapes"].str.replace(r"^32,", "16,", regex=True))
    return mine


def _run(sample: Run, ranks: list[int]) -> Run:
    ops = pd.concat([_rank_ops(sample.ops, rank) for rank in ranks], ignore_index=True)
    steps = pd.concat([sample.steps.assign(rank=rank).head(1 + rank % 3) for rank in ranks], ignore_index=True)
    meta = Meta(**{**sample.meta.to_dict(), "ranks": ranks})
    return Run(path=str(SAMPLE), meta=meta, ops=ops, steps=steps, op_passes=op_pass_ms(ops),
               cells=scopes.cell_table(ops))


def _alone(run: Run, rank: int) -> Run:
    """One rank of `run` as a run of its own, its cells table derived from its ops alone."""
    one = run.rank(rank)
    return Run(path=one.path, meta=one.meta, ops=one.ops, steps=one.steps, op_passes=one.op_passes,
               cells=scopes.cell_table(one.ops))


def test_the_sample_ranks_take_both_ways():
    """The run the tests below build is one whose placement needs the shapes and whose ranks group."""
    run = _run(perfkit.load(SAMPLE), list(range(SAME_RANKS + 3)))
    placed = scopes.place(run.ops)
    assert {"moved", "shared"} <= set(placed["placed"])
    assert placed["flops"].notna().sum() > 200 * (SAME_RANKS + 3)
    # ranks with the sample's rows share one placement; the changed ones each have their own
    by_rank = {rank: tuple(mine["path"]) for rank, mine in placed.groupby("rank")}
    assert len({by_rank[rank] for rank in range(SAME_RANKS)}) == 1
    assert by_rank[SAME_RANKS + 1] != by_rank[0] or by_rank[SAME_RANKS + 2] != by_rank[0]


def test_many_ranks_are_placed_as_each_rank_alone(sample):
    run = _run(sample, list(range(SAME_RANKS + 3)))
    together = scopes.place(run.ops)
    alone = pd.concat([scopes.place(run.ops[run.ops["rank"] == rank]) for rank in run.ranks],
                      ignore_index=True)
    pd.testing.assert_frame_equal(together, alone, check_exact=True)
    # the FLOPs: the FLOP model on each rank's own rows, with its own call counts
    for rank, mine in together.groupby("rank"):
        work = op_flops(run.ops[run.ops["rank"] == rank]).set_index("name")["flops"]
        expected = mine["name"].map(work).to_numpy(dtype=np.float64)
        np.testing.assert_array_equal(mine["flops"].to_numpy(), expected)


def test_an_unsorted_op_table_is_placed_as_a_sorted_one(sample):
    run = _run(sample, [2, 0, 1])
    shuffled = run.ops.sample(frac=1.0, random_state=7)
    ordered = shuffled.sort_values("rank", kind="stable")
    pd.testing.assert_frame_equal(scopes.place(shuffled), scopes.place(ordered), check_exact=True)


def test_the_tree_of_ranks_that_differ_is_each_ranks_own(sample):
    """Ranks holding different Cells: the tree is per rank, and each rank's rows are its tree alone (exactly)."""
    run = _run(sample, list(range(SAME_RANKS + 3)))
    tree = cells_module.cells(run)
    assert tree["rank"].notna().all()
    warnings = tree.attrs["warnings"]
    for rank in run.ranks:
        alone = cells_module.cells(_alone(run, rank))
        mine = tree[tree["rank"] == rank].reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, alone.assign(rank=alone["rank"].astype("Int64")), check_exact=True)
        assert alone.attrs["warnings"][0] in warnings  # its kernels placed by shapes, said for it


def test_the_tree_of_data_parallel_ranks_is_the_mean_of_each_ranks_own(sample):
    """Ranks holding the same Cells (their own counts, times and step numbers): one pooled tree, each Cell the
    mean of the ranks' own trees."""
    run = _run(sample, list(range(SAME_RANKS)))
    tree = cells_module.cells(run).set_index("path")
    assert tree["rank"].isna().all()
    alone = [cells_module.cells(_alone(run, rank)).set_index("path") for rank in run.ranks]
    assert all(set(own.index) == set(tree.index) for own in alone)
    for column in ["forward_ms", "backward_ms", "other_ms", "total_ms", "calls", "flops", "flops_ms"]:
        mean = sum(own[column] for own in alone) / len(alone)
        np.testing.assert_allclose(tree[column], mean.reindex(tree.index), rtol=1e-12)
    assert (tree[["depth", "parent", "label", "cell_type"]] == alone[0][["depth", "parent", "label", "cell_type"]]
            .reindex(tree.index)).all().all()

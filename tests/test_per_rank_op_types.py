"""Per-rank op-type tables where ranks run different op mixes (issue 14, "What to build" 3).

Real runs as they are: msinsight_2023's two ranks run different ops (rank 1 has no FlashAttentionScore), while
msinsight_level1's two data-parallel ranks run the same mix. The pipeline-parallel run is crafted (no real file
has two pipeline stages); its builder is test_diagnosis_rules.pipeline_run. Every expected number comes from a
groupby of run.op_types written here.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS
from test_diagnosis_rules import pipeline_run

import perfkit
from perfkit.analysis.measures import OP_MIX_GAP, PER_RANK_TOP_OP_TYPES, op_type_shares_by_rank, ranks_run_different_ops
from perfkit.apps.cli import main
from perfkit.views.figures.operators import op_type_rows


def shares_by_rank(run) -> pd.DataFrame:
    """rank x type: the type's share of the rank's op time, 0 where the rank does not run it."""
    ms = run.op_types.astype({"type": str}).groupby(["rank", "type"])["total_ms"].sum().unstack(fill_value=0.0)
    return ms.div(ms.sum(axis=1), axis=0)


def largest_gap(run) -> float:
    shares = shares_by_rank(run)
    return float((shares.max() - shares.min()).max())


def summary_json(path) -> dict:
    result = CliRunner().invoke(main, ["summary", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def assert_per_rank_tables(run, payload) -> None:
    ranks = {entry["rank"]: entry for entry in payload["per_rank"]}
    totals = run.op_types.astype({"type": str}).groupby(["rank", "type"]).agg(total_ms=("total_ms", "sum"),
                                                                              count=("count", "sum"))
    shares = shares_by_rank(run)
    for rank in shares.index:
        expected = totals.loc[rank].sort_values("total_ms", ascending=False).head(PER_RANK_TOP_OP_TYPES)
        listed = ranks[int(rank)]["op_types"]
        assert [op["type"] for op in listed] == list(expected.index)
        for op in listed:
            assert op["total_ms"] == pytest.approx(expected.loc[op["type"], "total_ms"])
            assert op["count"] == expected.loc[op["type"], "count"]
            assert op["share"] == pytest.approx(shares.loc[rank, op["type"]])


@pytest.mark.parametrize("name", ["new_2023", "new_level1"])
def test_ranks_differ_exactly_when_a_type_s_share_is_over_the_gap_apart(name):
    run = perfkit.load(FIXTURE_RUNS[name])
    assert len(shares_by_rank(run)) == 2
    assert ranks_run_different_ops(op_type_shares_by_rank(run)) == (largest_gap(run) > OP_MIX_GAP)


def test_real_run_whose_ranks_run_different_ops_gets_per_rank_tables():
    run = perfkit.load(FIXTURE_RUNS["new_2023"])
    assert largest_gap(run) > OP_MIX_GAP  # rank 1 runs no FlashAttentionScore, rank 0's largest type
    payload = summary_json(FIXTURE_RUNS["new_2023"])
    assert_per_rank_tables(run, payload)

    text = CliRunner().invoke(main, ["summary", str(FIXTURE_RUNS["new_2023"])]).output
    assert "the pooled table above mixes them" in text
    per_rank = text[text.index("the pooled table above mixes them"):]
    for rank in (0, 1):
        top = shares_by_rank(run).loc[rank].idxmax()
        section = per_rank[per_rank.index(f"  rank {rank}\n"):]
        assert section.splitlines()[1].split()[0] == top

    rows = op_type_rows(run).set_index("type")
    expected = 100 * shares_by_rank(run)
    for rank in (0, 1):
        assert rows[f"rank {rank}_share_pct"].to_numpy() == pytest.approx(expected.loc[rank, rows.index].to_numpy())


def test_crafted_pipeline_stages_get_per_rank_tables(tmp_path):
    # crafted: the stages run the same op types, but stage 0's time goes to point-to-point waits
    path = pipeline_run(tmp_path / "pp")
    run = perfkit.load(path)
    assert largest_gap(run) > OP_MIX_GAP
    assert_per_rank_tables(run, summary_json(path))


def test_real_data_parallel_ranks_keep_the_pooled_table_only():
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    assert largest_gap(run) < OP_MIX_GAP
    payload = summary_json(FIXTURE_RUNS["new_level1"])
    assert len(payload["per_rank"]) == 2
    assert all("op_types" not in entry for entry in payload["per_rank"])
    assert "mixes them" not in CliRunner().invoke(main, ["summary", str(FIXTURE_RUNS["new_level1"])]).output
    assert not [column for column in op_type_rows(run).columns if column.startswith("rank")]


def test_a_256_rank_run_gets_a_column_per_mix_never_one_per_rank():
    """Crafted from the real msinsight_2023 run (its two ranks run different mixes): 256 ranks, ranks 0-127 rank
    0's op types, 128-255 rank 1's, and 8 ranks each with one type of its own on top: 10 mixes, of which the
    table keeps MAX_MIX_COLUMNS (the two of 120 ranks each, then the odd ranks farthest from the pooled shares)
    and says so."""
    from dataclasses import replace

    from perfkit.core.model import table
    from perfkit.views.numbers import MAX_MIX_COLUMNS, op_mix_note
    real = perfkit.load(FIXTURE_RUNS["new_2023"]).op_types
    odd = {7: 1.0, 20: 2.0, 140: 4.0, 150: 8.0, 160: 16.0, 170: 32.0, 180: 64.0, 190: 128.0}  # ms of its own type
    rows = []
    for rank in range(256):
        rows += [dict(row, rank=rank) for row in real[real["rank"] == (0 if rank < 128 else 1)].to_dict("records")]
        if rank in odd:
            rows.append(dict(rank=rank, type=f"Odd{rank}", total_ms=odd[rank], count=1, share=0.0))
    run = replace(perfkit.load(FIXTURE_RUNS["new_2023"]), op_types=table("op_types", rows),
                  meta=replace(perfkit.load(FIXTURE_RUNS["new_2023"]).meta, ranks=list(range(256))))
    got = op_type_rows(run).set_index("type")
    columns = [column for column in got.columns if column.startswith("rank")]
    assert len(columns) == MAX_MIX_COLUMNS == 6
    shares = shares_by_rank(run) * 100
    # independently: the largest gap of each odd rank from the pooled shares; the farthest six are kept
    pooled = run.op_types.astype({"type": str}).groupby("type")["total_ms"].sum()
    pooled = 100 * pooled / pooled.sum()
    assert "ranks 0-6, 8-19, 21-127_share_pct" in columns and "ranks 128-139, 141-149, 151-159, 161-169, " \
        "171-179, 181-189, 191-255_share_pct" in columns
    gaps = {rank: float((shares.loc[rank] - pooled.reindex(shares.columns, fill_value=0)).abs().max()) for rank in odd}
    kept_odd = sorted(sorted(odd, key=lambda rank: -gaps[rank])[:MAX_MIX_COLUMNS - 2])
    assert [column for column in columns if not column.startswith("ranks")] == \
        [f"rank {rank}_share_pct" for rank in kept_odd]
    for rank in kept_odd:
        assert got[f"rank {rank}_share_pct"].to_numpy() == pytest.approx(shares.loc[rank, got.index].to_numpy())
    group = [rank for rank in range(128) if rank not in odd]
    assert got["ranks 0-6, 8-19, 21-127_share_pct"].to_numpy() == pytest.approx(
        shares.loc[group, got.index].mean().to_numpy())
    assert "6 of 10 mixes shown" in op_mix_note(run)

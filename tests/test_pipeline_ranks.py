"""MindData pipelines of several ranks (tests/runs/mindinsight_minddata_4ranks: MindInsight's 4 real
minddata_pipeline_raw files): each rank's own pipeline in the summary and the text, pooled with the spread said
beyond PIPELINE_RANK_COLUMNS ranks; a run of several ranks without steps is not called single-rank."""

from __future__ import annotations

import csv
import shutil

import pytest

import perfkit
from perfkit.advisor import advise
from perfkit.render import PIPELINE_RANK_COLUMNS, pipeline_lines
from perfkit.summary import summarize

from conftest import FIXTURE_RUNS, REPO

RUN = REPO / "tests" / "runs" / "mindinsight_minddata_4ranks"


pytestmark = pytest.mark.usefixtures("uncached")


def usage_in_file(rank: int) -> dict[int, float | None]:
    """op id -> output_queue_usage_rate; None for an op without a queue (no output_queue_size: the root Batch)."""
    with open(RUN / f"minddata_pipeline_raw_{rank}.csv", newline="") as handle:
        return {int(row["op_id"]): float(row["output_queue_usage_rate"]) if row["output_queue_size"] else None
                for row in csv.DictReader(handle)}


def test_each_rank_has_its_own_pipeline_in_the_summary():
    summary = summarize(perfkit.load(RUN))
    assert [entry["rank"] for entry in summary["per_rank"]] == [0, 1, 2, 3]
    for entry in summary["per_rank"]:
        got = {op["op_id"]: op["queue_usage"] for op in entry["pipeline"]}
        expected = usage_in_file(entry["rank"])
        # op 0 (Batch) has no queue: its usage is unknown, whether the cell is empty (ranks 1, 3) or 0 (ranks 0, 2)
        assert got.keys() == expected.keys()
        assert all(got[op] == pytest.approx(expected[op]) if expected[op] is not None else got[op] is None
                   for op in expected)
    assert summary["pipeline_rank"] == 0 and summary["pipeline"] == summary["per_rank"][0]["pipeline"]


def test_the_text_shows_every_rank_side_by_side():
    lines = pipeline_lines(summarize(perfkit.load(RUN)))
    assert lines[0] == "data pipeline (op, workers, output queue usage per rank)"
    assert lines[1].split() == ["rank", "0", "rank", "1", "rank", "2", "rank", "3"]
    shuffle = next(line for line in lines if line.split()[:2] == ["1", "Shuffle"])
    assert shuffle.split()[-8:] == ["93.8", "%", "15.6", "%", "93.8", "%", "15.6", "%"]


def test_many_ranks_are_pooled_with_their_spread(tmp_path):
    for rank in range(PIPELINE_RANK_COLUMNS + 1):
        shutil.copy(RUN / f"minddata_pipeline_raw_{rank % 4}.csv", tmp_path / f"minddata_pipeline_raw_{rank}.csv")
    lines = pipeline_lines(summarize(perfkit.load(tmp_path)))
    assert lines[0] == (f"data pipeline (op, workers, output queue usage over {PIPELINE_RANK_COLUMNS + 1} ranks: "
                        "min / median / max)")
    values = sorted(usage_in_file(rank % 4)[2] for rank in range(PIPELINE_RANK_COLUMNS + 1))  # op 2, TFReader
    reader = next(line for line in lines if line.split()[:2] == ["2", "TFReader"])
    assert reader.endswith(f"queue {100 * values[0]:.1f} % / {100 * values[len(values) // 2]:.1f} % / "
                           f"{100 * values[-1]:.1f} %")


def test_one_pipeline_keeps_the_one_rank_form():
    summary = summarize(perfkit.load(FIXTURE_RUNS["legacy_run_2"]))
    assert "pipeline" not in summary["per_rank"][0]
    assert pipeline_lines(summary)[0] == "data pipeline (op, workers, output queue usage), rank 1"


def test_slow_rank_says_no_step_times_not_single_rank():
    assert advise(perfkit.load(RUN)).not_checked["slow_rank"] == "no step times"
    assert advise(perfkit.load(FIXTURE_RUNS["cpu_2_10"])).not_checked["slow_rank"].startswith("single-rank run")

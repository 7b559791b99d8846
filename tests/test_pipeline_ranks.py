"""MindData pipelines of several ranks (tests/runs/mindinsight_minddata_4ranks: MindInsight's 4 real
minddata_pipeline_raw files): each rank's own pipeline in the summary, the text and the pipeline figure, pooled
with the spread said beyond PIPELINE_RANK_COLUMNS ranks; a run of several ranks without steps is not called
single-rank."""

from __future__ import annotations

import csv
import shutil

import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor import advise
from perfkit.views.figures import overview
from perfkit.views.format import PIPELINE_RANK_COLUMNS
from perfkit.views.lines import pipeline_lines
from perfkit.views.summary import summarize

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


def drawn_cells(fig) -> dict[tuple[int, int], str]:
    """(rank, op id) -> the text of its square in the pipeline figure's op x rank grid."""
    return {(int(x.split()[1]), int(y.split("(op ")[1].split(")")[0])): text
            for trace in fig.data for x, y, text in zip(trace.x, trace.y, trace.text)}


def test_the_figure_shows_each_rank_s_queue_usage_per_op():
    fig = overview.pipeline_figure(perfkit.load(RUN))
    expected = {(rank, op): "no queue" if usage is None else f"{100 * usage:.1f} %"
                for rank in range(4) for op, usage in usage_in_file(rank).items()}
    assert drawn_cells(fig) == expected
    # rank 2 full on every queued op, rank 3 starved on every one: the split a single table hid
    assert {text for (rank, op), text in expected.items() if rank == 2 and op} == {"93.8 %"}
    assert {text for (rank, op), text in expected.items() if rank == 3 and op} == {"15.6 %"}
    means = {rank: sum(v for v in usage_in_file(rank).values() if v is not None) / 4 for rank in range(4)}
    assert list(fig.layout.xaxis.ticktext) == [f"rank {rank}<br>mean {100 * means[rank]:.1f} %" for rank in range(4)]
    assert fig.layout.title.text.startswith("Data pipeline per rank: output queue usage per dataset op")


def test_the_figure_pools_many_ranks_with_their_spread(tmp_path):
    count = PIPELINE_RANK_COLUMNS + 1
    for rank in range(count):
        shutil.copy(RUN / f"minddata_pipeline_raw_{rank % 4}.csv", tmp_path / f"minddata_pipeline_raw_{rank}.csv")
    fig = overview.pipeline_figure(perfkit.load(tmp_path))
    assert fig.layout.title.text.startswith(f"Data pipeline over {count} ranks:")
    bars = fig.data[0]
    for position, label in enumerate(bars.y):
        op = int(label.split("(op ")[1].split(")")[0])
        values = sorted(v for rank in range(count) if (v := usage_in_file(rank % 4)[op]) is not None)
        if not values:
            assert bars.text[position] == "no queue"
            continue
        low, median, high = 100 * values[0], 100 * values[len(values) // 2], 100 * values[-1]
        assert bars.x[position] == pytest.approx(median)
        assert bars.x[position] - bars.error_x.arrayminus[position] == pytest.approx(low)
        assert bars.x[position] + bars.error_x.array[position] == pytest.approx(high)
        assert bars.text[position] == f"{low:.1f} % / {median:.1f} % / {high:.1f} %"
        # the rank named at each end holds that value in its file
        low_rank, high_rank = bars.customdata[position][1], bars.customdata[position][3]
        assert 100 * usage_in_file(low_rank % 4)[op] == pytest.approx(low)
        assert 100 * usage_in_file(high_rank % 4)[op] == pytest.approx(high)

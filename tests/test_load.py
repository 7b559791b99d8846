"""perfkit.load: layout discovery, the summary contract on every fixture, and user-caused failures."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, FIXTURES, REPO

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import LayoutError, PerfkitError
from perfkit.render.text import summary_text
from perfkit.views.format import rank_ranges

SUMMARY_KEYS = {"run", "layout", "device", "ranks", "steps", "per_rank", "op_types", "queues", "pipeline", "warnings"}
STEP_KEYS = {"count", "interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms"}


def tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.mark.parametrize("name", sorted(FIXTURE_RUNS))
def test_every_fixture_loads_and_summarizes(name):
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(FIXTURE_RUNS[name])])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert SUMMARY_KEYS <= set(summary)
    if summary["layout"] == "minddata":
        assert summary["device"] is None  # dataset profiling alone does not say which device ran
    else:
        assert summary["device"] in ("Ascend", "GPU", "CPU")
    assert summary["ranks"] and all(isinstance(r, int) for r in summary["ranks"])
    assert [entry["rank"] for entry in summary["per_rank"]] == sorted(entry["rank"] for entry in summary["per_rank"])
    if summary["steps"] is not None:
        assert STEP_KEYS <= set(summary["steps"])
        assert summary["steps"]["count"] >= 1
        for entry in summary["per_rank"]:
            # a rank of the run without step rows (only its pipeline, memory or communication) has steps null
            assert entry["steps"] is None or STEP_KEYS <= set(entry["steps"])
        assert any(entry["steps"] is not None for entry in summary["per_rank"])
    shares = [op["share"] for op in summary["op_types"]]
    assert all(0 < s <= 1 for s in shares)
    totals = [op["total_ms"] for op in summary["op_types"]]
    assert totals == sorted(totals, reverse=True)
    for queue in summary["queues"].values():
        if queue is not None:
            assert 0 <= queue["empty_pct"] <= 100 and 0 <= queue["full_pct"] <= 100
            assert queue["samples"] > 0
    text = CliRunner().invoke(main, ["summary", str(FIXTURE_RUNS[name])])
    assert text.exit_code == 0 and "layout" in text.output


def test_legacy_run_2_numbers_from_raw_ticks():
    """Step split and Cast share recomputed here from the raw files."""
    folder = FIXTURE_RUNS["legacy_run_2"]
    rows = [line.split(",") for line in (folder / "step_trace_raw_1_detail_time.csv").read_text().splitlines()[1:]]
    real_steps = rows[:-1]  # the last row is MindSpore's average row
    header = (folder / "step_trace_raw_1_detail_time.csv").read_text().splitlines()[0].split(",")
    col = {name: header.index(name) for name in ("iteration_interval", "fp_and_bp", "tail")}
    expect = {key: sum(int(r[col[key]]) for r in real_steps) / len(real_steps) / 1e5 for key in col}
    summary = perfkit.summarize(perfkit.load(folder))
    assert summary["steps"]["count"] == len(real_steps)
    assert summary["steps"]["interval_ms"] == pytest.approx(expect["iteration_interval"])
    assert summary["steps"]["fwd_bwd_ms"] == pytest.approx(expect["fp_and_bp"])
    assert summary["steps"]["tail_ms"] == pytest.approx(expect["tail"])
    type_rows = [line.split(",") for line in (folder / "aicore_intermediate_1_type.csv").read_text().splitlines()[1:]]
    cast_ms = sum(float(r[1]) for r in type_rows if r[0] == "Cast")
    total_ms = sum(float(r[1]) for r in type_rows)
    cast = next(op for op in summary["op_types"] if op["type"] == "Cast")
    assert cast["share"] == pytest.approx(cast_ms / total_ms, rel=1e-3)


@pytest.mark.parametrize("name", ["new_level1", "new_level1_rank0", "new_level1_rank0_output"])
def test_new_layout_entry_points_agree(name):
    run = perfkit.load(FIXTURE_RUNS[name])
    assert run.meta.layout == "ascend_ms"
    rank0 = run.rank(0)
    reference = perfkit.load(FIXTURE_RUNS["new_level1_rank0"])
    assert rank0.steps["total_ms"].tolist() == pytest.approx(reference.steps["total_ms"].tolist())


def test_multi_rank_parent_lists_ranks():
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    assert run.ranks == [0, 1]
    summary = perfkit.summarize(run)
    assert [entry["rank"] for entry in summary["per_rank"]] == [0, 1]


def test_every_walk_leaves_out_raw_data_logs_and_bytecode(tmp_path):
    """One walker, one rule (discovery.SKIPPED): discovery and the message about what a folder holds leave out PROF_*,
    logs and __pycache__, and see FRAMEWORK/ (the cache's keys: test_cache); discovery lists FRAMEWORK/ for the
    readers' detect and offers them no FRAMEWORK/ folder of its own."""
    from perfkit.io.discovery import walk
    for name in ("a/PROF_1/x.csv", "a/logs/y.txt", "a/__pycache__/z.json", "a/FRAMEWORK/w.csv", "a/b.csv"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("1\n")
    assert [folder.relative_to(tmp_path).as_posix() for folder, _ in walk(tmp_path, 5)] == [".", "a", "a/FRAMEWORK"]
    with pytest.raises(LayoutError) as refused:
        perfkit.load(tmp_path)
    assert "found only files perfkit does not read: a/b.csv, a/FRAMEWORK/w.csv" in str(refused.value)


def test_a_run_deeper_than_discovery_looks_is_named_not_lost(tmp_path):
    """A real run six folders down: discovery looks five levels deep (MAX_DEPTH), so the folder is refused in one
    line naming the depth and a folder below it, not "no profiler files found"; passed nearer, it reads."""
    from perfkit.io.discovery import MAX_DEPTH
    deep = tmp_path.joinpath(*"abcdef")
    shutil.copytree(FIXTURE_RUNS["cpu_2_10"], deep / "run")
    assert len(deep.relative_to(tmp_path).parts) > MAX_DEPTH
    result = CliRunner().invoke(main, ["summary", str(tmp_path)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert (f"{tmp_path}: no profiler files within {MAX_DEPTH} folder levels of it, and it goes deeper "
            f"(e.g. a/b/c/d/e/f): pass the folder that holds the run") in result.output
    assert perfkit.load(deep).ranks == [0]


def test_parent_of_several_runs_for_one_rank_is_refused():
    """Three unit tests' MindData profiles: rank 0 of JOB1 and JOB2, rank 1 of profiler/. Two runs of rank 0 from
    separate jobs beside another rank: no cycle number can choose among them, each job's folder is named."""
    with pytest.raises(LayoutError) as refused:
        perfkit.load(FIXTURES / "minddata_raw/mindspore_ut", cycle=1)
    assert str(refused.value).endswith("holds the runs of separate launches: rank 0 has runs of 2 (1) JOB1, 2) JOB2); "
                                       "a --cycle number would pair one launch's ranks with another's, so none is "
                                       "read: pass the folder of one run (JOB1, JOB2)")


@pytest.mark.parametrize("make, message", [
    (lambda tmp: tmp / "missing", "does not exist"),
    (lambda tmp: (tmp / "file.csv").write_text("a,b\n") and tmp / "file.csv", "is not a folder"),
    (lambda tmp: tmp, "no MindSpore profiler files found"),
    (lambda tmp: (tmp / "loop").symlink_to(tmp / "loop") or tmp / "loop",
     "is reached through a symbolic link that loops or whose target is gone"),
    (lambda tmp: (tmp / "a").symlink_to(tmp / "b") or (tmp / "b").symlink_to(tmp / "a") or tmp / "a" / "run",
     "is reached through a symbolic link that loops or whose target is gone"),
    (lambda tmp: (tmp / "gone").symlink_to(tmp / "nothing") or tmp / "gone",
     "is reached through a symbolic link that loops or whose target is gone"),
])
def test_bad_paths_fail_in_one_line(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(PerfkitError, match=message):
        perfkit.load(path)
    result = CliRunner().invoke(main, ["summary", str(path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and message in result.output
    assert str(path) in result.output
    assert "Traceback" not in result.output


def test_loading_never_writes_into_the_run_folder(tmp_path):
    for name in ("legacy_run_2", "new_level1", "cpu_2_10"):
        copy = tmp_path / name
        shutil.copytree(FIXTURE_RUNS[name], copy)
        before = tree_digest(copy)
        CliRunner().invoke(main, ["summary", "--format", "json", str(copy)])
        assert tree_digest(copy) == before


def test_summary_does_not_import_mindspore_or_dash():
    code = ("import sys, perfkit; from perfkit.apps.cli import main; "
            f"perfkit.summarize(perfkit.load({str(FIXTURE_RUNS['legacy_run_2'])!r})); "
            "print(sorted(m for m in ('mindspore', 'dash') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_cli_error_is_one_line_from_a_real_process(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "perfkit", "summary", str(tmp_path / "nope")],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "does not exist" in out.stderr
    assert out.stdout == ""


def test_screened_drops_copied_step_rows_and_says_so():
    from perfkit.io.formats.base import Parts
    from perfkit.io.formats.screening import screened
    steps = pd.DataFrame({"step": [1, 2, 2, 3, 3], "total_ms": [5.0, 6.0, 6.0, 7.0, 9.0]})
    (parts,) = screened({4: Parts(tables={"steps": steps})}).values()
    assert parts.tables["steps"]["total_ms"].tolist() == [5.0, 6.0, 7.0, 9.0]  # the copy of step 2 is gone
    dropped, repeated = parts.warnings
    assert dropped.startswith("rank 4: steps: dropped 1 duplicated step row") and "step 2" in dropped
    assert "step id(s) 3 appear more than once" in repeated


def test_screened_drops_copied_op_rows_and_says_so():
    """One row per op name: a copied row would count the op twice (and its Cells failed on the repeated name)."""
    import pyarrow as pa

    from perfkit.io.formats.base import Parts
    from perfkit.io.formats.screening import screened
    ops = {"name": ["a", "b", "b", "c", "c"], "total_ms": [1.0, 2.0, 2.0, 3.0, 4.0]}
    for table in (pd.DataFrame(ops), pa.table(ops)):
        (parts,) = screened({0: Parts(tables={"ops": table})}).values()
        kept = parts.tables["ops"]
        kept = kept.to_pandas() if isinstance(kept, pa.Table) else kept
        assert kept["total_ms"].tolist() == [1.0, 2.0, 3.0, 4.0]  # the copy of b is gone, c's two rows differ
        assert parts.warnings == ["rank 0: ops: dropped 1 duplicated op row(s) (op b)",
                                  "rank 0: ops: op name(s) c appear more than once with different values; each "
                                  "row counts as one op"]


def test_screened_says_which_op_types_and_steps_have_no_time():
    from perfkit.io.formats.base import Parts
    from perfkit.io.formats.screening import screened
    op_types = pd.DataFrame({"type": ["Cast", "Conv2D"], "total_ms": [float("nan"), 2.0]})
    steps = pd.DataFrame({"step": [1, 2], "total_ms": [float("inf"), 3.0]})
    (parts,) = screened({0: Parts(tables={"op_types": op_types, "steps": steps})}).values()
    assert parts.tables["op_types"]["type"].tolist() == ["Conv2D"]
    assert parts.tables["steps"]["total_ms"].isna().tolist() == [True, False]
    assert any("dropped 1 op type(s) without a total time" in w for w in parts.warnings)
    assert any("steps.total_ms: 1 negative or infinite" in w for w in parts.warnings)
    assert any("1 step(s) without a total time are left out of step means" in w for w in parts.warnings)


def test_a_folder_with_every_file_broken_is_skipped_and_the_rest_loads(tmp_path):
    """A full disk left MindData's files empty: the run's ops and steps still load, the folder is named."""
    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_runs" / "cpu_default", run)
    for path in (run / "md").iterdir():
        path.write_bytes(b"")
    loaded = perfkit.load(run)
    assert len(loaded.steps) and len(loaded.op_types) and not len(loaded.host_queue)
    (skipped,) = [w for w in loaded.warnings if w.startswith("skipped md:")]
    assert "no readable MindData file" in skipped and "is empty" in skipped


def test_a_run_whose_only_folder_is_broken_is_that_folders_error(tmp_path):
    (tmp_path / "aicore_intermediate_0_type.csv").write_bytes(b"")
    with pytest.raises(PerfkitError, match="aicore_intermediate_0_type.csv.*is empty"):
        perfkit.load(tmp_path)


def _summary_of_ranks(totals: dict[int, float | None]) -> dict:
    return {"run": "/x", "layout": "ascend_ms", "device": "Ascend", "ranks": sorted(totals), "meta": {},
            "steps": None, "op_types": [], "queues": {"host": None, "device": None}, "pipeline": [], "warnings": [],
            "per_rank": [{"rank": rank, "steps": None if total is None else {"total_ms": total}}
                         for rank, total in sorted(totals.items())]}


def test_summary_text_of_a_few_ranks_lists_each():
    text = summary_text(_summary_of_ranks({0: 10.0, 1: 12.0, 2: None}))
    assert "ranks [0, 1, 2]" in text
    assert "rank 0           10.000 ms" in text and "rank 2             unknown" in text


def test_summary_text_of_many_ranks_shows_spread_and_outliers_not_every_rank():
    totals = {rank: 100.0 + rank / 100 for rank in range(64)} | {70: 150.0, 71: None, 72: None}
    text = summary_text(_summary_of_ranks(totals))
    assert "ranks 0-63, 70-72 (67 ranks)" in text
    per_rank = [line for line in text.splitlines() if line.lstrip().startswith("rank ")]
    assert [int(line.split()[1]) for line in per_rank] == [70, 63, 62, 61, 60, 0, 1, 2, 3, 4]
    assert "fastest 100.000 ms" in text and "slowest 150.000 ms" in text
    assert "step total unknown on rank(s) 71-72" in text


def test_rank_ranges():
    assert rank_ranges([9, 0, 1, 2, 3, 7, 10]) == "0-3, 7, 9-10"
    assert rank_ranges([]) == ""


@pytest.mark.parametrize("ranks, where", [
    (3, "rank0_ascend_pt, rank1_ascend_pt, rank2_ascend_pt: "),
    (9, "9 folders (rank0_ascend_pt, rank1_ascend_pt, …, rank8_ascend_pt): "),
])
def test_a_warning_every_rank_gives_is_said_once(tmp_path, ranks, where):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import generate
    generate.generate_cluster(tmp_path / "run", ranks=ranks, steps=2, slow_ranks=())
    warnings = perfkit.load(tmp_path / "run").warnings
    split = [w for w in warnings if "fwd/bwd/tail split unavailable" in w]
    assert split == [where + "fwd/bwd/tail split unavailable: kernel names carry no Default/ or Gradients/ scope, "
                     "so fwd_bwd_ms is Computing + Communication(Not Overlapped) and tail_ms is unknown"]

"""The CPU layout reader and CPU step derivation, checked against the raw files of the real 2.10 CPU run."""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from broken import CSV_BREAKS, broken_csv
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError
from perfkit.io.formats.steps import derive_steps

CPU_RUN = FIXTURE_RUNS["cpu_2_10"]
PYNATIVE_RUN = Path(__file__).resolve().parent / "runs" / "cpu_2_10_pynative"  # see its SOURCE.txt
FRAMEWORK = next(CPU_RUN.glob("*_ascend_ms")) / "FRAMEWORK"


pytestmark = pytest.mark.usefixtures("uncached")


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def raw_executions() -> list[tuple[int, int, str]]:
    """(start ns, end ns, full name) of every op execution, parsed independently of the reader."""
    executions = []
    for line in (FRAMEWORK / "cpu_op_execute_timestamp_0.txt").read_text().splitlines():
        name, _, records = line.split(";")
        for record in records.split():
            start, duration_ms, _ = record.split(",")
            executions.append((int(start), int(start) + round(float(duration_ms) * 1e6), name))
    return sorted(executions)


def pass_of(name: str) -> str:
    if name.startswith("Gradients/"):
        return "backward"
    if "/optimizer" in name:
        return "optimizer"
    return "forward" if name.startswith("Default/") else "other"


def steps_by_occurrence() -> dict[int, list[tuple[int, int, str]]]:
    seen = defaultdict(int)
    steps = defaultdict(list)
    for start, end, name in raw_executions():
        seen[name] += 1
        steps[seen[name]].append((start, end, name))
    return steps


@pytest.mark.parametrize("path", [CPU_RUN, FRAMEWORK.parent, FRAMEWORK], ids=["run", "ascend_ms", "FRAMEWORK"])
def test_cpu_run_loads_from_any_level(path):
    run = perfkit.load(path)
    assert (run.meta.layout, run.meta.device, run.ranks) == ("cpu", "CPU", [0])
    assert run.meta.data_mode == "feed" and run.meta.mode == "graph"
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(path)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["layout"] == "cpu" and summary["steps"]["count"] == 4
    assert {"interval_ms", "fwd_bwd_ms", "tail_ms", "total_ms"} <= set(summary["steps"])


def test_op_types_come_from_the_type_file():
    expected = {row["op_type"]: row for row in csv_rows(FRAMEWORK / "cpu_op_type_info_0.csv")}
    run = perfkit.load(CPU_RUN)
    got = run.op_types.set_index("type")
    assert {"Conv2D", "BatchNorm"} <= set(got.index) and set(got.index) == set(expected)
    for op_type, row in expected.items():
        assert got.loc[op_type, "total_ms"] == pytest.approx(float(row["total_compute_time"]))
        assert got.loc[op_type, "count"] == int(row["type_occurrences"])
        # the CPU file's percent divides by the sum of its own rows: the same number as share
        assert got.loc[op_type, "file_share"] == pytest.approx(float(row["percent"]))
        assert got.loc[op_type, "share"] == pytest.approx(float(row["percent"]), abs=1e-5)


def test_ops_come_from_the_detail_file_with_shapes_from_the_framework_file():
    details = {row["full_op_name"]: row for row in csv_rows(FRAMEWORK / "cpu_op_detail_info_0.csv")}
    # cpu_framework lists one line per execution, in execution order
    lines = [line.rstrip(";").split(";") for line in (FRAMEWORK / "cpu_framework_0.txt").read_text().splitlines()]
    shapes = {}
    for (_, _, name), fields in zip(raw_executions(), lines):
        assert name.rsplit("/", 1)[-1] == fields[1]
        inputs = [field.split(":", 1)[1] for field in fields[3:]]
        shapes.setdefault(name, ";".join(s.strip("[]").replace(" ", "") if s.startswith("[") else "" for s in inputs))
    run = perfkit.load(CPU_RUN)
    ops = run.ops.set_index("name")
    assert set(ops.index) == set(details)
    for name, row in details.items():
        assert ops.loc[name, "total_ms"] == pytest.approx(float(row["op_total_time(ms)"]))
        assert ops.loc[name, "avg_ms"] == pytest.approx(float(row["op_avg_time(ms)"]))
        assert ops.loc[name, "count"] == int(row["op_occurrences"])
        assert ops.loc[name, "type"] == row["op_type"]
        assert ops.loc[name, "pass"] == pass_of(name)
        assert ops.loc[name, "input_shapes"] == shapes[name]
    first_conv = next(name for _, _, name in raw_executions() if name.endswith("Conv2D-op0"))
    assert ops.loc[first_conv, "input_shapes"] == "16,3,64,64;64,3,7,7"


def test_steps_from_op_timestamps():
    steps = steps_by_occurrence()
    assert sorted(steps) == [1, 2, 3, 4] and len({len(events) for events in steps.values()}) == 1
    run = perfkit.load(CPU_RUN)
    assert run.meta.step_source == "op_timestamps"
    got = run.steps.set_index("step")
    previous_end = None
    for step, events in sorted(steps.items()):
        forward_start = min(start for start, _, name in events if pass_of(name) == "forward")
        backward_end = max(end for _, end, name in events if pass_of(name) == "backward")
        last_end = max(end for _, end, _ in events)
        assert got.loc[step, "fwd_bwd_ms"] == pytest.approx((backward_end - forward_start) / 1e6)
        assert got.loc[step, "tail_ms"] == pytest.approx((last_end - backward_end) / 1e6)
        if previous_end is None:
            assert math.isnan(got.loc[step, "interval_ms"]) and math.isnan(got.loc[step, "total_ms"])
        else:
            assert got.loc[step, "interval_ms"] == pytest.approx((forward_start - previous_end) / 1e6)
            assert got.loc[step, "total_ms"] == pytest.approx((last_end - previous_end) / 1e6)
        previous_end = last_end


def run_with_manifest(tmp_path: Path, **overrides) -> tuple[Path, list[dict]]:
    """The fixture tree plus a perfkit_run.json whose step times bracket each step's op events."""
    run_dir = tmp_path / "profiler_v1"
    shutil.copytree(CPU_RUN, run_dir)
    step_times, begin = [], None
    for step, events in sorted(steps_by_occurrence().items()):
        first_start = min(start for start, _, _ in events)
        end = max(end for _, end, _ in events) + 1_500_000  # the callback runs after the last op
        begin = first_start - 3_000_000 if begin is None else begin
        step_times.append({"step": step, "begin_ns": begin, "end_ns": end})
        begin = end
    manifest = {"perfkit_version": "0.1.0", "mindspore_version": "2.10.0", "device": "CPU", "rank": 0,
                "rank_size": 1, "status": "ok", "error": None, "config": {"steps": 4, "batch_size": 16},
                "used": {"sink": False, "amp_level": "O0", "mode": "graph"}, "notes": [],
                "synthetic_data": True, "env": {"ONEDNN_MAX_CPU_ISA": "AVX2"}, "steps": step_times,
                "started_at": "2026-11-22T10:31:20+00:00", "finished_at": "2026-11-22T10:31:45+00:00",
                "command": "perfkit profile --device CPU --steps 4"}
    manifest.update(overrides)
    (run_dir / "perfkit_run.json").write_text(json.dumps(manifest))
    return run_dir, step_times


def test_recorded_step_times_split_each_step_exactly(tmp_path):
    run_dir, step_times = run_with_manifest(tmp_path)
    run = perfkit.load(run_dir)
    assert run.meta.step_source == "recorded_step_times"
    assert (run.meta.ms_version, run.meta.mode, run.meta.amp_level, run.meta.synthetic_data) == \
        ("2.10.0", "graph", "O0", True)
    assert run.meta.env == {"ONEDNN_MAX_CPU_ISA": "AVX2"} and run.meta.config["batch_size"] == 16
    got = run.steps.set_index("step")
    steps = steps_by_occurrence()
    for entry in step_times:
        step = got.loc[entry["step"]]
        events = steps[entry["step"]]
        forward_start = min(start for start, _, name in events if pass_of(name) == "forward")
        backward_end = max(end for _, end, name in events if pass_of(name) == "backward")
        assert step["total_ms"] == pytest.approx((entry["end_ns"] - entry["begin_ns"]) / 1e6, rel=1e-12)
        assert step["interval_ms"] + step["fwd_bwd_ms"] + step["tail_ms"] == pytest.approx(step["total_ms"], rel=1e-12)
        assert step["interval_ms"] == pytest.approx((forward_start - entry["begin_ns"]) / 1e6, rel=1e-12)
        assert step["tail_ms"] == pytest.approx((entry["end_ns"] - backward_end) / 1e6, rel=1e-12)
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["meta"]["step_source"] == "recorded_step_times"


@pytest.mark.parametrize("how", CSV_BREAKS)
@pytest.mark.parametrize("file_name", ["cpu_op_type_info_0.csv", "cpu_op_detail_info_0.csv"])
def test_a_broken_csv_is_skipped_with_a_warning(tmp_path, file_name, how):
    run_dir = tmp_path / "run"
    shutil.copytree(CPU_RUN, run_dir)
    path = next(run_dir.glob("*_ascend_ms")) / "FRAMEWORK" / file_name
    path.write_bytes(broken_csv(path.read_bytes(), how, cut_at=10, bad_cell=1))
    run = perfkit.load(run_dir)
    assert any(file_name in w for w in run.warnings), run.warnings
    assert len(run.steps) == 4  # the timestamps still give the steps
    if how == "not_utf8":
        assert any(file_name in w and "not UTF-8" in w for w in run.warnings)


@pytest.mark.parametrize("how", ["empty", "not_utf8", "truncated_line", "no_fields"])
@pytest.mark.parametrize("file_name", ["cpu_op_execute_timestamp_0.txt", "cpu_framework_0.txt"])
def test_a_broken_text_file_is_skipped_with_a_warning(tmp_path, file_name, how):
    run_dir = tmp_path / "run"
    shutil.copytree(CPU_RUN, run_dir)
    path = next(run_dir.glob("*_ascend_ms")) / "FRAMEWORK" / file_name
    original = path.read_bytes()
    path.write_bytes({"empty": b"", "not_utf8": b"\xff" + original,
                      "truncated_line": original + {"cpu_op_execute_timestamp_0.txt": b"Default/net/Conv2D-op9;Host",
                                                    "cpu_framework_0.txt": b"Conv2D;Conv2D-op0;17112"}[file_name],
                      "no_fields": b"garbage\n"}[how])
    run = perfkit.load(run_dir)
    assert any(file_name in w for w in run.warnings), run.warnings
    assert len(run.op_types) == 24  # the type file still loads
    if how == "truncated_line" and file_name.startswith("cpu_op_execute"):
        assert len(run.steps) == 4


def test_every_cpu_file_broken_is_one_warning_naming_them_and_the_dataset_profile_still_loads(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(CPU_RUN, run_dir)
    framework = next(run_dir.glob("*_ascend_ms")) / "FRAMEWORK"
    for path in framework.iterdir():
        path.write_bytes(b"")
    run = perfkit.load(run_dir)
    (skipped,) = [w for w in run.warnings if "cpu_op_type_info_0.csv" in w]
    assert skipped.startswith("skipped ") and "FRAMEWORK" in skipped and "is empty" in skipped
    assert not len(run.ops) and not len(run.steps) and len(run.host_queue)
    result = CliRunner().invoke(main, ["summary", "--format", "json", str(run_dir)])
    assert result.exit_code == 0 and skipped in json.loads(result.output)["warnings"]


def test_every_cpu_file_broken_and_nothing_else_raises_naming_them(tmp_path):
    framework = tmp_path / "run" / "FRAMEWORK"
    shutil.copytree(next(CPU_RUN.glob("*_ascend_ms")) / "FRAMEWORK", framework)
    for path in framework.iterdir():
        path.write_bytes(b"")
    with pytest.raises(PerfkitError, match="cpu_op_type_info_0.csv"):
        perfkit.load(tmp_path / "run")
    result = CliRunner().invoke(main, ["summary", str(tmp_path / "run")])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_pynative_names_give_mode_and_no_pass_and_steps_from_the_first_op_only():
    framework = next(PYNATIVE_RUN.glob("*_ascend_ms")) / "FRAMEWORK"
    runs = {}
    for line in (framework / "cpu_op_execute_timestamp_0.txt").read_text().splitlines():
        runs.setdefault(line.split(";")[0], []).extend(
            (int(start), float(dur)) for start, dur, _ in (r.split(",") for r in line.split(";")[2].split()))
    assert len({len(r) for r in runs.values()}) > 1  # the k-th run of an op is not step k here
    run = perfkit.load(PYNATIVE_RUN)
    assert run.meta.mode == "pynative"
    # only an optimizer update's type (`Default/ApplyMomentum-op2`) says its pass: the optimizer's
    updates = run.ops["type"] == "ApplyMomentum"
    assert updates.any() and set(run.ops.loc[updates, "pass"]) == {"optimizer"}
    assert set(run.ops.loc[~updates, "pass"]) == {"other"}
    assert any("PyNative" in w for w in run.warnings)
    # independently: the op that starts the window ran as often as the least-run op; its k-th start is step k
    first = min(runs, key=lambda name: min(start for start, _ in runs[name]))
    starts = sorted(start for start, _ in runs[first])
    assert len(starts) == min(len(r) for r in runs.values()) == len(run.steps)
    end = max(start + round(dur * 1e6) for r in runs.values() for start, dur in r)  # int ns: epoch exceeds float
    expected = [(b - a) / 1e6 for a, b in zip(starts, starts[1:] + [end])]
    assert run.steps["total_ms"].tolist() == pytest.approx(expected, rel=1e-9)
    assert run.steps["interval_ms"].isna().all() and run.meta.step_source == "first_op_timestamps"
    _, how = derive_steps(run_events(framework), None)
    assert how == "first_op_timestamps"


def run_events(framework: Path):
    from perfkit.io.formats import cpu
    return cpu.read(framework.parent)[0].tables["op_events"]


def test_pynative_with_recorded_step_times_knows_totals_only(tmp_path):
    run_dir = tmp_path / "pynative"
    shutil.copytree(PYNATIVE_RUN, run_dir)
    starts = sorted(run_events(next(run_dir.glob("*_ascend_ms")) / "FRAMEWORK")["start_ns"])
    middle = starts[len(starts) // 2]
    step_times = [{"step": 1, "begin_ns": starts[0] - 1000, "end_ns": middle},
                  {"step": 2, "begin_ns": middle, "end_ns": starts[-1] + 50_000_000}]
    (run_dir / "perfkit_run.json").write_text(json.dumps({"rank": 0, "status": "ok", "device": "CPU",
                                                          "used": {"mode": "pynative"}, "steps": step_times}))
    run = perfkit.load(run_dir)
    assert run.steps["total_ms"].tolist() == pytest.approx([(s["end_ns"] - s["begin_ns"]) / 1e6 for s in step_times])
    assert run.steps[["interval_ms", "fwd_bwd_ms", "tail_ms"]].isna().all().all()

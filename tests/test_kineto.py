"""The kineto (torch.profiler) reader, checked against sums taken from the raw traces with the json module: the real
CPU runs tests/runs/torch_cpu_resnet50 and tests/runs/torch_cpu_mlp (SOURCE.txt in each), made by
`perfkit profile --reference`."""

from __future__ import annotations

import gzip
import os
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.apps.cli import main
from perfkit.profiler.reference import child_command

RUNS = Path(__file__).resolve().parent / "runs"
RESNET = RUNS / "torch_cpu_resnet50"
MLP = RUNS / "torch_cpu_mlp"
GRADSCALER = RUNS / "torch_cpu_gradscaler"


pytestmark = pytest.mark.usefixtures("uncached")


def raw_events(run: Path) -> list[dict]:
    with gzip.open(next(run.glob("*.pt.trace.json.gz")), "rt") as handle:
        return json.load(handle)["traceEvents"]


def raw_steps(events: list[dict]) -> dict[int, tuple[float, float]]:
    """step -> (start µs, end µs) of its ProfilerStep#N span."""
    return {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))}


def inside(event: dict, outer: dict | tuple) -> bool:
    start, end = (outer["ts"], outer["ts"] + outer["dur"]) if isinstance(outer, dict) else outer
    return start <= event["ts"] and event["ts"] + event["dur"] <= end + 1e-3


def top_level_op_ms(events: list[dict]) -> dict[int, float]:
    """Per step, the summed duration of the cpu_op events no other cpu_op encloses, outside the DataLoader's spans:
    each op's time once, whatever nests inside it."""
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    data = [e for e in events if e.get("ph") == "X" and "DataLoader" in e.get("name", "")]
    steps = raw_steps(events)
    totals: dict[int, float] = defaultdict(float)
    open_end = -1.0
    for op in ops:
        if op["ts"] < open_end - 1e-3:
            continue  # nested in the last top-level op
        open_end = op["ts"] + op["dur"]
        if any(inside(op, span) for span in data):
            continue
        step = next((n for n, bounds in steps.items() if bounds[0] <= op["ts"] < bounds[1]), None)
        if step is not None:
            totals[step] += op["dur"] / 1000
    return totals


@pytest.fixture(scope="module")
def resnet():
    return perfkit.load(RESNET)


def test_a_kineto_folder_is_a_torch_run_with_the_sidecar_facts(resnet):
    assert resnet.meta.layout == "kineto" and resnet.meta.framework == "torch" and resnet.meta.device == "CPU"
    sidecar = json.loads((RESNET / "perfkit_run.json").read_text())
    assert resnet.meta.config["torch_version"] == sidecar["config"]["torch_version"]
    assert resnet.meta.config["batch_size"] == 32 and resnet.meta.config["threads"] == sidecar["config"]["threads"]


def test_steps_are_the_profiler_step_spans_with_the_data_wait(resnet):
    events = raw_events(RESNET)
    steps = raw_steps(events)
    assert sorted(resnet.steps["step"]) == sorted(steps) == [2, 3, 4]  # wait=1 warmup=1 active=3
    data = [e for e in events if e.get("ph") == "X" and "DataLoader" in e.get("name", "")]
    for row in resnet.steps.itertuples():
        start, end = steps[row.step]
        assert row.total_ms == pytest.approx((end - start) / 1000, rel=1e-9)
        waits = sum(e["dur"] for e in data if start <= e["ts"] < end) / 1000
        assert row.interval_ms == pytest.approx(waits, rel=1e-6) and waits > 0
        assert row.interval_ms + row.fwd_bwd_ms + row.tail_ms == pytest.approx(row.total_ms)


def test_op_time_is_counted_once_not_once_per_nesting_level(resnet):
    events = raw_events(RESNET)
    per_step = resnet.op_type_steps.groupby("step")["total_ms"].sum()
    once = top_level_op_ms(events)
    for step, total in once.items():
        assert per_step[step] == pytest.approx(total, rel=1e-6)
    # the naive sum of every cpu_op's duration counts a conv at each of its nesting levels
    steps = raw_steps(events)
    naive = sum(e["dur"] for e in events if e.get("cat") == "cpu_op"
                and any(s <= e["ts"] < t for s, t in steps.values())) / 1000
    assert naive > 1.5 * sum(once.values())


def test_conv_families_count_each_call_once_with_the_raw_durations(resnet):
    events = raw_events(RESNET)
    steps = raw_steps(events)

    def in_steps(name):
        return [e for e in events if e.get("cat") == "cpu_op" and e["name"] == name
                and any(s <= e["ts"] < t for s, t in steps.values())]
    types = resnet.op_types.set_index("type")
    forward = in_steps("aten::conv2d")
    assert len(forward) == 53 * 3  # ResNet-50's 53 convolutions, 3 profiled steps
    assert types.loc["aten::conv2d", "count"] == len(forward)
    assert types.loc["aten::conv2d", "total_ms"] == pytest.approx(sum(e["dur"] for e in forward) / 1000, rel=1e-6)
    backward = in_steps("aten::convolution_backward")
    assert types.loc["aten::convolution_backward", "count"] == len(backward) == 53 * 3
    assert "aten::mkldnn_convolution" not in types.index  # inside aten::conv2d, counted there


def test_ops_carry_shapes_passes_and_their_module(resnet):
    ops = resnet.ops.set_index("name")
    stem = ops.loc["ResNet50/conv1-Conv2d/aten::conv2d"]
    assert stem["pass"] == "forward" and stem["input_shapes"].startswith("32,3,32,32;64,3,7,7")
    # the backward op goes in the module of the forward op its fwdbwd flow names
    assert ops.loc["ResNet50/conv1-Conv2d/aten::convolution_backward", "pass"] == "backward"
    optimizer = resnet.ops[resnet.ops["name"].str.startswith("optimizer-Adam/")]
    assert len(optimizer) and set(optimizer["pass"]) == {"optimizer"}  # inside Optimizer.step#Adam.step
    events = raw_events(RESNET)
    wrappers = [e for e in events if e.get("cat") == "cpu_op"
                and e["name"].startswith("autograd::engine::evaluate_function")]
    steps = raw_steps(events)
    top = [e for e in wrappers if not any(o is not e and inside(e, o) for o in wrappers)
           and any(s <= e["ts"] < t for s, t in steps.values())]
    backward_ms = resnet.ops.loc[resnet.ops["pass"] == "backward", "total_ms"].sum()
    assert backward_ms == pytest.approx(sum(e["dur"] for e in top) / 1000, rel=1e-6)


def test_cells_come_from_the_named_module_spans(resnet):
    paths = set(resnet.cells["path"])
    assert "ResNet50/layer3-Sequential/5-Bottleneck/conv2-Conv2d" in paths
    assert not any(path.startswith("layer") for path in paths)


def test_the_mlp_run_reads_with_its_linear_layers():
    run = perfkit.load(MLP)
    events = raw_events(MLP)
    once = top_level_op_ms(events)
    per_step = run.op_type_steps.groupby("step")["total_ms"].sum()
    assert set(per_step.index) == set(once) == {2, 3, 4}
    for step, total in once.items():
        assert per_step[step] == pytest.approx(total, rel=1e-6)
    linear = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::linear"
              and any(s <= e["ts"] < t for s, t in raw_steps(events).values())]
    assert run.op_types.set_index("type").loc["aten::linear", "count"] == len(linear) == 3 * 3


@pytest.mark.parametrize("command", ["summary", "advise", "report"])
def test_the_views_work_on_a_torch_run(command, tmp_path):
    args = [command, str(RESNET)] + (["-o", str(tmp_path / "r.html")] if command == "report" else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    if command == "summary":
        assert "aten::convolution_backward" in result.output
    if command == "advise":
        actions = [line for line in result.output.splitlines() if line.strip().startswith("do:")]
        assert actions and not any("mindspore" in line.lower() or "dataset.batch" in line for line in actions)


def test_the_timeline_cuts_a_step_of_the_gzipped_trace(tmp_path):
    out = tmp_path / "step3.json"
    result = CliRunner().invoke(main, ["trace", str(MLP), "--step", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    events = json.loads(out.read_text())
    start, end = raw_steps(raw_events(MLP))[3]
    linear = [e for e in raw_events(MLP) if e.get("name") == "aten::linear" and start <= e["ts"] < end]
    assert sum(e.get("name") == "aten::linear" for e in events) == len(linear) == 3


def test_a_broken_trace_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "w.1.pt.trace.json.gz").write_bytes(b"not gzip")
    result = CliRunner().invoke(main, ["summary", str(tmp_path)])
    assert result.exit_code == 2 and "w.1.pt.trace.json.gz" in result.output and "Traceback" not in result.output


def test_the_reference_runner_wraps_a_python_script(tmp_path):
    script = tmp_path / "ref_train.py"
    script.write_text("")
    command = child_command(["python3", "-u", str(script), "--epochs", "1"])
    assert command[0] == "python3" and command[1] == "-u" and command[2].endswith("reference_main.py")
    assert command[3:] == [str(script), "--epochs", "1"]


@pytest.mark.parametrize("command, said", [([], "no command"), (["bash", "x.sh"], "Python script"),
                                           (["python", "missing.py"], "script not found")])
def test_the_reference_runner_refuses_what_it_cannot_run(command, said):
    result = CliRunner().invoke(main, ["profile", "--reference", "--"] + command)
    assert result.exit_code == 2 and said in result.output


def test_a_python_without_torch_is_said_in_one_line(tmp_path, monkeypatch):
    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\")\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    script = tmp_path / "ref_train.py"
    script.write_text("print('never')\n")
    import sys
    result = CliRunner().invoke(main, ["profile", "--reference", "--output", str(tmp_path / "out"), "--",
                                       sys.executable, str(script)])
    assert result.exit_code == 2 and "has no torch" in result.output and "perfkit[reference]" in result.output


def test_ops_of_another_thread_are_placed_in_the_step_their_start_falls_in(tmp_path):
    """torch runs backward on an autograd thread where a GPU is used: the MLP's trace with its backward ops and flow
    ends moved to another thread gives the same op time per step."""
    with gzip.open(next(MLP.glob("*.pt.trace.json.gz")), "rt") as handle:
        data = json.load(handle)
    wrappers = [e for e in data["traceEvents"] if e.get("cat") == "cpu_op"
                and e["name"].startswith("autograd::engine::evaluate_function")]
    moved = 0
    for event in data["traceEvents"]:
        if event.get("ph") in ("X", "f") and any(inside(event, w) if "dur" in event else
                                                 w["ts"] <= event["ts"] <= w["ts"] + w["dur"] for w in wrappers):
            event["tid"], moved = 99, moved + 1
    assert moved > 50
    (tmp_path / "w.1.pt.trace.json").write_text(json.dumps(data))
    run, original = perfkit.load(tmp_path), perfkit.load(MLP)
    per_step = run.op_type_steps.groupby("step")["total_ms"].sum()
    assert per_step.to_dict() == pytest.approx(original.op_type_steps.groupby("step")["total_ms"].sum().to_dict())
    assert run.ops.loc[run.ops["pass"] == "backward", "total_ms"].sum() == pytest.approx(
        original.ops.loc[original.ops["pass"] == "backward", "total_ms"].sum())


def test_a_trace_without_ops_names_the_file_and_exits_2(tmp_path):
    (tmp_path / "w.1.pt.trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 5, "tid": 1}]}))
    result = CliRunner().invoke(main, ["summary", str(tmp_path)])
    assert result.exit_code == 2 and "w.1.pt.trace.json" in result.output and "no cpu_op" in result.output


needs_torch = pytest.mark.skipif(
    not os.environ.get("PERFKIT_TORCH_PYTHON"),
    reason="needs a Python with torch: PERFKIT_TORCH_PYTHON=/path/to/python (torch is not in `test`)")


def profile_torch_script(out: Path, script: str) -> Path:
    """`perfkit profile --reference` of tests/scripts/`script` (4 steps, 2 of them profiled) into `out`."""
    result = CliRunner().invoke(main, ["profile", "--reference", "--steps", "2", "--warmup", "0", "--output", str(out),
                                       "--", os.environ["PERFKIT_TORCH_PYTHON"],
                                       str(RUNS.parent / "scripts" / script), "--steps", "4"])
    assert result.exit_code == 0, result.output
    return out


@needs_torch
def test_the_reference_runner_profiles_a_real_torch_script(tmp_path):
    out = profile_torch_script(tmp_path / "ref", "run_torch_mlp.py")
    trace = next(out.glob("*.pt.trace.json.gz"))
    with gzip.open(trace, "rt") as handle:
        data = json.load(handle)
    assert data["traceName"] == trace.name  # torch's absolute temporary path scrubbed
    names = {e.get("name") for e in data["traceEvents"]}
    assert {"ProfilerStep#1", "ProfilerStep#2", "nn.Module: 0 (Linear)"} <= names  # wait=1 warmup=0 active=2
    sidecar = json.loads((out / "perfkit_run.json").read_text())
    assert sidecar["config"]["batch_size"] == 64 and sidecar["config"]["steps_ended"] == 4
    assert perfkit.load(out).meta.framework == "torch"


@needs_torch
def test_the_reference_runner_records_the_scripts_grad_scaler(tmp_path):
    out = profile_torch_script(tmp_path / "ref", "run_torch_gradscaler.py")
    recorded = json.loads((out / "perfkit_run.json").read_text())["config"]["loss_scale"]
    assert recorded["scaler"] == "GradScaler" and recorded["enabled"] and recorded["scale"] == 1024.0
    assert recorded["growth_interval"] == 2 and recorded["device"] == "cpu"
    names = {e.get("name") for e in raw_events(out)}
    assert {"aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_"} <= names


def test_grad_scalers_ops_are_op_types_of_their_own():
    """GradScaler's unscale-and-check and scale update are outermost ops (called from Python, not inside another
    aten op): op types with the raw trace's calls and durations."""
    events = raw_events(GRADSCALER)
    steps = raw_steps(events)
    run = perfkit.load(GRADSCALER)
    for name in ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_"):
        calls = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == name
                 and any(inside(e, span) for span in steps.values())]
        rows = run.ops[run.ops["type"].astype(str) == name]
        assert int(rows["count"].sum()) == len(calls) == len(steps)
        assert float(rows["total_ms"].sum()) == pytest.approx(sum(e["dur"] for e in calls) / 1000, rel=1e-6)


def test_every_dashboard_page_of_a_torch_run_renders():
    from perfkit.dashboards import ids, layout
    run = perfkit.load(MLP)
    for path in ids.PAGES:
        if path != "/compare":
            assert layout.run_page(path, run, 0, "") is not None
    cells_page = str(layout.run_page("/cells", run, 0, ""))
    assert "optimizer-SGD" in cells_page or "Sequential" in cells_page

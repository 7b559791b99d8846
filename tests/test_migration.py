"""`perfkit compare REFERENCE PORT` across frameworks: the real PyTorch reference tests/runs/torch_cpu_resnet50 (and
the MLP of tests/runs/torch_cpu_mlp) against perfkit's built-in ResNet-50 port, sample_runs/cpu_avx2 (both batch 32 at
32x32 with ONEDNN_MAX_CPU_ISA=AVX2). Counts and times are taken from the raw files with the json and csv modules."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import perfkit
from perfkit.analysis.migration import family_of, match_families
from perfkit.apps.cli import main
from perfkit.views.migration import compare_frameworks, port_changes

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "runs" / "torch_cpu_resnet50"
MLP = ROOT / "tests" / "runs" / "torch_cpu_mlp"
PORT = ROOT / "sample_runs" / "cpu_avx2"
GRADSCALER = ROOT / "tests" / "runs" / "torch_cpu_gradscaler"
LOSS_SCALE_PORT = ROOT / "tests" / "runs" / "cpu_2_10_loss_scale"


pytestmark = pytest.mark.usefixtures("uncached")


@pytest.fixture(scope="module")
def result():
    return compare_frameworks([perfkit.load(REFERENCE)], [perfkit.load(PORT)])


def raw_reference() -> tuple[list[dict], dict[int, tuple[float, float]]]:
    with gzip.open(next(REFERENCE.glob("*.pt.trace.json.gz")), "rt") as handle:
        events = json.load(handle)["traceEvents"]
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))}
    return events, steps


def port_type_counts() -> dict[str, int]:
    path = next(PORT.glob("*_ascend_ms")) / "FRAMEWORK" / "cpu_op_type_info_0.csv"
    with open(path, newline="") as handle:
        return {row["op_type"]: int(row["type_occurrences"]) for row in csv.DictReader(handle)}


def family(result, name):
    return next(row for row in result["families"] if row["family"] == name)


def test_op_families_map_many_to_many_by_pass():
    assert family_of("torch", "aten::convolution_backward", "backward") == "convolution backward"
    assert family_of("mindspore", "Conv2DBackpropInput", "backward") == "convolution backward"
    assert family_of("mindspore", "Conv2DBackpropFilter", "backward") == "convolution backward"
    assert family_of("torch", "aten::linear", "forward") == family_of("mindspore", "BiasAdd", "forward")
    # MatMul is dense forward in forward, dense backward in backward; anything after backward is the optimizer's
    assert family_of("mindspore", "MatMul", "backward") == "dense backward"
    assert family_of("mindspore", "Adam", "other") == family_of("torch", "aten::addcdiv_", "other")
    assert family_of("mindspore", "Pad", "forward") is None


def test_settings_come_first_and_match_for_this_pair(result):
    reference, port = result["settings"]["reference"], result["settings"]["port"]
    sidecar = json.loads((REFERENCE / "perfkit_run.json").read_text())
    assert reference["framework"] == "torch" and reference["version"] == sidecar["config"]["torch_version"]
    assert port["framework"] == "mindspore" and port["version"] == "2.10.0" and port["mode"] == "graph"
    assert reference["batch_size"] == port["batch_size"] == 32 and reference["image_size"] == port["image_size"] == 32
    assert reference["isa_cap"] == port["isa_cap"] == "ONEDNN_MAX_CPU_ISA=AVX2"
    assert reference["network"] == port["network"] == "ResNet50"
    assert (reference["optimizer"], port["optimizer"]) == ("Adam (single-tensor)", "Adam (one kernel per parameter)")
    assert result["differing"] == [] and "threads" in result["not_checked"]  # MindSpore records no thread count
    text = CliRunner().invoke(main, ["compare", str(REFERENCE), str(PORT)]).output
    assert text.index("settings") < text.index("time per step") < text.index("op families")


def test_convolution_backward_is_one_torch_op_against_two_mindspore_kernels(result):
    events, steps = raw_reference()
    n = result["reference_run"]["spread"]["n"]  # the steady steps: the last n profiled
    steady = [steps[step] for step in sorted(steps)[-n:]]
    calls = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::convolution_backward"
             and any(start <= e["ts"] < end for start, end in steady)]
    row = family(result, "convolution backward")
    assert row["reference_ms_per_step"] == pytest.approx(sum(e["dur"] for e in calls) / 1000 / n, rel=1e-6)
    assert [(k["type"], k["calls_per_step"]) for k in row["reference_ops"]] == [("aten::convolution_backward", 53)]
    counts, profiled = port_type_counts(), len(perfkit.load(PORT).steps)
    port_ops = {k["type"]: k["calls_per_step"] for k in row["port_ops"]}
    assert port_ops == {"Conv2DBackpropFilter": counts["Conv2DBackpropFilter"] / profiled,
                        "Conv2DBackpropInput": counts["Conv2DBackpropInput"] / profiled} == {
        "Conv2DBackpropFilter": 53, "Conv2DBackpropInput": 52}
    assert row["ratio"] == pytest.approx(row["port_ms_per_step"] / row["reference_ms_per_step"])


def test_ops_without_a_partner_are_listed_by_name_never_in_a_ratio(result):
    port_only = {kind["type"] for kind in result["unmatched"]["port"]}
    reference_only = {kind["type"] for kind in result["unmatched"]["reference"]}
    assert "Pad" in port_only and "autograd::engine" in reference_only
    kinds = {side: {(kind["type"], kind["pass"]) for kind in result["unmatched"][side]}
             for side in ("reference", "port")}
    for row in result["families"]:  # an op kind (type and pass) is in a family or without a partner, never both
        for side in ("reference", "port"):
            assert not kinds[side] & {(kind["type"], kind["pass"]) for kind in row[f"{side}_ops"]}
    assert all(row["ratio"] is None or (row["reference_ms_per_step"] > 0 and row["port_ms_per_step"] > 0)
               for row in result["families"])


def test_the_optimizer_family_counts_torchs_many_ops_against_the_fused_adam(result):
    events, steps = raw_reference()
    n = result["reference_run"]["spread"]["n"]
    steady = [steps[step] for step in sorted(steps)[-n:]]
    spans = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("Optimizer.step#")
             and any(start <= e["ts"] < end for start, end in steady)]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op"), key=lambda e: (e["ts"], -e["dur"]))
    top, open_end = 0, -1.0
    for op in ops:  # the ops no other op encloses, inside the optimizer's spans
        if op["ts"] < open_end - 1e-3:
            continue
        open_end = op["ts"] + op["dur"]
        top += any(o["ts"] <= op["ts"] and op["ts"] + op["dur"] <= o["ts"] + o["dur"] + 1e-3 for o in spans)
    row = family(result, "optimizer and updates (outside forward and backward)")
    calls = sum(k["calls_per_step"] for k in row["reference_ops"])
    assert top / n <= calls <= top / n + 5  # plus the few bookkeeping ops outside every module (loss.backward's seed)
    assert top / n >= 10 * 161  # torch's single-tensor Adam: ten ops per parameter, 161 parameters
    port = {k["type"]: k["calls_per_step"] for k in row["port_ops"]}
    assert port["Adam"] == port_type_counts()["Adam"] / 3 == 161  # MindSpore's Adam: one kernel per parameter


def test_a_verdict_is_given_only_beyond_the_runs_spread():
    reference, port = perfkit.load(REFERENCE), perfkit.load(PORT)
    wide = compare_frameworks([reference], [port], noise_floor_pct=1e6)
    assert wide["verdict"]["kind"] == "within the runs' spread" and "spread" in wide["verdict"]["why"]
    narrow = compare_frameworks([reference], [port], noise_floor_pct=0.0)
    ref_ms, port_ms = narrow["reference_run"]["step_ms"], narrow["port_run"]["step_ms"]
    assert narrow["verdict"]["kind"] == ("port faster" if port_ms < ref_ms else "port slower")
    assert narrow["verdict"]["speedup"] == pytest.approx(ref_ms / port_ms)


def test_a_verdict_is_refused_when_settings_differ_and_says_which():
    refused = compare_frameworks([perfkit.load(MLP)], [perfkit.load(PORT)])
    assert refused["verdict"]["kind"] == "refused"
    assert {row["setting"] for row in refused["differing"]} >= {"network", "batch_size"}
    assert "network Sequential (reference) vs ResNet50 (port)" in refused["verdict"]["why"]


def test_where_the_port_loses_the_mindspore_change_is_named():
    settings = {"reference": {"precision": "float32", "device": "CPU", "mode": "eager"},
                "port": {"precision": "float32", "device": "CPU", "mode": "pynative"}}
    sides = {"reference": {"data_wait_ms": 0.5}, "port": {"data_wait_ms": 20.0}}
    rows = match_families(
        pd.DataFrame([{"type": "aten::convolution_backward", "pass": "backward",
                                         "ms_per_step": 100.0, "calls_per_step": 53.0}]),
        pd.DataFrame([{"type": "Conv2DBackpropFilter", "pass": "backward", "ms_per_step": 300.0,
                                         "calls_per_step": 53.0}]))["families"]
    changes = {change["where"]: change["change"] for change in port_changes(settings, sides, rows, {})}
    assert "GRAPH_MODE" in changes["mode"] and "ONEDNN_MAX_CPU_ISA" in changes["convolution backward"]
    assert "--workers" in changes["data wait"]


def test_the_cli_orients_reference_and_port_and_refuses_the_gate():
    runner = CliRunner()
    forward = json.loads(runner.invoke(main, ["compare", str(REFERENCE), str(PORT), "--format", "json"]).output)
    backward = json.loads(runner.invoke(main, ["compare", str(PORT), str(REFERENCE), "--format", "json"]).output)
    assert forward["kind"] == backward["kind"] == "cross_framework"
    assert forward["reference"] == backward["reference"] == str(REFERENCE)
    gated = runner.invoke(main, ["compare", str(REFERENCE), str(PORT), "--fail-if-slower", "5"])
    assert gated.exit_code == 2 and "without a gate" in gated.output
    markdown = runner.invoke(main, ["compare", str(REFERENCE), str(PORT), "--format", "markdown"]).output
    assert "| batch | 32 | 32 |" in markdown


def test_every_family_is_a_row_of_the_mapping_table_in_docs():
    from perfkit.analysis.migration import FAMILIES
    table = (ROOT / "docs" / "migration.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| ")}
    for entry in FAMILIES:
        assert entry.name in rows, f"{entry.name!r} has no row in docs/migration.md's mapping table"
        assert all(f"`{op}`" in rows[entry.name] for op in entry.torch + entry.mindspore)


def raw_module_forward_ms(module_span: str) -> float:
    """A module's forward ms per profiled step from the raw trace: the self time (its duration less its direct
    children's) of every cpu_op inside the module's spans within the profiled steps, summed."""
    events, steps = raw_reference()
    spans = [e for e in events if e.get("ph") == "X" and e.get("name") == module_span
             and any(start <= e["ts"] < end for start, end in steps.values())]
    ops = sorted((e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"),
                 key=lambda e: (e.get("tid"), e["ts"], -e["dur"]))
    self_us: dict[int, float] = {}
    stack: list[dict] = []
    for op in ops:
        while stack and (stack[-1].get("tid") != op.get("tid") or op["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]):
            stack.pop()
        if stack:
            self_us[id(stack[-1])] -= op["dur"]
        self_us[id(op)] = op["dur"]
        stack.append(op)
    inside = sum(self_us[id(op)] for op in ops
                 if any(s["ts"] <= op["ts"] and op["ts"] + op["dur"] <= s["ts"] + s["dur"] + 1e-3 for s in spans))
    return inside / 1000 / len(steps)


def raw_port_forward_ms(cell_path: str) -> float:
    """A Cell's forward ms per profiled step from the port's raw op detail file (csv module): its rows'
    total time under `<path>/`, over the manifest's profiled steps."""
    detail = next(PORT.glob("*_ascend_ms")) / "FRAMEWORK" / "cpu_op_detail_info_0.csv"
    with open(detail, newline="") as handle:
        total = sum(float(row["op_total_time(ms)"]) for row in csv.DictReader(handle)
                    if row["full_op_name"].startswith(cell_path + "/"))
    return total / len(json.loads((PORT / "perfkit_run.json").read_text())["steps"])


BACKBONE = "Default/network-WithLossCell/_backbone-ResNet50"


def test_stages_match_module_and_cell_down_the_tree_with_the_raw_forward_time(result):
    stages = {row["stage"]: row for row in result["stages"]}
    assert {"layer1", "layer2", "layer3", "layer4", "conv1", "fc", "layer1.0", "layer3.5", "layer1.0.conv2",
            "layer1.0.downsample.0"} <= set(stages)
    assert (stages["layer3"]["reference"]["class"], stages["layer3"]["port"]["class"]) == ("Sequential",
                                                                                          "SequentialCell")
    assert (stages["fc"]["reference"]["class"], stages["fc"]["port"]["class"]) == ("Linear", "Dense")
    assert (stages["layer1.0"]["reference"]["class"], stages["layer1.0"]["port"]["class"]) == ("Bottleneck",
                                                                                              "Bottleneck")
    assert [stages[k]["depth"] for k in ("layer1", "layer1.0", "layer1.0.conv2", "layer1.0.downsample.0")] == [
        1, 2, 3, 4]
    for label, span, cell in (
            ("layer3", "nn.Module: layer3 (Sequential)", "layer3-SequentialCell"),
            ("layer1.0", "nn.Module: layer1.0 (Bottleneck)", "layer1-SequentialCell/0-Bottleneck"),
            ("layer2.1.conv2", "nn.Module: layer2.1.conv2 (Conv2d)",
             "layer2-SequentialCell/1-Bottleneck/conv2-Conv2d")):
        assert stages[label]["reference"]["forward_ms"] == pytest.approx(raw_module_forward_ms(span), rel=1e-6)
        assert stages[label]["port"]["forward_ms"] == pytest.approx(raw_port_forward_ms(f"{BACKBONE}/{cell}"),
                                                                    rel=1e-6)
    assert "avgpool" in result["unmatched_stages"]["reference"]  # the port averages with ReduceMean, no Cell
    # the port pads before a MaxPool2d inside a SequentialCell: classes that do not map are listed, not compared
    assert result["stage_class_mismatches"] == [{"stage": "maxpool", "reference": "MaxPool2d",
                                                 "port": "SequentialCell"}]
    assert "maxpool" not in stages


def test_the_ports_backward_of_identical_blocks_is_held_by_the_group_never_split(result):
    """layer1's blocks read tensors of the same shapes (their 3x3 convs, ReLUs, BatchNorms), so MindSpore's
    gradient kernels that fit any of them sit on layer1: each block's backward is the group's, shown once, and
    the groups' and the whole stages' backward add up to every gradient kernel of the network in the raw file."""
    stages = {row["stage"]: row for row in result["stages"]}
    for block in ("layer1.0", "layer1.1", "layer1.2"):
        assert stages[block]["port"]["backward_ms"] is None
        assert stages[block]["port"]["backward_with"] == ["layer1.0", "layer1.1", "layer1.2"]
        assert stages[block]["reference"]["backward_ms"] > 0  # torch's flows name each block's backward
    group = next(g for g in result["stage_groups"] if g["stages"] == ["layer1.0", "layer1.1", "layer1.2"])
    assert group["backward_ms"] == pytest.approx(stages["layer1"]["port"]["backward_ms"])
    assert group["reference_backward_ms"] == pytest.approx(sum(stages[f"layer1.{k}"]["reference"]["backward_ms"]
                                                               for k in range(3)))
    detail = next(PORT.glob("*_ascend_ms")) / "FRAMEWORK" / "cpu_op_detail_info_0.csv"
    with open(detail, newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["full_op_name"].startswith(f"Gradients/{BACKBONE}/")]
    profiled = len(json.loads((PORT / "perfkit_run.json").read_text())["steps"])
    own = sum(float(row["op_total_time(ms)"]) for row in rows  # kernels of the backbone's own ops (ReduceMean's)
              if row["full_op_name"][len(f"Gradients/{BACKBONE}/"):].startswith("Grad_"))
    top = [row for row in result["stages"] if row["depth"] == 1]
    maxpool = perfkit.cells(perfkit.load(PORT)).set_index("label").at["maxpool", "backward_ms"]
    assert all(row["port"]["backward_ms"] is not None for row in top)  # no kernel fits two top-level stages
    assert sum(row["port"]["backward_ms"] for row in top) + maxpool + own / profiled == pytest.approx(
        sum(float(row["op_total_time(ms)"]) for row in rows) / profiled, rel=1e-6)
    # a Cell whose gradient kernels only it can own keeps its own number: layer4.0's strided downsample conv;
    # layer1.0's reads the shapes of every layer1 block's conv3 (64 -> 256, 1x1) and stays in the group
    assert stages["layer4.0.downsample.0"]["port"]["backward_ms"] > 0
    assert stages["layer1.0.downsample.0"]["port"]["backward_with"] == ["layer1.0", "layer1.1", "layer1.2"]


def test_compare_shows_stages_to_a_depth(result):
    runner = CliRunner()
    text = runner.invoke(main, ["compare", str(REFERENCE), str(PORT)]).output
    assert "    layer1.0  (Bottleneck / Bottleneck)" in text and "layer1.0.conv2" not in text  # top level + one
    assert "in layer1.{0,1,2}" in text and "backward of identical blocks" in text
    assert "maxpool (MaxPool2d / SequentialCell)" in text and "avgpool" in text
    deeper = runner.invoke(main, ["compare", str(REFERENCE), str(PORT), "--depth", "3"]).output
    assert "      layer1.0.conv2  (Conv2d / Conv2d)" in deeper and "layer1.0.downsample.0" not in deeper
    markdown = runner.invoke(main, ["compare", str(REFERENCE), str(PORT), "--format", "markdown"]).output
    assert "| &nbsp;&nbsp;layer1.0  (Bottleneck / Bottleneck) |" in markdown
    full = json.loads(runner.invoke(main, ["compare", str(REFERENCE), str(PORT), "--format", "json"]).output)
    assert max(row["depth"] for row in full["stages"]) == 4 == max(row["depth"] for row in result["stages"])
    top = json.loads(runner.invoke(main, ["compare", str(REFERENCE), str(PORT), "--format", "json",
                                          "--depth", "1"]).output)
    assert {row["depth"] for row in top["stages"]} == {1} and top["stage_groups"] == []


def test_a_cell_the_port_renamed_is_matched_by_its_place_and_class(tmp_path, result):
    """The port's files with every `downsample` Cell named `down_sample` (scope names rewritten in a copy): the one
    unpaired sibling of a mapping class on each side is its partner, its subtree matched below it with the numbers
    of the port as recorded; nothing is left without a partner that was matched before."""
    port = tmp_path / "port"
    shutil.copytree(PORT, port)
    for path in port.rglob("*"):
        if path.is_file() and b"downsample" in path.read_bytes():
            path.write_bytes(path.read_bytes().replace(b"downsample", b"down_sample"))
    renamed = compare_frameworks([perfkit.load(REFERENCE)], [perfkit.load(port)])
    before = {row["stage"]: row for row in result["stages"]}
    after = {row["stage"]: row for row in renamed["stages"]}
    assert set(after) == set(before) and renamed["unmatched_stages"] == result["unmatched_stages"]
    assert after["layer4.0.downsample"]["port_stage"] == "layer4.0.down_sample"
    assert after["layer4.0.downsample.0"]["port"] == before["layer4.0.downsample.0"]["port"]
    text = CliRunner().invoke(main, ["compare", str(REFERENCE), str(port), "--depth", "3"]).output
    assert "layer4.0.downsample = down_sample  (Sequential / SequentialCell)" in text


def test_the_comparison_is_the_same_whatever_the_process_string_hashing():
    """Sums over sets kept in sorted order: the JSON of two processes with other hash seeds is byte-identical."""
    outputs = set()
    for seed in ("0", "1", "2", "3"):
        done = subprocess.run([sys.executable, "-m", "perfkit", "compare", str(REFERENCE), str(PORT), "--format",
                               "json"], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PERFKIT_NO_CACHE": "1"})
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1


def test_torch_classes_map_to_their_mindspore_cells():
    from perfkit.views.migration import classes_map
    assert classes_map("Linear", "Dense") and classes_map("Sequential", "SequentialCell")
    assert classes_map("Bottleneck", "Bottleneck")  # the network's own class: the Cell of the same name
    assert not classes_map("MaxPool2d", "SequentialCell") and not classes_map("Linear", "Conv2d")


def test_loss_scaling_is_a_setting_with_its_evidence_on_each_side(result):
    """torch: GradScaler's ops in the trace (per step, counted in the raw JSON) and the runner's record of it;
    MindSpore: the profile hook's record of the Model's loss_scale_manager (the manifest's raw JSON)."""
    from perfkit.views.migration import loss_scale
    with gzip.open(next(GRADSCALER.glob("*.pt.trace.json.gz")), "rt") as handle:
        events = json.load(handle)["traceEvents"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))]
    calls = {name: sum(1 for e in events if e.get("cat") == "cpu_op" and e["name"] == name
                       and any(start <= e["ts"] < end for start, end in steps)) / len(steps)
             for name in ("aten::_amp_foreach_non_finite_check_and_unscale_", "aten::_amp_update_scale_")}
    scaler = json.loads((GRADSCALER / "perfkit_run.json").read_text())["config"]["loss_scale"]
    torch_side = loss_scale(perfkit.load(GRADSCALER))
    assert torch_side["scaling"].startswith(f"dynamic, from {scaler['scale']:g} (GradScaler")
    for name, per_step in calls.items():
        assert f"{name} x{per_step:.0f}/step" in torch_side["evidence"] and per_step == 1
    assert result["settings"]["reference"]["loss_scale"]["scaling"] == "none"  # no GradScaler op in its trace
    assert "loss_scale" in result["not_checked"]  # the sample port predates the hook's record
    manager = json.loads((LOSS_SCALE_PORT / "perfkit_run.json").read_text())["config"]["loss_scale"]
    port_side = loss_scale(perfkit.load(LOSS_SCALE_PORT))
    assert port_side["scaling"] == f"fixed {manager['scale']:g}" and manager["manager"] in port_side["evidence"]


def test_one_side_scaling_its_loss_is_a_listed_difference_that_does_not_refuse_the_verdict():
    differ = compare_frameworks([perfkit.load(REFERENCE)], [perfkit.load(LOSS_SCALE_PORT)])
    assert [row["setting"] for row in differ["differing_not_blocking"]] == ["loss_scale"]
    assert "loss_scale" not in {row["setting"] for row in differ["differing"]}
    assert "loss_scale" not in differ["verdict"]["why"]
    text = CliRunner().invoke(main, ["compare", str(REFERENCE), str(LOSS_SCALE_PORT)]).output
    assert "differs, not refusing the verdict: loss scaling none" in text and "fixed 1024" in text
    same = compare_frameworks([perfkit.load(GRADSCALER)], [perfkit.load(LOSS_SCALE_PORT)])
    assert same["differing_not_blocking"] == []  # both scale: the scales are shown, not a difference


def test_the_profile_hook_records_a_models_loss_scale_manager():
    ms = pytest.importorskip("mindspore")
    from mindspore import nn
    from mindspore.train import Model
    from perfkit.profiler.train import loss_scale_of
    net = nn.Dense(4, 2)
    model = Model(net, loss_fn=nn.MSELoss(), optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9),
                  loss_scale_manager=ms.amp.FixedLossScaleManager(128.0, drop_overflow_update=False))
    assert loss_scale_of(model) == {"manager": "FixedLossScaleManager", "train_cell": "TrainOneStepCell",
                                    "scale": 128.0, "drop_overflow_update": False}
    plain = Model(net, loss_fn=nn.MSELoss(), optimizer=nn.Momentum(net.trainable_params(), 0.1, 0.9))
    assert loss_scale_of(plain)["manager"] is None


def test_the_dashboards_compare_page_shows_the_cross_framework_comparison():
    from perfkit.dashboards import layout
    body = layout.compare_body([perfkit.load(PORT), perfkit.load(REFERENCE)])
    markdown = body[0].children[1].children
    assert body[0].children[0].children == "PyTorch reference and MindSpore port"
    assert "Conv2DBackpropInput" in markdown and "| batch | 32 | 32 |" in markdown
    same = layout.compare_body([perfkit.load(PORT), perfkit.load(PORT)])
    assert "PyTorch reference" not in str(same[0])


def test_the_report_shows_the_cross_framework_comparison(tmp_path):
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(REFERENCE), str(PORT), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "PyTorch reference and MindSpore port" in page and "Conv2DBackpropFilter x53" in page


def test_the_python_api_compares_across_frameworks_as_the_cli_does():
    """perfkit.compare(reference, port) in either order is the migration view, the dict `perfkit compare
    --format json` prints."""
    reference, port = perfkit.load(REFERENCE), perfkit.load(PORT)
    printed = json.loads(CliRunner().invoke(main, ["compare", str(REFERENCE), str(PORT), "--format", "json"]).output)
    for result in (perfkit.compare(reference, port), perfkit.compare(port, reference)):
        assert json.loads(json.dumps(result, default=str)) == printed

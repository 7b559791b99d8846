"""perfkit.analysis.cells: op time by network Cell, checked against the raw files with the csv module."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.analysis import cells as cells_module
from perfkit.analysis.flops import chip_peak, cpu_peak
from perfkit.analysis.steady import first_step_verdicts
from perfkit.core import scopes

SAMPLE = REPO / "sample_runs" / "cpu_default"
TREE_RUNS = {"cpu_default": SAMPLE, "cpu_ranks2": REPO / "sample_runs" / "cpu_ranks2",
             "legacy_run_2": FIXTURE_RUNS["legacy_run_2"], "legacy_ut": FIXTURE_RUNS["legacy_ut"],
             "new_level1": FIXTURE_RUNS["new_level1"], "new_db_level1": FIXTURE_RUNS["new_db_level1"],
             "cpu_2_10": FIXTURE_RUNS["cpu_2_10"], "pynative": REPO / "tests" / "runs" / "cpu_2_10_pynative"}


def _steps(run) -> dict[int, int]:
    return run.steps.groupby("rank")["step"].nunique().to_dict()


@pytest.mark.parametrize("name", TREE_RUNS)
def test_every_op_is_placed_once(name):
    """The top Cells' totals are the op totals (per rank, or the ranks' mean where pooled): no op lost or
    counted twice, scopes or none. Per steady step: where op runs are timed and the first step is left out of
    the step means, less the ops' time in it, over one step fewer."""
    run = perfkit.load(TREE_RUNS[name])
    tree = perfkit.cells(run)
    steps = _steps(run)
    _, first = first_step_verdicts(run.steps)
    left_out = set(first.loc[first["reason"].notna(), "rank"]) if len(run.steps) else set()
    per_rank_ops = {}
    for rank, ops in run.ops.groupby("rank"):
        if rank in left_out and ops["first_step_ms"].notna().all():
            per_rank_ops[rank] = (ops["total_ms"].sum() - ops["first_step_ms"].sum()) / (steps[rank] - 1)
        else:
            per_rank_ops[rank] = ops["total_ms"].sum() / steps.get(rank, 1)
    roots = tree[tree["depth"] == 1]
    if roots["rank"].isna().all():
        assert roots["total_ms"].sum() == pytest.approx(sum(per_rank_ops.values()) / len(per_rank_ops), rel=1e-9)
    else:
        for rank, total in per_rank_ops.items():
            assert roots.loc[roots["rank"] == rank, "total_ms"].sum() == pytest.approx(total, rel=1e-9)
    # every Cell holds at least its children
    children = tree.groupby(["rank", "parent"], dropna=False)["total_ms"].sum()
    for row in tree.itertuples():
        kids = children.get((row.rank, row.path), 0.0)
        assert row.total_ms >= kids - 1e-9
        assert row.total_ms == pytest.approx(row.forward_ms + row.backward_ms + row.other_ms)


def _raw_rows(path: Path, name_column: str, time_column: str, count_column: str | None) -> list[tuple[str, float]]:
    with open(path, newline="", encoding="utf-8") as file:
        return [(row[name_column], float(row[time_column]) * (float(row[count_column]) if count_column else 1.0))
                for row in csv.DictReader(file)]


RAW = {
    # (run, detail file, name column, time column, count column: total = time x count)
    "cpu_default": (SAMPLE, next(SAMPLE.glob("*_ascend_ms/FRAMEWORK/cpu_op_detail_info_0.csv")), "full_op_name",
                    "op_total_time(ms)", None),
    "legacy_run_2": (FIXTURE_RUNS["legacy_run_2"], FIXTURE_RUNS["legacy_run_2"] / "aicore_intermediate_1_detail.csv",
                     "full_op_name", "execution_time", None),
}


@pytest.mark.parametrize("name", RAW)
def test_cell_time_is_the_raw_rows_under_its_path(name):
    """Each Cell's forward time is the sum of the detail file's rows under `<path>/`; down to where graph mode's
    reused gradient scopes start (the network's top Cells), so is its total, backward rows (`Gradients/<path>/`)
    included."""
    folder, detail, name_column, time_column, count_column = RAW[name]
    run = perfkit.load(folder)
    steps = next(iter(_steps(run).values()))
    rows = _raw_rows(detail, name_column, time_column, count_column)
    tree = perfkit.cells(run)
    assert len(tree) > 5
    checked_totals = 0
    for cell in tree.itertuples():
        if cell.path == scopes.NO_CELL:
            continue
        prefix = cell.path + "/"
        forward = sum(ms for op, ms in rows if op.startswith(prefix) and "/optimizer" not in op)
        if "optimizer" not in cell.path:
            assert cell.forward_ms * steps == pytest.approx(forward, rel=1e-6, abs=1e-9), cell.path
        if cell.depth <= 3 or "optimizer" in cell.path or "_loss_fn" in cell.path:
            under = sum(ms for op, ms in rows if op.startswith(prefix) or op.startswith("Gradients/" + prefix))
            assert cell.total_ms * steps == pytest.approx(under, rel=1e-6, abs=1e-9), cell.path
            checked_totals += 1
    assert checked_totals >= 4


def test_resnet50_forward_and_backward_joined():
    """On the ResNet-50 run the backward kernels sit with their forward Cell, not where graph mode named them:
    the stem's bn1 keeps only its own BatchNormGrad (53 are named there), every gradient conv sits in a Cell
    that runs a forward conv with the same weight, and each stage's backward takes 1-4x its forward."""
    run = perfkit.load(SAMPLE)
    placed = cells_module.placed_ops(run)
    stem_bn = "Default/network-WithLossCell/_backbone-ResNet50/bn1-BatchNorm2d"
    named_there = placed[placed["name"].str.startswith("Gradients/" + stem_bn + "/")]
    assert (named_there["type"] == "BatchNormGrad").sum() == 53
    kept = placed[(placed["path"] == stem_bn) & (placed["pass"] == "backward")]
    assert kept["type"].tolist() == ["BatchNormGrad"]
    assert kept["input_shapes"].iloc[0].startswith("32,64,16,16")
    forward_weights = {}
    for row in placed[placed["type"] == "Conv2D"].itertuples():
        forward_weights.setdefault(row.input_shapes.split(";")[1], set()).add(row.path)
    for row in placed[placed["type"] == "Conv2DBackpropInput"].itertuples():
        weight = row.input_shapes.split(";")[1]
        assert any(path == row.path or path.startswith(row.path + "/") for path in forward_weights[weight]), row.name
    tree = perfkit.cells(run).set_index("label")
    for stage in ("layer1", "layer2", "layer3", "layer4"):
        assert 1.0 < tree.at[stage, "backward_ms"] / tree.at[stage, "forward_ms"] < 4.0, stage
    assert tree.at["optimizer", "other_ms"] == tree.at["optimizer", "total_ms"] > 0
    assert tree.at["_loss_fn", "forward_ms"] > 0 and tree.at["_loss_fn", "backward_ms"] > 0
    assert any("placed by their shapes" in warning for warning in perfkit.cells(run).attrs["warnings"])


def resnet50_conv_macs(image: int) -> int:
    """Multiply-adds of ResNet-50's 53 convolutions (torchvision / MindSpore model zoo layout: stride in the
    3x3 conv, 1x1 downsample) for one `image` x `image` image, written out from the architecture."""
    def out(size, stride):
        return -(-size // stride)
    size = out(image, 2)
    macs = size * size * 64 * 3 * 7 * 7            # conv1 7x7/2
    size = out(size, 2)                             # max pool 3x3/2
    channels = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            step = stride if block == 0 else 1
            out_size = out(size, step)
            macs += size * size * width * channels              # conv1 1x1
            macs += out_size * out_size * width * width * 9     # conv2 3x3/step
            macs += out_size * out_size * 4 * width * width     # conv3 1x1
            if block == 0:
                macs += out_size * out_size * 4 * width * channels  # downsample 1x1/step
            channels, size = 4 * width, out_size
    return macs


def test_resnet50_convolution_flops_match_the_analytic_count():
    """Convention: a multiply-add is 2 FLOPs. ResNet-50's convolutions do 4.09 G multiply-adds per 224x224
    image (the "4.1 GFLOPs" usually quoted counts multiply-adds), 8.2 GFLOPs; the run's 32x32 images scale
    every feature map by (32/224)^2 = 1/49. perfkit's forward Conv2D FLOPs per step must be exactly
    2 x MACs(32) x batch."""
    assert resnet50_conv_macs(224) == pytest.approx(4.09e9, rel=0.01)
    assert resnet50_conv_macs(32) * 49 == resnet50_conv_macs(224)
    manifest = json.loads((SAMPLE / "perfkit_run.json").read_text())
    batch = manifest["config"]["batch_size"]
    assert "image size 32x32" in " ".join(manifest["notes"])
    run = perfkit.load(SAMPLE)
    placed = cells_module.placed_ops(run)
    steps = next(iter(_steps(run).values()))
    forward_flops = placed.loc[placed["type"] == "Conv2D", "flops"].sum() / steps
    assert forward_flops == pytest.approx(2 * resnet50_conv_macs(32) * batch, rel=1e-12)
    # the filter gradient does the forward's work again; the input gradient all but the stem conv's
    rates = cells_module.op_type_rates(run).set_index("type")
    assert rates.at["Conv2DBackpropFilter", "flops"] == pytest.approx(forward_flops, rel=1e-12)
    stem = 2 * 16 * 16 * 64 * 3 * 7 * 7 * batch
    assert rates.at["Conv2DBackpropInput", "flops"] == pytest.approx(forward_flops - stem, rel=1e-12)


# A 2-core AMD EPYC VM's /proc/cpuinfo (this machine's, trimmed to the fields cpu_peak reads).
CPUINFO = "".join(f"""processor\t: {i}
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC
physical id\t: 0
core id\t: {i}
cpu MHz\t\t: 2596.126
flags\t\t: fpu sse sse2 avx fma avx2 avx512f avx512bw

""" for i in range(2))


def test_mfu_on_a_cpu_run_with_its_peak_derivation():
    peak = cpu_peak(CPUINFO)
    # 2 cores x 8 float32 lanes (AMD runs AVX-512 on 256-bit units) x 2 (FMA) x 2 units x 2.596126 GHz
    assert peak.tflops_per_s == pytest.approx(2 * 8 * 2 * 2 * 2596.126e6 / 1e12)
    assert peak.derivation.startswith("2 cores x 8 float32 lanes") and "166.2 GFLOP/s" in peak.derivation
    run = perfkit.load(SAMPLE)
    unknown = cells_module.utilisation(run)
    assert unknown["mfu"] is None and "host CPU" in unknown["mfu_unknown"]
    known = cells_module.utilisation(run, peak)
    steady = perfkit.analysis.ledger.steady_means(run)["total"].mean()
    assert known["step_ms"] == pytest.approx(steady)
    assert known["achieved_tflops_per_s"] == pytest.approx(known["flops_per_step"] / steady / 1e9)
    assert known["mfu"] == pytest.approx(known["achieved_tflops_per_s"] / peak.tflops_per_s)
    assert 0 < known["mfu"] < 1
    assert known["peak"]["derivation"] == peak.derivation


def test_chip_peaks_are_vendor_figures_or_unknown():
    assert chip_peak("NVIDIA A100-SXM4-80GB", "bfloat16").tflops_per_s == 312.0
    assert chip_peak("Ascend910A", "float16").tflops_per_s == 256.0
    assert chip_peak("Ascend910B", "float16") is None  # no per-variant vendor figure: unknown, not guessed
    assert cpu_peak("processor : 0\n") is None
    run = perfkit.load(FIXTURE_RUNS["new_db_level1"])
    utilisation = cells_module.utilisation(run)
    assert utilisation["mfu"] is None and "Ascend910B" in utilisation["mfu_unknown"]


def test_names_without_scopes_are_said_once():
    """torch_npu kernels (new layout) carry no Cell scope: all under (no cell), one warning, FLOPs not invented."""
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    tree = perfkit.cells(run)
    assert tree["path"].tolist() == [scopes.NO_CELL]
    scope_warnings = [w for w in tree.attrs["warnings"] if "carry no Cell scope" in w]
    assert len(scope_warnings) == 1 and "100%" in scope_warnings[0]


def test_scope_forms():
    assert scopes.scope_of("Gradients/Default/net-N/_backbone-A/gradReLU/ReluGradV2-op406") == (
        ["Default", "net-N", "_backbone-A"], "ReLU")
    assert scopes.scope_of("Gradients/Default/a-A/conv2-Conv2d/Grad_Conv2D/Conv2DBackpropFilter-op6") == (
        ["Default", "a-A", "conv2-Conv2d"], "Conv2D")
    assert scopes.scope_of("aclnnInplaceRelu_Relu_Relu") == ([], None)
    assert scopes.cell_label(
        "Default/network-WithLossCell/_backbone-ResNet50/layer4-SequentialCell/0-Bottleneck/conv3-Conv2d/Conv2D-op1"
    ) == "layer4.0.conv3"


def test_summary_shows_the_cells(tmp_path):
    from click.testing import CliRunner

    from perfkit.apps.cli import main
    runner = CliRunner()
    text = runner.invoke(main, ["summary", str(SAMPLE)], env={"PERFKIT_NO_CACHE": "1"})
    assert text.exit_code == 0
    section = text.output.split("Cells (ms per steady step")[1].splitlines()
    assert section[2].split()[0] == "layer4" and section[3].split()[0] == "layer3"
    answer = json.loads(runner.invoke(main, ["summary", str(SAMPLE), "--format", "json"],
                                      env={"PERFKIT_NO_CACHE": "1"}).output)
    top = answer["cells"]["by_rank"][0]["top"]
    assert [cell["cell"] for cell in top[:2]] == ["layer4", "layer3"]
    assert sum(cell["total_ms"] for cell in top) == pytest.approx(
        sum(cell["total_ms"] for cell in answer["cells"]["by_rank"][0]["tree"] if cell["depth"] == 1))
    tree = runner.invoke(main, ["summary", str(SAMPLE), "--by", "cell"], env={"PERFKIT_NO_CACHE": "1"})
    assert "        layer4" in tree.output and "layer4.0.conv2" in tree.output
    assert not math.isnan(top[0]["share"])


def test_a_finding_names_its_cell_and_links_to_it():
    """The compute-bound finding targets Conv2DBackpropFilter: the view names the Cell holding most of that
    type's time, computed here from the placed ops, and the report links it to the run section's Cells graph."""
    from perfkit.render import report
    from perfkit.views import numbers
    run = perfkit.load(SAMPLE)
    item = next(item for item in numbers.findings(run).items if item.target == "Conv2DBackpropFilter")
    placed = cells_module.placed_ops(run)
    filters = placed[placed["type"] == "Conv2DBackpropFilter"]
    layer4 = item.cell["path"]
    assert item.cell["cell"] == "layer4"
    in_layer4 = filters.loc[filters["path"].str.startswith(layer4), "total_ms"].sum()
    assert item.cell["share"] == pytest.approx(in_layer4 / filters["total_ms"].sum())
    html = report.render_report([run])
    assert f'id="run-0-fig-cells"' in html
    assert '<a href="#run-0-fig-cells">layer4 (' in html


def test_compare_gives_per_cell_deltas():
    from perfkit.render.compare import compare_text
    from perfkit.views.compare import compare
    a, b = perfkit.load(SAMPLE), perfkit.load(REPO / "sample_runs" / "cpu_avx2")
    result = compare(a, b)
    tree_a, tree_b = perfkit.cells(a).set_index("path"), perfkit.cells(b).set_index("path")
    for item in result["cell_deltas"]:
        if not item["path"].endswith(cells_module.OWN_OPS):
            assert item["a_ms"] == pytest.approx(tree_a.at[item["path"], "total_ms"])
            assert item["delta_ms"] == pytest.approx(tree_b.at[item["path"], "total_ms"]
                                                     - tree_a.at[item["path"], "total_ms"])
    assert sum(item["a_ms"] for item in result["cell_deltas"]) == pytest.approx(
        tree_a.loc[tree_a["depth"] == 1, "total_ms"].sum())
    top = result["cell_deltas"][0]
    assert f"  {top['cell']} {top['delta_ms']:+,.3f} ms per step" in compare_text(result)


def test_mfu_from_the_host_facts_the_manifest_records(tmp_path):
    """`perfkit profile` records the host CPU's facts (manifest `host`): a CPU run's MFU then needs no peak
    passed; facts of the wrong kind leave it unknown."""
    import shutil

    from perfkit.analysis.flops import cpu_facts
    from perfkit.profiler.runfolder import read_manifest, write_manifest
    run_folder = tmp_path / "cpu_default"
    shutil.copytree(SAMPLE, run_folder)
    manifest = read_manifest(run_folder)
    assert "host" not in manifest
    manifest["host"] = cpu_facts(CPUINFO)
    write_manifest(run_folder, manifest)
    run = perfkit.load(run_folder)
    utilisation = cells_module.utilisation(run)
    assert utilisation["peak"]["derivation"] == cpu_peak(CPUINFO).derivation
    assert utilisation["mfu"] == pytest.approx(utilisation["achieved_tflops_per_s"] / cpu_peak(CPUINFO).tflops_per_s)
    manifest["host"] = {"cpu_mhz": "fast", "cores": 2, "flags": ["fma", "avx2"]}
    write_manifest(run_folder, manifest)
    assert cells_module.utilisation(perfkit.load(run_folder))["mfu"] is None
    del manifest["host"]
    write_manifest(run_folder, manifest)  # a manifest written without host facts gets this host's (and its load)
    host = read_manifest(run_folder)["host"]
    assert {key: value for key, value in host.items() if key not in ("load_average", "logical_cpus")} == \
        (perfkit.analysis.flops.host_cpu_facts() or {})


def test_a_finding_spread_over_the_whole_network_names_no_cell():
    """cell_of_ops names where a finding's ops sit; ops spread over the whole network sit in its backbone, which
    says nothing ("Cell: _backbone 100 %"): no Cell then. One layer's ops still name their layer (the real ResNet-50
    sample run: every conv against layer4's convs alone)."""
    run = perfkit.load(REPO / "sample_runs" / "cpu_avx2")
    convs = run.ops[run.ops["type"].str.startswith("Conv2D")]
    assert cells_module.cell_of_ops(run, convs["name"]) is None
    layer4 = convs[convs["name"].str.contains("/layer4-")]["name"]
    found = cells_module.cell_of_ops(run, layer4)
    assert found is not None and found["cell"].startswith("layer4") and found["share"] == pytest.approx(1.0)


def test_the_step_function_is_named_by_the_network_cell_not_an_op_scope():
    """graph_mode's words name the Cell the script calls: the head of the forward ops' scopes that is a Cell
    (`network-WithLossCell`), never the optimizer's (most op names of the real ResNet-50 run: Adam, one op per
    parameter) nor an op's own scope (`Expand`, `_SoftmaxBackward`)."""
    from perfkit.advisor.rules.mode import top_cell
    run = perfkit.load(REPO / "sample_runs" / "cpu_avx2")
    heads = run.ops["name"].str.split("/").str[1]
    assert heads.value_counts().index[0] == "optimizer-Adam"
    assert top_cell(run) == "network-WithLossCell"

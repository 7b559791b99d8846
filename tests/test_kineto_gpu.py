"""The GPU side of a kineto (torch.profiler) trace, checked against sums taken from the raw traces with the json
module: real GPU traces from HolisticTraceAnalysis's test data (SOURCE.txt in each folder): a ResNet-50 on a V100
(one stream) and a recommendation model on five streams in tests/runs, a toy loop on an AMD MI250 (ROCm) in
tests/raw."""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

import perfkit
from perfkit.apps.cli import main
from perfkit.core.opnames import comm_kind
from perfkit.io.formats import kineto

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "tests" / "runs"
V100 = RUNS / "torch_gpu_v100_resnet"
STREAMS = RUNS / "torch_gpu_multistream"
ROCM = ROOT / "tests" / "raw" / "torch_rocm_mi250"
MINDSPORE_CPU = ROOT / "sample_runs" / "cpu_avx2"
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


pytestmark = pytest.mark.usefixtures("uncached")


def raw(run: Path) -> dict:
    with gzip.open(next(run.glob("*.pt.trace.json.gz")), "rt") as handle:
        return json.load(handle)


def host_steps(events: list[dict]) -> dict[int, tuple[float, float]]:
    return {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
            if e.get("ph") == "X" and e.get("cat") == "user_annotation"
            and re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))}


def by_launch(events: list[dict]) -> dict[int, list[dict]]:
    """step -> the device events whose launch (the cuda_runtime call of the same args.correlation) starts inside the
    step's host span."""
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    steps = host_steps(events)
    placed: dict[int, list[dict]] = defaultdict(list)
    for event in events:
        if event.get("cat") in DEVICE and event.get("ph") == "X":
            launch = launches[event["args"]["correlation"]]
            step = next(n for n, (start, end) in steps.items() if start <= launch["ts"] < end)
            placed[step].append(event)
    return placed


def union(intervals) -> float:
    """Covered length by a sweep over the interval ends (+1 at a start, -1 at an end)."""
    intervals = list(intervals)
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                   key=lambda edge: (edge[0], -edge[1]))
    depth, opened, covered = 0, None, 0.0
    for at, change in edges:
        if depth == 0 and change == 1:
            opened = at
        depth += change
        if depth == 0:
            covered += at - opened
    return covered


def family_device_us(events: list[dict], family: str) -> tuple[float, int]:
    """(summed duration of the device events launched inside a `family` cpu_op on the launch's thread, within a
    profiled step; the number of such cpu_ops in the steps)."""
    steps = host_steps(events)
    in_steps = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == family
                and any(start <= e["ts"] < end for start, end in steps.values())]
    device = {e["args"]["correlation"]: e for e in events if e.get("cat") in DEVICE and e.get("ph") == "X"}
    total = 0.0
    for launch in (e for e in events if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in device):
        if any(op["tid"] == launch["tid"] and op["ts"] <= launch["ts"] <= op["ts"] + op["dur"] for op in in_steps):
            total += device[launch["args"]["correlation"]]["dur"]
    return total, len(in_steps)


@pytest.fixture(scope="module")
def v100():
    return perfkit.load(V100)


def test_a_cuda_trace_is_a_gpu_run_of_its_device(v100):
    assert v100.meta.framework == "torch" and v100.meta.device == "GPU"
    assert v100.meta.chip == raw(V100)["deviceProperties"][0]["name"] == "Tesla V100-SXM2-32GB"
    assert not any("not read yet" in warning for warning in v100.warnings)


def test_a_step_holds_the_device_time_its_host_span_launched(v100):
    events = raw(V100)["traceEvents"]
    placed = by_launch(events)
    assert sorted(placed) == sorted(v100.steps["step"]) == [101, 102, 103, 104, 105]
    activity = kineto.device_activity(raw(V100))
    for row in v100.steps.itertuples():
        mine = placed[row.step]
        assert row.busy_ms == pytest.approx(union((e["ts"], e["ts"] + e["dur"]) for e in mine) / 1000, rel=1e-9)
        assert (activity["step"] == row.step).sum() == len(mine)
        assert activity.loc[activity["step"] == row.step, "dur_us"].sum() == pytest.approx(
            sum(e["dur"] for e in mine), rel=1e-9)
    # kernels run after their launch: step 101's host span is 35 ms, the device work it launched ~94 ms
    first = v100.steps.set_index("step").loc[101]
    assert first["busy_ms"] > 2 * first["total_ms"]
    # placed by their own start instead, step 101 would hold less than half of the kernels its span launched
    start, end = host_steps(events)[101]
    by_start = [e for e in events if e.get("cat") in DEVICE and e.get("ph") == "X" and start <= e["ts"] < end]
    assert len(by_start) < len(placed[101]) / 2


def test_free_time_is_the_host_span_no_device_event_covers(v100):
    events = raw(V100)["traceEvents"]
    device = [e for e in events if e.get("cat") in DEVICE and e.get("ph") == "X"]
    for step, (start, end) in host_steps(events).items():
        clipped = [(max(e["ts"], start), min(e["ts"] + e["dur"], end)) for e in device
                   if e["ts"] < end and e["ts"] + e["dur"] > start]
        free = (end - start - union(clipped)) / 1000
        # µs since the epoch as JSON floats: 0.25 µs apart at this magnitude
        assert v100.steps.set_index("step").loc[step, "free_ms"] == pytest.approx(free, abs=1e-3)


def test_communication_is_the_nccl_kernels_none_where_none_ran(v100):
    """DDP on one GPU calls c10d::allreduce_ (host time) but launches no NCCL kernel: no device communication."""
    events = raw(V100)["traceEvents"]
    assert not any(e.get("cat") == "kernel" and e["name"].lower().startswith("nccl") for e in events)
    assert "c10d::allreduce_" in set(v100.op_types["type"])
    assert (v100.steps["comm_ms"] == 0).all() and (v100.steps["comm_exposed_ms"] == 0).all()
    summary = perfkit.summarize(v100)
    assert summary["bound"]["parts_ms"]["communication"] == 0


@pytest.mark.parametrize("family", ["aten::convolution_backward", "aten::conv2d", "aten::cudnn_batch_norm_backward"])
def test_a_family_time_is_the_device_time_of_the_kernels_it_launched(v100, family):
    device_us, calls = family_device_us(raw(V100)["traceEvents"], family)
    row = v100.op_types.set_index("type").loc[family]
    assert calls == 5 * 53 == row["count"]  # ResNet-50's 53 convolutions / batch norms, 5 steps
    assert row["total_ms"] == pytest.approx(device_us / 1000, rel=1e-9)


def test_the_device_time_of_the_families_is_every_linked_kernel_once(v100):
    activity = kineto.device_activity(raw(V100))
    events = raw(V100)["traceEvents"]
    device = [e for e in events if e.get("cat") in DEVICE and e.get("ph") == "X"]
    assert len(activity) == len(device) == 6095 and activity["launch"].notna().all()
    per_family = activity.groupby("family")["dur_us"].sum()
    kernel_families = v100.op_types.set_index("type").loc[per_family.index, "total_ms"]
    assert kernel_families.to_numpy() == pytest.approx(per_family.to_numpy() / 1000, rel=1e-9)
    assert per_family.sum() == pytest.approx(sum(e["dur"] for e in device), rel=1e-9)


def test_a_family_that_launched_nothing_keeps_its_host_self_time(v100):
    """aten::detach launches no kernel: its time is its host duration (with the ops nested in it), each call that no
    other aten:: op encloses."""
    events = raw(V100)["traceEvents"]
    steps = host_steps(events)
    aten = [e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")]
    detaches = [e for e in aten if e["name"] == "aten::detach" and any(s <= e["ts"] < t for s, t in steps.values())
                and not any(o is not e and o["tid"] == e["tid"] and o["ts"] <= e["ts"]
                            and e["ts"] + e["dur"] <= o["ts"] + o["dur"] for o in aten)]
    assert "aten::detach" not in set(kineto.device_activity(raw(V100))["family"])
    row = v100.op_types.set_index("type").loc["aten::detach"]
    assert row["count"] == len(detaches) == 5 * 161  # once per parameter a step
    assert row["total_ms"] == pytest.approx(sum(e["dur"] for e in detaches) / 1000, rel=1e-9)


def test_overlapping_kernels_on_several_streams_count_once_as_busy_time():
    run = perfkit.load(STREAMS)
    events = raw(STREAMS)["traceEvents"]
    placed = by_launch(events)
    assert len({e["tid"] for e in events if e.get("cat") in DEVICE}) == 5
    for row in run.steps.itertuples():
        mine = placed[row.step]
        compute = [(e["ts"], e["ts"] + e["dur"]) for e in mine if not e["name"].startswith("nccl")]
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in mine if e["name"].startswith("nccl")]
        assert row.busy_ms == pytest.approx(union(compute) / 1000, rel=1e-9)
        assert row.comm_ms == pytest.approx(union(comm) / 1000, rel=1e-9)
        assert row.comm_exposed_ms == pytest.approx((union(compute + comm) - union(compute)) / 1000, rel=1e-9)
        # NCCL's kernels run beside compute kernels on other streams: summed, the step's device events pass the
        # time they cover by more than 5 %; exposed communication is what compute does not overlap
        assert sum(end - start for start, end in compute + comm) > union(compute + comm) * 1.05
        assert row.busy_ms + row.comm_exposed_ms == pytest.approx(union(compute + comm) / 1000, rel=1e-9)
        assert row.comm_exposed_ms < row.comm_ms


def test_the_launch_flows_link_a_trace_without_correlation_args(tmp_path):
    """The ROCm trace with args.correlation removed from every event reads the same through its ac2g flows."""
    data = raw(ROCM)
    for event in data["traceEvents"]:
        if isinstance(event.get("args"), dict):
            event["args"].pop("correlation", None)
    assert sum(e.get("cat") == "ac2g" for e in data["traceEvents"]) > 0
    (tmp_path / "rocm.pt.trace.json").write_text(json.dumps(data))
    stripped, original = perfkit.load(tmp_path), perfkit.load(ROCM)
    assert original.meta.device == "GPU" and original.meta.chip == "AMD Radeon Graphics"
    merged = original.op_types.merge(stripped.op_types, on="type", suffixes=("", "_flows"))
    assert len(merged) == len(original.op_types)
    assert merged["total_ms"].to_numpy() == pytest.approx(merged["total_ms_flows"].to_numpy())
    assert stripped.steps["busy_ms"].to_numpy() == pytest.approx(original.steps["busy_ms"].to_numpy())
    linked = kineto.device_activity(data)["launch"]
    assert linked.notna().all() and set(linked) >= {"hipLaunchKernel", "hipMemcpyWithStream"}


def test_device_events_without_a_launch_are_placed_by_their_start_and_said(tmp_path):
    """The ROCm trace without its runtime calls and launch flows: each device event goes to the step its own start
    falls in, in no family's time, and a warning counts them."""
    data = raw(ROCM)
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") not in ("cuda_runtime", "ac2g")]
    (tmp_path / "rocm.pt.trace.json").write_text(json.dumps(data))
    run = perfkit.load(tmp_path)
    device = [e for e in data["traceEvents"] if e.get("cat") in DEVICE]
    assert any(f"{len(device)} of {len(device)} device events have no host launch" in w for w in run.warnings)
    for step, (start, end) in host_steps(data["traceEvents"]).items():
        mine = [(e["ts"], e["ts"] + e["dur"]) for e in device if start <= e["ts"] < end]
        assert run.steps.set_index("step").loc[step, "busy_ms"] == pytest.approx(union(mine) / 1000, rel=1e-9)
    assert kineto.device_activity(data)["family"].isna().all()


def test_shape_broadcasting_is_no_communication():
    """The ROCm loop's MSE loss broadcasts its operands (aten::broadcast_tensors): no collective in a one-GPU run."""
    run = perfkit.load(ROCM)
    assert "aten::broadcast_tensors" in set(run.op_types["type"])
    assert [kind for kind in map(comm_kind, run.op_types["type"]) if kind] == []
    assert comm_kind("c10d::broadcast_") == comm_kind("nccl:broadcast") == "collective"


def test_the_device_side_step_span_holds_kernels_its_host_step_launched():
    data = raw(ROCM)
    span = next(e for e in data["traceEvents"] if e.get("cat") == "gpu_user_annotation"
                and e["name"] == "ProfilerStep#1")
    activity = kineto.device_activity(data)
    within = activity[(activity["ts_us"] >= span["ts"]) & (activity["ts_us"] < span["ts"] + span["dur"])]
    assert len(within) and set(within["step"]) == {1}
    placed = by_launch(data["traceEvents"])
    assert (activity["step"] == 1).sum() == len(placed[1])


def test_a_gpu_reference_against_a_mindspore_cpu_port_refuses_the_verdict_naming_the_device(v100):
    result = perfkit.compare(v100, perfkit.load(MINDSPORE_CPU))
    assert result["kind"] == "cross_framework" and result["verdict"]["kind"] == "refused"
    device = next(row for row in result["differing"] if row["setting"] == "device")
    assert (device["reference"], device["port"]) == ("GPU", "CPU")
    assert "device GPU (reference) vs CPU (port)" in result["verdict"]["why"]
    assert result["settings"]["reference"]["op_time"] == "device kernels (else host self time)"


@pytest.mark.parametrize("command", ["summary", "advise", "report"])
def test_the_views_work_on_a_gpu_trace(command, tmp_path):
    args = [command, str(V100)] + (["-o", str(tmp_path / "r.html")] if command == "report" else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    if command == "report":
        assert "aten::convolution_backward" in (tmp_path / "r.html").read_text()
        return
    assert re.search(r"device +GPU", result.output)
    if command == "summary":
        assert "free (device idle)" in result.output and "aten::convolution_backward" in result.output


def test_the_timeline_cuts_a_step_with_its_kernels(tmp_path):
    out = tmp_path / "step103.json"
    result = CliRunner().invoke(main, ["trace", str(V100), "--step", "103", "-o", str(out)])
    assert result.exit_code == 0, result.output
    cut = json.loads(out.read_text())
    start, end = host_steps(raw(V100)["traceEvents"])[103]
    kernels = [e for e in raw(V100)["traceEvents"] if e.get("cat") == "kernel"
               and e["ts"] < end and e["ts"] + e["dur"] > start]  # the window's events, wherever launched
    assert sum(e.get("cat") == "kernel" for e in cut) == len(kernels) > 0


def test_every_dashboard_page_of_a_gpu_run_renders(v100):
    from perfkit.dashboards import ids, layout
    for path in ids.PAGES:
        if path != "/compare":
            assert layout.run_page(path, v100, 0, "") is not None


def test_a_compute_bound_step_without_ops_names_no_empty_list():
    """The ROCm toy's steady step holds no op (its one kernel-less step is the one the means cover): compute_bound
    cannot name op types and says so, never "computes):  of op time"."""
    from perfkit.advisor import advise
    from perfkit.analysis.measures import op_type_shares
    run = perfkit.load(ROCM)
    assert not len(op_type_shares(run))
    advice = advise(run)
    assert "compute_bound" not in advice.ids() and "no op type" in advice.not_checked["compute_bound"]

"""The GPU side of a kineto (torch.profiler) trace, checked against sums taken from the raw traces with the json
module: real GPU traces from HolisticTraceAnalysis's test data (SOURCE.txt in each folder): a ResNet-50 on a V100
(one stream) and a recommendation model on five streams in tests/runs, a toy loop on an AMD MI250 (ROCm) in
tests/raw."""

from __future__ import annotations

import bisect
import gzip
import json
import math
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
AUTOGRAD = r"autograd::engine::evaluate_function: .*|\w+Backward\d+"  # the autograd engine's ops: backward


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


def windows(events: list[dict], placed: dict[int, list[dict]]) -> dict[int, tuple[float, float]]:
    """step -> its window: from the end of the step before it (the first: its host span's start) to the later of
    its host span's end and the end of the device events it launched."""
    found, reach = {}, None
    for step, (start, end) in sorted(host_steps(events).items(), key=lambda item: item[1][0]):
        begin = start if reach is None else reach
        reach = max([end, begin] + [e["ts"] + e["dur"] for e in placed.get(step, [])])
        found[step] = (begin, reach)
    return found


def launched_in_ops(events: list[dict], name: str = r".*") -> set:
    """The correlations of the launches a cpu_op (whose name matches `name`) on the launch's thread holds (the
    others' device events are in no family): each thread's cpu_ops merged into the stretches they cover, a launch
    looked up among them."""
    covered: dict[object, list[list[float]]] = defaultdict(list)
    ops = [e for e in events if e.get("cat") == "cpu_op" and re.fullmatch(name, e["name"])]
    for op in sorted(ops, key=lambda e: e["ts"]):
        stretches = covered[op["tid"]]
        if stretches and op["ts"] <= stretches[-1][1]:
            stretches[-1][1] = max(stretches[-1][1], op["ts"] + op["dur"])
        else:
            stretches.append([op["ts"], op["ts"] + op["dur"]])
    starts = {tid: [start for start, _ in stretches] for tid, stretches in covered.items()}
    inside = set()
    for launch in (e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")):
        stretches = covered[launch["tid"]]
        at = bisect.bisect_right(starts.get(launch["tid"], []), launch["ts"]) - 1
        if at >= 0 and launch["ts"] <= stretches[at][1]:
            inside.add(launch["args"].get("correlation"))
    return inside


def clipped(device: list[dict], begin: float, end: float) -> list[tuple[float, float]]:
    return [(max(e["ts"], begin), min(e["ts"] + e["dur"], end)) for e in device
            if e["ts"] < end and e["ts"] + e["dur"] > begin]


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
    start, end = host_steps(events)[101]
    assert union((e["ts"], e["ts"] + e["dur"]) for e in placed[101]) > 2 * (end - start)
    # placed by their own start instead, step 101 would hold less than half of the kernels its span launched
    by_start = [e for e in events if e.get("cat") in DEVICE and e.get("ph") == "X" and start <= e["ts"] < end]
    assert len(by_start) < len(placed[101]) / 2


@pytest.mark.parametrize("run", [V100, STREAMS, ROCM], ids=["v100", "multistream", "rocm"])
def test_a_gpu_step_is_its_window_every_us_once_its_kernels_inside(run):
    """The step: from the end of the step before it to the later of its host span's end and its kernels' end.
    The windows tile the trace from the first step's start to the last host span's or device event's end, every
    device event lies in the window of the step that launched it, and busy + exposed communication + free = the
    window."""
    events = raw(run)["traceEvents"]
    placed = by_launch(events)
    found = windows(events, placed)
    loaded = perfkit.load(run)
    steps = loaded.steps.set_index("step")
    device = [e for e in events if e.get("cat") in DEVICE and e.get("ph") == "X"]
    ordered = sorted(found.values())
    in_ops = launched_in_ops(events)
    backward = launched_in_ops(events, AUTOGRAD)
    wrappers = [e for e in events if e.get("cat") == "cpu_op" and re.fullmatch(AUTOGRAD, e["name"])]
    host = host_steps(events)
    assert all(before[1] == after[0] for before, after in zip(ordered, ordered[1:]))
    assert ordered[-1][1] == max([e["ts"] + e["dur"] for e in device] + [end for _, end in host.values()])
    assert steps["total_ms"].sum() == pytest.approx((ordered[-1][1] - ordered[0][0]) / 1000, rel=1e-9)
    for step, (begin, end) in found.items():
        assert all(begin <= e["ts"] and e["ts"] + e["dur"] <= end for e in placed.get(step, []))
        row = steps.loc[step]
        compute = clipped([e for e in device if not e["name"].startswith("nccl")], begin, end)
        # µs since the epoch as JSON floats: 0.25 µs apart at this magnitude
        assert row["total_ms"] == pytest.approx((end - begin) / 1000, abs=1e-6)
        assert row["busy_ms"] == pytest.approx(union(compute) / 1000, abs=1e-6)
        assert row["free_ms"] == pytest.approx((end - begin - union(clipped(device, begin, end))) / 1000, abs=1e-6)
        assert row["busy_ms"] + row["comm_exposed_ms"] + row["free_ms"] == pytest.approx(row["total_ms"], abs=1e-6)
        # the step's families hold the device time its ops launched, all of it inside its window
        families = loaded.op_type_steps.loc[loaded.op_type_steps["step"] == step, "total_ms"].sum()
        by_ops = [e for e in placed.get(step, []) if e["args"]["correlation"] in in_ops]
        assert families == pytest.approx(sum(e["dur"] for e in by_ops) / 1000, rel=1e-9)
        # the tail: the device's work after the step's last backward work (the autograd engine's ops and their
        # kernels), the GPU idle there left out (free time); comm_tail: the NCCL kernels' union in it
        backward_ends = ([e["ts"] + e["dur"] for e in placed.get(step, []) if e["args"]["correlation"] in backward]
                         + [e["ts"] + e["dur"] for e in wrappers if host[step][0] <= e["ts"] < host[step][1]])
        if not backward_ends:  # the MI250 loop's second step runs no backward
            assert math.isnan(row["tail_ms"]) and math.isnan(row["comm_tail_ms"])
            continue
        backward_end = max(backward_ends)
        assert row["tail_ms"] == pytest.approx(union(clipped(device, backward_end, end)) / 1000, abs=1e-6)
        nccl = clipped([e for e in device if e["name"].startswith("nccl")], backward_end, end)
        assert row["comm_tail_ms"] == pytest.approx(union(nccl) / 1000, abs=1e-6)
        assert row["interval_ms"] + row["fwd_bwd_ms"] + row["tail_ms"] == pytest.approx(row["total_ms"], abs=1e-6)


def test_the_device_side_step_annotation_misses_kernels_its_step_launched():
    """Why the device-side `ProfilerStep#N` (gpu_user_annotation) is not the step: on the MI250 trace it ends
    before the backward and optimizer kernels its host step launched (16 device events, 8 inside it)."""
    events = raw(ROCM)["traceEvents"]
    annotation = next(e for e in events if e.get("cat") == "gpu_user_annotation" and e["name"] == "ProfilerStep#1")
    launched = by_launch(events)[1]
    inside = [e for e in launched if e["ts"] + e["dur"] <= annotation["ts"] + annotation["dur"]]
    assert (len(inside), len(launched)) == (8, 16)
    begin, end = windows(events, by_launch(events))[1]
    assert perfkit.load(ROCM).steps.set_index("step").loc[1, "total_ms"] == pytest.approx((end - begin) / 1000)
    assert end >= max(e["ts"] + e["dur"] for e in launched) > annotation["ts"] + annotation["dur"]


def test_a_gpu_step_data_wait_is_the_dataloader_time_the_gpu_sat_idle_through(tmp_path):
    """The MI250 trace with a DataLoader `__next__` span put on its main thread, over 1.9-5.0 ms of step 1: two
    kernels run in it, the GPU idles the rest; the step's interval is that idle part, and busy + free still make
    up the step."""
    data = raw(ROCM)
    events = data["traceEvents"]
    start = host_steps(events)[1][0]
    main_thread = next(e for e in events if e.get("name") == "ProfilerStep#1" and e.get("cat") == "user_annotation")
    span = {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            "pid": main_thread["pid"], "tid": main_thread["tid"], "ts": start + 1900.0, "dur": 3100.0}
    (tmp_path / "rocm.pt.trace.json").write_text(json.dumps({**data, "traceEvents": events + [span]}))
    run = perfkit.load(tmp_path)
    begin, end = windows(events, by_launch(events))[1]
    device = clipped([e for e in events if e.get("cat") in DEVICE], begin, end)
    kernels_in_span = union(clipped([e for e in events if e.get("cat") in DEVICE], span["ts"], span["ts"] + 3100.0))
    assert kernels_in_span > 0
    row = run.steps.set_index("step").loc[1]
    assert row["interval_ms"] == pytest.approx((3100.0 - kernels_in_span) / 1000, rel=1e-9)
    assert row["interval_ms"] == pytest.approx((union(device + [(span["ts"], span["ts"] + 3100.0)])
                                                - union(device)) / 1000, rel=1e-9)
    assert row["busy_ms"] + row["free_ms"] == pytest.approx((end - begin) / 1000, rel=1e-9)


def test_no_share_of_a_gpu_step_passes_100_percent(v100):
    """The V100 trace's first step: a 35 ms host span that launched 94.6 ms of kernels. Over its window its share
    and every other step's stay within 0-100 %: the Cells, the op types of each step, and the ledger adds up to each
    window."""
    events = raw(V100)["traceEvents"]
    found = windows(events, by_launch(events))
    host = host_steps(events)[101]
    assert found[101][1] - found[101][0] > 94.5e3 > 2 * (host[1] - host[0])
    cells = perfkit.cells(v100)
    assert len(cells) and cells["share"].between(0, 1).all()
    per_step = v100.op_type_steps.groupby("step")["total_ms"].sum()
    ledger = perfkit.ledger(v100).groupby("step")["ms"].sum()
    for step, (begin, end) in found.items():
        assert 0 < per_step.loc[step] <= (end - begin) / 1000
        assert ledger.loc[step] == pytest.approx((end - begin) / 1000, rel=1e-9)
    result = CliRunner().invoke(main, ["summary", str(V100)])
    shares = [float(share) for share in re.findall(r"([\d.]+) %", result.output)]
    assert result.exit_code == 0 and shares and max(shares) <= 100


def test_every_view_cuts_a_gpu_step_at_its_window(v100, tmp_path):
    """summary, compare against a MindSpore run, `perfkit trace --step N` and the dashboard's Timeline
    (perfkit.timeline): the same step bounds, the windows of the raw JSON."""
    events = raw(V100)["traceEvents"]
    placed = by_launch(events)
    found = windows(events, placed)
    lengths = [(end - begin) / 1000 for begin, end in found.values()]
    assert perfkit.summarize(v100)["steps"]["total_ms"] == pytest.approx(sum(lengths) / len(lengths), rel=1e-9)
    reference = perfkit.compare(v100, perfkit.load(MINDSPORE_CPU))["reference_run"]
    assert "GPU idle" in reference["data_wait_is"]
    spread = reference["spread"]
    assert (spread["min_ms"], spread["max_ms"]) == pytest.approx((min(lengths), max(lengths)), rel=1e-9)
    for step in (101, 103):
        assert perfkit.timeline(v100, step=step).attrs["window_us"][0] == pytest.approx(found[step], abs=1e-3)
    out = tmp_path / "step101.json"
    result = CliRunner().invoke(main, ["trace", str(V100), "--step", "101", "-o", str(out)])
    assert result.exit_code == 0, result.output
    begin, end = found[101]
    kernels = [e for e in events if e.get("cat") == "kernel" and e["ts"] < end and e["ts"] + e["dur"] > begin]
    assert sum(e.get("cat") == "kernel" for e in json.loads(out.read_text())) == len(kernels)
    assert len(kernels) == sum(e.get("cat") == "kernel" for e in placed[101]) > 0


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


def test_a_family_that_launched_nothing_has_no_device_time(v100):
    """aten::detach launches no kernel: its calls are counted, its time is 0, as every kernel-less family's (its
    host time overlaps the device's work; where the device waits for the host, the step's free time says it)."""
    events = raw(V100)["traceEvents"]
    steps = host_steps(events)
    aten = [e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")]
    detaches = [e for e in aten if e["name"] == "aten::detach" and any(s <= e["ts"] < t for s, t in steps.values())
                and not any(o is not e and o["tid"] == e["tid"] and o["ts"] <= e["ts"]
                            and e["ts"] + e["dur"] <= o["ts"] + o["dur"] for o in aten)]
    launching = set(kineto.device_activity(raw(V100))["family"].dropna())
    assert "aten::detach" not in launching and sum(e["dur"] for e in detaches) > 0
    row = v100.op_types.set_index("type").loc["aten::detach"]
    assert row["count"] == len(detaches) == 5 * 161  # once per parameter a step
    assert row["total_ms"] == 0
    kernel_less = v100.op_types[~v100.op_types["type"].isin(launching)]
    assert len(kernel_less) > 1 and (kernel_less["total_ms"] == 0).all()


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
    placed = {step: [e for e in device if start <= e["ts"] < end]
              for step, (start, end) in host_steps(data["traceEvents"]).items()}
    for step, (begin, end) in windows(data["traceEvents"], placed).items():
        row = run.steps.set_index("step").loc[step]
        assert row["total_ms"] == pytest.approx((end - begin) / 1000, rel=1e-9)
        assert row["busy_ms"] == pytest.approx(union(clipped(device, begin, end)) / 1000, rel=1e-9)
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
    assert result["settings"]["reference"]["op_time"] == "device kernels (none: 0)"


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

"""The Timeline page's view of a window: nested events' depth (sub-rows of their lane) and a finding's link to
its ops, on the real trace fixtures, checked against json.load of the traces and csv reads of their tables."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS
from test_timeline import TRACES

import perfkit
from perfkit.io import timeline as tl
from perfkit.views import numbers
from perfkit.views.figures import timeline

LEVEL1_RANK0 = TRACES["new_level1"][0]
CPU_TRACE = TRACES["cpu_2_10"][0]
LEGACY_TRACE = TRACES["legacy_run_2"][1]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)


def complete(path: Path) -> list[dict]:
    return [e for e in json.load(open(path)) if e.get("ph") == "X" and "ts" in e and e.get("dur") is not None]


def brute_force_depths(spans) -> list[tuple[float, float, int]]:
    """(start, end, depth) per (start, end) span: depth = how many spans before it (by start, longest first)
    contain it, pair by pair."""
    spans = sorted(spans, key=lambda span: (span[0], -span[1]))
    return sorted((start, end, sum(1 for s, e in spans[:i] if e >= end and e > start))
                  for i, (start, end) in enumerate(spans))


@pytest.mark.parametrize("trace, pid, tid, deepest", [
    (LEVEL1_RANK0, 3096504, 3096504, 29),   # PyTorch's Python lane: call stacks, plus frames that overlap partly
    (LEVEL1_RANK0, 3170820512, 4, 6),       # an Ascend stream whose Write Value tasks overlap by 0.3 µs
    (CPU_TRACE, 2, 0, 0),                   # MindSpore CPU ops: one after another (scopes have one lane per depth)
])
def test_nesting_depth_equals_a_pair_by_pair_count_on_a_real_lane(trace, pid, tid, deepest):
    # times as float µs, as the index holds them (float64 epoch µs: 0.25 µs apart at most)
    expected = brute_force_depths([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in complete(trace)
                                   if (e["pid"], e["tid"]) == (pid, tid)])
    events = timeline.complete_events(tl.timeline(trace.parents[1] if trace.name == "trace_view.json"
                                                 else trace.parent))
    lane = events[(events["pid"].astype(str) == str(pid)) & (events["tid"].astype(str) == str(tid))]
    got = sorted(zip(lane["start_us"], lane["start_us"] + lane["dur_us"], lane["depth"]))
    assert got == expected
    assert max(depth for *_, depth in expected) == deepest


def test_merged_bars_stay_in_their_sub_row_and_the_figure_has_one_row_per_depth():
    events = tl.timeline(LEVEL1_RANK0.parents[1])
    exact = timeline.complete_events(events)
    bars, merged = timeline.timeline_bars(exact, max_bars=500)
    assert merged > 0
    rows = ["rank", "lane_order", "depth"]
    assert bars.groupby(rows)["count"].sum().to_dict() == exact.groupby(rows).size().to_dict()
    rows_drawn = list(timeline.timeline_figure(events, max_bars=500).layout.yaxis.categoryarray)
    python = "rank 0 · Python · Thread 3096504"
    depths = sorted(exact.loc[(exact["process"] == "Python") & (exact["lane"] == "Thread 3096504"), "depth"].unique())
    assert len(depths) > 20 and depths[0] == 0  # depths a partly overlapping frame skips have no row
    assert [row for row in rows_drawn if row.startswith(python)][::-1] == \
        [python] + [f"{python} · {depth}" for depth in depths[1:]]


def matched(target: numbers.OpTarget, events) -> set[tuple[str, float]]:
    found = events[target.matches(events)]
    return set(zip(found["name"].astype(str), found["start_us"]))


def occurrences(events: list[dict], keep) -> set[tuple[str, float]]:
    return {(e["name"], float(e["ts"])) for e in events if keep(e)}


def test_cpu_finding_links_to_every_op_of_its_type_in_the_trace():
    """MindSpore CPU traces name ops by full scope name, `.../<Type>-op<N>`, and say only `HostCpuOps` as type."""
    run = perfkit.load(FIXTURE_RUNS["cpu_2_10"])
    links = numbers.timeline_links(run)
    assert [item.rule for item in numbers.findings(run).items] == ["compute_bound", "data_pipeline_ok"]
    assert links[1] is None  # no op target
    link = links[0]
    assert link.query == {"op": "Conv2DBackpropFilter", "step": "2"}  # step 1 compiles: the first steady is 2
    assert link.text == "Conv2DBackpropFilter on the timeline, step 2"
    expected = occurrences(complete(CPU_TRACE), lambda e: re.fullmatch(r".*/Conv2DBackpropFilter-op\d+", e["name"]))
    target = numbers.op_target(run, link.query["op"])
    assert matched(target, tl.timeline(run.path)) == expected and len(expected) == 4 * 53  # 53 ops x 4 steps
    in_step = tl.timeline(run.path, step=int(link.query["step"]))
    assert matched(target, in_step) == {(name, ts) for name, ts in expected
                                        if in_step["start_us"].min() <= ts <= in_step["start_us"].max()}
    # kernel_efficiency's target, a kernel group: ResNet-50's one 7x7 conv is its stem
    stem = occurrences(complete(CPU_TRACE), lambda e: e["name"].endswith("_backbone-ResNet50/conv1-Conv2d/Conv2D-op0"))
    assert matched(numbers.op_target(run, "Conv2D 7x7"), tl.timeline(run.path)) == stem and len(stem) == 4


def test_legacy_finding_links_to_the_ops_its_timeline_types_so():
    """Legacy Ascend timelines name an op by its last scope segment and give its type in args.type."""
    run = perfkit.load(FIXTURE_RUNS["legacy_run_2"])
    link = numbers.timeline_links(run)[0]
    assert link.query["op"] == "MatMul"
    events = tl.timeline(run.path)
    raw = complete(LEGACY_TRACE)
    for target, types in (("MatMul", {"MatMul"}), ("Conv2D/MatMul", {"Conv2D", "MatMul"})):
        expected = occurrences(raw, lambda e: e.get("args", {}).get("type") in types)
        assert matched(numbers.op_target(run, target), events) == expected and expected
    # an op instance, as the Operators page names it (full scope name): its one event
    fullname = next(e["args"]["fullname"] for e in raw if e.get("args", {}).get("type") == "MatMul")
    expected = occurrences(raw, lambda e: e.get("args", {}).get("fullname") == fullname)
    assert matched(numbers.op_target(run, fullname), events) == expected and len(expected) == 1


def kernel_names(op_type: str) -> set[str]:
    names = set()
    for rank in (0, 1):
        table = FIXTURE_RUNS["new_level1"] / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
        # HCCL writes `hcom_allReduce_`: the type is read without the separator (core.opnames.trim_type_separator)
        names |= {row["Name"] for row in csv.DictReader(open(table)) if row["Type"].rstrip("_") == op_type}
    return names


@pytest.mark.parametrize("target", ["MatMulV2", "Conv2D", "hcom_allReduce", "hcom_allReduce__586_0_1"])
def test_new_layout_targets_match_kernel_names_and_python_ops(target):
    """New layout: device tasks carry the kernel name (kernel_details.csv's Name), PyTorch's Python lane the
    op type itself (`Conv2D`); args' Task Type (AI_CORE, ...) is no op type."""
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    wanted = kernel_names(target) | {target}
    expected = occurrences(complete(LEVEL1_RANK0), lambda e: e["name"] in wanted)
    assert matched(numbers.op_target(run, target), tl.timeline(run.path, ranks=[0])) == expected
    assert expected


def test_findings_without_an_op_target_get_no_link():
    for key in ("new_level1", "new_2023"):  # ranks, links, no target
        run = perfkit.load(FIXTURE_RUNS[key])
        assert [item.target for item in numbers.findings(run).items]
        assert numbers.timeline_links(run) == [None] * len(numbers.findings(run).items)
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    assert not numbers.op_target(run, "rank 0").known and not numbers.op_target(run, "1->7 HCCS").known

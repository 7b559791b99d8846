"""perfkit.advisor: each rule fires on a run built to need it and stays silent on one that does not.

Runs are built directly from the data model, so every expected number is computed here from the inputs.
The seed's three-step story runs on tiny legacy-format folders under tests/runs/ through the real readers.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

from perfkit.advisor import advise, rules
from perfkit.advisor.finding import severity_for
from perfkit.apps.cli import main
from perfkit.core.model import Meta, Run, table
from perfkit.io.loader import load
from perfkit.render.advice import advice_markdown, advice_text


def make_run(device="Ascend", data_mode="feed", amp_level=None, compute_dtype="float32", steps=None,
             op_types=None, ops=None, host_queue=None, device_queue=None, pipeline=None, cpu_util=None,
             path="crafted"):
    """A Run from plain rows; each table given as a list of dicts (rank 0 unless a row says otherwise)."""
    def frame(name, rows):
        rows = [{"rank": 0, **row} for row in rows]
        return table(name, pd.DataFrame(rows))
    tables = {name: frame(name, rows) for name, rows in (
        ("steps", steps), ("op_types", op_types), ("ops", ops), ("host_queue", host_queue),
        ("device_queue", device_queue), ("pipeline", pipeline), ("cpu_util", cpu_util)) if rows}
    ranks = sorted({int(r) for t in tables.values() for r in t["rank"]}) or [0]
    meta = Meta(device=device, data_mode=data_mode, amp_level=amp_level, compute_dtype=compute_dtype, ranks=ranks)
    return Run(path=path, meta=meta, **tables)


def step_rows(interval, fwd_bwd, tail, count=3, rank=0, **extra):
    return [{"rank": rank, "step": s, "interval_ms": interval, "fwd_bwd_ms": fwd_bwd, "tail_ms": tail,
             "total_ms": interval + fwd_bwd + tail, **extra} for s in range(1, count + 1)]


def type_rows(**total_ms):
    return [{"type": t, "total_ms": ms, "count": 1, "share": ms / sum(total_ms.values())}
            for t, ms in total_ms.items()]


def queue_rows(sizes, capacity=64):
    return [{"batch": i, "size": s, "capacity": capacity} for i, s in enumerate(sizes)]


def only(advice, rule_id):
    found = [f for f in advice.findings if f.id == rule_id]
    assert len(found) == 1, [f.id for f in advice.findings]
    return found[0]


def ids(run):
    return advise(run).ids()


# --- sink_mode -------------------------------------------------------------------------------------------

def test_sink_mode_fires_in_feed_mode_when_interval_is_large():
    run = make_run(steps=step_rows(interval=10.0, fwd_bwd=10.0, tail=1.0))
    finding = only(advise(run), "sink_mode")
    share = 100 * 10.0 / 21.0
    assert finding.evidence["interval_share_pct"] == pytest.approx(share, abs=0.01)
    assert finding.evidence["interval_ms"] == 10.0 and finding.evidence["step_ms"] == 21.0
    assert finding.est_gain_pct == pytest.approx(share, abs=0.01)
    assert finding.severity == "high"
    assert finding.action == "model.train(..., dataset_sink_mode=True)"


@pytest.mark.parametrize("data_mode, interval", [("sink", 10.0), ("feed", 0.5)])
def test_sink_mode_silent_in_sink_mode_or_small_interval(data_mode, interval):
    run = make_run(data_mode=data_mode, steps=step_rows(interval=interval, fwd_bwd=20.0, tail=1.0))
    advice = advise(run)
    assert "sink_mode" not in advice.ids() and "sink_mode" not in advice.not_checked


@pytest.mark.parametrize("device, data_mode, reason", [("CPU", "feed", "CPU"), ("Ascend", None, "data mode unknown")])
def test_sink_mode_not_checked_on_cpu_or_unknown_mode(device, data_mode, reason):
    advice = advise(make_run(device=device, data_mode=data_mode, steps=step_rows(10.0, 10.0, 1.0)))
    assert "sink_mode" not in advice.ids()
    assert reason in advice.not_checked["sink_mode"]


# --- amp_level -------------------------------------------------------------------------------------------

ASCEND_FP32_TYPES = dict(Cast=12.0, BNTrainingUpdate=8.0, BNTrainingReduce=4.0, Conv2D=36.0)


def test_amp_level_fires_when_cast_and_batchnorm_dominate_fp32_ascend():
    run = make_run(steps=step_rows(1.0, 20.0, 1.0), op_types=type_rows(**ASCEND_FP32_TYPES))
    finding = only(advise(run), "amp_level")
    assert finding.evidence["cast_bn_share_of_device_pct"] == pytest.approx(100 * 24 / 60)
    assert finding.evidence["cast_share_of_device_pct"] == pytest.approx(100 * 12 / 60)
    # Cast goes away, BatchNorm halves; over 3 steps of 22 ms.
    assert finding.est_gain_pct == pytest.approx(100 * (12 + 0.5 * 12) / 66, abs=0.01)
    assert finding.action == 'Model(net, loss_fn, optimizer, amp_level="O3")'
    assert finding.target == "Cast"


@pytest.mark.parametrize("amp, dtype, types", [
    ("O3", "float32", ASCEND_FP32_TYPES),                          # already O3
    (None, "float16", ASCEND_FP32_TYPES),                          # fp16 inputs everywhere
    ("O0", "float32", dict(Cast=2.0, BNTrainingUpdate=3.0, Conv2D=55.0)),  # Cast+BN small
])
def test_amp_level_silent(amp, dtype, types):
    run = make_run(amp_level=amp, compute_dtype=dtype, steps=step_rows(1.0, 20.0, 1.0), op_types=type_rows(**types))
    advice = advise(run)
    assert "amp_level" not in advice.ids() and "amp_level" not in advice.not_checked


def test_amp_level_on_gpu_counts_fp32_convs_and_suggests_o2():
    run = make_run(device="GPU", data_mode="sink", steps=step_rows(1.0, 20.0, 1.0),
                   op_types=type_rows(Conv2D=30.0, BatchNorm=6.0, ReLU=24.0))
    finding = only(advise(run), "amp_level")
    assert finding.evidence["fp32_conv_matmul_share_of_device_pct"] == pytest.approx(50.0)
    assert finding.est_gain_pct == pytest.approx(100 * 0.5 * 36 / 66, abs=0.01)
    assert 'amp_level="O2"' in finding.action


# Precision unknown on Ascend is no longer "not checked": the Cast + BatchNorm share alone fires, conditionally
# (tests/test_diagnosis_rules.py, on the seed's own files without framework_raw).
@pytest.mark.parametrize("device, amp, dtype, reason", [("CPU", None, "float32", "float16")])
def test_amp_level_not_checked(device, amp, dtype, reason):
    run = make_run(device=device, amp_level=amp, compute_dtype=dtype, op_types=type_rows(**ASCEND_FP32_TYPES))
    advice = advise(run)
    assert "amp_level" not in advice.ids()
    assert reason in advice.not_checked["amp_level"]


# --- dataset_workers / data_pipeline_ok ------------------------------------------------------------------

def pipeline_rows(batch_usage, map_usage, source_usage, workers=(4, 8, 8)):
    return [{"queue_empty_pct": None, "queue_length": 64, **row} for row in [
        {"op_id": 0, "op_type": "BatchOp", "workers": workers[0], "queue_usage": batch_usage, "parent_id": None,
         "children": [1]},
        {"op_id": 1, "op_type": "MapOp", "workers": workers[1], "queue_usage": map_usage, "parent_id": 0,
         "children": [2]},
        {"op_id": 2, "op_type": "ImageFolderOp", "workers": workers[2], "queue_usage": source_usage,
         "parent_id": 1, "children": []},
    ]]


STARVED = queue_rows([0] * 8 + [3, 5])  # empty in 80 % of batches


def test_dataset_workers_names_the_batch_op_when_its_queue_is_empty_and_its_childs_full():
    run = make_run(data_mode="sink", steps=step_rows(6.0, 12.0, 2.0), host_queue=STARVED,
                   device_queue=[{"batch": i, "size": s, "capacity": 100, "wait_ms": w}
                                 for i, (s, w) in enumerate([(0, 3.0), (0, 2.0), (1, 0.0), (0, 1.0)])],
                   pipeline=pipeline_rows(batch_usage=0.05, map_usage=0.9, source_usage=0.95))
    finding = only(advise(run), "dataset_workers")
    assert finding.target == "Batch"
    # a run without host facts: the count is not capped, and the action says what caps it
    assert finding.action.startswith("dataset.batch(batch_size, num_parallel_workers=8) (at most the training "
                                     "host's CPU count")
    assert "records no host facts" in finding.action
    assert finding.evidence["device_queue_empty_pct"] == 75.0
    assert finding.evidence["host_queue_empty_pct"] == 80.0
    assert finding.evidence["queue_usage_pct"] == 5.0 and finding.evidence["child_queue_usage_pct"] == 90.0
    assert finding.est_gain_pct == pytest.approx(100 * 6.0 / 60.0)  # GetNext wait over 3 steps of 20 ms
    assert "data_pipeline_ok" not in advise(run).ids()


def test_dataset_workers_names_a_slow_source():
    run = make_run(steps=step_rows(6.0, 12.0, 2.0), host_queue=STARVED,
                   pipeline=pipeline_rows(batch_usage=0.3, map_usage=0.35, source_usage=0.3))
    finding = only(advise(run), "dataset_workers")
    assert finding.target == "ImageFolder"
    assert finding.action.startswith("ds.ImageFolderDataset(..., num_parallel_workers=16) (at most")
    assert finding.est_gain_pct == pytest.approx(30.0)  # feed mode: the interval


def test_full_device_queue_means_data_is_not_the_problem_even_with_an_empty_host_queue():
    # The seed's last profile: host queue often empty (batches leave at once), device queue almost full.
    run = make_run(data_mode="sink", steps=step_rows(0.5, 20.0, 1.0), host_queue=STARVED,
                   device_queue=[{"batch": i, "size": 100, "capacity": 100, "wait_ms": 0.0} for i in range(9)]
                   + [{"batch": 9, "size": 0, "capacity": 100, "wait_ms": 0.1}])
    advice = advise(run)
    assert "dataset_workers" not in advice.ids()
    ok = only(advice, "data_pipeline_ok")
    assert ok.severity == "low" and ok.evidence["device_queue_empty_pct"] == 10.0
    assert ok.evidence["device_queue_full_pct"] == 90.0


# --- host_cpu --------------------------------------------------------------------------------------------

def cpu_rows(busy_user, busy_sys):
    # every other sample all-zero, as minddata_cpu_utilization writes them: not readings
    rows = []
    for i, (user, system) in enumerate(zip(busy_user, busy_sys)):
        rows += [{"sample": 2 * i, "user_pct": user, "sys_pct": system, "io_pct": 0, "idle_pct": 100 - user - system,
                  "process_user_pct": user, "process_sys_pct": system},
                 {"sample": 2 * i + 1, "user_pct": 0, "sys_pct": 0, "io_pct": 0, "idle_pct": 0,
                  "process_user_pct": 0, "process_sys_pct": 0}]
    return rows


def test_host_cpu_fires_when_host_is_saturated_and_data_starves():
    user, system = [80, 85, 90], [8, 6, 9]
    run = make_run(steps=step_rows(6.0, 12.0, 2.0), host_queue=STARVED, cpu_util=cpu_rows(user, system))
    finding = only(advise(run), "host_cpu")
    expected = sum(u + s for u, s in zip(user, system)) / len(user)
    assert finding.evidence["host_cpu_busy_pct"] == pytest.approx(expected, abs=0.01)
    assert "offload=True" in finding.action


@pytest.mark.parametrize("queue, user", [(STARVED, [30, 40, 35]), (queue_rows([64] * 10), [90, 92, 95])])
def test_host_cpu_silent_when_idle_or_when_data_keeps_up(queue, user):
    run = make_run(steps=step_rows(6.0, 12.0, 2.0), host_queue=queue, cpu_util=cpu_rows(user, [2, 2, 2]))
    assert "host_cpu" not in advise(run).ids()


# --- communication ---------------------------------------------------------------------------------------

def test_communication_fires_on_exposed_communication_and_names_the_worst_rank():
    rows = (step_rows(1.0, 8.0, 1.0, rank=0, comm_exposed_ms=3.0)
            + step_rows(1.0, 8.0, 1.0, rank=1, comm_exposed_ms=5.0))
    finding = only(advise(make_run(steps=rows)), "communication")
    assert finding.evidence["comm_exposed_share_pct"] == pytest.approx(40.0)
    assert finding.evidence["worst_rank_share_pct"] == pytest.approx(50.0)
    assert finding.target == "rank 1"
    assert "comm_fusion" in finding.action


def test_communication_silent_when_hidden_and_not_checked_without_data():
    hidden = make_run(steps=step_rows(1.0, 8.0, 1.0, comm_exposed_ms=0.2))
    assert "communication" not in advise(hidden).ids()
    assert "communication" in advise(make_run(steps=step_rows(1.0, 8.0, 1.0))).not_checked


# --- slow_rank -------------------------------------------------------------------------------------------

def test_slow_rank_names_the_rank_whose_step_stands_out():
    rows = step_rows(1.0, 10.0, 1.0, rank=0) + step_rows(1.0, 10.0, 1.0, rank=1) + step_rows(1.0, 12.0, 1.0, rank=2)
    finding = only(advise(make_run(steps=rows)), "slow_rank")
    mean_total = (12 + 12 + 14) / 3
    assert finding.target == "rank 2"
    assert finding.evidence["spread_pct_of_step"] == pytest.approx(100 * 2 / mean_total, abs=0.01)
    # it computes the 2 ms longer: the finding says so (compute is the most telling spread)
    assert finding.evidence["rank2_compute_ms"] == 13.0 and "compute longer" in finding.action


def test_slow_rank_by_idle_time_and_by_compute_each_name_their_rank():
    """Equal totals: rank 1 idles 1.5 ms longer before forward, rank 0 computes 1.5 ms longer. Each spread names
    its own rank and claims its own part of the step (idle vs compute), so both are said."""
    rows = step_rows(1.0, 10.0, 1.0, rank=0) + step_rows(2.5, 8.5, 1.0, rank=1)
    found = {f.evidence and next(k for k in f.evidence if k.startswith("rank")).split("_", 1)[1]: f
             for f in advise(make_run(steps=rows)).findings if f.id == "slow_rank"}
    assert set(found) == {"idle_ms", "compute_ms"}
    assert found["idle_ms"].target == "rank 1" and "wait longer for data" in found["idle_ms"].action
    assert found["compute_ms"].target == "rank 0" and "compute longer" in found["compute_ms"].action


def test_slow_rank_by_compute_when_step_times_agree():
    """Data-parallel ranks meet at every all-reduce: the slow one computes longer, the others wait in comm."""
    rows = [row for rank in range(4) for row in step_rows(
        1.0, 10.0, 1.0, rank=rank, computing_ms=8.0 if rank == 3 else 6.0, comm_ms=2.0 if rank == 3 else 4.0)]
    finding = only(advise(make_run(steps=rows)), "slow_rank")
    assert finding.target == "rank 3" and "compute longer" in finding.action
    assert finding.evidence["spread_pct_of_step"] == pytest.approx(100 * 2 / 12, abs=0.01)
    assert finding.evidence["rank3_compute_ms"] == 8.0


def test_slow_rank_silent_within_five_percent():
    rows = step_rows(1.0, 10.0, 1.0, rank=0) + step_rows(1.0, 10.4, 1.0, rank=1)
    advice = advise(make_run(steps=rows))
    assert "slow_rank" not in advice.ids() and "slow_rank" not in advice.not_checked


# --- kernel_efficiency -----------------------------------------------------------------------------------

LAYER = "Default/net/layer1/0-Bottleneck/conv2-Conv2d"
DOWN = "Default/net/layer2/0-Bottleneck/conv2-Conv2d"


def conv_ops(forward_ms, filter_ms, input_ms, count=2):
    """Two conv layers: 3x3 64->64 at 16x16 stride 1, and 3x3 64->128 stride 2 (16x16 -> 8x8), batch 8."""
    rows = []
    for layer, c_out, out_hw in ((LAYER, 64, 16), (DOWN, 128, 8)):
        dout = f"8,{c_out},{out_hw},{out_hw}"
        for name, op_type, shapes, total in (
                (f"{layer}/Conv2D-op0", "Conv2D", f"8,64,16,16;{c_out},64,3,3", forward_ms),
                (f"Gradients/{layer}/Grad_Conv2D/Conv2DBackpropFilter-op1", "Conv2DBackpropFilter",
                 f"{dout};8,64,16,16;4", filter_ms),
                (f"Gradients/{layer}/Grad_Conv2D/Conv2DBackpropInput-op2", "Conv2DBackpropInput",
                 f"{dout};{c_out},64,3,3;4", input_ms)):
            rows.append({"name": name, "type": op_type, "avg_ms": total / count, "count": count,
                         "total_ms": total, "pass": "other", "input_shapes": shapes, "input_dtypes": None})
    rows.append({"name": "Default/net/bn-BatchNorm/BatchNorm-op3", "type": "BatchNorm", "avg_ms": 1.0,
                 "count": count, "total_ms": 2.0, "pass": "forward", "input_shapes": "8,64,16,16;64;64;64;64",
                 "input_dtypes": None})
    return rows


def test_kernel_efficiency_fires_on_a_reference_kernel_forward_conv_on_cpu():
    # forward 100x slower than the gradient kernels doing the same multiply-adds, as oneDNN's reference kernel
    run = make_run(device="CPU", steps=step_rows(1.0, 700.0, 10.0), ops=conv_ops(600.0, 6.0, 6.0))
    finding = only(advise(run), "kernel_efficiency")
    flops = 2 * (2 * 8 * 64 * 16 * 16 * 64 * 9 + 2 * 8 * 128 * 8 * 8 * 64 * 9)
    assert finding.target == "Conv2D 3x3"
    # each of the two layers' ops takes the given time
    assert finding.evidence["gflops_per_s"] == pytest.approx(flops / 1200.0 / 1e6, abs=1e-3)
    assert finding.evidence["reference_gflops_per_s"] == pytest.approx(flops / 12.0 / 1e6, abs=1e-3)
    assert finding.evidence["ratio_to_reference"] == pytest.approx(0.01)
    assert finding.est_gain_pct == pytest.approx(100 * 1200 * 0.99 / (3 * 711), abs=0.01)
    assert "ONEDNN_MAX_CPU_ISA=AVX2" in finding.action and finding.severity == "high"


def test_kernel_efficiency_silent_when_conv_kernels_are_within_calibrated_spread():
    # healthy runs spread up to ~3x between conv groups (docs/advice.md, the kernel_efficiency row); 6x is still no finding
    run = make_run(device="CPU", steps=step_rows(1.0, 60.0, 1.0), ops=conv_ops(6.0, 36.0, 12.0))
    advice = advise(run)
    assert "kernel_efficiency" not in advice.ids() and "kernel_efficiency" not in advice.not_checked


def test_kernel_efficiency_not_checked_without_shapes():
    ops = [{**row, "input_shapes": None} for row in conv_ops(600.0, 6.0, 6.0)]
    assert "kernel_efficiency" in advise(make_run(device="CPU", ops=ops)).not_checked


# --- ranking, severity, rendering ------------------------------------------------------------------------

@pytest.mark.parametrize("gain, severity", [(None, "medium"), (0.5, "low"), (3.0, "medium"), (9.99, "medium"),
                                            (10.0, "high"), (80.0, "high")])
def test_severity_from_gain(gain, severity):
    assert severity_for(gain) == severity


def seed_feed_run(**kwargs):
    """The seed's first profile in model form: feed mode, interval ~ fwd_bwd, Cast+BatchNorm ~ half the device."""
    return make_run(steps=step_rows(interval=9.0, fwd_bwd=10.0, tail=1.0),
                    op_types=type_rows(Cast=4.0, BNTrainingUpdate=3.0, BNTrainingReduce=3.0, Conv2D=8.0, ReLU=2.0),
                    host_queue=queue_rows([64] * 20), **kwargs)


def test_findings_ranked_most_important_first():
    advice = advise(seed_feed_run())
    assert advice.ids() == ["sink_mode", "amp_level", "data_pipeline_ok"]
    gains = [f.est_gain_pct for f in advice.findings[:2]]
    assert gains == sorted(gains, reverse=True)


def test_text_and_markdown_show_numbers_actions_and_what_was_not_checked():
    advice = advise(seed_feed_run())
    text = advice_text(advice)
    lines = text.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("1. ")))
    assert "HIGH" in lines[first] and "sink_mode" in lines[first] and "45.0 % of step" in lines[first]
    assert lines[first + 1].strip().startswith("interval_share_pct 45")  # numbers before words
    assert "do: model.train(..., dataset_sink_mode=True)" in text
    assert "not checked: slow_rank: single-rank run" in text
    markdown = advice_markdown(advice)
    assert "| 1 | high | `sink_mode` | 45.0 % |" in markdown
    assert '```\nModel(net, loss_fn, optimizer, amp_level="O3")\n```' in markdown


# --- CLI -------------------------------------------------------------------------------------------------

@pytest.fixture
def crafted_cli(monkeypatch):
    """The CLI with loading replaced by crafted runs keyed by path, so exit codes are tested apart from readers."""
    runs = {"seed": seed_feed_run(path="seed"),
            "healthy": make_run(data_mode="sink", compute_dtype="float16", steps=step_rows(0.2, 20.0, 0.5),
                                host_queue=queue_rows([64] * 20), path="healthy")}
    monkeypatch.setattr("perfkit.apps.cli._load", lambda path, cycle=None: runs[path])
    return CliRunner()


def test_advise_json_contract(crafted_cli):
    result = crafted_cli.invoke(main, ["advise", "seed", "--format", "json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert set(payload) == {"run", "device", "caveat", "bound", "findings", "not_checked", "passed"}
    assert payload["run"] == "seed" and payload["device"] == "Ascend" and payload["caveat"] is None
    # every rule is accounted for once: it found something, found nothing, or could not look
    found = {f["id"] for f in payload["findings"]} - {"data_pipeline_ok"} | (
        {"dataset_workers"} if any(f["id"] == "data_pipeline_ok" for f in payload["findings"]) else set())
    not_checked = {entry["rule"] for entry in payload["not_checked"]}
    assert all(set(entry) == {"rule", "reason"} and entry["reason"] for entry in payload["not_checked"])
    assert sorted(found | not_checked | set(payload["passed"])) == sorted(rule.id for rule in rules.RULES)
    assert not (found & not_checked) and not (found & set(payload["passed"]))
    assert [f["id"] for f in payload["findings"]] == ["sink_mode", "amp_level", "data_pipeline_ok"]
    # an action that is a setting carries it as a change perfkit tune can apply; an all-clear carries none
    assert [f["change"] for f in payload["findings"]] == [{"knob": "sink_mode", "value": True},
                                                          {"knob": "amp_level", "value": "O3"}, None]
    for finding in payload["findings"]:
        assert set(finding) == {"id", "severity", "title", "evidence", "action", "target", "est_gain_pct", "claims",
                                "claimed_ms", "change"}
        assert all(isinstance(v, (int, float)) for v in finding["evidence"].values())


@pytest.mark.parametrize("run, fail_on, code", [
    ("seed", "high", 1), ("seed", "medium", 1), ("seed", "low", 1),
    # data_pipeline_ok is an all-clear: it never trips a gate, even --fail-on low
    ("healthy", "high", 0), ("healthy", "medium", 0), ("healthy", "low", 0),
    ("seed", None, 0)])
def test_advise_fail_on_exit_codes(crafted_cli, run, fail_on, code):
    args = ["advise", run] + (["--fail-on", fail_on] if fail_on else [])
    result = crafted_cli.invoke(main, args)
    assert result.exit_code == code, result.output


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_advise_text_formats(crafted_cli, fmt):
    result = crafted_cli.invoke(main, ["advise", "seed", "--format", fmt])
    assert result.exit_code == 0 and "dataset_sink_mode=True" in result.output


def test_advise_bad_input_exits_2_with_one_line(tmp_path):
    result = CliRunner().invoke(main, ["advise", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "does not exist" in result.output and "Traceback" not in result.output
    empty = CliRunner().invoke(main, ["advise", str(tmp_path)])
    assert empty.exit_code == 2 and "no MindSpore profiler files" in empty.output


def test_commands_have_help_with_an_example():
    for command in ("advise", "compare"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert result.exit_code == 0 and "Example:" in result.output


# --- the seed's story, through the legacy reader ---------------------------------------------------------

RUNS = Path(__file__).resolve().parent / "runs"


def raw_steps(folder: Path) -> list[dict[str, str]]:
    with open(folder / "step_trace_raw_0_detail_time.csv", newline="") as f:
        return list(csv.DictReader(f))[:-1]  # the last row is the average


def raw_interval_share(folder: Path) -> float:
    """Interval over step of the steady state: steps 2..n, which MindSpore's own average covers (these
    crafted files' average row is not MindSpore's, so the rows are averaged here)."""
    steady = raw_steps(folder)[1:]
    return sum(int(r["iteration_interval"]) for r in steady) / sum(int(r["total"]) for r in steady)


def raw_type_ms(folder: Path) -> dict[str, float]:
    with open(folder / "aicore_intermediate_0_type.csv", newline="") as f:
        return {r["op_type"]: float(r["execution_time"]) for r in csv.DictReader(f)}


def test_seed_1_feed_fp32_gets_sink_mode_and_amp_level_not_dataset_workers():
    folder = RUNS / "seed_1_feed_fp32"
    advice = advise(load(folder))
    assert advice.ids()[:2] == ["sink_mode", "amp_level"]
    assert "dataset_workers" not in advice.ids()
    sink = only(advice, "sink_mode")
    assert sink.evidence["interval_share_pct"] == pytest.approx(100 * raw_interval_share(folder), abs=0.01)
    types = raw_type_ms(folder)
    cast_bn = types["Cast"] + sum(ms for t, ms in types.items() if t.startswith("BN"))
    amp = only(advice, "amp_level")
    assert amp.evidence["cast_bn_share_of_device_pct"] == pytest.approx(100 * cast_bn / sum(types.values()), abs=0.01)
    assert amp.action == 'Model(net, loss_fn, optimizer, amp_level="O3")'


def test_seed_2_sink_fp32_gets_amp_level_not_sink_mode():
    advice = advise(load(RUNS / "seed_2_sink_fp32"))
    assert advice.ids()[0] == "amp_level"
    assert "sink_mode" not in advice.ids() and "dataset_workers" not in advice.ids()
    assert "data_pipeline_ok" in advice.ids()  # the device queue is full


def test_seed_3_sink_o3_starved_gets_dataset_workers_on_batch_only():
    folder = RUNS / "seed_3_sink_o3"
    advice = advise(load(folder))
    assert "sink_mode" not in advice.ids() and "amp_level" not in advice.ids()
    workers = only(advice, "dataset_workers")
    assert workers.target == "Batch"
    with open(folder / "minddata_pipeline_raw_0.csv", newline="") as f:
        batch = next(r for r in csv.DictReader(f) if r["op_type"] == "BatchOp")
    doubled = 2 * int(batch["num_workers"])
    assert workers.action.startswith(f"dataset.batch(batch_size, num_parallel_workers={doubled}) ")
    samples = [line.split() for line in (folder / "minddata_aicpu_0.txt").read_text().splitlines()]
    assert workers.evidence["device_queue_empty_pct"] == pytest.approx(
        100 * sum(s[3] == "0" for s in samples) / len(samples), abs=0.01)
    # GetNext waits (µs) over the step time (10 ns ticks)
    wait_ms = sum(int(s[2]) - int(s[1]) for s in samples) / 1000
    step_ms = sum(int(r["total"]) for r in raw_steps(folder)) / 1e5
    assert workers.est_gain_pct == pytest.approx(100 * wait_ms / step_ms, abs=0.01)


def test_seed_story_cli_fail_on_gates_each_profile():
    codes = {name: CliRunner().invoke(main, ["advise", str(RUNS / name), "--fail-on", "high"]).exit_code
             for name in ("seed_1_feed_fp32", "seed_2_sink_fp32", "seed_3_sink_o3")}
    assert codes == {"seed_1_feed_fp32": 1, "seed_2_sink_fp32": 1, "seed_3_sink_o3": 1}


# --- real fixtures ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["new_level1", "new_2023"])
def test_two_rank_new_layout_runs_are_communication_bound(name):
    folder = FIXTURE_RUNS[name]
    advice = advise(load(folder))
    top = advice.findings[0]
    assert top.id == "communication" and top.severity == "high"
    # the collective part of the exposed communication: communication.json's p2p ops (msinsight_2023 has one
    # hcom_send) are the pipeline rule's, in proportion to their elapsed time
    exposed = []
    for path in sorted(folder.glob("*/ASCEND_PROFILER_OUTPUT/step_trace_time.csv")):
        ops = next(iter(json.loads((path.parent / "communication.json").read_text()).values()))
        elapse = {kind: sum(op["Communication Time Info"]["Elapse Time(ms)"] for name, op in ops[kind].items()
                            if name != "Total Op Info") for kind in ("collective", "p2p")}
        collective = elapse["collective"] / (elapse["collective"] + elapse["p2p"])
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                exposed.append(collective * float(row["Communication(Not Overlapped)"]) / 1000)  # µs -> ms
    assert top.evidence["comm_exposed_ms"] == pytest.approx(sum(exposed) / len(exposed), abs=0.001)
    assert top.evidence["comm_exposed_share_pct"] > 50
    assert top.target in ("rank 0", "rank 1")
    assert "sink_mode" not in advice.ids() and "slow_rank" not in advice.ids()


def test_cpu_run_gets_cpu_advice_only():
    advice = advise(load(FIXTURE_RUNS["cpu_2_10"]))
    assert advice.device == "CPU"
    assert "sink_mode" not in advice.ids() and "amp_level" not in advice.ids()
    assert "CPU" in advice.not_checked["sink_mode"] and "CPU" in advice.not_checked["amp_level"]
    # this run used ONEDNN_MAX_CPU_ISA=AVX2: its conv kernels are within the healthy spread
    assert "kernel_efficiency" not in advice.ids() and "kernel_efficiency" not in advice.not_checked
    # the host CPU is busy training, but the iterator queue stays full: not a data problem
    assert "host_cpu" not in advice.ids() and "dataset_workers" not in advice.ids()


# --- tail ------------------------------------------------------------------------------------------------

def test_tail_fires_when_the_optimizer_tail_is_a_large_share():
    finding = only(advise(make_run(steps=step_rows(0.2, 8.0, 2.0))), "tail")
    assert finding.evidence["optimizer_share_pct"] == pytest.approx(100 * 2.0 / 10.2, abs=0.01)
    assert finding.est_gain_pct == pytest.approx(100 * 2.0 / 10.2 / 2, abs=0.01)
    assert finding.claims == {"optimizer": pytest.approx(3 * 2.0 / 2, abs=0.01)}  # half of each steady 2 ms update
    assert finding.action.startswith("dataset.batch(2 * batch_size")


def test_tail_leaves_the_all_reduce_inside_it_to_the_communication_finding():
    """The real legacy run of issue 22: a 5.5 ms tail of which 4.5 ms is the AllReduce (the step trace's stream
    columns place it after bp_point). The tail finding said 16.3 %, the communication one 13.5 %: the same
    4.5 ms twice. Now the tail's optimizer part is ~2.8 % (below the bar) and communication claims the 4.5 ms."""
    import csv

    from conftest import FIXTURE_RUNS

    from perfkit.io.loader import load
    run_dir = FIXTURE_RUNS["legacy_ut"]
    rows = list(csv.DictReader(next(run_dir.glob("step_trace_raw_*_detail_time.csv")).open()))
    step = next(row for row in rows if row["step_num"] == "2")
    advice = advise(load(run_dir))
    assert "tail" not in advice.ids()
    communication = only(advice, "communication")
    streams = [(int(step[c]), int(step[c.replace("start_point", "end_point")])) for c in step
               if c.startswith("stream_") and c.endswith("_start_point")]
    in_tail = sum(max(0, min(end, int(step["end_point"])) - max(start, int(step["bp_point"])))
                  for start, end in streams) / 1e5  # 10-ns ticks -> ms; the streams here do not overlap
    assert sum(communication.claims.values()) == pytest.approx(in_tail, abs=1e-3)
    optimizer = (int(step["tail"]) / 1e5 - in_tail) / (int(step["total"]) / 1e5)
    assert 0 < optimizer < 0.10


def test_amp_level_on_gpu_at_o2_does_not_count_convs_already_in_fp16():
    run = make_run(device="GPU", data_mode="sink", amp_level="O2", steps=step_rows(1.0, 20.0, 1.0),
                   op_types=type_rows(Conv2D=30.0, BatchNorm=6.0, ReLU=24.0))
    advice = advise(run)
    assert "amp_level" not in advice.ids() and "amp_level" not in advice.not_checked


def test_pipeline_children_given_as_text_are_understood():
    rows = [{**row, "children": str(row["children"])} for row in pipeline_rows(0.05, 0.9, 0.95)]
    run = make_run(steps=step_rows(6.0, 12.0, 2.0), host_queue=STARVED, pipeline=rows)
    assert only(advise(run), "dataset_workers").target == "Batch"


def test_evidence_leaves_out_what_the_run_does_not_tell():
    rows = [{**row, "fwd_bwd_ms": None, "tail_ms": None} for row in step_rows(10.0, 10.0, 1.0)]
    finding = only(advise(make_run(steps=rows)), "sink_mode")
    assert set(finding.evidence) == {"interval_share_pct", "interval_ms", "step_ms"}
    json.dumps(finding.to_dict(), allow_nan=False)


def test_slow_rank_evidence_names_slow_and_fastest_rank_only():
    rows = [row for rank in range(8) for row in step_rows(1.0, 13.0 if rank == 5 else 10.0 + 0.01 * rank, 1.0,
                                                          rank=rank)]
    finding = only(advise(make_run(steps=rows)), "slow_rank")
    assert finding.target == "rank 5"
    assert set(finding.evidence) == {"spread_pct_of_step", "mean_step_ms", "rank5_compute_ms", "rank0_compute_ms"}


def test_advise_and_compare_do_not_import_mindspore_or_dash():
    cpu = str(FIXTURE_RUNS["cpu_2_10"])
    code = ("import sys; from click.testing import CliRunner; from perfkit.apps.cli import main; "
            f"assert CliRunner().invoke(main, ['advise', {cpu!r}]).exit_code == 0; "
            f"assert CliRunner().invoke(main, ['compare', {cpu!r}, {cpu!r}]).exit_code == 0; "
            "print(sorted(m for m in ('mindspore', 'dash') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_dataset_workers_names_the_dataset_class_a_user_writes():
    rows = pipeline_rows(batch_usage=0.3, map_usage=0.35, source_usage=0.3)
    rows[2] = {**rows[2], "op_type": "CifarOp", "workers": 2}
    run = make_run(steps=step_rows(6.0, 12.0, 2.0), host_queue=STARVED, pipeline=rows)
    finding = only(advise(run), "dataset_workers")
    assert finding.target == "Cifar"
    assert finding.action.startswith("ds.Cifar10Dataset(..., num_parallel_workers=4) (at most")


def test_communication_from_collective_op_time_when_steps_have_no_communication_columns():
    rows = step_rows(1.0, 18.0, 1.0, rank=0, count=2) + step_rows(1.0, 18.0, 1.0, rank=1, count=2)
    op_types = [{"rank": r, "type": t, "total_ms": ms, "count": 2, "share": None}
                for r in (0, 1) for t, ms in (("AllReduce", 16.0 + 4 * r), ("Conv2D", 20.0))]
    finding = only(advise(make_run(device="CPU", steps=rows, op_types=op_types)), "communication")
    # AllReduce per step: rank 0 8 ms, rank 1 10 ms, of 20 ms steps
    assert finding.evidence["comm_ops_ms"] == pytest.approx(9.0)
    assert finding.evidence["comm_ops_share_pct"] == pytest.approx(45.0)
    assert finding.target == "rank 1" and "overlap with compute unknown" in finding.title


def test_cpu_data_parallel_sample_run_is_communication_bound():
    folder = Path(__file__).resolve().parents[1] / "sample_runs" / "cpu_ranks2"
    advice = advise(load(folder))
    finding = advice.findings[0]
    assert finding.id == "communication" and finding.severity == "high"
    # independently: in each recorded step, the time AllReduce runs with no other op running
    from test_run_structures import raw_executions, union_ms
    per_rank = []
    for rank in (0, 1):
        steps = json.loads((folder / f"rank_{rank}" / "perfkit_run.json").read_text())["steps"]
        (unit,) = folder.glob(f"rank_{rank}/*_ascend_ms")
        executions = [(name, start, start + round(dur * 1e6)) for name, start, dur in raw_executions(unit, rank)]
        exposed = []
        for step in steps:
            inside = [row for row in executions if step["begin_ns"] <= row[1] < step["end_ns"]]
            exposed.append(union_ms([(s, e) for _, s, e in inside])
                           - union_ms([(s, e) for n, s, e in inside if "AllReduce" not in n]))
        per_rank.append(sum(exposed) / len(exposed))  # no first step is an outlier here: all steps are steady
    assert finding.evidence["comm_exposed_ms"] == pytest.approx(sum(per_rank) / 2, abs=0.01)


@pytest.mark.parametrize("name", ["new_level1", "new_2023"])
def test_communication_on_wait_dominated_runs_says_waiting_and_no_fusion(name):
    """These real runs' collectives are ~97 % not transfer (communication.json: Elapse less Transit time is
    wait, synchronisation and idle): buckets/fusion
    cannot help, so the finding must not prescribe them."""
    folder = FIXTURE_RUNS[name]
    finding = next(f for f in advise(load(folder)).findings if f.id == "communication")
    transit = wait = 0.0
    for path in sorted(folder.glob("*/ASCEND_PROFILER_OUTPUT/communication.json")):
        for step in json.loads(path.read_text()).values():
            for op_name, op in step["collective"].items():
                if op_name != "Total Op Info":
                    transit += op["Communication Time Info"]["Transit Time(ms)"]
                    info = op["Communication Time Info"]
                    wait += info["Elapse Time(ms)"] - info["Transit Time(ms)"]
    assert wait > transit  # independent: the raw file says wait dominates
    assert "mostly waiting" in finding.title
    assert finding.evidence["comm_wait_ms"] > finding.evidence["comm_transfer_ms"]
    assert "comm_fusion" not in finding.action and "bucket_cap_mb" not in finding.action



def wait_split_run(late_compute_ms: float, interval_ms: float = 0.0):
    """Two ranks with 6 ms of exposed collective time a step, of which the ops moved data 1 ms in 10 (the rest
    waiting): rank 1 computes `late_compute_ms` against rank 0's 4 ms, and waits least."""
    rows = (step_rows(interval_ms, 10.0, 0.0, rank=0, comm_exposed_ms=6.0, computing_ms=4.0)
            + step_rows(interval_ms, late_compute_ms + 1.0, 0.0, rank=1, comm_exposed_ms=1.0,
                        computing_ms=late_compute_ms))
    ops = pd.DataFrame([{"rank": rank, "step": step, "name": "hcom_allReduce__1", "kind": "collective",
                         "elapse_ms": elapse, "transit_ms": elapse / 10, "wait_ms": elapse * 0.9,
                         "synchronization_ms": 0.0}
                        for rank, elapse in ((0, 6.0), (1, 1.0)) for step in (1, 2, 3)])
    meta = Meta(device="Ascend", data_mode="sink", ranks=[0, 1])
    return Run(path="crafted", meta=meta, steps=table("steps", pd.DataFrame(rows)), comm_ops=table("comm_ops", ops))


def test_communication_waiting_names_the_late_rank_by_its_compute():
    finding = only(advise(wait_split_run(late_compute_ms=9.0)), "communication")
    assert "mostly waiting" in finding.title and finding.target == "rank 1"
    assert finding.evidence["late_rank_compute_ms"] == pytest.approx(9.0)
    assert finding.evidence["other_ranks_compute_ms"] == pytest.approx(4.0)
    assert "comm_fusion" not in finding.action


def test_communication_waiting_does_not_blame_a_rank_whose_compute_matches():
    finding = only(advise(wait_split_run(late_compute_ms=4.0)), "communication")
    assert "late_rank" not in finding.evidence and "not profiled" in finding.action

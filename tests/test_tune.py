"""perfkit tune's loop with a fast fake trainer: the order of runs (rounds, A B A B), resume from the ledger,
budgets, broken and inapplicable experiments, a failing baseline, noise too large to decide, the combination of
the faster changes, the patch of a sample script; and the start-up hook's argument override."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import perfkit
from perfkit.advisor.change import Change, parse_change
from perfkit.analysis.statistics import verdict
from perfkit.apps.cli import main
from perfkit.apps.tune import (
    BASELINE,
    CANNOT_TELL,
    LEDGER,
    Budget,
    Candidate,
    DeadlineReached,
    RunResult,
    Tuner,
    propose,
    tune_dict,
    tune_text,
)
from perfkit.apps.tune_patch import command_patch, script_patch
from perfkit.core.errors import PerfkitError
from perfkit.profiler.tune_hook import _override

AVX2 = Change("env", "AVX2", name="ONEDNN_MAX_CPU_ISA")
WORKERS = Change("dataset_workers", 2, op="all")
O3 = Change("amp_level", "O3")
GRAPH = Change("mode", "graph")
BASE_MS = 400.0
BATCH = 8


def write_run(folder: Path, step_ms: list[float], batch: int | None = BATCH) -> None:
    """A run folder as perfkit profile leaves one with step times only (its manifest)."""
    folder.mkdir(parents=True)
    begin, steps = 1_700_000_000_000_000_000, []
    for index, duration in enumerate(step_ms, start=1):
        end = begin + int(duration * 1e6)
        steps.append({"step": index, "begin_ns": begin, "end_ns": end})
        begin = end
    (folder / "perfkit_run.json").write_text(json.dumps({
        "perfkit_version": "test", "mindspore_version": "2.10.0", "device": "CPU", "rank": 0, "rank_size": 1,
        "status": "ok", "error": None, "config": {} if batch is None else {"batch_size": batch}, "env": {}, "notes": [], "steps": steps,
        "used": {"mode": "graph", "sink": False, "amp_level": "O0"}}))


class FakeTrainer:
    """Trains nothing: a run's steps take BASE_MS times each change's factor, times run-to-run noise (a
    lognormal factor of sigma `noise`, fixed per run folder so reruns are reproducible)."""

    def __init__(self, factors: dict[str, float], noise: float = 0.01, broken: str | None = None,
                 inapplicable: str | None = None, interrupt_at: int | None = None, baseline_error: bool = False,
                 clock=None, seconds: float = 0.0, record_batch: bool = True):
        self.factors = factors
        self.record_batch = record_batch
        self.noise = noise
        self.broken = broken
        self.inapplicable = inapplicable
        self.interrupt_at = interrupt_at
        self.baseline_error = baseline_error
        self.clock = clock
        self.seconds = seconds
        self.calls: list[str] = []

    def describe(self):
        return {"kind": "fake"}

    def run(self, changes, out_dir: Path, limit_s: float | None = None) -> RunResult:
        label = " + ".join(change.label for change in changes) or "baseline"
        self.calls.append(f"{out_dir.parent.name}/{out_dir.name}")
        if self.clock is not None:
            if limit_s is not None and self.seconds > limit_s:  # as ProfileRunner: killed at the deadline
                self.clock.now += limit_s
                raise DeadlineReached()
            self.clock.now += self.seconds
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        if self.baseline_error and not changes:
            return RunResult(None, False, error="the script exited with code 1", tail="Traceback\nValueError: bad")
        if self.broken is not None and self.broken in label:
            return RunResult(None, False, error="the loss was NaN at step 2", tail="step 2 loss nan")
        if self.inapplicable is not None and self.inapplicable in label:
            write_run(out_dir, [BASE_MS] * 4)
            return RunResult(out_dir, True, not_applied=[f"{label}: the script made no Model(...)"])
        factor = float(np.prod([self.factors.get(change.label, 1.0) for change in changes]))
        # seeded by the run's place in the tune folder, not its absolute path: the same draws on every machine
        rng = np.random.default_rng(zlib.crc32(f"{out_dir.parent.name}/{out_dir.name}".encode()))
        run_factor = float(np.exp(rng.normal(0.0, self.noise)))
        steps = BASE_MS * factor * run_factor * (1 + 0.005 * rng.standard_normal(4))
        batch = next((change.value for change in changes if change.knob == "batch_size"), BATCH)
        write_run(out_dir, list(steps), batch if self.record_batch else None)
        return RunResult(out_dir, True)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def fixed(*changes: Change):
    """A candidates function proposing `changes`, one experiment each."""
    return lambda run: ([Candidate((change,), "--try") for change in changes], [])


def tuner(tmp_path, trainer, candidates, **budget) -> Tuner:
    return Tuner(trainer, tmp_path / "tune", Budget(**budget), say=lambda text: None, candidates=candidates,
                 clock=trainer.clock or Clock())


def by_label(result):
    return {row["label"]: row for row in result.experiments}


def test_rounds_interleave_baseline_and_candidates(tmp_path):
    trainer = FakeTrainer({AVX2.label: 0.2})
    result = tuner(tmp_path, trainer, fixed(AVX2, WORKERS), repeats=3).tune()
    first, second = "exp_01_ONEDNN_MAX_CPU_ISA-AVX2", "exp_02_all-workers-2"
    # A B1 B2, A B1 B2, A B1 B2: drift over the session hits every setting alike
    assert trainer.calls == [f"{name}/repeat_{r}" for r in (1, 2, 3) for name in (BASELINE, first, second)]
    rows = by_label(result)
    assert rows[AVX2.label]["verdict"] == "faster" and rows[WORKERS.label]["verdict"] == "no change"
    # the speedup is statistics.verdict's over the same runs, computed independently here
    runs = {name: [perfkit.load(str(tmp_path / "tune" / name / f"repeat_{r}")) for r in (1, 2, 3)]
            for name in (BASELINE, first)}
    expected = verdict(runs[BASELINE], runs[first])
    assert rows[AVX2.label]["speedup"] == pytest.approx(expected.speedup, rel=1e-3)
    assert rows[AVX2.label]["speedup"] == pytest.approx(5.0, rel=0.05)
    # only one change was faster: nothing to combine, it is the best; ranked first
    assert result.best["label"] == AVX2.label and result.experiments[0]["label"] == AVX2.label
    assert rows[AVX2.label]["before"]["samples_per_s"] == pytest.approx(BATCH * 1000 / BASE_MS, rel=0.05)
    after = rows[AVX2.label]["after"]
    assert after["runs"] == 3 and after["step_ms_interval"][0] < after["step_ms"] < after["step_ms_interval"][1]
    low, high = after["samples_per_s_interval"]
    assert low == pytest.approx(BATCH * 1000 / after["step_ms_interval"][1], rel=1e-3) and high > low


def test_faster_changes_are_tried_together_with_fresh_baseline_runs(tmp_path):
    trainer = FakeTrainer({AVX2.label: 0.5, WORKERS.label: 0.8})
    result = tuner(tmp_path, trainer, fixed(AVX2, WORKERS, O3), repeats=2).tune()
    names = ["exp_01_ONEDNN_MAX_CPU_ISA-AVX2", "exp_02_all-workers-2", "exp_03_amp_level-O3"]
    rounds = [f"{name}/repeat_{r}" for r in (1, 2) for name in (BASELINE, *names)]
    assert trainer.calls == rounds + ["baseline/repeat_3", "combined/repeat_1", "baseline/repeat_4",
                                      "combined/repeat_2"]
    rows = by_label(result)
    combined = rows[f"{AVX2.label} + {WORKERS.label}"]
    assert combined["verdict"] == "faster" and combined["speedup"] == pytest.approx(1 / 0.4, rel=0.05)
    assert result.best["name"] == "combined"
    assert {change["knob"] for change in result.best["change"]} == {"env", "dataset_workers"}


def test_a_rerun_goes_on_where_ctrl_c_stopped(tmp_path):
    trainer = FakeTrainer({AVX2.label: 0.5}, interrupt_at=4)
    result = tuner(tmp_path, trainer, fixed(AVX2, WORKERS), repeats=2).tune()
    assert result.interrupted and "interrupted" in result.stopped
    ledger = json.loads((tmp_path / "tune" / LEDGER).read_text())
    assert [(run["experiment"], run["repeat"]) for run in ledger["runs"]] == [
        (BASELINE, 1), ("exp_01_ONEDNN_MAX_CPU_ISA-AVX2", 1), ("exp_02_all-workers-2", 1)]
    again = FakeTrainer({AVX2.label: 0.5})
    result = tuner(tmp_path, again, fixed(), repeats=2).tune()  # candidates come from the ledger
    assert again.calls == ["baseline/repeat_2", "exp_01_ONEDNN_MAX_CPU_ISA-AVX2/repeat_2",
                           "exp_02_all-workers-2/repeat_2"]
    assert by_label(result)[AVX2.label]["verdict"] == "faster" and not result.interrupted
    assert tuner(tmp_path, FakeTrainer({}), fixed(), repeats=2).tune().experiments  # nothing left: no run
    with pytest.raises(PerfkitError, match="another baseline"):
        class Other(FakeTrainer):
            def describe(self):
                return {"kind": "other"}
        tuner(tmp_path, Other({}), fixed()).tune()


def test_budget_of_experiments_and_minutes(tmp_path):
    result = tuner(tmp_path / "a", FakeTrainer({}), fixed(AVX2, WORKERS, O3), max_experiments=1).tune()
    assert [row["label"] for row in result.experiments] == [AVX2.label]
    assert any("over --max-experiments 1" in line and WORKERS.label in line for line in result.skipped)
    clock = Clock()
    trainer = FakeTrainer({}, clock=clock, seconds=60)
    result = tuner(tmp_path / "b", trainer, fixed(AVX2, WORKERS), repeats=2, max_minutes=2.5).tune()
    assert trainer.calls == ["baseline/repeat_1", "exp_01_ONEDNN_MAX_CPU_ISA-AVX2/repeat_1"]
    assert "--max-minutes 2.5 reached" in result.stopped
    # judged on what finished: the second candidate has no run
    assert by_label(result)[WORKERS.label]["verdict"] == "not run"
    with pytest.raises(PerfkitError, match="less than one run"):
        small = FakeTrainer({}, clock=Clock(), seconds=60)
        tuner(tmp_path / "c", small, fixed(AVX2), max_minutes=1.5).tune()


def test_a_broken_or_inapplicable_change_is_said_and_never_kept(tmp_path):
    trainer = FakeTrainer({O3.label: 0.5}, broken=O3.label, inapplicable=GRAPH.label)
    result = tuner(tmp_path, trainer, fixed(O3, GRAPH, AVX2), repeats=2).tune()
    rows = by_label(result)
    assert rows[O3.label]["verdict"] == "broke the run" and "NaN" in rows[O3.label]["error"]
    assert rows[O3.label]["output_tail"] == "step 2 loss nan"
    assert rows[GRAPH.label]["verdict"] == "not applicable" and "no Model" in rows[GRAPH.label]["error"]
    # neither is run again in the second round, nor best
    assert sum(call.startswith("exp_01") for call in trainer.calls) == 1
    assert sum(call.startswith("exp_02") for call in trainer.calls) == 1
    assert result.best is None
    text = tune_text(result, None)
    assert "amp_level=O3: broke the run: the loss was NaN at step 2" in text and "step 2 loss nan" in text


def test_a_failing_baseline_stops_with_its_error(tmp_path):
    said = []
    trainer = FakeTrainer({}, baseline_error=True)
    with pytest.raises(PerfkitError, match="the baseline failed .the script exited with code 1."):
        Tuner(trainer, tmp_path / "tune", Budget(), say=said.append, candidates=fixed(AVX2)).tune()
    assert trainer.calls == ["baseline/repeat_1"] and any("ValueError: bad" in line for line in said)


def test_too_noisy_to_decide_says_cannot_tell_with_the_noise(tmp_path):
    result = tuner(tmp_path, FakeTrainer({AVX2.label: 0.95}, noise=0.4), fixed(AVX2), repeats=2).tune()
    row = by_label(result)[AVX2.label]
    assert row["verdict"] == CANNOT_TELL and row["noise_pct"] > 10
    assert f"cannot tell; noise ±{row['noise_pct']:.0f} %" in tune_text(result, None)
    payload = tune_dict(result, None)
    assert payload["best"] is None and payload["experiments"][0]["verdict"] == CANNOT_TELL
    assert set(payload["experiments"][0]) >= {"change", "before", "after", "speedup", "interval", "verdict"}


def test_a_larger_batch_is_judged_per_sample_or_not_at_all(tmp_path):
    bigger = Change("batch_size", 2 * BATCH)
    # twice the batch in 1.5x the time: each step is slower, each sample faster
    result = tuner(tmp_path / "known", FakeTrainer({bigger.label: 1.5}), fixed(bigger)).tune()
    row = by_label(result)[bigger.label]
    assert row["verdict"] == "faster" and row["speedup"] == pytest.approx(2 / 1.5, rel=0.05)
    assert row["after"]["samples_per_s"] == pytest.approx(2 * BATCH * 1000 / (1.5 * BASE_MS), rel=0.05)
    # a script whose runs do not tell their batch: its step times cannot be compared
    unknown = tuner(tmp_path / "unknown", FakeTrainer({bigger.label: 1.5}, record_batch=False), fixed(bigger)).tune()
    assert by_label(unknown)[bigger.label]["verdict"] == "cannot tell: batch size unknown"


def test_propose_takes_findings_tries_and_standard_once_each(tmp_path, monkeypatch):
    import perfkit.apps.tune as tune_module
    write_run(tmp_path / "run", [BASE_MS] * 4)
    run = perfkit.load(str(tmp_path / "run"))
    monkeypatch.setattr(tune_module, "cpu_flags", lambda: {"avx2", "avx512f"})
    monkeypatch.setattr(tune_module.os, "cpu_count", lambda: 4)
    chosen, skipped = propose(run, [AVX2, Change("mode", "graph"), Change("profiler_warmup", 1)])
    assert [c.label for c in chosen] == [AVX2.label, "all workers=4"]
    assert chosen[0].source == "--try"  # the standard ISA cap is the same change: tried once
    assert any("mode=graph" in line and "has it already" in line for line in skipped)
    assert any("profiler_warmup=1" in line and "what is measured" in line for line in skipped)
    monkeypatch.setattr(tune_module, "cpu_flags", lambda: {"avx2"})
    assert [c.label for c in propose(run)[0]] == ["all workers=4"]  # no AVX-512: no ISA cap


def test_parse_change():
    assert parse_change("env:OMP_NUM_THREADS=2") == Change("env", "2", name="OMP_NUM_THREADS")
    assert parse_change("dataset_workers:map=4") == Change("dataset_workers", 4, op="map")
    assert parse_change("sink_mode=true") == Change("sink_mode", True)
    for bad in ("amp_level=O9", "dataset_workers=0", "warp=3", "env=1", "batch_size=x"):
        with pytest.raises(ValueError):
            parse_change(bad)


SCRIPT = '''"""A user's script."""
import os

import mindspore as ms
import mindspore.dataset as ds
from mindspore.train import Model

ms.set_context(mode=ms.PYNATIVE_MODE)
data = ds.GeneratorDataset(source, ["x", "y"]).map(operations=ops, input_columns="x", num_parallel_workers=1)
data = data.batch(16, drop_remainder=True)
model = Model(net, loss_fn=loss, optimizer=opt, amp_level="O0")
model.train(1, data)
'''


def test_patch_edits_literals_and_says_what_to_add(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    changes = (AVX2, Change("dataset_workers", 4, op="map"), Change("amp_level", "O2"), GRAPH,
               Change("batch_size", 32), Change("sink_mode", True), Change("prefetch", 8))
    patch = script_patch(script, changes)
    removed = [line[1:] for line in patch.diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line[1:] for line in patch.diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == [SCRIPT.splitlines()[i] for i in (7, 8, 9, 10)]
    assert added == ["os.environ['ONEDNN_MAX_CPU_ISA'] = 'AVX2'  # perfkit tune",
                     "ms.set_context(mode=ms.GRAPH_MODE)",
                     'data = ds.GeneratorDataset(source, ["x", "y"]).map(operations=ops, input_columns="x", '
                     'num_parallel_workers=4)',
                     "data = data.batch(32, drop_remainder=True)",
                     "model = Model(net, loss_fn=loss, optimizer=opt, amp_level='O2')"]
    # the env line goes before `import mindspore`; os is imported already
    patched = [line for line in patch.diff.splitlines() if not line.startswith(("---", "+++", "@@", "-"))]
    assert patched.index("+os.environ['ONEDNN_MAX_CPU_ISA'] = 'AVX2'  # perfkit tune") < patched.index(
        " import mindspore as ms")
    # no literal to change: the line to add, and where
    assert patch.add == ["line 12: add dataset_sink_mode=True to the train(...) call",
                         "mindspore.dataset.config.set_prefetch_size(8)"]
    built_in = command_patch(["--steps", "3"], (AVX2, Change("dataset_workers", 2, op="all")))
    assert built_in.command == "perfkit profile --steps 3 --env ONEDNN_MAX_CPU_ISA=AVX2 --workers 2"


def test_hook_override_sets_the_argument_however_it_was_passed():
    class Model:
        def train(self, epoch, dataset, callbacks=None, dataset_sink_mode=False):
            return dataset_sink_mode, callbacks

    seen = []
    _override(Model, "train", "dataset_sink_mode", lambda given: seen.append(given) or True)
    assert Model().train(1, "data") == (True, None)
    assert Model().train(1, "data", None, False) == (True, None)
    assert Model().train(1, "data", dataset_sink_mode=False, callbacks=["cb"]) == (True, ["cb"])
    assert seen == [None, False, False]


@pytest.mark.parametrize("args, message", [
    (["tune", "--try", "amp_level=O9"], "--try amp_level is one of O0, O1, O2, O3"),
    (["tune", "--"], "no command after `--`"),
    (["tune", "--ranks", "2"], "--ranks: perfkit tune runs one process per experiment"),
    (["tune", "--repeat", "2"], "--repeat: perfkit tune makes the runs of each setting itself"),
    (["tune", "--image-size", "32", "--", "python", "train.py"], "--image-size: for the built-in ResNet-50 run"),
])
def test_cli_refuses_bad_input_in_one_line(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_cli_refuses_a_folder_that_is_not_a_tune(tmp_path):
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("mine")
    result = CliRunner().invoke(main, ["tune", "--output", str(tmp_path / "other"), "--steps", "1"])
    assert result.exit_code == 2 and "is not a tune folder" in result.output


def test_hook_applies_changes_to_an_unchanged_script_with_real_mindspore(tmp_path):
    """tests/scripts/model_train.py (common.py's tiny dataset: 4 batches of 2) under the start-up hook: the batch
    of 4 halves its steps, every change the script reaches is counted, the map it never calls is not (about 15 s)."""
    import os
    import subprocess
    import sys

    from perfkit.profiler.script import HOOK_DIR
    root = Path(__file__).resolve().parents[1]
    report = tmp_path / "applied.json"
    changes = [GRAPH, Change("amp_level", "O0"), Change("batch_size", 4), Change("dataset_workers", 2, op="map"),
               Change("sink_mode", False)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOK_DIR), str(root)]),
           "PERFKIT_TUNE": json.dumps({"changes": [c.to_dict() for c in changes], "report": str(report)})}
    done = subprocess.run([sys.executable, "model_train.py", "--step-timer"], cwd=root / "tests" / "scripts", env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "timed 2 steps" in done.stdout  # 8 samples in batches of 4, not 2
    assert json.loads(report.read_text()) == {"applied": {"mode": 1, "amp_level": 1, "batch_size": 1,
                                                          "dataset_workers.map": 0, "sink_mode": 1},
                                              "notes": [], "nan_loss_step": None}


def test_output_tail_ends_at_the_scripts_exception(tmp_path):
    """The shape of a real failed run's log (perfkit tune -- python tests/scripts/model_train.py --crash): the
    traceback, then MindSpore's analysis progress and perfkit's own line."""
    from perfkit.apps.tune_runners import _tail
    frames = [f'  File "train.py", line {n}, in step\n    call_{n}()\n' for n in range(30)]
    log = tmp_path / "repeat_1.log"
    log.write_text("epoch 1\n\nTraceback (most recent call last):\n" + "".join(frames)
                   + "RuntimeError: the user's bug at step 3\n[13449] Start parsing profiling data: /x\n"
                   + "[13449] Parsing: [####   ] 1/2 FrameworkParser Elapsed: 0s\r[13449] Parsing: [#####] 2/2 Done\n"
                   + "perfkit: the script failed (exit code 1)\n")
    tail = _tail(log).splitlines()
    assert tail[-1] == "RuntimeError: the user's bug at step 3" and len(tail) == 20
    assert tail[-2] == "    call_29()" and not any("Parsing" in line for line in tail)
    log.write_text("one\n\ntwo\n")
    assert _tail(log) == "one\ntwo"


def test_the_tune_hook_loads_only_the_standard_library():
    """It runs at start-up in every process of a tune run, before the script."""
    import os
    import subprocess
    import sys
    code = ("import sys; import perfkit.profiler.tune_hook; "
            "assert not {'pandas', 'numpy', 'click', 'mindspore'} & set(sys.modules), 'heavy import'")
    subprocess.run([sys.executable, "-c", code], check=True,
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})

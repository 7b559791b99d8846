"""`perfkit profile`: real MindSpore training on the CPU (small: 32x32 images, batch 8, 2 steps).

One single-rank run and one --ranks 2 run are shared by the assertions about them; the Ctrl-C,
dead-rank, never-overwrite and bad-input cases each make their own (or none, where perfkit refuses
before training).
"""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from profile_helpers import (
    LONG_STEPS,
    PERFKIT,
    SMALL_FLAGS,
    WAIT_SECONDS,
    assert_nothing_left,
    manifest,
    process_tree,
    training_process,
    wait_for_profiler_start,
    wait_for_recorded_step,
)

import perfkit
from perfkit.apps.cli import main
from perfkit.profiler import cifar
from perfkit.profiler.launch import ProfileRequest, isa_cap, profile
from perfkit.profiler.runfolder import claim, next_free

SMALL = dict(steps=2, warmup=1, batch_size=8, image_size=32)
STEP_SPLIT_TOLERANCE = 0.05  # the acceptance bound for interval + fwd_bwd + tail vs wall time


def raw_ops(folder: Path) -> list[tuple[str, int, float]]:
    """(op name, start epoch ns, duration ms) of every op execution, read straight from MindSpore's file."""
    (timestamps,) = folder.glob("*_ascend_ms/FRAMEWORK/cpu_op_execute_timestamp_*.txt")
    ops = []
    for line in timestamps.read_text().splitlines():
        name, _, records = line.split(";", 2)
        for record in records.split():
            start, duration, _ = record.split(",")
            ops.append((name, int(start), float(duration)))
    return ops


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("profile") / "profiler_v1"
    outcome = profile(ProfileRequest(**SMALL, env={"PERFKIT_TEST_MARK": "1"}, output=str(out)),
                      say=lambda text: None)
    assert outcome.status == "ok"
    return outcome.folder


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("profile_ranks") / "dp2"
    return profile(ProfileRequest(**SMALL, ranks=2, output=str(out)), say=lambda text: None).folder


@pytest.mark.mindspore
def test_manifest_records_the_run(single):
    recorded = manifest(single)
    assert recorded["status"] == "ok" and recorded["error"] is None
    assert (recorded["device"], recorded["rank"], recorded["rank_size"]) == ("CPU", 0, 1)
    assert recorded["mindspore_version"].startswith("2.")
    assert recorded["perfkit_version"] == perfkit.__version__
    assert recorded["config"] == {**recorded["config"], **SMALL, "device": "auto", "ranks": 1, "sink": True,
                                  "env": {"PERFKIT_TEST_MARK": "1"}}
    # on a host with AVX-512 (the host facts it recorded) the built-in run also caps oneDNN's ISA, and says so
    capped, cap_notes = isa_cap(ProfileRequest(**SMALL, env={"PERFKIT_TEST_MARK": "1"}), recorded["host"])
    assert recorded["env"] == {"PERFKIT_TEST_MARK": "1", **capped}
    assert all(note in recorded["notes"] for note in cap_notes)
    # CPU has no dataset sink mode: the run fell back to feed mode, said so and recorded it.
    assert recorded["used"] == {"sink": False, "amp_level": "O0", "mode": "graph"}
    assert any("sink" in note for note in recorded["notes"])
    assert recorded["synthetic_data"] is True
    steps = recorded["steps"]
    assert [step["step"] for step in steps] == [1, 2]
    assert all(step["begin_ns"] < step["end_ns"] for step in steps)
    assert steps[0]["end_ns"] == steps[1]["begin_ns"]  # a step runs from the previous step's end


@pytest.mark.mindspore
def test_layout_holds_mindspore_and_minddata_files(single):
    assert (single / "train.log").is_file()
    for name in ("cpu_op_type_info_0.csv", "cpu_op_detail_info_0.csv", "cpu_op_execute_timestamp_0.txt",
                 "cpu_framework_0.txt"):
        assert len(list(single.glob(f"*_ascend_ms/FRAMEWORK/{name}"))) == 1, name
    for name in ("pipeline_profiling_0.json", "minddata_cpu_utilization_0.json", "dataset_iterator_profiling_0.txt"):
        assert (single / "md" / name).is_file(), name


@pytest.mark.mindspore
def test_warmup_is_kept_out_of_the_profile(single):
    steps = manifest(single)["steps"]
    ops = raw_ops(single)
    assert ops
    assert all(steps[0]["begin_ns"] <= start < steps[-1]["end_ns"] for _, start, _ in ops)
    # Each profiled step ran the same graph: the same number of op executions in each.
    per_step = [sum(step["begin_ns"] <= start < step["end_ns"] for _, start, _ in ops) for step in steps]
    assert per_step[0] == per_step[1] > 0


@pytest.mark.mindspore
def test_run_loads_with_step_split_op_types_and_host_queue(single):
    run = perfkit.load(single)
    assert run.meta.device == "CPU" and run.meta.status == "ok"
    assert sorted(run.steps["step"]) == [1, 2]
    for step in manifest(single)["steps"]:
        row = run.steps[run.steps["step"] == step["step"]].iloc[0]
        wall_ms = (step["end_ns"] - step["begin_ns"]) / 1e6
        parts = row["interval_ms"] + row["fwd_bwd_ms"] + row["tail_ms"]
        assert parts == pytest.approx(wall_ms, rel=STEP_SPLIT_TOLERANCE)
    types = set(run.op_types["type"])
    assert {"Conv2D", "BatchNorm"} <= types
    (type_file,) = single.glob("*_ascend_ms/FRAMEWORK/cpu_op_type_info_0.csv")
    with open(type_file, newline="") as handle:
        conv_ms = next(float(row[3]) for row in csv.reader(handle) if row[0] == "Conv2D")
    loaded = run.op_types.loc[run.op_types["type"] == "Conv2D", "total_ms"].sum()
    assert loaded == pytest.approx(conv_ms, rel=1e-3)
    assert len(run.host_queue) > 0


@pytest.mark.mindspore
def test_two_ranks_give_two_loadable_ranks(two_ranks):
    top = manifest(two_ranks)
    assert (top["rank"], top["rank_size"], top["status"]) == (None, 2, "ok")
    for rank in (0, 1):
        recorded = manifest(two_ranks / f"rank_{rank}")
        assert (recorded["rank"], recorded["status"]) == (rank, "ok")
        assert [step["step"] for step in recorded["steps"]] == [1, 2]
        assert list((two_ranks / f"rank_{rank}").glob(f"*_ascend_ms/FRAMEWORK/cpu_op_type_info_{rank}.csv"))
    run = perfkit.load(two_ranks)
    assert run.ranks == [0, 1]
    assert sorted(run.steps.groupby("rank")["step"].nunique().items()) == [(0, 2), (1, 2)]


@pytest.mark.mindspore
def test_sigint_to_the_child_leaves_an_interrupted_loadable_run_next_to_the_first(single):
    before = (single / "perfkit_run.json").read_bytes()
    process = subprocess.Popen([*PERFKIT, "profile", *SMALL_FLAGS[2:], "--steps", LONG_STEPS, "--output", str(single)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = single.with_name("profiler_v2")  # never overwritten: v1 exists
    child = training_process(process, rank=0)
    wait_for_profiler_start(second, process)
    time.sleep(2)  # a few profiled steps
    child.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=WAIT_SECONDS)
    assert process.returncode == 130, stderr
    assert "profiler_v2" in stderr
    assert (single / "perfkit_run.json").read_bytes() == before
    recorded = manifest(second)
    assert recorded["status"] == "interrupted"
    assert 0 < len(recorded["steps"]) < int(LONG_STEPS)
    run = perfkit.load(second)
    assert run.meta.status == "interrupted"
    assert len(run.steps) == len(recorded["steps"])
    assert "perfkit dash" in stdout


@pytest.mark.mindspore
def test_a_dead_rank_stops_the_others_and_is_named_with_its_log(tmp_path):
    out = tmp_path / "dp2"
    process = subprocess.Popen([*PERFKIT, "profile", "--ranks", "2", *SMALL_FLAGS[2:], "--steps", LONG_STEPS,
                                "--output", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = training_process(process, rank=1)
    wait_for_profiler_start(out / "rank_1", process)
    wait_for_recorded_step(out / "rank_0", process)
    tree = process_tree(process)  # msrun, its scheduler, both ranks
    victim.kill()
    _, stderr = process.communicate(timeout=WAIT_SECONDS)
    assert process.returncode == 2
    error = stderr.strip().splitlines()[-1]
    assert "rank 1" in error and str(out / "rank_1" / "train.log") in error
    top = manifest(out)
    assert top["status"] == "failed" and top["error"].startswith("rank 1: ")
    dead, survivor = manifest(out / "rank_1"), manifest(out / "rank_0")
    assert dead["status"] == "failed" and "SIGKILL" in dead["error"]
    # msrun kills the other rank at once: it is marked, and keeps the step times it recorded.
    assert survivor["status"] == "failed" and "stopped before finishing" in survivor["error"]
    assert survivor["steps"] and all(step["begin_ns"] < step["end_ns"] for step in survivor["steps"])
    # what was collected loads: the survivor's recorded step times make its steps, the failure is in warnings
    loaded = perfkit.load(out)
    assert loaded.meta.status == "failed" and 0 in loaded.ranks
    assert loaded.steps[loaded.steps["rank"] == 0]["step"].tolist() == [s["step"] for s in survivor["steps"]]
    assert_nothing_left(tree, out)


@pytest.mark.mindspore
@pytest.mark.parametrize("device", ["Ascend", "GPU"])
def test_unavailable_device_is_one_line_and_leaves_no_folder(tmp_path, device):
    result = CliRunner().invoke(main, ["profile", "--device", device, *SMALL_FLAGS, "--output",
                                       str(tmp_path / "profiler_v1")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("perfkit: error: device ") and device in lines[0]
    assert "MindSpore reported: Unsupported device target" in lines[0]
    assert list(tmp_path.iterdir()) == []


def write_batch(path: Path, labels: np.ndarray) -> None:
    records = np.zeros((len(labels), cifar.RECORD_BYTES), dtype=np.uint8)
    records[:, 0] = labels
    records.tofile(path)


@pytest.mark.parametrize("make, problem", [
    (lambda folder: None, "no data_batch_*.bin"),
    (lambda folder: (folder / "data_batch_1.bin").write_bytes(b"not cifar"), "not a whole number of 3073-byte"),
    (lambda folder: write_batch(folder / "data_batch_1.bin", np.array([3, 12, 1])), "record 1 has label 12"),
])
def test_bad_data_path_is_one_line_exit_2(tmp_path, make, problem):
    data = tmp_path / "data"
    data.mkdir()
    make(data)
    result = CliRunner().invoke(main, ["profile", "--data-path", str(data), "--output", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and problem in result.stderr and str(data) in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_shard_too_small_for_the_steps_is_refused_before_training(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_batch(data / "data_batch_1.bin", np.arange(400) % 10)
    result = CliRunner().invoke(main, ["profile", "--data-path", str(data), "--batch-size", "32", "--output",
                                       str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "holds 10 images = 0 batches of 32" in result.stderr


def test_synthetic_cifar_is_in_the_binary_format(tmp_path):
    folder = cifar.synthetic(tmp_path / "cache")
    names = sorted(path.name for path in folder.iterdir())
    assert names == ["batches.meta.txt", "data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                     "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"]
    for name in names[1:]:
        raw = np.fromfile(folder / name, dtype=np.uint8).reshape(10_000, 1 + 32 * 32 * 3)
        assert raw[:, 0].max() <= 9
    assert len((folder / "batches.meta.txt").read_text().split()) == 10
    assert cifar.synthetic(tmp_path / "cache") == folder  # reused, not regenerated
    assert cifar.training_records(tmp_path / "cache") == (folder, 50_000)


def test_never_overwrite_picks_the_next_free_version(tmp_path):
    assert next_free(tmp_path / "profiler_v1") == tmp_path / "profiler_v1"
    (tmp_path / "profiler_v1").mkdir()
    (tmp_path / "profiler_v3").mkdir()
    assert claim(tmp_path / "profiler_v1") == tmp_path / "profiler_v2"
    assert claim(tmp_path / "profiler_v1") == tmp_path / "profiler_v4"
    (tmp_path / "run").mkdir()
    assert next_free(tmp_path / "run") == tmp_path / "run_2"


def test_env_flag_must_be_key_value(tmp_path):
    result = CliRunner().invoke(main, ["profile", "--env", "NOT A PAIR", "--output", str(tmp_path / "out")])
    assert result.exit_code == 2 and "KEY=VALUE" in result.stderr


def test_importing_perfkit_and_its_profile_command_does_not_import_mindspore():
    code = ("import sys, perfkit, perfkit.apps.cli, perfkit.profiler; "
            "from click.testing import CliRunner; CliRunner().invoke(perfkit.apps.cli.main, ['profile', '--help']); "
            "assert 'mindspore' not in sys.modules, 'mindspore imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_profile_help_has_an_example():
    result = CliRunner().invoke(main, ["profile", "--help"])
    assert result.exit_code == 0
    assert "Example:" in result.output and "perfkit profile --steps 3" in result.output
    assert "32 on CPU" in result.output


@pytest.mark.mindspore
def test_the_readme_main_job_prints_only_perfkit_s_own_lines(tmp_path):
    """The README's main job: pip quiet (errors only, no upgrade notice), then `perfkit profile` without a
    terminal: every stderr line is perfkit's (a `perfkit:` line or a progress label, one per line), stdout the
    summary; MindSpore's log goes to train.log."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (job,) = [line.strip() for line in readme.splitlines() if "python3 -m venv .venv" in line]
    install = job.split("&&")[1].split()
    assert install[:3] == [".venv/bin/pip", "install", "-q"] and "--disable-pip-version-check" in install
    assert job.split("&&")[2].split() == [".venv/bin/perfkit", "profile"]
    done = subprocess.run([*PERFKIT, "profile", *SMALL_FLAGS, "--output", str(tmp_path / "profiler_v1")],
                          capture_output=True, text=True, timeout=WAIT_SECONDS, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    labels = {"compiling (warmup)", "training (profiled steps)", "analysing profile"}  # launch.py's progress bars
    assert [line for line in done.stderr.splitlines() if not line.startswith("perfkit: ") and line not in labels] == []
    assert {"compiling (warmup)", "analysing profile"} <= set(done.stderr.splitlines())
    assert done.stdout.startswith("run ") and "perfkit dash" in done.stdout
    log = (tmp_path / "profiler_v1" / "train.log").read_text()
    assert "[WARNING] ME(" in log  # MindSpore's own log, kept from the terminal

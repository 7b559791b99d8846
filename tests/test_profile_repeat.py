"""`perfkit profile --repeat N` (built-in and own-script forms) and `perfkit compare` over its folders.

Most tests replace the runner with a fake that writes a copy of sample_runs/cpu_default (a real run) as the run
folder, its manifest config set to the request as the real runner records it; one small real run checks the
whole path with MindSpore.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.apps.cli import main
from perfkit.profiler.launch import ProfileOutcome
from perfkit.profiler.runfolder import claim

SAMPLE = Path(__file__).resolve().parents[1] / "sample_runs" / "cpu_default"
pytestmark = pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample_runs not made")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))


class FakeRunner:
    """Stands in for launch.profile / script.profile_script: records each request with its start and end."""

    def __init__(self, statuses=()):
        self.calls: list[tuple[object, float, float]] = []
        self.statuses = list(statuses)

    def __call__(self, request, say=None) -> ProfileOutcome:
        start = time.monotonic()
        folder = claim(request.output)
        shutil.rmtree(folder)
        shutil.copytree(SAMPLE, folder)
        manifest = json.loads((folder / "perfkit_run.json").read_text())
        manifest["config"] = {key: value for key, value in dataclasses.asdict(request).items() if key != "command"}
        (folder / "perfkit_run.json").write_text(json.dumps(manifest))
        self.calls.append((request, start, time.monotonic()))
        status = self.statuses.pop(0) if self.statuses else "ok"
        return ProfileOutcome(folder=folder, status=status, notes=["a note said once"],
                              exit_code=0 if status == "ok" else 1)


@pytest.fixture
def fake_resnet(monkeypatch):
    runner = FakeRunner()
    monkeypatch.setattr("perfkit.profiler.launch.profile", runner)
    return runner


def test_repeat_writes_n_complete_folders_of_the_same_settings_one_after_another(tmp_path, fake_resnet):
    out = tmp_path / "base"
    result = CliRunner().invoke(main, ["profile", "--repeat", "3", "--batch-size", "8", "--image-size", "16",
                                       "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(child.name for child in out.iterdir()) == ["repeat_1", "repeat_2", "repeat_3"]
    for index in (1, 2, 3):
        assert (out / f"repeat_{index}" / "perfkit_run.json").is_file()
    requests = [request for request, _, _ in fake_resnet.calls]
    assert [request.output for request in requests] == [str(out / f"repeat_{i}") for i in (1, 2, 3)]
    assert len({json.dumps(dataclasses.asdict(dataclasses.replace(r, output=""))) for r in requests}) == 1
    assert requests[0].batch_size == 8 and requests[0].image_size == 16
    for (_, _, ended), (_, started, _) in zip(fake_resnet.calls, fake_resnet.calls[1:]):
        assert started >= ended  # one after another
    assert f"repeat 3 of 3: {out / 'repeat_3'}  ok, mean step 1,155.2 ms" in result.output
    assert f"perfkit compare {out} OTHER" in result.output
    # compare reads the folder as a group of three runs: judged over run means
    other = tmp_path / "other"
    assert CliRunner().invoke(main, ["profile", "--repeat", "2", "--output", str(other)]).exit_code == 0
    payload = json.loads(CliRunner().invoke(main, ["compare", str(out), str(other), "--format", "json"]).stdout)
    assert payload["runs_a"] == [str(out / f"repeat_{i}") for i in (1, 2, 3)]
    assert payload["verdict"]["basis"] == "run means" and payload["verdict"]["n_b"] == 2


def test_repeat_never_overwrites_and_stops_after_a_failed_repeat(tmp_path, monkeypatch):
    runner = FakeRunner(statuses=["ok", "failed"])
    monkeypatch.setattr("perfkit.profiler.launch.profile", runner)
    (tmp_path / "base").mkdir()
    result = CliRunner().invoke(main, ["profile", "--repeat", "4", "--output", str(tmp_path / "base")])
    assert sorted(child.name for child in (tmp_path / "base_2").iterdir()) == ["repeat_1", "repeat_2"]
    assert len(runner.calls) == 2 and "stopped after repeat 2: it ended failed" in result.output
    assert not any((tmp_path / "base").iterdir())  # the existing folder untouched


def test_repeat_of_a_refused_run_leaves_no_folder(tmp_path):
    result = CliRunner().invoke(main, ["profile", "--repeat", "2", "--data-path", str(tmp_path / "missing"),
                                       "--output", str(tmp_path / "base")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert not (tmp_path / "base").exists()


def test_repeat_of_an_own_script(tmp_path, monkeypatch):
    runner = FakeRunner()
    monkeypatch.setattr("perfkit.profiler.script.profile_script", runner)
    out = tmp_path / "mine"
    result = CliRunner().invoke(main, ["profile", "--repeat", "2", "--output", str(out), "--", "python", "train.py"])
    assert result.exit_code == 0, result.output
    assert [request.command for request, _, _ in runner.calls] == [["python", "train.py"]] * 2
    assert sorted(child.name for child in out.iterdir()) == ["repeat_1", "repeat_2"]
    assert result.stderr.count("perfkit: warning: a note said once") == 1


def test_repeats_of_different_settings_are_refused_through_the_cli(tmp_path, fake_resnet):
    out = tmp_path / "base"
    assert CliRunner().invoke(main, ["profile", "--repeat", "2", "--output", str(out)]).exit_code == 0
    manifest_path = out / "repeat_2" / "perfkit_run.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["config"]["workers"] = 4  # as if repeat_2 were made with --workers 4
    manifest_path.write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["compare", str(out), str(SAMPLE)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr == (f"perfkit: error: {out / 'repeat_2'}: not a repeat of {out / 'repeat_1'}: "
                             "workers is 4, not -\n")


def test_a_run_compared_with_itself_is_no_change_and_passes_the_gate(tmp_path, fake_resnet):
    out = tmp_path / "base"
    assert CliRunner().invoke(main, ["profile", "--repeat", "2", "--output", str(out)]).exit_code == 0
    for sides in ([str(SAMPLE), str(SAMPLE)], [str(out), str(out)]):
        result = CliRunner().invoke(main, ["compare", *sides, "--fail-if-slower", "0"])
        assert result.exit_code == 0, result.output
        assert "verdict      no change: A and B are the same run" in result.stdout


@pytest.mark.mindspore
def test_a_real_repeat_2_and_its_a_a_pair_never_fails_the_gate(tmp_path):
    """Real MindSpore, small (16x16 images, batch 4, 2 steps): two complete folders with their manifests."""
    out = tmp_path / "aa"
    result = CliRunner().invoke(main, ["profile", "--repeat", "2", "--steps", "2", "--batch-size", "4",
                                       "--image-size", "16", "--env", "ONEDNN_MAX_CPU_ISA=AVX2", "--output", str(out)])
    assert result.exit_code == 0, result.output
    manifests = [json.loads((out / f"repeat_{i}" / "perfkit_run.json").read_text()) for i in (1, 2)]
    assert [m["status"] for m in manifests] == ["ok", "ok"] and all(len(m["steps"]) == 2 for m in manifests)
    assert manifests[0]["finished_at"] <= manifests[1]["started_at"]  # one after another
    gate = CliRunner().invoke(main, ["compare", str(out / "repeat_1"), str(out / "repeat_2"), "--fail-if-slower", "0"])
    assert gate.exit_code == 0, gate.output
    assert "verdict      no significant change" in gate.stdout


def _failed_second_repeat(tmp_path) -> Path:
    """A --repeat 3 folder whose repeat_2 failed as a script's failure leaves it (manifest status failed)."""
    out = tmp_path / "base"
    for index in (1, 2, 3):
        shutil.copytree(SAMPLE, out / f"repeat_{index}")
    manifest = json.loads((out / "repeat_2" / "perfkit_run.json").read_text())
    manifest.update(status="failed", error="the script exited with code 1", steps=[])
    (out / "repeat_2" / "perfkit_run.json").write_text(json.dumps(manifest))
    for child in (out / "repeat_2").iterdir():
        if child.is_dir():
            shutil.rmtree(child)
    return out


def test_compare_leaves_a_failed_repeat_out_and_names_it(tmp_path):
    out = _failed_second_repeat(tmp_path)
    result = CliRunner().invoke(main, ["compare", str(out), str(SAMPLE), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == (f"perfkit: warning: {out / 'repeat_2'}: this repeat failed (the script exited with code "
                             "1): compared without it\n")
    assert json.loads(result.stdout)["verdict"]["n_a"] == 2  # repeats 1 and 3


def test_a_folder_of_repeats_read_as_one_run_points_at_the_repeats_and_compare(tmp_path, fake_resnet):
    out = tmp_path / "base"
    assert CliRunner().invoke(main, ["profile", "--repeat", "2", "--output", str(out)]).exit_code == 0
    for command in (["summary", str(out)], ["report", str(out), "-o", str(tmp_path / "r.html")]):
        result = CliRunner().invoke(main, command)
        assert result.exit_code == 2 and "--cycle" not in result.output, result.output
        assert result.stderr == (f"perfkit: error: {out}: holds 2 repeats of `perfkit profile --repeat` "
                                 f"(repeat_1..repeat_2), runs of one setting: compare them with another setting by "
                                 f"`perfkit compare {out} OTHER`, or read one: {out / 'repeat_1'}\n")


@pytest.mark.parametrize("digits", ["３", "٣", "2\u0663"])
def test_repeat_counts_are_ascii_digits(digits, tmp_path, fake_resnet):
    result = CliRunner().invoke(main, ["profile", "--repeat", digits, "--output", str(tmp_path / "out")])
    assert result.exit_code == 2 and "not a whole number in digits 0-9" in result.output
    assert not fake_resnet.calls and not (tmp_path / "out").exists()


@pytest.mark.mindspore
def test_ctrl_c_while_a_repeat_imports_mindspore_is_quiet_and_keeps_repeat_1(tmp_path):
    """tests/scripts/run_interrupt_import.py: repeat 2's script is SIGINTed as `import mindspore` reaches the
    module perfkit's start-up hook waits for. No traceback, no "Fatal Python error" from MindSpore's exit
    handlers, exit code 130, repeat_1 kept (about 20 s)."""
    import subprocess
    import sys
    scripts = Path(__file__).resolve().parent / "scripts"
    root = scripts.parents[1]
    done = subprocess.run([sys.executable, "-m", "perfkit", "profile", "--repeat", "3", "--output",
                           str(tmp_path / "out"), "--", "python", "run_interrupt_import.py", str(tmp_path / "count")],
                          cwd=scripts, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)})
    output = done.stdout + done.stderr
    assert done.returncode == 130, output
    assert "Traceback" not in output and "Fatal Python error" not in output, output
    assert "SIGINT while the script imported mindspore" in output
    statuses = [json.loads((tmp_path / "out" / f"repeat_{i}" / "perfkit_run.json").read_text())["status"]
                for i in (1, 2)]
    assert statuses == ["ok", "interrupted"] and not (tmp_path / "out" / "repeat_3").exists()

"""Kept answers: a warm `perfkit summary|advise|ranks` prints what the cold one did, and never an answer
about files or code that changed since."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS

from perfkit.apps.cli import main
from perfkit.io import cache


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture
def run(tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(FIXTURE_RUNS["legacy_run_2"], copy)
    for path in copy.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return copy


@pytest.fixture
def computed(monkeypatch) -> list:
    """Every question that was computed rather than answered from the cache."""
    calls = []
    for name in ("store_answer", "store_read_answer"):  # summary and advise keep theirs with what they read
        original = getattr(cache, name)
        monkeypatch.setattr(cache, name, lambda entry, output, *rest, original=original: calls.append(output) or
                            original(entry, output, *rest))
    return calls


def test_second_question_is_answered_from_the_cache(run, cache_dir, computed):
    first = invoke("summary", str(run))
    second = invoke("summary", str(run))
    assert first.exit_code == second.exit_code == 0
    assert second.output == first.output and len(computed) == 1
    invoke("summary", "--format", "json", str(run))
    assert len(computed) == 2, "another format is another question"


def test_a_changed_file_is_a_new_answer(run, cache_dir, computed):
    before = invoke("summary", "--format", "json", str(run)).output
    step_trace = run / "step_trace_raw_1_detail_time.csv"
    step_trace.write_text(step_trace.read_text() + "\n")  # the same rows, a new size and mtime
    after = invoke("summary", "--format", "json", str(run)).output
    assert len(computed) == 2
    assert after == before  # the same numbers, computed again because the file changed
    (run / "aicore_intermediate_1_type.csv").unlink()
    without_types = invoke("summary", "--format", "json", str(run)).output
    assert len(computed) == 3 and without_types != before


def test_changed_code_is_a_new_answer(run, cache_dir, computed, monkeypatch):
    invoke("summary", str(run))
    monkeypatch.setattr(cache, "code_digest", lambda code: "another perfkit")
    invoke("summary", str(run))
    assert len(computed) == 2


def test_exit_codes_are_kept_and_errors_never_cached(cache_dir, computed, tmp_path):
    # the seed's feed-mode run: sink_mode is high (run_2's low findings are all-clears, which never fail a gate)
    run = tmp_path / "seed_1"
    shutil.copytree(Path(__file__).parent / "runs" / "seed_1_feed_fp32", run)
    first = invoke("advise", str(run), "--fail-on", "high")
    second = invoke("advise", str(run), "--fail-on", "high")
    assert first.exit_code == second.exit_code == 1 and second.output == first.output and len(computed) == 1
    missing = invoke("summary", str(tmp_path / "nope"))
    assert missing.exit_code == 2 and len(computed) == 1


def test_no_cache_means_no_answers(run, cache_dir, computed, monkeypatch):
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    invoke("summary", str(run))
    invoke("summary", str(run))
    assert len(computed) == 0 and not cache_dir.exists()


def test_answers_are_never_kept_inside_the_run(run, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(run / "cache"))
    assert invoke("summary", str(run)).exit_code == 0
    assert not (run / "cache").exists()

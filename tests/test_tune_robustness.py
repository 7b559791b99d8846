"""perfkit tune against hostile input and hostile processes (issue 38 items 7-10, 12; issue 37 item 10): a
damaged tune.json, budgets that must be deadlines, signals to tune and to profile, Dask addresses and timeouts.
The loop runs with test_tune's fake trainer; the process tests run fake scripts that never import MindSpore."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import broken
from perfkit.apps.cli import main
from perfkit.apps.tune import LEDGER, Ledger
from perfkit.core.errors import PerfkitError
from test_tune import AVX2, WORKERS, FakeTrainer, by_label, fixed, tuner

# what a damaged or hand-edited ledger may hold in place of any one value
HOSTILE = [broken.nested(b"[", 5_000).decode(), broken.nested(b"{", 3_000).decode(), "1" * 400, "9e999", "-9e999",
           "NaN", "Infinity", '"\\ud800"', "-1", "0", "null", "[]", "{}", '"x"', "true", "1.5", '"../../outside"',
           str(10**25)]


def _slots(node, path=()):
    """The path of every value in a decoded JSON document, keys and indexes from the top."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        yield (*path, key)
        yield from _slots(value, (*path, key))


def _replaced(data, path, marker="@@VALUE@@"):
    copy = json.loads(json.dumps(data))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    return json.dumps(copy)


@pytest.fixture(scope="module")
def interrupted_tune(tmp_path_factory) -> Path:
    """A tune folder as Ctrl-C leaves it: the baseline and one candidate's first runs, candidates recorded."""
    folder = tmp_path_factory.mktemp("ledger")
    trainer = FakeTrainer({AVX2.label: 0.5}, interrupt_at=3)
    assert tuner(folder, trainer, fixed(AVX2, WORKERS), repeats=2).tune().interrupted
    return folder / "tune"


def test_every_damaged_value_of_the_ledger_is_refused_naming_it_or_goes_on(interrupted_tune, tmp_path):
    """Each value of a real ledger replaced by each hostile one (~740 ledgers): opening it for a resume is a
    PerfkitError naming tune.json, or the ledger is sound (~80: a null error, an empty list of notes, …) and a
    resume of every tenth of those goes on to a result."""
    data = json.loads((interrupted_tune / LEDGER).read_text())
    refused = resumed = 0
    for path in _slots(data):
        for hostile in HOSTILE:
            text = _replaced(data, path).replace('"@@VALUE@@"', hostile, 1)
            (interrupted_tune / LEDGER).write_text(text)
            try:
                Ledger.open(interrupted_tune, {"kind": "fake"}, 2)
            except PerfkitError as exc:
                assert str(interrupted_tune / LEDGER) in str(exc) and "\n" not in str(exc), (path, hostile)
                refused += 1
                continue
            resumed += 1
            if resumed % 10:
                continue
            scratch = tmp_path / f"resume_{resumed}"
            shutil.copytree(interrupted_tune, scratch / "tune")
            result = tuner(scratch, FakeTrainer({AVX2.label: 0.5}), fixed(AVX2, WORKERS), repeats=2).tune()
            assert (result.experiments or result.stopped) and not result.interrupted, (path, hostile)
    assert refused > 500 and resumed > 20
    (interrupted_tune / LEDGER).write_text(json.dumps(data))


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 1}', broken.nested(b"{", 3_000).decode(), "\udcff",
                                  '{"version": 1, "baseline": {"kind": "fake"}, "repeats": 1e400}'])
def test_a_damaged_ledger_is_one_line_and_exit_2_or_fresh_on_request(text, tmp_path):
    folder = tmp_path / "tune"
    folder.mkdir()
    (folder / LEDGER).write_text(text, errors="surrogateescape")
    result = CliRunner().invoke(main, ["tune", "--output", str(folder), "--steps", "1"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.count("\n") == 1 and f"{folder / LEDGER}" in result.output and "--fresh" in result.output
    fresh = tuner(tmp_path, FakeTrainer({}), fixed(AVX2), repeats=1)
    fresh.fresh = True
    assert by_label(fresh.tune())[AVX2.label]["verdict"] != "not run"
    assert json.loads((folder / LEDGER).read_text())["baseline"] == {"kind": "fake"}

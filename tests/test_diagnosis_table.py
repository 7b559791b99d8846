"""The advisor's regression table (docs/diagnosis.md): a row that changes fails here, and so does a false
high-severity finding or a missing expected finding on any fixture or sample run."""

from __future__ import annotations

import importlib.util
import json
import sys

from conftest import REPO

spec = importlib.util.spec_from_file_location("diagnosis", REPO / "scripts" / "diagnosis.py")
diagnosis = importlib.util.module_from_spec(spec)
sys.modules["diagnosis"] = diagnosis  # its dataclass looks itself up there
spec.loader.exec_module(diagnosis)


def test_every_run_has_a_hand_written_expectation_with_its_reason():
    expected = json.loads(diagnosis.EXPECTED.read_text())
    runs = diagnosis.runs()
    assert set(runs) <= set(expected)
    assert all(expected[name]["why"].strip() for name in runs)


def test_the_table_is_what_the_code_gives_and_every_row_agrees():
    table = diagnosis.rows()
    assert [row.false_high for row in table if row.false_high] == []
    assert [(row.name, row.missing) for row in table if row.missing] == []
    assert [(row.name, row.bound, row.expected_bound) for row in table if row.bound != row.expected_bound] == []
    # the committed table: a row that changes (a finding added, dropped or re-graded, a bound moved) fails
    assert diagnosis.TABLE.read_text() == diagnosis.markdown(table)

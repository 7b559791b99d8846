"""Every MindSpore API an advisor action names exists in the installed MindSpore, with the keywords it uses.

An action is code the user pastes: `ds.EpochCtrlDataset(..., num_parallel_workers=2)` (an op type turned
into a class name that does not exist) fails in their script, not here. This imports the real package
(tests may; perfkit itself imports it only in perfkit/profiler/) and resolves each call:
`ds.X` -> mindspore.dataset.X, `ms.X` / `mindspore.X` -> mindspore.X, `model.X` -> mindspore.Model.X,
`dataset.X` -> mindspore.dataset.Dataset.X, `Model(` -> mindspore.Model.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.advisor import rules
from perfkit.advisor.rules import data

mindspore = pytest.importorskip("mindspore")
import mindspore.dataset  # noqa: E402  (after the skip: the package may be absent)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from summary_snapshot import profiled_runs as runs  # noqa: E402  (every fixture, sample run and tests/runs folder)

# A call an action names: the dotted name and what is between its parentheses (no nested parentheses in
# actions; dict arguments use braces).
CALL = re.compile(r"(?<![\w.])(mindspore(?:\.\w+)+|ds\.\w+|ms(?:\.\w+)+|model\.\w+|dataset\.\w+|Model)"
                  r"\(([^()]*)\)?")
KEYWORD = re.compile(r"(?:^|,)\s*(\w+)=")


def resolve(name: str):
    """The object a dotted action name means, or None when the installed MindSpore has no such attribute."""
    head, _, rest = name.partition(".")
    base = {"ds": mindspore.dataset, "ms": mindspore, "mindspore": mindspore, "model": mindspore.Model,
            "dataset": mindspore.dataset.Dataset, "Model": mindspore.Model}[head]
    for part in rest.split(".") if rest else []:
        base = getattr(base, part, None)
        if base is None:
            return None
    return base


def accepts(target, keyword: str) -> bool:
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return True  # a builtin without a signature: the name check is all there is
    return keyword in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def static_actions() -> set[str]:
    """Every string constant in the rule modules (f-string pieces included): the fixed action texts."""
    trees = [ast.parse(path.read_text()) for path in sorted(Path(rules.__file__).parent.glob("*.py"))]
    return {node.value for tree in trees for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def generated_actions() -> set[str]:
    """The actions built from a pipeline op type: every type the rules know, and none."""
    op_types = [None, "Batch", "Map", "Generator", "Shuffle", "EpochCtrl", "Take", *data.SOURCE_DATASET_CLASS]
    return {data._workers_action(op_type, workers) for op_type in op_types for workers in (1, 8)}


def run_actions() -> set[str]:
    """The actions advise gives on the real runs."""
    actions = set()
    for name in ("legacy_run_2", "legacy_misc", "legacy_ut", "new_level1", "cpu_2_10"):
        actions |= {finding.action for finding in perfkit.advise(perfkit.load(FIXTURE_RUNS[name])).findings
                    if finding.action}
    for name, folder in runs().items():  # a folder of several profiler cycles: each cycle
        if name.startswith("tests/runs/"):
            actions |= {finding.action for finding in perfkit.advise(perfkit.load(folder)).findings
                        if finding.action}
    return actions


def calls(texts: set[str]) -> set[tuple[str, str | None]]:
    return {(match.group(1), match.group(2)) for text in texts for match in CALL.finditer(text)}


def test_every_named_api_exists_with_its_keywords(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path))
    found = calls(static_actions() | generated_actions() | run_actions())
    names = {name for name, _ in found}
    # the check has something to check: the calls the rules are known to write
    assert {"ds.GeneratorDataset", "dataset.map", "dataset.batch", "model.train", "Model",
            "ms.set_auto_parallel_context"} <= names
    assert any(name.startswith("ds.") and name != "ds.GeneratorDataset" for name in names)
    missing = sorted(name for name in names if resolve(name) is None)
    assert not missing, f"actions name APIs the installed MindSpore {mindspore.__version__} lacks: {missing}"
    bad_keywords = sorted((name, keyword) for name, args in found if args
                          for keyword in KEYWORD.findall(args) if not accepts(resolve(name), keyword))
    assert not bad_keywords, f"actions pass keywords these APIs do not take: {bad_keywords}"


def test_a_pipeline_op_without_a_worker_setting_gets_no_invented_class():
    # EpochCtrl, Shuffle and Take have no dataset class with workers: the old wording made one up
    for op_type in ("EpochCtrl", "Shuffle", "Take"):
        action = data._workers_action(op_type, 1)
        assert f"ds.{op_type}" not in action and resolve(CALL.search(action).group(1)) is not None

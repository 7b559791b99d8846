"""The winning settings of `perfkit tune` as an edit of the user's script: a unified diff where the setting is a
literal in the script (`num_parallel_workers=1` -> 4, `amp_level="O0"` -> "O2", `ms.PYNATIVE_MODE` ->
`ms.GRAPH_MODE`, an environment variable set before `import mindspore`), else the exact line to add and where.
For the built-in ResNet-50 the settings are `perfkit profile` options.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..advisor.change import Change

# (knob, op) -> (the call's name, the keyword, the position of the argument when given positionally)
LITERALS = {
    ("amp_level", None): (("Model",), "amp_level", None),
    ("sink_mode", None): (("train",), "dataset_sink_mode", 2),
    ("batch_size", None): (("batch",), "batch_size", 0),
    ("dataset_workers", "map"): (("map",), "num_parallel_workers", None),
    ("dataset_workers", "batch"): (("batch",), "num_parallel_workers", None),
    ("dataset_workers", "all"): (("map", "batch"), "num_parallel_workers", None),
    ("mode", None): (("set_context",), "mode", None),
}
MODE_NAMES = {"graph": "GRAPH_MODE", "pynative": "PYNATIVE_MODE"}


@dataclass
class Patch:
    diff: str | None = None                          # unified diff of the script
    add: list[str] = field(default_factory=list)     # lines to add by hand, each saying where
    command: str | None = None                       # the built-in run: the perfkit profile command

    def to_dict(self) -> dict[str, Any]:
        return {"diff": self.diff, "add": self.add, "command": self.command}


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def _literal(change: Change, old: ast.expr, text: str) -> str | None:
    """The source replacing `old` (a literal of the script) with the change's value; None if `old` is not one."""
    if change.knob == "mode":
        name = MODE_NAMES[change.value]
        if isinstance(old, ast.Attribute) and old.attr in MODE_NAMES.values():
            return ast.get_source_segment(text, old.value) + "." + name
        if isinstance(old, ast.Name) and old.id in MODE_NAMES.values():
            return name
        return None
    if not isinstance(old, ast.Constant):
        return None
    return repr(change.value) if isinstance(change.value, str) else str(change.value)


def script_patch(script: Path, changes: tuple[Change, ...]) -> Patch:
    text = script.read_text()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return Patch(add=[f"{change.code()}" for change in changes])
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, int, str]] = []   # (line, col, end line, end col, new text), 1-based lines
    inserts: list[str] = []
    add: list[str] = []
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    for change in changes:
        if change.knob == "env":
            inserts.append(f"os.environ[{change.name!r}] = {str(change.value)!r}  # perfkit tune\n")
            continue
        spec = LITERALS.get((change.knob, change.op if change.knob == "dataset_workers" else None))
        found = False
        if spec is not None:
            names, keyword, position = spec
            for call in calls:
                if _call_name(call) not in names:
                    continue
                given = next((kw.value for kw in call.keywords if kw.arg == keyword), None)
                if given is None and position is not None and len(call.args) > position:
                    given = call.args[position]
                new = None if given is None else _literal(change, given, text)
                if new is not None:
                    edits.append((given.lineno, given.col_offset, given.end_lineno, given.end_col_offset, new))
                    found = True
            if not found:
                where = [call.lineno for call in calls if _call_name(call) in names]
                if where:
                    add.append(f"line {where[0]}: add {keyword}={_value_text(change)} to the "
                               f"{_call_name(next(c for c in calls if c.lineno == where[0]))}(...) call")
                    found = True
        if not found:
            add.append(change.code())
    new_lines = _apply(lines, edits)
    if inserts:
        new_lines = _insert_env(new_lines, tree, inserts)
    diff = "".join(difflib.unified_diff(lines, new_lines, f"a/{script}", f"b/{script}")) or None
    return Patch(diff=diff, add=add)


def _value_text(change: Change) -> str:
    if change.knob == "mode":
        return f"ms.{MODE_NAMES[change.value]}"
    return repr(change.value) if isinstance(change.value, str) else str(change.value)


def _apply(lines: list[str], edits: list[tuple[int, int, int, int, str]]) -> list[str]:
    """Replace each (line, col, end line, end col) span with its text, last first so offsets hold."""
    result = list(lines)
    for line, col, end_line, end_col, new in sorted(edits, reverse=True):
        head = result[line - 1].encode()[:col].decode()
        tail = result[end_line - 1].encode()[end_col:].decode()
        result[line - 1:end_line] = [head + new + tail]
    return result


def _insert_env(lines: list[str], tree: ast.Module, inserts: list[str]) -> list[str]:
    """The variables, set before the script's first import of mindspore (MindSpore reads them at import)."""
    first = next((node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
        (alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0] == "mindspore"
        for alias in node.names)), None)
    at = first.lineno - 1 if first is not None else 0
    has_os = any(isinstance(node, ast.Import) and any(alias.name == "os" for alias in node.names)
                 and node.lineno - 1 < at for node in tree.body)
    return lines[:at] + ([] if has_os else ["import os\n"]) + inserts + lines[at:]


def command_patch(args: list[str], changes: tuple[Change, ...]) -> Patch:
    """The built-in run: the `perfkit profile` command with the winning settings."""
    from .tune_runners import RESNET_OPTIONS

    options = list(args)
    for change in changes:
        if change.knob == "env":
            options += ["--env", f"{change.name}={change.value}"]
        elif change.knob in RESNET_OPTIONS:
            options += RESNET_OPTIONS[change.knob](change)
    return Patch(command="perfkit profile " + " ".join(options),
                 add=[change.code() for change in changes if change.knob != "env" and change.knob not in RESNET_OPTIONS])

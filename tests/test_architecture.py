"""The shape the code keeps: no import cycle, one reader registry, heavy imports only where needed."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfkit import formats
from perfkit.formats.base import INTERMEDIATE_TABLES, Reader
from perfkit.model import SCHEMA

from conftest import FIXTURE_RUNS, REPO

PACKAGE = REPO / "perfkit"


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str], root: Path = REPO) -> set[str]:
    """The perfkit modules `path` imports anywhere in it (a function-level import closes a cycle too)."""
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import sub` imports the submodule sub where there is one, else a name of pkg
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in modules and name != own}
    return found


def test_no_import_cycle_in_the_package():
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(path) for path in paths}
    graph = {module_name(path): imported_modules(path, modules) for path in paths}
    assert graph["perfkit.cli"], "the import walk found nothing: it is broken, not the code clean"

    def cycle_from(start: str, stack: list[str], done: set[str]) -> list[str] | None:
        for target in sorted(graph[start]):
            if target in stack:
                return stack[stack.index(target):] + [target]
            if target not in done:
                found = cycle_from(target, stack + [target], done)
                if found:
                    return found
        done.add(start)
        return None

    done: set[str] = set()
    for module in sorted(graph):
        cycle = cycle_from(module, [module], done)
        assert cycle is None, " -> ".join(cycle)


def test_the_import_walk_sees_a_cycle(tmp_path):
    """The test above would catch the cycle issue 12 removed (cache.py importing the loader back)."""
    (tmp_path / "perfkit").mkdir()
    (tmp_path / "perfkit" / "__init__.py").write_text("")
    (tmp_path / "perfkit" / "cache.py").write_text("def f():\n    from .loader import load\n")
    (tmp_path / "perfkit" / "loader.py").write_text("from . import cache\n")
    modules = {"perfkit", "perfkit.cache", "perfkit.loader"}
    assert imported_modules(tmp_path / "perfkit" / "cache.py", modules, tmp_path) == {"perfkit.loader"}
    assert imported_modules(tmp_path / "perfkit" / "loader.py", modules, tmp_path) == {"perfkit.cache"}


def test_every_layout_module_declares_one_reader_in_the_registry():
    declared = []
    for path in sorted((PACKAGE / "formats").glob("*.py")):
        module = importlib.import_module(module_name(path))
        reader = getattr(module, "READER", None)
        if isinstance(reader, Reader):
            declared.append(reader)
    assert declared and set(map(id, declared)) == set(map(id, formats.READERS))
    assert len({reader.name for reader in formats.READERS}) == len(formats.READERS)
    for reader in formats.READERS:
        assert reader.provides and reader.provides <= SCHEMA.keys() | set(INTERMEDIATE_TABLES), reader


def test_the_loader_names_no_layout_and_no_reader_table():
    """A new layout is one module and one registry line: the loader knows readers only through the protocol."""
    path = PACKAGE / "loader.py"
    modules = {module_name(p) for p in PACKAGE.rglob("*.py")}
    assert {m for m in imported_modules(path, modules) if m.startswith("perfkit.formats.")} == {"perfkit.formats.base"}
    strings = {node.value for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    named = strings & ({reader.name for reader in formats.READERS} | set(INTERMEDIATE_TABLES))
    assert not named, f"the loader names {sorted(named)}"


def run_perfkit(*args: str, cache: Path) -> subprocess.CompletedProcess:
    """perfkit in a fresh interpreter that prints, after the command, which heavy modules it imported."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('IMPORTED', sorted(m for m in ('pandas', 'pyarrow', 'mindspore', 'dash')"
            " if m in sys.modules), file=sys.stderr))\n"
            "from perfkit.cli import main\n"
            f"main({list(args)!r}, prog_name='perfkit')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(cache)}
    env.pop("PERFKIT_NO_CACHE", None)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)


def imported(done: subprocess.CompletedProcess) -> list[str]:
    line = next(line for line in done.stderr.splitlines() if line.startswith("IMPORTED"))
    return json.loads(line.removeprefix("IMPORTED ").replace("'", '"'))


@pytest.mark.parametrize("command", [["summary"], ["advise", "--format", "json"], ["ranks"]])
def test_a_warm_answer_imports_neither_pandas_nor_pyarrow(command, tmp_path):
    run = str(FIXTURE_RUNS["new_level1"])
    cold = run_perfkit(*command, run, cache=tmp_path)
    warm = run_perfkit(*command, run, cache=tmp_path)
    assert cold.returncode == warm.returncode == 0, cold.stderr
    assert warm.stdout == cold.stdout
    assert "pandas" in imported(cold)
    assert imported(warm) == []


def test_summary_imports_neither_mindspore_nor_dash(tmp_path):
    done = run_perfkit("summary", str(FIXTURE_RUNS["legacy_run_2"]), cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not {"mindspore", "dash"} & set(imported(done))



def absolute_base(node: ast.ImportFrom, path: Path, root: Path = REPO) -> str:
    """The module a `from ... import` names, with a relative one resolved against `path`'s package."""
    own = module_name(path, root)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    anchor = package.split(".")
    anchor = anchor[:len(anchor) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def advisor_internals_imported(path: Path, root: Path = REPO) -> list[str]:
    """What `path` imports of the advisor's internals: any rule module (perfkit.advisor.rules and below), or a
    private name (`_x`) of an advisor module. perfkit.advisor and its registry's public names are the interface."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name.startswith("perfkit.advisor.rules")]
        elif isinstance(node, ast.ImportFrom):
            base = absolute_base(node, path, root)
            if not (base + ".").startswith("perfkit.advisor."):
                continue
            found += [f"{node.lineno}: from {base} import {alias.name}" for alias in node.names
                      if (base + ".").startswith("perfkit.advisor.rules.") or alias.name.startswith("_")
                      or (base == "perfkit.advisor" and alias.name == "rules")]
    return found


def test_nothing_outside_the_advisor_imports_its_rules_or_private_names():
    advisor = PACKAGE / "advisor"
    paths = [path for folder in (PACKAGE, REPO / "dashboards", REPO / "scripts")
             for path in sorted(folder.rglob("*.py")) if advisor not in path.parents]
    assert any(path.name == "numbers.py" for path in paths)
    found = {f"{path.relative_to(REPO)}:{line}" for path in paths for line in advisor_internals_imported(path)}
    assert not found, "import from perfkit.advisor's public names (needs_met, rule, Finding, ...):\n" + \
        "\n".join(sorted(found))


def test_the_advisor_import_check_sees_what_views_once_imported(tmp_path):
    views = tmp_path / "perfkit" / "views"
    views.mkdir(parents=True)
    (views / "numbers.py").write_text(
        "def f():\n    from ..advisor.rules import COMM_SOURCE_LABEL, NEEDS\n"
        "    from ..advisor.rules.compute import op_flops\n    from ..advisor import rules\n"
        "    from ..advisor.registry import _has_steps, needs_met\n    import perfkit.advisor.rules.data\n"
        "    from ..advisor import advise, needs_met\n    from ..analysis import _value\n")
    assert [line.split(": ", 1)[1] for line in advisor_internals_imported(views / "numbers.py", tmp_path)] == [
        "from perfkit.advisor.rules import COMM_SOURCE_LABEL", "from perfkit.advisor.rules import NEEDS",
        "from perfkit.advisor.rules.compute import op_flops", "from perfkit.advisor import rules",
        "from perfkit.advisor.registry import _has_steps", "import perfkit.advisor.rules.data"]


# Names of unit conversion factors (`NS_PER_MS`, `TICKS_PER_US`, `BYTES_PER_MB`): defined in perfkit/units.py only.
UNIT = r"(NS|US|MS|S|TICKS?|BYTES?|KB|MB|GB|FLOPS?|GFLOPS?)"
UNIT_FACTOR_NAME = re.compile(rf"^{UNIT}_PER_{UNIT}$")
# Literal factors that convert between time units (a thousand and its powers) when they multiply or divide.
DECIMAL_FACTORS = {1e3, 1e6, 1e9, 1e-3, 1e-6, 1e-9}


def _number(node: ast.AST) -> float | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) in (int, float) else None


def unit_conversions(source: str) -> list[tuple[int, str]]:
    """(line, what) for each unit conversion written in `source` other than through perfkit.units: a factor
    named like one assigned there, a literal thousand (or its powers) multiplying or dividing, a literal MiB
    (1024 * 1024, 1024 ** 2, 2 ** 20)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [(node.lineno, f"defines {t.id}") for t in targets
                      if isinstance(t, ast.Name) and UNIT_FACTOR_NAME.match(t.id)]
        elif isinstance(node, ast.BinOp):
            left, right = _number(node.left), _number(node.right)
            if isinstance(node.op, (ast.Mult, ast.Div)) and {left, right} & DECIMAL_FACTORS:
                found.append((node.lineno, f"{ast.unparse(node)}"))
            elif (isinstance(node.op, ast.Pow) and (left, right) in {(1024, 2), (1024, 3), (2, 20), (2, 30)}) or \
                    (isinstance(node.op, ast.Mult) and 1024 in {left, right}
                     and any(isinstance(side, ast.BinOp) and 1024 in {_number(side.left), _number(side.right)}
                             for side in (node.left, node.right))) or \
                    (isinstance(node.op, ast.Mult) and left == right == 1024):
                found.append((node.lineno, f"{ast.unparse(node)}"))
    return found


def test_unit_conversions_are_defined_once_in_perfkit_units():
    units = PACKAGE / "units.py"
    assert {name for _, name in unit_conversions(units.read_text())} >= {"defines NS_PER_MS", "defines BYTES_PER_MB"}
    written = {f"{path.relative_to(REPO)}:{line}: {what}"
               for path in sorted(PACKAGE.rglob("*.py")) if path != units and "vendor" not in path.parts
               for line, what in unit_conversions(path.read_text())}
    assert not written, "convert units with perfkit.units' constants:\n" + "\n".join(sorted(written))


def test_the_unit_check_sees_a_conversion_written_again():
    assert [what for _, what in unit_conversions("NS_PER_MS = 1e6\nTASK_ROWS_PER_CHUNK = 1_000_000\n")] == \
        ["defines NS_PER_MS"]
    assert len(unit_conversions("ms = us / 1000.0\nmb = b / 2 ** 20\nmb = b / (1024 * 1024)\nx = 1e-3 * y\n")) == 4
    # a count or a share is no unit: a row group of 16 * 1024 rows, a percent
    assert unit_conversions("ROWS = 16 * 1024\npct = 100.0 * share\nLOSS_SCALE = 1024.0\n") == []

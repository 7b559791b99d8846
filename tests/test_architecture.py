"""The shape the code keeps: no import cycle, one reader registry, heavy imports only where needed."""

from __future__ import annotations

import ast
import importlib
import json
import os
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

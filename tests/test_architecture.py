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
from conftest import FIXTURE_RUNS, REPO

from perfkit.core.model import SCHEMA
from perfkit.io import formats
from perfkit.io.formats.base import INTERMEDIATE_TABLES, Reader

PACKAGE = REPO / "perfkit"

# The layers, lowest first: a module may import its own layer and the layers before it, never one after it
# (docs/architecture.md). perfkit/__init__.py and perfkit/api.py are the facade; the Dash app lives in the
# repository's dashboards/ folder and is imported as perfkit.dashboards.
LAYERS = (
    ("core", ("perfkit.core",)),
    ("io", ("perfkit.io",)),
    ("analysis", ("perfkit.analysis",)),
    ("advisor", ("perfkit.advisor",)),
    ("views", ("perfkit.views",)),
    ("render", ("perfkit.render",)),
    ("profiler", ("perfkit.profiler",)),
    ("api", ("perfkit", "perfkit.api")),
    ("apps", ("perfkit.apps", "perfkit.dashboards", "perfkit.__main__")),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the layer `module` belongs to (the longest matching prefix)."""
    best, length = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    assert best is not None, f"{module} is in no layer: add it to LAYERS and docs/architecture.md"
    return best


def package_files(root: Path = REPO) -> dict[str, Path]:
    """Every module of the package, by name: perfkit/ and the repository's dashboards/ (perfkit.dashboards)."""
    files = {}
    for path in sorted((root / "perfkit").rglob("*.py")):
        if "dashboards" not in path.relative_to(root).parts and "hook" not in path.parts:
            files[module_name(path, root)] = path
    for path in sorted((root / "dashboards").rglob("*.py")):
        files["perfkit." + module_name(path, root)] = path
    return files


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module a `from ... import` in `package` imports from (relative ones resolved)."""
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[:len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    return base


def imported_modules(path: Path, modules: set[str], own: str | None = None) -> dict[str, int]:
    """The perfkit modules `path` (module `own`) imports anywhere in it, with the line of the first import: import
    statements (a function-level one closes a cycle too), `importlib.import_module` with a relative name, and
    string constants naming a module (a lazy reference by name is an import all the same)."""
    own = own or module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(name: str, line: int) -> None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        if name and name != own:
            found.setdefault(name, line)

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base, node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module" \
                and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            name = node.args[0].value
            if name.startswith("."):
                level = len(name) - len(name.lstrip("."))
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (level - 1)]
                name = ".".join(anchor + [name.lstrip(".")])
            add(name, node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"perfkit(\.\w+)+(:\w+)?", node.value):
            name = node.value.partition(":")[0]  # a module, or a module's attribute ("perfkit.x.y:f", "perfkit.x.f")
            if name in modules or name.rpartition(".")[0] not in ("", "perfkit"):
                add(name, node.lineno)
    return found


def import_graph(root: Path = REPO) -> dict[str, dict[str, int]]:
    files = package_files(root)
    return {name: imported_modules(path, set(files), name) for name, path in files.items()}


def upward_imports(graph: dict[str, dict[str, int]]) -> list[str]:
    return sorted(f"{module}:{line} imports {target} ({LAYERS[layer_of(target)][0]} is above "
                  f"{LAYERS[layer_of(module)][0]})"
                  for module, targets in graph.items() for target, line in targets.items()
                  if layer_of(target) > layer_of(module))


def test_every_layer_imports_only_the_layers_below_it():
    graph = import_graph()
    assert graph["perfkit.apps.cli"], "the import walk found nothing: it is broken, not the code clean"
    assert not upward_imports(graph), "\n".join(upward_imports(graph))


def test_the_layering_check_sees_an_upward_import_by_statement_and_by_name(tmp_path):
    for folder in ("perfkit/io", "perfkit/views", "dashboards"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "perfkit" / "__init__.py").write_text("")
    (tmp_path / "perfkit" / "io" / "loader.py").write_text(
        "import importlib\ndef f():\n    from ..views import panels\n"
        "    return importlib.import_module('perfkit.views.panels')\n")
    (tmp_path / "perfkit" / "io" / "cache.py").write_text("FIGURES = 'perfkit.views.panels'\n")
    (tmp_path / "perfkit" / "views" / "panels.py").write_text("from ..io import loader\n")
    (tmp_path / "dashboards" / "app.py").write_text("from ..views import panels\n")
    graph = import_graph(tmp_path)
    assert graph["perfkit.io.loader"] == {"perfkit.views.panels": 3}
    assert graph["perfkit.io.cache"] == {"perfkit.views.panels": 1}
    assert graph["perfkit.dashboards.app"] == {"perfkit.views.panels": 1}
    assert upward_imports(graph) == [
        "perfkit.io.cache:1 imports perfkit.views.panels (views is above io)",
        "perfkit.io.loader:3 imports perfkit.views.panels (views is above io)"]


def test_no_import_cycle_in_the_package():
    graph = {module: set(targets) for module, targets in import_graph().items()}

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


def private_names_imported(path: Path, own: str, modules: set[str]) -> list[str]:
    """`from perfkit.x import _name` and `x._name` on an imported perfkit module x, in module `own`: another
    module's private names. Dunder names (`__version__`) are public."""
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    found, module_aliases = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = imported_from(node, package)
            if not base.startswith("perfkit"):
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    module_aliases.add(alias.asname or alias.name)
                elif alias.name.startswith("_") and not alias.name.startswith("__") and base != own:
                    found.append(f"{node.lineno}: from {base} import {alias.name}")
        elif isinstance(node, ast.Import):
            module_aliases |= {alias.asname for alias in node.names if alias.asname and alias.name in modules}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in module_aliases \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_imports_another_modules_private_names():
    files = package_files()
    found = [f"{name}:{line}" for name, path in files.items()
             for line in private_names_imported(path, name, set(files))]
    assert not found, "make the name public in the layer it belongs to:\n" + "\n".join(found)


def test_the_private_name_check_sees_both_forms(tmp_path):
    (tmp_path / "perfkit" / "io").mkdir(parents=True)
    path = tmp_path / "perfkit" / "io" / "timeline.py"
    path.write_text("from . import cache\nfrom .formats.ascend_ms import _read_profiler_info, READER\n"
                    "x = cache._jsonable(1)\ny = cache.__name__\n")
    modules = {"perfkit.io.cache", "perfkit.io.timeline", "perfkit.io.formats.ascend_ms"}
    assert private_names_imported(path, "perfkit.io.timeline", modules) == [
        "2: from perfkit.io.formats.ascend_ms import _read_profiler_info", "3: cache._jsonable"]


# Layout names that are also device names: named as a layout only where compared with a layout or a reader's
# name, or listed with other layouts.
DEVICE_NAMES = {"cpu", "gpu"}


def layout_names_used(path: Path, layouts: set[str]) -> list[str]:
    """Where `path` names a layout: a string equal to a layout name (device names only where compared with a
    layout or a reader's name, or listed with other layout names), outside docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    found = []

    def strings(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [value for element in node.elts for value in strings(element)]
        return []

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                and node.value in layouts - DEVICE_NAMES:
            found.append(f"{node.lineno}: {node.value!r}")
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            values = strings(node)
            if len(values) > 1 and set(values) <= layouts and set(values) & DEVICE_NAMES:
                found.append(f"{node.lineno}: {values!r}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            about_layout = any("layout" in ast.unparse(side) or ast.unparse(side).endswith("reader.name")
                               for side in sides)
            named = [value for side in sides for value in strings(side) if value in layouts & DEVICE_NAMES]
            if about_layout and named:
                found.append(f"{node.lineno}: {named!r}")
    return sorted(set(found), key=lambda line: (int(line.split(":")[0]), line))


def test_no_layout_is_named_outside_the_readers():
    """A layout is known to its reader alone (io/formats): the timeline, the ledger and every view ask the reader
    protocol, so a plugin reader gets what a built-in one gets."""
    layouts = {reader.name for reader in formats.READERS if reader.unit}  # the others read a table, named after it
    readers_folder = PACKAGE / "io" / "formats"
    found = [f"{name}:{line}" for name, path in package_files().items() if readers_folder not in path.parents
             for line in layout_names_used(path, layouts)]
    assert not found, "ask the reader (io/formats/base.Reader) instead:\n" + "\n".join(found)


def test_the_layout_name_check_sees_a_list_a_comparison_and_a_name(tmp_path):
    path = tmp_path / "timeline.py"
    path.write_text('"""Reads ascend_ms traces."""\nALL = ("gpu", "cpu", "ascend_ms")\n'
                    'if reader.name in ("cpu",) or run.meta.device == "cpu":\n    pass\nx = "legacy"\n')
    layouts = {"ascend_ms", "cpu", "gpu", "legacy"}
    assert layout_names_used(path, layouts) == [
        "2: 'ascend_ms'", "2: ['gpu', 'cpu', 'ascend_ms']", "3: ['cpu']", "5: 'legacy'"]


def test_every_layout_module_declares_one_reader_in_the_registry():
    declared = []
    for path in sorted((PACKAGE / "io" / "formats").glob("*.py")):
        module = importlib.import_module(module_name(path))
        reader = getattr(module, "READER", None)
        if isinstance(reader, Reader):
            declared.append(reader)
    assert declared and set(map(id, declared)) == set(map(id, formats.READERS))
    assert len({reader.name for reader in formats.READERS}) == len(formats.READERS)
    for reader in formats.READERS:
        assert reader.provides and reader.provides <= SCHEMA.keys() | set(INTERMEDIATE_TABLES), reader


# The loader and what it is made of: discovery, the choice of a profiler cycle, assembling the Run.
LOADING = ("loader.py", "discovery.py", "cycles.py", "assembly.py")


def test_the_loader_names_no_layout_and_no_reader_table():
    """A new layout is one module and one registry line: the loader knows readers only through the protocol (the
    registry, base.Reader and the readers' shared helpers), never a layout module or a layout's name."""
    modules = set(package_files())
    layout_modules = {module_name(path) for path in (PACKAGE / "io" / "formats").glob("*.py")
                      if isinstance(getattr(importlib.import_module(module_name(path)), "READER", None), Reader)}
    assert "perfkit.io.formats.db" in layout_modules
    for name in LOADING:
        path = PACKAGE / "io" / name
        imported_layouts = set(imported_modules(path, modules)) & layout_modules
        assert not imported_layouts, f"{name} imports {sorted(imported_layouts)}"
        strings = {node.value for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        named = strings & ({reader.name for reader in formats.READERS} | set(INTERMEDIATE_TABLES))
        assert not named, f"{name} names {sorted(named)}"


def run_perfkit(*args: str, cache: Path) -> subprocess.CompletedProcess:
    """perfkit in a fresh interpreter that prints, after the command, which heavy modules it imported."""
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('IMPORTED', sorted(m for m in ('pandas', 'pyarrow', 'mindspore', 'dash',"
            " 'plotly') if m in sys.modules), file=sys.stderr))\n"
            "from perfkit.apps.cli import main\n"
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


@pytest.mark.parametrize("run", ["new_level1", "new_db_level1", "legacy_run_2", "legacy_misc", "cpu_2_10"])
def test_finding_a_runs_traces_imports_no_pandas(run):
    """Discovery (the reader registry, each reader's detection and trace list) needs no DataFrame: pandas
    (0.3-0.4 s) is imported by the readers' read functions, so a cold index starts decoding without it."""
    code = ("import sys\nfrom perfkit.io.timeline import trace_sources\n"
            "root, files, recorded = trace_sources(sys.argv[1])\n"
            "print(len(files), 'pandas' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(FIXTURE_RUNS[run])], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert done.returncode == 0, done.stderr
    traces, pandas = done.stdout.split()
    assert int(traces) >= 1 and pandas == "False"


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_summary_imports_neither_mindspore_nor_dash(tmp_path, fmt):
    """`perfkit summary` lists the panels for their text forms, and the panels hold their figure functions: the
    figures package imports plotly only when a figure is drawn."""
    done = run_perfkit("summary", str(FIXTURE_RUNS["legacy_run_2"]), "--format", fmt, cache=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not {"mindspore", "dash", "plotly"} & set(imported(done))
    assert "pandas" in imported(done)  # it did load the run: nothing was answered from a cache


FIGURES = PACKAGE / "views" / "figures"


def plotly_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, inside a function) of each import of plotly in `path` that runs (not under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test).endswith("TYPE_CHECKING") for node in ast.walk(block)}
    in_function = {id(node) for function in ast.walk(tree) if isinstance(function, (ast.FunctionDef,
                                                                                    ast.AsyncFunctionDef))
                   for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        if any(name.split(".")[0] == "plotly" for name in names) and id(node) not in typing_only:
            found.append((node.lineno, id(node) in in_function))
    return found


def test_plotly_is_imported_only_inside_the_figures_functions():
    """The figures package (views/figures) draws every figure and imports plotly inside the functions that make
    one, so that listing the panels, or rendering the summary, imports no plotly. The Dash app imports it."""
    found = [f"{path.relative_to(REPO)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if "dashboards" not in path.relative_to(REPO).parts
             for line, in_function in plotly_imports(path) if FIGURES not in path.parents or not in_function]
    assert not found, "import plotly inside a function of perfkit/views/figures:\n" + "\n".join(found)
    assert any(in_function for path in FIGURES.glob("*.py") for _, in_function in plotly_imports(path))


def test_the_plotly_check_sees_a_module_level_import_and_passes_one_for_type_hints(tmp_path):
    path = tmp_path / "figure.py"
    path.write_text("from typing import TYPE_CHECKING\nimport plotly.graph_objects as go\nif TYPE_CHECKING:\n"
                    "    from plotly import graph_objects\ndef f():\n    import plotly.express\n")
    assert plotly_imports(path) == [(2, False), (6, True)]


# The package's facade resolves its public names on first use (PEP 562), so that `import perfkit` stays cheap.
LAZY_FACADE = {"perfkit", "perfkit.api"}


def test_no_module_but_the_facade_resolves_names_lazily():
    """A module-level __getattr__ hides what a name is until it is asked for; below the facade every module
    imports what it uses (the profiler's callers import its submodules)."""
    lazy = {name for name, path in package_files().items() for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"}
    assert lazy <= LAZY_FACADE, sorted(lazy - LAZY_FACADE)


def test_importing_the_profiler_package_imports_neither_mindspore_nor_the_launcher():
    """A profiled script imports perfkit.profiler at start-up (`perfkit profile -- ...`): it must not pay for
    MindSpore or for the launcher's imports (click, the run-folder code)."""
    code = ("import sys, perfkit.profiler\n"
            "print(sorted(m for m in ('mindspore', 'click', 'pandas', 'perfkit.profiler.launch', "
            "'perfkit.profiler.script') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


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


# Names of unit conversion factors (`NS_PER_MS`, `TICKS_PER_US`, `BYTES_PER_MB`): defined in perfkit/core/units.py only.
UNIT = r"(NS|US|MS|S|TICKS?|BYTES?|KB|MB|GB|FLOPS?|GFLOPS?)"
UNIT_FACTOR_NAME = re.compile(rf"^{UNIT}_PER_{UNIT}$")
# Literal factors that convert between time units (a thousand and its powers) when they multiply or divide.
DECIMAL_FACTORS = {1e3, 1e6, 1e9, 1e-3, 1e-6, 1e-9}


def _number(node: ast.AST) -> float | None:
    return node.value if isinstance(node, ast.Constant) and type(node.value) in (int, float) else None


def unit_conversions(source: str) -> list[tuple[int, str]]:
    """(line, what) for each unit conversion written in `source` other than through perfkit.core.units: a factor
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
    units = PACKAGE / "core" / "units.py"
    assert {name for _, name in unit_conversions(units.read_text())} >= {"defines NS_PER_MS", "defines BYTES_PER_MB"}
    written = {f"{path.relative_to(REPO)}:{line}: {what}"
               for path in sorted(PACKAGE.rglob("*.py")) if path != units and "vendor" not in path.parts
               for line, what in unit_conversions(path.read_text())}
    assert not written, "convert units with perfkit.core.units' constants:\n" + "\n".join(sorted(written))


def test_the_unit_check_sees_a_conversion_written_again():
    assert [what for _, what in unit_conversions("NS_PER_MS = 1e6\nTASK_ROWS_PER_CHUNK = 1_000_000\n")] == \
        ["defines NS_PER_MS"]
    assert len(unit_conversions("ms = us / 1000.0\nmb = b / 2 ** 20\nmb = b / (1024 * 1024)\nx = 1e-3 * y\n")) == 4
    # a count or a share is no unit: a row group of 16 * 1024 rows, a percent
    assert unit_conversions("ROWS = 16 * 1024\npct = 100.0 * share\nLOSS_SCALE = 1024.0\n") == []

"""Packaging: the dashboard's packages are the extra `perfkit[dash]`, named in one line when missing; one version.

Missing packages are simulated in a subprocess by a `sys.modules[name] = None` entry, which makes `import name`
raise ModuleNotFoundError as an uninstalled package does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import perfkit

REPO = Path(__file__).resolve().parents[1]
INSTALL_LINE = "pip install 'perfkit[dash]'"


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """`code` run by this Python with this checkout's perfkit, from a folder outside the repository."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)


@pytest.mark.parametrize("absent, named", [
    (["dash"], "dash"),
    (["dash_ag_grid", "waitress"], "dash-ag-grid, waitress"),
])
def test_perfkit_dash_names_the_extra_in_one_line_when_its_packages_are_missing(tmp_path, absent, named):
    """Said before any run is read: the folder given does not exist, and the packages are what is reported."""
    result = run_python(f"""
        import sys
        for module in {absent!r}:
            sys.modules[module] = None
        from perfkit.apps.cli import main
        main(["dash", "no_such_run"])
        """, tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (f"perfkit: error: the dashboard needs packages that are not installed ({named}): "
                             f"{INSTALL_LINE}\n")


def test_importing_the_dashboard_without_its_packages_is_an_import_error_naming_the_extra(tmp_path):
    result = run_python("""
        import sys
        sys.modules["waitress"] = None
        try:
            import perfkit.dashboards
        except ImportError as exc:
            print(str(exc))
        """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"the dashboard needs packages that are not installed (waitress): {INSTALL_LINE}\n"


def test_the_dashboard_imports_when_its_packages_are_installed():
    from perfkit.dashboards import create_app, missing_packages

    assert missing_packages() == []
    assert callable(create_app)


def test_perfkit_summary_works_without_the_dashboard_packages(tmp_path):
    """Only `perfkit dash` needs them: the other commands and the API never import Dash."""
    result = run_python(f"""
        import sys
        for module in ("dash", "dash_ag_grid", "waitress"):
            sys.modules[module] = None
        from perfkit.apps.cli import main
        main(["summary", {str(REPO / "sample_runs" / "cpu_default")!r}])
        """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("run ") and "\nbound " in result.stdout and "\nop types " in result.stdout


def test_the_dash_extra_lists_the_packages_the_dashboard_checks():
    tomllib = pytest.importorskip("tomllib")
    from perfkit.dashboards import PACKAGES

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extra = [requirement.split(">")[0].split("=")[0] for requirement in project["optional-dependencies"]["dash"]]
    assert extra == list(PACKAGES.values())
    assert not {name.split(">")[0] for name in project["dependencies"]} & set(extra)


def test_one_version_string():
    """pyproject.toml reads the version from perfkit/core/version.py; `perfkit --version` prints that one."""
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "perfkit.core.version.__version__"}

    result = subprocess.run([sys.executable, "-m", "perfkit", "--version"], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert result.stdout == f"perfkit, version {perfkit.__version__}\n"

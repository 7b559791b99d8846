"""perfkit's Dash dashboard: `create_app(runs)` builds it over already-loaded runs, `serve` runs it.

Its packages are the extra `perfkit[dash]`. Without them, importing it raises `DashPackagesMissing` (an ImportError
and a PerfkitError, so `perfkit dash` says it in one line): one message naming the command that installs them,
before any run is loaded, rather than a traceback from deep inside the app or, for waitress, only at serve time.
"""

from importlib.util import find_spec

from ..core.errors import PerfkitError

# The modules the dashboard imports, by the distribution that provides each (the extra `dash` in pyproject.toml).
PACKAGES = {"dash": "dash", "dash_ag_grid": "dash-ag-grid", "waitress": "waitress"}


class DashPackagesMissing(PerfkitError, ImportError):
    """The dashboard's packages (the extra `perfkit[dash]`) are not installed."""


def missing_packages() -> list[str]:
    """The dashboard's distributions whose module cannot be imported here, in PACKAGES' order."""
    return [distribution for module, distribution in PACKAGES.items() if find_spec(module) is None]


if missing := missing_packages():
    raise DashPackagesMissing(f"the dashboard needs packages that are not installed ({', '.join(missing)}): "
                              "pip install 'perfkit[dash]'")

from .app import create_app, serve  # noqa: E402  (only once its packages are known to be there)

__all__ = ["DashPackagesMissing", "create_app", "missing_packages", "serve"]

"""perfkit's Dash dashboard: `create_app(runs)` builds it over already-loaded runs, `serve` runs it."""

from perfkit import __version__  # Dash puts the version of a package whose scripts it serves in their URLs

from .app import create_app, serve

__all__ = ["__version__", "create_app", "serve"]

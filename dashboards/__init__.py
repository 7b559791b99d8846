"""perfkit's Dash dashboard: `create_app(runs)` builds it over already-loaded runs, `serve` runs it."""

from .app import create_app, serve

__all__ = ["create_app", "serve"]

"""perfkit's version: the one string pyproject.toml, `perfkit --version`, the cache and run manifests read."""

__version__ = "0.1.0"

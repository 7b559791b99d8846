"""The core layer: the data model (schema, units), causes, errors, bounded input, op-name rules and the one
plugin loader. It imports nothing else of perfkit; every other layer builds on it (docs/architecture.md)."""

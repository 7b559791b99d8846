"""The apps: the `perfkit` command (cli), `perfkit tune`. The Dash app is perfkit.dashboards (the repository's
dashboards/ folder). Apps call the public API (perfkit.api) and the layers below it."""

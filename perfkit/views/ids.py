"""The id of each of perfkit's own panels (views/panels.py): the dashboard's component id, the report's anchor.

Defined here once, below the panel list, so that what refers to a panel by its id (the dashboard's callbacks
and tables, the report's links, the tests, a plugin panel's id check in views/panel.py) names the constant.
"""

# One run's panels (views.panels.PANELS)
RUN_STATUS = "run-status"
KPIS = "kpis"
FINDINGS = "findings"
BOUND = "fig-bound"
STEPS = "fig-steps"
RANKS = "fig-ranks"
RANK_TABLE = "rank-table"
MEMORY = "fig-memory"
OP_MEMORY = "fig-op-memory"
LINK_HEATMAP = "fig-link-heatmap"
COMM_OP_TABLE = "comm-op-table"
OP_SHARES = "fig-op-shares"
CELLS = "fig-cells"
CELLS_TABLE = "cells-table"
HOST_QUEUE = "fig-host-queue"
DEVICE_QUEUE = "fig-device-queue"
PIPELINE = "fig-pipeline"
OP_TYPES_TABLE = "op-types-table"
OP_TABLE = "op-table"

# The compare section's panels (views.panels.COMPARE_PANELS)
SPEEDUPS = "speedups"
COMPARE_SETTINGS = "compare-settings"
COMPARE_SPREAD = "fig-compare-spread"
COMPARE_STEPS = "fig-compare-steps"
COMPARE_QUEUES = "fig-compare-queues"
COMPARE_OPS = "fig-compare-ops"
COMPARE_OP_TABLE = "compare-op-table"

# Every id above: a plugin's panel may take none of them (tests/test_views.py checks this is the panel list's).
OWN = frozenset({RUN_STATUS, KPIS, FINDINGS, BOUND, STEPS, RANKS, RANK_TABLE, MEMORY, OP_MEMORY, LINK_HEATMAP,
                 COMM_OP_TABLE, OP_SHARES, CELLS, CELLS_TABLE, HOST_QUEUE, DEVICE_QUEUE, PIPELINE, OP_TYPES_TABLE,
                 OP_TABLE, SPEEDUPS, COMPARE_SETTINGS, COMPARE_SPREAD, COMPARE_STEPS, COMPARE_QUEUES, COMPARE_OPS,
                 COMPARE_OP_TABLE})

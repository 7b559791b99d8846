"""Figures and tables, one module per dashboard page (overview, operators, cells, ranks, memory, compare,
timeline), their look in one (style): pure `Run -> plotly Figure` (or DataFrame) builders shared by the dashboard
(dashboards/) and the report (perfkit/render/report.py).

Every number a figure prints comes from perfkit.analysis (summarize / step_means / op_type_shares / queue_stats)
or the view layer's derived numbers (perfkit.views.numbers: slow ranks, communication), formatted by
perfkit.views.format, so the charts say what `perfkit summary` says. Which figure shows on which page, and in the
report, is perfkit.views.panels' list. A panel whose data the run lacks is an `empty_state` figure: a sentence,
no axes.
"""

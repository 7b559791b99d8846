"""The view layer: what every page, the report and the terminal show, defined once.

- `views.format`  number formatters (`ms`, `pct`, `count`, ...), step-part labels and the colours of each
                  meaning. Plain Python: `perfkit summary` renders through it without importing pandas.
- `views.numbers` derived numbers (headline cards, slow ranks, exposed communication, findings), each taken
                  from `analysis` / `cluster` / `advisor`, computed once per loaded run.
- `views.panels`  the dashboard's pages and the ordered panel lists that the dashboard pages
                  (dashboards/layout.py), the HTML report (perfkit/render/report.py), the terminal summary
                  (perfkit/render/text.py) and the summary JSON iterate over: one run's (`PANELS`) and the compare
                  section's (`COMPARE_PANELS`). Adding a chart = a figure function in perfkit/views/figures.py
                  + one `Panel` entry; adding a page = one `Page` entry + its panels.
"""

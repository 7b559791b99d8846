"""The view layer: what every page, the report and the terminal show, defined once.

- `views.format`   number formatters (`ms`, `pct`, `count`, ...), step-part and run labels and the colours of each
                   meaning. Plain Python: `perfkit summary` renders through it without importing pandas.
- `views.summary`  `summarize`: the `perfkit summary --format json` contract (a Summary, which knows its run).
- `views.lines`    each panel's text form: the summary dict as the lines the terminal prints.
- `views.numbers`  derived numbers (headline cards, slow ranks, exposed communication, findings), each taken
                   from `analysis` / `cluster` / `advisor`, computed once per loaded run (`views.per_run`).
- `views.compare`  the comparison of two runs (with analysis.statistics' verdict) and the CI gate.
- `views.figures`  the figures and tables, one module per dashboard page, their look in `figures.style`.
- `views.panel`    what a panel and a page are, the dashboard's pages, and the panels installed packages add;
  `views.ids`      the id of each of perfkit's own panels;
  `views.panels`   perfkit's own panels in order, one run's (`PANELS`) and the compare section's
                   (`COMPARE_PANELS`), and `shown`: what a dashboard page (dashboards/layout.py) or a report section
                   (perfkit/render/report.py) shows of them. The terminal summary (perfkit/render/text.py) prints
                   their text forms. Adding a chart = a figure function in its page's module + its id + one `Panel`
                   entry; adding a page = one `Page` entry + its panels.
"""

"""The dashboard's pages and the ordered list of panels that the dashboard, the report and the terminal show.

Every consumer iterates `PANELS` in order: the dashboard shows a page's panels (`panels_on(path)`), the HTML
report every panel marked `report`, the terminal summary every panel with a `text` form. Functions are named,
not imported, so `perfkit summary` reads this list without importing plotly or pandas:
`figure`/`table` name a function of perfkit/figures.py (Run -> Figure / DataFrame), `text` one of
perfkit/render.py (summary dict -> lines), `note` one of perfkit/views/numbers.py (Run -> sentence).

Adding a chart: write `def my_figure(run) -> go.Figure` in perfkit/figures.py and add
`Panel("my-chart", "My chart", "/", FIGURE, figure="my_figure")` where it should appear.
Adding a page: add `Page("/timeline", "Timeline")` to PAGES and its panels with `page="/timeline"`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Panel kinds: how a consumer renders a panel.
CARDS = "cards"          # the headline number cards (views.numbers.headline_cards)
FINDINGS = "findings"    # `perfkit advise`'s findings (views.numbers.findings)
FIGURE = "figure"        # a plotly figure
TABLE = "table"          # a DataFrame, columns formatted by their unit suffix (views.format.column_spec)
INSTANCES = "instances"  # the op-instance table with its pass filter and search (dashboard only)

# Whether the HTML report shows a panel.
ALWAYS = "always"        # always (a figure without data says why in words)
WITH_DATA = "with data"  # only for runs it has something to show for (a multi-rank run, memory records)
NEVER = "never"          # dashboard only


@dataclass(frozen=True)
class Page:
    path: str
    title: str


# Pages over one run, in navigation order; the compare page (several runs) follows them.
PAGES = (Page("/", "Overview"), Page("/operators", "Operators"), Page("/ranks", "Ranks"), Page("/memory", "Memory"))
COMPARE = Page("/compare", "Compare")
TIMELINE = Page("/timeline", "Timeline")  # not a page of panels: dashboards/timeline.py builds it
# Every page of the dashboard, in navigation order (the navigation bar and `perfkit dash --help` list these).
ALL_PAGES = (*PAGES, COMPARE, TIMELINE)


@dataclass(frozen=True)
class Panel:
    id: str                   # the dashboard's component id, also the report's anchor
    title: str
    page: str                 # the dashboard page that shows it
    kind: str
    figure: str | None = None  # FIGURE: function of perfkit.figures, Run -> plotly Figure
    table: str | None = None   # TABLE: function of perfkit.figures, Run -> DataFrame
    args: tuple = ()           # extra arguments for `figure` / `table` / `text`
    text: str | None = None    # terminal form: function of perfkit.render, (summary, *args) -> lines
    note: str | None = None    # a sentence above the panel: function of perfkit.views.numbers, Run -> str
    half: bool = False         # consecutive half-width panels share a row
    report: str = ALWAYS       # ALWAYS, WITH_DATA or NEVER
    optional: bool = False     # the dashboard page too leaves it out when it has nothing to show


PANELS = (
    Panel("kpis", "", "/", CARDS),
    Panel("findings", "Findings (perfkit advise)", "/", FINDINGS),
    Panel("fig-bound", "What bounds the step", "/", FIGURE, figure="bound_figure", text="bound_lines"),
    Panel("fig-steps", "Step trace", "/", FIGURE, figure="step_trace_figure", text="steps_lines"),
    Panel("fig-ranks", "Ranks", "/ranks", FIGURE, figure="ranks_figure", text="per_rank_lines",
          note="slow_ranks_note", report=WITH_DATA),
    Panel("rank-table", "Per-rank mean step (ms)", "/ranks", TABLE, table="rank_rows", report=WITH_DATA),
    Panel("fig-memory", "Memory", "/memory", FIGURE, figure="memory_timeline_figure", text="memory_lines",
          note="memory_peak_note", report=WITH_DATA),
    Panel("fig-op-memory", "Operators by memory", "/memory", FIGURE, figure="top_op_memory_figure", report=NEVER),
    Panel("fig-link-heatmap", "Link bandwidth", "/ranks", FIGURE, figure="link_heatmap_figure",
          text="communication_lines", report=WITH_DATA, optional=True),
    Panel("comm-op-table", "Communication ops (longest first)", "/ranks", TABLE, table="comm_op_rows",
          report=NEVER, optional=True),
    Panel("fig-op-shares", "Operator types", "/", FIGURE, figure="op_share_figure", text="op_type_lines"),
    Panel("fig-host-queue", "Host queue", "/", FIGURE, figure="queue_figure", args=("host",),
          text="queue_lines", half=True),
    Panel("fig-device-queue", "Device queue", "/", FIGURE, figure="queue_figure", args=("device",),
          text="queue_lines", half=True),
    Panel("fig-pipeline", "Data pipeline", "/", FIGURE, figure="pipeline_figure", text="pipeline_lines"),
    Panel("op-types-table", "Op types (total ms and calls summed over steps and ranks)", "/operators", TABLE,
          table="op_type_rows", note="op_mix_note"),
    Panel("op-table", "Op instances (total ms and calls summed over steps)", "/operators", INSTANCES,
          report=NEVER),
)


def panels_on(path: str) -> tuple[Panel, ...]:
    """The panels of one dashboard page, in order."""
    return tuple(panel for panel in PANELS if panel.page == path)


def in_report() -> tuple[Panel, ...]:
    """The panels the HTML report may show, in order (a WITH_DATA one only where it has data)."""
    return tuple(panel for panel in PANELS if panel.report != NEVER)


def rows(panels: tuple[Panel, ...]) -> list[tuple[Panel, ...]]:
    """Panels grouped into the rows a page lays out: consecutive half-width panels share one."""
    grouped: list[tuple[Panel, ...]] = []
    for panel in panels:
        if panel.half and grouped and grouped[-1][-1].half:
            grouped[-1] += (panel,)
        else:
            grouped.append((panel,))
    return grouped

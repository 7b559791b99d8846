"""The dashboard's pages and the ordered lists of panels that the dashboard, the report and the terminal show.

Every consumer iterates `panels()` in order: the dashboard shows a page's panels (`panels_on(path)`), the HTML
report every panel marked `report`, the terminal summary every panel with a `text` form and `perfkit summary
--format json` every panel's `data` (under "panels", by panel id). The compare section (`COMPARE_PANELS`, over
several runs) is one definition for the dashboard's Compare page and the report.

A panel holds its functions, checked when the list is built (`Panel.__post_init__`): perfkit's own are `Ref`s,
a module and a name imported at the first call, so that `perfkit summary` reads this list without importing
plotly or pandas; tests/test_views.py resolves every Ref, so a misspelt name fails there, a misspelt module here.

Adding a chart: write `def my_figure(run) -> go.Figure` in perfkit/views/figures.py and add
`Panel("my-chart", "My chart", "/", FIGURE, content=Ref(FIGURES, "my_figure"))` where it should appear; with
`data=` (Run -> JSON value) and `text=` (the summary dict -> lines) it reaches `perfkit summary` too.
Adding a page: add `Page("/timeline", "Timeline")` to PAGES and its panels with `page="/timeline"`.
An installed package adds panels through the entry point group `perfkit.panels` (perfkit/core/plugins.py).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from dataclasses import dataclass, replace
from typing import Any, Callable

from ..core import plugins
from ..core.causes import OP_TYPES_SUMMED_OVER
from ..core.errors import PluginError

# Panel kinds: how a consumer renders a panel.
CARDS = "cards"          # the headline number cards (views.numbers.headline_cards)
FINDINGS = "findings"    # `perfkit advise`'s findings (views.numbers.findings)
FIGURE = "figure"        # a plotly figure
TABLE = "table"          # a DataFrame, columns formatted by their unit suffix (views.format.column_spec)
INSTANCES = "instances"  # the op-instance table with its pass filter and search (dashboard only)
SPEEDUPS = "speedups"    # compare: one card per run (views.numbers.Card with a note)
KINDS = (CARDS, FINDINGS, FIGURE, TABLE, INSTANCES, SPEEDUPS)
# The kinds whose `content` function gives what they show.
WITH_CONTENT = (FIGURE, TABLE, SPEEDUPS)

# Whether the HTML report shows a panel.
ALWAYS = "always"        # always (a figure without data says why in words)
WITH_DATA = "with data"  # only for runs it has something to show for (a multi-rank run, memory records)
NEVER = "never"          # dashboard only

FIGURES, LINES, NUMBERS = "perfkit.views.figures", "perfkit.views.lines", "perfkit.views.numbers"


class Ref:
    """`module.name`, imported at the first call: `Ref(FIGURES, "queue_figure", "host")(run)` is
    `figures.queue_figure(run, "host")`. The module must exist when the Ref is made (a typo fails at import)."""

    def __init__(self, module: str, name: str, *args: Any):
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"panel function {module}.{name}: no module {module}")
        self.module, self.name, self.args = module, name, args

    def resolve(self) -> Callable:
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self, *values: Any) -> Any:
        return self.resolve()(*values, *self.args)

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}" + (f"(*, {', '.join(map(repr, self.args))})" if self.args else "")


@dataclass(frozen=True)
class Page:
    path: str
    title: str


# Pages over one run, in navigation order; the compare page (several runs) follows them.
PAGES = (Page("/", "Overview"), Page("/operators", "Operators"), Page("/cells", "Cells"), Page("/ranks", "Ranks"),
         Page("/memory", "Memory"))
COMPARE = Page("/compare", "Compare")
TIMELINE = Page("/timeline", "Timeline")  # not a page of panels: dashboards/timeline.py builds it
# Every page of the dashboard, in navigation order (the navigation bar and `perfkit dash --help` list these).
ALL_PAGES = (*PAGES, COMPARE, TIMELINE)


@dataclass(frozen=True)
class Panel:
    id: str                   # the dashboard's component id, also the report's anchor and the JSON key
    title: str
    page: str                 # the dashboard page that shows it
    kind: str
    content: Callable | None = None  # FIGURE / TABLE / SPEEDUPS: Run (compare: the runs) -> Figure / DataFrame / cards
    text: Callable | None = None     # terminal form: the summary dict -> lines
    data: Callable | None = None     # JSON form: Run -> a JSON value, summary["panels"][id] (and what `text` reads)
    note: Callable | None = None     # a sentence above the panel: Run -> str
    half: bool = False         # consecutive half-width panels share a row
    report: str = ALWAYS       # ALWAYS, WITH_DATA or NEVER
    optional: bool = False     # the dashboard page too leaves it out when it has nothing to show
    empty: str = "nothing to list in this run"  # what an empty TABLE says

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"panel {self.id!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if (self.content is not None) != (self.kind in WITH_CONTENT):
            raise ValueError(f"panel {self.id!r}: a {self.kind} panel "
                             f"{'needs a' if self.content is None else 'takes no'} content function")
        for name in ("content", "text", "data", "note"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValueError(f"panel {self.id!r}: {name} is not callable")
        if self.report not in (ALWAYS, WITH_DATA, NEVER):
            raise ValueError(f"panel {self.id!r}: report {self.report!r} is not one of always, with data, never")


PANELS = (
    Panel("kpis", "", "/", CARDS),
    Panel("findings", "Findings (perfkit advise)", "/", FINDINGS),
    Panel("fig-bound", "What bounds the step", "/", FIGURE, content=Ref(FIGURES, "bound_figure"),
          text=Ref(LINES, "bound_lines")),
    Panel("fig-steps", "Step trace", "/", FIGURE, content=Ref(FIGURES, "step_trace_figure"),
          text=Ref(LINES, "steps_lines")),
    Panel("fig-ranks", "Ranks", "/ranks", FIGURE, content=Ref(FIGURES, "ranks_figure"),
          text=Ref(LINES, "per_rank_lines"), note=Ref(NUMBERS, "slow_ranks_note"), report=WITH_DATA),
    Panel("rank-table", "Per-rank mean step (ms)", "/ranks", TABLE, content=Ref(FIGURES, "rank_rows"),
          report=WITH_DATA),
    Panel("fig-memory", "Memory", "/memory", FIGURE, content=Ref(FIGURES, "memory_timeline_figure"),
          text=Ref(LINES, "memory_lines"), note=Ref(NUMBERS, "memory_peak_note"), report=WITH_DATA),
    Panel("fig-op-memory", "Operators by memory", "/memory", FIGURE, content=Ref(FIGURES, "top_op_memory_figure"),
          report=NEVER),
    Panel("fig-link-heatmap", "Link bandwidth", "/ranks", FIGURE, content=Ref(FIGURES, "link_heatmap_figure"),
          text=Ref(LINES, "communication_lines"), report=WITH_DATA, optional=True),
    Panel("comm-op-table", "Communication ops (longest first)", "/ranks", TABLE, content=Ref(FIGURES, "comm_op_rows"),
          report=NEVER, optional=True),
    Panel("fig-op-shares", "Operator types", "/", FIGURE, content=Ref(FIGURES, "op_share_figure"),
          text=Ref(LINES, "op_type_lines")),
    Panel("fig-cells", "Time by network Cell", "/cells", FIGURE, content=Ref(FIGURES, "cells_figure"),
          text=Ref(LINES, "cell_lines"), report=WITH_DATA),
    Panel("cells-table", "Cells (ms per profiled step; every Cell and its ancestors)", "/cells", TABLE,
          content=Ref(FIGURES, "cell_rows"), report=NEVER, optional=True),
    Panel("fig-host-queue", "Host queue", "/", FIGURE, content=Ref(FIGURES, "queue_figure", "host"),
          text=Ref(LINES, "queue_lines", "host"), half=True),
    Panel("fig-device-queue", "Device queue", "/", FIGURE, content=Ref(FIGURES, "queue_figure", "device"),
          text=Ref(LINES, "queue_lines", "device"), half=True),
    Panel("fig-pipeline", "Data pipeline", "/", FIGURE, content=Ref(FIGURES, "pipeline_figure"),
          text=Ref(LINES, "pipeline_lines")),
    Panel("op-types-table", f"Op types (total ms and calls summed over {OP_TYPES_SUMMED_OVER})", "/operators", TABLE,
          content=Ref(FIGURES, "op_type_rows"), note=Ref(NUMBERS, "op_mix_note")),
    Panel("op-table", "Op instances (total ms and calls summed over steps)", "/operators", INSTANCES,
          report=NEVER),
)

# The compare section over several runs (the first is the baseline): the dashboard's Compare page and the
# report's compare section both show these, in this order. Content functions take the runs.
COMPARE_PANELS = (
    Panel("speedups", "Speedup over the first run: the verdict and throughput, as perfkit compare prints them",
          COMPARE.path, SPEEDUPS, content=Ref(FIGURES, "compare_speedup_cards")),
    Panel("compare-settings", "What differed between the runs", COMPARE.path, TABLE,
          content=Ref(FIGURES, "compare_setting_rows"),
          empty="nothing the runs' files record differs (device, network, batch, config, env, versions)"),
    Panel("fig-compare-spread", "Within-run step spread (describes each run)", COMPARE.path, FIGURE,
          content=Ref(FIGURES, "compare_step_spread_figure")),
    Panel("fig-compare-steps", "Step split", COMPARE.path, FIGURE, content=Ref(FIGURES, "compare_steps_figure"),
          half=True),
    Panel("fig-compare-queues", "Queue emptiness", COMPARE.path, FIGURE,
          content=Ref(FIGURES, "compare_queues_figure"), half=True),
    Panel("fig-compare-ops", "Op time per step", COMPARE.path, FIGURE, content=Ref(FIGURES, "compare_op_time_figure")),
    Panel("compare-op-table", "Op types in ms per step, the largest change first", COMPARE.path, TABLE,
          content=Ref(FIGURES, "compare_op_table"), empty="no operator statistics"),
)


@functools.lru_cache(maxsize=None)
def _installed() -> tuple[tuple[Panel, ...], tuple[str, ...]]:
    """Plugin panels whose id is none of perfkit's own and that are on a page, each function guarded: one that
    raises is a PluginError naming the plugin."""
    pages = {page.path for page in PAGES}
    loaded = plugins.load(plugins.PANELS, Panel, "panel", key=lambda panel: panel.id,
                          taken=(panel.id for panel in PANELS + COMPARE_PANELS),
                          refuse=lambda panel: None if panel.page in pages else
                          f"panel {panel.id!r} is on no page ({panel.page})")
    installed = tuple(replace(panel, **{name: _guarded(getattr(panel, name), plugin, f"panel {panel.id!r} {name}",
                                                       said=name == "note")
                                        for name in ("content", "text", "data", "note")
                                        if getattr(panel, name) is not None})
                      for panel, plugin in loaded.items)
    return installed, tuple(map(str, loaded.problems))


def _guarded(function: Callable, plugin: str, action: str, said: bool) -> Callable:
    """`function`, raising a PluginError naming the plugin where it raises anything (`said`: returning that
    line instead: a note is a sentence, so the failure can stand in its place)."""
    @functools.wraps(function)
    def call(*values: Any) -> Any:
        try:
            return function(*values)
        except Exception as exc:  # noqa: BLE001 - a plugin's failure is said in one line, the rest still shows
            if said:
                return plugins.failure(plugin, action, exc)
            raise PluginError(plugins.failure(plugin, action, exc)) from None
    return call


def panels() -> tuple[Panel, ...]:
    """perfkit's panels, then those of installed plugins."""
    return PANELS + _installed()[0]


def plugin_problems() -> tuple[str, ...]:
    """One warning per panel plugin that could not be used."""
    return _installed()[1]


def summary_entries(run) -> tuple[dict[str, Any], list[str]]:
    """({"panels": {id: data}} for the panels with a JSON form, or {} when none has one; a warning for each
    that raised) for `perfkit summary`."""
    entries: dict[str, Any] = {}
    problems = list(plugin_problems())
    for panel in panels():
        if panel.data is not None:
            try:
                entries[panel.id] = panel.data(run)
            except PluginError as exc:
                entries[panel.id] = None
                problems.append(exc.message)
    return ({"panels": entries} if entries else {}), problems


def panels_on(path: str) -> tuple[Panel, ...]:
    """The panels of one dashboard page, in order."""
    return tuple(panel for panel in panels() if panel.page == path)


def in_report() -> tuple[Panel, ...]:
    """The panels the HTML report may show, in order (a WITH_DATA one only where it has data)."""
    return tuple(panel for panel in panels() if panel.report != NEVER)


def rows(shown: tuple[Panel, ...]) -> list[tuple[Panel, ...]]:
    """Panels grouped into the rows a page lays out: consecutive half-width panels share one."""
    grouped: list[tuple[Panel, ...]] = []
    for panel in shown:
        if panel.half and grouped and grouped[-1][-1].half:
            grouped[-1] += (panel,)
        else:
            grouped.append((panel,))
    return grouped


def panel_content(panel: Panel, subject):
    """What a panel with a content function shows for this run (a compare panel: these runs): a figure, a table
    or cards. A plugin's function that raised shows its one-line error instead (an empty figure or table)."""
    try:
        return panel.content(subject)
    except PluginError as exc:
        if panel.kind == FIGURE:
            from .figures import empty_state
            return empty_state(exc.message)
        import pandas as pd
        return pd.DataFrame()


def has_content(content) -> bool:
    """A figure with data (not an `empty_state`), a table with rows, cards."""
    if type(content).__module__.startswith("plotly"):
        from .figures import empty_message
        return empty_message(content) is None
    return bool(len(content))

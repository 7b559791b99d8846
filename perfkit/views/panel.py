"""What a panel is: the Panel and Page records, the panel kinds, the dashboard's pages, and the panels that
installed packages add (entry point group `perfkit.panels`, perfkit/core/plugins.py).

The lowest module of the panel story, so that the summary (views/summary.py) reads the plugin panels' JSON forms
without importing any figure: perfkit's own panels, with their figure and table functions, are listed in
views/panels.py, above the figures they hold.

A plugin writes `Panel("my-chart", "My chart", "/", FIGURE, content=my_figure, data=..., text=...)`: `content`
draws it on the dashboard and in the report, `data` (Run -> JSON value) is its JSON form in `perfkit summary
--format json` (under "panels", by id), `text` (the summary dict -> lines) its terminal form.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

from ..core import plugins
from ..core.errors import PluginError
from .ids import OWN

# Panel kinds: how a consumer renders a panel.
CARDS = "cards"          # the headline number cards (views.numbers.headline_cards)
FINDINGS = "findings"    # `perfkit advise`'s findings (views.numbers.findings)
FIGURE = "figure"        # a plotly figure
TABLE = "table"          # a DataFrame, columns formatted by their unit suffix (views.format.column_spec)
INSTANCES = "instances"  # the op-instance table with its pass filter and search (dashboard only)
SPEEDUPS = "speedups"    # compare: one card per run (views.numbers.Card with a note)
STATUS = "status"        # the run, how it ended and the loader's warnings (views.lines.run_facts)
KINDS = (CARDS, FINDINGS, FIGURE, TABLE, INSTANCES, SPEEDUPS, STATUS)
# The kinds whose `content` function gives what they show.
WITH_CONTENT = (FIGURE, TABLE, SPEEDUPS)

# Whether the HTML report shows a panel.
ALWAYS = "always"        # always (a figure without data says why in words)
WITH_DATA = "with data"  # only for runs it has something to show for (a multi-rank run, memory records)
NEVER = "never"          # dashboard only
REPORT_MODES = (ALWAYS, WITH_DATA, NEVER)


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
    data: Callable | None = None     # JSON form: Run -> a JSON value (what `text` reads in the summary)
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
        if self.report not in REPORT_MODES:
            raise ValueError(f"panel {self.id!r}: report {self.report!r} is not one of {', '.join(REPORT_MODES)}")


@functools.lru_cache(maxsize=None)
def _installed() -> tuple[tuple[Panel, ...], tuple[str, ...]]:
    """Plugin panels whose id is none of perfkit's own and that are on a page, each function guarded: one that
    raises is a PluginError naming the plugin."""
    pages = {page.path for page in PAGES}
    loaded = plugins.load(plugins.PANELS, Panel, "panel", key=lambda panel: panel.id, taken=OWN,
                          refuse=lambda panel: None if panel.page in pages else
                          f"panel {panel.id!r} is on no page ({panel.page})")
    installed = tuple(replace(panel, **{name: _guarded(getattr(panel, name), plugin, f"panel {panel.id!r} {name}",
                                                       said=name == "note")
                                        for name in ("content", "text", "data", "note")
                                        if getattr(panel, name) is not None})
                      for panel, plugin in loaded.items)
    return installed, tuple(map(str, loaded.problems))


def installed() -> tuple[Panel, ...]:
    """The panels of installed plugins (shown after perfkit's own)."""
    return _installed()[0]


def plugin_problems() -> tuple[str, ...]:
    """One warning per panel plugin, or panel of one, that could not be used."""
    return _installed()[1]


def summary_entries(run) -> tuple[dict[str, Any], list[str]]:
    """({"panels": {id: data}} for the plugin panels with a JSON form, or {} when none has one; a warning for
    each that raised, and for each plugin that could not be used) for `perfkit summary`. perfkit's own panels'
    JSON forms are the summary's own keys (views/summary.py)."""
    entries: dict[str, Any] = {}
    problems = list(plugin_problems())
    for panel in installed():
        if panel.data is not None:
            try:
                entries[panel.id] = panel.data(run)
            except PluginError as exc:
                entries[panel.id] = None
                problems.append(exc.message)
    return ({"panels": entries} if entries else {}), problems


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

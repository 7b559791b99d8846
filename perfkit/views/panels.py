"""perfkit's own panels, in order, and what a dashboard page or a report section shows of them.

Every consumer iterates `panels()` in order: the dashboard shows a page's panels (`panels_on(path)`), the HTML
report every panel not marked NEVER, the terminal summary every panel's `text` form, and `perfkit summary
--format json` holds every panel's JSON form (`data`: perfkit's own are sections of the summary, a plugin's sits
under "panels"). The compare section (`COMPARE_PANELS`, over several runs) is one definition for the dashboard's
Compare page and the report. `shown` decides, for the dashboard and the report alike, which panels a page or a
section shows and in which rows.

A panel holds its functions themselves: the figure modules (views/figures) import no plotly until a figure is
drawn, so `perfkit summary` reads this list for its text forms without importing plotly or Dash.

Adding a chart: write `def my_figure(run) -> go.Figure` in the figure module of its page (views/figures) and add
`Panel(ids.MY_CHART, "My chart", "/", FIGURE, content=my_figure)` where it should appear, its id in views/ids.py
(and ids.OWN); with `text=` (the summary dict -> lines, views/lines.py) it reaches `perfkit summary` too.
Adding a page: add `Page("/streams", "Streams")` to views.panel.PAGES and its panels with `page="/streams"`.
An installed package adds panels through the entry point group `perfkit.panels` (views/panel.py).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple, Sequence

import pandas as pd

from ..core.causes import OP_TYPES_SUMMED_OVER
from ..core.errors import PluginError
from ..core.model import Run
from . import ids
from .figures import cells, compare, memory, operators, overview, ranks
from .figures.style import empty_message, empty_state
from .lines import (
    bound_lines,
    cell_lines,
    communication_lines,
    memory_lines,
    op_type_lines,
    per_rank_lines,
    pipeline_lines,
    queue_lines,
    status_lines,
    steps_lines,
)
from .numbers import memory_peak_note, op_mix_note, slow_ranks_note
from .panel import (
    CARDS,
    COMPARE,
    FIGURE,
    FINDINGS,
    INSTANCES,
    NEVER,
    SPEEDUPS,
    STATUS,
    TABLE,
    WITH_CONTENT,
    WITH_DATA,
    Panel,
    installed,
)
from .summary import summarize


def summary_part(*keys: str) -> Callable[[Run], dict[str, Any]]:
    """A panel's JSON form where it is part of the summary: the summary's `keys`, those its text form reads."""
    def part(run: Run) -> dict[str, Any]:
        summary = summarize(run)
        return {key: summary[key] for key in keys}
    return part


PANELS = (
    Panel(ids.RUN_STATUS, "Run", "/", STATUS, text=status_lines,
          data=summary_part("run", "layout", "device", "ranks", "meta", "warnings")),
    Panel(ids.KPIS, "", "/", CARDS),
    Panel(ids.FINDINGS, "Findings (perfkit advise)", "/", FINDINGS),
    Panel(ids.BOUND, "What bounds the step", "/", FIGURE, content=overview.bound_figure, text=bound_lines,
          data=summary_part("bound")),
    Panel(ids.STEPS, "Step trace", "/", FIGURE, content=overview.step_trace_figure, text=steps_lines,
          data=summary_part("steps", "bound")),
    Panel(ids.RANKS, "Ranks", "/ranks", FIGURE, content=ranks.ranks_figure, text=per_rank_lines,
          data=summary_part("per_rank", "slow_ranks"), note=slow_ranks_note, report=WITH_DATA),
    Panel(ids.RANK_TABLE, "Per-rank mean step (ms)", "/ranks", TABLE, content=ranks.rank_rows, report=WITH_DATA),
    Panel(ids.MEMORY, "Memory", "/memory", FIGURE, content=memory.memory_timeline_figure, text=memory_lines,
          data=summary_part("memory"), note=memory_peak_note, report=WITH_DATA),
    Panel(ids.OP_MEMORY, "Operators by memory", "/memory", FIGURE, content=memory.top_op_memory_figure,
          report=NEVER),
    Panel(ids.LINK_HEATMAP, "Link bandwidth", "/ranks", FIGURE, content=ranks.link_heatmap_figure,
          text=communication_lines, data=summary_part("communication"), report=WITH_DATA, optional=True),
    Panel(ids.COMM_OP_TABLE, "Communication ops (longest first)", "/ranks", TABLE, content=ranks.comm_op_rows,
          report=NEVER, optional=True),
    Panel(ids.OP_SHARES, "Operator types", "/", FIGURE, content=overview.op_share_figure, text=op_type_lines,
          data=summary_part("op_types", "per_rank")),
    Panel(ids.CELLS, "Time by network Cell", "/cells", FIGURE, content=cells.cells_figure, text=cell_lines,
          data=summary_part("cells"), report=WITH_DATA),
    Panel(ids.CELLS_TABLE, "Cells (ms per steady step; every Cell and its ancestors)", "/cells", TABLE,
          content=cells.cell_rows, report=NEVER, optional=True),
    Panel(ids.HOST_QUEUE, "Host queue", "/", FIGURE, content=partial(overview.queue_figure, which="host"),
          text=partial(queue_lines, which="host"), data=summary_part("queues"), half=True),
    Panel(ids.DEVICE_QUEUE, "Device queue", "/", FIGURE, content=partial(overview.queue_figure, which="device"),
          text=partial(queue_lines, which="device"), data=summary_part("queues"), half=True),
    Panel(ids.PIPELINE, "Data pipeline", "/", FIGURE, content=overview.pipeline_figure, text=pipeline_lines,
          data=summary_part("pipeline", "pipeline_rank", "per_rank")),
    Panel(ids.OP_TYPES_TABLE, f"Op types (total ms and calls summed over {OP_TYPES_SUMMED_OVER})", "/operators",
          TABLE, content=operators.op_type_rows, note=op_mix_note),
    Panel(ids.OP_TABLE, "Op instances (total ms and calls summed over steps)", "/operators", INSTANCES,
          report=NEVER),
)

# The compare section over several runs (the first is the baseline): the dashboard's Compare page and the
# report's compare section both show these, in this order. Content functions take the runs.
COMPARE_PANELS = (
    Panel(ids.SPEEDUPS, "Speedup over the first run: the verdict and throughput, as perfkit compare prints them",
          COMPARE.path, SPEEDUPS, content=compare.compare_speedup_cards),
    Panel(ids.COMPARE_SETTINGS, "What differed between the runs", COMPARE.path, TABLE,
          content=compare.compare_setting_rows,
          empty="nothing the runs' files record differs (device, network, batch, config, env, versions)"),
    Panel(ids.COMPARE_SPREAD, "Within-run step spread (describes each run)", COMPARE.path, FIGURE,
          content=compare.compare_step_spread_figure),
    Panel(ids.COMPARE_STEPS, "Step split", COMPARE.path, FIGURE, content=compare.compare_steps_figure, half=True),
    Panel(ids.COMPARE_QUEUES, "Queue emptiness", COMPARE.path, FIGURE, content=compare.compare_queues_figure,
          half=True),
    Panel(ids.COMPARE_OPS, "Op time per step", COMPARE.path, FIGURE, content=compare.compare_op_time_figure),
    Panel(ids.COMPARE_OP_TABLE, "Op types in ms per step, the largest change first", COMPARE.path, TABLE,
          content=compare.compare_op_table, empty="no operator statistics"),
)


def panels() -> tuple[Panel, ...]:
    """perfkit's panels, then those of installed plugins."""
    return PANELS + installed()


def panels_on(path: str) -> tuple[Panel, ...]:
    """The panels of one dashboard page, in order."""
    return tuple(panel for panel in panels() if panel.page == path)


def panel_content(panel: Panel, subject):
    """What a panel with a content function shows for this run (a compare panel: these runs): a figure, a table
    or cards. A plugin's function that raised shows its one-line error instead (an empty figure or table)."""
    try:
        return panel.content(subject)
    except PluginError as exc:
        return empty_state(exc.message) if panel.kind == FIGURE else pd.DataFrame()


def has_content(content) -> bool:
    """A figure with data (not an `empty_state`), a table with rows, cards."""
    if type(content).__module__.startswith("plotly"):
        return empty_message(content) is None
    return bool(len(content))


# Who shows a list of panels: they leave out a panel with nothing to show by different rules.
DASHBOARD = "dashboard"  # a page: shows an empty state where a panel has no data, unless the panel is optional
REPORT = "report"        # a section: no NEVER panel, and a WITH_DATA one only where it has something to show


class Shown(NamedTuple):
    panel: Panel
    content: Any  # what the content function gave (a figure, a table, cards); None for a panel without one


def shown(listed: Sequence[Panel], subject: Run | Sequence[Run], where: str) -> list[tuple[Shown, ...]]:
    """What a dashboard page or a report section (`where`: DASHBOARD or REPORT) shows of `listed` (one run's
    panels, or the compare panels over several runs): each panel kept with its content, in order, in the rows
    they are laid out in (consecutive half-width panels share one)."""
    if where not in (DASHBOARD, REPORT):
        raise ValueError(f"panels are shown on the {DASHBOARD} or in the {REPORT}, not {where!r}")
    kept = []
    for panel in listed:
        if where == REPORT and panel.report == NEVER:
            continue
        content = panel_content(panel, subject) if panel.kind in WITH_CONTENT else None
        drops_empty = panel.report == WITH_DATA if where == REPORT else panel.optional
        if content is None or not drops_empty or has_content(content):
            kept.append(Shown(panel, content))
    rows: list[tuple[Shown, ...]] = []
    for item in kept:
        if item.panel.half and rows and rows[-1][-1].panel.half:
            rows[-1] += (item,)
        else:
            rows.append((item,))
    return rows

"""Component ids shared by the layout, the callbacks and the browser tests (panels' ids: views.panels.PANELS)."""

from ..views.panels import ALL_PAGES
from ..views.panels import TIMELINE as TIMELINE_PAGE

URL = "url"
PAGE = "page"
RUN = "run-select"
COMPARE_RUNS = "compare-runs"
COMPARE_BODY = "compare-body"
COMPARE_OP_TABLE = "compare-op-table"
OP_PASSES = "op-passes"
OP_SEARCH = "op-search"
OP_TYPES_TABLE = "op-types-table"
OP_TABLE = "op-table"
OP_COUNT = "op-count"
RANK_TABLE = "rank-table"
COMM_OP_TABLE = "comm-op-table"
FINDING_TIMELINE_LINK = "finding-timeline-link"

# path -> title, in navigation order: the run pages, then the compare page.
PAGES = {page.path: page.title for page in ALL_PAGES}
TIMELINE = TIMELINE_PAGE.path


def kpi(key: str) -> str:
    return f"kpi-{key}"


def nav(path: str) -> str:
    return "nav-" + (path.strip("/") or "overview")

# The Cells page's flame graph (views.panels: panel "fig-cells"), zoomed by a clientside callback.
CELLS_FIGURE = "fig-cells"
CELLS_PAGE = "/cells"

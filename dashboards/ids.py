"""Component ids shared by the layout, the callbacks and the browser tests. A panel's component is its panel id
(perfkit/views/ids.py, defined there once)."""

from ..views.panel import ALL_PAGES
from ..views.panel import TIMELINE as TIMELINE_PAGE

URL = "url"
PAGE = "page"
RUN = "run-select"
COMPARE_RUNS = "compare-runs"
COMPARE_BODY = "compare-body"
OP_PASSES = "op-passes"
OP_SEARCH = "op-search"
OP_COUNT = "op-count"
FINDING_TIMELINE_LINK = "finding-timeline-link"

# path -> title, in navigation order: the run pages, then the compare page.
PAGES = {page.path: page.title for page in ALL_PAGES}
TIMELINE = TIMELINE_PAGE.path
CELLS_PAGE = "/cells"  # its flame graph zooms into the Cell a finding's link names
RANKS_PAGE = "/ranks"  # its link shows only for a run of several ranks


def kpi(key: str) -> str:
    return f"kpi-{key}"


def nav(path: str) -> str:
    return "nav-" + (path.strip("/") or "overview")

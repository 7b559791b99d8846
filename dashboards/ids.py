"""Component ids shared by the layout, the callbacks and the browser tests."""

URL = "url"
PAGE = "page"
RUN = "run-select"
COMPARE_RUNS = "compare-runs"
COMPARE_BODY = "compare-body"
OP_PASSES = "op-passes"
OP_SEARCH = "op-search"
OP_TYPES_TABLE = "op-types-table"
OP_TABLE = "op-table"
OP_COUNT = "op-count"

PAGES = {"/": "Overview", "/operators": "Operators", "/compare": "Compare", "/ranks": "Ranks", "/memory": "Memory"}


def kpi(key: str) -> str:
    return f"kpi-{key}"


def nav(path: str) -> str:
    return "nav-" + (path.strip("/") or "overview")

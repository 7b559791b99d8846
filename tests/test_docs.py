"""The docs keep up with the code, in the manner of sqlite-utils' tests/test_docs.py: every CLI command, every
advisor rule, every dashboard/report panel and every top-level key of `perfkit summary --format json` has its
place in docs/, so adding one without documenting it fails here, naming the page to add it to.

Where each thing is documented:
- a command `perfkit X`: a heading (or a table row's first cell) of a docs page naming `` `perfkit X` ``;
- an advisor rule: a row of docs/advice.md's rule table, the id in its first cell (`` | `rule_id` ``);
- a panel: a row of docs/dashboard.md's panel table, the id in its first cell;
- a summary key: a row of docs/summary-json.md's key table, the key in its first cell.
And every relative link and image of README.md and docs/*.md leads to a file that exists.
"""

from __future__ import annotations

import re

import pytest
from conftest import FIXTURE_RUNS, REPO

import perfkit
from perfkit.advisor.rules import RULES
from perfkit.apps.cli import main as cli
from perfkit.views.panels import COMPARE_PANELS, PANELS

DOCS = REPO / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def first_cells(text: str) -> set[str]:
    """The first cell of every table row of a page: `| `id` (low) | ...` -> "`id` (low)"."""
    return {line.split("|")[1].strip() for line in text.splitlines()
            if line.startswith("|") and line.count("|") > 2 and not set(line) <= set("|-: ")}


def has_row(text: str, name: str) -> bool:
    """Whether a table row of `text` starts with `name` in backticks."""
    return any(re.match(rf"`{re.escape(name)}`(\s|$)", cell) for cell in first_cells(text))


def pages_naming(command: str) -> set[str]:
    """The docs pages with a heading that names `perfkit COMMAND`, or a table row whose first cell starts with it."""
    named = re.compile(rf"`perfkit {command}\b")
    found = set()
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        if any(line.startswith("#") and named.search(line) for line in text.splitlines()) or any(
                named.match(cell) for cell in first_cells(text)):
            found.add(path.name)
    return found


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_command_has_a_docs_section(command):
    assert pages_naming(command), (f"`perfkit {command}` is named in no heading or table row of docs/*.md: add a section "
                   f"`perfkit {command}` to the page that documents it (docs/index.md lists the pages)")


@pytest.mark.parametrize("rule_id", [r.id for r in RULES])
def test_every_advisor_rule_has_a_row_in_advice_md(rule_id):
    assert has_row(page("advice.md"), rule_id), (
        f"advisor rule {rule_id!r} has no row in docs/advice.md's rule table: add `| `{rule_id}` | looks at | "
        "fires when | action | threshold source |`")


@pytest.mark.parametrize("panel_id", [p.id for p in PANELS + COMPARE_PANELS])
def test_every_panel_is_in_dashboard_md(panel_id):
    assert has_row(page("dashboard.md"), panel_id), (
        f"panel {panel_id!r} (perfkit/views/panels.py) has no row in docs/dashboard.md's panel table")


def test_every_summary_key_is_in_summary_json_md(uncached):
    """The top-level keys of `perfkit summary --format json` on a real run (the 2-rank msinsight_level1 fixture)."""
    summary_keys = list(perfkit.summarize(perfkit.load(FIXTURE_RUNS["new_level1"])))
    text = page("summary-json.md")
    missing = [key for key in summary_keys if not has_row(text, key)]
    assert missing == [], (f"perfkit summary --format json has top-level keys {missing} without a row in "
                           "docs/summary-json.md's key table")


def test_the_checks_see_the_tables():
    """The checks above read real tables: a page that lost its table would make every has_row fail anyway, but
    an empty command, rule, panel or key list would pass vacuously."""
    assert {"profile", "summary", "advise", "compare", "dash"} <= set(cli.commands)
    assert len(RULES) >= 10 and len(PANELS) >= 10 and len(COMPARE_PANELS) >= 5
    assert has_row(page("advice.md"), "data_pipeline_ok") and not has_row(page("advice.md"), "no_such_rule")


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced and indented code blocks, inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("    "):
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def test_relative_links_resolve():
    broken = []
    for path in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for line in prose_lines(path.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                file = target.partition("#")[0]
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or not file:
                    continue
                if not (path.parent / file).exists():
                    broken.append(f"{path.relative_to(REPO)}: {target}")
    assert broken == []

"""Plain-text renderings of the summary for a terminal.

The summary's sections are the text forms of the view layer's panels (views.panels.panels(), in that order, the
run panel with the run's status and warnings first), numbers through views.format. No pandas: this renders a
summary dict, also one read back from the cache.
"""

from __future__ import annotations

from typing import Any

from ..core.causes import BOUND_PARTS, PART_HEADINGS
from ..core.errors import PluginError
from ..views.format import ms
from ..views.lines import CELL_HEADING, cell_row, run_line, utilisation_line
from ..views.panels import panels


def summary_text(summary: dict[str, Any]) -> str:
    """Every panel's text form in order: the run panel first (the run, how it ended, its warnings), then the rest."""
    lines: list[str] = []
    previous = None
    for panel in panels():
        try:
            section = panel.text(summary) if panel.text else []
        except PluginError as exc:
            section = [f"warning: {exc.message}"]
        if section:
            # half-width panels side by side on a page are consecutive lines here (the two queues)
            lines += ([] if not lines or (panel.half and previous is not None and previous.half) else [""]) + section
            previous = panel
    return "\n".join(lines)


def slow_ranks_text(answer: dict[str, Any], shown: int = 10) -> str:
    """The slow-rank answer (cluster.SlowRanks.to_dict()): verdict, findings, and the ranks that matter."""
    per_rank = answer["per_rank"]
    slow = answer["slow_ranks"]
    lines = [run_line(answer["run"], answer.get("cycle")),
             f"ranks    {len(per_rank)}   slow: {', '.join(map(str, slow)) if slow else 'none'}"
             f"   (rule: (max - min) / mean step > {100 * answer['threshold']:.0f} %)", ""]
    for finding in answer["findings"]:
        reading = ("highest: rank {max_rank}, lowest: rank {min_rank}" if finding["rank_is_slow"] else
                   "highest: rank {max_rank} (not slow: it waits for a slow peer), lowest: rank {min_rank}")
        lines.append(f"  {finding['dimension']:<14} spread {100 * finding['spread']:6.1f} % of the mean step   "
                     + reading.format(**finding))
    waits = any((row.get("communication_ms") or 0) > 0 for row in per_rank)
    if waits:
        lines.append("  own_ms: the step less the rank's collective communication and pipeline wait, where it waits "
                     "for its peers; the rank whose own time stands out is the one the others wait for")
    if answer["findings"]:
        lines.append("")
    fastest = min(per_rank, key=lambda row: row["total_ms"] if row["total_ms"] is not None else float("inf"))
    listed = (per_rank[:shown] if len(per_rank) <= shown
              else [row for row in per_rank if row["rank"] in slow] or per_rank[:shown])
    if fastest not in listed:
        listed.append(fastest)
    # the step ledger's split per rank: the numbers summary, advise and the Ranks page show
    columns = [("total_ms", "total"), *((f"{part}_ms", PART_HEADINGS[part]) for part in BOUND_PARTS)]
    if waits:
        columns.append(("own_ms", "own time"))
    lines.append(f"  {'rank':>6} {'steps':>6} " + " ".join(f"{heading:>14}" for _, heading in columns))
    for row in listed[:shown + 1]:
        lines.append(f"  {row['rank']:>6} {row['steps']:>6} " + " ".join(
            f"{ms(row.get(key)):>14}" for key, _ in columns))
    if len(per_rank) > len(listed[:shown + 1]):
        lines.append(f"  … {len(per_rank) - len(listed[:shown + 1])} more ranks (--format json lists all)")
    for warning in answer["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


# `--by cell` leaves out Cells under this share of the step (their time is in their parent's line).
TREE_MIN_SHARE = 0.005


def cell_tree_text(summary: dict[str, Any]) -> str:
    """`perfkit summary --by cell`: every Cell over TREE_MIN_SHARE of the step, indented by depth."""
    entry = summary.get("cells")
    lines = [run_line(summary["run"], summary.get("meta", {}).get("cycle")), ""]
    if not entry:
        return "\n".join(lines + ["no op data: nothing to place in Cells"])
    lines += ["Cells (ms per steady step, indented by depth)", CELL_HEADING]
    for group in entry["by_rank"]:
        if len(entry["by_rank"]) > 1:
            lines.append(f"  rank {group['rank']}")
        lines += [cell_row(cell, "  " * (cell["depth"] - 1)) for cell in group["tree"]
                  if cell["share"] is None or cell["share"] >= TREE_MIN_SHARE]
    lines.append(utilisation_line(entry["utilisation"]))
    lines += [f"note: {warning}" for warning in entry["warnings"]]
    return "\n".join(lines)

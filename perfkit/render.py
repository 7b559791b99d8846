"""Plain-text renderings of the summary for a terminal."""

from __future__ import annotations

import statistics
from typing import Any


def _ms(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.3f} ms"


# Up to this many ranks the summary lists each one; beyond, it shows the spread and the outliers.
LISTED_RANKS = 16
# How many of the slowest and of the fastest ranks a long per-rank section shows.
OUTLIER_RANKS = 5


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 7, 9, 10] -> "0-3, 7, 9-10"."""
    ranges: list[list[int]] = []
    for rank in sorted(ranks):
        if ranges and rank == ranges[-1][1] + 1:
            ranges[-1][1] = rank
        else:
            ranges.append([rank, rank])
    return ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in ranges)


def _ranks_label(ranks: list[int]) -> str:
    return str(ranks) if len(ranks) <= LISTED_RANKS else f"{rank_ranges(ranks)} ({len(ranks)} ranks)"


def _per_rank_lines(per_rank: list[dict[str, Any]]) -> list[str]:
    """Each rank's mean step total; with many ranks, the spread and the slowest and fastest few."""
    def total(entry: dict[str, Any]) -> float | None:
        return entry["steps"]["total_ms"] if entry["steps"] else None

    def line(entry: dict[str, Any]) -> str:
        return f"  rank {entry['rank']:<5}{_ms(total(entry)):>16}"

    if len(per_rank) <= LISTED_RANKS:
        return ["per rank (mean step total)"] + [line(entry) for entry in per_rank]
    timed = sorted((entry for entry in per_rank if total(entry) is not None), key=total)
    lines = [f"per rank (mean step total; {len(per_rank)} ranks, `perfkit ranks` or --format json for all)"]
    if timed:
        totals = [total(entry) for entry in timed]
        middle = statistics.median(totals)
        spread = f"   spread {100 * (totals[-1] - totals[0]) / middle:.1f} % of the median" if middle else ""
        lines.append(f"  fastest {_ms(totals[0])}   median {_ms(middle)}   slowest {_ms(totals[-1])}{spread}")
        lines.append(f"  slowest {min(OUTLIER_RANKS, len(timed))}:")
        lines += [line(entry) for entry in timed[::-1][:OUTLIER_RANKS]]
        fastest = [entry for entry in timed[:OUTLIER_RANKS] if entry not in timed[-OUTLIER_RANKS:]]
        if fastest:
            lines.append(f"  fastest {len(fastest)}:")
            lines += [line(entry) for entry in fastest]
    untimed = [entry["rank"] for entry in per_rank if total(entry) is None]
    if untimed:
        lines.append(f"  step total unknown on rank(s) {rank_ranges(untimed)}")
    return lines


def mean_of_text(means: dict[str, Any], brief: bool = False) -> str:
    """`step_means`' coverage in words: "steps 2-20; first step 40.063 ms left out, ..." (brief: "steps 2-20")."""
    mean_of = means["mean_of"]
    covered = (f"step {mean_of['first']}" if mean_of["first"] == mean_of["last"]
               else f"steps {mean_of['first']}-{mean_of['last']}")
    first = means.get("first_step_ms")
    if brief or mean_of["first_step"] is None:
        return covered
    return covered + f"; first step{'' if first is None else f' {first:,.3f} ms'} {mean_of['first_step']}"


def _mb(value: float | None) -> str:
    return "unknown" if value is None else f"{value:,.1f} MB"


def _memory_communication_lines(summary: dict[str, Any]) -> list[str]:
    """The framework allocator's peak and, per step, communication time, waiting and the slowest link."""
    lines = []
    memory, communication = summary.get("memory"), summary.get("communication")
    if memory:
        capacity = f" of {_mb(memory['capacity_mb'])}" if memory["capacity_mb"] is not None else ""
        lines.append(f"memory   peak allocated {_mb(memory['peak_allocated_mb'])}{capacity}, "
                     f"reserved {_mb(memory['peak_reserved_mb'])} (largest rank)")
    if communication:
        wait = communication["wait_ratio"]
        lines.append(f"communication per step (mean over ranks)  collective {_ms(communication['collective_ms'])}"
                     f"   p2p {_ms(communication['p2p_ms'])}"
                     f"   waiting {'unknown' if wait is None else f'{100 * wait:.1f} %'} of transfer time")
        link = communication["slowest_link"]
        if link:
            lines.append(f"  slowest link  {link['src']} -> {link['dst']} {link['link_type']}  "
                         f"{link['bandwidth_gb_s']:.2f} GB/s ({_mb(link['size_mb'])})")
    return [""] + lines if lines else []


def summary_text(summary: dict[str, Any], top: int = 10) -> str:
    meta = summary.get("meta", {})
    lines = [f"run      {summary['run']}",
             f"layout   {summary['layout']}   device {summary['device']}   ranks {_ranks_label(summary['ranks'])}",
             f"mode     {meta.get('mode') or 'unknown'}   data {meta.get('data_mode') or 'unknown'}"
             f"   amp {meta.get('amp_level') or 'unknown'}   mindspore {meta.get('ms_version') or 'unknown'}"]
    steps = summary["steps"]
    lines.append("")
    if steps:
        total = steps["total_ms"]
        lines.append(f"steps ({steps['count']} per rank), mean per step over {mean_of_text(steps)}")
        for key, label in (("interval_ms", "step interval (data wait)"), ("fwd_bwd_ms", "forward+backward"),
                           ("tail_ms", "tail (optimizer, sync)"), ("total_ms", "total")):
            value = steps[key]
            share = f"  {100 * value / total:5.1f} %" if value is not None and total and key != "total_ms" else ""
            lines.append(f"  {label:<26}{_ms(value):>16}{share}")
        for key, label in (("comm_ms", "communication (any stream)"),
                           ("comm_exposed_ms", "communication not overlapped"), ("free_ms", "free (device idle)")):
            if steps.get(key) is not None:
                lines.append(f"  {label:<26}{_ms(steps[key]):>16}")
    else:
        lines.append("steps    unknown (no step trace in this run)")
    if len(summary["per_rank"]) > 1:
        lines.append("")
        lines.extend(_per_rank_lines(summary["per_rank"]))
        if summary.get("slow_ranks"):
            lines.append(f"  slow ranks {rank_ranges(summary['slow_ranks'])} (in step, data-wait or compute time; "
                         "`perfkit ranks` says which and by how much)")
    lines.extend(_memory_communication_lines(summary))
    if summary["op_types"]:
        lines.append("")
        lines.append(f"op types (top {min(top, len(summary['op_types']))} of {len(summary['op_types'])})")
        for op in summary["op_types"][:top]:
            share = "" if op["share"] is None else f"{100 * op['share']:5.1f} %"
            lines.append(f"  {op['type']:<34}{op['total_ms']:>14,.3f} ms  {share}  x{op['count']}")
    lines.append("")
    for which in ("host", "device"):
        queue = summary["queues"][which]
        if queue:
            lines.append(f"{which} queue  {queue['samples']} samples, empty {queue['empty_pct']:.1f} %, "
                         f"full {queue['full_pct']:.1f} %")
        else:
            lines.append(f"{which} queue  no data")
    if summary["pipeline"]:
        lines.append("")
        lines.append("data pipeline (op, workers, output queue usage)")
        for op in summary["pipeline"]:
            usage = "n/a" if op["queue_usage"] is None else f"{100 * op['queue_usage']:.1f} %"
            workers = "?" if op["workers"] is None else op["workers"]
            lines.append(f"  {op['op_id']:>3} {op['op_type']:<20} workers {workers:<3} queue {usage}")
    if summary["warnings"]:
        lines.append("")
        lines.extend(f"warning: {w}" for w in summary["warnings"])
    return "\n".join(lines)


def slow_ranks_text(answer: dict[str, Any], shown: int = 10) -> str:
    """The slow-rank answer (cluster.SlowRanks.to_dict()): verdict, findings, and the ranks that matter."""
    per_rank = answer["per_rank"]
    slow = answer["slow_ranks"]
    lines = [f"run      {answer['run']}",
             f"ranks    {len(per_rank)}   slow: {', '.join(map(str, slow)) if slow else 'none'}"
             f"   (rule: (max - min) / mean step > {100 * answer['threshold']:.0f} %)", ""]
    for finding in answer["findings"]:
        reading = ("highest: rank {max_rank}, lowest: rank {min_rank}" if finding["rank_is_slow"] else
                   "highest: rank {max_rank} (likely waiting for a slow peer), lowest: rank {min_rank}")
        lines.append(f"  {finding['dimension']:<14} spread {100 * finding['spread']:6.1f} % of the mean step   "
                     + reading.format(**finding))
    if answer["findings"]:
        lines.append("")
    fastest = min(per_rank, key=lambda row: row["total_ms"] if row["total_ms"] is not None else float("inf"))
    listed = [row for row in per_rank if row["rank"] in slow] or per_rank[:shown]
    if fastest not in listed:
        listed.append(fastest)
    lines.append(f"  {'rank':>6} {'steps':>6} {'total':>14} {'interval':>14} {'computing':>14} {'comm':>14}")
    for row in listed[:shown + 1]:
        lines.append(f"  {row['rank']:>6} {row['steps']:>6} " + " ".join(
            f"{_ms(row[key]):>14}" for key in ("total_ms", "interval_ms", "computing_ms", "comm_ms")))
    if len(per_rank) > len(listed[:shown + 1]):
        lines.append(f"  … {len(per_rank) - len(listed[:shown + 1])} more ranks (--format json lists all)")
    for warning in answer["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)

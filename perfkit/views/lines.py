"""Each panel's text form: the summary dict (views/summary.py) as the lines the terminal, `perfkit summary`
and a notebook's plain output print, worded once for all of them."""

from __future__ import annotations

import statistics
from typing import Any

from ..core.causes import BOUND_PART_LABELS, BOUND_PARTS, OP_TYPES_SUMMED_OVER, PART_HEADINGS
from ..core.units import FLOP_PER_GFLOP, GFLOP_PER_TFLOP
from .format import (
    PIPELINE_RANK_COLUMNS,
    STEP_LABELS,
    STEP_SPLITS,
    count,
    mb,
    mean_of_text,
    ms,
    pct,
    percent,
    pooled,
    rank_ranges,
)

# Up to this many ranks the summary lists each one; beyond, it shows the spread and the outliers.
LISTED_RANKS = 16


# How many of the slowest and of the fastest ranks a long per-rank section shows.
OUTLIER_RANKS = 5


def ranks_label(ranks: list[int]) -> str:
    return str(ranks) if len(ranks) <= LISTED_RANKS else f"{rank_ranges(ranks)} ({len(ranks)} ranks)"


def op_ranks_label(op_ranks: dict[str, Any] | None) -> str | None:
    """'ranks 17, 2048, 4001 of 4,096': the ranks the op-level numbers (op types, memory, Cells) cover, from a
    summary's or an advice's `op_ranks` ({"ranks": [...], "of": count}); None where they cover every rank."""
    if not op_ranks:
        return None
    return f"rank{'s' if len(op_ranks['ranks']) != 1 else ''} {', '.join(map(str, op_ranks['ranks']))} of " \
           f"{op_ranks['of']:,}"


def op_ranks_line(op_ranks: dict[str, Any] | None) -> list[str]:
    """The line a text answer says the op-level numbers' ranks in, where they are not every rank."""
    label = op_ranks_label(op_ranks)
    return [f"op-level numbers (op types, memory, Cells): {label}; --rank N or --all-ranks reads others"] \
        if label else []


def _per_rank_lines(per_rank: list[dict[str, Any]]) -> list[str]:
    """Each rank's mean step total; with many ranks, the spread and the slowest and fastest few."""
    def total(entry: dict[str, Any]) -> float | None:
        return entry["steps"]["total_ms"] if entry["steps"] else None

    shown = [part for part in BOUND_PARTS if any((entry.get("parts_ms") or {}).get(part) for entry in per_rank)]

    def line(entry: dict[str, Any]) -> str:
        parts = entry.get("parts_ms") or {}
        return f"  rank {entry['rank']:<5}{ms(total(entry)):>16}" + "".join(
            f"{ms(parts.get(part)):>16}" for part in shown)

    heading = "".join(f"{PART_HEADINGS[part]:>16}" for part in shown)
    if len(per_rank) <= LISTED_RANKS:
        return ["per rank (mean step: total and its split)", f"  {'':<10}{'total':>16}{heading}"] + \
            [line(entry) for entry in per_rank]
    timed = sorted((entry for entry in per_rank if total(entry) is not None), key=total)
    lines = [f"per rank (mean step total; {len(per_rank)} ranks, `perfkit ranks` or --format json for all)"]
    if timed:
        totals = [total(entry) for entry in timed]
        middle = statistics.median(totals)
        spread = f"   spread {pct((totals[-1] - totals[0]) / middle)} of the median" if middle else ""
        lines.append(f"  fastest {ms(totals[0])}   median {ms(middle)}   slowest {ms(totals[-1])}{spread}")
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


def bound_text(bound: dict[str, Any] | None) -> list[str]:
    """The top-down breakdown (analysis.bound's dict): the bound kind, then each part of the mean step."""
    if not bound or not bound.get("parts_ms"):
        reason = "; ".join(bound["evidence"]) if bound else "no step times"
        return [f"bound    unknown ({reason})"]
    parts = bound["parts_ms"]
    total = sum(parts.values())
    lines = [f"bound    {bound['kind']}   (top-down split of the mean step)"]
    labels = bound.get("labels") or BOUND_PART_LABELS
    lines += [f"  {labels[part]:<56}{ms(value):>16}  {pct(value / total):>7}"
              for part, value in parts.items() if value > 0]
    return lines


def bound_lines(summary: dict[str, Any]) -> list[str]:
    return bound_text(summary.get("bound"))


def interval_label(bound: dict[str, Any] | None) -> str:
    """The step interval is data wait only where the queues show the device starving (views.format's label
    says device idle)."""
    if bound and bound.get("parts_ms", {}).get("data", 0) > 0:
        return "step interval (data wait)"
    return STEP_LABELS["interval_ms"]


def steps_lines(summary: dict[str, Any]) -> list[str]:
    steps = summary["steps"]
    if not steps:
        return ["steps    unknown (no step trace in this run)"]
    total = steps["total_ms"]
    lines = [f"steps ({steps['count']} per rank), mean per step over {mean_of_text(steps)}"]
    for split in STEP_SPLITS:
        for key, label in split:
            value = steps.get(key)
            if value is None and key not in ("interval_ms", "fwd_bwd_ms", "tail_ms"):
                continue  # the new layout's overlap columns only where measured; the classic split always
            share = f"  {pct(value / total):>7}" if value is not None and total else ""
            label = interval_label(summary.get("bound")) if key == "interval_ms" else label
            lines.append(f"  {label:<32}{ms(value):>16}{share}")
    if steps.get("comm_ms") is not None:  # on any stream, overlapped or not: not a part of the split
        lines.append(f"  {'communication (any stream)':<32}{ms(steps['comm_ms']):>16}")
    lines.append(f"  {'total':<32}{ms(total):>16}")
    return lines


def per_rank_lines(summary: dict[str, Any]) -> list[str]:
    if len(summary["per_rank"]) < 2:
        return []
    lines = _per_rank_lines(summary["per_rank"])
    if summary.get("slow_ranks"):
        lines.append(f"  slow ranks {rank_ranges(summary['slow_ranks'])} (in step, own, idle or compute time; "
                     "`perfkit ranks` says which and by how much)")
    return lines


def op_type_lines(summary: dict[str, Any], top: int = 10) -> list[str]:
    if not summary["op_types"]:
        return []
    covered = op_ranks_label(summary.get("op_ranks"))
    lines = [f"op types (top {min(top, len(summary['op_types']))} of {len(summary['op_types'])}; "
             f"total and calls over {OP_TYPES_SUMMED_OVER}" + (f"; {covered})" if covered else ")")]
    lines += _op_type_rows(summary["op_types"][:top], indent="  ")
    by_rank = [entry for entry in summary["per_rank"] if "op_types" in entry]
    if by_rank:  # analysis.ranks_run_different_ops: the pooled shares above describe no single rank
        lines.append("  ranks run different op-type mixes: the pooled table above mixes them; per rank (top "
                     f"{max(len(entry['op_types']) for entry in by_rank)}, share of the rank's op time):")
        for entry in by_rank:
            lines.append(f"  rank {entry['rank']}" + ("" if entry["op_types"] else ": no op data"))
            lines += _op_type_rows(entry["op_types"], indent="    ")
    return lines


def _op_type_rows(op_types: list[dict[str, Any]], indent: str) -> list[str]:
    """One line per op type: type, total ms, share, calls (columns aligned whatever the indent)."""
    rows = []
    for op in op_types:
        share = "" if op["share"] is None else f"{pct(op['share']):>7}"
        rows.append(f"{indent}{op['type']:<{36 - len(indent)}}{ms(op['total_ms']):>17}  {share}  x{count(op['count'])}")
    return rows


def queue_lines(summary: dict[str, Any], which: str) -> list[str]:
    queue = summary["queues"][which]
    if not queue:
        return [f"{which} queue  no data"]
    return [f"{which} queue  {count(queue['samples'])} samples, empty {percent(queue['empty_pct'])}, "
            f"full {percent(queue['full_pct'])}"]


def pipeline_lines(summary: dict[str, Any]) -> list[str]:
    if not summary["pipeline"]:
        return []
    by_rank = {entry["rank"]: entry["pipeline"] for entry in summary["per_rank"] if entry.get("pipeline")}
    if len(by_rank) > 1:
        return _pipelines_by_rank(by_rank)
    rank = summary.get("pipeline_rank")
    lines = ["data pipeline (op, workers, output queue usage)" + (f", rank {rank}" if rank is not None else "")]
    for op in summary["pipeline"]:
        workers = "?" if op["workers"] is None else op["workers"]
        lines.append(f"  {op['op_id']:>3} {op['op_type']:<20} workers {workers:<3} queue {pct(op['queue_usage'])}")
    return lines


def _pipelines_by_rank(by_rank: dict[int, list[dict[str, Any]]]) -> list[str]:
    """Each op's output queue usage on every rank (the ranks' pipelines differ), or pooled over many ranks."""
    ranks = sorted(by_rank)
    usage = {rank: {op["op_id"]: op["queue_usage"] for op in ops} for rank, ops in by_rank.items()}
    ops = {op["op_id"]: op for rank in ranks for op in by_rank[rank]}
    if len(ranks) <= PIPELINE_RANK_COLUMNS:
        lines = ["data pipeline (op, workers, output queue usage per rank)",
                 " " * 38 + "".join(f"{'rank ' + str(rank):>10}" for rank in ranks)]
        for op_id, op in sorted(ops.items()):
            workers = "?" if op["workers"] is None else op["workers"]
            lines.append(f"  {op_id:>3} {op['op_type']:<20} workers {workers:<3}"
                         + "".join(f"{pct(usage[rank].get(op_id)):>10}" for rank in ranks))
        return lines
    lines = [f"data pipeline (op, workers, output queue usage over {len(ranks)} ranks: min / median / max)"]
    for op_id, op in sorted(ops.items()):
        values = [v for rank in ranks if (v := usage[rank].get(op_id)) is not None]
        workers = "?" if op["workers"] is None else op["workers"]
        spread = " / ".join(map(pct, pooled(values))) if values else pct(None)
        lines.append(f"  {op_id:>3} {op['op_type']:<20} workers {workers:<3} queue {spread}")
    return lines


def memory_lines(summary: dict[str, Any]) -> list[str]:
    """The framework allocator's peak (largest rank)."""
    memory = summary.get("memory")
    if not memory:
        return []
    capacity = f" of {mb(memory['capacity_mb'])}" if memory["capacity_mb"] is not None else ""
    return [f"memory   peak allocated {mb(memory['peak_allocated_mb'])}{capacity}, "
            f"reserved {mb(memory['peak_reserved_mb'])} (largest rank)"]


def communication_lines(summary: dict[str, Any]) -> list[str]:
    """Per step: communication time, waiting and the slowest link."""
    communication = summary.get("communication")
    if not communication:
        return []
    lines = [f"communication per step (mean over ranks)  collective {ms(communication['collective_ms'])}"
             f"   p2p {ms(communication['p2p_ms'])}"
             f"   waiting {'unknown' if communication['wait_ratio'] is None else pct(communication['wait_ratio'])}"
             " of transfer time"]
    link = communication["slowest_link"]
    if link:
        lines.append(f"  slowest link  {link['src']} -> {link['dst']} {link['link_type']}  "
                     f"{link['bandwidth_gb_s']:.2f} GB/s ({mb(link['size_mb'])})")
    return lines


# The summary's Cells section lists at most this many Cells; `perfkit summary --by cell` lists the whole tree.
TOP_CELLS = 12


def cell_row(cell: dict[str, Any], indent: str) -> str:
    rate = "" if cell["tflops_per_s"] is None else f"{GFLOP_PER_TFLOP * cell['tflops_per_s']:>9.1f}"
    share = "" if cell["share"] is None else pct(cell["share"])
    name = f"{indent}{cell['cell']}"
    return (f"  {name:<32}{ms(cell['total_ms']):>14}{ms(cell['forward_ms']):>14}{ms(cell['backward_ms']):>14}"
            f"{ms(cell['other_ms']):>13}{share:>8}{rate:>10}")


CELL_HEADING = (f"  {'':<32}{'total':>14}{'forward':>14}{'backward':>14}{'other':>13}{'share':>8}{'GFLOP/s':>10}")


def utilisation_line(utilisation: dict[str, Any]) -> str:
    if utilisation["flops_per_step"] is None:
        return "  FLOPs: no op with a FLOP model (convolutions, MatMul, BatchNorm) has usable shapes"
    line = (f"  model FLOPs {utilisation['flops_per_step'] / FLOP_PER_GFLOP:,.2f} G per step (convolutions, "
            f"MatMul, BatchNorm), achieved {GFLOP_PER_TFLOP * utilisation['achieved_tflops_per_s']:,.1f} GFLOP/s "
            "over the step")
    if utilisation["mfu"] is not None:
        peak = utilisation["peak"]
        return line + (f"; MFU {pct(utilisation['mfu'])} of {peak['chip']} {peak['dtype']} "
                       f"{GFLOP_PER_TFLOP * peak['tflops_per_s']:,.1f} GFLOP/s ({peak['source']})")
    return line + f"; MFU unknown: {utilisation['mfu_unknown']}"


def cell_lines(summary: dict[str, Any]) -> list[str]:
    """The top Cells at a readable level (cells.readable_level), ms per steady step (cells.cell_table)."""
    entry = summary.get("cells")
    if not entry:
        return []
    lines = ["Cells (ms per steady step; `perfkit summary --by cell` for the whole tree)", CELL_HEADING]
    for group in entry["by_rank"]:
        if len(entry["by_rank"]) > 1:
            lines.append(f"  rank {group['rank']}")
        lines += [cell_row(cell, "") for cell in group["top"][:TOP_CELLS]]
    lines.append(utilisation_line(entry["utilisation"]))
    lines += [f"  note: {warning}" for warning in entry["warnings"]]
    return lines


# ---------------------------------------------------------------------------------------------------------
# The run panel: what the run is, how it ended and what the loader warned of, in one place for every view

# The recorded statuses (perfkit_run.json, docs/formats.md) that mean the run did not end as it should.
ENDED_BADLY = ("failed", "interrupted", "incomplete", "running")


def run_line(path: str, cycle: int | str | None) -> str:
    """A text answer's first line: the run, and its profiler cycle where one was chosen (--cycle)."""
    return f"run      {path}" + (f"   profiler cycle {cycle} (--cycle)" if cycle is not None else "")


def run_heading(summary: dict[str, Any]) -> str:
    """The run panel's heading on a page: the run's path, and its profiler cycle where one was chosen (--cycle)."""
    cycle = summary.get("meta", {}).get("cycle")
    return summary["run"] + (f" · profiler cycle {cycle} (--cycle)" if cycle is not None else "")


def run_facts(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, words) of the run as every view shows it (the terminal's first lines, the Overview's and the
    report's run panel): layout, device, ranks, mode, data mode, AMP level, MindSpore version and, where `perfkit
    profile` recorded it, the status."""
    meta = summary.get("meta", {})
    facts = [("layout", str(summary["layout"])), ("device", str(summary["device"])),
             ("ranks", ranks_label(summary["ranks"])), ("mode", meta.get("mode") or "unknown"),
             ("data", meta.get("data_mode") or "unknown"), ("amp", meta.get("amp_level") or "unknown"),
             (meta["framework"], meta.get("framework_version") or "unknown") if "framework_version" in meta
             else ("mindspore", meta.get("ms_version") or "unknown")]
    if meta.get("status"):
        facts.append(("status", meta["status"]))  # how far a run that ended badly got: its warning, right below
    return facts


def status_class(status: str) -> str:
    """The style of a recorded status on a page: `status-bad` for a run that did not end as it should."""
    return "status-bad" if status in ENDED_BADLY else "status-ok"


# The terminal's lines of run_facts: these labels start a line, the others follow on it.
LINE_STARTS = ("layout", "mode", "status")


def status_lines(summary: dict[str, Any]) -> list[str]:
    """The run panel's text form: the run, its facts (`run_facts`) and every warning of the summary."""
    lines = [run_line(summary["run"], summary.get("meta", {}).get("cycle"))]
    for label, words in run_facts(summary):
        if label in LINE_STARTS:
            lines.append(f"{label:<9}{words}")
        else:
            lines[-1] += f"   {label} {words}"
    return (lines + op_ranks_line(summary.get("op_ranks"))
            + [f"warning: {warning}" for warning in summary["warnings"]])

"""Number formatters, step-part and run labels, colours: one definition for the terminal, the report and the
dashboard.

Plain Python (no pandas, no plotly): `perfkit summary` renders through it on its fast path.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Collection, Sequence

if TYPE_CHECKING:
    from ..core.model import Run

# Milliseconds and other measured amounts: three decimals with thousands separators (`1,421.820`), as the
# profiler's own CSVs give microsecond resolution. Python's format spec; d3-format (plotly hovers, the
# dashboard's grid) reads the same spec.
NUMBER_SPEC = ",.3f"
# Percentages: one decimal, the precision the advisor's thresholds (5 %, 10 %) are stated in.
PERCENT_SPEC = ".1f"
COUNT_SPEC = ",d"
# Memory in MB: one decimal (the allocator's records are in KB; a tenth of a MB is below any decision).
MB_SPEC = ",.1f"


def _unknown(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def number(value: float | None) -> str:
    """`1421.82` -> `1,421.820`; None/NaN -> `unknown`."""
    return "unknown" if _unknown(value) else format(float(value), NUMBER_SPEC)


def ms(value: float | None) -> str:
    """`1421.82` -> `1,421.820 ms`; None/NaN -> `unknown`."""
    return "unknown" if _unknown(value) else f"{format(float(value), NUMBER_SPEC)} ms"


def mb(value: float | None) -> str:
    """`1234.56` -> `1,234.6 MB`; None/NaN -> `unknown`."""
    return "unknown" if _unknown(value) else f"{format(float(value), MB_SPEC)} MB"


def pct(share: float | None) -> str:
    """A 0-1 share as a percentage: `0.1234` -> `12.3 %`; None/NaN -> `n/a`."""
    return "n/a" if _unknown(share) else f"{format(100 * float(share), PERCENT_SPEC)} %"


def percent(value: float | None) -> str:
    """A value already in percent: `12.34` -> `12.3 %`; None/NaN -> `n/a`."""
    return "n/a" if _unknown(value) else f"{format(float(value), PERCENT_SPEC)} %"


def count(value: int | None) -> str:
    """`1234` -> `1,234`."""
    return "unknown" if _unknown(value) else format(int(value), COUNT_SPEC)


def evidence(value: Any) -> str:
    """A finding's evidence value: `1773.448` -> `1,773.448`, `25.0` -> `25`, `966` -> `966`."""
    if isinstance(value, float):
        return number(value).rstrip("0").rstrip(".")
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def column_spec(column: str) -> str | None:
    """The format spec of a table column by its name's unit suffix (`_ms`, `_pct`, `count`), None for text."""
    if column.endswith(("_ms", "_ratio", "_gflop", "_tflop_s")):
        return NUMBER_SPEC
    if column.endswith("_mb"):
        return MB_SPEC
    if column.endswith("_pct"):
        return PERCENT_SPEC
    if column in ("count", "rank", "step", "steps", "calls"):
        return COUNT_SPEC
    return None


# A table's columns named after something the user named (a run: `profiler_v1`), kept as written in the header:
# `frame.attrs[NAMED_COLUMNS]` lists those names (each column is the name, or the name and a unit suffix).
NAMED_COLUMNS = "named_columns"
UNIT_TITLES = (("_pct", " %"), ("_mb", " MB"), ("_ms", " ms"), ("_gflop", " GFLOP"), ("_tflop_s", " TFLOP/s"))


def column_title(column: str, names: Collection[str] = ()) -> str:
    """`total_ms` -> `total ms`, `share_pct` -> `share %`, `size_mb` -> `size MB`, `achieved_tflop_s` -> `achieved TFLOP/s`; a column that is one of `names`
    (with or without a unit suffix) keeps the name as written: `profiler_v1_ms` -> `profiler_v1 ms`."""
    stem, unit = next(((column[:-len(suffix)], title) for suffix, title in UNIT_TITLES if column.endswith(suffix)),
                      (column, ""))
    if stem in names:
        return stem + unit
    if unit:
        return stem.replace("_", " ") + unit
    return column.replace("_pct", " %").replace("_mb", " MB").replace("_", " ")


def column_titles(frame) -> list[str]:
    """The header of each of a DataFrame's columns (column_title, with the frame's NAMED_COLUMNS)."""
    names = frame.attrs.get(NAMED_COLUMNS, ())
    return [column_title(column, names) for column in frame.columns]


def cell(column: str, value: Any) -> str:
    """One table cell as text, formatted by its column's spec."""
    spec = column_spec(column)
    if spec is None or _unknown(value):
        return "" if _unknown(value) else str(value)
    return format(int(value) if spec == COUNT_SPEC else float(value), spec)


# ---------------------------------------------------------------------------------------------------------
# Step parts: each column of the steps table that splits a step, its label and its colour.

# (column, label) of each way a layout splits a step, in drawing order.
STEP_SPLITS = (
    # The step trace's split (legacy Ascend/GPU, derived CPU steps): idle before forward (data wait only where
    # the queues show it: analysis.bound, render.interval_label), compute, after-backward.
    (("interval_ms", "step interval (device idle)"), ("fwd_bwd_ms", "forward+backward"),
     ("tail_ms", "tail (optimizer, sync)")),
    # The new layout's step_trace_time.csv has no fwd/bwd split, only the overlap analysis.
    (("computing_ms", "computing"), ("comm_exposed_ms", "communication (not overlapped)"),
     ("free_ms", "free (device idle)"), ("preparing_ms", "preparing")),
)
STEP_LABELS = {column: label for split in STEP_SPLITS for column, label in split} | {"total_ms": "step total"}

# One colour per meaning, on every page. Step parts: data wait orange, compute blue, tail green, communication
# red, idle grey; op families and queues have their own hues, and runs (compare page) a palette of dark shades
# that none of these meanings uses.
COLORS = {
    "interval_ms": "#f28e2b", "fwd_bwd_ms": "#4e79a7", "computing_ms": "#4e79a7", "tail_ms": "#59a14f",
    "comm_exposed_ms": "#e15759", "free_ms": "#bab0ac", "preparing_ms": "#edc948",
    "total_ms": "#5f6b7a",
    "Cast": "#ff9da7", "BatchNorm": "#b07aa1", "other": "#a0b4c8",
    "host": "#76b7b2", "device": "#9c755f", "capacity": "#7f7f7f",
    "slow": "#d62728", "ok": "#76b7b2",
    # memory: one hue, allocated dark, reserved (allocated + cached by the allocator) light
    "allocated_mb": "#54278f", "reserved_mb": "#9e9ac8",
}
# The bound's parts (analysis.BOUND_PARTS) in the step parts' colours: compute blue, collective communication red,
# point-to-point (pipeline) a light red, data wait orange, host the host queue's teal, unknown idle grey.
BOUND_COLORS = {"compute": COLORS["fwd_bwd_ms"], "communication": COLORS["comm_exposed_ms"], "pipeline": "#f1a3a4",
                "data": COLORS["interval_ms"], "host": COLORS["host"], "unknown": COLORS["free_ms"]}
RUN_COLORS = ("#1d3557", "#7b2cbf", "#606c38", "#0b525b", "#6d597a", "#283618", "#3a0ca3", "#495057")
# Table rows of a highlighted meaning (op family, slow rank): a light tint of its colour.
ROW_TINTS = {"Cast": "#ffeef1", "BatchNorm": "#f3e8f1", "slow": "#fde8e8"}


def run_color(position: int) -> str:
    return RUN_COLORS[position % len(RUN_COLORS)]


def run_labels(runs: Sequence[Run]) -> list[str]:
    """One distinct label per run: the folder name; where runs share it (two `profiler_v1`), followed by as many
    of the folders above it as tell them apart (`profiler_v1 (exp_a)`, `profiler_v1 (exp_b)`), numbered only
    where even the paths are the same."""
    names = [run.name for run in runs]
    counts = Counter(names)
    parents = [PurePath(os.path.normpath(str(run.path))).parent.parts for run in runs]
    labels = list(names)
    for name in counts:
        same = [position for position, other in enumerate(names) if other == name]
        if len(same) < 2:
            continue
        places = Counter(parents[position] for position in same)
        depth = next((depth for depth in range(1, max(map(len, places)) + 1)
                      if len({place[-depth:] for place in places}) == len(places)), 0) if len(places) > 1 else 0
        seen: Counter = Counter()
        for position in same:
            place = parents[position]
            seen[place] += 1
            parts = [("/".join(place[-depth:]) or ".") if depth else "",
                     str(seen[place]) if places[place] > 1 else ""]
            labels[position] = f"{name} ({', '.join(part for part in parts if part)})"
    return labels


# ---------------------------------------------------------------------------------------------------------
# Op instance names: MindSpore's full scope names run to 160 characters and differ in the middle
# (`Gradients/Default/network-WithLossCell/_backbone-ResNet50/layer4-SequentialCell/0-Bottleneck/conv2-Conv2d/
# Grad_Conv2D/Conv2DBackpropFilter-op0`): cut at either end, many rows read the same.

# A scope part in at least this share of the names is a wrapper every op sits in (Default, network-WithLossCell,
# _backbone-ResNet50): it tells no op apart.
WRAPPER_SCOPE_SHARE = 0.5


def short_op_names(names: list[str]) -> list[str]:
    """Names that tell the ops apart in a narrow column: the cells an op sits in as a dotted path of their
    instance names (`layer4-SequentialCell/0-Bottleneck/conv2-Conv2d` -> `layer4.0.conv2`, as PyTorch names
    modules), then the op (`Conv2DBackpropFilter-op0`); wrapper scopes (WRAPPER_SCOPE_SHARE of the names) and
    parts that are not cells (`Gradients`, `Grad_Conv2D`: the pass column says backward) left out. A name
    without scopes, or one whose short form another name shares, stays whole."""
    distinct = list(dict.fromkeys(names))  # each rank lists the same names: count each once
    parts = {name: name.split("/") for name in distinct}
    counts: dict[str, int] = {}
    for scopes in parts.values():
        for scope in set(scopes[:-1]):
            counts[scope] = counts.get(scope, 0) + 1
    wrapper = {scope for scope, count in counts.items() if count >= WRAPPER_SCOPE_SHARE * len(distinct)}
    short = {}
    for name, scopes in parts.items():
        cells = [scope.split("-", 1)[0] for scope in scopes[:-1]
                 if scope not in wrapper and "-" in scope and scope.split("-", 1)[0]]
        short[name] = f"{'.'.join(cells)}/{scopes[-1]}" if cells else scopes[-1]
    taken: dict[str, int] = {}
    for value in short.values():
        taken[value] = taken.get(value, 0) + 1
    return [short[name] if taken[short[name]] == 1 else name for name in names]


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 3, 7, 9, 10] -> "0-3, 7, 9-10"."""
    ranges: list[list[int]] = []
    for rank in sorted(ranks):
        if ranges and rank == ranges[-1][1] + 1:
            ranges[-1][1] = rank
        else:
            ranges.append([rank, rank])
    return ", ".join(str(first) if first == last else f"{first}-{last}" for first, last in ranges)


def mean_of_text(means: dict[str, Any], brief: bool = False) -> str:
    """`step_means`' coverage in words: "steps 2-20; first step 40.063 ms left out, ..." (brief: "steps 2-20")."""
    mean_of = means["mean_of"]
    covered = (f"step {mean_of['first']}" if mean_of["first"] == mean_of["last"]
               else f"steps {mean_of['first']}-{mean_of['last']}")
    first = means.get("first_step_ms")
    if "periodic" in mean_of:
        covered += f" but {', '.join(map(str, mean_of['periodic_steps']))}"
    if brief:
        return covered
    if mean_of["first_step"] is not None:
        covered += f"; first step{'' if first is None else f' {ms(first)}'} {mean_of['first_step']}"
    if "periodic" in mean_of:
        covered += f"; steps {', '.join(map(str, mean_of['periodic_steps']))} {mean_of['periodic']}"
    return covered


# Ranks whose pipelines are shown side by side; beyond this, each op's usage is pooled: min / median / max.
PIPELINE_RANK_COLUMNS = 8


def pooled(values: list[float]) -> tuple[float, float, float]:
    """(min, median, max) of a non-empty list; the median of an even count is the upper middle value (one of
    the ranks' own, never a mean of two)."""
    ordered = sorted(values)
    return ordered[0], ordered[len(ordered) // 2], ordered[-1]

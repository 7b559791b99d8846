"""Derived numbers every view shows, each taken from `analysis` / `cluster` / `advisor`, computed once per run.

The dashboard, the report and the terminal print these and nothing recomputed beside them: the slow ranks are
`summarize(run)["slow_ranks"]` (cluster.of_steps, step + data-wait + compute time), the exposed communication
is what the advisor's communication rule measures, the Cast share is shown where the advisor's AMP rule applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from ..analysis import ledger
from ..analysis import measures as analysis
from ..analysis.measures import BATCHNORM_FAMILY, CAST_FAMILY, memory_peaks, memory_summary
from ..core.causes import COMM_SOURCE_LABEL
from ..core.model import Run
from ..core.op_work import op_flops
from .format import STEP_SPLITS, evidence, mb, mean_of_text, ms, pct, percent
from .lines import interval_label
from .per_run import once_per_run
from .summary import summarize


def op_family(op_type: str) -> str:
    """'Cast', 'BatchNorm' or 'other': the families the op-type views highlight."""
    if CAST_FAMILY.match(op_type):
        return "Cast"
    if BATCHNORM_FAMILY.match(op_type):
        return "BatchNorm"
    return "other"


def step_split(run: Run) -> tuple[tuple[str, str], ...]:
    """The (column, label) parts this run's steps are split into, the step interval named as `perfkit summary`
    names it (views.lines.interval_label: data wait where the queues show it); empty when only totals are known."""
    steps = run.steps
    for split in STEP_SPLITS:
        parts = tuple(part for part in split if part[0] in steps and steps[part[0]].notna().any())
        if parts:
            return tuple((column, interval_label(summarize(run)["bound"]) if column == "interval_ms" else label)
                         for column, label in parts)
    return ()


# ---------------------------------------------------------------------------------------------------------
# Slow ranks, communication, AMP families


def slow_ranks(run: Run) -> list[int]:
    """The ranks `perfkit summary`, `perfkit ranks` and `perfkit advise` name slow (cluster.of_steps)."""
    return list(summarize(run)["slow_ranks"])


def slow_ranks_note(run: Run) -> str:
    """The Ranks page's verdict in words."""
    if len(run.ranks) < 2:
        return ""
    slow = slow_ranks(run)
    if not slow:
        return "no slow rank (msprof-analyze's 5 % rule on step, own, idle and compute time)"
    return (f"slow rank{'s' if len(slow) > 1 else ''}: {', '.join(map(str, slow))} "
            "(in step, own, idle or compute time; `perfkit ranks` says which and by how much)")


@dataclass(frozen=True)
class Communication:
    """Communication per step as the advisor's communication rule measures it."""

    per_rank: pd.DataFrame   # index rank; comm_ms and total_ms, mean per step
    source: str              # "comm_exposed", "comm" or "comm_ops": the step column or the collective ops
    how: str                 # "not overlapped with compute", "op time", "ops (overlap with compute unknown)"

    @property
    def mean_ms(self) -> float:
        return float(self.per_rank["comm_ms"].mean())

    @property
    def share(self) -> float | None:
        total = float(self.per_rank["total_ms"].mean())
        return self.mean_ms / total if total > 0 else None


@once_per_run
def communication(run: Run) -> Communication | None:
    """The run's communication per step, None when it has neither communication columns nor collective ops."""
    from ..advisor import needs_met
    if not needs_met(run, "comm"):
        return None
    # exposed communication (collective and point-to-point) as the advisor's communication rule splits the step
    parts = ledger.rank_parts(run).set_index("rank")
    per_rank = pd.DataFrame({"comm_ms": parts["communication"] + parts["pipeline"], "total_ms": parts["total"]})
    source, how = COMM_SOURCE_LABEL[parts["comm_source"].iloc[0] if len(parts) else "exposed"]
    return Communication(per_rank=per_rank, source=source, how=how)


def amp_families_apply(run: Run) -> bool:
    """Whether the Cast / BatchNorm share means something here: the advisor's AMP rule applies (not on CPU,
    which has no fast float16 kernels)."""
    from ..advisor import needs_met
    return needs_met(run, "fp16_device")


def rank_bar_segments(run: Run) -> tuple[tuple[str, str], ...]:
    """The per-rank bar's segments (column of `per_rank_parts`, label): the step ledger's bound parts that some
    rank has, named as the bound names them (the Overview's bound chart, `summary`, `ranks`)."""
    parts = ledger.rank_parts(run)
    labels = ledger.bound(run).labels
    return tuple((f"{part}_ms", labels[part]) for part in ledger.BOUND_PARTS
                 if len(parts) and float(parts[part].max()) > 0)


def per_rank_parts(run: Run) -> list[dict[str, Any]]:
    """Per rank with step data: rank, total_ms and the ledger's mean ms per steady step of each bound part
    (cluster.per_rank_split: the numbers `perfkit ranks` prints)."""
    from ..analysis.cluster import per_rank_split
    frame = per_rank_split(run)
    frame = frame[frame["total_ms"].notna()]
    return [{key: (None if pd.isna(value) else value) for key, value in row.items()}
            for row in frame.drop(columns=["steps"]).to_dict(orient="records")]




# The op-types table's per-rank share columns: ranks whose mixes agree (every type's share within
# SAME_MIX_POINTS) share one column, and of more mixes than MAX_MIX_COLUMNS those of the most ranks are kept,
# then those farthest from the pooled shares: a 256-rank run gets a few columns, never 256.
SAME_MIX_POINTS = 1.0
MAX_MIX_COLUMNS = 6


@dataclass(frozen=True)
class OpMixColumns:
    shares: pd.DataFrame   # index type; one column per kept mix, `rank 3_share_pct` / `ranks 0-127_share_pct`
    mixes: int             # distinct mixes in the run (columns kept: len(shares.columns))


@once_per_run
def op_mix_columns(run: Run) -> OpMixColumns | None:
    """Per-rank op-type share columns (in %) where ranks run different mixes (analysis.ranks_run_different_ops),
    ranks of one mix merged into one column (their mean share); None where the pooled table says it all."""
    from .format import rank_ranges
    by_rank = analysis.op_type_shares_by_rank(run)
    if not analysis.ranks_run_different_ops(by_rank):
        return None
    shares = 100 * (by_rank.assign(type=by_rank["type"].astype(str))
                    .pivot_table(index="rank", columns="type", values="share", aggfunc="sum", fill_value=0.0))
    groups: list[list[int]] = []
    for rank, row in shares.iterrows():
        home = next((group for group in groups
                     if (shares.loc[group[0]] - row).abs().max() <= SAME_MIX_POINTS), None)
        if home is None:
            groups.append([rank])
        else:
            home.append(rank)
    pooled = 100 * analysis.op_type_shares(run).set_index("type")["share"].rename(str)
    means = [shares.loc[group].mean() for group in groups]
    distance = [float((mean - pooled.reindex(mean.index, fill_value=0.0)).abs().max()) for mean in means]
    order = sorted(range(len(groups)), key=lambda g: (-len(groups[g]), -distance[g]))
    kept = sorted(order[:MAX_MIX_COLUMNS], key=lambda g: groups[g][0])
    columns = {(f"rank {groups[g][0]}" if len(groups[g]) == 1 else f"ranks {rank_ranges(groups[g])}") + "_share_pct":
               means[g] for g in kept}
    return OpMixColumns(shares=pd.DataFrame(columns), mixes=len(groups))


def op_mix_note(run: Run) -> str:
    """What the op-types table's per-rank columns are ('' where it has none)."""
    mixes = op_mix_columns(run)
    if mixes is None:
        return ""
    note = ("Ranks run different op mixes: a share column per mix (ranks whose shares agree within "
            f"{SAME_MIX_POINTS:g} point share a column), each the type's share of that rank's op time.")
    if mixes.mixes > len(mixes.shares.columns):
        note += (f" {len(mixes.shares.columns)} of {mixes.mixes} mixes shown: those of the most ranks, then those "
                 "farthest from the pooled shares (perfkit summary --format json lists every rank's top types).")
    return note


def memory_peak_note(run: Run) -> str:
    """The Memory page's peak in words: the largest rank's allocated and reserved peak, against the capacity."""
    memory = memory_summary(memory_peaks(run))
    if memory is None:
        return ""
    capacity = memory["capacity_mb"]
    used = f" · {pct((memory['peak_reserved_mb'] or 0) / capacity)} of {mb(capacity)}" if capacity else ""
    return (f"peak allocated {mb(memory['peak_allocated_mb'])} · peak reserved "
            f"{mb(memory['peak_reserved_mb'] or 0)}{used} (largest rank)")


# ---------------------------------------------------------------------------------------------------------
# Headline cards


@dataclass(frozen=True)
class Card:
    key: str     # stable id (the dashboard's kpi-<key>)
    label: str
    value: str
    note: str = ""  # a line under the value (compare: whether the change is beyond the noise)


def _family_share(run: Run, family: str) -> float | None:
    shares = summarize(run)["op_types"]
    if not shares or all(op["share"] is None for op in shares):
        return None
    return sum(op["share"] or 0.0 for op in shares if op_family(op["type"]) == family)


def cast_share(run: Run) -> float | None:
    """Cast's share of summed op time (0-1), None without op statistics."""
    return _family_share(run, "Cast")


def batchnorm_share(run: Run) -> float | None:
    return _family_share(run, "BatchNorm")


def headline_cards(run: Run) -> list[Card]:
    """The overview's number cards: mean step and its split, communication, Cast/BatchNorm share where the
    AMP story applies, queue emptiness."""
    summary = summarize(run)
    steps, queues = summary["steps"], summary["queues"]
    total = steps["total_ms"] if steps else None
    cards = [Card("mean-step", f"mean step ({mean_of_text(steps, brief=True)})" if steps else "mean step", ms(total))]
    split = step_split(run) if steps else ()
    for col, label in split:
        value = steps.get(col)
        share = value / total if value is not None and total else None
        cards.append(Card(col.removesuffix("_ms").replace("_", "-"), label, f"{ms(value)} · {pct(share)}"))
    comm = communication(run)
    if comm is not None and not any(col == "comm_exposed_ms" for col, _ in split):
        cards.append(Card("communication", f"communication {comm.how}", f"{ms(comm.mean_ms)} · {pct(comm.share)}"))
    if amp_families_apply(run):
        cards += [Card("cast-share", "Cast share of op time", pct(cast_share(run))),
                  Card("batchnorm-share", "BatchNorm share of op time", pct(batchnorm_share(run)))]
    for which in ("host", "device"):
        stats = queues[which]
        value = percent(stats["empty_pct"]) if stats else "no data"
        cards.append(Card(f"{which}-empty", f"{which} queue empty", value))
    return cards


# ---------------------------------------------------------------------------------------------------------
# Findings


@dataclass(frozen=True)
class FindingView:
    """One finding as every view prints it."""

    severity: str
    title: str
    detail: str      # id · target · gain — evidence
    action: str
    rule: str = ""                 # the finding's id
    target: str | None = None      # the finding's target (views.numbers.op_target reads it)
    cell: dict[str, Any] | None = None  # the network Cell holding the target's ops (cells.cell_of_ops)


@dataclass(frozen=True)
class Findings:
    items: list[FindingView]          # most important first
    ids: list[str]
    note: str | None                  # why there is nothing to show, when items is empty


@once_per_run
def findings(run: Run) -> Findings:
    """`perfkit advise` for this run, worded once for the dashboard, the report and notebooks."""
    from ..advisor import advise
    from ..analysis.cells import cell_of_ops
    shown = findings_of(advise(run))
    items = [replace(item, cell=cell_of_ops(run, op_target(run, item.target).names)) if item.target else item
             for item in shown.items]
    return replace(shown, items=items)


def cell_words(cell: dict[str, Any]) -> str:
    """Where a finding's ops sit, in words: `layer4 (64 % of the target's op time)`."""
    return f"{cell['cell']} ({pct(cell['share'])} of the target's op time)"


def findings_of(advice) -> Findings:
    """An Advice's findings as every view words them."""
    items = []
    for finding in advice.findings:
        numbers_shown = ", ".join(f"{key} = {evidence(value)}" for key, value in finding.evidence.items())
        gain = f" · up to {percent(finding.est_gain_pct)} of step time" if finding.est_gain_pct is not None else ""
        target = f" · {finding.target}" if finding.target else ""
        items.append(FindingView(finding.severity, finding.title, f"{finding.id}{target}{gain} — {numbers_shown}",
                                 finding.action, finding.id, finding.target))
    return Findings(items, advice.ids(), None if items else _nothing_found(advice))


def _nothing_found(advice) -> str:
    """Why no finding is shown: "nothing found" only where rules looked; else which could not and why, as
    `perfkit advise` says it (a caveat about the run first)."""
    caveat = f"{advice.caveat}. " if advice.caveat else ""
    reasons: dict[str, list[str]] = {}
    for rule_id, reason in advice.not_checked.items():
        reasons.setdefault(reason, []).append(rule_id)
    not_checked = "; ".join(f"{', '.join(ids)}: {reason}" for reason, ids in reasons.items())
    if not advice.passed:
        return f"{caveat}no rule could look at this run (not checked: {not_checked})"
    looked = f"no findings: {', '.join(advice.passed)} looked and found nothing to change"
    return caveat + looked + (f"; not checked: {not_checked}" if not_checked else "")


# ---------------------------------------------------------------------------------------------------------
# A finding's ops on the timeline

# Findings about a first call (compilation, warm-up): the call is not in the steady steps, so their link names no
# step and the Timeline page opens the first. Every other op finding is about a steady cost: its link opens the
# first steady step (steady.steady_steps).
FIRST_CALL_FINDINGS = frozenset({"compile_or_first_call"})


@dataclass(frozen=True)
class OpTarget:
    """The trace events an op target names (a finding's target, an op name from the Operators page).

    The run's op tables say what the target holds: an op instance's full name, an op type (`Conv2D`,
    `MatMulV2`, `hcom_allReduce_`), an op family (`Cast`, `BatchNorm`: every type in it), types joined by
    `/` (`Conv2D/MatMul`) or a kernel group (`Conv2D 3x3`). Trace events match on their name (the op's
    full name on new-layout and CPU traces, its last scope segment on legacy Ascend timelines, the type
    itself on PyTorch's Python lanes) or on their op type (`args.type` of legacy Ascend timelines)."""

    label: str
    names: frozenset[str]
    types: frozenset[str]
    known: bool      # the run's op tables name it; else only events named exactly `label` match

    def matches(self, events: pd.DataFrame) -> pd.Series:
        """Which of a window's events (perfkit.io.timeline.timeline) are occurrences: complete events only."""
        if not len(events):
            return pd.Series(False, index=events.index)
        named = events["name"].astype(str).isin(self.names) | events["op_type"].astype(str).isin(self.types)
        return (events["ph"] == "X") & events["dur_us"].notna() & named


def _last_segment(names: pd.Series) -> pd.Series:
    return names.str.rsplit("/", n=1).str[-1]


def op_target(run: Run, target: str) -> OpTarget:
    """What `target` names among the run's ops (OpTarget's docstring), resolved on its op tables."""
    ops = run.ops
    names = ops["name"].astype(str)
    if (names == target).any():
        return OpTarget(target, frozenset({target, target.rsplit("/", 1)[-1]}), frozenset(), True)
    known = set(run.op_types["type"].dropna().astype(str)) | set(ops["type"].dropna().astype(str))
    listed = set(target.split("/"))
    types = {op_type for op_type in known if op_type in listed or op_family(op_type) == target}
    if types:
        chosen = names[ops["type"].astype(str).isin(types)]
    else:
        chosen = _kernel_group(ops, target, known)
        if not len(chosen):
            return OpTarget(target, frozenset({target}), frozenset(), False)
    return OpTarget(target, frozenset({target, *chosen, *_last_segment(chosen)}), frozenset(types), True)


def _kernel_group(ops: pd.DataFrame, target: str, known: set[str]) -> pd.Series:
    """The op names of a kernel group (`Conv2DBackpropFilter 3x3`: kernel_efficiency's target)."""
    op_type = target.split(" ", 1)[0]
    if op_type == target or op_type not in known:
        return pd.Series(dtype="object")
    work = op_flops(ops)  # all ops: a conv's work follows from its gradients' shapes too
    return work.loc[work["group"] == target, "name"].astype(str)


@dataclass(frozen=True)
class TimelineLink:
    """Where a finding's ops are on the Timeline page: its query (`op`, and `step` where one is chosen)."""
    text: str
    query: dict[str, str]


@once_per_run
def timeline_links(run: Run) -> list[TimelineLink | None]:
    """Per finding of `findings(run)` (same order): the link to its ops on the timeline, None when its target
    names no op of the run's op tables (a rank, a link, a dataset op) or the run has no trace."""
    from ..analysis.steady import steady_steps
    from ..core.errors import PerfkitError
    from ..io.timeline import run_trace_files
    try:
        run_trace_files(run)  # of the profiler cycle the run was loaded with, as its Timeline page shows it
    except PerfkitError:
        return [None] * len(findings(run).items)
    steady = steady_steps(run.steps)
    first_steady = str(int(steady["step"].min())) if len(steady) else None
    links: list[TimelineLink | None] = []
    for finding in findings(run).items:
        target = op_target(run, finding.target) if finding.target else None
        if target is None or not target.known:
            links.append(None)
            continue
        query = {"op": target.label}
        if first_steady is not None and finding.rule not in FIRST_CALL_FINDINGS:
            query["step"] = first_steady
        where = f", step {query['step']}" if "step" in query else ", first step"
        links.append(TimelineLink(f"{target.label} on the timeline{where}", query))
    return links

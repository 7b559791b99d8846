"""Time by network Cell: which layer of the model takes the step, forward and backward side by side.

MindSpore names every kernel by the Cell scope it runs in, on every layout perfkit reads (CPU
`cpu_op_detail_info`, legacy `aicore_intermediate_*_detail.csv`, new-layout `kernel_details.csv` of MindSpore
runs, GPU op names, the database's op names): forward `Default/network-WithLossCell/_backbone-ResNet50/
layer4-SequentialCell/0-Bottleneck/conv3-Conv2d/Conv2D-op12`, backward the same scope under `Gradients/` with
a `Grad_Conv2D` (older releases: `gradConv2D`) component before the kernel. `cells(run)` folds the op table
into that tree: one row per Cell (and each of its ancestors), its forward, backward and other ms per step,
calls and FLOPs, so that every op is counted once and the tree's root totals equal the op totals.

Where each op sits (its Cell from its scope name, backward kernels placed by their shapes) is the Run's `cells`
table, made at load by perfkit/core/scopes.py.

>>> tree = perfkit.cells(run)                                   # doctest: +SKIP
>>> tree[tree["depth"] == 4][["label", "forward_ms", "backward_ms", "share"]]  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ..core.model import Run, kept_on_run
from ..core.scopes import NO_CELL, WRAPPER_NAMES, label_of, place
from .flops import Peak, chip_peak, cpu_peak_of, tflops_per_s
from .steady import first_step_verdicts

# A Cell's ops outside all of its child Cells, where the summary lists its children in its place.
OWN_OPS = "(own ops)"
# The summary's readable level: descend from the root through Cells that one child fills to at least this
# share (wrappers: Default -> network -> _backbone), then list the children of the Cell reached.
DOMINANT_CHILD = 0.8
# A Cell's time left over by its children below this fraction of it is floating-point rounding, not own ops.
ROUNDING = 1e-9

COLUMNS = ["rank", "path", "parent", "label", "cell_type", "depth", "forward_ms", "backward_ms", "other_ms",
           "total_ms", "calls", "flops", "flops_ms", "tflops_per_s", "share"]


def cells(run: Run) -> pd.DataFrame:
    """The Cell tree of a run, one row per Cell and ancestor (COLUMNS), in ms per steady step: where op runs are
    timed (CPU), over the steps the step means cover (a first step that compiles, or whose start is unknown, left
    out as the ledger leaves it out); elsewhere per profiled step (the op tables hold totals only).

    rank: NA where the ranks hold the same Cells and the rows are their mean (data parallel), else one set of
    rows per rank (pipeline stages run different Cells). path: the scope (`Default/network-.../layer4-
    SequentialCell`), `(no cell)` for ops without one; parent: the enclosing path ("" at the top); label:
    `layer4`; depth: 1 at the top. forward/backward/other_ms: op time per step by the op's pass (the op
    tables' totals over the profiled steps, less a left-out first step's, divided by the steps left); calls per
    step; flops per step of the ops whose work their shapes give (op_work.op_flops; 0 where none), flops_ms the
    time of those ops, tflops_per_s = flops / flops_ms; share: total_ms over the rank's mean steady step
    (perfkit.analysis.ledger), or over its op time where steps are unknown. `attrs["warnings"]`: what could not be placed.
    """
    return _build(run)


@kept_on_run
def placed_ops(run: Run) -> pd.DataFrame:
    """The op table with each op's Cell (`path`), FLOPs over the run (`flops`, NaN where unknown) and how it
    was placed (`placed`: "named" by its scope, "moved" to one Cell or "shared" by an ancestor, by shapes)."""
    return place(run.ops)


def placed_per_step(run: Run) -> pd.DataFrame:
    """placed_ops of the run's first rank with `ms`, each op's time per steady step as cells() counts it (its total
    less its first-step time where that rank's first step is left out, over the steps left; else over the profiled
    steps): for sums the tree does not hold, such as a group of sibling Cells (perfkit/views/migration.py)."""
    placed = placed_ops(run)
    if not len(placed):
        return placed.assign(ms=pd.Series(dtype="float64"))
    rank = placed["rank"].min()
    mine = placed[placed["rank"] == rank]
    steps = run.steps[run.steps["rank"] == rank] if len(run.steps) else run.steps
    profiled = max(int(steps["step"].nunique()) if len(steps) else 1, 1)
    left_out = False
    if len(steps) and "first_step_ms" in mine and mine["first_step_ms"].notna().all():
        _, first = first_step_verdicts(run.steps)
        left_out = bool(first.loc[first["rank"] == rank, "reason"].notna().any())
    if left_out:
        ms = (mine["total_ms"] - mine["first_step_ms"]).clip(lower=0.0) / max(profiled - 1, 1)
    else:
        ms = mine["total_ms"] / profiled
    return mine.assign(ms=ms.astype("float64"))


@kept_on_run
def _build(run: Run) -> pd.DataFrame:
    leaves = run.cells
    warnings = _warnings(leaves)
    if not len(leaves):
        frame = pd.DataFrame(columns=COLUMNS)
        frame.attrs["warnings"] = warnings
        return frame
    steps = run.steps.groupby("rank")["step"].nunique() if len(run.steps) else pd.Series(dtype="int64")
    tree = _pool(_tree(_steady(leaves, run), steps), warnings)
    tree["tflops_per_s"] = tflops_per_s(tree["flops"], tree["flops_ms"].where(tree["flops_ms"] > 0))
    tree["share"] = tree["total_ms"] / _step_ms(run, tree)
    frame = tree[COLUMNS].sort_values(["rank", "path"], kind="stable", na_position="first").reset_index(drop=True)
    frame.attrs["warnings"] = warnings
    return frame


def _steady(leaves: pd.DataFrame, run: Run) -> pd.DataFrame:
    """The cells table's rows over the steps the step means cover (analysis.steady, as the ledger): on a rank
    whose first step is left out (compile, warm-up, unknown start) and whose op runs are timed, each Cell less
    its time and calls in that step (the `first_*` columns), `steps` then one fewer. FLOPs per step stay the
    run's: a step's work does not change, its time does."""
    if not len(run.steps) or "first_forward_ms" not in leaves:
        return leaves.assign(left_out=False)
    _, first = first_step_verdicts(run.steps)
    left_out_ranks = set(first.loc[first["reason"].notna(), "rank"].astype("int64"))
    known = leaves.groupby("rank")["first_forward_ms"].transform(lambda column: column.notna().all())
    left_out = leaves["rank"].isin(left_out_ranks) & known
    steady = leaves.copy()
    for column, first_column in (("forward_ms", "first_forward_ms"), ("backward_ms", "first_backward_ms"),
                                 ("other_ms", "first_other_ms"), ("calls", "first_calls"),
                                 ("flops_ms", "first_flops_ms")):
        steady[column] = np.where(left_out, (leaves[column] - leaves[first_column]).clip(lower=0.0), leaves[column])
    return steady.assign(left_out=left_out)


def _tree(leaves: pd.DataFrame, steps: pd.Series) -> pd.DataFrame:
    """The cells table's rows summed, per rank, into every Cell and each of its ancestors, per profiled step
    (`steps`: each rank's profiled steps, 1 where unknown). All ranks at once: each leaf row is repeated once
    per Cell on its path, in the leaves' order, so each Cell's sum adds its rank's leaves in the order a
    rank summed alone would."""
    values = ["forward_ms", "backward_ms", "other_ms", "calls", "flops", "flops_ms"]
    paths = leaves["path"].astype(object).to_numpy()
    prefixes = {path: _prefixes(path) for path in pd.unique(paths)}
    repeats = np.array([len(prefixes[path]) for path in paths], dtype=np.int64)
    rows = np.repeat(np.arange(len(leaves)), repeats)
    expanded = pd.DataFrame({"rank": leaves["rank"].to_numpy()[rows],
                             "path": [prefix for path in paths for prefix in prefixes[path]]})
    for column in values:
        expanded[column] = leaves[column].to_numpy()[rows]
    tree = expanded.groupby(["rank", "path"], sort=False).sum().reset_index()
    per_step = tree["rank"].map(steps).fillna(1).astype("int64").clip(lower=1)
    left_out = leaves.groupby("rank")["left_out"].any() if "left_out" in leaves else pd.Series(dtype=bool)
    steady = (per_step - tree["rank"].map(left_out).fillna(False).astype("int64")).clip(lower=1)
    timed = [column for column in values if column != "flops"]
    tree[timed] = tree[timed].div(steady, axis=0)
    tree["flops"] = tree["flops"] / per_step
    tree["total_ms"] = tree["forward_ms"] + tree["backward_ms"] + tree["other_ms"]
    described = {path: _described(path) for path in pd.unique(tree["path"])}
    for index, column in enumerate(["depth", "parent", "label", "cell_type"]):
        tree[column] = [described[path][index] for path in tree["path"]]
    return tree


def _prefixes(path: str) -> list[str]:
    """A Cell path and every ancestor's, top first; `(no cell)` alone."""
    parts = path.split("/") if path != NO_CELL else [NO_CELL]
    return ["/".join(parts[:depth]) for depth in range(1, len(parts) + 1)]


def _described(path: str) -> tuple[int, str, str, str]:
    """(depth, parent path, label, Cell type) of a tree path."""
    depth = 1 if path == NO_CELL else path.count("/") + 1
    last = path.rsplit("/", 1)[-1]
    return (depth, "" if depth == 1 else path.rsplit("/", 1)[0],
            label_of(path) if depth > 1 or path == NO_CELL else path,
            last.split("-", 1)[1] if "-" in last else "")


def _pool(tree: pd.DataFrame, warnings: list[str]) -> pd.DataFrame:
    """Ranks holding the same Cells: their mean, rank NA. Ranks holding different ones: per rank, said."""
    ranks = tree["rank"].unique()
    tree["rank"] = tree["rank"].astype("Int64")
    if len(ranks) < 2:
        return tree
    # each (rank, path) is one row: the ranks hold the same Cells when every path is on every rank
    if (tree.groupby("path", sort=False).size() < len(ranks)).any():
        warnings.append(f"the ranks run different Cells (pipeline stages, or scopes that differ between ranks): "
                        f"the Cell tree is per rank ({len(ranks)} ranks)")
        return tree
    numeric = ["forward_ms", "backward_ms", "other_ms", "total_ms", "calls", "flops", "flops_ms"]
    pooled = tree.groupby("path", sort=False).agg(
        {**{col: "mean" for col in numeric}, "depth": "first", "parent": "first", "label": "first",
         "cell_type": "first"}).reset_index()
    pooled["rank"] = pd.array([pd.NA] * len(pooled), dtype="Int64")
    return pooled


def _step_ms(run: Run, tree: pd.DataFrame) -> pd.Series:
    """Each row's denominator of `share`: its rank's mean steady step (the ranks' mean for pooled rows), or
    the rank's op time per step where no step is timed."""
    from .ledger import steady_means
    means = steady_means(run)["total"] if len(run.steps) else pd.Series(dtype="float64")
    roots = tree[tree["depth"] == 1].groupby("rank", dropna=False)["total_ms"].sum()
    out = []
    for rank in tree["rank"]:
        step = means.mean() if pd.isna(rank) else means.get(int(rank), np.nan)
        if pd.isna(step) or step <= 0:
            step = roots.get(rank, np.nan) if not pd.isna(rank) else roots[roots.index.isna()].sum()
        out.append(step)
    return pd.Series(out, index=tree.index, dtype="float64")


# ---------------------------------------------------------------------------------------------------------
# Utilisation: achieved FLOP/s of the ops whose work the shapes give, against the chip's peak.

def op_type_rates(run: Run) -> pd.DataFrame:
    """Per op type with a FLOP model: flops and ms per profiled step (mean over ranks), achieved TFLOP/s."""
    placed = placed_ops(run)
    known = placed[placed["flops"].notna()]
    if not len(known):
        return pd.DataFrame(columns=["type", "flops", "ms", "tflops_per_s"])
    steps = _profiled_steps(run)
    per_rank = known.groupby(["rank", "type"], observed=True)[["flops", "total_ms"]].sum().reset_index()
    per_rank[["flops", "total_ms"]] = per_rank[["flops", "total_ms"]].div(
        per_rank["rank"].map(steps).fillna(1).clip(lower=1), axis=0)
    rates = per_rank.groupby("type", observed=True)[["flops", "total_ms"]].mean().reset_index()
    rates = rates.rename(columns={"total_ms": "ms"})
    rates["tflops_per_s"] = tflops_per_s(rates["flops"], rates["ms"].where(rates["ms"] > 0))
    return rates.sort_values("flops", ascending=False).reset_index(drop=True)


def _profiled_steps(run: Run) -> pd.Series:
    return run.steps.groupby("rank")["step"].nunique() if len(run.steps) else pd.Series(dtype="int64")


def run_peak(run: Run) -> tuple[Peak | None, str]:
    """(the peak of the run's chip for its compute dtype, why it is unknown otherwise)."""
    dtype = run.meta.compute_dtype or ("float32" if run.meta.device == "CPU" else None)
    if dtype == "mixed":
        dtype = "float16"  # mixed precision: the dense ops run in float16, the rate MFU is quoted against
    if run.meta.device == "CPU":
        peak = cpu_peak_of(run.meta.host, "the host facts perfkit profile recorded (perfkit_run.json: host)")
        return peak, "" if peak else ("the run records no host CPU facts; for a run made on this host pass "
                                      "peak=perfkit.analysis.flops.host_cpu_peak()")
    if not run.meta.chip:
        return None, "the files do not name the chip"
    peak = chip_peak(run.meta.chip, dtype)
    if peak is None:
        return None, f"no published peak for {run.meta.chip} in {dtype or 'an unknown dtype'} (flops.CHIP_PEAKS)"
    return peak, ""


def utilisation(run: Run, peak: Peak | None = None) -> dict[str, Any]:
    """Model FLOPs per step (the ops with a FLOP model: convolutions, MatMul, BatchNorm; others count 0, so
    this is a lower bound), the mean steady step, achieved TFLOP/s over the step and over those ops' own time,
    and MFU against `peak` (default: run_peak), None with `mfu_unknown` saying why."""
    tree = cells(run)
    roots = tree[tree["depth"] == 1]
    ranks = max(roots["rank"].nunique(dropna=False), 1)
    flops = float(roots["flops"].sum()) / ranks
    flops_ms = float(roots["flops_ms"].sum()) / ranks
    step_ms = float(_step_ms(run, roots).mean()) if len(roots) else math.nan
    unknown = ""
    if peak is None:
        peak, unknown = run_peak(run)
    achieved = tflops_per_s(flops, step_ms) if flops > 0 and step_ms and step_ms > 0 else None
    return {
        "flops_per_step": flops if flops > 0 else None,
        "step_ms": step_ms if step_ms == step_ms else None,
        "achieved_tflops_per_s": achieved,
        "dense_tflops_per_s": tflops_per_s(flops, flops_ms) if flops_ms > 0 else None,
        "peak": peak.to_dict() if peak else None,
        "mfu": achieved / peak.tflops_per_s if peak and achieved is not None and flops > 0 else None,
        "mfu_unknown": unknown if peak is None else ("no op with a FLOP model" if flops <= 0 else ""),
    }


# ---------------------------------------------------------------------------------------------------------
# What `perfkit summary` shows: the Cells at a readable level, and the whole tree for `--by cell`.

def readable_level(tree: pd.DataFrame) -> pd.DataFrame:
    """The Cells of one rank's (or the pooled) tree worth listing. From the top, the largest shown Cell is
    replaced by its children: the top one always, then the largest again for as long as the last one opened had
    a child filling DOMINANT_CHILD of it or the largest is one of MindSpore's wrappers (WRAPPER_NAMES: Default,
    network, _backbone), so the list ends at the children of the first Cell that splits (layer1..layer4 beside
    the loss, the optimizer, the gradient reducer and `(no cell)`). A replaced Cell's own ops (those in no child:
    ResNet's ReduceMean) stay as `<Cell> (own ops)`, so the list adds up to the tree. Largest first."""
    children = {parent: group for parent, group in tree.groupby("parent", sort=False)}
    shown = tree[tree["depth"] == 1]
    dominated = True  # the top is always opened
    while len(shown):
        largest = shown.loc[shown["total_ms"].idxmax()]
        kids = children.get(largest["path"])
        wrapper = str(largest["path"]).rsplit("/", 1)[-1].split("-", 1)[0] in WRAPPER_NAMES
        if kids is None or not len(kids) or not (dominated or wrapper):
            break
        shown = pd.concat([shown[shown["path"] != largest["path"]], kids, _own_ops(largest, kids)])
        dominated = kids["total_ms"].max() >= DOMINANT_CHILD * largest["total_ms"]
    return shown.sort_values("total_ms", ascending=False, kind="stable")


def _own_ops(cell: pd.Series, kids: pd.DataFrame) -> pd.DataFrame:
    """The part of `cell` in none of its `kids`, as one row (none when it is nothing)."""
    summed = ["forward_ms", "backward_ms", "other_ms", "total_ms", "calls", "flops", "flops_ms"]
    rest = cell[summed].astype(float) - kids[summed].sum()
    if rest["total_ms"] <= ROUNDING * max(cell["total_ms"], 1.0):
        return kids.iloc[:0]
    row = cell.copy()
    row[summed] = rest
    row["path"], row["label"] = f"{cell['path']}/{OWN_OPS}", f"{cell['label']} {OWN_OPS}"
    row["depth"], row["parent"] = cell["depth"] + 1, cell["path"]
    row["tflops_per_s"] = tflops_per_s(rest["flops"], rest["flops_ms"]) if rest["flops"] > 0 and rest["flops_ms"] > 0 else np.nan
    row["share"] = cell["share"] * rest["total_ms"] / cell["total_ms"] if cell["total_ms"] > 0 else np.nan
    return row.to_frame().T.astype(kids.dtypes.to_dict())


def _items(rows: pd.DataFrame) -> list[dict[str, Any]]:
    def number(value: Any) -> float | None:
        return None if pd.isna(value) else float(value)
    return [{"cell": str(row.label), "path": str(row.path), "depth": int(row.depth),
             "forward_ms": float(row.forward_ms), "backward_ms": float(row.backward_ms),
             "other_ms": float(row.other_ms), "total_ms": float(row.total_ms), "share": number(row.share),
             "calls": float(row.calls), "flops": number(row.flops) if row.flops > 0 else None,
             "tflops_per_s": number(row.tflops_per_s)} for row in rows.itertuples(index=False)]


def summary_entry(run: Run) -> dict[str, Any] | None:
    """`perfkit summary`'s `cells`: per rank set (`rank` null: pooled), the Cells at the readable level and the
    whole tree, with utilisation and what could not be placed; None for a run without op rows."""
    tree = cells(run)
    if not len(tree):
        return None
    groups = []
    for rank, mine in tree.groupby("rank", dropna=False, sort=True):
        groups.append({"rank": None if pd.isna(rank) else int(rank), "top": _items(readable_level(mine)),
                       "tree": _items(mine.sort_values("path", kind="stable"))})
    return {"ms_per": "profiled step", "by_rank": groups, "utilisation": utilisation(run),
            "warnings": list(tree.attrs["warnings"])}


# ---------------------------------------------------------------------------------------------------------
# Where an op's (or a finding's ops') time sits, and per-Cell change between two runs.

# A set of ops "sits in" the deepest Cell holding at least this share of their time.
HOLDS = 0.5
# A Cell holding this share of all the run's placed op time is the network itself (its backbone, the loss wrapper):
# naming it as where a finding's ops sit tells the user nothing.
WHOLE_NETWORK = 0.9


def cell_of_ops(run: Run, names) -> dict[str, Any] | None:
    """The deepest Cell holding at least HOLDS of the time of the ops named `names` (as placed by shapes):
    {"cell": label, "path", "share": of those ops' time}; None where they have no Cell (no scope, no time)."""
    placed = placed_ops(run)
    mine = placed[placed["name"].isin(set(names)) & (placed["path"] != NO_CELL)]
    total = float(mine["total_ms"].sum())
    if total <= 0:
        return None
    by_prefix: dict[str, float] = {}
    for path, ms in mine.groupby("path", sort=False)["total_ms"].sum().items():
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            by_prefix[prefix] = by_prefix.get(prefix, 0.0) + ms
    path = max((p for p, ms in by_prefix.items() if ms >= HOLDS * total), key=lambda p: (p.count("/"), by_prefix[p]))
    placed_cells = placed[placed["path"] != NO_CELL]
    under = placed_cells["path"].eq(path) | placed_cells["path"].str.startswith(path + "/")
    if float(placed_cells.loc[under, "total_ms"].sum()) >= WHOLE_NETWORK * float(placed_cells["total_ms"].sum()):
        return None  # "Cell: _backbone" says nothing: the ops lie all over the network
    return {"cell": label_of(path), "path": path, "share": by_prefix[path] / total}


def cell_deltas(run_a: Run, run_b: Run) -> pd.DataFrame:
    """Per Cell at run_a's readable level (readable_level; pooled or its first rank), ms per step in each run
    and the change: cell, path, a_ms, b_ms, delta_ms, largest change first. Cells only one run has count 0 in
    the other. Empty where neither run's ops carry Cell scopes."""
    tree_a, tree_b = cells(run_a), cells(run_b)
    columns = ["cell", "path", "a_ms", "b_ms", "delta_ms"]
    if not len(tree_a) or not len(tree_b) or set(tree_a["path"]) == {NO_CELL}:
        return pd.DataFrame(columns=columns)

    def first(tree: pd.DataFrame) -> pd.DataFrame:
        rank = tree["rank"].iloc[0]
        return tree[tree["rank"].isna()] if pd.isna(rank) else tree[tree["rank"] == rank]

    shown = readable_level(first(tree_a))
    b_ms = first(tree_b).set_index("path")["total_ms"]
    own_b = {path: b_ms.get(path.rsplit("/", 1)[0], 0.0) - first(tree_b).loc[
        first(tree_b)["parent"] == path.rsplit("/", 1)[0], "total_ms"].sum()
        for path in shown["path"] if path.endswith("/" + OWN_OPS)}
    rows = pd.DataFrame({"cell": shown["label"].astype(str), "path": shown["path"].astype(str),
                         "a_ms": shown["total_ms"].astype(float),
                         "b_ms": [own_b[path] if path in own_b else float(b_ms.get(path, 0.0))
                                  for path in shown["path"]]})
    rows["delta_ms"] = rows["b_ms"] - rows["a_ms"]
    return rows.reindex(rows["delta_ms"].abs().sort_values(ascending=False).index).reset_index(drop=True)[columns]


def delta_items(run_a: Run, run_b: Run) -> list[dict[str, Any]]:
    """`perfkit compare`'s `cell_deltas`: cell_deltas as JSON rows (cell, path, a_ms, b_ms, delta_ms)."""
    return [{"cell": row.cell, "path": row.path, "a_ms": float(row.a_ms), "b_ms": float(row.b_ms),
             "delta_ms": float(row.delta_ms)} for row in cell_deltas(run_a, run_b).itertuples(index=False)]


def delta_lines(items: list[dict[str, Any]], top: int = 5) -> list[str]:
    """The largest per-Cell changes (delta_items) in words, for compare's text: `layer3 +120.000 ms per step
    (348.311 -> 468.311 ms)`; nothing where no Cell changed."""
    changed = [item for item in items[:top] if item["delta_ms"]]
    if not changed:
        return []
    return ["", f"Cells, ms per step (largest changes, top {len(changed)})"] + [
        f"  {item['cell']} {item['delta_ms']:+,.3f} ms per step ({item['a_ms']:,.3f} -> {item['b_ms']:,.3f} ms)"
        for item in changed]


def _warnings(leaves: pd.DataFrame) -> list[str]:
    """What could not be placed, from the cells table: one line each for kernels placed by shapes (per rank),
    ops without a scope, and dense ops whose FLOPs the shapes do not give."""
    warnings = []
    by_rank = leaves.groupby("rank", sort=True)[["moved_ops", "shared_ops"]].sum()
    for rank, moved, shared in by_rank[(by_rank["moved_ops"] != 0) | (by_rank["shared_ops"] != 0)].itertuples():
        warnings.append(f"rank {rank}: {moved + shared} backward kernel(s) were named after a reused Cell's "
                        f"scope and were placed by their shapes: {moved} under their own Cell, {shared} under "
                        "the nearest Cell that every Cell with those shapes shares")
    total = leaves[["forward_ms", "backward_ms", "other_ms"]].to_numpy().sum()
    unplaced = leaves[leaves["path"] == NO_CELL]
    if len(unplaced):
        share = unplaced[["forward_ms", "backward_ms", "other_ms"]].to_numpy().sum() / total if total > 0 else 1.0
        warnings.append(f"{int(unplaced['ops'].sum())} op(s), {share:.0%} of op time, carry no Cell scope "
                        f"(op-type-only or unscoped kernel names): shown as {NO_CELL}")
    if leaves["dense_unknown_ops"].sum():
        warnings.append(f"{int(leaves['dense_unknown_ops'].sum())} dense op(s) "
                        f"({leaves['dense_unknown_ms'].sum():.1f} ms) have shapes missing or in a form the FLOP "
                        "model does not read (e.g. Ascend's 5-D NC1HWC0): their FLOPs are unknown and left out")
    return warnings

"""The Operators page's tables: op types (with per-rank share columns where ranks run different mixes) and op
instances, filtered by pass and name."""

from __future__ import annotations

from typing import Sequence

import pandas as pd

from ...analysis.measures import op_type_shares, steady_ops
from ...core.model import Run
from ..format import short_op_names
from ..numbers import op_family, op_mix_columns
from ..per_run import once_per_run

# The operator table ships at most this many instances to the browser (largest total time first); a real
# run has tens of thousands of kernel rows, of which only the top few hundred are worth reading.
MAX_TABLE_ROWS = 2000


# Operators
def op_type_rows(run: Run) -> pd.DataFrame:
    """Op types largest first, as the operators table shows them (share in %).

    Where ranks run different op-type mixes (analysis.ranks_run_different_ops), one more column per mix of
    ranks (views.numbers.op_mix_columns, a few at most): the type's share of those ranks' op time (0 where they
    do not run it), so the pooled share is not read as any one rank's.
    """
    shares = op_type_shares(run)
    rows = pd.DataFrame({"type": shares["type"].astype(str), "family": shares["type"].astype(str).map(op_family),
                         "total_ms": shares["total_ms"].astype(float),
                         "count": shares["count"].astype("int64"),
                         "share_pct": 100 * shares["share"].astype(float)})
    mixes = op_mix_columns(run)
    return rows if mixes is None else rows.join(mixes.shares.fillna(0.0), on="type")


@once_per_run
def _short_op_names(run: Run) -> dict[str, str]:
    """Full op name -> the short one the instance table shows (views.format.short_op_names over every op of the
    run, so a search or pass filter never changes how a name reads)."""
    names = run.ops["name"].astype(str).tolist()
    return dict(zip(names, short_op_names(names)))


def op_instance_rows(run: Run, passes: Sequence[str] | None = None, search: str = "",
                     limit: int = MAX_TABLE_ROWS) -> tuple[pd.DataFrame, int]:
    """Op instances (largest total time first) of the given passes whose name or type contains `search`, over
    the steps the op-type table covers (analysis.steady_ops: the two tables of the page add up alike).

    Returns at most `limit` rows and the number that matched; `short_name` is how the table shows `name`.
    """
    ops = steady_ops(run)
    if passes:
        ops = ops[ops["pass"].isin(list(passes))]
    needle = search.strip().lower()
    if needle:
        ops = ops[ops["name"].str.lower().str.contains(needle, regex=False, na=False)
                  | ops["type"].str.lower().str.contains(needle, regex=False, na=False)]
    matched = len(ops)
    top = ops.nlargest(limit, "total_ms") if matched > limit else ops.sort_values("total_ms", ascending=False)
    short = _short_op_names(run)
    rows = pd.DataFrame({"rank": top["rank"].astype("int64"), "name": top["name"].astype(str),
                         "short_name": top["name"].astype(str).map(short),
                         "type": top["type"].astype(str), "pass": top["pass"].astype(str),
                         "input_shapes": top["input_shapes"].astype("string").fillna(""),
                         "avg_ms": top["avg_ms"].astype(float), "count": top["count"].astype("int64"),
                         "total_ms": top["total_ms"].astype(float)})
    return rows.reset_index(drop=True), matched

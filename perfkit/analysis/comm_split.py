"""Transfer and wait of collective ops that the files time but do not split: estimates, said as such.

communication.json, the database's communication tables and hccl_raw measure how much of a collective op moved
data (transit) and how much waited for peers. Other files give only each execution's interval: the Level0
database's COMMUNICATION_OP (with each op's element count and data type), CPU and GPU op launches, a legacy step
trace's communication streams (device ticks). Two estimates
from those intervals, each a lower bound of the wait, so transfer-bound advice is never given on a guess:

- arrival (two or more ranks): the ranks' executions of one collective (same group, op name and occurrence) can
  move data only once the last rank has arrived, so a rank waits at least `latest start - its start` (clipped to
  its elapse time). Used where the ranks' executions end within the shortest one's elapse time of each other
  (a collective ends together on its ranks; ends further apart say the clocks differ). Ranks that were not
  profiled may arrive later still: then the wait is larger than estimated.
- bandwidth (an op's payload known): transfer is at most its bytes at the fastest rate the run's own ops of that
  type and group reached (bytes / elapse of the fastest one, itself an upper bound of no rate); the rest of the
  elapse time is wait. Needs two or more ops of the type, so an op is never measured against itself.

Where both apply the larger wait is taken. Checked (tests/test_comm_split.py) on msinsight_db_level0, whose Level1
twin measures the split: Level1 transit 3.99 ms a step of four allReduce ops, the Level0 estimate 3.80 ms; and on the
legacy 2-stage run with hccl_raw left out: stage 0's arrival waits are HCCL's Notify Wait to 1 %.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.model import Run, kept_on_run
from ..core.opnames import op_types_of

ESTIMATE = "estimate: "  # how a ledger source marks an estimated split
ARRIVAL = "arrival"
BANDWIDTH = "bandwidth"
# `hcom_allReduce__576_0_1` -> hcom_allReduce: the op type the fastest rate is looked up by.
INSTANCE_SUFFIX = re.compile(r"_+\d+(?:_\d+)*$")
# A legacy step trace's `stream_{stream id}_{index}_` prefix: the stream ids of one op differ between ranks
# (`stream_48_0_Receive-op663` on rank 0 is `stream_37_0_Receive-op663` on rank 1).
STREAM_PREFIX = re.compile(r"^stream_\d+_\d+_")


@dataclass(frozen=True)
class Split:
    """Per estimated comm_ops row (`rows`, indexed like run.comm_ops: rank, step, elapse_ms, transfer_ms,
    wait_ms, how: arrival / bandwidth / arrival+bandwidth, last: whether the rank arrived last at a collective
    matched across ranks, NA where unmatched), the fastest rate used per op type (`rates`, GB/s), the number of
    ranks whose arrivals were compared (`peers`), or why nothing was estimated (`why_not`)."""

    rows: pd.DataFrame
    rates: dict[str, float]
    peers: int
    why_not: str | None

    def method(self, hows: set[str]) -> str:
        """How a split was estimated, in words, from the `how` values of its rows."""
        parts = []
        if any(ARRIVAL in how for how in hows):
            parts.append(f"wait from the {self.peers} profiled ranks' arrival at each collective (latest start "
                         "less its own: a lower bound where ranks were not profiled)")
        if any(BANDWIDTH in how for how in hows):
            rates = ", ".join(f"{name} {rate:,.1f} GB/s" for name, rate in self.rates.items())
            parts.append(f"transfer at most payload / the run's fastest rate of the op type ({rates})")
        return ESTIMATE + "; ".join(parts)


def _empty(why: str) -> Split:
    return Split(pd.DataFrame(columns=["rank", "step", "elapse_ms", "transfer_ms", "wait_ms", "how", "last"]),
                 {}, 0, why)


@kept_on_run
def estimate(run: Run) -> Split:
    """The estimated split of the collective ops of ranks whose files measure none (module docstring)."""
    ops = run.comm_ops
    if not len(ops):
        return _empty("no per-op communication table, only a step file's communication time: no op sizes, and no "
                      "clock the ranks are known to share")
    measured = set(ops.loc[ops["transit_ms"].notna(), "rank"])
    ops = ops[(ops["kind"] == "collective") & (ops["elapse_ms"] > 0) & ~ops["rank"].isin(measured)]
    if not len(ops):
        return _empty("no collective op without a measured split")
    arrival_wait, last = _arrival_wait(ops)
    bandwidth_wait, rates = _bandwidth_wait(ops)
    wait = np.fmax(arrival_wait, bandwidth_wait)  # NaN only where neither applies
    known = ~np.isnan(wait)
    if not known.any():
        return _empty(_why_not(ops))
    elapse = ops["elapse_ms"].to_numpy(dtype=np.float64)
    how = np.where(~np.isnan(arrival_wait) & ~np.isnan(bandwidth_wait), f"{ARRIVAL}+{BANDWIDTH}",
                   np.where(~np.isnan(arrival_wait), ARRIVAL, BANDWIDTH))
    rows = pd.DataFrame({"rank": ops["rank"], "step": ops["step"], "elapse_ms": elapse, "transfer_ms": elapse - wait,
                         "wait_ms": wait, "how": how, "last": last}, index=ops.index)[known]
    peers = int(ops.loc[~np.isnan(arrival_wait), "rank"].nunique())
    return Split(rows, rates, peers, None)


def _arrival_wait(ops: pd.DataFrame) -> tuple[np.ndarray, pd.Series]:
    """(each row's wait for the last rank to arrive, NaN where its collective is not matched on two ranks whose
    ends agree; whether the row's rank arrived last, NA where unmatched)."""
    wait = np.full(len(ops), np.nan)
    last = pd.Series(pd.NA, index=ops.index, dtype="boolean")
    timed = ops[ops["start_ms"].notna()]
    if timed["rank"].nunique() < 2:
        return wait, last
    timed = timed.assign(group=timed["group"].fillna(""), end=timed["start_ms"] + timed["elapse_ms"],
                         name=[STREAM_PREFIX.sub("", name) for name in timed["name"].astype(str)])
    timed = timed.sort_values("start_ms", kind="stable")
    timed["occurrence"] = timed.groupby(["rank", "group", "name"], observed=True).cumcount()
    key = timed.groupby(["group", "name", "occurrence"], observed=True)
    ranks = key["rank"].transform("nunique")
    latest = key["start_ms"].transform("max")
    agree = (key["end"].transform("max") - key["end"].transform("min")) <= key["elapse_ms"].transform("min")
    matched = (ranks >= 2) & agree
    lateness = (latest - timed["start_ms"]).clip(lower=0.0)
    row_wait = np.minimum(lateness, timed["elapse_ms"]).where(matched)
    wait[ops.index.get_indexer(timed.index)] = row_wait.to_numpy(dtype=np.float64)
    last[timed.index[matched]] = (timed["start_ms"] == latest)[matched].to_numpy()
    return wait, last


def _bandwidth_wait(ops: pd.DataFrame) -> tuple[np.ndarray, dict[str, float]]:
    """(each row's elapse less its payload at the fastest rate of its op type and group, NaN where the payload
    is unknown or the type has a single op; the rate used per op type, GB/s)."""
    wait = np.full(len(ops), np.nan)
    sized = ops[ops["size_mb"].fillna(0) > 0]
    if not len(sized):
        return wait, {}
    types = pd.Series([INSTANCE_SUFFIX.sub("", t) for t in op_types_of(sized["name"].astype(str))],
                      index=sized.index)
    key = [types, sized["group"].fillna("")]
    rate = sized["size_mb"] / sized["elapse_ms"]  # MB per ms is GB per s
    fastest = rate.groupby(key).transform("max")
    usable = sized["name"].groupby(key).transform("nunique") >= 2
    transfer = np.minimum(sized["size_mb"] / fastest, sized["elapse_ms"])
    row_wait = (sized["elapse_ms"] - transfer).where(usable)
    wait[ops.index.get_indexer(sized.index)] = row_wait.to_numpy(dtype=np.float64)
    rates = {str(name): float(value) for name, value in rate[usable].groupby(types[usable]).max().items()}
    return wait, rates


def _why_not(ops: pd.DataFrame) -> str:
    """Why neither estimate applies to these collective ops."""
    arrivals = ("one rank only (no peer to compare its arrivals with)" if ops["rank"].nunique() < 2 else
                "the ops' start times are unknown" if ops["start_ms"].isna().all() else
                "the ranks' executions of the same collectives do not end together (their clocks differ)")
    sizes = ("no op sizes (nothing to divide by a link's rate)" if not (ops["size_mb"] > 0).any() else
             "each op type has a single op of known size (no faster op to take the rate from)")
    return f"{arrivals} and {sizes}"

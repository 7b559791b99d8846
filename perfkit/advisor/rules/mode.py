"""Execution-mode rules: graph_mode (a PyNative step whose time goes to Python dispatching ops one by one)."""

from __future__ import annotations

from ...analysis.ledger import CAUSES_OF, rank_parts
from ...analysis.measures import dispatch_inflation
from ...core.model import Run
from ..change import Change
from ..finding import Finding, severity_for
from ..registry import is_torch, known_ms, percent, rule

# A PyNative step that idles this share of its time between ops (the ledger's host time) is worth compiling:
# graph mode removes the per-op Python dispatch (on the real CPU custom loop of tests/runs, 3 PyNative steps of
# ~90 ms against 56-79 ms for the same network in graph mode on the same shared host). The smallest share the advisor
# acts on (docs/formats.md §4: msprof-analyze's 5 %).
HOST_GAP_MIN_SHARE = 0.05
# Op durations that carry dispatch waits: a fifth of the op time above each op's fastest call.
INFLATED_MIN_SHARE = 0.20


def top_cell(run: Run) -> str | None:
    """The network cell the op scope names start with (`Default/network-WithLossCell/...` -> network-WithLossCell);
    None where names carry no cell scope (PyNative on MindSpore 2.10: `Default/Conv2D-op0`)."""
    names = run.ops["name"].astype(str) if len(run.ops) else None
    if names is None:
        return None
    heads = names[names.str.count("/") >= 2].str.split("/").str[1].dropna()
    return str(heads.mode().iloc[0]) if len(heads) else None


@rule("graph_mode", needs=("steps",), claims=(*CAUSES_OF["host"], *CAUSES_OF["compute"]))
def graph_mode(run: Run) -> list[Finding]:
    if run.meta.mode != "pynative" or is_torch(run):
        return []
    parts = rank_parts(run)
    if not len(parts):
        return []
    total = float(parts["total"].mean())
    host_ms = float((parts["host"] - parts["transfer"]).mean())
    compute_ms = float(parts["compute"].mean())
    inflation = dispatch_inflation(run)
    inflated_ms = min(inflation["above_fastest_ms"], compute_ms) if inflation else 0.0
    inflated_share = inflation["above_fastest_ms"] / inflation["op_ms"] if inflation and inflation["op_ms"] > 0 else 0.0
    if not total > 0 or (host_ms / total < HOST_GAP_MIN_SHARE and inflated_share < INFLATED_MIN_SHARE):
        return []
    said = [f"{percent(host_ms / total):.1f} % of the step has no op running (Python dispatching the next op)"]
    evidence = {"host_gap_share_pct": percent(host_ms / total)}
    if inflation:
        evidence |= {"op_time_above_fastest_call_pct": percent(inflated_share),
                     **known_ms(op_time_above_fastest_call_ms=inflation["above_fastest_ms"],
                                slowest_call_ms=inflation["slowest_ms"], fastest_call_ms=inflation["fastest_ms"])}
        shapes = f" [{inflation['shapes'].replace(';', '; ')}]" if inflation["shapes"] else ""
        said.append(f"op durations include waits: {percent(inflated_share):.1f} % of op time is above each op's "
                    f"fastest call ({inflation['op']}{shapes} takes {inflation['fastest_ms']:.2f} to "
                    f"{inflation['slowest_ms']:.2f} ms)")
    evidence |= known_ms(host_gap_ms=host_ms, device_compute_ms=compute_ms, step_ms=total)
    gain = percent((host_ms + inflated_ms) / total)
    return [Finding(
        id="graph_mode", severity=severity_for(gain),
        title="PyNative step: " + "; ".join(said),
        evidence=evidence,
        action=("compile the step: ms.set_context(mode=ms.GRAPH_MODE), or decorate the train "
                f"step function (the one calling {top_cell(run) or 'the network'}, its loss, value_and_grad and the "
                "optimizer) with @ms.jit so it compiles to one graph"),
        target=top_cell(run), est_gain_pct=gain, change=Change("mode", "graph"))]

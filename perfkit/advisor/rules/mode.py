"""Execution-mode rules: graph_mode (a PyNative step whose time goes to Python dispatching ops one by one; a PyNative
loop without step markers: what its op timestamps show, and how to mark its steps)."""

from __future__ import annotations

from ...analysis.ledger import CAUSES_OF, rank_parts
from ...analysis.measures import dispatch_inflation
from ...core.model import Run
from ..change import Change
from ..finding import Finding, NotChecked, severity_for
from ..registry import NEEDS, has_steps, is_torch, known_ms, percent, rule

# A PyNative step that idles this share of its time between ops (the ledger's host time) is worth compiling:
# graph mode removes the per-op Python dispatch (on the real CPU custom loop of tests/runs, 3 PyNative steps of
# ~90 ms against 56-79 ms for the same network in graph mode on the same shared host). The smallest share the advisor
# acts on (docs/formats.md §4: msprof-analyze's 5 %).
HOST_GAP_MIN_SHARE = 0.05
# Op durations that carry dispatch waits: a fifth of the op time above each op's fastest call.
INFLATED_MIN_SHARE = 0.20
# The op types named in a finding about a loop without step markers (the summary's table lists them all).
TOP_OP_TYPES = 3
MARK_STEPS = ("mark the steps so each is split into data wait, op time and the gaps between ops: wrap the loop in "
              "`with perfkit.profiling() as prof:` and call `prof.step()` at the end of each step (under `perfkit "
              "profile -- …` too), or train with Model.train")


# A Cell's scope in MindSpore's op names: its attribute name and class, `network-WithLossCell`, `_backbone-Net`.
CELL_SCOPE = r"[\w.]+-[A-Za-z_]\w*"


def top_cell(run: Run) -> str | None:
    """The network cell the op scope names start with (`Default/network-WithLossCell/...` -> network-WithLossCell);
    None where names carry no cell scope (PyNative on MindSpore 2.10: `Default/Conv2D-op0`)."""
    if not len(run.ops):
        return None
    forward = run.ops[run.ops["pass"] == "forward"] if "pass" in run.ops else run.ops
    names = forward["name"].astype(str)  # the network's forward ops: not the optimizer's or gradient reducer's
    heads = names[names.str.count("/") >= 2].str.split("/").str[1].dropna()
    heads = heads[heads.str.fullmatch(CELL_SCOPE)]  # not an op's own scope: `Default/Expand/_SoftmaxBackward`
    return str(heads.mode().iloc[0]) if len(heads) else None


@rule("graph_mode", claims=(*CAUSES_OF["host"], *CAUSES_OF["compute"]))
def graph_mode(run: Run) -> list[Finding]:
    pynative = run.meta.mode == "pynative" and not is_torch(run)
    if not has_steps(run):
        if not pynative:
            raise NotChecked(NEEDS["steps"][1])
        return _unmarked_loop(run)
    if not pynative:
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


def _unmarked_loop(run: Run) -> list[Finding]:
    """A PyNative run without step times (a custom loop that marks no steps, whose ops run too unevenly for the
    steps to be read from them): what the op timestamps hold over the whole profile, and how to mark the steps."""
    inflation = dispatch_inflation(run, whole_profile=True)
    if inflation is None or not inflation["op_ms"] > 0:
        raise NotChecked("no step times and no timed op calls")
    shares = run.op_types.groupby("type", observed=True)["total_ms"].sum().sort_values(ascending=False)
    shares = shares / shares.sum() if len(shares) and shares.sum() > 0 else shares
    top = [(str(op_type), percent(share)) for op_type, share in shares.head(TOP_OP_TYPES).items()]
    inflated_share = inflation["above_fastest_ms"] / inflation["op_ms"]
    shapes = f" [{inflation['shapes'].replace(';', '; ')}]" if inflation["shapes"] else ""
    said = [f"{inflation['op_ms']:.1f} ms of op time in {inflation['calls']:.0f} op calls",
            f"{percent(inflated_share):.1f} % of it above each op name's fastest call (Python dispatch waits and "
            f"first calls; PyNative may give ops of several shapes one name: "
            f"{inflation['op']}{shapes} takes {inflation['fastest_ms']:.2f} to {inflation['slowest_ms']:.2f} ms)"]
    if top:
        said.append("most op time in " + ", ".join(f"{op_type} {share:.1f} %" for op_type, share in top))
    evidence = {"op_time_above_fastest_call_pct": percent(inflated_share), "op_calls": inflation["calls"],
                **known_ms(op_ms=inflation["op_ms"], op_time_above_fastest_call_ms=inflation["above_fastest_ms"]),
                **{f"{op_type}_share_pct": share for op_type, share in top}}
    return [Finding(
        id="graph_mode", severity="medium",
        title="PyNative loop without step markers (no step times: the step cannot be split); its op timestamps "
              "hold " + "; ".join(said),
        evidence=evidence,
        action=(f"{MARK_STEPS}; then compile the step: decorate the train step function (its network, loss, "
                "value_and_grad and optimizer calls) with @ms.jit, or ms.set_context(mode=ms.GRAPH_MODE)"),
        target=top[0][0] if top else None, change=Change("mode", "graph"))]

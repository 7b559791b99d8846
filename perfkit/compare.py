"""Before/after: what changed between two runs of the same training script."""

from __future__ import annotations

from typing import Any

from .advisor import advise
from .analysis import STEP_KEYS, op_type_shares, queue_stats, step_means
from .model import Run
from .views.format import ms, percent


def _op_type_deltas(run_a: Run, run_b: Run) -> list[dict[str, Any]]:
    shares_a = op_type_shares(run_a).set_index("type")["share"]
    shares_b = op_type_shares(run_b).set_index("type")["share"]
    deltas = []
    for op_type in shares_a.index.union(shares_b.index):
        share_a = float(shares_a.get(op_type, 0.0))
        share_b = float(shares_b.get(op_type, 0.0))
        deltas.append({"type": str(op_type), "share_a": share_a, "share_b": share_b, "delta": share_b - share_a})
    return sorted(deltas, key=lambda d: (-abs(d["delta"]), d["type"]))


def _queue_change(queue_a, queue_b) -> dict[str, Any]:
    stats_a, stats_b = queue_stats(queue_a), queue_stats(queue_b)
    return {"empty_pct_a": stats_a["empty_pct"] if stats_a else None,
            "empty_pct_b": stats_b["empty_pct"] if stats_b else None}


def compare(run_a: Run, run_b: Run) -> dict[str, Any]:
    """The `perfkit compare --format json` contract: B relative to A (speedup > 1 means B is faster)."""
    steps_a, steps_b = step_means(run_a.steps), step_means(run_b.steps)
    speedup = None
    step_deltas = {}
    if steps_a and steps_b:
        if steps_a["total_ms"] and steps_b["total_ms"]:
            speedup = steps_a["total_ms"] / steps_b["total_ms"]
        step_deltas = {key: (steps_b[key] - steps_a[key]
                             if steps_a[key] is not None and steps_b[key] is not None else None)
                       for key in STEP_KEYS}
    advice_a, advice_b = advise(run_a), advise(run_b)
    ids_a, ids_b = advice_a.ids(), advice_b.ids()
    return {
        "run_a": run_a.path, "run_b": run_b.path,
        "a": steps_a, "b": steps_b,
        "speedup": speedup,
        "step_deltas_ms": step_deltas,
        "op_type_deltas": _op_type_deltas(run_a, run_b),
        "queues": {"host": _queue_change(run_a.host_queue, run_b.host_queue),
                   "device": _queue_change(run_a.device_queue, run_b.device_queue)},
        "findings_a": ids_a, "findings_b": ids_b,
        "resolved": sorted(set(ids_a) - set(ids_b)),
        "new": sorted(set(ids_b) - set(ids_a)),
    }


def compare_text(result: dict[str, Any], top: int = 10) -> str:
    """The terminal form of `compare`: steps side by side, the speedup, the largest op-type share changes."""
    lines = [f"A  {result['run_a']}", f"B  {result['run_b']}", ""]
    a, b = result["a"], result["b"]
    if a and b:
        lines.append(f"{'mean per step':<24}{'A':>16}{'B':>16}{'B - A':>16}")
        for key in STEP_KEYS:
            delta = result["step_deltas_ms"].get(key)
            lines.append(f"  {key:<22}{ms(a[key]):>16}{ms(b[key]):>16}{ms(delta):>16}")
    else:
        lines.append("steps unknown in " + " and ".join(name for name, s in (("A", a), ("B", b)) if not s))
    speedup = result["speedup"]
    lines += ["", f"speedup A/B  {'unknown' if speedup is None else f'{speedup:.2f}x'}"]
    if result["op_type_deltas"]:
        lines += ["", f"op type share of op time (largest changes, top {top})"]
        for delta in result["op_type_deltas"][:top]:
            lines.append(f"  {delta['type']:<30}{100 * delta['share_a']:7.1f} % -> {100 * delta['share_b']:5.1f} %"
                         f"  ({100 * delta['delta']:+.1f})")
    for which, change in result["queues"].items():
        if change["empty_pct_a"] is not None or change["empty_pct_b"] is not None:
            lines.append(f"{which} queue empty  {percent(change['empty_pct_a'])} -> {percent(change['empty_pct_b'])}")
    lines += ["", f"resolved  {', '.join(result['resolved']) or '-'}",
              f"new       {', '.join(result['new']) or '-'}"]
    return "\n".join(lines)

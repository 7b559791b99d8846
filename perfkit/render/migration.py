"""The cross-framework comparison (perfkit/views/migration.py) as terminal text and markdown: settings first, then
step time, the verdict or why there is none, op families with the ops each side counted, the stages (module <-> Cell)
down to a depth with the port's backward held by groups of identical blocks, ops and stages without a partner, data
wait in each side's definition, and the MindSpore changes where the port loses."""

from __future__ import annotations

from typing import Any

from ..views.migration import STAGE_DEPTH, attribute_of

FAMILIES_SHOWN = 16
UNMATCHED_SHOWN = 12
SETTING_NAMES = {"framework": "framework", "network": "network", "version": "version", "mode": "mode",
                 "device": "device", "op_time": "op time", "threads": "threads", "isa_cap": "ISA cap (oneDNN)",
                 "cpu_capability": "CPU capability", "batch_size": "batch", "image_size": "image size",
                 "precision": "precision", "optimizer": "optimizer", "loss_scale": "loss scaling",
                 "data_workers": "dataset workers", "runs": "runs"}


def _value(value: Any) -> str:
    return "not recorded" if value is None else str(value)


def _ms(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f} ms"


def _ops(kinds: list[dict]) -> str:
    return " + ".join(f"{kind['type']} x{kind['calls_per_step']:.0f}" for kind in kinds)


def stages_to_depth(result: dict[str, Any], depth: int) -> dict[str, Any]:
    """The comparison with its stages, groups and unmatched stages cut to `depth` (1: the top-level modules)."""
    def shallow(label: str) -> bool:
        return label.count(".") < depth

    return {**result, "stages": [row for row in result["stages"] if row["depth"] <= depth],
            "stage_groups": [group for group in result["stage_groups"] if all(map(shallow, group["stages"]))],
            "stage_class_mismatches": [row for row in result["stage_class_mismatches"] if shallow(row["stage"])],
            "unmatched_stages": {side: [label for label in labels if shallow(label)]
                                 for side, labels in result["unmatched_stages"].items()}}


def group_name(stages: list[str]) -> str:
    """`layer4.{0,1,2}` for sibling stages, else their labels joined by +."""
    parents = {stage.rpartition(".")[0] for stage in stages}
    if len(parents) == 1 and parents != {""}:
        return f"{parents.pop()}.{{{','.join(stage.rpartition('.')[2] for stage in stages)}}}"
    return "+".join(stages)


def _stage_side(side: dict[str, Any]) -> str:
    if side["backward_ms"] is not None:
        return f"{side['forward_ms']:.3f} / {side['backward_ms']:.3f} ms"
    held = f"in {group_name(side['backward_with'])}" if side.get("backward_with") else "unknown"
    return f"{side['forward_ms']:.3f} ms / {held}"


def _loss_scale(value: Any) -> str:
    if not isinstance(value, dict):
        return _value(value)
    return f"{value['scaling']} ({value['evidence']})"


def _rows(result: dict[str, Any]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(section title, rows of (label, reference, port)) in order: the text and markdown forms share them."""
    settings = result["settings"]
    ref, port = result["reference_run"], result["port_run"]
    setting_rows = [(SETTING_NAMES[key], *(_loss_scale(settings[side][key]) if key == "loss_scale"
                                           else _value(settings[side][key]) for side in ("reference", "port")))
                    for key in SETTING_NAMES]
    spread = [(side["spread"] or {}).get("cv_pct") for side in (ref, port)]
    time_rows = [("step (steady mean)", _ms(ref["step_ms"]), _ms(port["step_ms"])),
                 ("samples/s", *(("unknown" if side["samples_per_s"] is None else f"{side['samples_per_s']:.1f}")
                                 for side in (ref, port))),
                 ("step spread (cv)", *("unknown" if cv is None else f"{cv:.1f} %" for cv in spread)),
                 ("data wait", _ms(ref["data_wait_ms"]), _ms(port["data_wait_ms"]))]
    family_rows = [(row["family"] + ("" if row["ratio"] is None else f"  (port {row['ratio']:.2f}x)"),
                    f"{_ms(row['reference_ms_per_step'])}  {_ops(row['reference_ops'])}",
                    f"{_ms(row['port_ms_per_step'])}  {_ops(row['port_ops'])}")
                   for row in result["families"][:FAMILIES_SHOWN]]
    stage_rows = [("  " * (row["depth"] - 1) + f"{row['stage']}"
                   + (f" = {attribute_of(row['port_stage'])}" if attribute_of(row.get("port_stage", row["stage"]))
                      != attribute_of(row["stage"]) else "")
                   + f"  ({row['reference']['class']} / "
                   f"{row['port']['class']})", *(_stage_side(row[side]) for side in ("reference", "port")))
                  for row in result["stages"]]
    group_rows = [(group_name(group["stages"]), _ms(group["reference_backward_ms"]), _ms(group["backward_ms"]))
                  for group in result["stage_groups"]]
    sections = [("settings", setting_rows), ("time per step", time_rows),
                ("op families, ms per step (ops counted per step)", family_rows),
                ("stages (module / Cell by position and class), forward / backward ms per step", stage_rows)]
    if not stage_rows:
        sections.pop()  # no module and Cell matched: nothing to show
    if group_rows:
        sections.append(("backward of identical blocks, ms per step (the port's kernels fit each of them: "
                         "not split)", group_rows))
    return sections


def _verdict_words(result: dict[str, Any]) -> str:
    judged = result["verdict"]
    if judged["kind"] == "refused":
        return f"no speedup verdict: {judged['why']}"
    low, high = judged["interval"]
    speedup = (f"port speedup {judged['speedup']:.2f}x (95 % interval {low:.2f}-{high:.2f}, {judged['basis']}"
               + (f" {judged['noise_floor_pct']:.0f} %" if judged["noise_floor_pct"] is not None else "")
               + (", per sample" if judged["per_sample"] else "") + ")")
    if judged["why"] is not None:
        return (f"no speedup verdict: {speedup} is within the runs' spread; more runs a side narrow it "
                "(the port: perfkit profile --repeat N; the reference: --output REF/repeat_1 .. REF/repeat_N)")
    return f"{judged['kind']}: {speedup}"


def _unmatched_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for side in ("reference", "port"):
        kinds = result["unmatched"][side]
        if kinds:
            shown = ", ".join(f"{kind['type']} ({kind['pass']}) {kind['ms_per_step']:.3f} ms "
                              f"x{kind['calls_per_step']:.0f}" for kind in kinds[:UNMATCHED_SHOWN])
            more = f", and {len(kinds) - UNMATCHED_SHOWN} more" if len(kinds) > UNMATCHED_SHOWN else ""
            lines.append(f"{side} only (no partner, no ratio): {shown}{more}")
    for side in ("reference", "port"):
        if result["unmatched_stages"][side]:
            lines.append(f"{side} stages without a partner: " + ", ".join(result["unmatched_stages"][side]))
    if result["stage_class_mismatches"]:
        lines.append("stages whose classes do not map (not compared): " + ", ".join(
            f"{row['stage']} ({row['reference']} / {row['port']})" for row in result["stage_class_mismatches"]))
    return lines


def _shown_differences(result: dict[str, Any]) -> list[str]:
    """Settings that differ without refusing the verdict (views.migration.SHOWN), one line each."""
    return [f"differs, not refusing the verdict: {SETTING_NAMES[row['setting']]} "
            f"{_loss_scale(row['reference'])} (reference) vs {_loss_scale(row['port'])} (port)"
            for row in result["differing_not_blocking"]]


def migration_text(result: dict[str, Any], depth: int = STAGE_DEPTH) -> str:
    result = stages_to_depth(result, depth)
    lines = [f"reference  {result['reference']}  (PyTorch)", f"port       {result['port']}  (MindSpore)", ""]
    for index, (title, rows) in enumerate(_rows(result)):
        lines.append(title)
        for label, ref, port in rows:
            lines.append(f"  {label:<28} {ref:<24} {port}" if index != 2 else
                         f"  {label}\n      reference  {ref}\n      port       {port}")
        lines.append("")
    if result["not_checked"]:
        lines.append("not checked (not recorded on a side): " + ", ".join(result["not_checked"]))
    lines += _shown_differences(result)
    lines.append(_verdict_words(result))
    lines += [""] + _unmatched_lines(result)
    lines += ["", "data wait: reference = " + result["reference_run"]["data_wait_is"],
              "           port = " + result["port_run"]["data_wait_is"]]
    if result["changes"]:
        lines += ["", "where the port loses, the MindSpore change:"]
        lines += [f"  {change['where']}: {change['change']}" for change in result["changes"]]
    return "\n".join(lines)


def migration_markdown(result: dict[str, Any], depth: int = STAGE_DEPTH) -> str:
    result = stages_to_depth(result, depth)
    lines = [f"## PyTorch reference `{result['reference']}` vs MindSpore port `{result['port']}`", "",
             f"**{_verdict_words(result)}**", ""]
    shown = _shown_differences(result)
    lines += [f"- {line}" for line in shown] + ([""] if shown else [])
    for title, rows in _rows(result):
        lines += [f"### {title}", "", "| | reference | port |", "|---|---|---|"]
        # a stage's depth as leading spaces, which a table cell would drop: non-breaking ones
        lines += [f"| {'&nbsp;' * (len(label) - len(label.lstrip(' ')))}{label.lstrip(' ')} | {ref} | {port} |"
                  for label, ref, port in rows]
        lines.append("")
    lines += [f"- {line}" for line in _unmatched_lines(result)]
    if result["changes"]:
        lines += ["", "### Where the port loses", ""]
        lines += [f"- **{change['where']}**: {change['change']}" for change in result["changes"]]
    return "\n".join(lines) + "\n"

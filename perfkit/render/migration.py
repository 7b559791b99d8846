"""The cross-framework comparison (perfkit/views/migration.py) as terminal text and markdown: settings first, then
step time, the verdict or why there is none, op families with the ops each side counted, ops without a partner, data
wait in each side's definition, and the MindSpore changes where the port loses."""

from __future__ import annotations

from typing import Any

FAMILIES_SHOWN = 16
UNMATCHED_SHOWN = 12
SETTING_NAMES = {"framework": "framework", "network": "network", "version": "version", "mode": "mode",
                 "device": "device", "op_time": "op time", "threads": "threads", "isa_cap": "ISA cap (oneDNN)",
                 "cpu_capability": "CPU capability", "batch_size": "batch", "image_size": "image size",
                 "precision": "precision", "optimizer": "optimizer", "data_workers": "dataset workers", "runs": "runs"}


def _value(value: Any) -> str:
    return "not recorded" if value is None else str(value)


def _ms(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f} ms"


def _ops(kinds: list[dict]) -> str:
    return " + ".join(f"{kind['type']} x{kind['calls_per_step']:.0f}" for kind in kinds)


def _rows(result: dict[str, Any]) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(section title, rows of (label, reference, port)) in order: the text and markdown forms share them."""
    settings = result["settings"]
    ref, port = result["reference_run"], result["port_run"]
    setting_rows = [(SETTING_NAMES[key], _value(settings["reference"][key]), _value(settings["port"][key]))
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
    stage_rows = [(f"{row['stage']}  ({row['reference']['class']} / {row['port']['class']})",
                   *(f"{row[side]['forward_ms']:.3f} / {row[side]['backward_ms']:.3f} ms"
                     for side in ("reference", "port"))) for row in result["stages"]]
    return [("settings", setting_rows), ("time per step", time_rows),
            ("op families, ms per step (ops counted per step)", family_rows),
            ("stages (module / Cell by name), forward / backward ms per step", stage_rows)]


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
    return lines


def migration_text(result: dict[str, Any]) -> str:
    lines = [f"reference  {result['reference']}  (PyTorch)", f"port       {result['port']}  (MindSpore)", ""]
    for index, (title, rows) in enumerate(_rows(result)):
        lines.append(title)
        for label, ref, port in rows:
            lines.append(f"  {label:<28} {ref:<24} {port}" if index != 2 else
                         f"  {label}\n      reference  {ref}\n      port       {port}")
        lines.append("")
    if result["not_checked"]:
        lines.append("not checked (not recorded on a side): " + ", ".join(result["not_checked"]))
    lines.append(_verdict_words(result))
    lines += [""] + _unmatched_lines(result)
    lines += ["", "data wait: reference = " + result["reference_run"]["data_wait_is"],
              "           port = " + result["port_run"]["data_wait_is"]]
    if result["changes"]:
        lines += ["", "where the port loses, the MindSpore change:"]
        lines += [f"  {change['where']}: {change['change']}" for change in result["changes"]]
    return "\n".join(lines)


def migration_markdown(result: dict[str, Any]) -> str:
    lines = [f"## PyTorch reference `{result['reference']}` vs MindSpore port `{result['port']}`", "",
             f"**{_verdict_words(result)}**", ""]
    for title, rows in _rows(result):
        lines += [f"### {title}", "", "| | reference | port |", "|---|---|---|"]
        lines += [f"| {label} | {ref} | {port} |" for label, ref, port in rows]
        lines.append("")
    lines += [f"- {line}" for line in _unmatched_lines(result)]
    if result["changes"]:
        lines += ["", "### Where the port loses", ""]
        lines += [f"- **{change['where']}**: {change['change']}" for change in result["changes"]]
    return "\n".join(lines) + "\n"

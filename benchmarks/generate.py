"""Write large, format-faithful profiler runs for the load benchmarks.

Every file is made from a real fixture (tests/fixtures) by replicating its rows and shifting
what must differ between copies (step ids, timestamps, op numbers, flow ids); nothing is invented
except the per-step jitter and the deliberately slow ranks, both seeded.

    python benchmarks/generate.py            # big_rank, legacy_10k_steps, ranks_256 into benchmarks/generated/
    python benchmarks/generate.py big_rank   # just one

Runs (folder names under benchmarks/generated/):
  big_rank/rank0_ascend_pt   (a) one new-layout rank: ~2 million kernel_details rows, ~1 GB trace_view.json
  legacy_10k_steps           (b) legacy flat folder: 10,000 steps, ~1 million aicore detail and framework rows
  ranks_256/rank{r}_ascend_pt (c) 256 new-layout ranks, 20 steps each, ranks SLOW_RANKS slow in compute
  ranks_1024, ranks_4096      (c) with 1,024 and 4,096 ranks (benchmarks/bench_ranks.py)

A run that already exists is skipped; a run is written into `<name>.partial` and renamed when complete.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replicate import (  # noqa: E402
    RowTemplate,
    copy_files,
    csv_line,
    micros_to_thousandths,
    open_text,
    read_csv_rows,
    staged_folder,
    thousandths_to_micros,
)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("PERFKIT_FIXTURES", REPO / "tests" / "fixtures")).resolve()
GENERATED = REPO / "benchmarks" / "generated"

NEW_RANK = FIXTURES / "new_format/msinsight_level1/rank0_ascend_pt"  # torch_npu layout = MindSpore's *_ascend_ms
LEGACY_RUN = FIXTURES / "legacy/mindinsight_run_2"                    # every legacy file for one rank (1)
OUTPUT = "ASCEND_PROFILER_OUTPUT"

# The fixture's trace spans 400 ms around its single profiled step (step 50); copies of a step
# are laid this far apart so neither kernels nor timeline events of two copies overlap.
STEP_PERIOD_THOUSANDTHS = 400_000 * 1000
STEP_JITTER = 0.02  # relative sd of per-step time: real steps vary by a few percent
SEED = 20261122

BIG_KERNEL_ROWS = 2_000_000
BIG_TRACE_BYTES = 1_000_000_000
LEGACY_STEPS = 10_000
LEGACY_DETAIL_ROWS = 1_000_000
CLUSTER_RANKS = 256
CLUSTER_STEPS = 20
# Slow ranks spend SLOW_COMPUTE_FACTOR x the compute time; the other ranks wait that long in their
# collectives, so every rank's step takes as long (data-parallel lockstep), as on a real cluster.
SLOW_RANKS = (3, 130, 201)
SLOW_COMPUTE_FACTOR = 2.0

STEP_TRACE_TIME_COLUMNS_WAITING = ("Communication(Not Overlapped)", "Communication", "Stage",
                                   "Communication(Not Overlapped and Exclude Receive)")


# ---------------------------------------------------------------- new layout (a) and (c)

def write_kernel_details(target: Path, steps: range, compute_factor: float = 1.0) -> int:
    """The fixture's kernel rows once per step, step id and start time shifted, durations scaled."""
    header, rows = read_csv_rows(NEW_RANK / OUTPUT / "kernel_details.csv")
    step_col = next(i for i, name in enumerate(header) if name.lower() == "step id")
    start_col, dur_col = header.index("Start Time(us)"), header.index("Duration(us)")
    starts = [micros_to_thousandths(row[start_col]) for row in rows]
    start_suffix = [row[start_col][len(row[start_col].rstrip()):] for row in rows]  # the real trailing TAB
    durations = [row[dur_col] if compute_factor == 1.0 else f"{float(row[dur_col]) * compute_factor:.3f}"
                 for row in rows]
    template = RowTemplate(rows, {
        step_col: lambda i, step, offset: step,
        start_col: lambda i, step, offset: thousandths_to_micros(starts[i] + offset) + start_suffix[i],
        dur_col: lambda i, step, offset: durations[i],
    })
    with open_text(target) as out:
        out.write(csv_line(header))
        for index, step in enumerate(steps):
            out.write(template.render(str(step), index * STEP_PERIOD_THOUSANDTHS))
    return len(rows) * len(steps)


def write_step_trace_time(target: Path, steps: range, rng: np.random.Generator,
                          compute_factor: float = 1.0, wait_us: float = 0.0) -> None:
    """One row per step: the fixture's row jittered; compute scaled, waiting added to communication."""
    header, (row,) = read_csv_rows(NEW_RANK / OUTPUT / "step_trace_time.csv")
    base = {name: float(value) for name, value in zip(header[1:], row[1:])}
    extra_compute = base["Computing"] * (compute_factor - 1.0)
    scales = rng.normal(1.0, STEP_JITTER, len(steps))
    with open_text(target) as out:
        out.write(csv_line(header))
        for step, scale in zip(steps, scales):
            values = dict(base)
            values["Computing"] += extra_compute
            values["Stage"] += extra_compute
            for name in STEP_TRACE_TIME_COLUMNS_WAITING:
                values[name] += wait_us
            out.write(csv_line([str(step)] + [repr(round(float(values[name] * scale), 3)) for name in header[1:]]))


def write_op_statistic(target: Path, steps: int, compute_factor: float = 1.0) -> None:
    """Per-type totals for `steps` copies of the fixture step; ratios recomputed from the totals."""
    header, rows = read_csv_rows(NEW_RANK / OUTPUT / "op_statistic.csv")
    col = {name: header.index(name) for name in
           ("Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)", "Max Time(us)", "Ratio(%)")}
    totals = [float(row[col["Total Time(us)"]]) * steps * compute_factor for row in rows]
    grand_total = sum(totals)
    with open_text(target) as out:
        out.write(csv_line(header))
        for row, total in zip(rows, totals):
            row = list(row)
            row[col["Count"]] = str(int(row[col["Count"]]) * steps)
            row[col["Total Time(us)"]] = f"{total:.3f}"
            for name in ("Min Time(us)", "Avg Time(us)", "Max Time(us)"):
                row[col[name]] = f"{float(row[col[name]]) * compute_factor:.3f}"
            row[col["Ratio(%)"]] = f"{100.0 * total / grand_total:.3f}"
            out.write(csv_line(row))


def write_trace_view(target: Path, target_bytes: int, first_step: int) -> int:
    """The fixture's timeline once per step until the file reaches `target_bytes`; returns the step count.

    Metadata (`M`) events are written once; every other event's `ts` (a string of µs, as the real
    file has it) is shifted by the step period, and the step marker (`ProfilerStep#50`) renamed to the
    copy's step, `first_step` on, so that copies line up with kernel_details' steps. Flow ids (`s`/`f`) are small counters or epoch-ns
    stamps; shifting them by the period in ns keeps both unique per copy, the stamps in step with `ts`.
    """
    events = orjson.loads((NEW_RANK / OUTPUT / "trace_view.json").read_bytes())
    metadata = [event for event in events if event.get("ph") == "M"]
    body = [event for event in events if event.get("ph") != "M"]
    markers = {"ts": "@@TS@@", str: "@@IDS@@", int: "@@IDN@@"}
    slots: list[tuple[str, int]] = []  # in serialization (= dict insertion) order
    for event in body:
        for key in list(event):
            if key == "ts":
                slots.append(("ts", micros_to_thousandths(str(event["ts"]))))
                event["ts"] = markers["ts"]
            elif key == "id":
                slots.append(("id", int(event["id"])))
                event["id"] = markers[type(event["id"])]
    (marker,) = {event["name"] for event in body if re.fullmatch(r"ProfilerStep#\d+", event.get("name", ""))}
    text = orjson.dumps(body).decode()[1:-1].replace("%", "%%")
    text = (text.replace(f'"{markers["ts"]}"', '"%s"').replace(f'"{markers[str]}"', '"%s"')
            .replace(f'"{markers[int]}"', "%s"))
    with open_text(target) as out:
        out.write("[" + orjson.dumps(metadata).decode()[1:-1])
        written, copies = 0, 0
        while written < target_bytes:
            offset = copies * STEP_PERIOD_THOUSANDTHS  # µs thousandths = ns
            values = tuple(thousandths_to_micros(value + offset) if kind == "ts" else str(value + offset)
                           for kind, value in slots)
            block = "," + (text % values).replace(f'"{marker}"', f'"ProfilerStep#{first_step + copies}"')
            out.write(block)
            written += len(block)
            copies += 1
        out.write("]")
    return copies


def write_new_layout_rank(folder: Path, rank: int, steps: range, rng: np.random.Generator,
                          compute_factor: float = 1.0, wait_us: float = 0.0,
                          trace_bytes: int | None = None) -> dict:
    """One `*_ascend_pt` rank folder; small files copied, the step-dependent ones replicated."""
    output = folder / OUTPUT
    replicated = {"kernel_details.csv", "step_trace_time.csv", "op_statistic.csv", "trace_view.json",
                  "communication.json", "communication_matrix.json"}
    copy_files(NEW_RANK / OUTPUT, output, skip=replicated)
    info = json.loads((NEW_RANK / "profiler_info_0.json").read_text())
    info["rank_id"] = rank
    (folder / f"profiler_info_{rank}.json").write_text(json.dumps(info, indent=4))
    copy_files(NEW_RANK, folder, skip={"profiler_info_0.json"})
    facts = {"kernel_rows": write_kernel_details(output / "kernel_details.csv", steps, compute_factor)}
    write_step_trace_time(output / "step_trace_time.csv", steps, rng, compute_factor, wait_us)
    write_op_statistic(output / "op_statistic.csv", len(steps), compute_factor)
    write_communication(output / "communication.json", steps)
    if trace_bytes:
        facts["trace_steps"] = write_trace_view(output / "trace_view.json", trace_bytes, steps.start)
    return facts


def write_communication(target: Path, steps: range) -> None:
    """communication.json with the fixture's step-50 collectives under every step, timestamps shifted."""
    (step_ops,) = orjson.loads((NEW_RANK / OUTPUT / "communication.json").read_bytes()).values()
    result = {}
    for index, step in enumerate(steps):
        ops = copy.deepcopy(step_ops)
        for op in ops.get("collective", {}).values():
            info = op.get("Communication Time Info", {})
            if "Start Timestamp(us)" in info:
                info["Start Timestamp(us)"] += index * STEP_PERIOD_THOUSANDTHS / 1000
        result[f"step{step}"] = ops
    target.write_bytes(orjson.dumps(result))


def generate_big_rank(target: Path) -> dict:
    """(a): one rank, ~2 million kernel rows (one fixture step = 191 rows, so ~10,500 steps)."""
    rows_per_step = len(read_csv_rows(NEW_RANK / OUTPUT / "kernel_details.csv")[1])
    steps = range(1, math.ceil(BIG_KERNEL_ROWS / rows_per_step) + 1)
    with staged_folder(target) as folder:
        return write_new_layout_rank(folder / "rank0_ascend_pt", 0, steps, np.random.default_rng(SEED),
                                     trace_bytes=BIG_TRACE_BYTES)


def generate_cluster(target: Path, ranks: int = CLUSTER_RANKS, steps: int = CLUSTER_STEPS,
                     slow_ranks: tuple[int, ...] = SLOW_RANKS) -> dict:
    """(c): `ranks` rank folders; `slow_ranks` compute slowly and the others wait for them."""
    step_ids = range(1, steps + 1)
    rng = np.random.default_rng(SEED)
    header, (row,) = read_csv_rows(NEW_RANK / OUTPUT / "step_trace_time.csv")
    wait_us = float(row[header.index("Computing")]) * (SLOW_COMPUTE_FACTOR - 1.0)
    rows = 0
    with staged_folder(target) as folder:
        for rank in range(ranks):
            slow = rank in slow_ranks
            facts = write_new_layout_rank(folder / f"rank{rank}_ascend_pt", rank, step_ids, rng,
                                          compute_factor=SLOW_COMPUTE_FACTOR if slow else 1.0,
                                          wait_us=0.0 if slow else wait_us)
            rows += facts["kernel_rows"]
    return {"ranks": ranks, "steps": steps, "kernel_rows": rows, "slow_ranks": list(slow_ranks)}


# ---------------------------------------------------------------- legacy (b)

OP_NUMBER = re.compile(r"-op(\d+)$")


def renumbered(name: str, copy_index: int, stride: int) -> str:
    """`Default/Conv2D-op13` -> `Default/Conv2D-op{13 + copy*stride}`: each copy is another layer's op."""
    match = OP_NUMBER.search(name)
    if not match:
        return f"{name}_{copy_index}" if copy_index else name
    return f"{name[:match.start(1)]}{int(match.group(1)) + copy_index * stride}"


def write_legacy_ops(folder: Path, copies: int) -> int:
    """aicore detail, framework_raw and aicore type for `copies` replicas of the fixture graph."""
    header, detail = read_csv_rows(LEGACY_RUN / "aicore_intermediate_1_detail.csv")
    stride = 10 ** len(str(max(int(m.group(1)) for row in detail if (m := OP_NUMBER.search(row[0])))))
    names = [row[0] for row in detail]
    template = RowTemplate(detail, {0: lambda i, c: renumbered(names[i], c, stride)})
    with open_text(folder / "aicore_intermediate_1_detail.csv") as out:
        out.write(csv_line(header))
        for index in range(copies):
            out.write(template.render(index))

    header, framework = read_csv_rows(LEGACY_RUN / "framework_raw_1.csv")
    task_col, full_col, op_col = (header.index(n) for n in ("task_id", "full_op_name", "op_name"))
    tasks = [int(row[task_col]) for row in framework]
    task_stride = 10 ** len(str(max(tasks)))
    full_names, op_names = [row[full_col] for row in framework], [row[op_col] for row in framework]
    template = RowTemplate(framework, {
        task_col: lambda i, c: str(tasks[i] + c * task_stride),
        full_col: lambda i, c: renumbered(full_names[i], c, stride),
        op_col: lambda i, c: renumbered(op_names[i], c, stride),
    })
    with open_text(folder / "framework_raw_1.csv") as out:
        out.write(csv_line(header))
        for index in range(copies):
            out.write(template.render(index))

    header, types = read_csv_rows(LEGACY_RUN / "aicore_intermediate_1_type.csv")
    time_col, count_col = header.index("execution_time"), header.index("execution_frequency")
    with open_text(folder / "aicore_intermediate_1_type.csv") as out:
        out.write(csv_line(header))
        for row in types:
            row = list(row)
            row[time_col] = repr(round(float(row[time_col]) * copies, 6))
            row[count_col] = str(int(row[count_col]) * copies)
            out.write(csv_line(row))
    return len(detail) * copies


def write_legacy_step_trace(target: Path, steps: int, rng: np.random.Generator) -> None:
    """step_trace_raw: `steps` rows in 10 ns ticks, back to back, plus MindSpore's average row.

    The fixture's one real row has interval 0 (first step); its average row keeps the run's
    mean interval, which is used here for every later step.
    """
    header, rows = read_csv_rows(LEGACY_RUN / "step_trace_raw_1_detail_time.csv")
    first, average = (dict(zip(header, map(int, row))) for row in rows)
    jitter = rng.normal(1.0, STEP_JITTER, (3, steps))
    interval = (average["iteration_interval"] * jitter[0]).astype(np.int64)
    interval[0] = 0
    fp_and_bp = (first["fp_and_bp"] * jitter[1]).astype(np.int64)
    tail = (first["tail"] * jitter[2]).astype(np.int64)
    total = interval + fp_and_bp + tail
    start = first["start_point"] + np.concatenate([[0], np.cumsum(total)[:-1]])
    columns = {"step_num": np.arange(1, steps + 1), "start_point": start, "end_point": start + total,
               "total": total, "fp_point": start + interval, "bp_point": start + interval + fp_and_bp,
               "iteration_interval": interval, "fp_and_bp": fp_and_bp, "tail": tail}
    table = np.column_stack([columns[name] for name in header])
    with open_text(target) as out:
        out.write(",".join(header) + "\n")
        np.savetxt(out, table, fmt="%d", delimiter=",")
        out.write(",".join(["-"] + [str(int(columns[name].mean())) for name in header[1:]]) + "\n")


def generate_legacy(target: Path) -> dict:
    """(b): the whole mindinsight_run_2 folder, with 10,000 steps and ~1 million op rows."""
    detail_rows = len(read_csv_rows(LEGACY_RUN / "aicore_intermediate_1_detail.csv")[1])
    copies = math.ceil(LEGACY_DETAIL_ROWS / detail_rows)
    with staged_folder(target) as folder:
        copy_files(LEGACY_RUN, folder, skip={"aicore_intermediate_1_detail.csv", "aicore_intermediate_1_type.csv",
                                             "framework_raw_1.csv", "step_trace_raw_1_detail_time.csv"})
        rows = write_legacy_ops(folder, copies)
        write_legacy_step_trace(folder / "step_trace_raw_1_detail_time.csv", LEGACY_STEPS,
                                np.random.default_rng(SEED))
    return {"steps": LEGACY_STEPS, "detail_rows": rows}


RUNS = {"big_rank": generate_big_rank, "legacy_10k_steps": generate_legacy, "ranks_256": generate_cluster,
        # bench_ranks.py: the same ranks, more of them (2 GB and 8 GB)
        "ranks_1024": functools.partial(generate_cluster, ranks=1024),
        "ranks_4096": functools.partial(generate_cluster, ranks=4096)}
DEFAULT_RUNS = ("big_rank", "legacy_10k_steps", "ranks_256")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", metavar="RUN",
                        help=f"which runs ({', '.join(RUNS)}; default {' '.join(DEFAULT_RUNS)})")
    parser.add_argument("--out", type=Path, default=GENERATED, help="output folder (default %(default)s)")
    args = parser.parse_args(argv)
    unknown = set(args.runs) - set(RUNS)
    if unknown:
        parser.error(f"unknown run(s) {', '.join(sorted(unknown))}; choose from {', '.join(RUNS)}")
    for name in args.runs or DEFAULT_RUNS:
        target = args.out / name
        if target.exists():
            print(f"{name}: exists, skipped ({target})")
            continue
        began = time.perf_counter()
        facts = RUNS[name](target)
        size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
        print(f"{name}: {facts}, {size / 1e9:.2f} GB in {time.perf_counter() - began:.0f} s -> {target}")


if __name__ == "__main__":
    main()

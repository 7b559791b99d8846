"""A warm answer on a small rank: `perfkit summary` and `perfkit advise` when nothing changed since the
last time, side by side with msprof-analyze's `advisor all` on the same rank (which has no warm path).

Each perfkit time is a fresh process, the median of --repeat runs; "cold" starts from an empty cache,
"warm" follows it (the answer kept in the cache, no pandas import), "warm load" is the Python API's load
+ summarize from the Parquet entry (what every other command and the dashboard start from).

    python benchmarks/bench_warm.py --out benchmarks/results/warm.txt
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from bench_load import PEER, PYTHON, REPO, machine, measure, median, perfkit_env

FIXTURES = Path(os.environ.get("PERFKIT_FIXTURES", REPO / "tests" / "fixtures")).resolve()
# A small real rank: the torch_npu level1 fixture's rank 0 (kernel_details, op_statistic, step_trace_time, trace_view).
SMALL_RANK = FIXTURES / "new_format" / "msinsight_level1" / "rank0_ascend_pt"
WARM_TARGET_S = 0.3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines: list[str] = []

    def report(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    report("# warm answers on a small rank (benchmarks/bench_warm.py " + " ".join(sys.argv[1:]) + ")")
    report(f"each perfkit time is the median of {args.repeat} fresh processes")
    # machine() imports pandas: asked for after the measurements, since a child's peak RSS (wait4's ru_maxrss)
    # counts the parent's image it was forked from, and would show this script's pandas in every warm answer
    header_end, load_at_start = len(lines), " ".join(f"{x:.2f}" for x in os.getloadavg())
    report(f"run: {SMALL_RANK.relative_to(FIXTURES)} "
           f"({sum(p.stat().st_size for p in SMALL_RANK.rglob('*') if p.is_file()) / 1e6:.1f} MB)\n")
    floor = median([measure([PYTHON, "-c", "import click"]) for _ in range(args.repeat)])
    report(f"floor: a fresh interpreter importing click (the CLI's own start) {floor.time_text()}")
    warm_times = {}
    with tempfile.TemporaryDirectory(prefix="perfkit-warm-") as scratch:
        cache = Path(scratch) / "cache"
        env = perfkit_env(cache)
        load_summary = [PYTHON, "-c", "import json, sys, perfkit; "
                        "print(json.dumps(perfkit.summarize(perfkit.load(sys.argv[1]))))", str(SMALL_RANK)]
        for command in (["summary"], ["summary", "--format", "json"], ["advise"], ["advise", "--format", "json"]):
            full = [PYTHON, "-m", "perfkit", *command, str(SMALL_RANK)]
            colds, warms, loads = [], [], []
            for _ in range(args.repeat):
                shutil.rmtree(cache, ignore_errors=True)
                colds.append(measure(full, env))
                warms.append(measure(full, env))
                loads.append(measure(load_summary, env))
            cold, warm, load = median(colds), median(warms), median(loads)
            warm_times[" ".join(command)] = warm.seconds
            met = "met" if warm.seconds <= WARM_TARGET_S else "MISSED"
            report(f"perfkit {' '.join(command):<22} cold {cold.time_text():>8}   warm {warm.time_text():>8} "
                   f"[target <= {WARM_TARGET_S}: {met}]   warm load (Python API) {load.time_text():>8}   "
                   f"peak RSS warm {warm.peak_rss / 1e6:.0f} MB")
    if not args.no_peer and Path(PEER).exists():
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="msprof-out-") as output:
                runs.append(measure([PEER, "advisor", "all", "-d", str(SMALL_RANK), "-o", output], cwd=Path(output)))
        peer = median(runs)
        report(f"\nmsprof-analyze advisor all: {peer.time_text()}   peak RSS {peer.peak_rss / 1e6:.0f} MB")
        for command, seconds in warm_times.items():
            report(f"    vs perfkit {command} warm: perfkit is {peer.seconds / seconds:.0f}x faster")
    report(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    lines[header_end:header_end] = [line.replace(line.split(": ", 1)[1].split(" (")[0], load_at_start)
                                    if line.startswith("load average at start") else line for line in machine()]
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

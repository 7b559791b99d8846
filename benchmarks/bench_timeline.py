"""The timeline index on the ~1 GB trace of the generated big_rank run, side by side with orjson.

Each measurement is a fresh process (so its peak RSS is its own, from getrusage), run from this script:
  orjson     the whole trace_view.json parsed by orjson.loads (the obvious parser; the events as dicts)
  build      perfkit.timeline.index(run) into an empty cache (Arrow block parser -> Parquet parts)
  windows    perfkit.timeline(run, step=N) for 3 steps: the first call of a new process (cold) and the
             median of 5 more calls (warm); then the same steps through the figure the page draws
  cli        `perfkit trace RUN --step N -o step.json` end to end (index warm), wall time of the command
CPU seconds (user + sys) are printed beside wall time: other agents share the machine's 2 cores, so
wall time depends on the load (printed before and after) while CPU time much less.

    python benchmarks/generate.py big_rank && python benchmarks/bench_timeline.py --out benchmarks/results/timeline.txt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "benchmarks" / "generated" / "big_rank" / "rank0_ascend_pt"
TRACE = RUN / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
STEPS = (3, 200, 480)  # start, middle and end of the trace's 492 step copies
TARGETS = {"build_s": 8.0, "build_rss_mb": 1024, "cli_warm_s": 0.5, "page_s": 1.0}

# Each snippet prints one JSON object; the harness adds wall/CPU/RSS of its process.
ORJSON = """
import orjson, json, sys
events = orjson.loads(open(sys.argv[1], "rb").read())
print(json.dumps({"events": len(events)}))
"""
BUILD = """
import json, sys
from perfkit import timeline
found = timeline.index(sys.argv[1])
print(json.dumps({"parts": sum(len(r["parts"]) for r in found.ranks.values()), "steps": len(found.steps()),
                  "events": sum(p["rows"] for r in found.ranks.values() for p in r["parts"])}))
"""
WINDOWS = """
import json, statistics, sys, time
from perfkit import figures, timeline
out = {}
for step in map(int, sys.argv[2:]):
    start = time.perf_counter(); events = timeline.timeline(sys.argv[1], step=step); cold = time.perf_counter() - start
    warm = []
    for _ in range(5):
        start = time.perf_counter(); timeline.timeline(sys.argv[1], step=step); warm.append(time.perf_counter() - start)
    page = []
    for _ in range(3):  # what the page's draw callback does: the window, the figure, its JSON
        start = time.perf_counter()
        figures.timeline_figure(timeline.timeline(sys.argv[1], step=step), title=f"step {step} · ").to_json()
        page.append(time.perf_counter() - start)
    out[step] = {"events": len(events), "cold_s": cold, "warm_s": statistics.median(warm),
                 "page_s": statistics.median(page)}
print(json.dumps(out))
"""


def run_python(code: str, *args: str, env: dict) -> dict:
    """Run `code` in a fresh interpreter; its JSON answer plus wall, CPU and peak RSS of that process."""
    wrapper = ("import resource, runpy, sys, time\n"
               f"code = {code!r}\n"
               "exec(compile(code, 'bench', 'exec'), {'__name__': '__main__'})\n"
               "usage = resource.getrusage(resource.RUSAGE_SELF)\n"
               "print('RSS', usage.ru_maxrss, usage.ru_utime + usage.ru_stime)\n")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", wrapper, *args], env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    lines = done.stdout.strip().splitlines()
    _, rss_kb, cpu = lines[-1].split()
    return {"answer": json.loads(lines[-2]), "wall_s": wall, "cpu_s": float(cpu), "rss_mb": int(rss_kb) / 1024}


def cli(step: int, env: dict, target: Path) -> tuple[float, float]:
    start = time.perf_counter()
    before = os.times()
    subprocess.run([sys.executable, "-m", "perfkit", "trace", str(RUN), "--step", str(step), "-o", str(target)],
                   env=env, check=True, capture_output=True)
    after = os.times()
    return time.perf_counter() - start, (after.children_user - before.children_user
                                         + after.children_system - before.children_system)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not TRACE.is_file():
        sys.exit(f"no {TRACE}: run `python benchmarks/generate.py big_rank` first")
    lines = [f"trace: {TRACE.relative_to(REPO)}, {TRACE.stat().st_size / 1e9:.2f} GB; "
             f"{os.cpu_count()} cores; load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"]
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": cache}
        env.pop("PERFKIT_NO_CACHE", None)
        parsed = run_python(ORJSON, str(TRACE), env=env)
        lines.append(f"orjson.loads, whole file:  {parsed['wall_s']:6.1f} s wall  {parsed['cpu_s']:6.1f} s CPU  "
                     f"{parsed['rss_mb']:6.0f} MB peak RSS  ({parsed['answer']['events']:,} events, as dicts)")
        built = run_python(BUILD, str(RUN), env=env)
        answer = built["answer"]
        lines.append(f"perfkit index build:       {built['wall_s']:6.1f} s wall  {built['cpu_s']:6.1f} s CPU  "
                     f"{built['rss_mb']:6.0f} MB peak RSS  ({answer['events']:,} events in {answer['parts']} "
                     f"Parquet parts, {answer['steps']} steps)   target <= {TARGETS['build_s']} s, "
                     f"<= {TARGETS['build_rss_mb']} MB")
        windows = run_python(WINDOWS, str(RUN), *map(str, STEPS), env=env)
        lines.append(f"windows (one process; cold = its first query; peak RSS {windows['rss_mb']:.0f} MB):")
        for step, result in windows["answer"].items():
            lines.append(f"  step {step:>3}: {result['events']:,} events  cold {result['cold_s'] * 1000:6.0f} ms  "
                         f"warm {result['warm_s'] * 1000:6.0f} ms  page answer (window + figure + JSON) "
                         f"{result['page_s'] * 1000:6.0f} ms   target <= {TARGETS['page_s'] * 1000:.0f} ms")
        lines.append("perfkit trace --step N -o step.json (index warm, whole command):")
        for step in STEPS:
            wall, cpu = cli(step, env, Path(cache) / f"step{step}.json")
            lines.append(f"  step {step:>3}: {wall:5.2f} s wall  {cpu:5.2f} s CPU   target <= {TARGETS['cli_warm_s']} s")
    lines.append(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

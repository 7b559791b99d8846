"""The timeline index on the ~1 GB trace of the generated big_rank run, side by side with orjson.

Each measurement is a fresh process run from this script; its peak RSS is the largest sum of the RSS of
it and its child processes, sampled every 20 ms (the build forks one worker per core; pages the workers
share with it are counted in each, so this overstates the memory used):
  orjson     the whole trace_view.json parsed by orjson.loads (the obvious parser; the events as dicts)
  duckdb     DuckDB's read_json of the fields the index keeps (args as raw JSON text) into one Parquet file:
             the comparison point issue 16 quotes; only when duckdb is importable (it is no dependency)
  build      perfkit.io.timeline.index(run) into an empty cache (msgspec block decoder -> Parquet parts), with
             no worker process (the blocks decoded one after the other), then 3 times with one per core
  windows    perfkit.timeline(run, step=N) for 3 steps: the first call of a new process (cold) and the
             median of 5 more calls (warm); then the same steps through the figure the page draws
  cli        `perfkit trace RUN --step N -o step.json` end to end (index warm), wall time of the command
  database   the index build of the database twin of generate_db.py (a ~2 M kernel rank's profiler database,
             no trace_view.json: the timeline comes from its TASK/COMMUNICATION_OP tables), when generated
CPU seconds (user + sys, children included) are printed beside wall time: other agents share the machine's 2 cores, so
wall time depends on the load (printed before and after) while CPU time much less.

    python benchmarks/generate.py big_rank && python benchmarks/bench_timeline.py --out benchmarks/results/timeline.txt
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "benchmarks" / "generated" / "big_rank" / "rank0_ascend_pt"
DB_RUN = REPO / "benchmarks" / "generated" / "big_rank_twins" / "db" / "rank0_ascend_pt"
TRACE = RUN / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
STEPS = (3, 200, 480)  # start, middle and end of the trace's 492 step copies
TARGETS = {"build_s": 5.0, "build_rss_mb": 1024, "cli_warm_s": 0.5, "page_s": 1.0}

# Each snippet prints one JSON object; the harness adds wall/CPU/RSS of its process.
ORJSON = """
import orjson, json, sys
events = orjson.loads(open(sys.argv[1], "rb").read())
print(json.dumps({"events": len(events)}))
"""
DUCKDB = """
import json, sys
import duckdb
columns = "{ph: 'VARCHAR', name: 'VARCHAR', cat: 'VARCHAR', pid: 'VARCHAR', tid: 'VARCHAR', ts: 'VARCHAR', " \\
          "dur: 'DOUBLE', id: 'VARCHAR', args: 'JSON'}"
duckdb.connect().execute(f"COPY (SELECT * FROM read_json('{sys.argv[1]}', format='array', columns={columns})) "
                         f"TO '{sys.argv[2]}' (FORMAT parquet)")
print(json.dumps({}))
"""
BUILD = """
import json, sys
from perfkit.io import timeline
if sys.argv[2] == "serial":
    timeline.index_workers = lambda: 1
found = timeline.index(sys.argv[1])
print(json.dumps({"parts": sum(len(r["parts"]) for r in found.ranks.values()), "steps": len(found.steps()),
                  "events": sum(p["rows"] for r in found.ranks.values() for p in r["parts"])}))
"""
WINDOWS = """
import json, statistics, sys, time
from perfkit.io import timeline
from perfkit.views.figures.timeline import timeline_figure
out = {}
for step in map(int, sys.argv[2:]):
    start = time.perf_counter(); events = timeline.timeline(sys.argv[1], step=step); cold = time.perf_counter() - start
    warm = []
    for _ in range(5):
        start = time.perf_counter(); timeline.timeline(sys.argv[1], step=step); warm.append(time.perf_counter() - start)
    page = []
    for _ in range(3):  # what the page's draw callback does: the window, the figure, its JSON
        start = time.perf_counter()
        timeline_figure(timeline.timeline(sys.argv[1], step=step), title=f"step {step} · ").to_json()
        page.append(time.perf_counter() - start)
    out[step] = {"events": len(events), "cold_s": cold, "warm_s": statistics.median(warm),
                 "page_s": statistics.median(page)}
print(json.dumps(out))
"""


def run_python(code: str, *args: str, env: dict) -> dict:
    """Run `code` in a fresh interpreter; its JSON answer plus wall time, CPU time (its children's too)
    and the peak RSS of it and its children."""
    wrapper = ("import resource, runpy, sys, time\n"
               f"code = {code!r}\n"
               "exec(compile(code, 'bench', 'exec'), {'__name__': '__main__'})\n"
               "cpu = sum(u.ru_utime + u.ru_stime for u in map(resource.getrusage, "
               "(resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)))\n"
               "print('CPU', cpu)\n")
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-c", wrapper, *args], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    peak = [0]
    sampler = threading.Thread(target=_sample_rss, args=(process.pid, peak), daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    if process.returncode:
        raise RuntimeError(stderr)
    lines = stdout.strip().splitlines()
    return {"answer": json.loads(lines[-2]), "wall_s": wall, "cpu_s": float(lines[-1].split()[1]),
            "rss_mb": peak[0] / 2**20}


def _sample_rss(pid: int, peak: list) -> None:
    """peak[0]: the largest RSS sum of process `pid` and its descendants seen while it runs."""
    import psutil
    try:
        root = psutil.Process(pid)
        while root.is_running() and root.status() != psutil.STATUS_ZOMBIE:
            total = 0
            for process in [root, *root.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    pass
            peak[0] = max(peak[0], total)
            time.sleep(0.02)
    except psutil.Error:
        pass


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
        paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PERFKIT_CACHE_DIR": cache}
        env.pop("PERFKIT_NO_CACHE", None)
        parsed = run_python(ORJSON, str(TRACE), env=env)
        lines.append(f"orjson.loads, whole file:    {parsed['wall_s']:5.1f} s wall  {parsed['cpu_s']:6.1f} s CPU  "
                     f"{parsed['rss_mb']:6.0f} MB peak RSS  ({parsed['answer']['events']:,} events, as dicts)")
        try:
            import duckdb  # noqa: F401 - only to know whether the comparison can run
        except ImportError:
            lines.append("duckdb read_json -> Parquet:  not measured (duckdb not installed)")
        else:
            duck = run_python(DUCKDB, str(TRACE), str(Path(cache) / "duckdb.parquet"), env=env)
            lines.append(f"duckdb read_json -> Parquet: {duck['wall_s']:5.1f} s wall  {duck['cpu_s']:6.1f} s CPU  "
                         f"{duck['rss_mb']:6.0f} MB peak RSS  (raw columns: ts as text, args as JSON text, "
                         "not sorted)")
        # The worker build 3 times (the other agents' load changes by the minute): each line is one build,
        # into an empty cache; the last makes the index the windows read.
        for mode in ("serial", "parallel", "parallel", "parallel"):
            with tempfile.TemporaryDirectory() as own_cache:
                where = cache if mode == "parallel" else own_cache
                if mode == "parallel":
                    shutil.rmtree(Path(cache) / "timeline", ignore_errors=True)
                load = os.getloadavg()[0]
                built = run_python(BUILD, str(RUN), mode, env={**env, "PERFKIT_CACHE_DIR": where})
            answer = built["answer"]
            how = "one block at a time" if mode == "serial" else f"{os.cpu_count()} worker processes"
            lines.append(f"perfkit index build, {how:>20}: {built['wall_s']:5.1f} s wall  {built['cpu_s']:6.1f} s CPU  "
                         f"{built['rss_mb']:6.0f} MB peak RSS  (load {load:.1f}; {answer['events']:,} events in "
                         f"{answer['parts']} Parquet parts, {answer['steps']} steps)   target <= {TARGETS['build_s']} s, "
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
        if DB_RUN.is_dir():
            with tempfile.TemporaryDirectory() as own_cache:
                load = os.getloadavg()[0]
                built = run_python(BUILD, str(DB_RUN), "parallel", env={**env, "PERFKIT_CACHE_DIR": own_cache})
            answer = built["answer"]
            size = sum(path.stat().st_size for path in DB_RUN.rglob("*.db")) / 1e9
            lines.append(f"perfkit index build, database export ({size:.2f} GB of SQLite, {os.cpu_count()} worker processes): "
                         f"{built['wall_s']:5.1f} s wall  {built['cpu_s']:6.1f} s CPU  {built['rss_mb']:6.0f} MB peak RSS  "
                         f"(load {load:.1f}; {answer['events']:,} events in {answer['parts']} Parquet parts, "
                         f"{answer['steps']:,} steps)")
        else:
            lines.append("perfkit index build, database export: not measured (run benchmarks/generate_db.py first)")
    lines.append(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

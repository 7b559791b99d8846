"""Many ranks: `perfkit summary` of 256 / 1,024 / 4,096 generated ranks, cold and warm, in process and through a
local Dask cluster, beside reading the same bytes with Arrow alone and beside msprof-analyze.

Each perfkit measurement is one fresh process (bench_load.measure: wall time, CPU of the process and the worker
processes it waited for, peak RSS of its process tree). Through Dask, the cluster (a scheduler and two one-thread
workers on 127.0.0.1, benchmarks/local_dask.py) is started afresh for each run size, and the CPU seconds and peak
RSS of its processes are added to the client's. Every number is one run (the machine is shared), but the cold
in-process summary: --cold-runs of it (3), each shown, the targets judged on their median.

    python benchmarks/generate.py ranks_256 ranks_1024 ranks_4096 --out /tmp/runs
    python benchmarks/bench_ranks.py --runs /tmp/runs --out benchmarks/results/ranks.txt
    python benchmarks/bench_ranks.py --runs /tmp/runs --slow-ranks-only --out benchmarks/results/ranks.txt --append

Issue 39 (a large run's first answer reads the op-level tables of its representative ranks only): --before DIR, a
checkout of perfkit before that change, measures its cold `summary` and this code's alternately, beside
`msprof-analyze cluster -m all` on the same folder (PEER: where msprof-analyze is, bench_load.py), every line with the
load average when it was taken:

    python benchmarks/bench_ranks.py --runs /tmp/runs --sizes 256 4096 --before /tmp/before --pairs 2 \
        --out benchmarks/results/ranks.txt --append
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
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import (PEER, PEER_RSS_LIMIT, PYTHON, REPO, Measured, gb, machine, measure,  # noqa: E402
                        perfkit_env)
from local_dask import LocalCluster  # noqa: E402

SIZES = (256, 1024, 4096)
# Targets (issue 28): 256 ranks cold within 2 s of CPU; 4,096 ranks cold within 30 s of wall time; per-rank CPU
# within 3x of reading the rank's bytes with Arrow alone.
CPU_256_TARGET_S = 2.0
WALL_4096_TARGET_S = 30.0
ARROW_FACTOR_TARGET = 3.0
# Issue 39: 4,096 ranks cold at least 3x faster than `msprof-analyze cluster -m all` on the same folder, with no
# more peak memory; warm within 1 s.
PEER_FACTOR_TARGET = 3.0
WARM_TARGET_S = 1.0
# Arrow alone is timed on this many ranks of each run (every rank's files are alike).
ARROW_SAMPLE = 256
OUTPUT = "ASCEND_PROFILER_OUTPUT"
# The files of a rank perfkit reads (ascend_ms, memory and communication readers); trace_view.json and
# operator_details.csv are not read.
CSV_FILES = ("kernel_details.csv", "op_statistic.csv", "step_trace_time.csv", "memory_record.csv",
             "npu_module_mem.csv", "operator_memory.csv")
JSON_FILES = (f"{OUTPUT}/communication.json", "profiler_info_*.json", "profiler_metadata.json")
# The files of a rank an answer reads for every rank of a large run (its cluster-level tables: ascend_ms's
# read_cluster, the communication reader); the op-level ones only for the representative ranks.
CLUSTER_LEVEL_FILES = (f"{OUTPUT}/step_trace_time.csv", f"{OUTPUT}/communication.json",
                       f"{OUTPUT}/communication_matrix.json", "profiler_info_*.json", "profiler_metadata.json")


def arrow_alone(run: Path, ranks: int) -> tuple[float, int]:
    """(CPU seconds per rank, bytes per rank) of reading the files perfkit reads with pyarrow.csv (every column,
    one thread, as a 1.3 MB file is best read) and the JSON files with orjson, on the first ARROW_SAMPLE ranks."""
    import orjson
    import pyarrow.csv as pacsv

    folders = [run / f"rank{rank}_ascend_pt" for rank in range(min(ranks, ARROW_SAMPLE))]
    began, size = time.process_time(), 0
    for folder in folders:
        for name in CSV_FILES:
            path = folder / OUTPUT / name
            size += path.stat().st_size
            pacsv.read_csv(path, read_options=pacsv.ReadOptions(use_threads=False))
        for pattern in JSON_FILES:
            for path in folder.glob(pattern):
                data = path.read_bytes()
                size += len(data)
                orjson.loads(data)
    return (time.process_time() - began) / len(folders), size // len(folders)


def process_usage(pids: dict[str, int]) -> dict[str, tuple[float, int]]:
    """{name: (CPU seconds so far, peak RSS)} of each process ((0, 0) for one that is gone)."""
    used = {}
    for name, pid in pids.items():
        try:
            times = psutil.Process(pid).cpu_times()
            status = Path(f"/proc/{pid}/status").read_text()
            peak = int(next(text.split()[1] for text in status.splitlines() if text.startswith("VmHWM:"))) * 1024
            used[name] = (times.user + times.system, peak)
        except (psutil.Error, OSError, StopIteration):
            used[name] = (0.0, 0)
    return used


def cluster_usage(pids: list[int]) -> tuple[float, int]:
    """(CPU seconds so far, sum of peak RSS) of the cluster's processes."""
    used = process_usage({str(pid): pid for pid in pids}).values()
    return sum(cpu for cpu, _ in used), sum(peak for _, peak in used)


class Report:
    """The report's lines: each printed as it comes, and written to a file at the end."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def write(self, out: Path | None, append: bool) -> None:
        """The lines into `out` (after what it holds where `append`); nothing without `out`."""
        if out is None:
            return
        out.parent.mkdir(parents=True, exist_ok=True)
        previous = out.read_text() + "\n" if append and out.exists() else ""
        out.write_text(previous + "\n".join(self.lines) + "\n")


def line(label: str, measured: Measured, extra: str = "") -> str:
    return (f"{label:<44} {measured.time_text():>10}   CPU {measured.cpu_seconds:6.1f} s   peak RSS "
            f"{gb(measured.peak_rss)}   load {os.getloadavg()[0]:.2f}{extra}")


def verdict(value: float, target: float) -> str:
    return f"  [target <= {target:g}: {'met' if value <= target else 'MISSED'}]"


def bench_size(run: Path, ranks: int, peer: bool, peer_timeout: float, cold_runs: int, report) -> None:
    files = [p for p in run.rglob("*") if p.is_file()]
    report(f"\n## {ranks} ranks: {run}  ({len(files)} files, {gb(sum(p.stat().st_size for p in files))})")
    report(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    per_rank_arrow, rank_bytes = arrow_alone(run, ranks)
    report(f"Arrow alone (pyarrow.csv every column, one thread; orjson): {per_rank_arrow * 1000:.1f} ms of CPU per "
           f"rank for its {rank_bytes / 1e6:.2f} MB read ({rank_bytes / per_rank_arrow / 1e6:.0f} MB/s), on "
           f"{min(ranks, ARROW_SAMPLE)} ranks")
    summary = [PYTHON, "-m", "perfkit", "summary", "--format", "json", str(run)]
    with tempfile.TemporaryDirectory(prefix="perfkit-ranks-") as scratch:
        colds = []
        for number in range(1, cold_runs + 1):  # each with a cache of its own, empty; the warm runs use the last
            cache = Path(scratch) / f"cache-{number}"
            env = perfkit_env(cache)
            colds.append(measure(summary, env))
            report(line(f"in process, cold (empty cache), run {number} of {cold_runs}", colds[-1]))
        cold = colds[-1]
        seconds = statistics.median(measured.seconds for measured in colds)
        cpu_seconds = statistics.median(measured.cpu_seconds for measured in colds)
        extra = ""
        if ranks == 256:
            extra += verdict(cpu_seconds, CPU_256_TARGET_S) + " (CPU)"
        if ranks == 4096:
            extra += verdict(seconds, WALL_4096_TARGET_S) + " (wall)"
        report(f"{f'in process, cold: median of {cold_runs}':<44} {seconds:>8.1f} s   CPU {cpu_seconds:6.1f} s{extra}")
        per_rank = cpu_seconds / ranks
        report(f"    {per_rank * 1000:.1f} ms of CPU per rank (everything, imports included) = "
               f"{per_rank / per_rank_arrow:.1f}x Arrow alone{verdict(per_rank / per_rank_arrow, ARROW_FACTOR_TARGET)}")
        report(line("in process, warm (the kept answer)", measure(summary, env)))
        shutil.rmtree(cache / "answers", ignore_errors=True)
        report(line("in process, warm (the Run's cache entry)", measure(summary, env)))
        answer = json.loads(cold.output) if cold.status == "ok" else None

        storage = Path(scratch) / "storage"
        cluster = LocalCluster(Path(scratch) / "cluster")
        try:
            through = [*summary, "--dask", cluster.address, "--dask-storage", str(storage)]
            dask_env = perfkit_env(Path(scratch) / "cache-dask")
            before, _ = cluster_usage(cluster.pids)
            dask_cold = measure(through, dask_env)
            after, cluster_peak = cluster_usage(cluster.pids)
            same = "same answer" if answer is not None and dask_cold.status == "ok" and \
                json.loads(dask_cold.output) == answer else "DIFFERENT ANSWER"
            report(line("Dask (2 workers), cold: client", dask_cold, f"   {same}"))
            report(f"    + scheduler and workers: CPU {after - before:.1f} s, peak RSS {gb(cluster_peak)} "
                   f"(total CPU {dask_cold.cpu_seconds + after - before:.1f} s)")
            report(line("Dask, warm (the kept answer)", measure(through, dask_env)))
            before, _ = cluster_usage(cluster.pids)
            entries = measure(through, perfkit_env(Path(scratch) / "cache-dask-2"))
            after, _ = cluster_usage(cluster.pids)
            report(line("Dask, rank entries in storage, no Run entry", entries,
                        f"   (+ cluster CPU {after - before:.1f} s)"))
        finally:
            cluster.stop()
    if not peer:
        return
    for label, arguments in (("cluster", ["cluster", "-d", str(run)]),
                             ("advisor all", ["advisor", "all", "-d", str(run)])):
        with tempfile.TemporaryDirectory(prefix="msprof-out-") as output:
            measured = measure([PEER, *arguments, "-o", output], timeout=peer_timeout, rss_limit=PEER_RSS_LIMIT,
                               cwd=Path(output))
        report(line(f"msprof-analyze {label}", measured))
        if measured.status.startswith("exit"):
            report("    " + " | ".join(measured.output.strip().splitlines()[-3:]))


def bench_first_answer(run: Path, ranks: int, before: Path, pairs: int, peer: bool, peer_timeout: float,
                       report) -> None:
    """A cold `perfkit summary` with the code in `before` (every rank's tables read) and with this code (the
    representative ranks' op-level tables), alternating, `pairs` of each, then this code warm; msprof-analyze
    `cluster -m all` on the same folder between them. What each reads of a rank, in bytes."""
    files = [p for p in run.rglob("*") if p.is_file()]
    report(f"\n## issue 39, {ranks} ranks: {run}  ({len(files)} files, {gb(sum(p.stat().st_size for p in files))})")
    report(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    folder = run / "rank0_ascend_pt"
    every = sum((folder / OUTPUT / name).stat().st_size for name in CSV_FILES if (folder / OUTPUT / name).exists())
    every += sum(path.stat().st_size for pattern in JSON_FILES for path in folder.glob(pattern))
    cluster = sum(path.stat().st_size for pattern in CLUSTER_LEVEL_FILES for path in folder.glob(pattern))
    report(f"a rank: {sum(p.stat().st_size for p in folder.rglob('*') if p.is_file()) / 1e3:.0f} KB on disk; "
           f"perfkit before reads {every / 1e3:.0f} KB of every rank; after, {cluster / 1e3:.0f} KB of every rank "
           f"and {every / 1e3:.0f} KB of each representative rank")
    summary = [PYTHON, "-m", "perfkit", "summary", "--format", "json", str(run)]
    for code in (before, REPO):  # as an installed package has it: perfkit's bytecode written once, not each run
        subprocess.run([PYTHON, "-m", "compileall", "-q", str(code / "perfkit")], check=True)
    report("perfkit's bytecode compiled in both checkouts first (PYTHONDONTWRITEBYTECODE left out of their runs)")
    with tempfile.TemporaryDirectory(prefix="perfkit-first-") as scratch:
        befores, afters, peers, answers = [], [], [], {}
        for number in range(1, pairs + 1):
            for label, code in (("before", before), ("after", REPO)):
                env = perfkit_env(Path(scratch) / f"cache-{label}-{number}")
                env["PYTHONPATH"] = str(code)
                env.pop("PYTHONDONTWRITEBYTECODE", None)
                measured = measure(summary, env, cwd=Path(scratch))  # not the checkout: `-m` imports from cwd
                (befores if label == "before" else afters).append(measured)
                if measured.status == "ok":
                    answers[label] = json.loads(measured.output)
                report(line(f"perfkit {label}, cold, pair {number} of {pairs}", measured))
            if peer:
                with tempfile.TemporaryDirectory(prefix="msprof-out-") as output:
                    peers.append(measure([PEER, "cluster", "-m", "all", "-d", str(run), "-o", output],
                                         timeout=peer_timeout, rss_limit=PEER_RSS_LIMIT, cwd=Path(output)))
                report(line(f"msprof-analyze cluster -m all, run {number} of {pairs}", peers[-1]))
                if peers[-1].status.startswith("exit"):
                    report("    " + " | ".join(peers[-1].output.strip().splitlines()[-3:]))
        warm_env = dict(perfkit_env(Path(scratch) / f"cache-after-{pairs}"), PYTHONPATH=str(REPO))
        warm_env.pop("PYTHONDONTWRITEBYTECODE", None)
        warms = [measure(summary, warm_env, cwd=Path(scratch)) for _ in range(pairs)]
        for number, warm in enumerate(warms, 1):
            report(line(f"perfkit after, warm (the kept answer), run {number} of {pairs}", warm,
                        verdict(warm.seconds, WARM_TARGET_S)))
    after_wall = statistics.median(m.seconds for m in afters)
    after_cpu = statistics.median(m.cpu_seconds for m in afters)
    before_wall = statistics.median(m.seconds for m in befores)
    report(f"medians: before {before_wall:.1f} s wall, {statistics.median(m.cpu_seconds for m in befores):.1f} s CPU; "
           f"after {after_wall:.1f} s wall, {after_cpu:.1f} s CPU, {max(m.peak_rss for m in afters) / 1024**3:.2f} GB "
           f"peak at most ({before_wall / after_wall:.1f}x faster)"
           + (verdict(after_cpu, CPU_256_TARGET_S) + " (CPU)" if ranks == 256 else ""))
    if "before" in answers and "after" in answers:
        same = [key for key in ("ranks", "slow_ranks", "steps", "bound", "communication")
                if answers["before"].get(key) == answers["after"].get(key)]
        report(f"before and after agree on: {', '.join(same) or 'nothing'}; after's op types cover "
               f"{answers['after'].get('op_ranks', 'every rank')}")
    done = [m for m in peers if m.status == "ok"]
    if done:
        peer_wall = statistics.median(m.seconds for m in done)
        peer_rss = max(m.peak_rss for m in done)
        report(f"msprof-analyze cluster -m all: {peer_wall:.1f} s wall (median), peak RSS {gb(peer_rss)}; perfkit "
               f"after is {peer_wall / after_wall:.1f}x faster [target >= {PEER_FACTOR_TARGET:g}: "
               f"{'met' if peer_wall / after_wall >= PEER_FACTOR_TARGET else 'MISSED'}], "
               f"peak RSS {gb(max(m.peak_rss for m in afters))} "
               f"[{'met' if max(m.peak_rss for m in afters) <= peer_rss else 'MISSED'}: no more than the peer's]")


def bench_slow_ranks(run: Path, ranks: int, report) -> None:
    """`perfkit ranks` (the step files alone), cold and warm, in process and through Dask."""
    answer = [PYTHON, "-m", "perfkit", "ranks", "--format", "json", str(run)]
    with tempfile.TemporaryDirectory(prefix="perfkit-ranks-") as scratch:
        env = perfkit_env(Path(scratch) / "cache")
        cold = measure(answer, env)
        report(line(f"{ranks} ranks: perfkit ranks, in process, cold", cold))
        report(line(f"{ranks} ranks: perfkit ranks, in process, warm", measure(answer, env)))
        cluster = LocalCluster(Path(scratch) / "cluster")
        try:
            before, _ = cluster_usage(cluster.pids)
            dask = measure([*answer, "--dask", cluster.address, "--dask-storage", str(Path(scratch) / "storage")],
                           perfkit_env(Path(scratch) / "cache-dask"))
            after, _ = cluster_usage(cluster.pids)
        finally:
            cluster.stop()
        same = "same answer" if cold.status == dask.status == "ok" and \
            json.loads(cold.output) == json.loads(dask.output) else "DIFFERENT ANSWER"
        report(line(f"{ranks} ranks: perfkit ranks, Dask, cold: client", dask,
                    f"   (+ cluster CPU {after - before:.1f} s)   {same}"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True, help="folder holding ranks_256, ranks_1024, ranks_4096")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    parser.add_argument("--peer-max-ranks", type=int, default=1024,
                        help="run msprof-analyze on runs of at most this many ranks (default %(default)s)")
    parser.add_argument("--peer-timeout", type=float, default=600)
    parser.add_argument("--cold-runs", type=int, default=3,
                        help="cold in-process runs of each size; the targets are judged on their median (the same "
                             "command differs by a quarter from one minute to the next on a shared machine)")
    parser.add_argument("--slow-ranks-only", action="store_true",
                        help="only `perfkit ranks` (the step files), cold and warm, in process and through Dask")
    parser.add_argument("--before", type=Path,
                        help="a checkout of perfkit before issue 39: its cold summary alternates with this code's, "
                             "beside msprof-analyze cluster -m all")
    parser.add_argument("--pairs", type=int, default=2, help="with --before: cold runs of each (default %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the report here (--append: at its end)")
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args()
    report = Report()
    report("# perfkit with many ranks (benchmarks/bench_ranks.py " + " ".join(sys.argv[1:]) + ")")
    report(f"each number one run, but the cold in-process runs: {args.pairs if args.before else args.cold_runs} of "
           "each size, targets judged on their median; CPU = user + system of the process and the worker processes "
           "it waited for")
    for text in machine():
        report(text)
    peer = Path(PEER).exists()
    if not peer:
        report(f"msprof-analyze: not run ({PEER} missing)")
    for ranks in args.sizes:
        run = args.runs / f"ranks_{ranks}"
        if not run.is_dir():
            sys.exit(f"{run} missing: python benchmarks/generate.py ranks_{ranks} --out {args.runs}")
        if args.slow_ranks_only:
            bench_slow_ranks(run, ranks, report)
            continue
        if args.before:
            bench_first_answer(run, ranks, args.before, args.pairs, peer and ranks <= args.peer_max_ranks,
                               args.peer_timeout, report)
            continue
        bench_size(run, ranks, peer and ranks <= args.peer_max_ranks, args.peer_timeout, args.cold_runs, report)
        if peer and ranks > args.peer_max_ranks:
            report(f"msprof-analyze: not run on {ranks} ranks (--peer-max-ranks {args.peer_max_ranks}: time on "
                   "the shared machine)")
    report(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report.write(args.out, args.append)


if __name__ == "__main__":
    main()

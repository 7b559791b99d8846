"""10,000 ranks through a local Dask cluster: a cold `perfkit summary --dask`, warm, and again with the rank entries
in storage, beside the cold summary in process, with what each reads of the ranks, in bytes (docs/scale.md,
"10,000 ranks").

    python -c "import sys; sys.path.insert(0, 'benchmarks'); import generate, pathlib; \
        generate.generate_cluster(pathlib.Path('/tmp/runs/ranks_10000'), ranks=10000, steps=1)"
    git archive main perfkit | tar -x -C /tmp/before     # --before: the code to compare with, through Dask
    python benchmarks/bench_ranks_dask.py --run /tmp/runs/ranks_10000 --before /tmp/before \
        --out benchmarks/results/ranks_10000.txt

Each measurement is one fresh process (bench_load.measure: wall, CPU of the process and the children it waited for,
peak RSS of its process tree); the cluster (a scheduler and two one-thread workers on 127.0.0.1, local_dask.py)
is started once, and each of its processes' CPU seconds over a command and its peak RSS are said beside the
client's. The bytes read are counted, not inferred: the workers run under `strace` (openat only, through seccomp,
so only those calls stop), and the in-process summary is run once more under it; every file of the run opened for
reading is counted with its size, by file class (cluster-level: what every rank is read for; op-level: the rest).
The client through Dask reads the rank entries the workers wrote: counted from the storage.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_load import PYTHON, REPO, Measured, gb, machine, measure, perfkit_env  # noqa: E402
from bench_ranks import CLUSTER_LEVEL_FILES, Report, line, process_usage  # noqa: E402
from local_dask import LocalCluster  # noqa: E402

# successful opens only, through a seccomp filter (no stop at any other call); paths whole
STRACE = ["strace", "-f", "-qq", "--seccomp-bpf", "-e", "trace=open,openat",
          "-e", "status=successful", "-s", "4096"]
OPENED = re.compile(r'open(?:at)?\((?:AT_FDCWD|-?\d+), "((?:[^"\\]|\\.)*)", ([A-Z_|]+)')
CLUSTER_LEVEL_NAMES = tuple(pattern.rpartition("/")[2] for pattern in CLUSTER_LEVEL_FILES)
RANK_FOLDER = re.compile(r"rank(\d+)_ascend_pt")
# the Run's memory by table, from the cache entry the cold in-process summary wrote
RUN_MEMORY = """
import json, sys
import perfkit
from perfkit.analysis.representatives import representative_ranks
from perfkit.io.formats.base import OP_LEVEL_TABLES
run = perfkit.load(sys.argv[1], ranks=representative_ranks)
print(json.dumps({name: [int(frame.memory_usage(deep=True).sum()), len(frame), name in OP_LEVEL_TABLES]
                  for name, frame in run.tables().items() if frame is not None}))
"""


def file_class(name: str) -> str:
    return "cluster" if any(fnmatch.fnmatch(name, pattern) for pattern in CLUSTER_LEVEL_NAMES) else "op"


def opened_files(traces: list[Path], run: Path) -> dict:
    """{file name: [opens, bytes (each open counted with the file's size), ranks, distinct files' bytes]} of the
    files under `run` opened for reading in `traces`."""
    counted: dict = defaultdict(lambda: [0, 0, set(), 0])
    seen: set[str] = set()
    root = str(run.resolve()) + "/"
    for trace in traces:
        for text in trace.read_text(errors="replace").splitlines():
            match = OPENED.search(text)
            if not match or not match.group(1).startswith(root) or "O_DIRECTORY" in match.group(2) \
                    or "O_WRONLY" in match.group(2) or "O_RDWR" in match.group(2):
                continue
            path = Path(match.group(1))
            if not path.is_file():
                continue
            entry = counted[path.name if not path.name.startswith("profiler_info_") else "profiler_info_*.json"]
            entry[0] += 1
            entry[1] += path.stat().st_size
            if match.group(1) not in seen:
                seen.add(match.group(1))
                entry[3] += path.stat().st_size
            rank = RANK_FOLDER.search(match.group(1))
            if rank:
                entry[2].add(int(rank.group(1)))
    return counted


def report_bytes(counted: dict, ranks: int, report) -> None:
    for kind in ("cluster", "op"):
        names = sorted(name for name in counted if file_class(name) == kind)
        opens = sum(counted[name][0] for name in names)
        size = sum(counted[name][1] for name in names)
        distinct = sum(counted[name][3] for name in names)
        covered = set().union(*(counted[name][2] for name in names)) if names else set()
        report(f"    {kind}-level files: {opens:,} opens of {size / 1e6:,.1f} MB (the files opened, once each: "
               f"{distinct / 1e6:,.1f} MB), of {len(covered):,} ranks ({size / max(len(covered), 1) / 1e3:,.1f} KB "
               f"a rank; {distinct / max(len(covered), 1) / 1e3:,.1f} KB once each)"
               + (f"; ranks {', '.join(map(str, sorted(covered)))}" if kind == "op" else ""))
        for name in names:
            report(f"        {name:<28} {counted[name][0]:>7,} opens {counted[name][1] / 1e6:>10,.2f} MB   once each "
                   f"{counted[name][3] / 1e6:>10,.2f} MB")


def processes(cluster: LocalCluster) -> dict[str, int]:
    """{name: pid} of the scheduler and the workers (each the child of its strace)."""
    named = {"scheduler": cluster.scheduler.pid}
    for index, wrapper in enumerate(cluster.workers):
        children = psutil.Process(wrapper.pid).children()
        named[f"worker {index}"] = children[0].pid if children else wrapper.pid
        named[f"strace of worker {index}"] = wrapper.pid
    return named


def stop_workers(pids: list[int]) -> None:
    """Each worker stopped before its strace: strace stopped first detaches and leaves it running (a signal
    meant for the worker can be lost with it)."""
    workers = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    for worker in workers:
        worker.terminate()
    _, alive = psutil.wait_procs(workers, timeout=20)
    for worker in alive:
        worker.kill()
    psutil.wait_procs(alive, timeout=20)


def through_cluster(label: str, command: list[str], env: dict, pids: dict[str, int], report,
                    cwd: Path | None = None) -> Measured:
    before = process_usage(pids)
    measured = measure(command, env, cwd=cwd)
    after = process_usage(pids)
    report(line(label + ": client", measured))
    cpu = {name: after[name][0] - before[name][0] for name in pids}
    parts = ", ".join(f"{name} {cpu[name]:.1f} s / {gb(after[name][1])} peak" for name in pids)
    perfkit_side = [name for name in pids if not name.startswith("strace")]
    used = sum(cpu[name] for name in perfkit_side)
    report(f"    cluster CPU and peak RSS: {parts}; client + scheduler + workers {measured.cpu_seconds + used:.1f} s "
           f"of CPU" + (" (strace besides)" if len(perfkit_side) < len(pids) else ""))
    return measured


def same(measured: Measured, answer) -> str:
    return "same answer" if measured.status == "ok" and answer is not None and \
        json.loads(measured.output) == answer else f"DIFFERENT ANSWER ({measured.status})"


def before_and_after(run: Path, before: Path, workers: int, scratch: Path, answer, report) -> None:
    """A cold `summary --dask` with the code in `before` and with this code, each on a cluster of its own that
    imports it, not under strace, one after the other."""
    report(f"cold through Dask, the code in {before} and this code, one after the other (no strace):")
    for label, code in (("before", before), ("after", REPO)):
        cluster = LocalCluster(scratch / f"cluster-{label}", workers=workers, code=code)
        try:
            pids = {"scheduler": cluster.scheduler.pid,
                    **{f"worker {index}": worker.pid for index, worker in enumerate(cluster.workers)}}
            env = dict(perfkit_env(scratch / f"cache-{label}"), PYTHONPATH=str(code))
            command = [PYTHON, "-m", "perfkit", "summary", "--format", "json", str(run), "--dask", cluster.address,
                       "--dask-storage", str(scratch / f"storage-{label}")]
            measured = through_cluster(f"Dask ({workers} workers), cold, {label}", command, env, pids, report,
                                       cwd=scratch)
            report(f"    {same(measured, answer)} as in process")
        finally:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a folder of generated ranks")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--before", type=Path,
                        help="a checkout of perfkit to measure cold through Dask beside this code")
    parser.add_argument("--out", type=Path, help="also write the report here (--append: at its end)")
    parser.add_argument("--append", action="store_true")
    args = parser.parse_args()
    report = Report()
    run = args.run.resolve()
    ranks = sum(1 for entry in os.scandir(run) if RANK_FOLDER.fullmatch(entry.name))
    report("# perfkit summary of many ranks through Dask (benchmarks/bench_ranks_dask.py " + " ".join(sys.argv[1:])
           + ")")
    report("each number one run; CPU = user + system; peak RSS per process (the client's: its process tree)")
    for text in machine():
        report(text)
    on_disk: dict = defaultdict(lambda: [0, 0])
    for place, _, names in os.walk(run):
        for name in names:
            kind = file_class(name)
            on_disk[kind][0] += 1
            on_disk[kind][1] += os.stat(os.path.join(place, name)).st_size
    report(f"\n## {ranks:,} ranks: {run}")
    report(f"on disk: cluster-level files {on_disk['cluster'][0]:,} ({on_disk['cluster'][1] / 1e6:,.1f} MB), "
           f"op-level and other files {on_disk['op'][0]:,} ({on_disk['op'][1] / 1e9:,.2f} GB)")
    report(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    summary = [PYTHON, "-m", "perfkit", "summary", "--format", "json", str(run)]
    with tempfile.TemporaryDirectory(prefix="perfkit-dask-ranks-") as scratch:
        scratch = Path(scratch)
        cold = measure(summary, perfkit_env(scratch / "cache"))
        report(line("in process, cold (empty cache)", cold))
        answer = json.loads(cold.output) if cold.status == "ok" else None
        traced = measure([*STRACE, "-o", str(scratch / "opens-in-process"), *summary],
                         perfkit_env(scratch / "cache-traced"))
        report(line("in process, cold, under strace (for the bytes)", traced, f"   {same(traced, answer)}"))
        report_bytes(opened_files([scratch / "opens-in-process"], run), ranks, report)
        memory = subprocess.run([PYTHON, "-c", RUN_MEMORY, str(run)], env=perfkit_env(scratch / "cache"),
                                capture_output=True, text=True, check=True)
        tables = json.loads(memory.stdout.strip().splitlines()[-1])
        for level, op_level in (("cluster-level", False), ("op-level", True)):
            chosen = {name: value for name, value in tables.items() if value[2] == op_level}
            size = sum(value[0] for value in chosen.values())
            report(f"    the Run's {level} tables: {size / 1e6:,.1f} MB in memory (deep), {size / ranks / 1e3:.1f} KB "
                   f"a rank: " + ", ".join(f"{name} {value[0] / 1e6:.1f} MB ({value[1]:,} rows)"
                                          for name, value in sorted(chosen.items(), key=lambda item: -item[1][0])))

        storage = scratch / "storage"
        cluster = LocalCluster(scratch / "cluster", workers=args.workers,
                               wrap=[*STRACE, "-ff", "-o", str(scratch / "opens-worker")])
        pids = processes(cluster)
        try:
            through = [*summary, "--dask", cluster.address, "--dask-storage", str(storage)]
            dask_env = perfkit_env(scratch / "cache-dask")
            # the workers' opens while they started (imports) are not the run's: only files under it are counted
            dask_cold = through_cluster(f"Dask ({args.workers} workers), cold", through, dask_env, pids, report)
            report(f"    {same(dask_cold, answer)} as in process")
            report_bytes(opened_files(sorted(scratch.glob("opens-worker*")), run), ranks, report)
            entries = [path for path in (storage / "ranks").glob("*/*") if path.is_file()]
            report(f"    the client read the workers' entries: {len(entries):,} files, "
                   f"{sum(path.stat().st_size for path in entries) / 1e6:,.1f} MB")
            warm = through_cluster("Dask, warm (the kept answer)", through, dask_env, pids, report)
            report(f"    {same(warm, answer)}")
            again = through_cluster("Dask, rank entries in storage, no Run entry", through,
                                    perfkit_env(scratch / "cache-dask-2"), pids, report)
            report(f"    {same(again, answer)}")
        finally:
            stop_workers([pid for name, pid in pids.items() if name.startswith("worker")])
            cluster.stop()
        if args.before:
            before_and_after(run, args.before, args.workers, scratch, answer, report)
    report(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report.write(args.out, args.append)


if __name__ == "__main__":
    main()

"""Time perfkit and msprof-analyze side by side on the generated runs (see generate.py).

For each run: cold load + summary (empty cache), warm load + summary (cache filled by the cold
one), and on the cluster run the slow-rank answer (`perfkit ranks`, which reads only the step files
and so does not use the cache) cold and warm; each the median of --repeat runs. Every measurement is a fresh
process; peak RSS is the largest sum of RSS over the process and its children, sampled every
50 ms. The peer tool runs from its own venv (PEER, default /tmp/msprof-venv/bin/msprof-analyze)
on the new-layout runs, with a time limit and an RSS limit that protects the shared machine;
a run that hits either is reported as such, never as a time.

    python benchmarks/generate.py && python benchmarks/bench_load.py --out benchmarks/results/load.txt
    python benchmarks/generate_db.py && python benchmarks/bench_load.py twin_text twin_db --out benchmarks/results/db.txt
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
GENERATED = REPO / "benchmarks" / "generated"
PYTHON = sys.executable
PEER = os.environ.get("PEER", "/tmp/msprof-venv/bin/msprof-analyze")
SAMPLE_S = 0.05
PEER_TIMEOUT_S = 15 * 60          # the team's calibration run took 8 min 37 s on half of run (a)
PEER_RSS_LIMIT = 12 * 1024**3     # 2 x its 6.0 GB calibration peak; the 24 GB machine is shared
PERFKIT_TIMEOUT_S = 10 * 60

# run -> (folder passed to both tools, new layout?, targets: cold s, warm s, peak RSS bytes)
RUNS = {
    "big_rank": ("big_rank/rank0_ascend_pt", True, (30, 2, 3 * 1024**3)),
    "legacy_10k_steps": ("legacy_10k_steps", False, (10, 1, None)),
    "ranks_256": ("ranks_256", True, (None, None, None)),
    # generate_db.py: one ~2 M kernel rank as the text export and as the database export (the same rows)
    "twin_text": ("big_rank_twins/text/rank0_ascend_pt", False, (None, None, None)),
    "twin_db": ("big_rank_twins/db/rank0_ascend_pt", False, (None, None, None)),
}
TWINS = ("twin_text", "twin_db")
SLOW_RANK_TARGETS = (60, 5)  # cold, warm seconds


@dataclass
class Measured:
    seconds: float
    peak_rss: int
    status: str          # "ok", "exit N", "timeout", "rss limit"
    output: str = ""
    cpu_seconds: float = 0.0  # user + system, the process and the children it waited for (a loaded machine's
                              # wall time is mostly waiting for a core; this is not)

    def time_text(self) -> str:
        prefix = "" if self.status == "ok" else ">" if self.status in ("timeout", "rss limit") else "failed "
        return f"{prefix}{self.seconds:.1f} s" + ("" if self.status == "ok" else f" ({self.status})")


def measure(command: list[str], env: dict | None = None, timeout: float = PERFKIT_TIMEOUT_S,
            rss_limit: int | None = None, cwd: Path | None = None) -> Measured:
    """Run `command`; peak RSS is the larger of the sampled sum over its process tree and the
    kernel's own maximum for its largest process (wait4), which no sampling interval misses.
    Killed past `timeout` or `rss_limit`."""
    began = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        root = psutil.Process(process.pid)
        peak, status, exit_code, cpu = 0, None, None, 0.0
        while True:
            pid, wait_status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                exit_code = os.waitstatus_to_exitcode(wait_status)
                peak = max(peak, usage.ru_maxrss * 1024)
                cpu = usage.ru_utime + usage.ru_stime
                break
            try:
                tree = [root] + root.children(recursive=True)
                peak = max(peak, sum(p.memory_info().rss for p in tree))
            except psutil.Error:
                pass  # a process exited between listing and reading it
            if time.perf_counter() - began > timeout:
                status = "timeout"
            elif rss_limit and peak > rss_limit:
                status = "rss limit"
            if status:
                for child in root.children(recursive=True):
                    child.kill()
                root.kill()
                os.wait4(process.pid, 0)
                break
            time.sleep(SAMPLE_S)
        process.returncode = exit_code if exit_code is not None else -9  # reaped here, not by Popen
        seconds = time.perf_counter() - began
        out.seek(0)
        output = out.read().decode(errors="replace")
    if status is None:
        status = "ok" if exit_code == 0 else f"exit {exit_code}"
    return Measured(seconds, peak, status, output, cpu)


def perfkit_env(cache: Path) -> dict:
    env = dict(os.environ, PERFKIT_CACHE_DIR=str(cache), PYTHONPATH=str(REPO))
    env.pop("PERFKIT_NO_CACHE", None)
    return env


def gb(value: int) -> str:
    return f"{value / 1024**3:.2f} GB"


def verdict(value: float, target: float | None) -> str:
    return "" if target is None else ("  [target <= %g: %s]" % (target, "met" if value <= target else "MISSED"))


def machine() -> list[str]:
    import pandas
    import pyarrow
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    peer_python = Path(PEER).parent / "python"
    peer = "msprof-analyze " + subprocess.run(
        [str(peer_python), "-c", "import importlib.metadata as m; print(m.version('msprof-analyze'))"],
        capture_output=True, text=True).stdout.strip() if peer_python.exists() else "not installed"
    return [f"date (UTC): {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}",
            f"nproc: {os.cpu_count()}   memory: {gb(psutil.virtual_memory().total)}   cpu: {cpu}",
            f"python {platform.python_version()}  pandas {pandas.__version__}  pyarrow {pyarrow.__version__}  "
            f"peer: {peer}",
            f"load average at start (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
            " (2 cores shared with other engineers' sessions)"]


def run_size(folder: Path) -> str:
    files = [p for p in folder.rglob("*") if p.is_file()]
    big = sorted(files, key=lambda p: p.stat().st_size, reverse=True)[:2]
    return (f"{len(files)} files, {gb(sum(p.stat().st_size for p in files))}; largest: "
            + ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in big))


def median(runs: list[Measured]) -> Measured:
    """The run with the median time, carrying the largest peak RSS of all of them."""
    middle = sorted(runs, key=lambda m: m.seconds)[len(runs) // 2]
    return Measured(middle.seconds, max(m.peak_rss for m in runs), middle.status, middle.output, middle.cpu_seconds)


def cold_and_warm(command: list[str], cache: Path, repeat: int) -> tuple[Measured, Measured]:
    """Median of `repeat` cold runs (empty cache) each followed by a warm one."""
    env = perfkit_env(cache)
    colds, warms = [], []
    for _ in range(repeat):
        shutil.rmtree(cache, ignore_errors=True)
        colds.append(measure(command, env))
        warms.append(measure(command, env))
    return median(colds), median(warms)


def bench(name: str, peer: bool, repeat: int, peer_timeout: float, report) -> None:
    relative, new_layout, (cold_target, warm_target, rss_target) = RUNS[name]
    folder = GENERATED / relative
    report(f"\n## {name}: {relative}  ({run_size(folder)})")
    with tempfile.TemporaryDirectory(prefix="perfkit-bench-") as scratch:
        summary = [PYTHON, "-m", "perfkit", "summary", "--format", "json", str(folder)]
        results = dict(zip(("cold", "warm"), cold_and_warm(summary, Path(scratch) / "cache", repeat)))
        for phase, target in (("cold", cold_target), ("warm", warm_target)):
            measured = results[phase]
            report(f"perfkit load+summary {phase}: {measured.time_text():>12}   peak RSS {gb(measured.peak_rss)}"
                   f"   CPU {measured.cpu_seconds:.1f} s   load avg {os.getloadavg()[0]:.2f}"
                   f"{verdict(measured.seconds, target)}"
                   + (verdict(measured.peak_rss / 1024**3, rss_target / 1024**3)
                      if phase == "cold" and rss_target else ""))
            if measured.status != "ok":
                report("    " + measured.output.strip().splitlines()[-1] if measured.output.strip() else "")
        if name == "ranks_256":
            answer = [PYTHON, "-m", "perfkit", "ranks", "--format", "json", str(folder)]
            answers = cold_and_warm(answer, Path(scratch) / "cache", repeat)
            for phase, target, measured in zip(("cold", "warm"), SLOW_RANK_TARGETS, answers):
                results[f"slow {phase}"] = measured
                slow = json.loads(measured.output)["slow_ranks"] if measured.status == "ok" else "-"
                report(f"perfkit slow-rank answer {phase}: {measured.time_text():>9}   peak RSS {gb(measured.peak_rss)}"
                       f"   slow ranks {slow}{verdict(measured.seconds, target)}")
            # msprof-analyze's `advisor all` on a cluster does this much: the slow-rank analysis over every
            # rank's step file, then the detailed analysis of one slow rank (and a fast one to compare)
            # (advisor/analyzer/analyzer_controller.py, cluster_schedule_analysis). The same work in perfkit:
            # `perfkit ranks`, then `perfkit summary` of the slow rank's folder.
            if answers[0].status == "ok" and json.loads(answers[0].output)["slow_ranks"]:
                slow_rank = json.loads(answers[0].output)["slow_ranks"][0]
                one_rank = [PYTHON, "-m", "perfkit", "summary", "--format", "json",
                            str(folder / f"rank{slow_rank}_ascend_pt")]
                rank_cold, rank_warm = cold_and_warm(one_rank, Path(scratch) / "cache", repeat)
                results["like advisor cold"] = Measured(answers[0].seconds + rank_cold.seconds,
                                                        max(answers[0].peak_rss, rank_cold.peak_rss), "ok")
                results["like advisor warm"] = Measured(answers[1].seconds + rank_warm.seconds,
                                                        max(answers[1].peak_rss, rank_warm.peak_rss), "ok")
                report(f"perfkit ranks + summary of slow rank {slow_rank} (the work advisor all does) cold: "
                       f"{results['like advisor cold'].time_text()}, warm: {results['like advisor warm'].time_text()}")
    if not (peer and new_layout):
        return
    # (label, arguments, [(what of perfkit's it is compared with, cold, warm), ...])
    peer_runs = [("advisor all", ["advisor", "all", "-d", str(folder)], [("load+summary", results["cold"], results["warm"])])]
    if "like advisor cold" in results:
        peer_runs[0][2].append(("ranks + slow rank's summary", results["like advisor cold"], results["like advisor warm"]))
    if name == "ranks_256":
        peer_runs.append(("cluster", ["cluster", "-d", str(folder)],
                          [("slow-rank answer", results["slow cold"], results["slow warm"])]))
    for label, arguments, comparisons in peer_runs:
        # the slow peer runs once; the quicker ones as often as perfkit, for a median
        runs = []
        for _ in range(repeat if label == "cluster" else 1):
            with tempfile.TemporaryDirectory(prefix="msprof-out-") as output:
                runs.append(measure([PEER, *arguments, "-o", output], timeout=peer_timeout,
                                    rss_limit=PEER_RSS_LIMIT, cwd=Path(output)))
        measured = median(runs)
        bound = ">" if measured.status != "ok" else ""
        report(f"msprof-analyze {label}: {measured.time_text():>12}   peak RSS {gb(measured.peak_rss)}"
               f"   load avg {os.getloadavg()[0]:.2f}")
        for what, ours, ours_warm in comparisons:
            report(f"    vs perfkit {what}: perfkit is {bound}{measured.seconds / ours.seconds:.1f}x faster cold, "
                   f"{bound}{measured.seconds / ours_warm.seconds:.0f}x warm, "
                   f"{measured.peak_rss / max(ours.peak_rss, 1):.1f}x less memory")
        if measured.status.startswith("exit"):
            report("    " + " | ".join(measured.output.strip().splitlines()[-3:]))


def bench_twins(repeat: int, report) -> None:
    """The text and database twins (generate_db.py) measured in turns, each cold run followed by a warm one, so
    that both meet the same load on a shared machine; medians side by side. Target: the database export
    loads as fast as the text one (within 10 % of its wall time)."""
    pairs: dict[str, list[tuple[Measured, Measured]]] = {name: [] for name in TWINS}
    with tempfile.TemporaryDirectory(prefix="perfkit-bench-") as scratch:
        for _ in range(repeat):
            for name in TWINS:
                summary = [PYTHON, "-m", "perfkit", "summary", "--format", "json", str(GENERATED / RUNS[name][0])]
                pairs[name].append(cold_and_warm(summary, Path(scratch) / "cache", 1))
    medians = {name: {phase: median([pair[index] for pair in runs]) for index, phase in enumerate(("cold", "warm"))}
               for name, runs in pairs.items()}
    for name in TWINS:
        report(f"\n## {name}: {RUNS[name][0]}  ({run_size(GENERATED / RUNS[name][0])})")
        for phase, measured in medians[name].items():
            report(f"perfkit load+summary {phase}: {measured.time_text():>12}   peak RSS {gb(measured.peak_rss)}"
                   f"   CPU {measured.cpu_seconds:.1f} s")
    text, database = (medians[name] for name in TWINS)
    report("")
    for phase in ("cold", "warm"):
        if database[phase].status != "ok" or text[phase].status != "ok":
            report(f"database / text export, {phase}: not compared (a run failed)")
            continue
        report(f"database / text export, {phase}: {database[phase].seconds / text[phase].seconds:.2f}x the wall time, "
               f"{database[phase].cpu_seconds / text[phase].cpu_seconds:.2f}x the CPU time  [target <= 1.1x the wall "
               f"time: {'met' if database[phase].seconds <= text[phase].seconds * 1.1 else 'MISSED'}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", default=list(RUNS), help=f"which runs (default: {' '.join(RUNS)})")
    parser.add_argument("--no-peer", action="store_true", help="skip msprof-analyze")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement, median reported (default 3)")
    parser.add_argument("--peer-timeout", type=float, default=PEER_TIMEOUT_S,
                        help="seconds before msprof-analyze is stopped (default %(default)s)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()
    lines: list[str] = []

    def report(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    report("# perfkit load benchmark (benchmarks/bench_load.py " + " ".join(sys.argv[1:]) + ")")
    report(f"each perfkit time is the median of {args.repeat} runs (cold: empty cache; warm: right after a cold one)")
    for line in machine():
        report(line)
    for name in args.runs:
        if not (GENERATED / RUNS[name][0]).is_dir():
            generator = "generate_db.py" if name in TWINS else "generate.py"
            sys.exit(f"{GENERATED / RUNS[name][0]} missing: run benchmarks/{generator} first")
    twins = set(TWINS) <= set(args.runs)
    for name in args.runs:
        if not (twins and name in TWINS):
            bench(name, not args.no_peer, args.repeat, args.peer_timeout, report)
    if twins:
        bench_twins(args.repeat, report)
    report(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

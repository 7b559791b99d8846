"""Held-out A/A and A/B check of statistics.verdict on real MindSpore CPU runs (perfkit profile's ResNet-50, small).

NOISE_FLOOR_PCT was set from the runs of benchmarks/compare_noise.py; the runs here are new, so they check the
floor instead of restating it.
- A/A: 2 x --pairs runs of identical settings, one after another; run 2i is compared with run 2i + 1 (independent
  pairs, one run a side: the noise-floor verdict). The aim: at most 1 in 20 called different. All pairs of the
  runs are counted too (not independent; they show how the floor fares over more combinations).
- A/B: the oneDNN ISA on an AVX-512 host, default (oneDNN's reference 3x3 convs) against ONEDNN_MAX_CPU_ISA=AVX2,
  interleaved so both sides see the same machine load; every pair should be called faster. The groups are also
  compared as repeats (Welch t over the run means) for the speedup's interval.
Each run's `uptime` load average is recorded beside it (the machine is shared); runs already made in --out are
loaded, not redone, so the verdict can be re-judged by running the script again.

    python benchmarks/compare_aa.py --pairs 20 --ab 5 --out /tmp/compare_aa > benchmarks/results/compare_aa.txt
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import perfkit
from perfkit.analysis import statistics

SETTINGS = ["--image-size", "32", "--batch-size", "8", "--steps", "4"]
FAST_ISA = "ONEDNN_MAX_CPU_ISA=AVX2"


def load_average() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def profile(output: Path, env: list[str]) -> tuple[perfkit.Run, str]:
    """Profile one run into output (the load average at its start kept in output/load.txt), or load it when a
    previous invocation made it."""
    if not (output / "load.txt").is_file():
        command = [sys.executable, "-m", "perfkit", "profile", *SETTINGS, "--output", str(output)]
        for pair in env:
            command += ["--env", pair]
        load = load_average()
        subprocess.run(command, check=True, capture_output=True)
        (output / "load.txt").write_text(load)
    return perfkit.load(output), (output / "load.txt").read_text()


def interval(verdict) -> str:
    low, high = verdict.interval
    return f"speedup {verdict.speedup:.3f}x (95 % {low:.2f}-{high:.2f}x)"


def judge_pairs(pairs, called: tuple[str, ...]) -> int:
    """Print each pair's one-run-a-side verdict; return how many are of a kind in `called`."""
    count = 0
    for run_a, run_b in pairs:
        verdict = statistics.verdict([run_a], [run_b])
        count += verdict.kind in called
        print(f"  {Path(run_a.path).name} vs {Path(run_b.path).name}: {verdict.kind}, {interval(verdict)}")
    return count


def judge_groups(label: str, group_a, group_b) -> None:
    """Print the verdict of two groups of runs taken as repeats (Welch t over the log run means)."""
    group = statistics.verdict(group_a, group_b)
    print(f"{label} as repeats ({group.n_a} vs {group.n_b} runs, {group.basis}): {group.kind}, {interval(group)}, "
          f"p = {group.p_value:.2g}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=20, help="independent A/A pairs (2 runs each)")
    parser.add_argument("--ab", type=int, default=5, help="runs per side of the A/B set")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    started = time.time()
    print(f"start {time.strftime('%H:%M:%S', time.gmtime(started))} UTC, {load_average()}")
    print(f"settings: perfkit profile {' '.join(SETTINGS)}; A/A with --env {FAST_ISA}; "
          f"noise floor {statistics.NOISE_FLOOR_PCT:g} % (benchmarks/results/compare_noise.txt)", flush=True)
    aa = []
    for index in range(2 * args.pairs):
        run, load = profile(args.out / f"aa_{index:02d}", [FAST_ISA])
        aa.append(run)
        print(f"A/A run {index:2d}: mean step {statistics.run_mean_ms(run, False):,.1f} ms, {load}", flush=True)
    sides: dict[str, list[perfkit.Run]] = {"default": [], "AVX2": []}
    for index in range(args.ab):
        for name, env in (("default", []), ("AVX2", [FAST_ISA])):
            run, load = profile(args.out / f"ab_{name}_{index}", env)
            sides[name].append(run)
            print(f"A/B {name:7} run {index}: mean step {statistics.run_mean_ms(run, False):,.1f} ms, {load}", flush=True)
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC, {load_average()}, "
          f"{(time.time() - started) / 60:.1f} min\n")

    called = judge_pairs(zip(aa[0::2], aa[1::2]), ("faster", "slower"))
    print(f"A/A: {called} of {args.pairs} independent pairs called different")
    all_pairs = list(itertools.combinations(aa, 2))
    called_all = sum(statistics.verdict([a], [b]).kind != statistics.NO_CHANGE for a, b in all_pairs)
    print(f"A/A, all pairs of the {len(aa)} runs (not independent): {called_all} of {len(all_pairs)} called different")
    judge_groups("A/A (even vs odd runs)", aa[0::2], aa[1::2])
    print()

    ab_called = judge_pairs(zip(sides["default"], sides["AVX2"]), ("faster",))
    print(f"A/B: {ab_called} of {args.ab} independent pairs called faster")
    cross = list(itertools.product(sides["default"], sides["AVX2"]))
    cross_called = sum(statistics.verdict([a], [b]).kind == "faster" for a, b in cross)
    print(f"A/B, every default run against every AVX2 run: {cross_called} of {len(cross)} called faster")
    judge_groups("A/B", sides["default"], sides["AVX2"])


if __name__ == "__main__":
    main()

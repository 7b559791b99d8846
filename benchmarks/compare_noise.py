"""A/A and A/B benchmark of statistics.verdict on real MindSpore CPU runs (perfkit profile's ResNet-50, small).

A/A: N runs of identical settings, every pair compared with one run a side (the noise-floor verdict): how many
pairs the verdict calls different (the aim: at most 1 in 20). A/B: runs with ONEDNN_MAX_CPU_ISA=AVX2 against the
default on an AVX-512 host (oneDNN's reference 3x3 convs without it): every pair should be called different; the
groups are also compared as repeats (Welch t over run means) for the speedup's interval.
Each run's `uptime` load average is recorded beside it (the machine is shared).

    python benchmarks/compare_noise.py --aa 7 --ab 3 --out /tmp/compare_noise > benchmarks/results/compare_noise.txt
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from pathlib import Path

from compare_aa import judge_groups, judge_pairs  # the same pair verdicts as the held-out check (run from benchmarks/)

import perfkit
from perfkit.analysis import statistics

SETTINGS = ["--image-size", "16", "--batch-size", "8", "--steps", "4"]


def profile(output: Path, env: list[str]) -> tuple[perfkit.Run, str]:
    """Profile one run into output, or load it when a previous invocation made it (re-judging kept runs: the
    load then is the one recorded in output/load.txt)."""
    if (output / "load.txt").is_file():
        return perfkit.load(output), (output / "load.txt").read_text()
    command = [sys.executable, "-m", "perfkit", "profile", *SETTINGS, "--output", str(output)]
    for pair in env:
        command += ["--env", pair]
    load = "load %.2f %.2f %.2f" % os.getloadavg()
    subprocess.run(command, check=True, capture_output=True)
    (output / "load.txt").write_text(load)
    return perfkit.load(output), load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--aa", type=int, default=7, help="A/A runs (all pairs compared: n(n-1)/2)")
    parser.add_argument("--ab", type=int, default=3, help="runs per side of the A/B set")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(f"settings: perfkit profile {' '.join(SETTINGS)}; noise floor {statistics.NOISE_FLOOR_PCT:g} %")
    aa = []
    for index in range(args.aa):
        run, load = profile(args.out / f"aa_{index}", [])
        aa.append(run)
        print(f"A/A run {index}: mean step {statistics.run_mean_ms(run, False):,.1f} ms, {load}", flush=True)
    pairs = list(itertools.combinations(aa, 2))
    called = judge_pairs(pairs, ("faster", "slower"))
    print(f"A/A: {called} of {len(pairs)} pairs called different")
    sides = {"default": [], "AVX2": []}
    for index in range(args.ab):
        for name, env in (("default", []), ("AVX2", ["ONEDNN_MAX_CPU_ISA=AVX2"])):
            run, load = profile(args.out / f"ab_{name}_{index}", env)
            sides[name].append(run)
            print(f"A/B {name} run {index}: mean step {statistics.run_mean_ms(run, False):,.1f} ms, {load}", flush=True)
    ab_pairs = list(itertools.product(sides["default"], sides["AVX2"]))
    ab_called = judge_pairs(ab_pairs, ("faster",))
    print(f"A/B: {ab_called} of {len(ab_pairs)} pairs called faster")
    judge_groups("A/B", sides["default"], sides["AVX2"])


if __name__ == "__main__":
    main()

"""CPU seconds of a cold `load` + `summarize` of each generated run, for the code of several commits side by side
(git worktrees given as arguments): is a refactor slower? CPU, not wall time, because the 2 cores are shared.

    git worktree add --detach /tmp/before <commit>; python benchmarks/cpu_by_commit.py /tmp/before .
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = {"legacy_10k_steps": "legacy_10k_steps", "big_rank": "big_rank/rank0_ascend_pt", "ranks_256": "ranks_256"}
CODE = "import perfkit, sys; perfkit.summarize(perfkit.load(sys.argv[1]))"
REPEAT = 3


def cpu_seconds(tree: str, run: Path) -> float:
    """Median CPU (user + system, the process and every worker it waited for) of REPEAT cold runs."""
    spent = []
    for _ in range(REPEAT):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", CODE, str(run)], check=True,
                       env={**os.environ, "PYTHONPATH": str(Path(tree).resolve()), "PERFKIT_NO_CACHE": "1"})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        spent.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return sorted(spent)[len(spent) // 2]


def main(trees: list[str]) -> None:
    for tree in trees:
        commit = subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        for name, relative in RUNS.items():
            seconds = cpu_seconds(tree, REPO / "benchmarks" / "generated" / relative)
            print(f"{commit:<10} {name:<18} cold load+summarize: {seconds:.2f} s CPU (median of {REPEAT})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or [str(REPO)])

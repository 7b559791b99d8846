"""Write `perfkit summary --format json` (and `advise --format json`) of every fixture and sample run
into a folder, or compare such a folder with the current code's output.

    python scripts/summary_snapshot.py write  snapshots/before     # before a refactor
    python scripts/summary_snapshot.py check  snapshots/before     # after: exit 1 on any byte difference

A refactor that must not change a number is checked this way (issue 12); a change that means to change
numbers writes a new snapshot and says why in its commit.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(os.environ.get("PERFKIT_FIXTURES", REPO / "tests" / "fixtures")).resolve()
COMMANDS = ("summary", "advise")


def runs() -> dict[str, Path]:
    """Every fixture run folder and sample run, named by its place."""
    found = {}
    for group in ("legacy", "new_format", "minddata_raw/mindspore_ut", "cpu_2_10"):
        for folder in sorted((FIXTURES / group).iterdir()):
            if folder.is_dir():
                found[f"fixtures/{group}/{folder.name}"] = folder
    for folder in sorted((REPO / "sample_runs").iterdir()):
        if folder.is_dir():
            found[f"sample_runs/{folder.name}"] = folder
    for folder in sorted((REPO / "tests" / "runs").iterdir()):
        if folder.is_dir():
            for cycle in cycles(folder):
                found[f"tests/runs/{cycle.relative_to(folder.parent)}"] = cycle
    return found


def profiled_runs() -> dict[str, Path]:
    """runs() but those perfkit refuses by design: a run whose manifest records a failure before any step was
    profiled (tests/runs/cpu_2_10_failed: `summary` says the failure, exit 2)."""
    return {name: folder for name, folder in runs().items() if not failed_before_a_step(folder)}


def failed_before_a_step(folder: Path) -> bool:
    manifest = folder / "perfkit_run.json"
    if not manifest.is_file():
        return False
    recorded = json.loads(manifest.read_text())
    return recorded.get("status") == "failed" and not recorded.get("steps")


def cycles(folder: Path) -> list[Path]:
    """The folder, or, where it holds several profiler runs of one CPU rank (schedule cycles with repeat > 1,
    dynamic-profiler windows: perfkit refuses the parent), each of them: one row each."""
    units = sorted(folder.glob("**/FRAMEWORK/cpu_op_type_info_*.csv"))
    ranks = [unit.name.rsplit("_", 1)[-1] for unit in units]
    if len(ranks) == len(set(ranks)):
        return [folder]
    return [unit.parent.parent for unit in units]


def output(command: str, folder: Path) -> str:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "PERFKIT_CACHE_DIR": cache, "PYTHONPATH": str(REPO)}
        done = subprocess.run([sys.executable, "-m", "perfkit", command, str(folder), "--format", "json"],
                              capture_output=True, text=True, env=env, cwd=REPO)
    text = f"exit {done.returncode}\n{done.stdout}{done.stderr}"
    # where this checkout and its fixtures are is the machine's, not the answer's: a snapshot written in one
    # checkout checks another
    return text.replace(str(FIXTURES), "$FIXTURES").replace(str(REPO), "$REPO")


def snapshot_name(name: str, command: str) -> str:
    return f"{name.replace('/', '__')}.{command}.json"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "check"):
        print(__doc__)
        return 2
    mode, target = argv[0], Path(argv[1])
    target.mkdir(parents=True, exist_ok=True)
    differences = 0
    for name, folder in runs().items():
        for command in COMMANDS:
            text = output(command, folder)
            path = target / snapshot_name(name, command)
            if mode == "write":
                path.write_text(text)
                continue
            before = path.read_text() if path.exists() else ""
            if text != before:
                differences += 1
                print(f"DIFFERS: {name} {command}")
                sys.stdout.writelines(difflib.unified_diff(before.splitlines(True), text.splitlines(True),
                                                           "before", "after", n=1))
    if mode == "check":
        print(f"{differences} difference(s) over {len(runs()) * len(COMMANDS)} outputs")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

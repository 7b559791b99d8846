"""`perfkit profile --reference -- python ref_train.py [args…]`: profile a PyTorch reference script, unchanged,
under torch.profiler, into a run folder perfkit reads (perfkit/io/formats/kineto.py) and compares with its
MindSpore port (`perfkit compare REFERENCE PORT`, docs/migration.md).

The command's Python runs hook/reference_main.py, which imports torch and runs the script (profiler schedule, named
module spans, one step per optimizer step, the sidecar perfkit_run.json). This side imports no torch: it checks the
command, claims the folder, runs it, then adds the host's facts to the sidecar and replaces the absolute path torch
writes as each trace's traceName with the file's name.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import PerfkitError
from ..core.version import __version__
from .runfolder import MANIFEST, claim, read_manifest, write_manifest
from .script import script_index

CHILD = Path(__file__).resolve().parent / "hook" / "reference_main.py"
NO_TORCH = ("the script's Python ({python}) has no torch: run it with a Python that has it, or install "
            "perfkit's optional extra there: pip install 'perfkit[reference]'")


@dataclass
class ReferenceRequest:
    command: list[str]
    output: str = "./profiler_reference"
    env: dict[str, str] = field(default_factory=dict)
    warmup: int = 1   # profiler steps recorded but thrown away (after one step skipped)
    steps: int = 3    # profiler steps kept: the trace's ProfilerStep#N spans


@dataclass
class ReferenceOutcome:
    folder: Path
    exit_code: int
    status: str
    traced: bool


def child_command(command: list[str]) -> list[str]:
    """`python [options] script.py args` -> `python [options] reference_main.py script.py args`."""
    if not command:
        raise PerfkitError("no command after `--`: give the PyTorch training command, e.g. "
                           "perfkit profile --reference -- python ref_train.py")
    index = script_index(command)
    if not Path(command[0]).name.startswith("python") or index is None:
        raise PerfkitError("--reference runs a Python script (python [options] script.py …), not: "
                           + " ".join(command))
    if not Path(command[index]).is_file():
        raise PerfkitError(f"script not found: {command[index]}")
    return command[:index] + [str(CHILD)] + command[index:]


def profile_reference(request: ReferenceRequest) -> ReferenceOutcome:
    command = child_command(request.command)
    folder = claim(request.output)
    env = {**os.environ, **request.env, "PERFKIT_REFERENCE_OUTPUT": str(folder),
           "PERFKIT_REFERENCE_SCHEDULE": f"1,{request.warmup},{request.steps}"}
    try:
        done = subprocess.run(command, env=env, stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as exc:
        raise PerfkitError(f"cannot run {command[0]}: {exc.strerror or exc}") from None
    if done.stderr:
        print(done.stderr, end="", file=sys.stderr)
    if "No module named 'torch'" in (done.stderr or ""):
        raise PerfkitError(NO_TORCH.format(python=command[0]))
    traces = sorted(folder.glob("*.pt.trace.json*"))
    for trace in traces:
        scrub_trace_name(trace)
    manifest = read_manifest(folder) if (folder / MANIFEST).is_file() else None
    if manifest is not None:
        manifest.update({"perfkit_version": __version__, "command": " ".join(request.command),
                         "config": {**manifest.get("config", {}), "env": request.env}})
        write_manifest(folder, manifest)
    status = manifest.get("status", "failed") if manifest else "failed"
    return ReferenceOutcome(folder=folder, exit_code=done.returncode, status=status, traced=bool(traces))


def scrub_trace_name(path: Path) -> None:
    """Replace the trace's traceName (the absolute path of torch's temporary file) by the trace's own file name."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or "traceName" not in data:
        return
    data["traceName"] = path.name
    with opener(path, "wt", encoding="utf-8") as handle:
        json.dump(data, handle)

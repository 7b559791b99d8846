"""The part of `perfkit profile -- python train.py` that runs in the script's process at interpreter start
(hook/sitecustomize.py), before the script: standard library only, so the script does not wait for perfkit's
imports (pandas, the readers) unless it imports MindSpore, which takes seconds anyway. The rest is
api.start_session, run when the script's `import mindspore` reaches mindspore.train.model.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys
from pathlib import Path

from ..core import boundedjson

# The job `perfkit profile -- …` hands the script (JSON: output, msrun, skip_first, steps, profile_memory).
RUN_ENV = "PERFKIT_SCRIPT_RUN"
MS_PROFILER_OPTIONS = "MS_PROFILER_OPTIONS"


def attach() -> None:
    """Set this process up as a profiled rank of `perfkit profile -- …` (a no-op anywhere else).

    MindSpore is not imported yet, so MS_PROFILER_OPTIONS still takes effect (with --warmup N it is unset:
    api.RankProfile starts a scheduled profiler after the skipped steps instead). Under msrun only the
    workers attach (not msrun itself, nor its scheduler), each into rank_<RANK_ID>/. The job is taken out
    of the environment so the script's own subprocesses are not profiled again.
    """
    raw = os.environ.get(RUN_ENV)
    if raw is None:
        return
    job = boundedjson.loads(raw)
    if job["msrun"] and os.environ.get("MS_ROLE") != "MS_WORKER":
        return
    del os.environ[RUN_ENV]
    folder = Path(job["output"])
    if job["msrun"]:
        folder = folder / f"rank_{int(os.environ.get('RANK_ID', '0'))}"
        folder.mkdir(exist_ok=True)
    if job["skip_first"] == 0:
        os.environ[MS_PROFILER_OPTIONS] = json.dumps({"start": True, "output_path": str(folder),
                                                      "profile_memory": job["profile_memory"]})
    else:
        os.environ.pop(MS_PROFILER_OPTIONS, None)  # one profiler: ours, started after the skipped steps
    sys.meta_path.insert(0, AfterImport("mindspore.train.model", lambda module: _start(job, folder, module)))


def _start(job: dict, folder: Path, model_module) -> None:
    from .api import start_session

    start_session(job, folder, model_module)


class AfterImport(importlib.abc.MetaPathFinder):
    """Calls `then(module)` right after the module `name` is first executed (imported by whoever imports it)."""

    def __init__(self, name: str, then):
        self.name = name
        self.then = then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        execute = spec.loader.exec_module

        def execute_then(module):
            execute(module)
            self.then(module)

        spec.loader.exec_module = execute_then
        return spec

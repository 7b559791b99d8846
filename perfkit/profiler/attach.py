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
import signal
import sys
import threading
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
    sys.meta_path.insert(0, InterruptAfterImport("mindspore"))


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
        spec.loader.exec_module = lambda module: self.execute(execute, module)
        return spec

    def execute(self, execute, module) -> None:
        execute(module)
        self.then(module)


class InterruptAfterImport(AfterImport):
    """Holds a Ctrl-C (SIGINT, as `perfkit profile` forwards it) back while the module `name` is executed: MindSpore
    cut short mid-import has started its profiler and fails in its exit handlers ("Fatal Python error:
    PyThreadState_Get"). One that came meanwhile ends the process once the import is done, at once and quietly,
    as interrupted (exit code 130): nothing was trained, so nothing is lost, and any exception raised here would
    undo the import under those same exit handlers."""

    def __init__(self, name: str):
        super().__init__(name, lambda module: None)

    def execute(self, execute, module) -> None:
        if threading.current_thread() is not threading.main_thread():
            return super().execute(execute, module)  # signals reach the main thread only
        received = []
        previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
        try:
            super().execute(execute, module)
        finally:
            signal.signal(signal.SIGINT, previous)
        if received:
            sys.stdout.flush()
            sys.stderr.write(f"perfkit: SIGINT while the script imported {self.name}: stopped once the import was "
                             "done, before any step\n")
            sys.stderr.flush()
            os._exit(128 + signal.SIGINT)

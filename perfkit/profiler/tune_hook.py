"""The part of `perfkit tune` that runs inside the training process: applies an experiment's changes to an
unchanged script and watches its loss.

hook/sitecustomize.py calls install() at interpreter start when PERFKIT_TUNE is set (JSON: `changes`, a list of
advisor Change dicts, and `report`, the file to write at exit). Once `import mindspore` has run, the changes are
patched in: Model(amp_level=…), model.train(dataset_sink_mode=…), dataset.map/batch(num_parallel_workers=…),
dataset.batch(batch_size), a source dataset's num_parallel_workers, the execution mode (set at once and kept
when the script sets it), the prefetch size. Environment variables are not this module's: tune sets them before
the process starts (MindSpore reads them at import). Every Model.train also gets a callback that stops training
at the first loss that is NaN or infinite.

The report says how often each change took effect (a change the script never reached, e.g. amp_level in a
script without Model, counts 0: tune says so and does not judge it), what was clamped, and the NaN step. It is
written only by a process that imported MindSpore (perfkit profile's own process has the hook too, and must not
overwrite its child's report).
"""

from __future__ import annotations

import atexit
import functools
import inspect
import json
import math
import os
import sys

from ..core import boundedjson
from ..core.host import capped_workers
from .attach import AfterImport

TUNE_ENV = "PERFKIT_TUNE"


class _Tuning:
    def __init__(self, changes: list[dict], report: str):
        self.changes = changes
        self.report = report
        self.applied = {change_key(change): 0 for change in changes}
        self.notes: list[str] = []
        self.nan_loss_step: int | None = None
        self.patched = False

    def count(self, change: dict) -> None:
        self.applied[change_key(change)] += 1

    def patch(self, ms) -> None:
        """Apply every change to the freshly imported `mindspore` package."""
        self.patched = True
        from mindspore.dataset.engine.datasets import Dataset
        from mindspore.train.model import Model

        for change in self.changes:
            knob, value = change["knob"], change["value"]
            if knob == "amp_level":
                _override(Model, "__init__", "amp_level", lambda given, c=change: self.set(c))
            elif knob == "sink_mode":
                _override(Model, "train", "dataset_sink_mode", lambda given, c=change: self.set(c))
            elif knob == "batch_size":
                _override(Dataset, "batch", "batch_size", lambda given, c=change: self.set(c))
            elif knob == "dataset_workers":
                workers = self.workers(value)
                op = change.get("op") or "all"
                owners = {"map": [(Dataset, "map")], "batch": [(Dataset, "batch")],
                          "all": [(Dataset, "map"), (Dataset, "batch")]}.get(op)
                if owners is None:
                    source = getattr(ms.dataset, op, None)
                    owners = [(source, "__init__")] if isinstance(source, type) else []
                for owner, method in owners:
                    _override(owner, method, "num_parallel_workers",
                              lambda given, c=change, n=workers: self.set(c, n))
            elif knob == "prefetch":
                ms.dataset.config.set_prefetch_size(value)
                self.count(change)
            elif knob == "mode":
                self.force_mode(ms, change)
        self.watch_loss(Model)

    def set(self, change: dict, value=None):
        self.count(change)
        return change["value"] if value is None else value

    def workers(self, asked: int) -> int:
        """MindSpore refuses more workers per dataset op than the machine has CPUs (core/host.py)."""
        used = capped_workers(asked, os.cpu_count())
        if used < asked:
            self.notes.append(f"{asked} workers asked, {used} used (MindSpore allows at most the CPU count)")
        return used

    def force_mode(self, ms, change: dict) -> None:
        mode = ms.GRAPH_MODE if change["value"] == "graph" else ms.PYNATIVE_MODE
        original = ms.context.set_context

        @functools.wraps(original)
        def set_context(**kwargs):
            if "mode" in kwargs:
                kwargs["mode"] = mode
            return original(**kwargs)

        ms.context.set_context = ms.set_context = set_context
        original(mode=mode)
        self.count(change)

    def watch_loss(self, model_class) -> None:
        from mindspore.train import Callback

        tuning = self

        class StopAtNaN(Callback):
            def on_train_step_end(self, run_context):
                params = run_context.original_args()
                loss = params.net_outputs
                if isinstance(loss, (tuple, list)):
                    loss = loss[0]  # (loss, overflow, loss scale) under a loss scale manager
                try:
                    value = float(loss.asnumpy().mean()) if hasattr(loss, "asnumpy") else float(loss)
                except (TypeError, ValueError):
                    return
                if not math.isfinite(value) and tuning.nan_loss_step is None:
                    tuning.nan_loss_step = int(params.cur_step_num)
                    run_context.request_stop()

        def add_watch(given):
            listed = [] if given is None else list(given) if isinstance(given, (list, tuple)) else [given]
            return [*listed, StopAtNaN()]

        _override(model_class, "train", "callbacks", add_watch)

    def write(self) -> None:
        if not self.patched:
            return
        with open(self.report, "w") as handle:
            json.dump({"applied": self.applied, "notes": self.notes, "nan_loss_step": self.nan_loss_step}, handle)


def change_key(change: dict) -> str:
    """advisor.change.Change.key of a change dict (this module imports nothing of perfkit's at start-up)."""
    if change["knob"] == "env":
        return f"env.{change['name']}"
    if change["knob"] == "dataset_workers":
        return f"dataset_workers.{change.get('op') or 'all'}"
    return change["knob"]


def _override(owner: type, method: str, parameter: str, value_of) -> None:
    """Make `owner.method` run with `parameter` set to value_of(what the caller gave, None if nothing), however
    the caller passed it (by position or keyword)."""
    original = getattr(owner, method)
    signature = inspect.signature(original)

    @functools.wraps(original)
    def overridden(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments[parameter] = value_of(bound.arguments.get(parameter))
        return original(*bound.args, **bound.kwargs)

    setattr(owner, method, overridden)


def install() -> None:
    """Apply PERFKIT_TUNE's changes once this process imports MindSpore; write the report at exit."""
    raw = os.environ.get(TUNE_ENV)
    if not raw:
        return
    job = boundedjson.loads(raw)
    tuning = _Tuning(job["changes"], job["report"])
    sys.meta_path.insert(0, AfterImport("mindspore", tuning.patch))
    atexit.register(tuning.write)

"""A finding's action as a setting a program can apply: `perfkit tune` applies it without editing the script
(perfkit/profiler/tune_hook.py), `perfkit advise --format json` shows it as the finding's `change`.

Knobs (KNOBS) and what each sets:
- env: the environment variable `name` to `value` (set before Python starts, so MindSpore reads it at import)
- dataset_workers: num_parallel_workers=`value` of the dataset calls `op` names ("map", "batch", "all" for both,
  or a source class such as "Cifar10Dataset")
- batch_size: dataset.batch(`value`, …)
- prefetch: mindspore.dataset.config.set_prefetch_size(`value`), the size of each dataset op's output queue
- amp_level: Model(…, amp_level=`value`)
- sink_mode: model.train(…, dataset_sink_mode=`value`)
- mode: the execution mode, "graph" or "pynative" (ms.set_context(mode=…))
- profiler_warmup: steps skipped before profiling (`perfkit profile --warmup N`): a change to what is measured,
  not to training, so tune never tries it
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

KNOBS = ("env", "dataset_workers", "batch_size", "prefetch", "amp_level", "sink_mode", "mode", "profiler_warmup")
# knobs whose value is a positive int, a bool, one of a few words
INT_KNOBS = ("dataset_workers", "batch_size", "prefetch", "profiler_warmup")
CHOICES = {"amp_level": ("O0", "O1", "O2", "O3"), "mode": ("graph", "pynative")}
# changes that alter the measurement rather than the training: never an experiment
MEASUREMENT_KNOBS = ("profiler_warmup",)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Change:
    knob: str                 # one of KNOBS
    value: Any                # int, bool or str, as the knob takes it
    name: str | None = None   # env: the variable
    op: str | None = None     # dataset_workers: "map", "batch", "all" or a source dataset class

    def __post_init__(self):
        problem = self.problem()
        if problem:
            raise ValueError(problem)

    def problem(self) -> str | None:
        if self.knob not in KNOBS:
            return f"unknown knob {self.knob!r} (one of {', '.join(KNOBS)})"
        if self.knob == "env" and not (isinstance(self.name, str) and ENV_NAME.match(self.name)):
            return f"env needs a variable name, not {self.name!r}"
        if self.knob in INT_KNOBS and not (isinstance(self.value, int) and not isinstance(self.value, bool)
                                           and self.value >= (0 if self.knob == "profiler_warmup" else 1)):
            return f"{self.knob} needs a positive whole number, not {self.value!r}"
        if self.knob == "sink_mode" and not isinstance(self.value, bool):
            return f"sink_mode needs true or false, not {self.value!r}"
        if self.knob in CHOICES and self.value not in CHOICES[self.knob]:
            return f"{self.knob} is one of {', '.join(CHOICES[self.knob])}, not {self.value!r}"
        return None

    @property
    def key(self) -> str:
        """What it sets, without the value: two changes of one key cannot both apply."""
        if self.knob == "env":
            return f"env.{self.name}"
        if self.knob == "dataset_workers":
            return f"dataset_workers.{self.op or 'all'}"
        return self.knob

    @property
    def label(self) -> str:
        """Short, for tables and folder names: `ONEDNN_MAX_CPU_ISA=AVX2`, `map workers=4`, `amp_level=O2`."""
        if self.knob == "env":
            return f"{self.name}={self.value}"
        if self.knob == "dataset_workers":
            return f"{self.op or 'all'} workers={self.value}"
        value = str(self.value).lower() if isinstance(self.value, bool) else self.value
        return f"{self.knob}={value}"

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Change:
        return cls(knob=data["knob"], value=data["value"], name=data.get("name"), op=data.get("op"))

    def code(self) -> str:
        """The line a user writes to make this change by hand."""
        if self.knob == "env":
            return f"os.environ[{self.name!r}] = {str(self.value)!r}  # before import mindspore"
        if self.knob == "dataset_workers":
            if self.op in ("map", "batch"):
                return f"dataset.{self.op}(..., num_parallel_workers={self.value})"
            if self.op not in (None, "all"):
                return f"ds.{self.op}(..., num_parallel_workers={self.value})"
            return f"dataset.map(..., num_parallel_workers={self.value}); dataset.batch(..., " \
                   f"num_parallel_workers={self.value})"
        return {
            "batch_size": f"dataset.batch({self.value}, ...)",
            "prefetch": f"mindspore.dataset.config.set_prefetch_size({self.value})",
            "amp_level": f'Model(network, loss_fn, optimizer, amp_level="{self.value}")',
            "sink_mode": f"model.train(..., dataset_sink_mode={self.value})",
            "mode": f"ms.set_context(mode=ms.{str(self.value).upper()}_MODE)",
            "profiler_warmup": f"perfkit profile --warmup {self.value}",
        }[self.knob]


def parse_change(text: str) -> Change:
    """`--try` syntax: `env:NAME=VALUE`, `dataset_workers=4`, `dataset_workers:map=4`, `amp_level=O2`,
    `sink_mode=true`; raises ValueError with the reason."""
    head, sep, raw = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r}: expected KNOB=VALUE (e.g. amp_level=O2, env:ONEDNN_MAX_CPU_ISA=AVX2)")
    knob, _, qualifier = head.partition(":")
    value: Any = raw
    if knob in INT_KNOBS:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{text!r}: {knob} needs a whole number") from None
    elif knob == "sink_mode":
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"{text!r}: sink_mode is true or false")
        value = raw.lower() == "true"
    if knob == "env":
        return Change("env", value, name=qualifier or None)
    if knob == "dataset_workers":
        return Change(knob, value, op=qualifier or "all")
    return Change(knob, value)


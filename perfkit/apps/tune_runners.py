"""How `perfkit tune` trains one setting: `perfkit profile` in a child process, into the experiment's run folder.

The built-in ResNet-50 takes a change through `perfkit profile`'s own options where it has one (--env, --workers,
--batch-size, --amp-level, --sink, --mode); a user's script (`perfkit tune -- python train.py`) takes environment
variables through --env and every other change through the start-up hook (tune_hook.py, PERFKIT_TUNE), so the
script is never edited. The hook is on both processes' path: it also watches the loss for NaN.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..advisor.change import Change
from ..core import boundedjson
from ..io.formats.manifest import MANIFEST
from ..profiler.launch import Keeper
from ..profiler.script import HOOK_DIR, NOTHING_PROFILED
from ..profiler.tune_hook import TUNE_ENV, change_key
from .tune import OUTPUT_TAIL_LINES, DeadlineReached, RunResult, Stopped

# Changes the built-in run takes as `perfkit profile` options.
RESNET_OPTIONS = {
    "dataset_workers": lambda change: ["--workers", str(change.value)],
    "batch_size": lambda change: ["--batch-size", str(change.value)],
    "amp_level": lambda change: ["--amp-level", change.value],
    "sink_mode": lambda change: ["--sink" if change.value else "--no-sink"],
    "mode": lambda change: ["--mode", change.value],
}
# What the hook needs the script to do for a change to take effect (said when it never did).
REACHED_BY = {"amp_level": "made no Model(...) (amp_level is Model's argument)",
              "sink_mode": "never called Model.train (dataset_sink_mode is its argument)",
              "batch_size": "never called dataset.batch",
              "dataset_workers.map": "never called dataset.map", "dataset_workers.batch": "never called dataset.batch",
              "dataset_workers.all": "called neither dataset.map nor dataset.batch"}
# How long the child may take to stop after a Ctrl-C or SIGTERM (it finishes its step and MindSpore's analysis)
# before it is killed with everything it started.
STOP_SECONDS = 120
POLL_SECONDS = 0.2
# The manifest statuses whose step times count: incomplete runs lack op data, not steps.
USABLE = ("ok", "incomplete")
# A script that marks no steps (a custom loop without perfkit.profiling): tune's --warmup 1 cannot skip its compile
# step, so MindSpore's profiler is never started, and no step times exist to judge a setting by.
NO_STEPS = ("the script marks no steps (it calls neither Model.train nor perfkit.profiling), so tune has no step "
            "times to judge by and its --warmup 1 left MindSpore's profiler nothing to record: wrap the loop in "
            "`with perfkit.profiling(OUT) as prof:` and call `prof.step()` after each step (docs/tune.md); its "
            "output: {log}")
# How much of the end of a run's output is read for its last lines: a script's output can be any size (a 100 MB
# log), its last traceback and lines are within this.
TAIL_BYTES = 256 * 1024
# MindSpore's profiler analysis draws progress bars into the output: `[13449] Parsing: [###   ] 1/2 …`
PROGRESS = re.compile(r"^\[\d+\] (Parsing:|Start parsing)")


class ProfileRunner:
    """Runs `perfkit profile ARGS` (the built-in ResNet-50) or `perfkit profile ARGS -- COMMAND` (a script)."""

    def __init__(self, args: list[str], command: list[str] | None = None, say: Callable[[str], None] = print):
        self.args = list(args)
        self.command = list(command) if command else None
        self.say = say

    def describe(self) -> dict[str, Any]:
        if self.command:
            return {"kind": "script", "command": self.command, "args": self.args}
        return {"kind": "resnet", "args": self.args}

    def run(self, changes: tuple[Change, ...], out_dir: Path, limit_s: float | None = None) -> RunResult:
        options = list(self.args)
        if self.command and "--warmup" not in options:
            options += ["--warmup", "1"]  # the first step compiles: judged on the steady ones
        hooked: list[Change] = []
        for change in changes:
            if change.knob == "env":
                options += ["--env", f"{change.name}={change.value}"]
            elif not self.command and change.knob in RESNET_OPTIONS:
                options += RESNET_OPTIONS[change.knob](change)
            else:
                hooked.append(change)
        report = out_dir.parent / f"{out_dir.name}.applied.json"
        log = out_dir.parent / f"{out_dir.name}.log"
        env = dict(os.environ)
        env[TUNE_ENV] = json.dumps({"changes": [change.to_dict() for change in hooked], "report": str(report)})
        source_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOOK_DIR), source_root, env.get("PYTHONPATH")) if p)
        command = [sys.executable, "-m", "perfkit", "profile", *options, "--output", str(out_dir)]
        if self.command:
            command += ["--", *self.command]
        keeper = RunKeeper(self.say)
        deadline = None if limit_s is None else time.monotonic() + limit_s
        with open(log, "wb") as handle, keeper.started(command, env, stdout=handle, stderr=subprocess.STDOUT,
                                                       stdin=subprocess.DEVNULL):
            code = _wait(keeper, deadline)
        return self.outcome(out_dir, code, log, report, changes, hooked)

    def outcome(self, out_dir: Path, code: int, log: Path, report: Path, changes: tuple[Change, ...],
                hooked: list[Change]) -> RunResult:
        manifest = _json(out_dir / MANIFEST) or {}
        applied = _json(report)
        tail = _tail(log)
        status = manifest.get("status")
        folder = out_dir if out_dir.is_dir() else None
        if code != 0 or status not in USABLE:
            # a script that exited 0 failed nowhere: a traceback in its output is one it handled
            last = tail.splitlines()[-1] if tail and code != 0 else None
            error = str(manifest.get("error") or last or f"exit code {code}, status {status}")
            return RunResult(folder, False, error=error, tail=tail if code != 0 else "")
        if NOTHING_PROFILED in (manifest.get("notes") or []) and not manifest.get("steps"):
            return RunResult(folder, False, error=NO_STEPS.format(log=log))
        if applied and applied.get("nan_loss_step") is not None:
            return RunResult(folder, False, error=f"the loss was NaN at step {applied['nan_loss_step']}", tail=tail)
        not_applied = []
        for change in hooked:
            if applied is None:
                not_applied.append(f"{change.label}: the script never imported MindSpore")
            elif not (applied.get("applied") or {}).get(change_key(change.to_dict())):
                reason = REACHED_BY.get(change.key, f"never made a ds.{change.op}")
                not_applied.append(f"{change.label}: the script {reason}")
        used = manifest.get("used") or {}
        for change in changes:
            if change.knob == "sink_mode" and used.get("sink") not in (None, change.value):
                not_applied.append(f"{change.label}: {manifest.get('device')} cannot sink the dataset "
                                   "(MindSpore feeds it step by step)")
        notes = (applied or {}).get("notes")
        return RunResult(folder, True, not_applied=not_applied,
                         notes=[str(note) for note in notes] if isinstance(notes, list) else [])


class RunKeeper(Keeper):
    """Stands between one `perfkit profile` run and Ctrl-C/SIGTERM to tune: the run (in a session of its own,
    SIGINTed should tune die) is asked once to stop, a second signal kills it with everything it started."""

    def announce(self, name: str) -> None:
        self.say(f"perfkit tune: {name}: stopping the run in progress; the finished runs are kept ({name} again "
                 "to stop at once)")

    def phase(self) -> str:
        return "a tune run"


def _wait(keeper: RunKeeper, deadline: float | None) -> int:
    """The run's exit code. Past `deadline` (time.monotonic) it is killed, with every process it started, and
    DeadlineReached raised; after a signal it has STOP_SECONDS to stop, then Stopped is raised."""
    process = keeper.process
    stop_by = None
    while True:
        now = time.monotonic()
        if keeper.interrupted and stop_by is None:
            stop_by = now + STOP_SECONDS
        limits = [limit for limit in (deadline, stop_by) if limit is not None]
        try:
            code = process.wait(timeout=min([POLL_SECONDS, *(max(limit - now, 0.0) for limit in limits)]))
            break
        except subprocess.TimeoutExpired:
            pass
        if any(time.monotonic() >= limit for limit in limits):
            keeper.kill_all()
            process.wait()
            if keeper.interrupted:
                raise Stopped(keeper.stop_signal.name)
            raise DeadlineReached()
    if keeper.interrupted:
        raise Stopped(keeper.stop_signal.name)
    return code


def _json(path: Path) -> dict | None:
    """The JSON object in `path` (a run's manifest, the hook's report); None where there is none."""
    try:
        data = boundedjson.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tail(log: Path) -> str:
    """The end of a run's output: up to its last Python exception where it has one (MindSpore's analysis prints
    its progress after it), else its last lines; blank lines and the analysis's progress bars left out."""
    try:
        with open(log, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            raw = handle.read(TAIL_BYTES)
    except OSError:
        return ""
    if size > TAIL_BYTES:
        raw = raw[raw.find(b"\n") + 1:]  # from the first whole line
    text = raw.decode("utf-8", errors="replace")
    lines = [line for line in text.replace("\r", "\n").splitlines() if line.strip() and not PROGRESS.search(line)]
    starts = [index for index, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    end = len(lines)
    if starts:
        end = next((index + 1 for index in range(starts[-1] + 1, len(lines)) if not lines[index][:1].isspace()),
                   len(lines))
    return "\n".join(lines[max(0, end - OUTPUT_TAIL_LINES):end])

"""`perfkit profile [options] -- python train.py [args…]`: profile the user's own script, unchanged.

The command runs as given (its stdout/stderr are the terminal's, its exit code becomes ours), with
hook/sitecustomize.py first on PYTHONPATH: in the script's process (each msrun worker's, under msrun)
it switches MindSpore's profiler on through MS_PROFILER_OPTIONS, starts MindData's profiling, adds a
step timer to Model.train and saves the step times at exit (perfkit/profiler/api.py). This side checks
the command, claims the run folder, forwards Ctrl-C (launch.Keeper) and settles each rank's manifest
from the exit code.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from ..core.errors import PerfkitError
from .attach import RUN_ENV
from .launch import (
    CLUSTER_TIMEOUT_SECONDS,
    MSRUN_LOG_DIR,
    Keeper,
    ProfileOutcome,
    child_env,
    free_port,
    record_manifest,
)
from .runfolder import MANIFEST, claim, now_iso, read_manifest, script_manifest, write_error, write_manifest

HOOK_DIR = Path(__file__).resolve().parent / "hook"
PYTHON = re.compile(r"^python[0-9.]*$")
# Options of python that take the next argument as their value (so it is not the script).
PYTHON_VALUE_OPTIONS = ("-W", "-X", "-Q")
NO_STEP_TIMER = ("the script called neither Model.train nor perfkit.profiling: its steps are read from the op "
                 "timestamps where they can be (the k-th run of each op is step k, which holds in graph mode); to time "
                 "them, wrap the loop in `with perfkit.profiling() as prof:` and call `prof.step()` at the end of "
                 "each step")
NOTHING_PROFILED = ("MindSpore's profiler wrote nothing: --warmup was given and the script never called "
                    "Model.train nor perfkit.profiling")
NO_MINDSPORE = ("your script did not use MindSpore (it never imported it): nothing to profile; `perfkit profile "
                "-- …` profiles MindSpore training scripts")
NO_OP_DATA = ("MindSpore's profiler left no op data: the script ended without the profiler's analysis (os._exit, "
              "or killed by a signal it could not see); step times are known, their split is not")
NO_STEP_ENDED = ("the script failed inside {timer} before its first step ended: no step was timed (its error is "
                 "above and in perfkit_run.json)")


@dataclass
class ScriptRequest:
    """`perfkit profile`'s flags that apply to a script, and the command; recorded as the manifest's config."""

    command: list[str]
    output: str = "./profiler_v1"
    env: dict[str, str] = field(default_factory=dict)
    ranks: int = 1
    warmup: int = 0             # steps before profiling starts (needs Model.train or perfkit.profiling)
    steps: int | None = None    # profiled steps (None: all)
    profile_memory: bool = False


class ScriptKeeper(Keeper):
    def announce(self, name: str) -> None:
        self.say(f"perfkit: {name}: passed on to the script, which saves what was profiled as it exits "
                 f"({name} again to stop at once)")

    def phase(self) -> str:
        return "the script's exit (MindSpore's analysis)"


def _is_python(program: str) -> bool:
    return bool(PYTHON.match(Path(program).name))


def script_index(command: list[str]) -> int | None:
    """Where the script is in `python [options] script.py …` or `msrun [options] script.py …`, if it has one."""
    index = 1
    while index < len(command):
        arg = command[index]
        if arg in ("-m", "-c", "-"):
            return None
        if arg in PYTHON_VALUE_OPTIONS or (arg.startswith("--") and "=" not in arg and not _is_python(command[0])):
            index += 2  # python's `-X dev`, msrun's `--worker_num 2`
        elif arg.startswith("-"):
            index += 1
        else:
            return index
    return None


def _check_command(request: ScriptRequest, path: str) -> tuple[Path | None, bool]:
    """The script the command runs (if one can be told) and whether msrun launches it (it then runs once
    per worker); a command that cannot run is perfkit's error, before anything starts."""
    command = request.command
    if not command:
        raise PerfkitError("no command after `--`: give the training command, e.g. "
                           "perfkit profile -- python train.py")
    if shutil.which(command[0], path=path) is None:
        raise PerfkitError(f"command not found: {command[0]}")
    index = script_index(command)
    script = Path(command[index]) if index is not None else None
    if script is not None and not script.is_file():
        raise PerfkitError(f"script not found: {script}")
    launcher = Path(command[0]).name == "msrun"
    if request.ranks > 1 and (launcher or not _is_python(command[0]) or script is None):
        raise PerfkitError("--ranks N needs a `python script.py …` command (msrun starts it once per rank); "
                           "to launch msrun yourself, drop --ranks")
    if request.ranks > 1 and shutil.which("msrun", path=path) is None:
        raise PerfkitError("--ranks needs MindSpore's msrun launcher, which is not on PATH")
    return script, launcher or request.ranks > 1


def _launch_command(request: ScriptRequest, folder: Path, path: str) -> list[str]:
    """The command as given; under --ranks N, its script and arguments handed to msrun."""
    if request.ranks == 1:
        return request.command
    script_args = request.command[script_index(request.command):]
    return [shutil.which("msrun", path=path), f"--worker_num={request.ranks}", f"--local_worker_num={request.ranks}",
            f"--master_port={free_port()}", f"--log_dir={folder / MSRUN_LOG_DIR}", "--join=True",
            f"--cluster_time_out={CLUSTER_TIMEOUT_SECONDS}", *script_args]


def profile_script(request: ScriptRequest, say=None) -> ProfileOutcome:
    """Run the user's command under the profiler; return the run folder, its status and our exit code.

    Raises PerfkitError before anything runs for a missing command, an unknown program, a missing script,
    a folder that cannot be created. The script's own failure is not an error here: the outcome carries
    it (status failed, its exit code).
    """
    say = say or (lambda text: click.echo(text, err=True))
    if request.warmup < 0 or (request.steps is not None and request.steps < 1) or request.ranks < 1:
        raise PerfkitError("--warmup must be 0 or more, --steps and --ranks at least 1")
    env = child_env(request.env)
    env["PYTHONPATH"] = os.pathsep.join([str(HOOK_DIR), env["PYTHONPATH"]])
    script, msrun = _check_command(request, env["PATH"])
    requested = Path(request.output).expanduser()
    try:
        folder = claim(requested)
    except OSError as exc:
        raise PerfkitError(f"cannot create the run folder: {write_error(exc)}", request.output) from exc
    if folder != requested:
        say(f"perfkit: {requested} exists (never overwritten): writing to {folder}")
    else:
        say(f"perfkit: writing to {folder}")
    manifest = script_manifest(request.command, request.env, script, None if msrun else 1)
    manifest["config"] = asdict(request)
    try:
        write_manifest(folder, manifest)
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)  # nothing ran: leave nothing behind
        raise PerfkitError(f"cannot write the run folder: {write_error(exc)}", folder) from exc
    env[RUN_ENV] = json.dumps({"output": str(folder.resolve()), "msrun": msrun, "skip_first": request.warmup,
                               "steps": request.steps, "profile_memory": request.profile_memory})
    keeper = ScriptKeeper(say)
    with keeper.started(_launch_command(request, folder, env["PATH"]), env):
        returncode = keeper.process.wait()
    return _settle(folder, manifest, msrun, keeper, returncode)


def _settle(folder: Path, manifest: dict, msrun: bool, keeper: ScriptKeeper, returncode: int) -> ProfileOutcome:
    """Mark each rank's manifest with how the script ended and what is missing; return the outcome."""
    if keeper.interrupted or returncode in (-signal.SIGINT, 128 + signal.SIGINT):
        status, error = "interrupted", None
    elif returncode == 0:
        status, error = "ok", None
    else:
        status = "failed"
        error = (f"killed by signal {signal.Signals(-returncode).name}" if returncode < 0
                 else f"the script exited with code {returncode}")
    if keeper.killed_during is not None:
        error = f"stopped at once by a second signal during {keeper.killed_during}: the profile may be incomplete"
    ranks = sorted((path for path in folder.glob("rank_*") if (path / MANIFEST).is_file()),
                   key=lambda path: int(path.name.split("_")[1])) if msrun else [folder]
    notes: list[str] = []
    used_mindspore = False
    for rank_folder in ranks:
        recorded = read_manifest(rank_folder)
        # the script's exception (the hook records it) says more than its exit code, but only where the script
        # failed: an extension module prints errors it recovers from through sys.excepthook (MindSpore on NumPy 2)
        rank_error = (recorded["error"] or error) if status == "failed" else error
        rank_notes, rank_status = list(recorded["notes"]), status
        if recorded.get("attached_at") is None:  # api.start_session never ran: MindSpore was never imported
            rank_notes.append(NO_MINDSPORE)
        else:
            used_mindspore = True
            if recorded.get("step_timer") is None:
                rank_notes.append(NO_STEP_TIMER)
            elif status == "failed" and not recorded.get("steps"):
                rank_notes.append(NO_STEP_ENDED.format(timer=recorded["step_timer"].split()[0]))
            if not any(rank_folder.glob("*_ascend_ms")):
                rank_notes.append(NOTHING_PROFILED)
            elif status == "ok" and not _has_op_data(rank_folder):
                rank_status, rank_error = "incomplete", NO_OP_DATA
        notes += [note for note in rank_notes if note not in notes]
        if rank_status == "incomplete" and status == "ok":
            status = "incomplete"  # for the top-level manifest and the outcome
        unrecorded = record_manifest(rank_folder, {**recorded, "status": rank_status, "error": rank_error,
                                           "notes": rank_notes, "finished_at": now_iso()})
        if unrecorded:
            notes.append(f"{rank_folder / MANIFEST}{unrecorded}")
    if msrun:
        first = read_manifest(ranks[0]) if ranks else {}
        record_manifest(folder, {**manifest, "status": status if ranks else "failed",
                         "error": error if ranks else "no rank started (see the msrun output above)",
                         "rank_size": len(ranks), "device": first.get("device"),
                         "mindspore_version": first.get("mindspore_version"), "used": first.get("used", {}),
                         "notes": notes, "finished_at": now_iso()})
    if status == "interrupted":
        stop_signal = keeper.stop_signal or signal.SIGINT
        return ProfileOutcome(folder=folder, status=status, notes=notes, stop_signal=stop_signal.name,
                              exit_code=128 + stop_signal)
    exit_code = 128 - returncode if returncode < 0 else returncode
    return ProfileOutcome(folder=folder, status=status, notes=notes, exit_code=exit_code, profiled=used_mindspore)


def _has_op_data(rank_folder: Path) -> bool:
    """Whether a reader of op data (a unit reader: ascend_ms, cpu, …) claims a folder of the rank's, as the
    loader would find it."""
    from ..io.discovery import discover
    from ..io.formats import readers

    return any(reader.unit for reader, _ in discover(rank_folder, readers())[1])

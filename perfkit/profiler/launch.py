"""The parent side of `perfkit profile`: check the request, claim the run folder, start training
in a child process (or one per rank through msrun), draw progress, forward Ctrl-C and SIGTERM (a second
one stops everything at once), settle the manifest.

Nothing here imports MindSpore: the child does (perfkit/profiler/train.py), after `--env` is applied.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import click

from ..analysis.flops import host_cpu_facts
from ..core import boundedjson
from ..core.errors import DeviceError, PerfkitError
from ..core.version import __version__
from ..io.formats.manifest import AMP_LEVELS, DEVICES, MANIFEST, MODES
from . import cifar
from .runfolder import TRAIN_LOG, claim, is_disk_full, now_iso, read_manifest, write_error, write_manifest
from .train import signal_when_parent_dies

DEVICE_CHOICES = ("auto", *DEVICES)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
POLL_SECONDS = 0.1
# oneDNN's ISA cap, applied to the built-in job on hosts with AVX-512 (isa_cap).
ISA_ENV, ISA_CAP = "ONEDNN_MAX_CPU_ISA", "AVX2"
# How long the ranks of a --ranks run wait for each other to join before msrun gives up.
CLUSTER_TIMEOUT_SECONDS = 300
# msrun logs this when a rank exits non-zero, just before it kills the other ranks.
MSRUN_WORKER_FAILED = re.compile(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)")
MSRUN_LOG_DIR = "msrun"
# Analysis milestones each rank reports after training: finishing, analysing, finished.
ANALYSIS_STAGES = ("finishing", "analysing", "finished")
# Ctrl-C, and what `kill` and job schedulers send: the first stops after the current step and keeps
# what was profiled, a second kills the training processes at once.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class ProfileRequest:
    """Every flag of `perfkit profile`, as the user gave it; recorded verbatim as the manifest's config."""

    device: str = "auto"
    steps: int = 3
    warmup: int = 1
    batch_size: int = 32
    image_size: int | None = None
    data_path: str | None = None
    shards: int = 40
    shard_id: int = 0
    sink: bool = True
    amp_level: str = "O0"
    workers: int | None = None
    mode: str = "graph"
    env: dict[str, str] = field(default_factory=dict)
    output: str = "./profiler_v1"
    ranks: int = 1
    profile_memory: bool = False


@dataclass
class ProfileOutcome:
    folder: Path
    status: str                 # ok / interrupted / failed / incomplete (formats/manifest.py STATUSES)
    notes: list[str]
    stop_signal: str | None = None  # SIGINT / SIGTERM when interrupted
    exit_code: int = 0              # 128 + the signal's number when interrupted, as a shell reports it
    profiled: bool = True           # False: the user's script never imported MindSpore (nothing to report)


def parse_env(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """`KEY=VALUE` strings to a dict; a malformed pair is the user's error."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not ENV_NAME.match(key):
            raise PerfkitError(f"--env {pair!r}: expected KEY=VALUE with KEY a variable name")
        env[key] = value
    return env


def _check(request: ProfileRequest) -> None:
    problems = []
    if request.device not in DEVICE_CHOICES:
        problems.append(f"--device {request.device!r} is not one of {', '.join(DEVICE_CHOICES)}")
    if request.amp_level not in AMP_LEVELS:
        problems.append(f"--amp-level {request.amp_level!r} is not one of {', '.join(AMP_LEVELS)}")
    if request.mode not in MODES:
        problems.append(f"--mode {request.mode!r} is not one of {', '.join(MODES)}")
    for name in ("steps", "batch_size", "shards", "ranks"):
        if getattr(request, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("image_size", "workers"):
        if getattr(request, name) is not None and getattr(request, name) < 1:
            problems.append(f"--{name.replace('_', '-')} must be at least 1")
    if request.warmup < 0:
        problems.append("--warmup must be 0 or more")
    if not 0 <= request.shard_id < request.shards:
        problems.append(f"--shard-id {request.shard_id} is not in 0..{request.shards - 1} (--shards {request.shards})")
    if problems:
        raise PerfkitError("; ".join(problems))


def _data(request: ProfileRequest, say) -> tuple[Path, bool, list[str]]:
    """The CIFAR-10 folder to train on, whether it is synthetic, and the notes that explain it
    (`say` gets the line to show the user)."""
    if request.data_path is not None:
        folder, records = cifar.training_records(request.data_path)
        synthetic, notes = False, []
    else:
        cached = cifar.synthetic_cached()
        folder = cifar.synthetic()
        _, records = cifar.training_records(folder)
        synthetic = True
        notes = ["no --data-path: trained on synthetic CIFAR-10 (random images in the real binary format), "
                 "so accuracy means nothing; timings are representative"]
        say(f"perfkit: {notes[0]} ({'reused' if cached else 'generated'} {folder})")
    per_shard = records // request.shards
    needed = request.warmup + request.steps
    if per_shard // request.batch_size < needed:
        raise PerfkitError(
            f"a shard of {records} images split {request.shards} ways holds {per_shard} images = "
            f"{per_shard // request.batch_size} batches of {request.batch_size}, fewer than the {needed} steps "
            "asked (--warmup + --steps): lower --shards or --batch-size", folder)
    return folder, synthetic, notes


def isa_cap(request: ProfileRequest, host: dict | None) -> tuple[dict[str, str], list[str]]:
    """What the built-in job sets for oneDNN on a host with AVX-512, and the note that says so: ISA_CAP, the
    kernel_efficiency advice (oneDNN's AVX-512 3x3 convolutions and their gradients run a reference kernel many
    times slower than its AVX2 ones: perfkit/advisor/rules/compute.py), unless the user chose an ISA (`--env`, or
    the environment) or asked for another device than the CPU. `host`: the host's cpu_facts."""
    if request.device not in ("auto", "CPU") or ISA_ENV in request.env or ISA_ENV in os.environ \
            or not host or "avx512f" not in host.get("flags", ()):
        return {}, []
    return {ISA_ENV: ISA_CAP}, [f"this host has AVX-512: set {ISA_ENV}={ISA_CAP} for the built-in job on the CPU "
                                f"(oneDNN's AVX-512 3x3 convolutions are its slow reference kernel; `--env "
                                f"{ISA_ENV}=AVX512_CORE` keeps them)"]


def child_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment for training: ours, `--env` on top, this interpreter's bin first on PATH
    (msrun starts `python` from PATH) and perfkit importable even when it is not installed."""
    env = {**os.environ, **extra}
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", "")])
    source_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _command(job_file: Path, request: ProfileRequest, folder: Path) -> list[str]:
    child = ["-m", "perfkit.profiler.train", str(job_file)]
    if request.ranks == 1:
        return [sys.executable, *child]
    msrun = shutil.which("msrun", path=child_env({})["PATH"])
    if msrun is None:
        raise PerfkitError("--ranks needs MindSpore's msrun launcher, which is not on PATH")
    return [msrun, f"--worker_num={request.ranks}", f"--local_worker_num={request.ranks}",
            f"--master_port={free_port()}", f"--log_dir={folder / MSRUN_LOG_DIR}", "--join=True",
            f"--cluster_time_out={CLUSTER_TIMEOUT_SECONDS}", "python", *child]


class Events:
    """Reads the ranks' progress files incrementally (see train.Progress)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.offsets: dict[Path, int] = {}

    def new(self) -> list[dict]:
        events = []
        for path in sorted(self.folder.glob("rank_*.jsonl")):
            with open(path, "rb") as handle:
                handle.seek(self.offsets.get(path, 0))
                chunk = handle.read()
            complete = chunk[:chunk.rfind(b"\n") + 1]  # a line being written is read next time
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            events += [boundedjson.loads(line.decode("utf-8", "replace"))
                       for line in complete.splitlines() if line.strip()]
        return events


class Keeper:
    """Runs a command in a session of its own and stands between it and Ctrl-C/SIGTERM: the first signal
    is forwarded once as SIGINT (the run stops and keeps what it has), a second kills every process the
    command started. Subclasses say what the phases are called and what a first signal means."""

    def __init__(self, say):
        self.say = say
        self.pids: dict[int, int] = {}          # rank -> its process id, once known
        self.stop_signal: signal.Signals | None = None
        self.killed_during: str | None = None   # the phase a second signal cut short
        self.process: subprocess.Popen | None = None

    @property
    def interrupted(self) -> bool:
        return self.stop_signal is not None

    def phase(self) -> str:
        """What the run is doing now, as a second signal's message names it."""
        return "training"

    def announce(self, name: str) -> None:
        """Tell the user what the first signal does."""
        self.say(f"perfkit: {name}: stopping training and analysing the steps profiled so far "
                 f"({name} again to stop at once)")

    def stop(self, signum, frame) -> None:
        """Ctrl-C or SIGTERM: ask the run's processes to stop and keep what they have; a second one
        kills them all at once."""
        name = signal.Signals(signum).name
        if self.killed_during is not None:
            return
        if self.interrupted:
            self.killed_during = self.phase()
            self.say(f"perfkit: {name} again: stopping at once, during {self.killed_during}")
            self.kill_all()
            return
        self.stop_signal = signal.Signals(signum)
        self.announce(name)
        targets = list(self.pids.values()) or ([self.process.pid] if self.process else [])
        for pid in targets:
            _signal(pid, signal.SIGINT)

    def kill_all(self) -> None:
        """SIGKILL every process we started: msrun, its scheduler, the ranks and whatever they started.

        Each rank leads a process group of its own (msrun setsids them, we start a single rank in a
        session of its own), which catches the helpers they fork; the walk of the tree catches a rank
        that has not reported its pid yet.
        """
        if self.process is not None:
            kill_tree(self.process.pid, self.pids.values())

    @contextlib.contextmanager
    def started(self, command: list[str], env: dict[str, str], **popen):
        """Start `command` with our signal handlers in place; on leaving, put them back, and kill the
        command if it still runs (we are unwinding on an error of our own)."""
        previous = {signum: signal.signal(signum, self.stop) for signum in STOP_SIGNALS}
        try:
            # A session of its own: the terminal's Ctrl-C reaches only us, and we forward it once.
            self.process = subprocess.Popen(command, env=env, start_new_session=True,
                                            preexec_fn=interrupt_when_parent_dies, **popen)
            yield self.process
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if self.process is not None:
                if self.process.poll() is None:
                    self.kill_all()
                    self.process.wait()
                else:
                    # what the command forked and left running (a daemon thread's process, a forgotten
                    # child) would outlive us holding our stdout: its process groups go with it
                    kill_groups({self.process.pid, *self.pids.values()})


class Supervisor(Keeper):
    """Runs the training process(es) to the end while keeping the user informed."""

    def __init__(self, request: ProfileRequest, folder: Path, scratch: Path, say):
        super().__init__(say)
        self.request = request
        self.folder = folder
        self.scratch = scratch
        self.device_errors: dict[int, dict] = {}
        self.notes: list[str] = []
        self.finished: dict[int, dict] = {}     # rank -> its `finished` event
        self.device: str | None = None
        self.done: dict[int, int] = {}          # rank -> steps done (warmup included)
        self.stages: dict[int, int] = {}        # rank -> analysis stages reached
        self.step_seen: dict[int, float] = {}   # rank -> when its last step (or training) was seen to end
        self.training_bar = None
        self.analysis_bar = None

    def phase(self) -> str:
        return "the profiler's analysis" if self.stages else "training"

    def announce(self, name: str) -> None:
        if self.stages:
            self.say(f"perfkit: {name}: training is done, finishing the analysis ({name} again to stop at once)")
        else:
            super().announce(name)

    def run(self, command: list[str], env: dict[str, str], log, pending: list[str]) -> int:
        """Start `command`, show progress until it exits, return its exit code.

        `pending` lines are said once MindSpore has the device, so an unusable device is one line of output.
        """
        events = Events(self.scratch)
        with self.started(command, env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT):
            self._follow(events, until=lambda: self.device or self.device_errors)
            if not self.device_errors:
                for line in pending + [f"perfkit: {note}" for note in self.notes]:
                    self.say(line)
                self.say(f"perfkit: training on {self.device}")
                steps = (self.request.warmup + self.request.steps) * self.request.ranks
                with click.progressbar(length=steps, label="compiling (warmup)", file=sys.stderr,
                                       show_pos=True) as self.training_bar:
                    self._follow(events, until=lambda: self.stages)
                self.training_bar = None
                with click.progressbar(length=len(ANALYSIS_STAGES) * self.request.ranks, label="analysing profile",
                                       file=sys.stderr) as self.analysis_bar:
                    self._follow(events, until=lambda: False)
                self.analysis_bar = None
            return self.process.wait()

    def _follow(self, events: Events, until) -> None:
        """Absorb events until `until()` holds or the process exits."""
        while True:
            running = self.process.poll() is None
            self._absorb(events.new())
            if until() or not running:
                return
            time.sleep(POLL_SECONDS)

    def _absorb(self, events: list[dict]) -> None:
        for event in events:
            rank, kind = event["rank"], event["event"]
            if kind == "started":
                self.pids[rank] = event["pid"]
                if self.interrupted:  # Ctrl-C came before this rank reported in
                    _signal(event["pid"], signal.SIGINT)
            elif kind == "device":
                self.device = event["device"]
            elif kind == "device_error":
                self.device_errors[rank] = event
            elif kind == "note" and event["text"] not in self.notes:
                self.notes.append(event["text"])
                if self.training_bar is not None:
                    _clear_line()
                    self.say(f"perfkit: {event['text']}")
            elif kind == "training":
                self.step_seen[rank] = time.monotonic()
            elif kind in ("warmup", "step") and self.training_bar is not None:
                if kind == "step":
                    self.training_bar.label = "training (profiled steps)"
                self.training_bar.update(event["done"] - self.done.get(rank, 0))
                self.done[rank] = event["done"]
                if not sys.stderr.isatty():  # a log, a pipe: the bar draws only its label
                    self.say(self._step_line(rank, kind, event))
            if kind == "finished":
                self.finished[rank] = event
            if kind in ANALYSIS_STAGES:
                reached = ANALYSIS_STAGES.index(kind) + 1
                if self.analysis_bar is not None:
                    self.analysis_bar.update(reached - self.stages.get(rank, 0))
                self.stages[rank] = reached


    def _step_line(self, rank: int, kind: str, event: dict) -> str:
        """One line for a step that ended: which, of how many, and how long it took as seen from here."""
        now = time.monotonic()
        took = now - self.step_seen.get(rank, now)
        self.step_seen[rank] = now
        who = f"rank {rank} " if self.request.ranks > 1 else ""
        what = "warmup, compiles the graph" if kind == "warmup" else "profiled"
        return f"perfkit: {who}step {event['done']}/{event['total']} ({what}) {took:.1f} s"


def interrupt_when_parent_dies() -> None:
    """In the child, before exec: SIGINT it if we die without a word (kill -9, the OOM killer), so it does
    not train on alone: a single rank stops after its step and analyses, msrun kills its ranks."""
    signal_when_parent_dies(signal.SIGINT)


def kill_groups(groups) -> None:
    """SIGKILL the process groups `groups` (ids of their leaders), never our own; those gone are skipped."""
    own = os.getpgrp()
    for group in groups:
        if group == own or group <= 1:
            continue
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # gone already, or not a group leader (any more)


def processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process this user can see (Linux /proc; elsewhere psutil
    where installed, else none)."""
    found: dict[int, tuple[int, int]] = {}
    proc = Path("/proc")
    if proc.is_dir():
        for entry in proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            fields = stat[stat.rfind(")") + 2:].split()  # after "pid (command)": state ppid pgrp ...
            found[int(entry.name)] = (int(fields[1]), int(fields[2]))
        return found
    try:
        import psutil
    except ImportError:
        return found
    for process in psutil.process_iter():
        try:
            found[process.pid] = (process.ppid(), os.getpgid(process.pid))
        except (psutil.Error, OSError):
            continue
    return found


def kill_tree(pid: int, groups=()) -> None:
    """SIGKILL the process `pid`, every process below it, the process groups they lead or belong to and
    `groups`: what a run started, however deep and whichever group it is in (never our own group)."""
    table = processes()
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, (ppid, _) in table.items() if ppid == parent and child not in tree]
        tree.update(children)
        frontier += children
    kill_groups({pid, *groups, *(table[member][1] for member in tree if member in table)})
    for member in tree:
        _signal(member, signal.SIGKILL)


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # it already exited


def _clear_line() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")


def _manifest(request: ProfileRequest, synthetic: bool, notes: list[str]) -> dict:
    return {
        "perfkit_version": __version__,
        "mindspore_version": None,
        "device": None,
        "rank": 0 if request.ranks == 1 else None,
        "rank_size": request.ranks,
        "status": "running",
        "error": None,
        "config": asdict(request),
        # What was asked; the training process replaces it with what MindSpore could do.
        "used": {"sink": request.sink, "amp_level": request.amp_level, "mode": request.mode},
        "notes": list(notes),
        "synthetic_data": synthetic,
        "env": dict(request.env),
        "steps": [],
        "started_at": now_iso(),
        "finished_at": None,
        "command": "perfkit " + shlex.join(sys.argv[1:]) if sys.argv and "perfkit" in sys.argv[0]
                   else shlex.join(sys.argv),
    }


def profile(request: ProfileRequest, say=None) -> ProfileOutcome:
    """Train under the profiler as `request` says and return the run folder.

    Raises DeviceError when the device cannot be used (and leaves no folder behind), PerfkitError
    for bad input, a folder that cannot be written (a full disk) or a training process that failed
    (the folder is kept and marked failed).
    """
    say = say or (lambda text: click.echo(text, err=True))
    _check(request)
    pending: list[str] = []
    data_dir, synthetic, notes = _data(request, pending.append)
    try:
        folder = claim(request.output)
    except OSError as exc:
        raise PerfkitError(f"cannot create the run folder: {write_error(exc)}", request.output) from exc
    requested = Path(request.output).expanduser()
    if folder != requested:
        pending.append(f"perfkit: {requested} exists (never overwritten): writing to {folder}")
    else:
        pending.append(f"perfkit: writing to {folder}")
    host = host_cpu_facts()
    capped, cap_notes = isa_cap(request, host)
    pending += [f"perfkit: {note}" for note in cap_notes]
    manifest = {**_manifest(request, synthetic, notes + cap_notes), "host": host}
    manifest["env"].update(capped)
    log_path = folder / TRAIN_LOG if request.ranks == 1 else folder / MSRUN_LOG_DIR / "msrun.log"
    try:
        write_manifest(folder, manifest)
        log_path.parent.mkdir(exist_ok=True)
        log = open(log_path, "ab")
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)  # nothing was trained: leave nothing behind
        raise PerfkitError(f"cannot write the run folder: {write_error(exc)}", folder) from exc
    scratch = Path(tempfile.mkdtemp(prefix="perfkit-profile-"))
    try:
        job = {"config": manifest["config"], "ranks": request.ranks, "output": str(folder.resolve()),
               "progress_dir": str(scratch), "data_dir": str(data_dir)}
        job_file = scratch / "job.json"
        job_file.write_text(json.dumps(job))
        supervisor = Supervisor(request, folder, scratch, say)
        with log:
            env = child_env({**request.env, **capped})
            returncode = supervisor.run(_command(job_file, request, folder), env, log, pending)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _settle(request, folder, supervisor, returncode, manifest, log_path)


def _settle(request: ProfileRequest, folder: Path, supervisor: Supervisor, returncode: int, manifest: dict,
            log_path: Path) -> ProfileOutcome:
    if supervisor.device_errors:
        event = next(iter(supervisor.device_errors.values()))
        shutil.rmtree(folder, ignore_errors=True)  # nothing was trained: leave nothing behind
        raise DeviceError(f"device {event['device']} is not available: MindSpore reported: {event['message']}")
    notes = manifest["notes"] + [note for note in supervisor.notes if note not in manifest["notes"]]
    if request.ranks == 1:
        status, error = _rank_outcome(folder, supervisor, 0, returncode)
        if status == "failed":
            raise PerfkitError(f"training failed: {error}; see {log_path}")
        return _outcome(folder, status, notes, supervisor)
    codes = _msrun_exit_codes(log_path, supervisor.pids)
    outcomes = {rank: _rank_outcome(folder / f"rank_{rank}", supervisor, rank, codes.get(rank))
                for rank in range(request.ranks)}
    failed = [rank for rank, (status, _) in outcomes.items() if status == "failed"]
    first = read_manifest(folder / "rank_0") if (folder / "rank_0" / MANIFEST).exists() else {}
    error = _killed_error(supervisor)
    if failed:
        # msrun kills every other rank once one dies; the one it reported is the one that died first.
        culprit = next((rank for rank in failed if rank in codes), failed[0])
        error = f"rank {culprit}: {outcomes[culprit][1]}; see {folder / f'rank_{culprit}' / TRAIN_LOG}"
    interrupted = supervisor.interrupted or any(status == "interrupted" for status, _ in outcomes.values())
    status = "failed" if failed else ("interrupted" if interrupted else "ok")
    unrecorded = record_manifest(folder, {**manifest, "status": status, "error": error, "device": first.get("device"),
                                  "mindspore_version": first.get("mindspore_version"), "used": first.get("used"),
                                  "notes": notes, "finished_at": now_iso()})
    if failed:
        raise PerfkitError(f"training failed on {error} (the other ranks were stopped){unrecorded}")
    return _outcome(folder, status, notes, supervisor)


def _outcome(folder: Path, status: str, notes: list[str], supervisor: Supervisor) -> ProfileOutcome:
    if status != "interrupted":
        return ProfileOutcome(folder=folder, status=status, notes=notes)
    # A rank can stop on its own signal too (a scheduler signalling every process); SIGINT is what we forward.
    stop_signal = supervisor.stop_signal or signal.SIGINT
    return ProfileOutcome(folder=folder, status=status, notes=notes, stop_signal=stop_signal.name,
                          exit_code=128 + stop_signal)


def _killed_error(supervisor: Supervisor) -> str | None:
    if supervisor.killed_during is None:
        return None
    consequence = ("MindSpore's profile of the steps so far was not written" if supervisor.killed_during == "training"
                   else "MindSpore's analysis output may be incomplete")
    return f"stopped at once by a second signal during {supervisor.killed_during}: {consequence}"


def _rank_outcome(folder: Path, supervisor: Supervisor, rank: int, exit_code: int | None) -> tuple[str, str | None]:
    """How a rank ended; a rank whose process died before it could say so is marked here."""
    if not (folder / MANIFEST).exists():
        return "failed", "the training process never started"
    recorded = read_manifest(folder)
    if recorded["status"] != "running":
        return recorded["status"], recorded["error"]
    finished = supervisor.finished.get(rank)
    if finished is not None:  # it finished but could not write its manifest (a full disk): it told us
        status, error = finished["status"], finished["error"]
    elif supervisor.killed_during is not None:
        status, error = "interrupted", _killed_error(supervisor)
    elif supervisor.interrupted:
        status, error = "interrupted", None
    elif exit_code is None:
        status, error = "failed", "the training process was stopped before finishing"
    elif exit_code < 0:
        status, error = "failed", f"the training process was killed by signal {signal.Signals(-exit_code).name}"
    else:
        status, error = "failed", f"the training process exited with code {exit_code} before finishing"
    unrecorded = record_manifest(folder, {**recorded, "status": status, "error": error, "finished_at": now_iso()})
    if unrecorded:
        error = f"{error or status}{unrecorded}"
    return status, error


def record_manifest(folder: Path, manifest: dict) -> str:
    """Write `manifest`; on a full disk say why it could not be (to append to the error), else ''."""
    try:
        write_manifest(folder, manifest)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        return f" ({MANIFEST} could not be updated either and still says running)"
    return ""


def _msrun_exit_codes(log_path: Path, pids: dict[int, int]) -> dict[int, int]:
    """rank -> exit code of the ranks msrun saw fail (msrun logs them by process id)."""
    rank_of_pid = {pid: rank for rank, pid in pids.items()}
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return {rank_of_pid[int(pid)]: int(code) for pid, code in MSRUN_WORKER_FAILED.findall(text)
            if int(pid) in rank_of_pid}

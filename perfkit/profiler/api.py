"""Profiling from inside the user's own Python process.

- `perfkit.profiling(folder, skip_first=1)`: a context manager for custom training loops; `prof.step()` ends a step.
- `perfkit.StepTimer`: a `Model.train` callback recording each step's bounds.
- `start_session()`: what `perfkit profile -- python train.py` adds to the script once it imports MindSpore
  (attach.py sets it up at interpreter start): MindData's profiling manager, a StepTimer added to every
  `Model.train`, and the step times, device and error saved at exit.

Step bounds are epoch ns from time.time_ns() (the clock MindSpore's CPU profiler stamps its ops with); a step
runs from the end of the previous one to its own end, so waiting for the next batch falls inside it.
MindSpore is imported only when a profile starts (or `step_timer_class` makes StepTimer, which must subclass
MindSpore's Callback: perfkit.StepTimer on first use).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path

from .runfolder import ANALYSIS_LOG, MINDDATA_DIR, claim, now_iso, read_manifest, script_manifest, write_manifest
from .train import SAVE_STEPS_SECONDS, describe, loss_scale_of

# A schedule needs the length of its recording window; "until the loop ends" is this many steps.
ALL_STEPS = 1 << 30
# How the step bounds of a rank were recorded (manifest "step_timer"); None: they were not, steps come from
# the op timestamps.
TIMER_MODEL_TRAIN = "Model.train callback"
TIMER_API = "perfkit.profiling"
# SIGTERM's default action ends the script without running atexit, which would lose the profile.
EXIT_SIGTERM = 128 + signal.SIGTERM

_session: RankProfile | None = None   # the profile `perfkit profile -- …` made in this process
_active: list[RankProfile] = []       # perfkit.profiling contexts open now, innermost last


class StepLog:
    """The bounds of the steps after the first `skip_first` (and at most `steps` of them)."""

    def __init__(self, skip_first: int = 0, steps: int | None = None):
        self.skip_first = skip_first
        self.steps = steps
        self.done = 0
        self.begin_ns: int | None = None
        self.recorded: list[dict] = []

    def begin(self) -> None:
        self.begin_ns = time.time_ns()

    def end(self) -> bool:
        """A step ended now; True when it was recorded."""
        now = time.time_ns()
        self.done += 1
        recorded = self.begin_ns is not None and self.in_window(self.done)
        if recorded:
            self.recorded.append({"step": len(self.recorded) + 1, "begin_ns": self.begin_ns, "end_ns": now})
        self.begin_ns = now
        return recorded

    def in_window(self, step: int) -> bool:
        return step > self.skip_first and (self.steps is None or step <= self.skip_first + self.steps)


class RankProfile:
    """One rank's profile taken in this process: MindSpore's profiler, MindData's, the step bounds; saved
    into the rank's manifest as steps end (at most every SAVE_STEPS_SECONDS, so a killed run keeps them) and
    when it finishes.

    `env_profiler`: MindSpore's profiler was started at `import mindspore` by MS_PROFILER_OPTIONS (it then
    records from the start, whatever `skip_first` says); otherwise a scheduled one is made on the first step
    timer (Model.train, perfkit.profiling), skipping `skip_first` steps.
    """

    def __init__(self, folder: Path, manifest: dict, log: StepLog, profile_memory: bool, env_profiler: bool):
        self.folder = folder
        self.manifest = manifest
        self.log = log
        self.profile_memory = profile_memory
        self.env_profiler = env_profiler
        self.profiler = None
        self.minddata = None
        self.error: str | None = None
        self.saved_at = 0.0
        self.finished = False

    @property
    def steps(self) -> list[dict]:
        return self.log.recorded

    def start_minddata(self) -> None:
        """MindData's profiling manager: MindSpore's profiler records no dataset data on CPU (and does only
        with data_process on Ascend/GPU, which MS_PROFILER_OPTIONS leaves off)."""
        from mindspore._c_dataengine import GlobalContext

        self.minddata = GlobalContext.profiling_manager()
        self.minddata.init()
        self.minddata.start()

    def timed_by(self, timer: str) -> None:
        """A step timer begins: the first one names how the steps were recorded; make the profiler if needed."""
        if self.manifest.get("step_timer") is None:
            self.manifest["step_timer"] = timer
        if self.profiler is None and not self.env_profiler:
            from mindspore.profiler import profile, schedule, tensorboard_trace_handler

            # The last skipped step is the profiler's warmup (it initialises without recording), as MindSpore
            # advises: the recorded steps are the same, one start-up cost leaves the first of them.
            warmup = 1 if self.log.skip_first else 0
            self.profiler = profile(profile_memory=self.profile_memory, on_trace_ready=tensorboard_trace_handler(
                str(self.folder)), schedule=schedule(wait=0, warmup=warmup, active=self.log.steps or ALL_STEPS,
                                                     repeat=1, skip_first=self.log.skip_first - warmup))
        self.log.begin()

    def step(self) -> None:
        """A step ended: once its device work is done (MindSpore returns from a step before its kernels end,
        which would put them in the next step's bounds)."""
        _wait_for_device()
        if self.log.end():
            self.save(every=SAVE_STEPS_SECONDS)
        with self.analysing():  # the step that ends the profiler's window analyses it
            if self.profiler is not None:
                self.profiler.step()
            elif self.env_profiler and self.log.steps is not None and \
                    self.log.done == self.log.skip_first + self.log.steps:
                self.stop_profiler()
        self.log.begin_ns = time.time_ns()  # the profiler's bookkeeping belongs to no step

    def save(self, every: float = 0.0) -> None:
        if time.monotonic() - self.saved_at >= every:
            write_manifest(self.folder, {**self.manifest, "steps": self.steps})
            self.saved_at = time.monotonic()

    def analysing(self):
        """Where MindSpore's profiler may analyse what it recorded: under `perfkit profile -- …` its output (a
        progress bar) goes to the run folder's ANALYSIS_LOG, not into the script's."""
        return _output_to(self.folder / ANALYSIS_LOG) if self is _session else contextlib.nullcontext()

    def stop_profiler(self) -> None:
        """Stop MindSpore's profiler; it then analyses what it recorded into `*_ascend_ms/`."""
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None
        elif self.env_profiler:
            from mindspore.profiler.envprofiler import EnvProfiler

            if EnvProfiler.profiler is not None:
                EnvProfiler.profiler.stop()
                EnvProfiler.profiler = None  # its __del__ would stop it again at exit
            self.env_profiler = False

    def finish(self, status: str | None = None, error: str | None = None) -> None:
        """Stop the profilers, save MindData's profile, write the manifest (status None: the caller settles it)."""
        if self.finished:
            return
        self.finished = True
        self.save()  # MindSpore's analysis below may fill the disk: the step times first
        with self.analysing():
            self.stop_profiler()
        if self.minddata is not None:
            self.minddata.stop()
            (self.folder / MINDDATA_DIR).mkdir(exist_ok=True)
            self.minddata.save(str(self.folder / MINDDATA_DIR))
        import mindspore as ms

        self.manifest.update(device=ms.get_context("device_target"), mindspore_version=ms.__version__,
                             used={**self.manifest.get("used", {}), **used_mode(ms)}, steps=self.steps,
                             error=error or self.error)
        if status is not None:
            self.manifest.update(status=status, finished_at=now_iso())
        write_manifest(self.folder, self.manifest)


@contextlib.contextmanager
def _output_to(path: Path):
    """This process's stdout and stderr (file descriptors 1 and 2, so its children's too) appended to `path`
    while the block runs; left as they are where they cannot be (a closed descriptor, an unwritable folder):
    the profile matters more than where MindSpore's progress bar goes."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:
        yield
        return
    try:
        log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        for original in saved:
            os.close(original)
        yield
        return
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        for target, original in zip((1, 2), saved):
            os.dup2(original, target)
            os.close(original)
        os.close(log)


def used_mode(ms) -> dict:
    """How the training step ran, for the manifest's `used`: `mode` graph when it ran as compiled graphs (the
    GRAPH_MODE context, or a function of the script's under @ms.jit in a PyNative context), pynative when op by
    op; `context_mode` and `jit_functions` (the script's functions @ms.jit compiled) say which.

    The op names agree (a step under @ms.jit names its backward kernels `Gradients/Default/Grad_Conv2D/...` as
    graph mode does; PyNative's are `Default/Conv2DBackpropFilter-op1` or a bare `ReluGrad`: tests/runs/
    cpu_2_10_jit_loop, cpu_2_10_unmarked_loop), but the manifest is read first, so it must say the same.
    """
    context = "graph" if ms.get_context("mode") == ms.GRAPH_MODE else "pynative"
    own = Path(ms.__file__).resolve().parent
    functions = sorted({name for name, file in map(_jit_function, _jit_compiled())
                        if file is not None and own not in Path(file).resolve().parents})
    return {"mode": "graph" if context == "graph" or functions else "pynative", "context_mode": context,
            "jit_functions": functions}


# MindSpore 2.10 names a compiled @ms.jit function `<module>.<name>.<file>.<line>.<created>…`, the file's path
# absolute (mindspore/graph/api.py, _JitExecutor._get_generate_name).
JIT_PHASE = re.compile(r"^(?P<qualified>\w+(?:\.\w+)*)\.(?P<file>(?:/|[A-Za-z]:\\).*?\.py)\.\d+\.")


def _jit_function(phase: str) -> tuple[str, str | None]:
    """A compiled phase's function name and the file it is defined in (None where the phase says neither: a
    MindSpore that names phases otherwise)."""
    match = JIT_PHASE.match(phase)
    return (match["qualified"].rsplit(".", 1)[-1], match["file"]) if match else (phase, None)


def _jit_compiled() -> set[str]:
    """The phases @ms.jit compiled in this process: MindSpore's own cache of them (its optimizers' construct is
    among them when it runs on its own, in PyNative), empty where this MindSpore keeps it elsewhere."""
    for module in ("mindspore.graph.api", "mindspore.common.api"):
        try:
            return {str(phase) for phase in getattr(importlib.import_module(module), "ms_compile_cache", ())}
        except ImportError:
            continue
    return set()


# What MindSpore's profiler logs as a warning on every run perfkit makes, and why each is harmless. Dropped from
# its log by quiet_profiler_warnings (these exact messages only; every other warning still shows):
HARMLESS_PROFILER_WARNINGS = (
    # A profile recorded until the script ends has no schedule cycle to complete: stopping it runs what the end
    # of a cycle runs (stop, finalize, analyse into *_ascend_ms/, clear), so nothing is left unparsed.
    "Incorrect schedule: Stop profiler while current state is RECORD",
    # MS_PROFILER_OPTIONS' profiler (EnvProfiler) is started by its own constructor, then started again.
    "The profile has already started",
    # The schedule MindSpore gives a profiler without one (MS_PROFILER_OPTIONS takes none), and ours with
    # --warmup 0 / skip_first=0: nothing is skipped, so no step is left to warm up in.
    "Profiler won't be using warmup",
)


class _HarmlessWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(HARMLESS_PROFILER_WARNINGS)


def quiet_profiler_warnings() -> None:
    """Keep HARMLESS_PROFILER_WARNINGS out of MindSpore's log in this process (its other messages stay)."""
    from mindspore import log

    logger = log._get_logger()  # MindSpore's one logger (mindspore/log.py): a logging.Logger
    if not any(isinstance(existing, _HarmlessWarnings) for existing in logger.filters):
        logger.addFilter(_HarmlessWarnings())


def _wait_for_device() -> None:
    """Block until the kernels launched so far have run. What Model.train itself does between steps in
    PyNative mode (its _StepSync callback); ms.runtime.synchronize() refuses the CPU."""
    from mindspore.graph.api import _pynative_executor

    _pynative_executor.sync()


class _Profiling:
    """What `with perfkit.profiling(…) as prof` gives: `prof.step()` at the end of each training step."""

    def __init__(self, profile: RankProfile, owned: bool):
        self.profile = profile
        self.owned = owned  # False under `perfkit profile -- …`, which owns the run and finishes it

    @property
    def folder(self) -> Path:
        return self.profile.folder

    @property
    def steps(self) -> list[dict]:
        """The recorded steps: {"step", "begin_ns", "end_ns"} each."""
        return self.profile.steps

    def step(self) -> None:
        self.profile.step()

    def __enter__(self) -> _Profiling:
        _active.append(self.profile)
        self.profile.timed_by(TIMER_API)
        return self

    def __exit__(self, kind, exc, traceback) -> None:
        _active.remove(self.profile)
        if not self.owned:
            return
        if exc is None:
            self.profile.finish("ok")
        elif isinstance(exc, KeyboardInterrupt):
            self.profile.finish("interrupted")
        else:
            self.profile.finish("failed", describe(exc))


def profiling(folder: str | os.PathLike = "./profiler_v1", skip_first: int = 1, steps: int | None = None,
              profile_memory: bool = False) -> _Profiling:
    """Profile a custom training loop; call `prof.step()` at the end of each step.

    MindSpore's profiler runs with a schedule that skips the first `skip_first` steps (graph compilation)
    and records `steps` of them (all by default); MindData's profile, the step bounds and a manifest go into a
    run folder that `perfkit summary`/`dash` read. An existing folder is never overwritten: the next free
    name is used (`prof.folder` says which). Under `perfkit profile -- python train.py` the command's run
    folder and profiler are used instead, and only the step bounds are taken from here.

        with perfkit.profiling("runs/exp1", skip_first=1) as prof:
            for x, y in dataset.create_tuple_iterator():
                train_step(x, y)
                prof.step()
    """
    if skip_first < 0 or (steps is not None and steps < 1):
        raise ValueError("skip_first must be 0 or more and steps at least 1")
    quiet_profiler_warnings()
    if _session is not None:
        _session.log.skip_first = max(_session.log.skip_first, skip_first)
        if _session.log.steps is None:
            _session.log.steps = steps
        return _Profiling(_session, owned=False)
    requested = Path(folder).expanduser()
    target = claim(requested)
    if target != requested:
        print(f"perfkit: {requested} exists (never overwritten): writing to {target}", file=sys.stderr)
    script = Path(sys.argv[0]) if sys.argv and Path(sys.argv[0]).is_file() else None
    manifest = script_manifest([sys.executable, *sys.argv], {}, script, ranks=1)
    manifest["config"] = {"skip_first": skip_first, "steps": steps, "profile_memory": profile_memory}
    write_manifest(target, manifest)
    profile = RankProfile(target, manifest, StepLog(skip_first, steps), profile_memory, env_profiler=False)
    profile.start_minddata()
    _record_batch_size_of_iterated_datasets()
    return _Profiling(profile, owned=True)


def _timer_target(given: RankProfile | _Profiling | None) -> RankProfile | None:
    if isinstance(given, _Profiling):
        return given.profile
    return given or (_active[-1] if _active else _session)


@functools.cache
def step_timer_class() -> type:
    """StepTimer, made on first use: it must subclass MindSpore's Callback, and `import perfkit` must not
    import MindSpore."""
    from mindspore.train import Callback

    class StepTimer(Callback):
        """A `Model.train` callback recording each step's bounds (epoch ns).

        Inside `perfkit.profiling(…)` (or under `perfkit profile -- …`) the steps go into that run; otherwise
        they are kept in `timer.steps`. `skip_first` applies to the latter (a run has its own).

            model.train(2, dataset, callbacks=[perfkit.StepTimer()])
        """

        def __init__(self, profile: RankProfile | _Profiling | None = None, skip_first: int = 0):
            super().__init__()
            self.profile = _timer_target(profile)
            self.log = self.profile.log if self.profile is not None else StepLog(skip_first)

        @property
        def steps(self) -> list[dict]:
            return self.log.recorded

        def on_train_begin(self, run_context):
            if self.profile is not None:
                self.profile.timed_by(TIMER_MODEL_TRAIN)
            else:
                self.log.begin()

        def on_train_step_end(self, run_context):
            if self.profile is not None:
                self.profile.step()
            else:
                _wait_for_device()
                self.log.end()

    return StepTimer


# ---- `perfkit profile -- python train.py`: the script's side, once it imports MindSpore (attach.py) ----------

def start_session(job: dict, folder: Path, model_module) -> None:
    """`import mindspore` reached mindspore.train.model in a process attach() set up: make the rank's profile,
    start MindData's profiling, time Model.train, record the script's exception, and finish the profile at
    exit (atexit also runs after an uncaught exception, sys.exit and Ctrl-C)."""
    global _session
    quiet_profiler_warnings()
    manifest = read_manifest(Path(job["output"]))
    if job["msrun"]:
        manifest.update(rank=int(os.environ.get("RANK_ID", "0")), notes=[])
    manifest["attached_at"] = now_iso()  # the script imported MindSpore: perfkit profile tells it from one that did not
    write_manifest(folder, manifest)
    _session = RankProfile(folder, manifest, StepLog(job["skip_first"], job["steps"]), job["profile_memory"],
                           env_profiler=job["skip_first"] == 0)
    previous_hook = sys.excepthook

    def record_and_show(kind, exc, traceback):
        _session.error = describe(exc)
        previous_hook(kind, exc, traceback)  # the traceback is the user's, shown as Python shows it

    sys.excepthook = record_and_show
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(EXIT_SIGTERM))
    _session.start_minddata()
    atexit.register(_finish_session)
    original = model_module.Model.train

    @functools.wraps(original)
    def train(self, epoch, train_dataset, callbacks=None, *args, **kwargs):
        # Said now, not at the timer's first call: a script can fail inside Model.train before any step begins
        # (a dataset error), and must not then read that it never called Model.train.
        if _session.manifest.get("step_timer") is None:
            _session.manifest["step_timer"] = TIMER_MODEL_TRAIN
        _note_batch_size(train_dataset)  # a sunk dataset is never iterated from Python
        _note_loss_scale(self)
        return original(self, epoch, train_dataset, _with_step_timer(callbacks), *args, **kwargs)

    model_module.Model.train = train
    _record_batch_size_of_iterated_datasets()


@functools.cache
def _record_batch_size_of_iterated_datasets() -> None:
    """Record in the manifest's config the batch size of the first batched dataset the script iterates (custom
    loops: `for x, y in data.create_tuple_iterator()`) or trains on (Model.train): the files do not tell it, and
    compare's per-sample times and the batch-size advice need it. Once a process (functools.cache)."""
    from mindspore.dataset.engine import datasets

    for method in ("create_tuple_iterator", "create_dict_iterator"):
        original = getattr(datasets.Dataset, method)

        @functools.wraps(original)
        def iterator(self, *args, _original=original, **kwargs):
            _note_batch_size(self)
            return _original(self, *args, **kwargs)

        setattr(datasets.Dataset, method, iterator)


def _note_batch_size(dataset) -> None:
    """Into the profile being taken (the innermost perfkit.profiling, else `perfkit profile`'s), if it has none."""
    profile = _timer_target(None)
    if profile is None:
        return
    config = profile.manifest.setdefault("config", {})
    if "batch_size" not in config:
        batch = batch_size_of(dataset)
        if batch is not None:
            config["batch_size"] = batch


def _note_loss_scale(model) -> None:
    """Into the profile being taken (its manifest's config), the first Model.train's loss scaling (loss_scale_of)."""
    profile = _timer_target(None)
    if profile is not None:
        profile.manifest.setdefault("config", {}).setdefault("loss_scale", loss_scale_of(model))


def batch_size_of(dataset) -> int | None:
    """The batch size of the batch op nearest the end of a MindData pipeline (`data.batch(32)` -> 32); None
    without one, or where the size is a function of the batch (per_batch_map's callable)."""
    pending = [dataset]
    while pending:
        node = pending.pop(0)
        if type(node).__name__ in ("BatchDataset", "PaddedBatchDataset"):
            size = getattr(node, "batch_size", None)
            return size if isinstance(size, int) and getattr(node, "batch_size_func", None) is None else None
        pending.extend(getattr(node, "children", None) or [])
    return None


def _finish_session() -> None:
    """Finish the profile at exit, deaf to SIGINT/SIGTERM: a Ctrl-C passed on by perfkit during MindSpore's
    analysis would otherwise cut it (and MindData's save) short; a second Ctrl-C makes perfkit kill us."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    _session.finish()


def _with_step_timer(callbacks):
    step_timer = step_timer_class()
    given = [] if callbacks is None else list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    if any(isinstance(callback, step_timer) for callback in given):
        return callbacks  # the script times its steps itself
    return [*given, step_timer(_session)]

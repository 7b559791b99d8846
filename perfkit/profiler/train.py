"""The training process `perfkit profile` starts: `python -m perfkit.profiler.train JOB.json`.

It runs in its own process so that `--env` settings (ONEDNN_MAX_CPU_ISA and the like, read when
MindSpore loads) take effect, so that Ctrl-C can be forwarded to it, and so that the parent can
draw progress from the events it appends to a progress file (one JSON object per line).
Under `--ranks N` msrun starts one of these per rank; RANK_ID tells which.

Exit codes: 0 trained (or interrupted under msrun, see EXIT_INTERRUPTED), 2 the device is not
usable (nothing was written), 130 interrupted, 1 anything else (the traceback is in train.log; a
full disk is recorded in the manifest and in the `finished` event, which does not need the disk).
"""

from __future__ import annotations

import ctypes
import errno
import json
import multiprocessing
import os
import resource
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..core import boundedjson
from ..core.host import capped_workers
from ..core.units import BYTES_PER_MB
from ..io.formats.manifest import DEVICES
from .runfolder import MINDDATA_DIR, TRAIN_LOG, is_disk_full, now_iso, read_manifest, write_error, write_manifest

EXIT_DEVICE = 2
# msrun SIGKILLs every rank as soon as one exits non-zero, which would cut the others' profiler
# analysis short; under msrun an interrupted rank exits 0 and the manifest carries the status.
EXIT_INTERRUPTED = 130
# MindSpore's resnet model-zoo configs train with this loss scale; the seed passes it with
# drop_overflow_update=False, which also keeps amp_level O2 working on CPU.
LOSS_SCALE = 1024.0
LEARNING_RATE = 0.001
WEIGHT_DECAY = 1e-5
NUM_CLASSES = 10
# The seed resizes CIFAR-10 to 224 (ImageNet's input size) on Ascend; ResNet-50 at 224 takes seconds
# per step on a CPU, so CPU runs stay at CIFAR's native 32 and the default run ends in about a minute.
IMAGE_SIZE_ACCELERATOR = 224
IMAGE_SIZE_CPU = 32
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Profiled steps are saved to the manifest as they end, at most this often: a write takes ~2 ms per 100
# steps and falls into the next step's time, so saving after every step would skew long runs.
SAVE_STEPS_SECONDS = 1.0


class Progress:
    """Events for the parent's progress bars, appended to this rank's progress file."""

    def __init__(self, path: Path, rank: int):
        self.handle = open(path, "a", buffering=1)
        self.rank = rank

    def emit(self, event: str, **fields) -> None:
        self.handle.write(json.dumps({"event": event, "rank": self.rank, "pid": os.getpid(), **fields}) + "\n")


def select_device(ms, requested: str) -> str:
    """The device MindSpore will train on; `auto` takes the first of Ascend, GPU, CPU that loads."""
    candidates = DEVICES if requested == "auto" else (requested,)
    reasons = []
    for device in candidates:
        try:
            ms.set_device(device)
        except RuntimeError as exc:
            reasons.append(f"{device}: {first_line(str(exc))}" if requested == "auto" else first_line(str(exc)))
            continue
        return device
    raise DeviceUnavailable("; ".join(reasons))


class DeviceUnavailable(Exception):
    pass


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else text.strip()


def redirect_output(log: Path) -> None:
    """Send this process's stdout and stderr (MindSpore's C++ logs included) to the rank's train.log."""
    handle = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(handle, 1)
    os.dup2(handle, 2)
    os.close(handle)


def signal_when_parent_dies(signum: int) -> None:
    """Have the kernel send `signum` to this process when its parent dies (Linux; elsewhere nothing)."""
    if sys.platform == "linux":
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signum)


def main(argv: list[str]) -> int:
    # Under msrun, a rank (or the scheduler) whose msrun died stops rather than wait or train on alone.
    signal_when_parent_dies(signal.SIGTERM)
    launcher = os.getppid()
    job = boundedjson.loads(Path(argv[0]).read_text())
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return schedule(job)
    ranks = job["ranks"]
    rank = int(os.environ.get("RANK_ID", "0")) if ranks > 1 else 0
    top = Path(job["output"])
    folder = top / f"rank_{rank}" if ranks > 1 else top
    folder.mkdir(exist_ok=True)
    redirect_output(folder / TRAIN_LOG)
    progress = Progress(Path(job["progress_dir"]) / f"rank_{rank}.jsonl", rank)
    trainer = Trainer(job, rank, folder, progress)
    # From the start (importing MindSpore takes seconds). While a step runs, MindSpore's own SIGINT
    # handler is in place and answers Ctrl-C with SIGTERM to this process: that, too, means "stop".
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, trainer.request_stop)
    write_manifest(folder, trainer.manifest)
    progress.emit("started")
    try:
        return trainer.run()
    finally:
        if ranks == 1 and os.getppid() != launcher:
            # perfkit was killed outright (kill -9: its own clean-up never ran) and nobody reads the progress any
            # more: its scratch folder (the job and this file) would stay in the temporary directory for good.
            shutil.rmtree(job["progress_dir"], ignore_errors=True)


def schedule(job: dict) -> int:
    """msrun runs this script once more as the cluster's scheduler: it only joins the ranks together
    (its output goes to msrun's scheduler.log, not into a rank folder)."""
    import mindspore as ms
    from mindspore.communication import init

    try:
        select_device(ms, job["config"]["device"])
    except DeviceUnavailable:
        return EXIT_DEVICE  # the ranks report it
    init()
    return 0


class Trainer:
    def __init__(self, job: dict, rank: int, folder: Path, progress: Progress):
        self.job = job
        self.config = job["config"]
        self.rank = rank
        self.folder = folder
        self.progress = progress
        self.manifest = {**read_manifest(Path(job["output"])), "rank": rank, "rank_size": job["ranks"]}
        self.manifest["notes"] = list(self.manifest["notes"])
        self.steps: list[dict] = []
        self.profiler = None
        self.profiling = False
        self.minddata = None
        self.stop_requested = False
        self.steps_saved_at = 0.0

    def request_stop(self, signum, frame) -> None:
        """Ctrl-C (or SIGTERM): finish the step under way, then stop, stop the profiler and analyse."""
        self.stop_requested = True

    def note(self, text: str) -> None:
        print(f"perfkit: {text}", flush=True)
        if text not in self.manifest["notes"]:
            self.manifest["notes"].append(text)
            self.progress.emit("note", text=text)

    def run(self) -> int:
        import mindspore as ms

        try:
            device = select_device(ms, self.config["device"])
        except DeviceUnavailable as exc:
            self.progress.emit("device_error", device=self.config["device"], message=str(exc))
            return EXIT_DEVICE
        self.progress.emit("device", device=device)
        self.manifest["device"] = device
        self.manifest["mindspore_version"] = ms.__version__
        write_manifest(self.folder, self.manifest)
        try:
            self.train(ms, device)
        except BaseException as exc:
            self.finish("failed", describe(exc))
            if is_disk_full(exc):
                return 1  # said in one line; a traceback would not fit on the disk either
            raise
        status = self.finish("ok", None)
        if status == "interrupted":
            return 0 if self.job["ranks"] > 1 else EXIT_INTERRUPTED
        return 0 if status == "ok" else 1

    def train(self, ms, device: str) -> None:
        from mindspore import nn
        from mindspore.train import Callback, Model

        from .dataset import create_cifar_dataset
        from .resnet import ResNet50

        config = self.config
        graph = config["mode"] == "graph"
        ms.set_context(mode=ms.GRAPH_MODE if graph else ms.PYNATIVE_MODE)
        shard_id = config["shard_id"]
        if self.job["ranks"] > 1:
            from mindspore.communication import init
            init()
            ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
            # Each rank trains on its own shard, as data parallelism does.
            shard_id = (shard_id + self.rank) % config["shards"]
        sink = config["sink"]
        if sink and device == "CPU":
            sink = False
            self.note("dataset sink mode is not available on CPU: trained in feed mode (data fed step by step)")
        amp_level = config["amp_level"]
        if amp_level in ("O2", "O3") and device == "CPU":
            self.note(f"amp_level {amp_level} on CPU: there are no fast float16 kernels here, so this runs "
                      "slower than O0; profiled anyway as asked")
        image_size = config["image_size"]
        if image_size is None:
            image_size = IMAGE_SIZE_CPU if device == "CPU" else IMAGE_SIZE_ACCELERATOR
            self.note(f"image size {image_size}x{image_size}, the default on {device} "
                      f"(--image-size to change; {IMAGE_SIZE_ACCELERATOR} on Ascend/GPU, {IMAGE_SIZE_CPU} on CPU)")
        if self.job["ranks"] > 1:
            self.note(f"rank {self.rank} reads shard {shard_id} of {config['shards']}")
        self.manifest["used"] = {"sink": sink, "amp_level": amp_level, "mode": config["mode"]}

        if device == "CPU":
            # mindspore.Profiler(data_process=True) records no dataset data on CPU; MindData's own manager does.
            from mindspore._c_dataengine import GlobalContext
            self.minddata = GlobalContext.profiling_manager()
            self.minddata.init()
            self.minddata.start()
        workers = config["workers"] and capped_workers(config["workers"], multiprocessing.cpu_count())
        if workers != config["workers"]:
            self.note(f"--workers {config['workers']}: MindSpore allows at most {workers} per dataset op here "
                      f"(the CPU count): used {workers}")
        dataset = create_cifar_dataset(self.job["data_dir"], config["batch_size"], image_size, config["shards"],
                                       shard_id, workers)
        total = config["warmup"] + config["steps"]
        network = ResNet50(num_classes=NUM_CLASSES)
        loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        optimizer = nn.Adam(network.trainable_params(), LEARNING_RATE, weight_decay=WEIGHT_DECAY)
        loss_scale = ms.amp.FixedLossScaleManager(LOSS_SCALE, drop_overflow_update=False)
        model = Model(network, loss_fn=loss, optimizer=optimizer, amp_level=amp_level,
                      loss_scale_manager=loss_scale)
        self.manifest.setdefault("config", {})["loss_scale"] = loss_scale_of(model)
        profile_memory = config["profile_memory"]
        self.profiler = ms.Profiler(start_profile=False, output_path=str(self.folder),
                                    data_process=device != "CPU", profile_memory=profile_memory)
        if profile_memory and device == "CPU":
            # MindSpore's CPU allocator takes host memory: its capacity is the machine's, for the batch-size
            # arithmetic of `perfkit advise` (on Ascend/GPU the profiler files do not say it, nor is it recorded)
            self.manifest["memory_capacity_mb"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / BYTES_PER_MB
        trainer = self

        class StepClock(Callback):
            """Starts the profiler after the warmup steps and stamps each profiled step's wall-clock bounds.

            A step runs from the end of the previous one to its own end, so the time spent waiting for
            the next batch falls inside the step (as the step interval of MindSpore's step trace does).
            """

            def __init__(self):
                super().__init__()
                self.done = 0
                self.begin_ns = None

            def on_train_begin(self, run_context):
                if config["warmup"] == 0:
                    trainer.start_profiler()
                    self.begin_ns = time.time_ns()

            def on_train_step_end(self, run_context):
                self.done += 1
                now = time.time_ns()
                if self.done > config["warmup"]:
                    trainer.steps.append({"step": len(trainer.steps) + 1, "begin_ns": self.begin_ns, "end_ns": now})
                    trainer.save_steps(every=SAVE_STEPS_SECONDS)
                    trainer.progress.emit("step", done=self.done, total=total)
                    if self.done == total:
                        trainer.stop_profiler()
                else:
                    trainer.progress.emit("warmup", done=self.done, total=total)
                if self.done == config["warmup"]:
                    trainer.start_profiler()
                    now = time.time_ns()
                self.begin_ns = now
                if trainer.stop_requested:
                    run_context.request_stop()

        write_manifest(self.folder, self.manifest)
        if self.stop_requested:  # Ctrl-C before training began: nothing to profile
            return
        self.progress.emit("training", total=total)
        if sink:
            model.train(total, dataset, callbacks=[StepClock()], dataset_sink_mode=True, sink_size=1)
        else:
            model.train(1, dataset.take(total), callbacks=[StepClock()], dataset_sink_mode=False)

    def save_steps(self, every: float = 0.0) -> None:
        """Record the steps so far (unless they were less than `every` seconds ago): a rank that is killed,
        or whose disk fills when the profiler writes its files, still leaves its step times."""
        if time.monotonic() - self.steps_saved_at >= every:
            write_manifest(self.folder, {**self.manifest, "steps": self.steps})
            self.steps_saved_at = time.monotonic()

    def stop_profiler(self) -> None:
        if self.profiling:
            self.save_steps()  # the profiler's own files may fill the disk
            self.profiler.stop()
            self.profiling = False

    def start_profiler(self) -> None:
        self.profiler.start()
        self.profiling = True

    def finish(self, status: str, error: str | None) -> str:
        """Stop the profiler, save MindData's profile, analyse, and write the final manifest; return the status.

        MindData's profile is saved before the analysis (the step times are in the manifest already), so
        a run stopped during it keeps them. A stop asked for from here on (our handlers stay: they only set
        a flag, the analysis is never cut short by them) marks an otherwise complete run interrupted.
        A full disk (or `ulimit -f`) fails the run with a one-line error instead of a traceback.
        """
        for signum in (signal.SIGINT, signal.SIGTERM):  # MindSpore's own SIGINT handler may still be in place
            signal.signal(signum, self.request_stop)
        self.progress.emit("finishing", status=status)
        try:
            if self.profiler is not None:
                self.stop_profiler()
            if self.minddata is not None:
                self.minddata.stop()
                md = self.folder / MINDDATA_DIR
                md.mkdir(exist_ok=True)
                self.minddata.save(str(md))
            if self.profiler is not None and self.steps:
                self.progress.emit("analysing")
                self.profiler.analyse()
            check_file_size_limit(self.folder)
        except OSError as exc:
            status, error = self._failure(status, error, exc)
        if status == "ok" and self.stop_requested:
            status = "interrupted"
        self.manifest.update(status=status, error=error, steps=self.steps, finished_at=now_iso())
        try:
            write_manifest(self.folder, self.manifest)
        except OSError as exc:
            status, error = self._failure(status, error, exc)
        # The progress file is outside the run folder: the parent learns the outcome even when the
        # manifest could not be written.
        self.progress.emit("finished", status=status, error=error, steps=len(self.steps))
        return status

    @staticmethod
    def _failure(status: str, error: str | None, exc: OSError) -> tuple[str, str | None]:
        """The outcome after `exc` while finishing: a run that already failed keeps its first error."""
        if status == "failed":
            return status, error
        if not is_disk_full(exc):
            raise exc
        return "failed", write_error(exc)


def describe(exc: BaseException) -> str:
    if is_disk_full(exc):
        return write_error(exc)
    return f"{type(exc).__name__}: {first_line(str(exc))}"


def check_file_size_limit(folder: Path) -> None:
    """Raise EFBIG for a file cut at the file size limit (`ulimit -f`): MindSpore's C++ writers do not say."""
    limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit == resource.RLIM_INFINITY:
        return
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.stat().st_size >= limit:
            raise OSError(errno.EFBIG, f"File too large (the file size limit, ulimit -f, is {limit} bytes; "
                                       "the file is cut there)", str(path))


def loss_scale_of(model) -> dict[str, Any]:
    """How a Model scales its loss (the manifest's `config.loss_scale`, docs/migration.md): the loss scale manager
    given to it (FixedLossScaleManager, DynamicLossScaleManager; None: none), its scale and whether an overflow
    drops the update, and the Cell that trains one step (TrainOneStepWithLossScaleCell checks for overflow)."""
    manager = getattr(model, "_loss_scale_manager", None)
    network = getattr(model, "_train_network", None)
    record: dict[str, Any] = {"manager": None if manager is None else type(manager).__name__,
                              "train_cell": None if network is None else type(network).__name__}
    if manager is not None:
        record["scale"] = float(manager.get_loss_scale())
        record["drop_overflow_update"] = bool(manager.get_drop_overflow_update())
    return record


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


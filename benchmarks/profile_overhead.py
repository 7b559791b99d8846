"""What `perfkit profile` costs on top of profiling by hand.

Times `perfkit profile` end to end (child process, MindData profiling, manifest, progress, and the
final load + summary) against a bare MindSpore script that trains the same network on the same
data with the same config and the profiler on for the same steps (started after the warmup step,
analysed at the end) and does nothing else. Each measurement is a fresh process; the two are
alternated so drift on the machine hits both. Target: ratio of medians <= 1.15.

    python benchmarks/profile_overhead.py --out benchmarks/results/profile_overhead.txt
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.15  # the bound on perfkit's own overhead

# The default `perfkit profile` run on CPU: 1 warmup + 3 profiled steps of 32 images at 32x32, shard 0 of 40.
STEPS, WARMUP, BATCH, IMAGE, SHARDS = 3, 1, 32, 32, 40

BARE = f"""
import sys
import mindspore as ms
from mindspore import nn
from mindspore.train import Callback, Model
from perfkit.profiler.dataset import create_cifar_dataset
from perfkit.profiler.resnet import ResNet50

ms.set_device("CPU")
ms.set_context(mode=ms.GRAPH_MODE)
dataset = create_cifar_dataset(sys.argv[1], {BATCH}, {IMAGE}, {SHARDS}, 0, None).take({WARMUP + STEPS})
network = ResNet50(num_classes=10)
model = Model(network, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=nn.Adam(network.trainable_params(), 0.001, weight_decay=1e-5), amp_level="O0",
              loss_scale_manager=ms.amp.FixedLossScaleManager(1024.0, drop_overflow_update=False))
profiler = ms.Profiler(start_profile=False, output_path=sys.argv[2])

class AfterWarmup(Callback):
    def on_train_step_end(self, run_context):
        if run_context.original_args().cur_step_num == {WARMUP}:
            profiler.start()

model.train(1, dataset, callbacks=[AfterWarmup()], dataset_sink_mode=False)
profiler.stop()
profiler.analyse()
"""


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import mindspore  # only to name the version measured
    return (f"{cpu}, {os.cpu_count()} cores, {memory_gb:.0f} GB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, MindSpore {mindspore.__version__} (CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()

    from perfkit.profiler import cifar
    data = cifar.synthetic()  # made once beforehand so neither side pays for it
    perfkit_times, bare_times = [], []
    with tempfile.TemporaryDirectory(prefix="perfkit-overhead-") as scratch:
        work = Path(scratch)
        script = work / "bare.py"
        script.write_text(BARE)
        for repeat in range(args.repeats):
            perfkit_times.append(timed([sys.executable, "-m", "perfkit", "profile", "--data-path", str(data),
                                        "--steps", str(STEPS), "--warmup", str(WARMUP), "--batch-size", str(BATCH),
                                        "--image-size", str(IMAGE), "--shards", str(SHARDS),
                                        "--output", f"perfkit_{repeat}"], work))
            bare_times.append(timed([sys.executable, str(script), str(data), str(work / f"bare_{repeat}")], work))
            print(f"repeat {repeat + 1}: perfkit profile {perfkit_times[-1]:.2f} s, bare {bare_times[-1]:.2f} s",
                  file=sys.stderr)
    ratio = statistics.median(perfkit_times) / statistics.median(bare_times)
    # The fastest of each is the least disturbed by whatever else the machine was doing.
    best_ratio = min(perfkit_times) / min(bare_times)
    lines = [
        "perfkit profile vs a bare MindSpore script with the profiler on (wall time, fresh process each)",
        f"machine: {machine()}",
        f"config: ResNet-50, CIFAR-10 binary (synthetic), {WARMUP} warmup + {STEPS} profiled steps, "
        f"batch {BATCH}, {IMAGE}x{IMAGE}, shard 0 of {SHARDS}, graph mode, feed mode, O0",
        f"repeats: {args.repeats}, alternated",
        f"perfkit profile  s: {' '.join(f'{t:.2f}' for t in perfkit_times)}  median {statistics.median(perfkit_times):.2f}"
        f"  min {min(perfkit_times):.2f}",
        f"bare script      s: {' '.join(f'{t:.2f}' for t in bare_times)}  median {statistics.median(bare_times):.2f}"
        f"  min {min(bare_times):.2f}",
        f"ratio of medians: {ratio:.3f}, of minima: {best_ratio:.3f} "
        f"(target <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'NOT met'} by the medians)",
    ]
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)


if __name__ == "__main__":
    main()

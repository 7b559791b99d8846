"""Makes the real MindSpore 2.10 CPU runs under tests/runs/cpu_2_10_{pynative_loop,repeat2,dynamic,msrun2}: the run
structures perfkit had never seen (issue 23). One small conv net (conv-bn-relu-pool twice, dense to 10 classes), batch
16 at 32x32, random data, a custom training loop with `value_and_grad`; each run takes well under a minute on 2 cores.

    python tests/scripts/diag_runs.py pynative_loop OUT  # PyNative, profiler schedule(warmup=1, active=3): 3 steps
    python tests/scripts/diag_runs.py repeat2 OUT        # graph (@ms.jit), schedule(wait=1, active=2, repeat=2): 2 folders
    python tests/scripts/diag_runs.py dynamic OUT        # graph, DynamicProfilerMonitor windows start3_stop4, start12_stop13
    PATH=.venv/bin:$PATH msrun --worker_num=2 --local_worker_num=2 --master_port=8129 --log_dir=OUT/msrun --join=True \
        tests/scripts/diag_runs.py msrun2 OUT            # 2 ranks data parallel (AllReduce of the gradients), schedule(active=3)

Set ONEDNN_MAX_CPU_ISA=AVX2 (oneDNN picks reference 3x3 convolutions on AVX-512 hosts otherwise)."""

import json
import os
import sys
import time

import mindspore as ms
import numpy as np
from common import Net, momentum, train_step
from mindspore.profiler import DynamicProfilerMonitor, ProfilerActivity, profile, schedule, tensorboard_trace_handler

BATCH, CLASSES = 16, 10


def batches(count: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield (ms.Tensor(rng.standard_normal((BATCH, 3, 32, 32), dtype=np.float32)),
               ms.Tensor(rng.integers(0, CLASSES, BATCH).astype(np.int32)))


def conv_net_step(jit: bool, reduce_grads: bool = False):
    net = Net(CLASSES)
    return train_step(net, momentum(net), jit, reduce_grads)


def scheduled(out: str, steps: int, step_schedule, jit: bool, seed: int = 0, reduce_grads: bool = False):
    step = conv_net_step(jit, reduce_grads)
    with profile(activities=[ProfilerActivity.CPU], schedule=step_schedule,
                 on_trace_ready=tensorboard_trace_handler(out)) as prof:
        for x, y in batches(steps, seed):
            step(x, y).asnumpy()  # wait for the step (graph mode runs asynchronously)
            prof.step()


def dynamic(out: str):
    """Two windows of one run: steps 3-4, then (the config file changed mid-run) steps 12-13."""
    cfg_dir = os.path.join(out, "cfg")
    os.makedirs(cfg_dir, exist_ok=True)
    cfg = {"start_step": 3, "stop_step": 4, "activities": ["CPU"], "analyse": True, "export_type": ["text"],
           "prof_path": out}
    cfg_file = os.path.join(cfg_dir, "profiler_config.json")
    with open(cfg_file, "w") as f:
        json.dump(cfg, f)
    monitor = DynamicProfilerMonitor(cfg_path=cfg_dir, output_path=out, poll_interval=1)
    time.sleep(3)  # the monitor's process reads the file every poll_interval seconds
    step = conv_net_step(jit=True)
    for index, (x, y) in enumerate(batches(15, 0), start=1):
        step(x, y).asnumpy()
        if index == 7:
            with open(cfg_file, "w") as f:
                json.dump(dict(cfg, start_step=12, stop_step=13), f)
            time.sleep(3)
        monitor.step()


def main(kind: str, out: str):
    ms.set_context(mode=ms.PYNATIVE_MODE if kind == "pynative_loop" else ms.GRAPH_MODE, device_target="CPU")
    if kind == "pynative_loop":
        scheduled(out, 4, schedule(wait=0, warmup=1, active=3, repeat=1), jit=False)
    elif kind == "repeat2":
        scheduled(out, 6, schedule(wait=1, warmup=0, active=2, repeat=2), jit=True)
    elif kind == "dynamic":
        dynamic(out)
    elif kind == "msrun2":
        from mindspore.communication import get_group_size, get_rank, init
        init()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                     device_num=get_group_size())
        rank = get_rank()
        scheduled(os.path.join(out, f"rank_{rank}"), 5, schedule(wait=1, warmup=1, active=3, repeat=1), jit=True,
                  seed=rank, reduce_grads=True)
    else:
        sys.exit(f"unknown run kind {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

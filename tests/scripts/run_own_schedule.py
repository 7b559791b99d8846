"""A user's own profiler in a custom loop: mindspore.profiler.profile with schedule(skip_first=1, wait=1, warmup=1,
active=2, repeat=2) and tensorboard_trace_handler, a @ms.jit train step of a small MLP on tensors made once, each
step's loss read with .asnumpy() before prof.step() (tests/runs/cpu_2_10_own_schedule, its SOURCE.txt).

    python tests/scripts/run_own_schedule.py OUT     # writes OUT/vm_{pid}_{time}_ascend_ms, one per cycle
"""

import sys

import numpy as np

import mindspore as ms
from common import mlp, momentum, train_step
from mindspore.profiler import schedule, tensorboard_trace_handler

STEPS = 12


def main(out: str) -> None:
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    net = mlp(256, 512, 10)
    step = train_step(net, momentum(net), jit=True)
    x = ms.Tensor(np.random.rand(64, 256).astype(np.float32))
    y = ms.Tensor(np.random.randint(0, 10, (64,)).astype(np.int32))
    with ms.profiler.profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1),
                             on_trace_ready=tensorboard_trace_handler(out)) as prof:
        for _ in range(STEPS):
            loss = step(x, y)
            loss.asnumpy()
            prof.step()


if __name__ == "__main__":
    main(sys.argv[1])

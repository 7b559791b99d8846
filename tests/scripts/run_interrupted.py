"""A PyNative custom loop, steps marked with perfkit.profiling, that trains until it is stopped: the run behind
tests/runs/cpu_2_10_interrupted, stopped with Ctrl-C (SIGINT to `perfkit profile`, which passes it on) after its
third recorded step. A 3-layer MLP (64 features, 256 hidden, 4 classes), a `data.batch(16)` pipeline.

    perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2 --output OUT -- python tests/scripts/run_interrupted.py
    (then Ctrl-C, or: kill -INT <perfkit's pid>, once OUT/perfkit_run.json holds 3 steps)
"""

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

import perfkit

BATCH, CLASSES, FEATURES = 16, 4, 64


def samples():
    rng = np.random.default_rng(0)
    while True:
        yield rng.standard_normal(FEATURES, dtype=np.float32), np.array(rng.integers(0, CLASSES), np.int32)


data = ds.GeneratorDataset(samples, ["x", "y"], shuffle=False).batch(BATCH)
net = nn.SequentialCell([nn.Dense(FEATURES, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(), nn.Dense(256, CLASSES)])
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

with perfkit.profiling(skip_first=1) as prof:
    for x, y in data.create_tuple_iterator():
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        prof.step()

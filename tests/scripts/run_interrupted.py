"""A PyNative custom loop, steps marked with perfkit.profiling, that trains until it is stopped: the run behind
tests/runs/cpu_2_10_interrupted, stopped with Ctrl-C (SIGINT to `perfkit profile`, which passes it on) after its
third recorded step. A 3-layer MLP (64 features, 256 hidden, 4 classes), a `data.batch(16)` pipeline.

    perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2 --output OUT -- python tests/scripts/run_interrupted.py
    (then Ctrl-C, or: kill -INT <perfkit's pid>, once OUT/perfkit_run.json holds 3 steps)
"""

import mindspore.dataset as ds
import numpy as np
from common import mlp, momentum, train_step

import perfkit

BATCH, CLASSES, FEATURES = 16, 4, 64


def samples():
    rng = np.random.default_rng(0)
    while True:
        yield rng.standard_normal(FEATURES, dtype=np.float32), np.array(rng.integers(0, CLASSES), np.int32)


data = ds.GeneratorDataset(samples, ["x", "y"], shuffle=False).batch(BATCH)
net = mlp(FEATURES, 256, 256, CLASSES)
step = train_step(net, momentum(net))

with perfkit.profiling(skip_first=1) as prof:
    for x, y in data.create_tuple_iterator():
        step(x, y)
        prof.step()

"""A graph-mode Model.train whose dataset map sleeps 8 ms a sample in Python with num_parallel_workers=2 (as many
as the 2-CPU host it ran on has): the device waits for data, and more map workers are not allowed on that host.
Makes tests/runs/cpu_2_10_data_bound:

    perfkit profile --output OUT -- python tests/scripts/run_data_bound.py

An MLP (16 -> 32 -> 4), batch 16, 30 steps (more than the pipeline can prefetch while the first step compiles),
feed mode."""

import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

BATCH, STEPS, MAP_WORKERS, SLEEP_S = 16, 30, 2, 0.008


class Samples:
    """Random access, each item a tuple of arrays (NumPy 2 refuses the scalars NumpySlicesDataset would yield)."""

    def __init__(self, count: int):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((count, 16), dtype=np.float32)
        self.y = rng.integers(0, 4, size=count).astype(np.int32)

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


def slow_decode(x):
    time.sleep(SLEEP_S)  # what a slow per-sample decode or augmentation costs
    return x


ms.set_context(mode=ms.GRAPH_MODE)
data = ds.GeneratorDataset(Samples(BATCH * STEPS), ["x", "y"], shuffle=False)
data = data.map(operations=slow_decode, input_columns=["x"], num_parallel_workers=MAP_WORKERS).batch(BATCH)
net = nn.SequentialCell([nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 4)])
model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
model.train(1, data, dataset_sink_mode=False)
print("trained")

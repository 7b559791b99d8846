"""A graph-mode Model.train in feed mode whose train callback burns ~100 ms of Python per step (a user's logging or
metrics done the slow way): the device waits between steps with a full queue, the time is host work in the loop.
Makes tests/runs/cpu_2_10_slow_callback:

    perfkit profile --output OUT -- python tests/scripts/run_slow_callback.py

An MLP (3072 -> 1024 -> 10), batch 64 of 32x32 images, random data, 8 steps."""

import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Callback, Model

BATCH, CLASSES, STEPS = 64, 10, 8
CALLBACK_MS = 100

class Samples:
    """Random access (sharding needs it), each item a tuple of arrays (NumPy 2 refuses the scalars
    NumpySlicesDataset would yield)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)



class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.features = nn.SequentialCell([nn.Flatten(), nn.Dense(3 * 32 * 32, 1024), nn.ReLU()])
        self.head = nn.Dense(1024, CLASSES)

    def construct(self, x):
        return self.head(self.features(x))


class SlowLogging(Callback):
    """Busy Python after every step: what a per-step metric computed in a Python loop costs."""

    def on_train_step_end(self, run_context):
        end = time.perf_counter() + CALLBACK_MS / 1000
        total = 0
        while time.perf_counter() < end:
            total += sum(range(200))


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH * STEPS, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, CLASSES, BATCH * STEPS).astype(np.int32)
    return ds.GeneratorDataset(Samples(x, y), ["x", "y"], shuffle=False).batch(BATCH)


ms.set_context(mode=ms.GRAPH_MODE)
net = Net()
model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
model.train(1, data(), callbacks=[SlowLogging()], dataset_sink_mode=False)
print("trained")

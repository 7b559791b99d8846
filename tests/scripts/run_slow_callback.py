"""A graph-mode Model.train in feed mode whose train callback burns ~100 ms of Python per step (a user's logging or
metrics done the slow way): the device waits between steps with a full queue, the time is host work in the loop.
Makes tests/runs/cpu_2_10_slow_callback:

    perfkit profile --output OUT -- python tests/scripts/run_slow_callback.py

An MLP (3072 -> 1024 -> 10), batch 64 of 32x32 images, random data, 8 steps."""

import time

import mindspore as ms
import mindspore.dataset as ds
from common import Samples, model
from mindspore import nn
from mindspore.train import Callback

BATCH, CLASSES, STEPS = 64, 10, 8
CALLBACK_MS = 100


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


ms.set_context(mode=ms.GRAPH_MODE)
data = ds.GeneratorDataset(Samples(BATCH * STEPS, (3, 32, 32), CLASSES), ["x", "y"], shuffle=False).batch(BATCH)
model(Net()).train(1, data, callbacks=[SlowLogging()], dataset_sink_mode=False)
print("trained")

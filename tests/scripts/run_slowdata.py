"""A data-bound training script: the tiny MLP of tests/scripts/tiny.py trained with Model.train (graph mode) on a
dataset whose samples take 4 ms each to produce (a sleep standing in for decoding), batches of 16: each step waits
about 64 ms for its batch while the network computes in under 1 ms. Profiled with `perfkit profile --` it makes
tests/runs/cpu_2_10_slowdata, whose step interval every view calls data wait."""

import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model
from tiny import loss, network

SAMPLE_S, BATCH, BATCHES = 0.004, 16, 8


class SlowSamples:
    """Random samples, each taking SAMPLE_S to produce; labels are arrays (GeneratorDataset rejects NumPy 2
    scalars)."""

    def __init__(self, count: int):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((count, 16), dtype=np.float32)
        self.y = rng.integers(0, 4, size=count).astype(np.int32)

    def __getitem__(self, index):
        time.sleep(SAMPLE_S)
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


ms.set_context(mode=ms.GRAPH_MODE)
data = ds.GeneratorDataset(SlowSamples(BATCH * BATCHES), ["x", "y"], shuffle=False, num_parallel_workers=1)
net = network()
model = Model(net, loss_fn=loss(), optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
model.train(1, data.batch(BATCH), dataset_sink_mode=False)
print("trained")

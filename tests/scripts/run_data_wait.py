"""A data-bound MLP under Model.train in graph mode: the dataset's map sleeps ~4 ms a sample, so each step of 32
samples waits ~130 ms for data while its compute takes ~1 ms (issue 37, item 7: the Timeline of such a step must
show the wait). Made for tests/runs/cpu_2_10_data_wait:

    perfkit profile --output OUT -- python tests/scripts/run_data_wait.py
"""

import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

BATCH, STEPS, FEATURES, CLASSES = 32, 8, 64, 10
SLEEP_S = 0.004  # per sample


class Samples:
    def __init__(self, count: int):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((count, FEATURES), dtype=np.float32)
        self.y = rng.integers(0, CLASSES, size=count).astype(np.int32)

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


def slow(x):
    time.sleep(SLEEP_S)  # a decoder or augmentation that costs 4 ms a sample
    return x


ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
data = ds.GeneratorDataset(Samples(BATCH * STEPS), ["x", "y"], shuffle=False)
data = data.map(slow, input_columns=["x"], num_parallel_workers=1).batch(BATCH)
net = nn.SequentialCell([nn.Dense(FEATURES, 128), nn.ReLU(), nn.Dense(128, CLASSES)])
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
model = Model(net, loss_fn=loss, optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
model.train(1, data, dataset_sink_mode=False)

"""A small MLP trained with Model.train (graph mode, random data) whose depth is the one setting: profiled with
`perfkit profile --repeat 3` at two depths it makes the real before/after pair of tests/runs/cpu_2_10_speedpair
(one run a side and repeats a side of a change near 2x). `--layers N`: hidden 1024x1024 Dense layers
(nearly all the compute: 4 against 2 is near 2x); `--batches N`: steps (batches of 512)."""

import argparse

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--batches", type=int, default=4)
args = parser.parse_args()

FEATURES, WIDTH, CLASSES, BATCH = 64, 1024, 10, 512



class Samples:
    """Random samples; labels are arrays, not NumPy scalars, which GeneratorDataset rejects under NumPy 2."""

    def __init__(self, count: int):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((count, FEATURES), dtype=np.float32)
        self.y = rng.integers(0, CLASSES, size=count).astype(np.int32)

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


data = ds.GeneratorDataset(Samples(args.batches * BATCH), ["x", "y"], shuffle=False).batch(BATCH)

ms.set_context(mode=ms.GRAPH_MODE)
hidden = [cell for _ in range(args.layers) for cell in (nn.Dense(WIDTH, WIDTH), nn.ReLU())]
net = nn.SequentialCell([nn.Dense(FEATURES, WIDTH), nn.ReLU(), *hidden, nn.Dense(WIDTH, CLASSES)])
model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
model.train(1, data, dataset_sink_mode=False)
print("trained")

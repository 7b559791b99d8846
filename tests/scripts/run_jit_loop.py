"""A custom training loop whose step function is compiled with @ms.jit while the context stays PyNative (the
default): the run behind tests/runs/cpu_2_10_jit_loop. A small conv net (conv-bn-relu-pool twice, dense to 10
classes), a `data.batch(16)` pipeline of random 32x32 images, steps marked with perfkit.profiling.

    perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2 --output OUT -- python tests/scripts/run_jit_loop.py
"""

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

import perfkit

BATCH, STEPS, CLASSES = 16, 6, 10


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.features = nn.SequentialCell([
            nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(16, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2, 2)])
        self.head = nn.SequentialCell([nn.Flatten(), nn.Dense(32 * 8 * 8, CLASSES)])

    def construct(self, x):
        return self.head(self.features(x))


def samples():
    rng = np.random.default_rng(0)
    for _ in range(BATCH * STEPS):
        yield rng.standard_normal((3, 32, 32), dtype=np.float32), np.array(rng.integers(0, CLASSES), np.int32)


data = ds.GeneratorDataset(samples, ["x", "y"], shuffle=False).batch(BATCH)
net = Net()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)


@ms.jit
def train_step(x, y):
    loss, grads = grad_fn(x, y)
    optimizer(grads)
    return loss


with perfkit.profiling(skip_first=1) as prof:
    for x, y in data.create_tuple_iterator():
        print(f"loss {train_step(x, y).asnumpy():.4f}")
        prof.step()

"""A PyNative custom training loop with no step markers (neither Model.train nor perfkit.profiling): the run behind
tests/runs/cpu_2_10_unmarked_loop. A 3-layer MLP (64 features, 256 hidden, 4 classes), a `data.batch(16)`
pipeline of random samples.

    perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2 --output OUT -- python tests/scripts/run_unmarked_loop.py
"""

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

BATCH, STEPS, CLASSES, FEATURES = 16, 6, 4, 64


def network():
    return nn.SequentialCell([nn.Dense(FEATURES, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(),
                              nn.Dense(256, CLASSES)])


def samples():
    rng = np.random.default_rng(0)
    for _ in range(BATCH * STEPS):
        yield rng.standard_normal(FEATURES, dtype=np.float32), np.array(rng.integers(0, CLASSES), np.int32)


data = ds.GeneratorDataset(samples, ["x", "y"], shuffle=False).batch(BATCH)
net = network()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

for x, y in data.create_tuple_iterator():
    loss, grads = grad_fn(x, y)
    optimizer(grads)
    print(f"loss {loss.asnumpy():.4f}")

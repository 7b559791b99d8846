"""A custom training loop that evaluates every 4th step: the run behind tests/runs/cpu_2_10_periodic_eval. An MLP
(256-512-512-10) whose train step and evaluation forward are compiled with @ms.jit, a `data.batch(64)` pipeline of
random vectors, after every 4th step a pass over 6 validation batches; steps marked with perfkit.profiling.

    perfkit profile --output OUT -- python tests/scripts/run_periodic_eval.py
"""

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn

import perfkit

BATCH, STEPS, EVAL_EVERY, EVAL_BATCHES, CLASSES = 64, 13, 4, 6, 10


def samples(count: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield rng.standard_normal(256, dtype=np.float32), np.array(rng.integers(0, CLASSES), np.int32)


train = ds.GeneratorDataset(lambda: samples(BATCH * STEPS, 0), ["x", "y"], shuffle=False).batch(BATCH)
val = ds.GeneratorDataset(lambda: samples(BATCH * EVAL_BATCHES, 1), ["x", "y"], shuffle=False).batch(BATCH)
net = nn.SequentialCell([nn.Dense(256, 512), nn.ReLU(), nn.Dense(512, 512), nn.ReLU(), nn.Dense(512, CLASSES)])
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


@ms.jit
def eval_step(x, y):
    return forward(x, y)


with perfkit.profiling(skip_first=1) as prof:
    for step, (x, y) in enumerate(train.create_tuple_iterator()):
        loss = train_step(x, y).asnumpy()
        if step % EVAL_EVERY == EVAL_EVERY - 1:
            net.set_train(False)
            val_loss = np.mean([eval_step(vx, vy).asnumpy() for vx, vy in val.create_tuple_iterator()])
            net.set_train(True)
            print(f"step {step + 1} loss {loss:.4f} val {val_loss:.4f}")
        prof.step()

"""A 4-rank data-parallel Model.train under msrun where rank 2 sleeps 50 ms before each step (a slow input or host
on one rank): the other ranks wait for it in the gradient AllReduce. Makes tests/runs/cpu_2_10_straggler4:

    PATH=/work/main/.venv/bin:$PATH perfkit profile --ranks 4 --output OUT -- python tests/scripts/run_straggler.py

A tiny MLP (16 -> 32 -> 4), batch 2, 6 steps per rank, graph mode, feed mode."""

import time

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback, Model

STEPS, BATCH, SLOW_RANK, SLEEP_S = 6, 2, 2, 0.05

class Samples:
    """Random access (sharding needs it), each item a tuple of arrays (NumPy 2 refuses the scalars
    NumpySlicesDataset would yield)."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)



class SleepBeforeStep(Callback):
    def on_train_step_begin(self, run_context):
        time.sleep(SLEEP_S)


ms.set_context(mode=ms.GRAPH_MODE)
init()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
ranks, rank = get_group_size(), get_rank()
rng = np.random.default_rng(0)
x = rng.standard_normal((STEPS * BATCH * ranks, 16), dtype=np.float32)
y = rng.integers(0, 4, STEPS * BATCH * ranks).astype(np.int32)
data = ds.GeneratorDataset(Samples(x, y), ["x", "y"], shuffle=False, num_shards=ranks,
                           shard_id=rank).batch(BATCH)
net = nn.SequentialCell([nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 4)])
model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9))
model.train(1, data, callbacks=[SleepBeforeStep()] if rank == SLOW_RANK else None, dataset_sink_mode=False)
print("trained")

"""A 4-rank data-parallel Model.train under msrun where rank 2 sleeps 50 ms before each step (a slow input or host
on one rank): the other ranks wait for it in the gradient AllReduce. Makes tests/runs/cpu_2_10_straggler4:

    PATH=/work/main/.venv/bin:$PATH perfkit profile --ranks 4 --output OUT -- python tests/scripts/run_straggler.py

A tiny MLP (16 -> 32 -> 4), batch 2, 6 steps per rank, graph mode, feed mode."""

import time

import mindspore as ms
import mindspore.dataset as ds
from common import Samples, model, tiny_network
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback

STEPS, BATCH, SLOW_RANK, SLEEP_S = 6, 2, 2, 0.05


class SleepBeforeStep(Callback):
    def on_train_step_begin(self, run_context):
        time.sleep(SLEEP_S)


ms.set_context(mode=ms.GRAPH_MODE)
init()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
ranks, rank = get_group_size(), get_rank()
data = ds.GeneratorDataset(Samples(STEPS * BATCH * ranks, (16,), 4), ["x", "y"], shuffle=False, num_shards=ranks,
                           shard_id=rank).batch(BATCH)
model(tiny_network()).train(1, data, callbacks=[SleepBeforeStep()] if rank == SLOW_RANK else None,
                            dataset_sink_mode=False)
print("trained")

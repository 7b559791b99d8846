"""A graph-mode Model.train whose dataset map sleeps 8 ms a sample in Python with num_parallel_workers=2 (as many
as the 2-CPU host it ran on has): the device waits for data, and more map workers are not allowed on that host.
Makes tests/runs/cpu_2_10_data_bound:

    perfkit profile --output OUT -- python tests/scripts/run_data_bound.py

An MLP (16 -> 32 -> 4), batch 16, 30 steps (more than the pipeline can prefetch while the first step compiles),
feed mode."""

import time

import mindspore as ms
import mindspore.dataset as ds
from common import Samples, model, tiny_network

BATCH, STEPS, MAP_WORKERS, SLEEP_S = 16, 30, 2, 0.008


def slow_decode(x):
    time.sleep(SLEEP_S)  # what a slow per-sample decode or augmentation costs
    return x


ms.set_context(mode=ms.GRAPH_MODE)
data = ds.GeneratorDataset(Samples(BATCH * STEPS, (16,), 4), ["x", "y"], shuffle=False)
data = data.map(operations=slow_decode, input_columns=["x"], num_parallel_workers=MAP_WORKERS).batch(BATCH)
model(tiny_network()).train(1, data, dataset_sink_mode=False)
print("trained")

"""A data-bound training script: the tiny MLP of tests/scripts/common.py trained with Model.train (graph mode) on a
dataset whose samples take 4 ms each to produce (a sleep standing in for decoding), batches of 16: each step waits
about 64 ms for its batch while the network computes in under 1 ms. Profiled with `perfkit profile --` it makes
tests/runs/cpu_2_10_slowdata, whose step interval every view calls data wait."""

import time

import mindspore as ms
import mindspore.dataset as ds
from common import Samples, model, tiny_network

SAMPLE_S, BATCH, BATCHES = 0.004, 16, 8


class SlowSamples(Samples):
    """The tiny network's random samples, each taking SAMPLE_S to produce."""

    def __getitem__(self, index):
        time.sleep(SAMPLE_S)
        return super().__getitem__(index)


ms.set_context(mode=ms.GRAPH_MODE)
data = ds.GeneratorDataset(SlowSamples(BATCH * BATCHES, (16,), 4), ["x", "y"], shuffle=False, num_parallel_workers=1)
model(tiny_network()).train(1, data.batch(BATCH), dataset_sink_mode=False)
print("trained")

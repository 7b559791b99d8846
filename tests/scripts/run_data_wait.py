"""A data-bound MLP under Model.train in graph mode: the dataset's map sleeps ~4 ms a sample, so each step of 32
samples waits ~130 ms for data while its compute takes ~1 ms (issue 37, item 7: the Timeline of such a step must
show the wait). Made for tests/runs/cpu_2_10_data_wait:

    perfkit profile --output OUT -- python tests/scripts/run_data_wait.py
"""

import time

import mindspore as ms
import mindspore.dataset as ds
from common import Samples, mlp, model

BATCH, STEPS, FEATURES, CLASSES = 32, 8, 64, 10
SLEEP_S = 0.004  # per sample


def slow(x):
    time.sleep(SLEEP_S)  # a decoder or augmentation that costs 4 ms a sample
    return x


ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
data = ds.GeneratorDataset(Samples(BATCH * STEPS, (FEATURES,), CLASSES), ["x", "y"], shuffle=False)
data = data.map(slow, input_columns=["x"], num_parallel_workers=1).batch(BATCH)
model(mlp(FEATURES, 128, CLASSES)).train(1, data, dataset_sink_mode=False)

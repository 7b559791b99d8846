"""A small MLP trained with Model.train (graph mode, random data) whose depth is the one setting: profiled with
`perfkit profile --repeat 3` at two depths it makes the real before/after pair of tests/runs/cpu_2_10_speedpair
(one run a side and repeats a side of a change near 2x). `--layers N`: hidden 1024x1024 Dense layers
(nearly all the compute: 4 against 2 is near 2x); `--batches N`: steps (batches of 512)."""

import argparse

import mindspore as ms
import mindspore.dataset as ds
from common import Samples, mlp, model

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=4)
parser.add_argument("--batches", type=int, default=4)
args = parser.parse_args()

FEATURES, WIDTH, CLASSES, BATCH = 64, 1024, 10, 512

data = ds.GeneratorDataset(Samples(args.batches * BATCH, (FEATURES,), CLASSES), ["x", "y"], shuffle=False).batch(BATCH)
ms.set_context(mode=ms.GRAPH_MODE)
model(mlp(FEATURES, *[WIDTH] * (args.layers + 1), CLASSES)).train(1, data, dataset_sink_mode=False)
print("trained")

"""A training script that fails before its first step, as a user's does when its data is not where it looks: it
builds its network, then raises FileNotFoundError opening the data. Under `perfkit profile --` it leaves a run folder
holding only perfkit_run.json, marked failed with the script's error (tests/runs/cpu_2_10_failed)."""

from pathlib import Path

import mindspore as ms
from mindspore import nn

ms.set_context(mode=ms.GRAPH_MODE)
net = nn.SequentialCell([nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 4)])
data_file = Path("data") / "train_batch_1.bin"
with open(data_file, "rb") as data:  # not there: the script's own FileNotFoundError
    samples = data.read()

"""What the example training scripts share: a tiny network and dataset (4 batches of 2, 16 features)."""

import mindspore.dataset as ds
import numpy as np
from mindspore import nn

BATCHES = 4


class Samples:
    """Random access (sharding needs it); labels are arrays, not NumPy scalars, which GeneratorDataset rejects
    under NumPy 2."""

    def __init__(self, count: int):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((count, 16), dtype=np.float32)
        self.y = rng.integers(0, 4, size=count).astype(np.int32)

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


def dataset(shards: int = 1, shard_id: int = 0):
    """BATCHES batches of 2 for each shard."""
    return ds.GeneratorDataset(Samples(BATCHES * 2 * shards), ["x", "y"], shuffle=False, num_shards=shards,
                               shard_id=shard_id).batch(2)


def network():
    return nn.SequentialCell([nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 4)])


def loss():
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

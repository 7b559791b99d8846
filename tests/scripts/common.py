"""What the MindSpore run scripts of tests/scripts share: random samples, the networks they train (the small conv
net, MLPs, the tiny MLP and dataset of the example scripts), the loss and optimizer, and the value_and_grad train
step of the custom loops. A script imports it as `from common import ...` (Python puts the script's folder first
on sys.path)."""

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

TINY_BATCHES = 4  # the tiny dataset's batches (of 2) a shard


class Samples:
    """`count` random samples of `shape` with labels below `classes` (seed 0), random access (sharding needs it);
    each item a tuple of arrays (NumPy 2 refuses the scalars NumpySlicesDataset would yield)."""

    def __init__(self, count: int, shape: tuple[int, ...], classes: int):
        rng = np.random.default_rng(0)
        self.x = rng.standard_normal((count, *shape), dtype=np.float32)
        self.y = rng.integers(0, classes, size=count).astype(np.int32)

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


class Net(nn.Cell):
    """The small conv net: conv-bn-relu-pool twice and a dense layer to `classes`, on 3-channel 32x32 images. Its
    class name is in every op's scope (`_backbone-Net/features-SequentialCell/...`), as in the committed runs."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.SequentialCell([
            nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(16, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2, 2)])
        self.head = nn.SequentialCell([nn.Flatten(), nn.Dense(32 * 8 * 8, classes)])

    def construct(self, x):
        return self.head(self.features(x))


def mlp(*widths: int) -> nn.SequentialCell:
    """Dense layers from widths[0] features to widths[-1] classes, a ReLU between each two."""
    cells = []
    for inputs, outputs in zip(widths, widths[1:]):
        cells += [nn.Dense(inputs, outputs), nn.ReLU()]
    return nn.SequentialCell(cells[:-1])


def tiny_network() -> nn.SequentialCell:
    """The example scripts' network: 16 features, 32 hidden, 4 classes."""
    return mlp(16, 32, 4)


def tiny_dataset(shards: int = 1, shard_id: int = 0):
    """The example scripts' data: TINY_BATCHES batches of 2 samples of 16 features for each shard."""
    return ds.GeneratorDataset(Samples(TINY_BATCHES * 2 * shards, (16,), 4), ["x", "y"], shuffle=False,
                               num_shards=shards, shard_id=shard_id).batch(2)


def loss() -> nn.Cell:
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def momentum(net: nn.Cell) -> nn.Optimizer:
    return nn.Momentum(net.trainable_params(), 0.01, 0.9)


def model(net: nn.Cell, **options) -> Model:
    """Model.train's model of `net`: the loss above, momentum SGD; `options` as Model takes them (amp_level...)."""
    return Model(net, loss_fn=loss(), optimizer=momentum(net), **options)


def train_step(net: nn.Cell, optimizer: nn.Optimizer, jit: bool = False, reduce_grads: bool = False):
    """A custom loop's step: the loss and gradients of `net` by ms.value_and_grad, `optimizer` applied; compiled
    with ms.jit where `jit`, the gradients all-reduced over the ranks where `reduce_grads`. Returns the loss."""
    loss_fn = loss()

    def forward(x, y):
        return loss_fn(net(x), y)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    reducer = nn.DistributedGradReducer(optimizer.parameters) if reduce_grads else None

    def train_step(x, y):
        value, grads = grad_fn(x, y)
        if reducer is not None:
            grads = reducer(grads)
        optimizer(grads)
        return value

    return ms.jit(train_step) if jit else train_step

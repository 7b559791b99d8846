"""One small conv net trained with Model.train and a loss scale manager: the port side of the migration view's
loss-scaling setting (docs/migration.md). Makes tests/runs/cpu_2_10_loss_scale:

    perfkit profile --output OUT -- python tests/scripts/run_loss_scale.py

FixedLossScaleManager(1024, drop_overflow_update=False): the loss scaled by 1024 (the train step's sens) and the
gradients divided by it in the optimizer. On CPU MindSpore 2.10's Model takes no other manager ("Only
`loss_scale_manager=None` or `loss_scale_manager=FixedLossScaleManager(drop_overflow_update=False)` are supported
on device `CPU`": DynamicLossScaleManager, and a fixed one that drops overflowing updates, need a device that
reports overflow). Float32, batch 16 at 32x32, random data, 6 steps, graph mode, feed mode."""

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

BATCH, CLASSES, STEPS = 16, 10, 6


class Samples:
    """Random access, each item a tuple of arrays."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __getitem__(self, index):
        return self.x[index], np.array(self.y[index])

    def __len__(self):
        return len(self.y)


class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.features = nn.SequentialCell([
            nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2, 2),
            nn.Conv2d(16, 32, 3), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2, 2)])
        self.head = nn.SequentialCell([nn.Flatten(), nn.Dense(32 * 8 * 8, CLASSES)])

    def construct(self, x):
        return self.head(self.features(x))


rng = np.random.default_rng(0)
x = rng.standard_normal((BATCH * STEPS, 3, 32, 32), dtype=np.float32)
y = rng.integers(0, CLASSES, BATCH * STEPS).astype(np.int32)
ms.set_context(mode=ms.GRAPH_MODE)
net = Net()
model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9),
              loss_scale_manager=ms.amp.FixedLossScaleManager(1024.0, drop_overflow_update=False))
model.train(1, ds.GeneratorDataset(Samples(x, y), ["x", "y"], shuffle=False).batch(BATCH), dataset_sink_mode=False)
print("trained with", type(model._train_network).__name__)

"""One small conv net trained with Model.train at an AMP level given on the command line (O0, O2 or O3): on CPU the
float16 levels add Cast ops and run slower than float32. Makes tests/runs/cpu_2_10_amp_o0/o2/o3:

    perfkit profile --output OUT -- python tests/scripts/run_amp.py O2

O2 keeps the loss scale off (loss_scale_manager=None: MindSpore's default dynamic loss scale for O2 needs a device
that reports overflow). Batch 16 at 32x32, random data, 6 steps, graph mode, feed mode."""

import sys

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
from mindspore import nn
from mindspore.train import Model

BATCH, CLASSES, STEPS = 16, 10, 6

class Samples:
    """Random access (sharding needs it), each item a tuple of arrays (NumPy 2 refuses the scalars
    NumpySlicesDataset would yield)."""

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


level = sys.argv[1] if len(sys.argv) > 1 else "O0"
rng = np.random.default_rng(0)
x = rng.standard_normal((BATCH * STEPS, 3, 32, 32), dtype=np.float32)
y = rng.integers(0, CLASSES, BATCH * STEPS).astype(np.int32)
ms.set_context(mode=ms.GRAPH_MODE)
net = Net()
extra = {"loss_scale_manager": None} if level == "O2" else {}
model = Model(net, loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
              optimizer=nn.Momentum(net.trainable_params(), 0.01, 0.9), amp_level=level, **extra)
model.train(1, ds.GeneratorDataset(Samples(x, y), ["x", "y"], shuffle=False).batch(BATCH), dataset_sink_mode=False)
print(f"trained at {level}")

"""A new user's own script: small conv net, custom loop, step under ms.jit, logging every step."""
import time
import numpy as np
import mindspore as ms
from mindspore import nn, ops
import mindspore.dataset as ds

ms.set_context(mode=ms.PYNATIVE_MODE)

class Net(nn.Cell):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3)
        self.bn = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2, 2)
        self.flat = nn.Flatten()
        self.fc = nn.Dense(16 * 16 * 16, 10)
    def construct(self, x):
        return self.fc(self.flat(self.pool(self.relu(self.bn(self.conv1(x))))))

def gen():
    rng = np.random.default_rng(0)
    for _ in range(256):
        yield rng.standard_normal((3, 32, 32)).astype(np.float32), np.array(rng.integers(0, 10), dtype=np.int32)

data = ds.GeneratorDataset(gen, ["x", "y"]).batch(32)
net = Net()
loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
def forward_fn(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward_fn, None, opt.parameters)

@ms.jit
def train_step(x, y):
    loss, grads = grad_fn(x, y)
    opt(grads)
    return loss

for step, (x, y) in enumerate(data.create_tuple_iterator()):
    loss = train_step(x, y)
    print(f"step {step} loss {float(loss):.3f}", flush=True)
    time.sleep(0.02)  # the user's per-step logging / checkpoint bookkeeping

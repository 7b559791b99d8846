"""A user's own custom training loop as `perfkit tune -- python run_custom_loop_tune.py` meets it: PyNative,
ms.value_and_grad, no Model.train and no step markers, and an optional import it handles (its traceback is
logged, then the script goes on without it). `--steps N` batches of 2 (default 4)."""

import argparse
import logging

import mindspore as ms
from mindspore import nn
from tiny import dataset, loss, network

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()

try:
    import tensorboardX_not_installed  # noqa: F401  (an optional logger the script can do without)
except ImportError:
    logging.getLogger("train").exception("tensorboard logging off")

ms.set_context(mode=ms.PYNATIVE_MODE)
net, loss_fn = network(), loss()
optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)

for step, (x, y) in enumerate(dataset().create_tuple_iterator()):
    if step == args.steps:
        break
    value, grads = grad_fn(x, y)
    optimizer(grads)
print("trained", min(args.steps, 4), "steps")

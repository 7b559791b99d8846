"""A user's own custom training loop as `perfkit tune -- python run_custom_loop_tune.py` meets it: PyNative,
ms.value_and_grad, no Model.train and no step markers, and an optional import it handles (its traceback is
logged, then the script goes on without it). `--steps N` batches of 2 (default 4)."""

import argparse
import logging

import mindspore as ms
from common import momentum, tiny_dataset, tiny_network, train_step

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=4)
args = parser.parse_args()

try:
    import tensorboardX_not_installed  # noqa: F401  (an optional logger the script can do without)
except ImportError:
    logging.getLogger("train").exception("tensorboard logging off")

ms.set_context(mode=ms.PYNATIVE_MODE)
net = tiny_network()
step = train_step(net, momentum(net))

for index, (x, y) in enumerate(tiny_dataset().create_tuple_iterator()):
    if index == args.steps:
        break
    step(x, y)
print("trained", min(args.steps, 4), "steps")

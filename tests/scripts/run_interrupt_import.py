"""Ctrl-C while the script imports MindSpore, at the same point every time: on its `--at`-th run (counted in the
file COUNTER), the process SIGINTs itself as `import mindspore` reaches mindspore.train.model, which is where
`perfkit profile`'s start-up hook starts its session (a user's Ctrl-C in those seconds). Other runs import
MindSpore and train one step. Usage: python run_interrupt_import.py COUNTER [--at N]"""

import argparse
import importlib.abc
import os
import signal
import sys
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("counter")
parser.add_argument("--at", type=int, default=2)
args = parser.parse_args()
counter = Path(args.counter)
run = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(run))


class InterruptDuringImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname == "mindspore.train.model" and self in sys.meta_path:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)


if run == args.at:
    sys.meta_path.insert(0, InterruptDuringImport())
import mindspore
from tiny import dataset, loss, network

# the other runs train one step of tiny.py's net, for the profiler to record ops
net, loss_fn = network(), loss()
optimizer = mindspore.nn.Momentum(net.trainable_params(), 0.01, 0.9)
grad_fn = mindspore.value_and_grad(lambda x, y: loss_fn(net(x), y), None, optimizer.parameters)
for x, y in dataset().create_tuple_iterator():
    value, grads = grad_fn(x, y)
    optimizer(grads)
    break
print("trained one step of MindSpore", mindspore.__version__)

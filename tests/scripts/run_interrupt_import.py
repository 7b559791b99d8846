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
from common import momentum, tiny_dataset, tiny_network, train_step

# the other runs train one step of the tiny net, for the profiler to record ops
net = tiny_network()
step = train_step(net, momentum(net))
for x, y in tiny_dataset().create_tuple_iterator():
    step(x, y)
    break
print("trained one step of MindSpore", mindspore.__version__)

"""A custom training loop (no Model.train) profiled with perfkit.profiling. `--output DIR` names the run folder;
`--no-api` runs the same loop without perfkit."""

import argparse

import mindspore as ms
from common import momentum, tiny_dataset, tiny_network, train_step

parser = argparse.ArgumentParser()
parser.add_argument("--output", default="runs/exp1")
parser.add_argument("--no-api", action="store_true")
args = parser.parse_args()

ms.set_context(mode=ms.GRAPH_MODE)
net = tiny_network()
step = train_step(net, momentum(net), jit=True)


def train(prof=None):
    for x, y in tiny_dataset().create_tuple_iterator():
        step(x, y)
        if prof is not None:
            prof.step()


if args.no_api:
    train()
else:
    import perfkit
    with perfkit.profiling(args.output, skip_first=1) as prof:
        train(prof)
    print(f"profiled into {prof.folder}")

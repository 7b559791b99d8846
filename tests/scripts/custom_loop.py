"""A custom training loop (no Model.train) profiled with perfkit.profiling. `--output DIR` names the run folder;
`--no-api` runs the same loop without perfkit."""

import argparse

import mindspore as ms
from mindspore import nn
from tiny import dataset, loss, network

parser = argparse.ArgumentParser()
parser.add_argument("--output", default="runs/exp1")
parser.add_argument("--no-api", action="store_true")
args = parser.parse_args()

ms.set_context(mode=ms.GRAPH_MODE)
net, loss_fn = network(), loss()
optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)


def forward(x, y):
    return loss_fn(net(x), y)


grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)


@ms.jit
def train_step(x, y):
    value, grads = grad_fn(x, y)
    optimizer(grads)
    return value


def train(prof=None):
    for x, y in dataset().create_tuple_iterator():
        train_step(x, y)
        if prof is not None:
            prof.step()


if args.no_api:
    train()
else:
    import perfkit
    with perfkit.profiling(args.output, skip_first=1) as prof:
        train(prof)
    print(f"profiled into {prof.folder}")

"""A small PyTorch MLP classifier (3 Linear layers with ReLU, SGD with momentum), the second network of the
kineto reader's tests: random 256-feature rows fed by a DataLoader.

Run under perfkit's reference runner, which made tests/runs/torch_cpu_mlp (SOURCE.txt there):
    perfkit profile --reference --output OUT -- python tests/scripts/run_torch_mlp.py
"""

import argparse

import torch
from torch import nn


def setup():
    """From the command line's --batch-size and --steps: the DataLoader of random rows (seed 0), the network, its
    loss and optimizer."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = torch.randn(args.batch_size * args.steps, 256)
    labels = torch.randint(0, 10, (args.batch_size * args.steps,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(rows, labels), batch_size=args.batch_size)
    network = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    return loader, network, nn.CrossEntropyLoss(), torch.optim.SGD(network.parameters(), lr=0.01, momentum=0.9)


def main():
    loader, network, loss_fn, optimizer = setup()
    for row, label in loader:
        optimizer.zero_grad()
        loss_fn(network(row), label).backward()
        optimizer.step()


if __name__ == "__main__":
    main()

"""run_torch_mlp.py's PyTorch MLP trained with loss scaling (torch.amp.GradScaler on the CPU): the reference side of the
migration view's loss-scaling setting (docs/migration.md). Linear 256-512-512-10 with ReLU, SGD momentum 0.9,
random 256-feature rows through a DataLoader; float32 compute, the loss scaled by GradScaler("cpu") (torch
supports it on the CPU since 2.3), its gradients unscaled and checked for inf/NaN before each step.

Run under perfkit's reference runner, which made tests/runs/torch_cpu_gradscaler (SOURCE.txt there):
    perfkit profile --reference --output OUT -- python tests/scripts/run_torch_gradscaler.py
"""

import torch
from run_torch_mlp import setup


def main():
    loader, network, loss_fn, optimizer = setup()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    for row, label in loader:
        optimizer.zero_grad()
        scaler.scale(loss_fn(network(row), label)).backward()
        scaler.step(optimizer)
        scaler.update()


if __name__ == "__main__":
    main()

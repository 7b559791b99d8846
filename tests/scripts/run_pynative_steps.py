"""A PyNative custom loop with ~30 recorded steps (perfkit.profiling's prof.step()): an MLP trained with
ms.value_and_grad and SGD, no ms.jit (issue 37, item 7: the timeline and `perfkit trace --step` must know these
steps; item 13: the SGD ops are the optimizer's, not forward). Made for tests/runs/cpu_2_10_pynative_steps:

    perfkit profile --output OUT -- python tests/scripts/run_pynative_steps.py
"""

import mindspore as ms
import numpy as np
from common import mlp, train_step
from mindspore import nn

import perfkit

BATCH, STEPS, FEATURES, CLASSES = 16, 30, 32, 4

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
net = mlp(FEATURES, 64, CLASSES)
step = train_step(net, nn.SGD(net.trainable_params(), 0.01))

rng = np.random.default_rng(0)
with perfkit.profiling("pynative_steps", skip_first=1) as prof:
    for _ in range(STEPS):
        x = ms.Tensor(rng.standard_normal((BATCH, FEATURES), dtype=np.float32))
        y = ms.Tensor(rng.integers(0, CLASSES, BATCH).astype(np.int32))
        step(x, y)
        prof.step()

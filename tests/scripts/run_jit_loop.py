"""A custom training loop whose step function is compiled with @ms.jit while the context stays PyNative (the
default): the run behind tests/runs/cpu_2_10_jit_loop. A small conv net (conv-bn-relu-pool twice, dense to 10
classes), a `data.batch(16)` pipeline of random 32x32 images, steps marked with perfkit.profiling.

    perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2 --output OUT -- python tests/scripts/run_jit_loop.py
"""

import mindspore.dataset as ds
import numpy as np
from common import Net, momentum, train_step

import perfkit

BATCH, STEPS, CLASSES = 16, 6, 10


def samples():
    rng = np.random.default_rng(0)
    for _ in range(BATCH * STEPS):
        yield rng.standard_normal((3, 32, 32), dtype=np.float32), np.array(rng.integers(0, CLASSES), np.int32)


data = ds.GeneratorDataset(samples, ["x", "y"], shuffle=False).batch(BATCH)
net = Net(CLASSES)
step = train_step(net, momentum(net), jit=True)

with perfkit.profiling(skip_first=1) as prof:
    for x, y in data.create_tuple_iterator():
        print(f"loss {step(x, y).asnumpy():.4f}")
        prof.step()

"""A PyNative custom training loop with no step markers (neither Model.train nor perfkit.profiling): the run behind
tests/runs/cpu_2_10_unmarked_loop. A 3-layer MLP (64 features, 256 hidden, 4 classes), a `data.batch(16)`
pipeline of random samples.

    perfkit profile --env ONEDNN_MAX_CPU_ISA=AVX2 --output OUT -- python tests/scripts/run_unmarked_loop.py
"""

import mindspore.dataset as ds
import numpy as np
from common import mlp, momentum, train_step

BATCH, STEPS, CLASSES, FEATURES = 16, 6, 4, 64


def samples():
    rng = np.random.default_rng(0)
    for _ in range(BATCH * STEPS):
        yield rng.standard_normal(FEATURES, dtype=np.float32), np.array(rng.integers(0, CLASSES), np.int32)


data = ds.GeneratorDataset(samples, ["x", "y"], shuffle=False).batch(BATCH)
net = mlp(FEATURES, 256, 256, CLASSES)
step = train_step(net, momentum(net))

for x, y in data.create_tuple_iterator():
    print(f"loss {step(x, y).asnumpy():.4f}")

"""One small conv net trained with Model.train at an AMP level given on the command line (O0, O2 or O3): on CPU the
float16 levels add Cast ops and run slower than float32. Makes tests/runs/cpu_2_10_amp_o0/o2/o3:

    perfkit profile --output OUT -- python tests/scripts/run_amp.py O2

O2 keeps the loss scale off (loss_scale_manager=None: MindSpore's default dynamic loss scale for O2 needs a device
that reports overflow). Batch 16 at 32x32, random data, 6 steps, graph mode, feed mode."""

import sys

import mindspore as ms
import mindspore.dataset as ds
from common import Net, Samples, model

BATCH, CLASSES, STEPS = 16, 10, 6

level = sys.argv[1] if len(sys.argv) > 1 else "O0"
ms.set_context(mode=ms.GRAPH_MODE)
extra = {"loss_scale_manager": None} if level == "O2" else {}
data = ds.GeneratorDataset(Samples(BATCH * STEPS, (3, 32, 32), CLASSES), ["x", "y"], shuffle=False).batch(BATCH)
model(Net(CLASSES), amp_level=level, **extra).train(1, data, dataset_sink_mode=False)
print(f"trained at {level}")

"""One small conv net trained with Model.train and a loss scale manager: the port side of the migration view's
loss-scaling setting (docs/migration.md). Makes tests/runs/cpu_2_10_loss_scale:

    perfkit profile --output OUT -- python tests/scripts/run_loss_scale.py

FixedLossScaleManager(1024, drop_overflow_update=False): the loss scaled by 1024 (the train step's sens) and the
gradients divided by it in the optimizer. On CPU MindSpore 2.10's Model takes no other manager ("Only
`loss_scale_manager=None` or `loss_scale_manager=FixedLossScaleManager(drop_overflow_update=False)` are supported
on device `CPU`": DynamicLossScaleManager, and a fixed one that drops overflowing updates, need a device that
reports overflow). Float32, batch 16 at 32x32, random data, 6 steps, graph mode, feed mode."""

import mindspore as ms
import mindspore.dataset as ds
from common import Net, Samples, model

BATCH, CLASSES, STEPS = 16, 10, 6

ms.set_context(mode=ms.GRAPH_MODE)
trainer = model(Net(CLASSES), loss_scale_manager=ms.amp.FixedLossScaleManager(1024.0, drop_overflow_update=False))
data = ds.GeneratorDataset(Samples(BATCH * STEPS, (3, 32, 32), CLASSES), ["x", "y"], shuffle=False).batch(BATCH)
trainer.train(1, data, dataset_sink_mode=False)
print("trained with", type(trainer._train_network).__name__)

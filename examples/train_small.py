"""A small training script as a user writes it (no perfkit in it), for `perfkit tune -- python
examples/train_small.py`: a 4-conv CNN on random 32x32 images, 10 steps of batch 16, with the settings a user
might leave as they found them (PyNative mode, one worker for the map, amp_level O0, feed mode)."""

import mindspore as ms
import mindspore.dataset as ds
import mindspore.dataset.vision as vision
import numpy as np
from mindspore import nn
from mindspore.train import Model

ms.set_context(mode=ms.PYNATIVE_MODE)
STEPS, BATCH = 10, 16


class Images:
    """Random access over random images; labels are arrays (GeneratorDataset rejects NumPy 2 scalars)."""

    def __init__(self, count: int):
        rng = np.random.default_rng(0)
        self.images = rng.integers(0, 256, size=(count, 32, 32, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=count).astype(np.int32)

    def __getitem__(self, index):
        return self.images[index], np.array(self.labels[index])

    def __len__(self):
        return len(self.labels)


def block(channels_in: int, channels_out: int) -> list:
    return [nn.Conv2d(channels_in, channels_out, 3), nn.BatchNorm2d(channels_out), nn.ReLU()]


data = ds.GeneratorDataset(Images(STEPS * BATCH), ["image", "label"], shuffle=False)
data = data.map(operations=[vision.RandomHorizontalFlip(), vision.Rescale(1.0 / 255.0, 0.0), vision.HWC2CHW()],
                input_columns="image", num_parallel_workers=1)
data = data.batch(BATCH, drop_remainder=True)
network = nn.SequentialCell([*block(3, 16), *block(16, 32), nn.MaxPool2d(2, 2), *block(32, 32), *block(32, 32),
                             nn.MaxPool2d(2, 2), nn.Flatten(), nn.Dense(32 * 8 * 8, 10)])
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
model = Model(network, loss_fn=loss, optimizer=nn.Momentum(network.trainable_params(), 0.001, 0.9), amp_level="O0")
model.train(1, data, dataset_sink_mode=False)
print("trained")

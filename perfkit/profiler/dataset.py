"""The seed's CIFAR-10 input pipeline (mindspore.dataset), sharded the way its profiling run shards it."""

from __future__ import annotations

import mindspore as ms
import mindspore.dataset as ds
from mindspore.dataset import vision
from mindspore.dataset.transforms import TypeCast

# CIFAR-10 channel statistics, as the seed (and torchvision's CIFAR recipes) normalise with.
CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
CROP_PADDING = 4


def create_cifar_dataset(data_dir: str, batch_size: int, image_size: int, num_shards: int, shard_id: int,
                         workers: int | None):
    """Training pipeline: random crop with padding 4, horizontal flip, resize, rescale, normalise, CHW."""
    parallel = {} if workers is None else {"num_parallel_workers": workers}
    dataset = ds.Cifar10Dataset(data_dir, usage="train", shuffle=True, num_shards=num_shards, shard_id=shard_id)
    image_ops = [
        vision.RandomCrop((32, 32), (CROP_PADDING,) * 4),
        vision.RandomHorizontalFlip(prob=0.5),
        vision.Resize((image_size, image_size)),
        vision.Rescale(1.0 / 255.0, 0.0),
        vision.Normalize(CIFAR_MEAN, CIFAR_STD),
        vision.HWC2CHW(),
    ]
    dataset = dataset.map(operations=TypeCast(ms.int32), input_columns="label", **parallel)
    dataset = dataset.map(operations=image_ops, input_columns="image", **parallel)
    return dataset.batch(batch_size, drop_remainder=True, **parallel)

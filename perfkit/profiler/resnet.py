"""ResNet-50 for CIFAR-10 as the seed's MindSpore migration builds it (torchvision's structure).

Bottleneck blocks in 3-4-6-3 stages, a 7x7 stride-2 stem, a 3x3 stride-2 max-pool padded by 1
(MindSpore's MaxPool2d has no padding argument, so an explicit Pad precedes it), ReduceMean in
place of AdaptiveAvgPool2d((1, 1)), HeNormal fan-out conv weights and BatchNorm gamma=1, beta=0.
"""

from __future__ import annotations

import math

from mindspore import nn, ops
from mindspore.common import initializer

EXPANSION = 4
STAGE_BLOCKS = (3, 4, 6, 3)
STAGE_WIDTHS = (64, 128, 256, 512)


def conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, pad_mode="pad", padding=1,
                     has_bias=False)


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, has_bias=False)


class Bottleneck(nn.Cell):
    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Cell | None = None):
        super().__init__()
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * EXPANSION)
        self.bn3 = nn.BatchNorm2d(planes * EXPANSION)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def construct(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet50(nn.Cell):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, kernel_size=7, stride=2, pad_mode="pad", padding=3, has_bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.SequentialCell([
            nn.Pad(paddings=((0, 0), (0, 0), (1, 1), (1, 1)), mode="CONSTANT"),
            nn.MaxPool2d(kernel_size=3, stride=2)])
        self.layer1 = self._make_layer(STAGE_WIDTHS[0], STAGE_BLOCKS[0])
        self.layer2 = self._make_layer(STAGE_WIDTHS[1], STAGE_BLOCKS[1], stride=2)
        self.layer3 = self._make_layer(STAGE_WIDTHS[2], STAGE_BLOCKS[2], stride=2)
        self.layer4 = self._make_layer(STAGE_WIDTHS[3], STAGE_BLOCKS[3], stride=2)
        self.mean = ops.ReduceMean(keep_dims=True)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(STAGE_WIDTHS[3] * EXPANSION, num_classes)
        self._init_weights()

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.SequentialCell:
        downsample = None
        if stride != 1 or self.inplanes != planes * EXPANSION:
            downsample = nn.SequentialCell([conv1x1(self.inplanes, planes * EXPANSION, stride),
                                            nn.BatchNorm2d(planes * EXPANSION)])
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * EXPANSION
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.SequentialCell(layers)

    def _init_weights(self) -> None:
        for _, cell in self.cells_and_names():
            if isinstance(cell, nn.Conv2d):
                cell.weight.set_data(initializer.initializer(
                    initializer.HeNormal(negative_slope=0, mode="fan_out", nonlinearity="relu"),
                    cell.weight.shape, cell.weight.dtype))
            elif isinstance(cell, nn.BatchNorm2d):
                cell.gamma.set_data(initializer.initializer("ones", cell.gamma.shape, cell.gamma.dtype))
                cell.beta.set_data(initializer.initializer("zeros", cell.beta.shape, cell.beta.dtype))
            elif isinstance(cell, nn.Dense):
                cell.weight.set_data(initializer.initializer(
                    initializer.HeUniform(negative_slope=math.sqrt(5)), cell.weight.shape, cell.weight.dtype))
                cell.bias.set_data(initializer.initializer("zeros", cell.bias.shape, cell.bias.dtype))

    def construct(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.flatten(self.mean(x, (2, 3))))

"""kernel_efficiency on real CPU profiles made here: small conv nets of our own, trained a few steps under
mindspore.Profiler, and the built-in ResNet-50 at 32 px through `perfkit profile`.

What oneDNN runs decides what is true: with ONEDNN_MAX_CPU_ISA=AVX2 its convolutions are `x64:gemm:jit`
and no kernel is far slower than the same layer's other kernels, so no high finding may appear. At the
default ISA on an AVX-512 host (this one, when these tests were written), oneDNN 2.10 picks
`jit_uni_ncsp:conv+ref` for forward and input-gradient 3x3 convs, ~100x slower than the same layer's filter
gradient: there the finding is true and must appear. Each run's own ONEDNN_VERBOSE log says which case it is.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import perfkit
from perfkit.advisor import advise
from perfkit.profiler.runfolder import write_manifest

TOY = '''
import sys
import numpy as np
import mindspore as ms
from mindspore import nn

out, variant = sys.argv[1], sys.argv[2]
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
ms.set_seed(0)


class Small(nn.Cell):
    def __init__(self, widths):
        super().__init__()
        layers, channels = [], 3
        for width in widths:
            layers += [nn.Conv2d(channels, width, 3, pad_mode="same"), nn.BatchNorm2d(width), nn.ReLU()]
            channels = width
        self.features = nn.SequentialCell(layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(channels, 10)

    def construct(self, x):
        return self.fc(self.flatten(self.pool(self.features(x))))


widths, image, batch = {"two_layers": ((16, 32), 28, 16), "three_layers": ((32, 64, 64), 16, 8)}[variant]
network = nn.WithLossCell(Small(widths), nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
step = nn.TrainOneStepCell(network, nn.Momentum(network.trainable_params(), 0.01, 0.9))
step.set_train()
x = ms.Tensor(np.random.rand(batch, 3, image, image).astype(np.float32))
y = ms.Tensor(np.random.randint(0, 10, (batch,)).astype(np.int32))
step(x, y)  # compile before the profiled window
profiler = ms.Profiler(output_path=out)
for _ in range(3):
    step(x, y)
profiler.stop()
profiler.analyse()
'''


def train_toy(folder: Path, variant: str, isa: str | None) -> str:
    """Profiles the toy net and records its host facts and ISA cap as `perfkit profile` does (so the rule's
    check against the host's peak applies, not only the comparison of kernel groups, whose ratio a loaded
    machine blurs); returns oneDNN's verbose log of the run."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    env["ONEDNN_VERBOSE"] = "1"
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    script = folder.parent / f"toy_{variant}.py"  # graph mode compiles from the source file
    script.write_text(TOY)
    done = subprocess.run([sys.executable, str(script), str(folder), variant], capture_output=True, text=True,
                          env=env, timeout=600, cwd=folder.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    write_manifest(folder, {"status": "ok", "device": "CPU", "env": {"ONEDNN_MAX_CPU_ISA": isa} if isa else {}})
    return done.stdout + done.stderr


def reference_convs(log: str) -> bool:
    """Whether oneDNN ran a convolution through a reference kernel (`ref` in the implementation name) on a
    layer deep enough to be judged (input channels > 3: rule KERNEL_MIN_REDUCTION leaves first layers out)."""
    for line in log.splitlines():
        # onednn_verbose,v1,primitive,exec,cpu,convolution,IMPLEMENTATION,...,PROBLEM,TIME
        fields = line.split(",")
        if fields[:6] == ["onednn_verbose", "v1", "primitive", "exec", "cpu", "convolution"] \
                and "ic3o" not in fields[-2] and "ref" in fields[6]:
            return True
    return False


def high_kernel_findings(folder: Path) -> list:
    return [f for f in advise(perfkit.load(folder)).findings if f.id == "kernel_efficiency" and f.severity == "high"]


@pytest.mark.mindspore
@pytest.mark.parametrize("variant", ["two_layers", "three_layers"])
def test_small_nets_with_jit_kernels_give_no_high_kernel_efficiency(tmp_path, variant):
    log = train_toy(tmp_path / variant, variant, isa="AVX2")
    assert "convolution" in log and not reference_convs(log)  # oneDNN's own word: jit kernels only
    assert high_kernel_findings(tmp_path / variant) == []


@pytest.mark.mindspore
def test_small_net_at_the_default_isa_fires_exactly_when_onednn_ran_a_reference_kernel(tmp_path):
    log = train_toy(tmp_path / "default", "two_layers", isa=None)
    found = high_kernel_findings(tmp_path / "default")
    assert bool(found) == reference_convs(log)
    for finding in found:  # slower than the same layers' other kernels, or below the host's reference-kernel rate
        assert (finding.evidence.get("ratio_to_reference", 1) < 0.1
                or finding.evidence["gflops_per_s"] < finding.evidence["reference_kernel_below_gflops_per_s"])
        assert "ONEDNN_MAX_CPU_ISA=AVX2" in finding.action


@pytest.mark.mindspore
def test_builtin_resnet50_at_32px_with_jit_kernels_gives_no_high_kernel_efficiency(tmp_path):
    folder = tmp_path / "resnet"
    done = subprocess.run([sys.executable, "-m", "perfkit", "profile", "--steps", "2", "--warmup", "1",
                           "--batch-size", "8", "--image-size", "32", "--env", "ONEDNN_MAX_CPU_ISA=AVX2",
                           "--output", str(folder)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert high_kernel_findings(folder) == []

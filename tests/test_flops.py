"""perfkit.analysis.flops: the work of each op from its input shapes, checked against the arithmetic written out."""

from __future__ import annotations

import math

import pandas as pd
from test_advisor import DOWN, LAYER, conv_ops

from perfkit.analysis.flops import gflops_per_s
from perfkit.core.model import table
from perfkit.core.op_work import OP_FLOPS_COLUMNS, batchnorm_flops, cell_name, matmul_flops, op_flops, parse_shapes


def test_op_flops_resolves_same_input_convs_by_cell_name_even_under_a_reused_scope():
    # layer1's conv1 (1x1) and conv2 (3x3) read the same input and write the same output size; graph mode
    # files the gradients of reused cells under the first block's scope (`0-Bottleneck`), so only the cell
    # name tells the filter gradients apart.
    rows = []
    for block in (0, 1):
        for cell, kernel in (("conv1", 1), ("conv2", 3)):
            fwd = f"Default/net/layer1/{block}-Bottleneck/{cell}-Conv2d"
            grad = f"Gradients/Default/net/layer1/0-Bottleneck/{cell}-Conv2d/Grad_Conv2D"
            weight = f"64,64,{kernel},{kernel}"
            rows += [{"name": f"{fwd}/Conv2D-op0", "type": "Conv2D", "input_shapes": f"8,64,16,16;{weight}"},
                     {"name": f"{grad}/Conv2DBackpropFilter-op{block}", "type": "Conv2DBackpropFilter",
                      "input_shapes": "8,64,16,16;8,64,16,16;4"},
                     {"name": f"{grad}/Conv2DBackpropInput-op{block}", "type": "Conv2DBackpropInput",
                      "input_shapes": f"8,64,16,16;{weight};4"}]
    ops = table("ops", pd.DataFrame([{"rank": 0, "avg_ms": 1.0, "count": 1, "total_ms": 1.0, "pass": "other",
                                      "input_dtypes": None, **row} for row in rows]))
    work = op_flops(ops)
    per_group = work.groupby("group")["flops"].sum().to_dict()
    for op_type in ("Conv2D", "Conv2DBackpropFilter", "Conv2DBackpropInput"):
        assert per_group[f"{op_type} 1x1"] == 2 * (2 * 8 * 64 * 16 * 16 * 64 * 1)
        assert per_group[f"{op_type} 3x3"] == 2 * (2 * 8 * 64 * 16 * 16 * 64 * 9)


def test_op_flops_from_shapes_uses_the_gradient_dout_for_the_output_size():
    work = op_flops(table("ops", pd.DataFrame([{"rank": 0, **r} for r in conv_ops(1.0, 1.0, 1.0)])))
    flops = dict(zip(work["name"], work["flops"]))
    # 2 * N * Cout * Hout * Wout * Cin * kh * kw, times 2 executions
    assert flops[f"{LAYER}/Conv2D-op0"] == 2 * (2 * 8 * 64 * 16 * 16 * 64 * 9)
    assert flops[f"{DOWN}/Conv2D-op0"] == 2 * (2 * 8 * 128 * 8 * 8 * 64 * 9)
    assert flops[f"Gradients/{DOWN}/Grad_Conv2D/Conv2DBackpropFilter-op1"] == flops[f"{DOWN}/Conv2D-op0"]
    assert flops["Default/net/bn-BatchNorm/BatchNorm-op3"] == 2 * 8 * 64 * 16 * 16 * 8
    assert set(work["group"]) == {"Conv2D 3x3", "Conv2DBackpropFilter 3x3", "Conv2DBackpropInput 3x3", "BatchNorm"}


def test_shapes_parse_from_every_way_the_files_write_them():
    assert parse_shapes("32,3,224,224;64,3,7,7") == ((32, 3, 224, 224), (64, 3, 7, 7))
    assert parse_shapes("[16, 64, 32, 32];[64]") == ((16, 64, 32, 32), (64,))
    assert parse_shapes("8,64;NoShape;") == ((8, 64), (), ())
    assert parse_shapes(None) == () and parse_shapes(math.nan) == ()


def test_cell_name_strips_the_gradient_scopes():
    assert cell_name("Default/net/conv2-Conv2d/Conv2D-op0") == "conv2-Conv2d"
    assert cell_name("Gradients/Default/net/conv2-Conv2d/Grad_Conv2D/Conv2DBackpropFilter-op6") == "conv2-Conv2d"
    assert cell_name("Conv2D-op0") == ""


def test_matmul_batchnorm_and_rate_arithmetic():
    # (16 x 2048) @ (2048 x 10), written with either operand transposed: 2 * 16 * 2048 * 10
    assert matmul_flops(((16, 2048), (2048, 10))) == matmul_flops(((16, 2048), (10, 2048))) == 2 * 16 * 2048 * 10
    assert matmul_flops(((16, 2048), (7, 9))) is None and matmul_flops(((16, 2048),)) is None
    assert batchnorm_flops("BatchNorm", ((16, 64, 32, 32), (64,))) == 16 * 64 * 32 * 32 * 8
    assert batchnorm_flops("BatchNormGrad", ((16, 64, 32, 32),)) == 16 * 64 * 32 * 32 * 10
    assert batchnorm_flops("BatchNorm", ((),)) is None and batchnorm_flops("Conv2D", ((1, 2),)) is None
    assert gflops_per_s(3e9, 1500.0) == 2.0  # 3 GFLOP in 1.5 s


def test_op_flops_of_a_run_without_dense_ops_is_an_empty_table_with_its_columns():
    ops = table("ops", pd.DataFrame([{"rank": 0, "name": "Default/ReLU-op0", "type": "ReLU", "avg_ms": 1.0,
                                      "count": 1, "total_ms": 1.0, "pass": "forward", "input_shapes": "8,64",
                                      "input_dtypes": None}]))
    work = op_flops(ops)
    assert list(work.columns) == OP_FLOPS_COLUMNS and not len(work)

"""Cells per steady step and MatMul gradients placed by their shapes (issue 37, item 8), on real MindSpore 2.10
CPU runs, checked against their raw files read with csv and json."""

from __future__ import annotations

import csv
import json
import re
import statistics
from pathlib import Path

import pytest
from conftest import REPO

import perfkit
import perfkit.analysis.cells
from perfkit.core import scopes

RUNS = REPO / "tests" / "runs"
DATA_BOUND = RUNS / "cpu_2_10_data_wait"
TRANSFORMER = RUNS / "cpu_2_10_transformer"


pytestmark = pytest.mark.usefixtures("uncached")


def recorded_ns(run: Path) -> dict[int, tuple[int, int]]:
    return {s["step"]: (s["begin_ns"], s["end_ns"])
            for s in json.loads((run / "perfkit_run.json").read_text())["steps"]}


def executions(run: Path) -> list[tuple[str, int, float]]:
    """(op name, start ns, ms) of each op run (FRAMEWORK/cpu_op_execute_timestamp_0.txt)."""
    found = []
    for line in next(run.rglob("cpu_op_execute_timestamp_0.txt")).read_text().splitlines():
        name, _, runs = line.split(";", 2)
        for one in runs.split():
            start, duration, _ = one.split(",")
            found.append((name, int(start), float(duration)))
    return found


def steady_steps_raw(run: Path) -> list[int]:
    """The recorded steps but a first one over 1.5x the median of the others (steady.FIRST_STEP_OUTLIER)."""
    bounds = recorded_ns(run)
    lengths = {step: end - begin for step, (begin, end) in bounds.items()}
    first = min(lengths)
    median = statistics.median(length for step, length in lengths.items() if step != first)
    return sorted(step for step in lengths if step != first or lengths[first] <= 1.5 * median)


def test_cells_are_per_steady_step():
    """The data-bound run's first step compiles (its Dense's first MatMul call alone is ~44 ms): the Cells hold the
    steady steps' op time, each Cell its ops' runs inside those steps' recorded bounds, per step."""
    steady = steady_steps_raw(DATA_BOUND)
    assert 1 not in steady
    bounds = recorded_ns(DATA_BOUND)
    per_cell: dict[str, float] = {}
    forward: dict[str, float] = {}
    for name, start, ms in executions(DATA_BOUND):
        if any(bounds[step][0] <= start < bounds[step][1] for step in steady):
            if name.startswith("Default/"):
                forward[name.rsplit("/", 1)[0]] = forward.get(name.rsplit("/", 1)[0], 0.0) + ms / len(steady)
            cell = re.sub(r"^Gradients/", "", name).rsplit("/", 1)[0]
            cell = "/".join(part for part in cell.split("/") if not part.startswith("Grad_"))
            per_cell[cell] = per_cell.get(cell, 0.0) + ms / len(steady)
    tree = perfkit.cells(perfkit.load(DATA_BOUND))
    root = tree[tree["path"] == "Default"].iloc[0]
    assert root["total_ms"] == pytest.approx(sum(ms for cell, ms in per_cell.items() if cell.startswith("Default")),
                                             rel=1e-5)  # the detail file rounds totals to 1 ns
    dense = "Default/network-WithLossCell/_backbone-SequentialCell/0-Dense"
    row = tree[tree["path"] == dense].iloc[0]
    # its forward ops: the ones named under it (MatMul, BiasAdd), steady steps only
    assert row["forward_ms"] == pytest.approx(forward[dense], rel=1e-5)
    everything = sum(ms for name, _, ms in executions(DATA_BOUND) if name.startswith(dense + "/"))
    assert row["forward_ms"] < 0.5 * everything / len(bounds)  # the all-steps mean the Cells showed (6.9 ms)


def framework_matmuls(run: Path) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The two input shapes of every MatMul run in cpu_framework_0.txt (one line per run)."""
    found = []
    for line in next(run.rglob("cpu_framework_0.txt")).read_text().splitlines():
        fields = line.split(";")
        if fields[0] == "MatMul":
            shapes = [tuple(int(d) for d in re.findall(r"\d+", field.split(":", 1)[1])) for field in fields[3:5]]
            found.append((shapes[0], shapes[1]))
    return found


def test_the_head_gets_its_own_matmul_gradients_only():
    """MindSpore names all 22 backward MatMuls of the transformer after its Dense head. By their shapes the
    head (32 -> 4 classes: the only tensors with a dimension of 4) keeps its forward MatMul and its two gradients:
    2*M*K*N of those runs per step, 0.006 MFLOP, where the names gave it 12.6."""
    classes = 4
    steps = len(recorded_ns(TRANSFORMER))
    head_runs = [(a, b) for a, b in framework_matmuls(TRANSFORMER) if classes in a + b]
    flops = 0.0
    for a, b in head_runs:
        inner = set(a) & set(b)
        (m,), (n,) = set(a) - inner or inner, set(b) - inner or inner
        flops += 2.0 * m * n * (inner.pop() if inner else 0)
    tree = perfkit.cells(perfkit.load(TRANSFORMER))
    head = tree[tree["label"] == "head"].iloc[0]
    assert len(head_runs) == 3 * steps
    assert head["flops"] == pytest.approx(flops / steps)
    everything = sum(2.0 * a[0] * a[1] * (b[0] if b[1] in a else b[1]) for a, b in framework_matmuls(TRANSFORMER))
    encoder = tree[tree["label"] == "encoder"].iloc[0]
    assert encoder["flops"] + head["flops"] == pytest.approx(everything / steps)


def test_matmul_gradient_pairs_of_a_dense_layer():
    """Dense(32 -> 4) on 8 rows: x [8, 32] times W [4, 32] transposed; dx reads (dy [8, 4], W), dW (dy, x)."""
    pairs = scopes.matmul_gradient_pairs((8, 32), (4, 32))
    assert ((4, 32), (8, 4)) in pairs and ((8, 4), (8, 32)) in pairs
    assert ((8, 32), (8, 32)) not in pairs


def test_an_expanded_softmax_gradient_is_placed_by_its_shapes():
    """MindSpore names the expanded softmax gradient `Expand/_SoftmaxBackward/Mul-op0`, outside every Cell: it is
    backward work, placed with the encoder's softmaxes (both layers' read its [8, 16, 16] shape), not a top-level
    `Expand` Cell."""
    with open(next(TRANSFORMER.rglob("cpu_op_detail_info_0.csv")), newline="") as file:
        expanded = [row for row in csv.DictReader(file) if row["full_op_name"].startswith("Expand/_SoftmaxBackward/")]
    assert len(expanded) == 8
    run = perfkit.load(TRANSFORMER)
    placed = perfkit.analysis.cells.placed_ops(run).set_index("name")
    for row in expanded:
        assert placed.loc[row["full_op_name"], "pass"] == "backward"
        assert placed.loc[row["full_op_name"], "path"] == \
            "Default/network-WithLossCell/_backbone-Classifier/encoder-SequentialCell"
    assert not (perfkit.cells(run)["path"] == "Expand/_SoftmaxBackward").any()

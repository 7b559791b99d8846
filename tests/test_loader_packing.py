"""The cluster-level read in workers from CLUSTER_WORKERS_FROM folders on, and a task's results sent back as a few
gathered Arrow tables (loader._packed / _unpacked): every rank's tables come back equal to the ones read, and the same
run loaded in worker processes and in this one is the same."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from conftest import FIXTURE_RUNS

from perfkit.io import loader
from perfkit.io.discovery import discover
from perfkit.io.formats import readers
from perfkit.io.parallel import PARALLEL_MIN_FOLDERS

pytestmark = pytest.mark.usefixtures("uncached")


def _cluster_results(run):
    _, jobs, _ = discover(run, readers())
    jobs = [(reader, folder) for reader, folder in jobs if loader._cluster_read(reader) != "skip"]
    return [loader._read_cluster_folder(reader.name, str(folder)) for reader, folder in jobs]


def _tables(results):
    return [(rank, name, table) for result in results if isinstance(result, dict)
            for rank, parts in result.items() for name, table in parts.tables.items()]


def test_packed_results_come_back_as_read():
    read = _cluster_results(FIXTURE_RUNS["new_level1"])
    expected = _tables(read)
    arrow = [table for _, _, table in expected if isinstance(table, pa.Table)]
    assert len(arrow) >= 2  # the ranks' steps and communication ops
    copy = pickle.loads(pickle.dumps(read))
    results, gathered = loader._packed(copy)
    assert len(gathered) < len(arrow)  # gathered by name and schema
    assert not any(isinstance(table, pa.Table) for _, _, table in _tables(results))
    back = _tables(loader._unpacked(pickle.loads(pickle.dumps((results, gathered)))))
    assert [(rank, name) for rank, name, _ in back] == [(rank, name) for rank, name, _ in expected]
    for (_, _, table), (_, _, original) in zip(back, expected):
        assert type(table) is type(original)
        assert table.schema == original.schema and table.to_pandas().equals(original.to_pandas())  # NaN as NaN


def test_a_dictionary_column_is_sent_as_it_is():
    """Gathering tables with dictionary columns would merge their dictionaries (a rank's categories would grow)."""
    from perfkit.io.formats.base import Parts
    coded = pa.table({"type": pa.array(["a", "b"]).dictionary_encode()})
    results, gathered = loader._packed([{0: Parts(tables={"op_types": coded})}])
    assert gathered == [] and results[0][0].tables["op_types"] is coded


def test_a_run_read_in_workers_is_the_run_read_here(monkeypatch):
    run = FIXTURE_RUNS["new_level1"]
    here = loader.load(run)
    monkeypatch.setattr("perfkit.io.parallel.PARALLEL_MIN_FOLDERS", 1)
    in_workers = loader.load(run)
    for name in ("steps", "comm_ops", "op_types", "ops"):
        assert getattr(in_workers, name).equals(getattr(here, name)), name
    assert in_workers.warnings == here.warnings and PARALLEL_MIN_FOLDERS > 1


def test_the_cluster_level_read_goes_to_workers_from_cluster_workers_from_folders(monkeypatch):
    """Below CLUSTER_WORKERS_FROM folders the cluster-level read stays here (forked workers cost more CPU than they
    save); from it on it goes to the workers, and the Run is the same."""
    run, called = FIXTURE_RUNS["new_level1"], []
    real = loader.map_folders

    def spied(function, arguments, **packing):
        called.append(function)
        return real(function, arguments, **packing)

    monkeypatch.setattr(loader, "map_folders", spied)
    here = loader.load(run, ranks=[0])
    assert loader._read_cluster_folders not in called and loader.CLUSTER_WORKERS_FROM > 4
    monkeypatch.setattr(loader, "CLUSTER_WORKERS_FROM", 1)
    in_workers = loader.load(run, ranks=[0])
    assert loader._read_cluster_folders in called
    assert in_workers.steps.equals(here.steps) and in_workers.comm_ops.equals(here.comm_ops)

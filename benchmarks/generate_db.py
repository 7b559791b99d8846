"""Write twin runs for the database-export benchmark: one ~2 million kernel rank as the text export and as
the database export, the same kernels and steps in both.

    python benchmarks/generate_db.py      # -> benchmarks/generated/big_rank_twins/{text,db}/rank0_ascend_pt

text/: generate.py's new-layout rank (kernel_details.csv, step_trace_time.csv, op_statistic.csv, … made from
       the real fixture new_format/msinsight_level1 rank 0, one copy per step) without trace_view.json, which
       perfkit never reads.
db/:   those rows in `ascend_pytorch_profiler_0.db` and `analysis.db` with the real schema: every CREATE
       statement of the fixture databases (new_format/msinsight_db_level1 rank 0) is run on the new files.
       Each kernel_details row becomes a TASK row joined to a COMPUTE_TASK_INFO row (strings through
       STRING_IDS, times in ns), its HCCL rows COMMUNICATION_OP rows; STEP_TIME gets each step's bounds
       (its first kernel's start less Preparing, plus the step_trace_time total), analysis.db's StepTraceTime
       the step_trace_time.csv rows, its CommAnalyzerTime/Bandwidth communication.json's ops. The memory files
       (memory_record.csv … : the fixture's 1,000-row copies, not replicated per step) are left out. As in the real database, TASK also holds the tasks that are no compute
       kernel (the fixture's 365 per step: memcpy, event, notify, SDMA …), copied into every step.
"""

from __future__ import annotations

import math
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generate  # noqa: E402
from replicate import read_csv_rows, staged_folder  # noqa: E402

DB_RANK = generate.FIXTURES / "new_format/msinsight_db_level1/rank0_ascend_pt" / generate.OUTPUT
FIXTURE_DB = DB_RANK / "ascend_pytorch_profiler_0.db"
FIXTURE_ANALYSIS = DB_RANK / "analysis.db"
TARGET = generate.GENERATED / "big_rank_twins"
# Tables copied whole from the fixture: the run's facts that do not grow with steps.
COPIED_TABLES = ("META_DATA", "NPU_INFO", "RANK_DEVICE_MAP", "SESSION_TIME_INFO", "HOST_INFO", "ENUM_API_TYPE",
                 "ENUM_MODULE", "ENUM_HCCL_DATA_TYPE", "ENUM_HCCL_LINK_TYPE", "ENUM_HCCL_RDMA_TYPE",
                 "ENUM_HCCL_TRANSPORT_TYPE", "ENUM_MSTX_EVENT_TYPE")
KERNEL_COLUMNS = ["Step Id", "Name", "Type", "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)",
                  "Stream ID", "Task ID", "Model ID", "Block Dim", "Mix Block Dim", "Input Shapes",
                  "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats"]


def fixture_connection(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def create_schema(target: sqlite3.Connection, source: Path) -> list[str]:
    """Run the fixture's CREATE TABLE statements on `target`; returns its CREATE INDEX statements, to run
    after the bulk insert."""
    with fixture_connection(source) as fixture:
        statements = fixture.execute("SELECT type, sql FROM sqlite_master WHERE sql IS NOT NULL "
                                     "AND name NOT LIKE 'sqlite_%'").fetchall()
    for kind, sql in statements:
        if kind == "table":
            target.execute(sql)
    return [sql for kind, sql in statements if kind == "index"]


class Strings:
    """STRING_IDS: one id per distinct string, in order of first use."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def ids_of(self, values: pa.ChunkedArray) -> np.ndarray:
        encoded = pc.dictionary_encode(pc.fill_null(values.cast(pa.string()), "N/A")).combine_chunks()
        mapped = np.array([self.ids.setdefault(value, len(self.ids)) for value in encoded.dictionary.to_pylist()],
                          dtype=np.int64)
        return mapped[encoded.indices.to_numpy()]


def starts_ns(column: pa.ChunkedArray) -> np.ndarray:
    """'1736408883704643.212\\t' (µs with 3 decimals) -> 1736408883704643212 ns, exactly (no float64)."""
    text = pc.utf8_trim_whitespace(column)
    parts = pc.split_pattern(text, ".")
    whole = pc.cast(pc.list_element(parts, 0), pa.int64()).to_numpy()
    fraction = pc.cast(pc.utf8_rpad(pc.list_element(parts, 1), 3, "0"), pa.int64()).to_numpy()
    return whole * 1000 + fraction


def write_profiler_db(path: Path, text_output: Path) -> dict:
    kernels = pacsv.read_csv(text_output / "kernel_details.csv",
                             convert_options=pacsv.ConvertOptions(include_columns=KERNEL_COLUMNS,
                                                                  column_types={"Start Time(us)": pa.string()}))
    start = starts_ns(kernels.column("Start Time(us)"))
    end = start + np.round(kernels.column("Duration(us)").to_numpy() * 1000).astype(np.int64)
    wait = np.round(np.nan_to_num(kernels.column("Wait Time(us)").to_numpy()) * 1000).astype(np.int64)
    step = kernels.column("Step Id").to_numpy()
    strings = Strings()
    ids = {name: strings.ids_of(kernels.column(name)) for name in
           ("Name", "Type", "Accelerator Core", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
            "Output Data Types", "Output Formats")}
    ints = {name: np.nan_to_num(pc.cast(kernels.column(name), pa.float64()).to_numpy(), nan=0).astype(np.int64)
            for name in ("Stream ID", "Task ID", "Model ID", "Block Dim", "Mix Block Dim")}
    hccl = pc.equal(kernels.column("Accelerator Core"), "HCCL").to_numpy(zero_copy_only=False)
    compute = np.flatnonzero(~hccl)

    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=OFF")
    connection.execute("PRAGMA synchronous=OFF")
    indexes = create_schema(connection, FIXTURE_DB)
    connection.execute("ATTACH DATABASE ? AS fixture", (f"file:{FIXTURE_DB}?mode=ro&immutable=1",))
    for table in COPIED_TABLES:
        connection.execute(f"INSERT INTO main.{table} SELECT * FROM fixture.{table}")

    task_rows = zip(start[compute].tolist(), end[compute].tolist(), compute.tolist(),
                    ids["Accelerator Core"][compute].tolist(), ints["Stream ID"][compute].tolist(),
                    ints["Task ID"][compute].tolist(), ints["Model ID"][compute].tolist())
    connection.executemany("INSERT INTO TASK (startNs, endNs, deviceId, connectionId, globalTaskId, globalPid, "
                           "taskType, contextId, streamId, taskId, modelId, depth) "
                           "VALUES (?, ?, 0, 0, ?, 0, ?, 4294967295, ?, ?, ?, 0)", task_rows)
    info_rows = zip(ids["Name"][compute].tolist(), compute.tolist(),
                    ints["Block Dim"][compute].tolist(), ints["Mix Block Dim"][compute].tolist(),
                    ids["Accelerator Core"][compute].tolist(), ids["Type"][compute].tolist(),
                    *(ids[name][compute].tolist() for name in ("Input Formats", "Input Data Types", "Input Shapes",
                                                               "Output Formats", "Output Data Types", "Output Shapes")),
                    wait[compute].tolist())
    connection.executemany("INSERT INTO COMPUTE_TASK_INFO (name, globalTaskId, blockDim, mixBlockDim, taskType, "
                           "opType, inputFormats, inputDataTypes, inputShapes, outputFormats, outputDataTypes, "
                           "outputShapes, attrInfo, waitNs) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)",
                           info_rows)
    communication = np.flatnonzero(hccl)
    connection.executemany("INSERT INTO COMMUNICATION_OP (opName, startNs, endNs, connectionId, groupName, opId, "
                           "relay, retry, dataType, algType, count, opType, waitNs) "
                           "VALUES (?, ?, ?, 0, NULL, ?, 0, 0, NULL, NULL, NULL, ?, ?)",
                           zip(ids["Name"][communication].tolist(), start[communication].tolist(),
                               end[communication].tolist(), range(len(communication)),
                               ids["Type"][communication].tolist(), wait[communication].tolist()))

    step_ids, first_row = np.unique(step, return_index=True)
    bounds = step_bounds(text_output, dict(zip(step_ids.tolist(), start[first_row].tolist())))
    connection.executemany("INSERT INTO STEP_TIME (id, startNs, endNs) VALUES (?, ?, ?)", bounds)
    other_tasks = copy_other_tasks(connection, bounds, first_id=len(kernels))
    connection.executemany("INSERT INTO STRING_IDS (id, value) VALUES (?, ?)",
                           ((i, value) for value, i in strings.ids.items()))
    for sql in indexes:
        connection.execute(sql)
    connection.commit()
    connection.execute("DETACH DATABASE fixture")
    connection.close()
    return {"kernels": int(len(compute)), "communication_ops": int(len(communication)), "steps": len(bounds),
            "other_tasks": other_tasks}


def step_bounds(text_output: Path, first_start: dict[int, int]) -> list[tuple[int, int, int]]:
    """(step, startNs, endNs): the step starts Preparing before its first kernel and lasts the total the text
    reader computes (Computing + Communication(Not Overlapped) + Free + Preparing)."""
    header, rows = read_csv_rows(text_output / "step_trace_time.csv")
    column = {name: header.index(name) for name in header}
    bounds = []
    for row in rows:
        us = {name: float(row[column[name]]) for name in
              ("Computing", "Communication(Not Overlapped)", "Free", "Preparing")}
        begin = first_start[int(row[column["Step"]])] - round(us["Preparing"] * 1000)
        bounds.append((int(row[column["Step"]]), begin, begin + round(sum(us.values()) * 1000)))
    return bounds


def copy_other_tasks(connection: sqlite3.Connection, bounds: list[tuple[int, int, int]], first_id: int) -> int:
    """The fixture step's tasks that are no compute kernel, shifted into every step (fresh globalTaskIds)."""
    (fixture_start,) = connection.execute("SELECT startNs FROM fixture.STEP_TIME").fetchone()
    others = connection.execute("SELECT startNs, endNs, deviceId, connectionId, globalPid, taskType, contextId, "
                                "streamId, taskId, modelId, depth FROM fixture.TASK WHERE globalTaskId NOT IN "
                                "(SELECT globalTaskId FROM fixture.COMPUTE_TASK_INFO)").fetchall()

    def rows():
        next_id = first_id
        for _, begin, _ in bounds:
            shift = begin - fixture_start
            for task in others:
                yield (task[0] + shift, task[1] + shift, *task[2:4], next_id, *task[4:])
                next_id += 1

    connection.executemany("INSERT INTO TASK (startNs, endNs, deviceId, connectionId, globalTaskId, globalPid, "
                           "taskType, contextId, streamId, taskId, modelId, depth) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows())
    return len(others) * len(bounds)


def write_analysis_db(path: Path, text_output: Path) -> None:
    """StepTraceTime = step_trace_time.csv, the same µs values (the torch_npu files hold µs there)."""
    header, rows = read_csv_rows(text_output / "step_trace_time.csv")
    connection = sqlite3.connect(path)
    create_schema(connection, FIXTURE_ANALYSIS)
    names = {"Step": "step", "Computing": "computing", "Communication(Not Overlapped)": "communication_not_overlapped",
             "Overlapped": "overlapped", "Communication": "communication", "Free": "free", "Stage": "stage",
             "Bubble": "bubble", "Communication(Not Overlapped and Exclude Receive)":
             "communication_not_overlapped_and_exclude_receive", "Preparing": "preparing"}
    columns = [names[name] for name in header]
    connection.executemany(f"INSERT INTO StepTraceTime ({', '.join(columns)}) VALUES "
                           f"({', '.join('?' * len(columns))})",
                           ([row[0]] + [float(value) for value in row[1:]] for row in rows))
    times, links = communication_rows(text_output / "communication.json")
    connection.executemany("INSERT INTO CommAnalyzerTime (hccl_op_name, group_name, start_timestamp, elapse_time, "
                           "transit_time, wait_time, synchronization_time, idle_time, step, type) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", times)
    connection.executemany("INSERT INTO CommAnalyzerBandwidth (hccl_op_name, group_name, transport_type, transit_size, "
                           "transit_time, bandwidth, large_packet_ratio, package_size, count, total_duration, step, "
                           "type) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", links)
    connection.commit()
    connection.close()


def communication_rows(path: Path) -> tuple[list[tuple], list[tuple]]:
    """communication.json as CommAnalyzerTime rows and CommAnalyzerBandwidth rows (one per link type and packet
    size bucket, as the real table repeats them)."""
    times, links = [], []
    for step, kinds in orjson.loads(path.read_bytes()).items():
        for kind, ops in kinds.items():
            for key, info in ops.items():
                if key == "Total Op Info":  # the step's sum, which CommAnalyzerTime has no row for
                    continue
                name, _, group = key.partition("@")
                time_info = info.get("Communication Time Info", {})
                times.append((name, group, time_info.get("Start Timestamp(us)"),
                              *(time_info.get(f"{field} Time(ms)") for field in
                                ("Elapse", "Transit", "Wait", "Synchronization", "Idle")), step, kind))
                for link_type, link in info.get("Communication Bandwidth Info", {}).items():
                    buckets = link.get("Size Distribution") or {None: [None, None]}
                    for package, (count, duration) in buckets.items():
                        links.append((name, group, link_type, link.get("Transit Size(MB)"), link.get("Transit Time(ms)"),
                                      link.get("Bandwidth(GB/s)"), link.get("Large Packet Ratio"),
                                      None if package is None else float(package), count, duration, step, kind))
    return times, links


def main() -> None:
    if TARGET.exists():
        print(f"exists, skipped ({TARGET})")
        return
    began = time.perf_counter()
    rows_per_step = len(read_csv_rows(generate.NEW_RANK / generate.OUTPUT / "kernel_details.csv")[1])
    steps = range(1, math.ceil(generate.BIG_KERNEL_ROWS / rows_per_step) + 1)
    with staged_folder(TARGET) as folder:
        text_rank = folder / "text" / "rank0_ascend_pt"
        facts = generate.write_new_layout_rank(text_rank, 0, steps, np.random.default_rng(generate.SEED))
        print(f"text twin: {facts} in {time.perf_counter() - began:.0f} s", flush=True)
        db_output = folder / "db" / "rank0_ascend_pt" / generate.OUTPUT
        db_output.mkdir(parents=True)
        (db_output.parent / "profiler_info_0.json").write_bytes((text_rank / "profiler_info_0.json").read_bytes())
        facts = write_profiler_db(db_output / "ascend_pytorch_profiler_0.db", text_rank / generate.OUTPUT)
        write_analysis_db(db_output / "analysis.db", text_rank / generate.OUTPUT)
    size = sum(f.stat().st_size for f in (TARGET / "db").rglob("*") if f.is_file())
    print(f"db twin: {facts}, {size / 1e9:.2f} GB; {time.perf_counter() - began:.0f} s in all -> {TARGET}")


if __name__ == "__main__":
    main()

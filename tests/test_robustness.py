"""Broken inputs made at test time from the real fixtures: perfkit either loads the sound parts with a
warning naming the skipped file, or stops with one line naming the file (exit 2). Never a traceback,
never NaN or negative times in the summary, never a write into the folder being read."""

from __future__ import annotations

import builtins
import errno
import functools
import io
import json
import math
import os
import sqlite3
import tempfile
from pathlib import Path

import broken
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import perfkit
from perfkit.apps.cli import main
from perfkit.core.errors import PerfkitError

LEGACY = "legacy_run_2"
NEW = "new_level1_rank0"
CPU = "cpu_2_10"
DB = "new_db_level1_rank0"
CPU_FW = "vm_10569_20261122103128064_ascend_ms/FRAMEWORK"
NEW_OUT = "ASCEND_PROFILER_OUTPUT"
# A real CPU run with MindSpore's memory record (profile_memory=True), which no fixture in tests/fixtures has.
CPU_MEMORY = "cpu_2_10_memory"
CPU_MEMORY_FILE = "vm_21053_20261123192539361_ascend_ms/FRAMEWORK/cpu_ms_memory_record_0.txt"
# A real `perfkit profile` run (its manifest perfkit_run.json), which no fixture in tests/fixtures has.
OWN_RUN = "sample_cpu_default"
HCCL = "legacy_hccl"
CLUSTER_OUTPUT = "cluster_analysis_output"
DB_LEVEL0 = "db_level0_rank0"
# A real kineto trace of a GPU (ROCm) run, gzipped (tests/raw/torch_rocm_mi250/SOURCE.txt).
GPU_TRACE = "torch_rocm_mi250"
GPU_TRACE_FILE = "mi250_minitoy_train_ROCm6_2_kineto.pt.trace.json.gz"
RUNS = {**FIXTURE_RUNS, CPU_MEMORY: REPO / "tests/runs/cpu_2_10_memory", OWN_RUN: REPO / "sample_runs/cpu_default",
        HCCL: REPO / "tests/runs/mindinsight_cluster_propose",
        CLUSTER_OUTPUT: REPO / "tests/runs/msinsight_cluster_analysis/cluster_analysis_output",
        DB_LEVEL0: REPO / "tests/runs/msinsight_db_level0/rank0_ascend_pt", GPU_TRACE: REPO / "tests/raw" / GPU_TRACE}


# A cached Parquet copy of the pristine run would hide every mutation.
pytestmark = pytest.mark.usefixtures("uncached")


def _gunzipped(edit):
    """A mutation of a gzipped trace's text, written back gzipped."""
    def mutate(path: Path) -> None:
        import gzip
        path.write_bytes(gzip.compress(edit(gzip.decompress(path.read_bytes()).decode()).encode()))
    return mutate


def _hostile_device_events(text: str) -> str:
    """The trace's kernels, memcpys and launches with a NaN duration, a list for a correlation, an object for a
    thread id."""
    data = json.loads(text)
    for number, event in enumerate(e for e in data["traceEvents"]
                                   if e.get("cat") in ("kernel", "gpu_memcpy", "cuda_runtime")):
        change = number % 3
        if change == 0:
            event["dur"] = float("nan")
        elif change == 1:
            event["args"] = {**event.get("args", {}), "correlation": [number]}
        else:
            event["tid"] = {"stream": number}
    return json.dumps(data)


def _is_avg_row(row: bytes) -> bool:
    return row.split(b",", 1)[0].strip() == b"0"


# name -> (fixture run, file inside it, mutation). The mutated file is the one a warning or error must name.
CASES = {
    "empty_type_csv": (LEGACY, "aicore_intermediate_1_type.csv", broken.empty),
    "header_only_type_csv": (LEGACY, "aicore_intermediate_1_type.csv", broken.header_only),
    "cut_mid_line_detail_csv": (LEGACY, "aicore_intermediate_1_detail.csv", broken.cut_mid_line),
    "json_cut_in_half": (LEGACY, "pipeline_profiling_1.json", broken.cut_in_half),
    "timeline_json_cut_in_half": (LEGACY, "ascend_timeline_display_1.json", broken.cut_in_half),
    "semicolon_step_trace": (LEGACY, "step_trace_raw_1_detail_time.csv", broken.semicolons),
    "non_utf8_type_csv": (LEGACY, "aicore_intermediate_1_type.csv", broken.non_utf8),
    "nan_duration": (LEGACY, "aicore_intermediate_1_type.csv",
                     lambda p: broken.set_column(p, "execution_time", "nan")),
    "inf_duration": (LEGACY, "aicore_intermediate_1_type.csv",
                     lambda p: broken.set_column(p, "execution_time", "inf")),
    "negative_duration": (LEGACY, "aicore_intermediate_1_type.csv",
                          lambda p: broken.set_column(p, "execution_time", "-5.0")),
    "negative_step_total": (LEGACY, "step_trace_raw_1_detail_time.csv",
                            lambda p: broken.set_column(p, "total", "-2370905")),
    "percent_above_1": (LEGACY, "aicore_intermediate_1_type.csv",
                        lambda p: broken.set_column(p, "percent", "7.5")),
    "percent_above_100": (LEGACY, "aicore_intermediate_1_type.csv",
                          lambda p: broken.set_column(p, "percent", "250")),
    "new_ratio_above_100": (NEW, f"{NEW_OUT}/op_statistic.csv",
                            lambda p: broken.set_column(p, "Ratio(%)", "250")),
    "new_nan_step_time": (NEW, f"{NEW_OUT}/step_trace_time.csv",
                          lambda p: broken.set_column(p, "Computing", "nan")),
    "new_negative_step_time": (NEW, f"{NEW_OUT}/step_trace_time.csv",
                               lambda p: broken.set_column(p, "Free", "-10")),
    "duplicated_steps": (LEGACY, "step_trace_raw_1_detail_time.csv", broken.duplicate_rows),
    "new_duplicated_steps": (NEW, f"{NEW_OUT}/step_trace_time.csv", broken.duplicate_rows),
    # was a traceback from the Cells (pandas: "Reindexing only valid with uniquely valued Index objects"), found
    # by mutating this file; the op's time counted twice before that
    "duplicated_ops": (LEGACY, "aicore_intermediate_1_detail.csv", broken.duplicate_rows),
    "op_listed_twice_with_other_times": (LEGACY, "aicore_intermediate_1_detail.csv", lambda p: broken.replace_bytes(
        p, b"fc3-Dense/MatMul-op22,4.04837\r\n", b"fc3-Dense/MatMul-op22,4.04837\r\n"
        b"Default/network-TrainOneStepCell/network-WithLossCell/_backbone-AlexNet/fc3-Dense/MatMul-op22,0.5\r\n")),
    "step_trace_only_average_row": (LEGACY, "step_trace_raw_1_detail_time.csv",
                                    lambda p: broken.keep_rows(p, _is_avg_row)),
    "extra_unknown_columns": (LEGACY, "aicore_intermediate_1_type.csv", broken.extra_columns),
    "new_extra_unknown_columns": (NEW, f"{NEW_OUT}/kernel_details.csv", broken.extra_columns),
    "columns_reordered": (LEGACY, "aicore_intermediate_1_type.csv", broken.reverse_columns),
    "new_columns_reordered": (NEW, f"{NEW_OUT}/op_statistic.csv", broken.reverse_columns),
    "cpu_type_info_cut": (CPU, f"{CPU_FW}/cpu_op_type_info_0.csv", broken.cut_mid_line),
    "cpu_timestamps_non_utf8": (CPU, f"{CPU_FW}/cpu_op_execute_timestamp_0.txt", broken.non_utf8),
    "huge_single_line": (LEGACY, "aicore_intermediate_1_detail.csv", broken.huge_line),
    "symlink_loop": (LEGACY, "aicore_intermediate_1_type.csv", broken.symlink_loop),
    "multi_rank_one_rank_missing_files": ("new_level1", f"rank1_ascend_pt/{NEW_OUT}/step_trace_time.csv",
                                          lambda p: p.unlink()),
    "multi_rank_one_rank_empty": ("new_level1", f"rank1_ascend_pt/{NEW_OUT}/kernel_details.csv", broken.empty),
    "db_cut_in_half": (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db", broken.cut_in_half),
    "db_not_sqlite": (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db", broken.not_sqlite),
    "db_empty": (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db", broken.empty),
    "db_missing_table": (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db",
                         lambda p: broken.drop_table(p, "COMPUTE_TASK_INFO")),
    "db_renamed_column": (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db",
                          lambda p: broken.rename_column(p, "TASK", "startNs", "beginNs")),
    "analysis_db_cut_in_half": (DB, f"{NEW_OUT}/analysis.db", broken.cut_in_half),
    "analysis_db_renamed_column": (DB, f"{NEW_OUT}/analysis.db",
                                   lambda p: broken.rename_column(p, "StepTraceTime", "computing", "compute")),
    "db_one_rank_not_sqlite": ("new_db_level1", f"rank1_ascend_pt/{NEW_OUT}/ascend_pytorch_profiler_1.db",
                               broken.not_sqlite),
    # the GPU side of a kineto trace (issue 40)
    "kineto_gpu_trace_cut_to_one_line": (GPU_TRACE, GPU_TRACE_FILE,
                                         _gunzipped(lambda text: text.splitlines()[0] + "\n")),
    "kineto_gpu_hostile_device_events": (GPU_TRACE, GPU_TRACE_FILE, _gunzipped(_hostile_device_events)),
    # memory and communication (issue 15)
    "memory_record_negative_size": (NEW, f"{NEW_OUT}/memory_record.csv",
                                    lambda p: broken.set_column(p, "Total Reserved(MB)", "-2109.6")),
    "memory_record_nan_size": (NEW, f"{NEW_OUT}/memory_record.csv",
                               lambda p: broken.set_column(p, "Total Reserved(MB)", "nan")),
    "memory_record_empty_cell": (NEW, f"{NEW_OUT}/memory_record.csv",
                                 lambda p: broken.set_column(p, "Total Reserved(MB)", "")),
    "memory_record_out_of_order": (NEW, f"{NEW_OUT}/memory_record.csv", broken.reverse_rows),
    "memory_record_cut": (NEW, f"{NEW_OUT}/memory_record.csv", broken.cut_mid_line),
    "operator_memory_negative_size": (NEW, f"{NEW_OUT}/operator_memory.csv",
                                      lambda p: broken.set_column(p, "Size(KB)", "-18816.5")),
    "npu_module_mem_non_utf8": (NEW, f"{NEW_OUT}/npu_module_mem.csv", broken.non_utf8),
    "communication_json_cut_in_half": (NEW, f"{NEW_OUT}/communication.json", broken.cut_in_half),
    "communication_matrix_cut_in_half": (NEW, f"{NEW_OUT}/communication_matrix.json", broken.cut_in_half),
    "communication_matrix_unknown_link_type": (NEW, f"{NEW_OUT}/communication_matrix.json",
                                               lambda p: broken.replace_bytes(p, b'"HCCS"', b'"UB"')),
    "communication_json_negative_time": (NEW, f"{NEW_OUT}/communication.json",
                                         lambda p: broken.replace_bytes(p, b'"Wait Time(ms)": 5.6', b'"Wait Time(ms)": -5.6')),
    "cpu_memory_record_negative_size": (CPU_MEMORY, CPU_MEMORY_FILE,
                                        lambda p: broken.set_column(p, "Total Allocated(Byte)", "-686592")),
    "cpu_memory_record_out_of_order": (CPU_MEMORY, CPU_MEMORY_FILE, broken.reverse_rows),
    "cpu_memory_record_empty": (CPU_MEMORY, CPU_MEMORY_FILE, broken.empty),
    # issue 25: hostile JSON (every JSON file goes through perfkit/core/boundedjson.py) and numbers the model
    # cannot hold (formats/screening.screened)
    "communication_json_400_digit_int": (NEW, f"{NEW_OUT}/communication.json", lambda p: broken.replace_bytes(
        p, b'"Wait Time(ms)": 5.6', b'"Wait Time(ms)": ' + b"9" * 400)),
    "communication_json_arrays_5k_deep": (NEW, f"{NEW_OUT}/communication.json", lambda p: broken.replace_bytes(
        p, b'"p2p": {}', b'"p2p": ' + broken.nested(b"[", 5_000))),
    "communication_matrix_objects_100k_deep": (NEW, f"{NEW_OUT}/communication_matrix.json",
                                               lambda p: broken.replace_bytes(
                                                   p, b'"p2p": {}', b'"p2p": ' + broken.nested(b"{", 100_000))),
    "communication_json_lone_surrogate": (NEW, f"{NEW_OUT}/communication.json", lambda p: broken.replace_bytes(
        p, b'hcom_allReduce__586_0_1@', b'hcom_allReduce__586_0_1\\ud800@')),
    "communication_matrix_huge_step": (NEW, f"{NEW_OUT}/communication_matrix.json", lambda p: broken.replace_bytes(
        p, b'"step50"', b'"step-99999999999999999999999"')),
    "communication_matrix_huge_rank": (NEW, f"{NEW_OUT}/communication_matrix.json", lambda p: broken.replace_bytes(
        p, b'"0-1"', b'"0-' + b"1" * 30 + b'"')),
    "pipeline_json_nan_and_inf": (LEGACY, "pipeline_profiling_1.json", lambda p: broken.replace_bytes(
        p, b'"num_workers":8', b'"num_workers":NaN')),
    "db_task_all_null": (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db", lambda p: broken.set_cells(
        p, "TASK", ", ".join(f'"{c}" = NULL' for c in ("startNs", "endNs", "deviceId", "connectionId",
                                                       "globalTaskId", "globalPid", "taskType", "contextId",
                                                       "streamId", "taskId", "modelId", "depth")))),
    "analysis_db_inf": (DB, f"{NEW_OUT}/analysis.db", lambda p: broken.set_cells(p, "StepTraceTime",
                                                                               "computing = 9e999")),
    "db_three_20mb_strings": (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db", lambda p: _huge_strings(p)),
    "analysis_db_comm_inf": (DB, f"{NEW_OUT}/analysis.db", lambda p: broken.set_cells(p, "CommAnalyzerTime",
                                                                                    "elapse_time = 9e999")),
    # was `advise --format json`: "Out of range float values are not JSON compliant: inf" (size_mb is no time)
    "analysis_db_link_size_inf": (DB, f"{NEW_OUT}/analysis.db", lambda p: broken.set_cells(p, "CommAnalyzerMatrix",
                                                                                         "transit_size = 9e999")),
}

def _huge_strings(database: Path) -> None:
    """The names of the three most run kernels 20 MB long (issue 25: `perfkit trace` took 21 s and 3.9 GB
    for this 4,000-event run, over 2 minutes under load)."""
    broken.set_cells(database, "STRING_IDS", "value = replace(hex(zeroblob(10000000)), '00', 'xy')",
                     "id IN (SELECT name FROM COMPUTE_TASK_INFO GROUP BY name ORDER BY count(*) DESC LIMIT 3)")


# Outcomes seen per case, written into docs/robustness.md by hand from `pytest -s` output.
OUTCOMES: dict[str, str] = {}
EXAMPLES = {"count": 0}


def _invoke(command: str, run: Path):
    result = CliRunner().invoke(main, [command, str(run), "--format", "json"])
    return result


def _assert_sound_numbers(node, where="summary"):
    """No NaN/inf anywhere and no negative time in the JSON a user would pipe into jq."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert math.isfinite(value), f"{where}.{key} = {value}"
                if key.endswith("_ms"):
                    assert value >= 0, f"{where}.{key} = {value} is a negative time"
            else:
                _assert_sound_numbers(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _assert_sound_numbers(item, f"{where}[{i}]")


def _check_outcome(result, mutated: Path) -> str:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr
        assert mutated.name in lines[0] or mutated.parent.name in lines[0], lines[0]
        return "exit 2: " + lines[0].split(": ", 2)[-1]
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    return payload


# Cases whose change leaves every number perfkit shows right, so loading them without a word is correct:
# extra or reordered columns are matched by name, the percent columns are recomputed from times, and
# the timeline JSON is not read.
SOUND_CASES = {"extra_unknown_columns", "new_extra_unknown_columns", "columns_reordered", "new_columns_reordered",
               "percent_above_1", "percent_above_100", "new_ratio_above_100", "timeline_json_cut_in_half",
               # an empty memory cell is how the profiler writes "unknown" (docs/formats.md §3): nothing to say
               "memory_record_empty_cell"}


@functools.lru_cache(maxsize=None)
def pristine_warnings(fixture: str) -> frozenset[str]:
    result = _invoke("summary", RUNS[fixture])
    assert result.exit_code == 0, result.output
    return frozenset(json.loads(result.stdout)["warnings"])


# Real bugs found by this corpus and not fixed yet (see docs/robustness.md): the reader accepts the value.
KNOWN_BUGS: dict[str, str] = {}  # case -> why it still fails; empty since negative/inf durations became unknown


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[c]))
                                  if c in KNOWN_BUGS else c for c in sorted(CASES)])
def test_broken_input_is_skipped_or_named(case, tmp_path):
    fixture, relative, mutate = CASES[case]
    run = broken.copy_run(RUNS[fixture], tmp_path / "run")
    target = run / relative
    mutate(target)
    before = broken.folder_digest(run)

    summary = _check_outcome(_invoke("summary", run), target)
    advice = _check_outcome(_invoke("advise", run), target)
    assert type(advice) is type(summary), "summary and advise disagree on whether the run loads"

    if isinstance(summary, dict):
        _assert_sound_numbers(summary)
        _assert_sound_numbers(advice, "advice")
        new = [w for w in summary["warnings"] if w not in pristine_warnings(fixture)]
        if case not in SOUND_CASES:
            assert new, "something is off in the files but the run loaded without a warning"
        named = [w for w in new if target.name in w] or new
        OUTCOMES[case] = "exit 0: " + (named[0] if named else "loaded, no warning")
    else:
        OUTCOMES[case] = summary
    assert broken.folder_digest(run) == before


def test_unreadable_file_is_skipped_and_named(tmp_path, monkeypatch):
    run = broken.copy_run(FIXTURE_RUNS[LEGACY], tmp_path / "run")
    target = run / "aicore_intermediate_1_type.csv"
    target.chmod(0)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # root reads through chmod 000: make opening it fail as it does for anyone else (EACCES)
        def denying(real):
            def denying_open(file, *args, **kwargs):
                if isinstance(file, (str, os.PathLike)) and os.fspath(file) == str(target):
                    raise PermissionError(errno.EACCES, "Permission denied", str(target))
                return real(file, *args, **kwargs)
            return denying_open
        monkeypatch.setattr(io, "open", denying(io.open))
        monkeypatch.setattr(builtins, "open", denying(builtins.open))
        monkeypatch.setattr(os, "open", denying(os.open))  # perfkit.core.files.open_regular
    try:
        summary = _check_outcome(_invoke("summary", run), target)
    finally:
        target.chmod(0o644)
    assert isinstance(summary, dict), summary
    named = [w for w in summary["warnings"] if target.name in w]
    assert named and "Permission denied" in named[0], summary["warnings"]
    OUTCOMES["unreadable_file"] = "exit 0: " + named[0]


@pytest.mark.parametrize("relative", [f"{NEW_OUT}/ascend_pytorch_profiler_0.db", f"{NEW_OUT}/analysis.db"])
def test_fifo_in_place_of_a_database_is_refused_not_waited_on(relative, tmp_path):
    """Issue 25: a named pipe called ascend_pytorch_profiler_0.db hung summary, advise and trace for ever
    (opening a FIFO for reading waits for a writer). Run as subprocesses with a timeout, so that a hang
    fails the test instead of stopping the suite."""
    import subprocess
    import sys
    run = broken.copy_run(FIXTURE_RUNS[DB], tmp_path / "run")
    broken.fifo(run / relative)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    for command in (["summary", str(run), "--format", "json"], ["advise", str(run), "--format", "json"],
                    ["trace", str(run), "--start-ms", "0", "-o", str(tmp_path / "trace.json")]):
        result = subprocess.run([sys.executable, "-m", "perfkit", *command], capture_output=True, text=True,
                                env=env, timeout=120)
        assert "Traceback" not in result.stderr, result.stderr
        message = f"{Path(relative).name}: is a named pipe (FIFO), not a file: not read"
        if result.returncode == 2:  # nothing else to read: the one line names the pipe
            assert message in result.stderr, result.stderr
        else:
            assert result.returncode == 0, result.stderr
            if command[0] == "summary":
                assert any(message in w for w in json.loads(result.stdout)["warnings"]), result.stdout


def test_json_output_writes_non_finite_numbers_as_null():
    """The CLI's JSON is strict (jq refuses NaN/Infinity): a number arithmetic made infinite is null."""
    from perfkit.apps.cli import _json
    payload = json.loads(_json({"a": math.inf, "b": [math.nan, 1.5], "c": {"d": -math.inf, "e": 2}}))
    assert payload == {"a": None, "b": [None, 1.5], "c": {"d": None, "e": 2}}


def test_warning_names_the_skipped_file(tmp_path):
    """The contract's positive half: a broken file in a good run is named in "warnings" and the rest loads."""
    run = broken.copy_run(FIXTURE_RUNS[LEGACY], tmp_path / "run")
    broken.cut_in_half(run / "pipeline_profiling_1.json")
    result = _invoke("summary", run)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert any("pipeline_profiling_1.json" in w for w in payload["warnings"]), payload["warnings"]
    assert payload["steps"]["count"] >= 1


# ---- property-based: random mutations of real files --------------------------------------------

MUTATION_TARGETS = [
    (LEGACY, "aicore_intermediate_1_type.csv"),
    (LEGACY, "aicore_intermediate_1_detail.csv"),
    (LEGACY, "step_trace_raw_1_detail_time.csv"),
    (LEGACY, "dataset_iterator_profiling_1.txt"),
    (LEGACY, "pipeline_profiling_1.json"),
    ("minddata_job1", "pipeline_profiling_0.json"),
    ("new_level1_rank0_output", "step_trace_time.csv"),
    ("new_level1_rank0_output", "op_statistic.csv"),
    ("new_level1_rank0_output", "kernel_details.csv"),
    (CPU, f"{CPU_FW}/cpu_op_type_info_0.csv"),
    (CPU, f"{CPU_FW}/cpu_op_execute_timestamp_0.txt"),
    # binary: truncation and flipped bytes are the ways a database breaks (pages cut off, bits rotted)
    (DB, f"{NEW_OUT}/ascend_pytorch_profiler_0.db"),
    (DB, f"{NEW_OUT}/analysis.db"),
    (NEW, f"{NEW_OUT}/memory_record.csv"),
    (NEW, f"{NEW_OUT}/operator_memory.csv"),
    (NEW, f"{NEW_OUT}/npu_module_mem.csv"),
    (NEW, f"{NEW_OUT}/communication.json"),
    (NEW, f"{NEW_OUT}/communication_matrix.json"),
    # every other JSON a reader takes, through the bounded decoder (issue 25)
    (NEW, "profiler_info_0.json"),
    (NEW, "profiler_metadata.json"),
    (LEGACY, "minddata_cpu_utilization_1.json"),
    (OWN_RUN, "perfkit_run.json"),
    (CPU_MEMORY, CPU_MEMORY_FILE),
    # the readers of issue 23: hccl_raw's JSON cells, msprof-analyze's cluster output, a Level0 database
    (HCCL, "hccl_raw_0.csv"),
    (CLUSTER_OUTPUT, "cluster_step_trace_time.csv"),
    (CLUSTER_OUTPUT, "cluster_communication.json"),
    (CLUSTER_OUTPUT, "cluster_communication_matrix.json"),
    (DB_LEVEL0, f"{NEW_OUT}/ascend_pytorch_profiler_0.db"),
]


def _mutate(raw: bytes, op: str, a: int, b: int) -> bytes:
    rows = raw.splitlines(keepends=True) or [b""]
    i = a % len(rows)
    if op == "truncate":
        return raw[: a % (len(raw) + 1)]
    if op == "delete_line":
        return b"".join(rows[:i] + rows[i + 1:])
    if op == "duplicate_line":
        return b"".join(rows[: i + 1] + [rows[i]] + rows[i + 1:])
    if op == "flip_byte":
        pos = a % max(len(raw), 1)
        return raw[:pos] + bytes([(raw[pos] if raw else 0) ^ (1 + b % 255)]) + raw[pos + 1:]
    if op == "swap_columns":
        def swap(row: bytes) -> bytes:
            end = row[len(row.rstrip(b"\r\n")):]
            cells = row.rstrip(b"\r\n").split(b",")
            x, y = a % len(cells), b % len(cells)
            cells[x], cells[y] = cells[y], cells[x]
            return b",".join(cells) + end
        return b"".join(swap(r) for r in rows)
    if op == "hostile_json":
        return _hostile_json(raw, a, b)
    raise AssertionError(op)


# JSON that the bounded decoder (perfkit/core/boundedjson.py) must take: deep nesting, numbers no int64 or float
# holds, NaN/Infinity, lone surrogates, a long string.
HOSTILE_JSON = [broken.nested(b"[", 5_000).decode(), broken.nested(b"{", 3_000).decode(), "1" * 400, "9e999",
                "-9e999", "NaN", "Infinity", '"\\ud800"', '"step-99999999999999999999999"', '"' + "x" * 100_000 + '"',
                "12345678901234567890123", "-1", "null", "[]"]


def _hostile_json(raw: bytes, a: int, b: int) -> bytes:
    """One value (or key) of a JSON file replaced by one of HOSTILE_JSON; a file that is not JSON (already
    broken by another mutation, or a CSV) is left as it is."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # an earlier mutation made it too deep for this helper too
        return raw
    slots = []  # (container, key) of every value

    def walk(node) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, value in items:
            slots.append((node, key))
            walk(value)
    try:
        walk(data)
    except RecursionError:
        return raw
    if not slots:
        return raw
    container, key = slots[a % len(slots)]
    hostile = HOSTILE_JSON[b % len(HOSTILE_JSON)]
    if isinstance(container, dict) and b % 5 == 0 and hostile.startswith('"'):  # a hostile key
        container["@@KEY@@"] = container.pop(key)
        return json.dumps(data).replace('"@@KEY@@"', hostile, 1).encode()
    container[key] = "@@VALUE@@"
    return json.dumps(data).replace('"@@VALUE@@"', hostile, 1).encode()


MUTATIONS = st.lists(
    st.tuples(st.sampled_from(["truncate", "delete_line", "duplicate_line", "flip_byte", "swap_columns",
                               "hostile_json"]),
              st.integers(0, 2**20), st.integers(0, 2**20)),
    min_size=1, max_size=3)


def mutated_copy(source: Path, relative: str, mutations, scratch: Path) -> tuple[Path, object]:
    """A copy of the run `source` with its file `relative` mutated, and the copy's digest before anything reads it."""
    run = broken.copy_run(source, scratch / "run")
    target = run / relative
    raw = target.read_bytes()
    for op, a, b in mutations:
        raw = _mutate(raw, op, a, b)
    target.write_bytes(raw)
    return run, broken.folder_digest(run)


@pytest.mark.parametrize("fixture,relative", MUTATION_TARGETS, ids=[Path(r).name for _, r in MUTATION_TARGETS])
# Derandomized so CI sees the same examples every run; PERFKIT_HYPOTHESIS_EXAMPLES=200 explores further.
@settings(max_examples=int(os.environ.get("PERFKIT_HYPOTHESIS_EXAMPLES", "12")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=MUTATIONS)
def test_mutated_file_loads_or_raises_perfkit_error(fixture, relative, mutations):
    with tempfile.TemporaryDirectory() as scratch:
        run, before = mutated_copy(RUNS[fixture], relative, mutations, Path(scratch))
        try:
            loaded = perfkit.load(run)
        except PerfkitError as exc:
            assert str(exc)
        else:
            assert isinstance(loaded, perfkit.Run)
        assert broken.folder_digest(run) == before
    EXAMPLES["count"] += 1


# ---- property-based: hostile values in the database export's cells (issue 25) ---------------------------

HOSTILE_CELLS = ["NULL", "9e999", "-9e999", "-1", "0", "9223372036854775807", "'x'", "''",
                 "replace(hex(zeroblob(50000)), '00', 'ab')", "X'FFFE00'", "'12345678901234567890123'"]


def _columns(database: Path) -> list[tuple[str, str]]:
    connection = sqlite3.connect(f"file:{database}?mode=ro&immutable=1", uri=True)
    try:
        tables = [name for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return [(table, row[1]) for table in tables for row in connection.execute(f'PRAGMA table_info("{table}")')]
    finally:
        connection.close()


DB_FILES = [f"{NEW_OUT}/ascend_pytorch_profiler_0.db", f"{NEW_OUT}/analysis.db"]


@pytest.mark.parametrize("relative", DB_FILES, ids=[Path(r).name for r in DB_FILES])
@settings(max_examples=int(os.environ.get("PERFKIT_HYPOTHESIS_EXAMPLES", "12")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.integers(0, 2**16), st.sampled_from(HOSTILE_CELLS), st.sampled_from(["1", "rowid % 2 = 0", "rowid = 1"])),
                      min_size=1, max_size=3))
def test_hostile_cells_in_a_database_load_or_raise_perfkit_error(relative, edits):
    """Cells of any table and column set to values no profiler writes (NULL, 9e999, text in a number column,
    a 100,000-character string, bytes): a Run with finite numbers in its summary JSON, or a PerfkitError."""
    with tempfile.TemporaryDirectory() as scratch:
        run = broken.copy_run(RUNS[DB], Path(scratch) / "run")
        database = run / relative
        columns = _columns(database)
        for column_index, value, where in edits:
            table, column = columns[column_index % len(columns)]
            try:
                broken.set_cells(database, table, f'"{column}" = {value}', where)
            except sqlite3.IntegrityError:  # a primary key cannot be NULL or repeated: that cell stays
                pass
        before = broken.folder_digest(run)
        result = CliRunner().invoke(main, ["summary", str(run), "--format", "json"])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        if result.exit_code == 0:
            _assert_sound_numbers(json.loads(result.stdout))
        else:
            assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert broken.folder_digest(run) == before
    EXAMPLES["count"] += 1


# Traces are read only by the timeline index (`perfkit trace`, the Timeline page), not by load().
CPU_UNIT = "cpu_2_10", "vm_10569_20261122103128064_ascend_ms"
TRACE_TARGETS = [(NEW, f"{NEW_OUT}/trace_view.json"), (LEGACY, "ascend_timeline_display_1.json"),
                 (LEGACY, "output_timeline_data_1.txt"),
                 (CPU_UNIT[0], f"{CPU_UNIT[1]}/FRAMEWORK/cpu_op_execute_timestamp_0.txt"),
                 ("new_db_level1_rank0", f"{NEW_OUT}/ascend_pytorch_profiler_0.db")]
# A text timeline is read only for a rank without a JSON one: its JSON sibling is removed from the copy.
JSON_SIBLING = {"output_timeline_data_1.txt": "ascend_timeline_display_1.json",
                "cpu_op_execute_timestamp_0.txt": f"{CPU_UNIT[1]}/{NEW_OUT}/trace_view.json"}


@pytest.mark.parametrize("fixture,relative", TRACE_TARGETS, ids=[Path(r).name for _, r in TRACE_TARGETS])
@settings(max_examples=int(os.environ.get("PERFKIT_HYPOTHESIS_EXAMPLES", "12")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=MUTATIONS)
def test_mutated_trace_is_indexed_or_named(fixture, relative, mutations):
    """`perfkit trace` on a damaged trace: the readable events (exit 0) or one line naming the file (exit 2);
    never a traceback, never a write into the run."""
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        patch.delenv("PERFKIT_NO_CACHE")  # the index lives in the cache
        patch.setenv("PERFKIT_CACHE_DIR", str(Path(scratch) / "cache"))
        run, before = mutated_copy(FIXTURE_RUNS[fixture], relative, mutations, Path(scratch))
        if Path(relative).name in JSON_SIBLING:
            (run / JSON_SIBLING[Path(relative).name]).unlink()
            before = broken.folder_digest(run)
        result = CliRunner().invoke(main, ["trace", str(run), "--start-ms", "0", "-o", str(Path(scratch) / "w.json")])
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        if result.exit_code == 2:
            (line,) = [line for line in result.stderr.splitlines() if line.startswith("perfkit:")]
            assert Path(relative).name in line, line
        else:
            assert result.exit_code == 0, result.output
            assert isinstance(json.loads((Path(scratch) / "w.json").read_bytes()), list)
        assert broken.folder_digest(run) == before
    EXAMPLES["count"] += 1


# Issue 25: hostile trace_view.json (a copy of the real msinsight_level1 rank 0 trace, one event changed).
TRACE_VIEW = f"{NEW_OUT}/trace_view.json"
FIRST_EVENT = b'[{"ph": "X", "name": "aten::empty"'
TRACE_CASES = {
    # was RecursionError out of msgspec (fast path) and json (slow path): a traceback
    "args_3000_deep": (lambda p: broken.replace_once(p, b'"args": {"Sequence number": -1',
                                                    b'"args": {"name": ' + broken.nested(b"{", 3000)
                                                    + b', "Sequence number": -1'), "nested too deep"),
    "array_event_50000_deep": (lambda p: broken.replace_once(p, FIRST_EVENT, b"[" + broken.nested(b"[", 50_000)
                                                             + b", " + FIRST_EVENT[1:]), "nested too deep"),
    "lone_surrogate_name": (lambda p: broken.replace_once(p, FIRST_EVENT, FIRST_EVENT[:-1] + b'\\ud800"'), None),
    "duration_1e400": (lambda p: broken.replace_once(p, b'"dur": 145.57', b'"dur": 1e400'), "not numbers"),
}


@pytest.mark.parametrize("case", sorted(TRACE_CASES))
def test_hostile_trace_is_indexed_with_a_warning(case, tmp_path, monkeypatch):
    monkeypatch.delenv("PERFKIT_NO_CACHE")
    mutate, said = TRACE_CASES[case]
    run = broken.copy_run(FIXTURE_RUNS[NEW], tmp_path / "run")
    mutate(run / TRACE_VIEW)
    result = CliRunner().invoke(main, ["trace", str(run), "--step", "50", "-o", str(tmp_path / "w.json")])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 0, result.output
    events = json.loads((tmp_path / "w.json").read_bytes())
    expected = _step_50_events(FIXTURE_RUNS[NEW])
    assert abs(len(events) - expected) <= 1  # at most the changed event is left out
    warnings = [line for line in result.stderr.splitlines() if "warning" in line and "trace_view.json" in line]
    if said:
        assert any(said in line for line in warnings), result.stderr
        OUTCOMES[f"trace_{case}"] = "exit 0: " + next(line for line in warnings if said in line)
    else:
        assert any("\ufffd" in str(event.get("name")) for event in events)
        OUTCOMES[f"trace_{case}"] = "exit 0: the name shown with U+FFFD"


def test_huge_database_strings_are_cut_for_the_timeline(tmp_path, monkeypatch):
    from perfkit.io.formats.db_files import MAX_STRING
    monkeypatch.delenv("PERFKIT_NO_CACHE")
    run = broken.copy_run(FIXTURE_RUNS[DB], tmp_path / "run")
    _huge_strings(run / f"{NEW_OUT}/ascend_pytorch_profiler_0.db")
    result = CliRunner().invoke(main, ["trace", str(run), "--step", "50", "-o", str(tmp_path / "w.json")])
    assert result.exit_code == 0, result.output
    assert "STRING_IDS: 3 string(s) longer than 4,096 characters cut" in result.stderr
    names = [event.get("name") or "" for event in json.loads((tmp_path / "w.json").read_bytes())]
    assert len(names) == _step_50_events(FIXTURE_RUNS[DB])
    cut = [name for name in names if len(name) > 1000]
    assert cut and all(len(name) == MAX_STRING + 1 and name.startswith("xyxy") for name in cut)


@functools.lru_cache(maxsize=None)
def _step_50_events(source: Path) -> int:
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERFKIT_CACHE_DIR", scratch)
        patch.delenv("PERFKIT_NO_CACHE", raising=False)
        result = CliRunner().invoke(main, ["trace", str(source), "--step", "50", "-o", f"{scratch}/w.json"])
        assert result.exit_code == 0, result.output
        return len(json.loads(Path(f"{scratch}/w.json").read_bytes()))


def test_zz_report_counts():
    """Printed with -s; runs last in file order so the counter is complete."""
    print(f"\nhypothesis examples run: {EXAMPLES['count']}")
    for case, outcome in sorted(OUTCOMES.items()):
        print(f"| {case} | {outcome} |")
    assert EXAMPLES["count"] == 0 or EXAMPLES["count"] >= len(MUTATION_TARGETS)


@pytest.mark.parametrize("size", [0, 1, 4095, 65536, 200_000])
def test_read_regular_gives_what_open_regular_reads(size, tmp_path):
    from perfkit.core.files import open_regular, read_regular
    path = tmp_path / "file.bin"
    path.write_bytes(os.urandom(size))
    with open_regular(path) as handle:
        expected = handle.read()
    assert read_regular(path) == expected
    assert read_regular(path, 1000) == expected[:1000]


def test_read_regular_refuses_what_is_no_regular_file_without_waiting(tmp_path):
    from perfkit.core.errors import FileFormatError
    from perfkit.core.files import read_regular
    fifo = tmp_path / "communication.json"
    os.mkfifo(fifo)
    with pytest.raises(FileFormatError, match="named pipe"):
        read_regular(fifo)
    with pytest.raises(FileFormatError, match="folder"):
        read_regular(tmp_path)
    with pytest.raises(FileFormatError, match="cannot be read"):
        read_regular(tmp_path / "missing.json")

"""Issue 38: numbers in real files changed to ones no rank, step, count or size can be (non-finite, huge, negative,
fractional, not a number), and counts in names or headers that would drive unbounded work. Each case copies a real
run, changes one value, and runs `summary`, `ranks` and `advise --format json` cold and then warm (the cache on):
exit 0 with a warning naming the file or exit 2 with one line naming it; no traceback; no negative, sentinel or
out-of-range rank in any JSON; the warm answer the cold one; the input folder byte-identical."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import broken
import pytest
from click.testing import CliRunner
from conftest import FIXTURE_RUNS, REPO
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfkit.apps.cli import main
from perfkit.io.formats.integers import MAX_RANK

CLUSTER = REPO / "tests/runs/msinsight_cluster_analysis/cluster_analysis_output"
HCCL = REPO / "tests/runs/mindinsight_cluster_propose"
MINDDATA_4 = REPO / "tests/runs/mindinsight_minddata_4ranks"
FEED = REPO / "tests/runs/seed_1_feed_fp32"
DB_LEVEL0 = REPO / "tests/runs/msinsight_db_level0/rank0_ascend_pt"
LEGACY = FIXTURE_RUNS["legacy_run_2"]
NEW = FIXTURE_RUNS["new_level1_rank0"]
DB = FIXTURE_RUNS["new_db_level1_rank0"]
CPU = FIXTURE_RUNS["cpu_2_10"]
OUT = "ASCEND_PROFILER_OUTPUT"
STEP_FILE = "cluster_step_trace_time.csv"
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1


def cluster_index(value: str):
    """Rank 3's row of step 2 in cluster_step_trace_time.csv with `value` for its Index."""
    return lambda run: broken.replace_bytes(run / STEP_FILE, b"\n2,rank,3,", f"\n2,rank,{value},".encode())


def hccl_step(value: str):
    return lambda run: broken.replace_bytes(run / "hccl_raw_0.csv", b"\n1,2.60018,", f"\n{value},2.60018,".encode())


def device_map(value: str):
    """A database found by RANK_DEVICE_MAP alone (no profiler_info, no rank in its name), its rankId `value`."""
    def mutate(run: Path) -> None:
        (run / "profiler_info_0.json").unlink()
        database = run / OUT / "ascend_pytorch_profiler.db"
        (run / OUT / "ascend_pytorch_profiler_0.db").rename(database)
        broken.set_cells(database, "RANK_DEVICE_MAP", f"rankId = {value}")
    return mutate


def rename(old: str, new: str):
    return lambda run: (run / old).rename(run / new)


def summary_json(field: str, value: str):
    """MindSpore's minddata_pipeline_summary_0.json made from the real pipeline_profiling_0.json of cpu_2_10 (as
    tests/test_minddata_summary.py does; no real one is public), with one value of `field` replaced by `value`."""
    def mutate(run: Path) -> None:
        from test_minddata_summary import summary_of, write_summary
        raw = run / "md" / "pipeline_profiling_0.json"
        data = summary_of(json.loads(raw.read_text()))
        raw.unlink()
        data[field][1] = "@@"
        path = write_summary(run / "md", data)
        path.write_text(path.read_text().replace('"@@"', value))
    return mutate


# name -> (real run, the file a warning or error must name, change)
CASES = {
    # item 1: ranks and steps
    "cluster_index_inf": (CLUSTER, STEP_FILE, cluster_index("inf")),
    "cluster_index_1e300": (CLUSTER, STEP_FILE, cluster_index("1e300")),
    "cluster_index_30_digits": (CLUSTER, STEP_FILE, cluster_index("1" * 30)),
    "cluster_index_minus_25_digits": (CLUSTER, STEP_FILE, cluster_index("-" + "1" * 25)),
    "cluster_index_minus_1": (CLUSTER, STEP_FILE, cluster_index("-1")),
    "cluster_index_fraction": (CLUSTER, STEP_FILE, cluster_index("3.5")),
    "cluster_index_int64_max": (CLUSTER, STEP_FILE, cluster_index(str(INT64_MAX))),
    "cluster_stage_30_digits": (CLUSTER, STEP_FILE, lambda run: broken.replace_bytes(
        run / STEP_FILE, b'"(0, 1, 2, 3, 4, 5, 6, 7)"', b'"(0, 1, 2, 3, 4, 5, 6, ' + b"7" * 30 + b')"')),
    "cluster_step_inf": (CLUSTER, STEP_FILE, lambda run: broken.replace_bytes(
        run / STEP_FILE, b"\n2,rank,3,", b"\ninf,rank,3,")),
    "cluster_communication_30_digit_rank": (CLUSTER, "cluster_communication.json", lambda run: broken.replace_once(
        run / "cluster_communication.json", b'"1": {', b'"' + b"1" * 30 + b'": {')),
    "cluster_communication_int64_max_rank": (CLUSTER, "cluster_communication.json", lambda run: broken.replace_once(
        run / "cluster_communication.json", b'"1": {', f'"{INT64_MAX}": {{'.encode())),
    "cluster_matrix_huge_source": (CLUSTER, "cluster_communication_matrix.json", lambda run: broken.replace_once(
        run / "cluster_communication_matrix.json", b'"1-0"', b'"' + b"9" * 19 + b'-0"')),
    "hccl_step_inf": (HCCL, "hccl_raw_0.csv", hccl_step("inf")),
    "hccl_step_1e400": (HCCL, "hccl_raw_0.csv", hccl_step("1e400")),
    "hccl_step_negative": (HCCL, "hccl_raw_0.csv", hccl_step("-3")),
    "device_queue_size_inf": (LEGACY, "device_queue_profiling_1.txt", lambda run: broken.replace_bytes(
        run / "device_queue_profiling_1.txt", b"\n1 64 1 0 10", b"\n1 64 1 inf 10")),
    # legacy_run_2 also has the sink queue, read first: cpu_2_10 has only this one
    "iterator_queue_size_inf": (CPU, "dataset_iterator_profiling_0.txt", lambda run: broken.replace_once(
        run / "md" / "dataset_iterator_profiling_0.txt", b"\n1 ", b"\n1 inf ")),
    "getnext_size_inf": (LEGACY, "minddata_aicpu_1.txt", lambda run: broken.replace_bytes(
        run / "minddata_aicpu_1.txt", b"154907895306 3", b"154907895306 inf")),
    "getnext_size_1e300": (LEGACY, "minddata_aicpu_1.txt", lambda run: broken.replace_bytes(
        run / "minddata_aicpu_1.txt", b"154907895306 3", b"154907895306 1e300")),
    "device_map_rank_1e300": (DB, "ascend_pytorch_profiler.db", device_map("1e300")),
    "device_map_rank_infinity": (DB, "ascend_pytorch_profiler.db", device_map("9e999")),
    "device_map_rank_int64_max": (DB, "ascend_pytorch_profiler.db", device_map(str(INT64_MAX))),
    "device_map_rank_text": (DB, "ascend_pytorch_profiler.db", device_map("'Infinity'")),
    "minddata_20_digit_rank_in_name": (FEED, "minddata_pipeline_raw_" + "9" * 20 + ".csv",
                                       rename("minddata_pipeline_raw_0.csv", "minddata_pipeline_raw_" + "9" * 20
                                              + ".csv")),
    "minddata_only_20_digit_rank_in_name": (MINDDATA_4, "minddata_pipeline_raw_" + "9" * 20 + ".csv", lambda run: [
        (run / f"minddata_pipeline_raw_{rank}.csv").unlink() for rank in (1, 2, 3)] and rename(
        "minddata_pipeline_raw_0.csv", "minddata_pipeline_raw_" + "9" * 20 + ".csv")(run)),
    "profiler_info_rank_int64_max": (NEW, "profiler_info.json", lambda run: (
        (run / "profiler_info_0.json").rename(run / "profiler_info.json"),
        broken.replace_bytes(run / "profiler_info.json", b'"rank_id": 0', f'"rank_id": {INT64_MAX}'.encode()))),
    # item 4: database values
    "comm_analyzer_op_names_null": (DB, "analysis.db", lambda run: broken.set_cells(
        run / OUT / "analysis.db", "CommAnalyzerTime", "hccl_op_name = NULL")),
    "enum_data_type_ids_text": (DB_LEVEL0, "ascend_pytorch_profiler_0.db", lambda run: _text_ids(
        run / OUT / "ascend_pytorch_profiler_0.db", "ENUM_HCCL_DATA_TYPE")),
    "enum_module_ids_text": (DB_LEVEL0, "ascend_pytorch_profiler_0.db", lambda run: _text_ids(
        run / OUT / "ascend_pytorch_profiler_0.db", "ENUM_MODULE")),
    # item 5: input shapes
    # the shapes' column is screened where the reader's tables meet (formats/screening.py), which names the column
    "kernel_shape_1e400": (NEW, "input_shapes", lambda run: _first_shape(run / OUT / "kernel_details.csv",
                                                                                "1e400")),
    "kernel_shape_inf": (NEW, "input_shapes", lambda run: _first_shape(run / OUT / "kernel_details.csv", "inf")),
    # item 6: MindData summary JSON
    "summary_workers_fraction": (CPU, "minddata_pipeline_summary_0.json", summary_json("num_workers", "1.5")),
    "summary_parent_1e300": (CPU, "minddata_pipeline_summary_0.json", summary_json("parent_id", "1e300")),
    "summary_op_id_fraction": (CPU, "minddata_pipeline_summary_0.json", summary_json("op_ids", "1.5")),
    "summary_child_huge": (CPU, "minddata_pipeline_summary_0.json", summary_json("children_ids", "[1e300]")),
}


def _text_ids(database: Path, table: str) -> None:
    """An ENUM table whose ids are text ('x1', 'x2', ...): its INTEGER PRIMARY KEY refuses them, so the table is
    made again without it."""
    import sqlite3
    connection = sqlite3.connect(database)
    try:
        connection.execute("PRAGMA journal_mode=DELETE")
        connection.execute(f"CREATE TABLE copied AS SELECT 'x' || id AS id, name FROM \"{table}\"")
        connection.execute(f'DROP TABLE "{table}"')
        connection.execute(f'ALTER TABLE copied RENAME TO "{table}"')
        connection.commit()
    finally:
        connection.close()


def _first_shape(path: Path, value: str) -> None:
    """The first MatMul's first input dimension set to `value` (its FLOPs are computed from the shapes at load)."""
    import csv
    import io
    import re
    rows = list(csv.reader(io.StringIO(path.read_text())))
    shapes, kind = rows[0].index("Input Shapes"), rows[0].index("Type")
    row = next(row for row in rows[1:] if row[kind].startswith("MatMul"))
    row[shapes] = re.sub(r"\d+", value, row[shapes], count=1)
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    path.write_text(buffer.getvalue())


def ranks_in_json(node, key: str = "") -> list[int]:
    """Every integer under a key that names a rank or ranks (`rank`, `ranks`, `max_rank`, `slow_ranks`, ...)."""
    found = []
    if isinstance(node, dict):
        for name, value in node.items():
            found += ranks_in_json(value, str(name))
    elif isinstance(node, list):
        for item in node:
            found += ranks_in_json(item, key)
    elif type(node) is int and "rank" in key:
        found.append(node)
    return found


def every_int(node) -> list[int]:
    if isinstance(node, dict):
        return [n for value in node.values() for n in every_int(value)]
    if isinstance(node, list):
        return [n for item in node for n in every_int(item)]
    return [node] if type(node) is int else []


def outcome(result, named: str) -> str | dict:
    """The answer of one command: its JSON (exit 0) or its one error line (exit 2), after the contract's checks."""
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and named in lines[0], result.stderr
        return lines[0]
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    ranks = ranks_in_json(payload)
    assert all(0 <= rank <= MAX_RANK for rank in ranks), ranks
    assert not {INT64_MIN, INT64_MAX} & set(every_int(payload))
    return payload


@pytest.mark.parametrize("case", sorted(CASES))
def test_numbers_no_rank_or_step_can_be(case, tmp_path, monkeypatch):
    source, named, mutate = CASES[case]
    monkeypatch.delenv("PERFKIT_NO_CACHE", raising=False)
    monkeypatch.setenv("PERFKIT_CACHE_DIR", str(tmp_path / "cache"))
    run = broken.copy_run(source, tmp_path / "run")
    mutate(run)
    before = broken.folder_digest(run)
    answers = {}
    for temperature in ("cold", "warm"):
        for command in ("summary", "ranks", "advise"):
            result = CliRunner().invoke(main, [command, str(run), "--format", "json"])
            answers[temperature, command] = outcome(result, named)
    for command in ("summary", "ranks", "advise"):
        assert answers["warm", command] == answers["cold", command], command
    summary = answers["cold", "summary"]
    if isinstance(summary, dict):
        assert any(named in warning for warning in summary["warnings"]), summary["warnings"]
    assert broken.folder_digest(run) == before


# ---- item 3: work bounded by what is on disk -------------------------------------------------------------

def _cluster_file(run: Path, name: str) -> None:
    (run / "ascend_cluster_analyse_pipeline-parallel_2_4_0.csv").rename(run / name)


def _profiler_info(run: Path, stage_num: str, rank_size: str) -> None:
    path = run / "profiler_info_0.json"
    data = json.loads(path.read_text())
    data.update(stage_num="@stage", rank_size="@size")
    path.write_text(json.dumps(data).replace('"@stage"', stage_num).replace('"@size"', rank_size))


BOUNDED_CASES = {
    "cluster_file_2000_stages_2000000_ranks": (HCCL, lambda run: _cluster_file(
        run, "ascend_cluster_analyse_pipeline-parallel_2000_2000000_0.csv")),
    "cluster_file_1_stage_99999999_ranks": (HCCL, lambda run: _cluster_file(
        run, "ascend_cluster_analyse_pipeline-parallel_1_99999999_0.csv")),
    "cluster_file_30_digits": (HCCL, lambda run: _cluster_file(
        run, f"ascend_cluster_analyse_pipeline-parallel_{'2' * 30}_{'4' * 30}_0.csv")),
    "profiler_info_2000_stages_2000000_ranks": (NEW, lambda run: _profiler_info(run, "2000", "2000000")),
}
# A command over these small runs takes ~3 s in a subprocess; the unbounded ones ran past 60 s.
BOUND_S = 45


@pytest.mark.parametrize("case", sorted(BOUNDED_CASES))
def test_counts_in_names_do_not_drive_the_work(case, tmp_path):
    source, mutate = BOUNDED_CASES[case]
    run = broken.copy_run(source, tmp_path / "run")
    mutate(run)
    before = broken.folder_digest(run)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PERFKIT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PERFKIT_NO_CACHE", None)
    for command in ("summary", "advise", "summary"):  # the second summary warm
        started = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "perfkit", command, str(run), "--format", "json"],
                                capture_output=True, text=True, env=env, timeout=BOUND_S, check=False)
        assert time.monotonic() - started < BOUND_S
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        payload = json.loads(result.stdout)
        ranks = ranks_in_json(payload)
        assert all(0 <= rank <= MAX_RANK for rank in ranks), ranks
    assert broken.folder_digest(run) == before
    stages = payload["meta"].get("pipeline_stages") or []  # the warm summary's
    assert all(0 <= rank <= MAX_RANK for stage in stages for rank in stage), stages


def test_stages_from_a_count_hold_only_the_ranks_present():
    from perfkit.io.formats.stages import stages_from_count
    assert stages_from_count(2, 4, range(4)) == [[0, 1], [2, 3]]
    assert stages_from_count(2, 4, [0, 3]) == [[0], [3]]
    assert stages_from_count(2, 4, [3]) == [[], [3]]  # the stage's place kept: rank 3 runs the second stage
    started = time.monotonic()
    assert stages_from_count(2000, 1_000_000, range(8)) == [list(range(8))]
    assert stages_from_count(1, 99_999_999, range(8)) is None  # more ranks than a rank can number
    assert stages_from_count(2000, 2_000_000, range(8)) is None
    assert stages_from_count(10**30, 10**31, [0]) is None
    assert time.monotonic() - started < 1


def test_a_long_raw_pipeline_reads_in_linear_time(tmp_path):
    """A raw MindData pipeline of 30,000 chained ops (the real pipeline_profiling_0.json of JOB1, its last op's
    child a chain of copies of that op): was 17-38 s, quadratic in the ops."""
    from perfkit.io.formats.minddata import _read_pipeline_json
    raw = json.loads((FIXTURE_RUNS["minddata_job1"] / "pipeline_profiling_0.json").read_text())
    ops = raw["op_info"]
    template = next(op for op in ops if op["op_id"] == 3)  # a TFReader with queue metrics, under op 1
    first = max(op["op_id"] for op in ops) + 1
    template["children"] = [first]
    chain = [{**template, "op_id": first + i, "children": [first + i + 1] if i < 29_999 else []}
             for i in range(30_000)]
    raw["op_info"] = ops + chain
    path = tmp_path / "pipeline_profiling_0.json"
    path.write_text(json.dumps(raw))
    started = time.monotonic()
    pipeline = _read_pipeline_json(path, [])
    assert time.monotonic() - started < 5
    assert len(pipeline) == len(_read_pipeline_json(FIXTURE_RUNS["minddata_job1"] / "pipeline_profiling_0.json",
                                                    [])) + 30_000


def test_the_cache_keeps_only_what_it_gives_back_exactly(tmp_path, monkeypatch):
    """A Run whose meta holds an integer past int64 (a 30-digit rank in a stage list) is not cached: the cache's
    bounded decoder would give it back as None, and the warm command crashed on it. One it can hold is cached and
    comes back equal."""
    import perfkit
    from perfkit.io import cache
    monkeypatch.setenv("PERFKIT_NO_CACHE", "1")
    run = perfkit.load(HCCL)
    assert run.meta.pipeline_stages == [[0, 1], [2, 3]]
    assert cache.store(tmp_path / "kept" / "a" / "entry", run)
    assert cache.fetch(tmp_path / "kept" / "a" / "entry", lambda name: None).meta == run.meta
    run.meta.pipeline_stages = [[0, 1], [2, 10**30]]
    assert not cache.store(tmp_path / "refused" / "a" / "entry", run)
    assert not (tmp_path / "refused" / "a" / "entry").exists()


# ---- the generator: hostile whole numbers in every rank, step, id, count and size the readers parse -------------

# The kinds of value the issue found (non-finite, huge, negative, fractional, not a number), as a file writes them.
HOSTILE_NUMBERS = ["inf", "-inf", "nan", "Infinity", "1e300", "1e400", "-1", "-2", "1.5", "1" * 30, "-" + "1" * 25,
                   str(INT64_MAX), str(INT64_MIN), str(2**53 + 1), "99999999", "x", "", "0x10", "\u0661"]
JSON_NUMBERS = ["1e300", "1e400", "-1", "1.5", "1" * 30, str(INT64_MAX), "99999999", "NaN", "Infinity", '"x"',
                "null", "true", "[1]"]


def csv_cell(column: str):
    """A mutation of one cell of `column` (the row chosen by the example) of a comma-separated file."""
    def mutate(path: Path, value: str, row: int) -> None:
        import csv
        import io
        rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
        at = rows[0].index(column)
        rows[1 + row % (len(rows) - 1)][at] = value
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        path.write_text(buffer.getvalue())
    return mutate


def text_field(field: int, first: str = ""):
    """A mutation of field `field` of one whitespace-separated line (starting with `first`) of a text file."""
    def mutate(path: Path, value: str, row: int) -> None:
        lines = path.read_text().splitlines()
        chosen = [i for i, line in enumerate(lines) if line.startswith(first) and len(line.split()) > field]
        fields = lines[chosen[row % len(chosen)]].split()
        fields[field] = value or "-"
        lines[chosen[row % len(chosen)]] = " ".join(fields)
        path.write_text("\n".join(lines) + "\n")
    return mutate


def json_match(pattern: bytes, json_values: bool = True):
    """A mutation of the group of one match of `pattern` (a number or a key's digits) in a JSON file."""
    import re
    expression = re.compile(pattern)

    def mutate(path: Path, value: str, row: int) -> None:
        raw = path.read_bytes()
        matches = list(expression.finditer(raw))
        match = matches[row % len(matches)]
        raw = raw[:match.start(1)] + value.encode() + raw[match.end(1):]
        path.write_bytes(raw)
    mutate.json_values = json_values
    return mutate


def file_name_rank(name: str):
    """The rank in the name of file `name` replaced (the value made a name's digits: a huge or a negative rank)."""
    def mutate(path: Path, value: str, row: int) -> None:
        digits = "".join(c for c in value if c.isdigit()) or "1" * 25
        path.rename(path.with_name(name.replace("{}", digits)))
    return mutate


# (real run, file, mutation, whether the values are JSON): every rank, step, id, count and size column a reader
# turns into an integer
NUMBER_TARGETS = {
    "cluster_index": (CLUSTER, STEP_FILE, csv_cell("Index")),
    "cluster_step": (CLUSTER, STEP_FILE, csv_cell("Step")),
    "cluster_communication_rank_key": (CLUSTER, "cluster_communication.json", json_match(rb'\n\s*"(\d+)": \{', False)),
    "cluster_matrix_link": (CLUSTER, "cluster_communication_matrix.json", json_match(rb'"(\d+)-\d+": \{', False)),
    "hccl_step": (HCCL, "hccl_raw_0.csv", csv_cell("step_num")),
    "legacy_step_trace_step": (HCCL, "step_trace_raw_0_detail_time.csv", csv_cell("step_num")),
    "legacy_cluster_file_counts": (HCCL, "ascend_cluster_analyse_pipeline-parallel_2_4_0.csv",
                                   file_name_rank("ascend_cluster_analyse_pipeline-parallel_2_{}_0.csv")),
    "new_step": (NEW, f"{OUT}/step_trace_time.csv", csv_cell("Step")),
    "new_kernel_step": (NEW, f"{OUT}/kernel_details.csv", csv_cell("Step Id")),
    "new_kernel_shape": (NEW, f"{OUT}/kernel_details.csv", csv_cell("Input Shapes")),
    "new_matrix_link": (NEW, f"{OUT}/communication_matrix.json", json_match(rb'"\d+-(\d+)": \{', False)),
    "profiler_info_rank": (NEW, "profiler_info_0.json", json_match(rb'"rank_id": (-?\d+)')),
    "sink_queue": (LEGACY, "device_queue_profiling_1.txt", text_field(3, "1 ")),
    "sink_queue_capacity": (LEGACY, "device_queue_profiling_1.txt", text_field(1, "1 ")),
    "getnext_size": (LEGACY, "minddata_aicpu_1.txt", text_field(3)),
    "feed_queue": (CPU, "md/dataset_iterator_profiling_0.txt", text_field(2, "1 ")),
    "pipeline_csv_ids": (LEGACY, "minddata_pipeline_raw_1.csv", csv_cell("op_id")),
    "pipeline_csv_workers": (LEGACY, "minddata_pipeline_raw_1.csv", csv_cell("num_workers")),
    "pipeline_csv_parent": (LEGACY, "minddata_pipeline_raw_1.csv", csv_cell("parent_id")),
    "pipeline_json_workers": (LEGACY, "pipeline_profiling_1.json", json_match(rb'"num_workers":(\d+)')),
    "pipeline_json_children": (LEGACY, "pipeline_profiling_1.json", json_match(rb'"children":\[(\d+)')),
    "minddata_file_rank": (FEED, "minddata_pipeline_raw_0.csv", file_name_rank("minddata_pipeline_raw_{}.csv")),
    "cpu_file_rank": (CPU, "vm_10569_20261122103128064_ascend_ms/FRAMEWORK/cpu_op_type_info_0.csv",
                      file_name_rank("cpu_op_type_info_{}.csv")),
}


def _sound_ranks_and_steps(run) -> None:
    """Every rank of the Run's tables and meta a rank (0..MAX_RANK), every step >= 0: no sentinel, no -1."""
    for name, frame in run.tables().items():
        for column in ("rank", "step", "src", "dst"):
            if column in frame and len(frame):
                values = frame[column].dropna()
                assert values.empty or (values.min() >= 0 and (column == "step" or values.max() <= MAX_RANK)), \
                    (name, column, values.min(), values.max())
    for stage in run.meta.pipeline_stages or []:
        assert all(0 <= rank <= MAX_RANK for rank in stage), run.meta.pipeline_stages


@pytest.mark.parametrize("target", sorted(NUMBER_TARGETS))
@settings(max_examples=int(os.environ.get("PERFKIT_HYPOTHESIS_EXAMPLES", "4")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_hostile_whole_numbers_load_or_raise_perfkit_error(target, data):
    """A value of the issue's kinds in one rank, step, id, count or size a reader parses: a Run whose ranks are
    ranks and steps >= 0, whose summary and advice (what `summary` and `advise --format json` print) hold no rank
    past MAX_RANK and no int64 sentinel; or a PerfkitError (exit 2, one line); never another exception. Read once
    per example, in process (a command per example made this 14 minutes on the 2-core box)."""
    import tempfile

    import perfkit
    from perfkit.advisor import advise
    from perfkit.apps.cli import _json
    from perfkit.core.errors import PerfkitError
    from perfkit.io.formats.files import rank_of
    from perfkit.views.summary import summarize
    source, relative, mutate = NUMBER_TARGETS[target]
    value = data.draw(st.sampled_from(JSON_NUMBERS if getattr(mutate, "json_values", False) else HOSTILE_NUMBERS))
    row = data.draw(st.integers(0, 2**16))
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        patch.setenv("PERFKIT_NO_CACHE", "1")
        run = broken.copy_run(source, Path(scratch) / "run")
        if source == HCCL:  # ranks 0 and 1 are the cluster's ranks enough, in half the time
            for path in run.iterdir():
                if rank_of(path.name) in (2, 3):
                    path.unlink()
        mutate(run / relative, value, row)
        before = broken.folder_digest(run)
        try:
            loaded = perfkit.load(run)
        except PerfkitError as exc:
            assert str(exc)
        else:
            _sound_ranks_and_steps(loaded)
            for answer in (summarize(loaded), advise(loaded).to_dict()):
                payload = json.loads(_json(answer))
                assert all(0 <= rank <= MAX_RANK for rank in ranks_in_json(payload))
                assert not {INT64_MIN, INT64_MAX} & set(every_int(payload))
        assert broken.folder_digest(run) == before

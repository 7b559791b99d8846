"""The communication reader on the real fixtures, checked against the raw JSON read here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import FIXTURE_RUNS

import perfkit
from perfkit.analysis.measures import communication_by_rank, link_bandwidth
from perfkit.io.formats import communication as reader
from perfkit.io.formats.tables import as_pandas
from perfkit.views.summary import summarize

OUTPUT = "ASCEND_PROFILER_OUTPUT"
FOLDERS = {"new_level1": {0: "rank0_ascend_pt", 1: "rank1_ascend_pt"},
           "new_2023": {0: "test_rank_0", 1: "test_rank_1"}}
ON_CHIP_AND_NETWORK = ("HCCS", "PCIE", "RDMA", "SIO")  # SDMA is their sum, LOCAL is not in communication.json


pytestmark = pytest.mark.usefixtures("uncached")


def raw(fixture: str, rank: int, name: str) -> dict:
    return json.loads((FIXTURE_RUNS[fixture] / FOLDERS[fixture][rank] / OUTPUT / name).read_text())


@pytest.fixture(scope="module", params=sorted(FOLDERS))
def fixture(request):
    return request.param, perfkit.load(FIXTURE_RUNS[request.param])


def test_p2p_and_collective_sums_match_the_files(fixture):
    name, run = fixture
    by_rank = communication_by_rank(run)
    for rank in FOLDERS[name]:
        data = raw(name, rank, "communication.json")
        steps = len(data)
        for kind in ("collective", "p2p"):
            ops = {op: info for step in data.values() for op, info in step[kind].items() if op != "Total Op Info"}
            elapse = sum(info["Communication Time Info"]["Elapse Time(ms)"] for info in ops.values())
            assert by_rank[rank][f"{kind}_ms"] == pytest.approx(elapse / steps)
            rows = run.comm_ops[(run.comm_ops["rank"] == rank) & (run.comm_ops["kind"] == kind)]
            assert len(rows) == len(ops)
            # an op's size is every link type's transit size but the SDMA sum; the file's Total Op Info agrees
            totals = [step[kind]["Total Op Info"]["Communication Bandwidth Info"] for step in data.values()
                      if "Total Op Info" in step[kind]]
            expected = sum(info[t]["Transit Size(MB)"] for info in totals for t in ON_CHIP_AND_NETWORK if t in info)
            assert rows["size_mb"].sum() == pytest.approx(expected, rel=1e-6)
        wait = sum(info["Communication Time Info"]["Wait Time(ms)"] for step in data.values()
                   for kind in ("collective", "p2p") for op, info in step[kind].items() if op != "Total Op Info")
        transit = sum(info["Communication Time Info"]["Transit Time(ms)"] for step in data.values()
                      for kind in ("collective", "p2p") for op, info in step[kind].items() if op != "Total Op Info")
        assert by_rank[rank]["wait_ratio"] == pytest.approx(wait / (wait + transit))
    assert summarize(run)["communication"]["collective_ms"] == pytest.approx(
        sum(entry["collective_ms"] for entry in by_rank.values()) / len(by_rank))


def test_wait_ratio_is_msprof_analyzes_total_op_info():
    """Level1 has no p2p op, so the ratio over every op is the file's own collective Wait Time Ratio."""
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    by_rank = communication_by_rank(run)
    for rank in (0, 1):
        total = raw("new_level1", rank, "communication.json")["step50"]["collective"]["Total Op Info"]
        assert by_rank[rank]["wait_ratio"] == pytest.approx(total["Communication Time Info"]["Wait Time Ratio"],
                                                            abs=5e-4)


def test_communication_by_rank_is_kept_on_the_run_and_each_caller_gets_its_own(fixture):
    _, run = fixture
    first = communication_by_rank(run)
    expected = {rank: {**entry, "slowest_link": dict(entry["slowest_link"]) if entry["slowest_link"] else None}
                for rank, entry in first.items()}
    for entry in first.values():  # what one caller does to its answer reaches no other
        entry["collective_ms"] = -1.0
        if entry["slowest_link"]:
            entry["slowest_link"]["bandwidth_gb_s"] = -1.0
    assert communication_by_rank(run) == expected


def test_link_bandwidth_is_size_over_time(fixture):
    name, run = fixture
    links = run.comm_links
    timed = links[links["transit_ms"] > 0]
    assert len(timed)
    # the file's Bandwidth(GB/s) is rounded to 4 decimals: MB / ms recomputed here agrees to that
    recomputed = timed["size_mb"] / timed["transit_ms"]
    assert ((timed["bandwidth_gb_s"] - recomputed).abs() <= 1e-4 + 1e-3 * recomputed).all()
    summed = link_bandwidth(links)
    assert (summed["bandwidth_gb_s"] == summed["size_mb"] / summed["transit_ms"]).all()
    assert "LOCAL" not in set(summed["link_type"])


def test_per_type_totals_are_read_alone_so_nothing_counts_twice():
    """Level1's matrix is per op type (top1/middle/bottom*/total): only `-total` links are read, and their HCCS
    sizes add up to communication.json's HCCS total, a second file written from the same data."""
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    assert set(run.comm_links["name"]) == {"allreduce-total"}
    for rank in (0, 1):
        hccs = run.comm_links[(run.comm_links["rank"] == rank) & (run.comm_links["link_type"] == "HCCS")]
        total = raw("new_level1", rank, "communication.json")["step50"]["collective"]["Total Op Info"]
        assert hccs["size_mb"].sum() == pytest.approx(total["Communication Bandwidth Info"]["HCCS"]["Transit Size(MB)"])


def test_per_op_matrix_sums_to_its_total_op_info():
    """msinsight_2023's matrix is per op with a Total Op Info entry per link: the per-op rows read add up to it."""
    run = perfkit.load(FIXTURE_RUNS["new_2023"])
    for rank in (0, 1):
        step = raw("new_2023", rank, "communication_matrix.json")["step2"]
        links = run.comm_links[run.comm_links["rank"] == rank]
        for kind in ("collective", "p2p"):
            ops = {op for op in step[kind] if op != "Total Op Info"}
            of_kind = links[links["name"].isin({op.partition("@")[0] for op in ops})]
            for pair, link in step[kind]["Total Op Info"].items():
                src, dst = map(int, pair.split("-"))
                rows = of_kind[(of_kind["src"] == src) & (of_kind["dst"] == dst)]
                assert rows["size_mb"].sum() == pytest.approx(link["Transit Size(MB)"], rel=1e-6)


def test_group_is_the_hash_after_the_at_sign():
    run = perfkit.load(FIXTURE_RUNS["new_level1"])
    assert set(run.comm_ops["group"]) == {"17522688603477080586"}
    assert all("@" not in name for name in run.comm_ops["name"])


def test_truncated_communication_json_is_skipped_with_a_warning(tmp_path):
    source = FIXTURE_RUNS["new_level1"] / "rank0_ascend_pt" / OUTPUT
    folder = tmp_path / OUTPUT
    folder.mkdir()
    raw_bytes = (source / "communication.json").read_bytes()
    (folder / "communication.json").write_bytes(raw_bytes[: len(raw_bytes) // 2])
    (folder / "communication_matrix.json").write_bytes((source / "communication_matrix.json").read_bytes())
    parts = reader.read(tmp_path)[0]
    assert "comm_ops" not in parts.tables and len(parts.tables["comm_links"])
    assert any("communication.json" in w and "not valid JSON" in w for w in parts.warnings), parts.warnings


def test_unknown_link_type_is_skipped_and_said(tmp_path):
    """Crafted (no real file has one): a link type perfkit does not know is left out, never guessed."""
    source = FIXTURE_RUNS["new_level1"] / "rank0_ascend_pt" / OUTPUT
    folder = tmp_path / OUTPUT
    folder.mkdir()
    matrix = json.loads((source / "communication_matrix.json").read_text())
    total = matrix["step50"]["collective"]["allreduce-total@17522688603477080586"]
    total["0-1"]["Transport Type"] = "UB"
    (folder / "communication_matrix.json").write_text(json.dumps(matrix))
    ops = json.loads((source / "communication.json").read_text())
    first = next(iter(ops["step50"]["collective"].values()))
    first["Communication Bandwidth Info"]["UB"] = {"Transit Size(MB)": 5.0, "Transit Time(ms)": 1.0}
    first["Communication Time Info"]["Wait Time(ms)"] = -3.0
    (folder / "communication.json").write_text(json.dumps(ops))
    parts = reader.read(tmp_path)[0]
    links = as_pandas(parts.tables["comm_links"])
    assert len(links) == len(total) - 1 and not ((links["src"] == 0) & (links["dst"] == 1)).any()
    assert any("communication_matrix.json" in w and "'UB'" in w for w in parts.warnings), parts.warnings
    assert any("communication.json" in w and "'UB'" in w for w in parts.warnings), parts.warnings
    assert any("communication.json" in w and "Wait Time(ms)" in w for w in parts.warnings), parts.warnings
    assert math.isnan(as_pandas(parts.tables["comm_ops"])["wait_ms"].iloc[0])


# issue 28: a plain communication.json is read by msgspec into the fields comm_ops uses (reader._plain_ops), any
# other by the dict reading; both must give what the file says, checked here against the standard library's json.
def _expected_ops(data: dict) -> list[tuple]:
    """(step, name, kind, group, elapse, transit, wait, synchronization, size, start) of each op, from `data`
    decoded by json; an absent number NaN; a size the file's link types added in its order, SDMA left out."""
    rows = []
    for step_key, kinds in data.items():
        step = int(step_key.removeprefix("step"))
        for kind, entries in kinds.items():
            for key, info in entries.items():
                if key == "Total Op Info":
                    continue
                times = info["Communication Time Info"]
                number = [float(times.get(field, math.nan)) for field in
                          ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)")]
                size = 0.0
                for link_type, link in info["Communication Bandwidth Info"].items():
                    if link_type != "SDMA":
                        size += float(link.get("Transit Size(MB)", math.nan))
                name, _, group = key.partition("@")
                rows.append((step, name, kind, group or None, *number, size,
                             float(times.get("Start Timestamp(us)", math.nan)) / 1000.0))
    return rows


def _rows(table) -> list[tuple]:
    return [tuple(row) for row in as_pandas(table).itertuples(index=False)]


def _same(rows: list[tuple], expected: list[tuple]) -> bool:
    """Equal, value for value (NaN equal to NaN; floats to the last bit and the sign of a zero)."""
    def same(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
        return x == y and type(x) is type(y)
    return len(rows) == len(expected) and all(
        len(a) == len(b) and all(map(same, a, b)) for a, b in zip(rows, expected))


@pytest.mark.parametrize("fixture,rank", [(name, rank) for name in sorted(FOLDERS) for rank in FOLDERS[name]])
def test_a_plain_file_is_read_by_msgspec_as_json_reads_it(fixture, rank):
    path = FIXTURE_RUNS[fixture] / FOLDERS[fixture][rank] / OUTPUT / "communication.json"
    columns = reader._plain_ops(path)
    assert columns is not None  # the fast reading takes the real files
    plain = reader._tables_of([columns])[0]
    assert _same(_rows(plain), _expected_ops(json.loads(path.read_text())))
    warnings = []
    assert plain.equals(reader.comm_ops_table(json.loads(path.read_text()), warnings)) and not warnings  # schema included


def _first_op(data: dict) -> dict:
    return next(info for kinds in data.values() for entries in kinds.values()
                for key, info in entries.items() if key != "Total Op Info")


# (what a variant changes in the real file, whether the fast reading may take it, the warning it gives)
VARIANTS = {
    "an int time": (lambda op: op["Communication Time Info"].update({"Wait Time(ms)": 7}), True, None),
    "an absent time": (lambda op: op["Communication Time Info"].pop("Wait Time(ms)"), True, None),
    "two link types moving bytes": (lambda op: op["Communication Bandwidth Info"]["RDMA"].update(
        {"Transit Size(MB)": 0.1}), True, None),
    "three, in an order a sum rounds by": (lambda op: op["Communication Bandwidth Info"].update(
        {"RDMA": {"Transit Size(MB)": 0.1}, "HCCS": {"Transit Size(MB)": 0.1}, "PCIE": {"Transit Size(MB)": 1.1}}),
        False, None),
    "sizes of -0.0": (lambda op: [link.update({"Transit Size(MB)": -0.0})
                                  for link in op["Communication Bandwidth Info"].values()], True, None),
    "a time out of range": (lambda op: op["Communication Time Info"].update({"Wait Time(ms)": "@1e999@"}), False,
                            "1 number(s) out of range or not finite read as unknown"),
    "a size past int64": (lambda op: op["Communication Bandwidth Info"]["HCCS"].update(
        {"Transit Size(MB)": "@9223372036854775808@"}), False, "1 number(s) out of range or not finite"),
    "an unused number out of range": (lambda op: op["Communication Time Info"].update({"Idle Time(ms)": "@-9e999@"}),
                                      False, "1 number(s) out of range or not finite read as unknown"),
    "an unused integer past u64": (lambda op: op["Communication Bandwidth Info"]["HCCS"].update(
        {"Size Distribution": {"1": "@123456789012345678901234@"}}), False, "1 number(s) out of range"),
    "a value nested 150 deep": (lambda op: op["Communication Bandwidth Info"]["HCCS"].update(
        {"Size Distribution": {"1": "@" + "[" * 150 + "]" * 150 + "@"}}), False, None),
    "a negative time": (lambda op: op["Communication Time Info"].update({"Wait Time(ms)": -5.5}), False,
                        "Wait Time(ms) not a non-negative number, treated as unknown (1)"),
    "a size of true": (lambda op: op["Communication Bandwidth Info"]["HCCS"].update({"Transit Size(MB)": True}),
                       False, "Transit Size(MB) not a non-negative number, treated as unknown (1)"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_an_odd_file_is_read_as_json_reads_it(tmp_path, variant):
    """Crafted from the real file of new_level1's rank 0, one op changed: the reader's table is json's reading
    (the bounded decoder's unknowns NaN), whichever reading takes the file, with the same warning."""
    change, fast, warning = VARIANTS[variant]
    data = raw("new_level1", 0, "communication.json")
    change(_first_op(data))
    assert list(_first_op(data)["Communication Bandwidth Info"])[:3] == ["RDMA", "HCCS", "PCIE"]  # 0.1+0.1+1.1 is 1.3
    text = json.dumps(data).replace('"@', "").replace('@"', "")  # "@...@" stands for a number json cannot write
    folder = tmp_path / OUTPUT
    folder.mkdir()
    (folder / "communication.json").write_text(text)
    parts = reader.read(tmp_path)[0]
    assert (reader._plain_ops(folder / "communication.json") is not None) == fast
    expected = json.loads(text)
    op = _first_op(expected)
    for fields in (op["Communication Time Info"], *op["Communication Bandwidth Info"].values()):
        for field, value in list(fields.items()):  # what the bounds make unknown, the reading too
            if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                    not math.isfinite(value) or abs(value) >= 2**63 or value < 0):
                fields[field] = math.nan
            elif isinstance(value, bool):
                fields[field] = math.nan
    assert _same(_rows(parts.tables["comm_ops"]), _expected_ops(expected))
    said = [w for w in parts.warnings if w.startswith("communication.json: ")]
    assert [w for w in said if warning in w] if warning else not said, parts.warnings

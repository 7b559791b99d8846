"""perfkit/core/boundedjson.py: the one JSON decoder of every JSON perfkit reads, and its bounds."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfkit.core import boundedjson


def test_plain_json_decodes_as_the_standard_library_does():
    text = json.dumps({"step50": {"collective": {"op@1": {"Elapse Time(ms)": 79.08952021875, "n": 3, "s": "é😀",
                                                          "l": [1, 2.5, None, True, {"x": []}]}}}})
    counts = boundedjson.Counts()
    assert boundedjson.loads(text, counts) == json.loads(text)
    assert counts.notes() == []


def test_numbers_no_model_column_holds_become_unknown_and_are_counted():
    counts = boundedjson.Counts()
    value = boundedjson.loads('[1, 9223372036854775807, 9223372036854775808, -9223372036854775808, '
                              '-9223372036854775809, ' + "1" * 400 + ', 9e999, -9e999, 1e308, NaN, Infinity, '
                              '-Infinity, 0.5]', counts)
    assert value == [1, 2**63 - 1, None, -2**63, None, None, None, None, 1e308, None, None, None, 0.5]
    assert counts.numbers == 8
    assert counts.notes() == ["8 number(s) out of range or not finite read as unknown"]


def test_lone_surrogates_become_replacement_characters_pairs_stay():
    counts = boundedjson.Counts()
    value = boundedjson.loads('{"op\\ud800": ["\\udfff x", "\\ud83d\\ude00"]}', counts)
    assert value == {"op\ufffd": ["\ufffd x", "\U0001F600"]}
    assert counts.surrogates == 2
    json.dumps(value, ensure_ascii=False).encode("utf-8")  # writable as UTF-8 (the cache, an export)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 5_000 + "1" + "}" * 5_000])
def test_nesting_past_the_recursion_limit_is_a_json_error(text):
    with pytest.raises(boundedjson.TooDeep, match="nested too deep"):
        boundedjson.loads(text)


def test_not_json_and_extra_data_are_json_errors():
    with pytest.raises(boundedjson.JSONError, match="cut off mid-write"):
        boundedjson.loads('{"a": [1, 2')
    with pytest.raises(boundedjson.JSONError, match="extra data"):
        boundedjson.loads('{"a": 1} {"b": 2}')


def test_decode_value_reads_one_value_of_many_and_says_where_it_ends():
    text = ' {"a": 1e999}, {"b": 2}'
    counts = boundedjson.Counts()
    first, end = boundedjson.decode_value(text, 0, counts)
    assert first == {"a": None} and text[end:].startswith(", ")
    second, end = boundedjson.decode_value(text, end + 1, counts)
    assert second == {"b": 2} and end == len(text) and counts.numbers == 1
    deep = "[" * 50_000 + "]" * 50_000
    with pytest.raises(boundedjson.TooDeep) as raised:
        boundedjson.decode_value("1, " + deep, 2, counts)
    assert raised.value.position == 3


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.text(max_size=5)
    | st.integers(min_value=-2**70, max_value=2**70) | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES, st.sampled_from(["", "1e999", "9223372036854775808", "18446744073709551616",
                                     "-9223372036854775809", '"\\ud800"', "NaN"]))
def test_the_fast_path_gives_what_the_bounded_decoder_gives(value, odd):
    """loads takes orjson's value only where it is the bounded decoder's: the same value, the same counts, for
    texts with integers past int64 and u64, floats that overflow, lone surrogates and NaN among plain values."""
    text = json.dumps([value])
    if odd:
        text = f"{text[:-1]}, {odd}]"
    text += " " * boundedjson.PLAIN_MIN_CHARS  # long enough for the fast path
    counts, expected_counts = boundedjson.Counts(), boundedjson.Counts()
    expected, _ = boundedjson.decode_value(text, 0, expected_counts)
    assert repr(boundedjson.loads(text, counts)) == repr(expected)
    assert counts.notes() == expected_counts.notes()


def test_deep_but_bounded_nesting_is_the_bounded_decoders():
    for depth in (99, 100, 101, 500):
        text = "[" * depth + "1" + "]" * depth + " " * boundedjson.PLAIN_MIN_CHARS
        assert boundedjson.loads(text) == boundedjson.decode_value(text, 0, boundedjson.Counts())[0]


def test_a_short_text_never_imports_orjson():
    """The profiler's start-up hook decodes its job with boundedjson and imports the standard library only."""
    import subprocess
    import sys
    code = ("import sys; from perfkit.core import boundedjson; boundedjson.loads('{\"a\": [1, 2.5]}'); "
            "assert 'orjson' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])


# needs_no_bounds (issue 28): a reader that decodes only the fields it uses (msgspec, formats/communication.py)
# relies on it for the bounds of the whole text, so where it says True the bounded decoder must change nothing.
ODD_TOKENS = ["12345678901234567890", "-9223372036854775809", "1234567890123456789", "123456789012345678", "1e999",
              "-1.5E-400", "2.5e+300", "1e99", "1E-05", "0.0000000000000000000000123", '"\\ud800"', '"a]"', '"[x{"',
              '"12345678901234567890123"', '" 12345678901234567890123"', '"@12345678901234567890123"', "NaN",
              "[[[[[[[[[[1]]]]]]]]]]"]


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES, st.lists(st.sampled_from(ODD_TOKENS), max_size=2), st.integers(0, 110), st.booleans())
def test_needs_no_bounds_says_yes_only_where_the_bounded_decoder_changes_nothing(value, odd, depth, ascii_only):
    text = "[" * depth + json.dumps([value], ensure_ascii=ascii_only)[:-1] + "".join(f", {t}" for t in odd) + "]" \
        + "]" * depth + " " * 64
    if not boundedjson.needs_no_bounds(text.encode()):
        return
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:  # NaN is no JSON: the caller's decoder (msgspec, orjson) refuses it
        return
    counts = boundedjson.Counts()
    assert repr(boundedjson.decode_value(text, 0, counts)[0]) == repr(json.loads(text))
    assert counts.notes() == []
    assert _depth(json.loads(text)) <= boundedjson.PLAIN_DEPTH


def _depth(value) -> int:
    items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if items is None else 1 + max(map(_depth, items), default=0)


@pytest.mark.parametrize("number", ["12345678901234567890", "-1234567890123456789", "1.5e300", "1E+999", "2e-400",
                                    "9223372036854775808"])
@pytest.mark.parametrize("template", ['{{"a": [{}]}}', '{{"a": [0,{}]}}', '{{"a":{}}}', '{{"a": {}}}',
                                      '{{"a":\n\t{}}}', '[{}]', '{}'])
def test_needs_no_bounds_says_no_to_any_number_past_the_bounds(number, template):
    text = template.format(number) + " " * 64
    json.loads(text)  # it is JSON
    assert not boundedjson.needs_no_bounds(text.encode())


def test_needs_no_bounds_on_nesting_strings_and_long_texts():
    pad = b" " * 64
    assert boundedjson.needs_no_bounds(b"[" * 100 + b"]" * 100 + pad)
    assert not boundedjson.needs_no_bounds(b"[" * 101 + b"]" * 101 + pad)
    assert not boundedjson.needs_no_bounds(b'{"a": [' + b"[ " * 101 + b"] " * 101 + b"]}" + pad)
    assert not boundedjson.needs_no_bounds(b'["]", ' + b"[" * 100 + b"]" * 100 + b"]" + pad)  # a bracket in a string
    # 110 deep, but strings of closing brackets would hide 30 levels from a count of every bracket
    hidden = b"[" * 60 + b'"]]]]]]]]]]]]]]]", "]]]]]]]]]]]]]]]", ' + b"[" * 50 + b"]" * 110
    json.loads(hidden)
    assert not boundedjson.needs_no_bounds(hidden + pad)
    assert not boundedjson.needs_no_bounds(hidden.replace(b'"]', b'"a", "]') + pad)
    assert not boundedjson.needs_no_bounds(b'["\\"", 1]' + pad)  # an escape
    assert boundedjson.needs_no_bounds(b'{"op@12345678901234567890123": [1.5e-05, 17364088837322415.5]}' + pad)
    assert not boundedjson.needs_no_bounds(b"[1]")  # too short to scan: the caller decodes it with loads
    # past the per-thread buffers (4 MB), and a long text after a short one (the buffers grow)
    long_text = b"[" + b"1.25, " * 800_000 + b"12345678901234567890]"
    assert not boundedjson.needs_no_bounds(long_text)
    assert boundedjson.needs_no_bounds(long_text.replace(b"12345678901234567890", b"3"))
    assert boundedjson.needs_no_bounds(b'{"a": [' + b"2, " * 100_000 + b"3]}")

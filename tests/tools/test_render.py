"""The output conventions of `tools.render`: bytes as text or hex, RFC 3339 times, tables, JSON arrays."""

from __future__ import annotations

import argparse
import json

import pytest

from tools import render


def test_bytes_conventions() -> None:
    d: dict = {}
    render.put_bytes(d, "key", b"user:1")
    render.put_bytes(d, "value", b"\xff\x00")
    render.put_bytes(d, "other", None)
    assert d == {"key": "user:1", "value": "ff00", "value_hex": True, "other": None}
    # a printable key that looks like hex stays text: the _hex flag, not the string, tells them apart
    assert render.bytes_for_json(b"0xff") == ("0xff", False)
    assert render.bytes_for_json(b"tab\t") == ("74616209", True)  # control characters are not printable
    assert render.bytes_for_json("été".encode()) == ("été", False)
    assert render.bytes_for_json(b"ab", "hex") == ("6162", True)
    assert render.bytes_for_json(b"a\xff", "utf8") == ("a\\xff", False)
    assert render.bytes_for_table(b"\xff\x00") == "0xff00"
    assert render.bytes_for_table(b"a\tb", "utf8") == "a\\tb"
    assert render.bytes_for_table(None) == "-"
    assert render.bytes_for_table(b"x" * 100, limit=10) == "xxxxxxx..."


def test_parse_key() -> None:
    assert render.parse_key("k1", False) == b"k1"
    assert render.parse_key("0xff00", True) == b"\xff\x00"
    assert render.parse_key("ff00", True) == b"\xff\x00"
    with pytest.raises(ValueError, match="not hex"):
        render.parse_key("zz", True)


def test_times() -> None:
    assert render.rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert render.rfc3339(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert render.rfc3339(-1) == "1969-12-31T23:59:59.999Z"
    assert render.rfc3339(None) is None
    for text in (
        "1700000000123",
        "2023-11-14T22:13:20.123Z",
        "2023-11-14T23:13:20.123+01:00",
    ):
        assert render.parse_time(text) == 1_700_000_000_123
    with pytest.raises(ValueError, match="RFC 3339"):
        render.parse_time("next tuesday")
    # no offset: refused rather than guessed (the library's rule: lsm.timeline.parse_time is the parser)
    with pytest.raises(ValueError, match="needs a zone: add Z"):
        render.parse_time("2023-11-14T22:13:20.123")
    with pytest.raises(argparse.ArgumentTypeError, match="needs a zone"):
        render.time_arg("2023-11-14T22:13:20")


def test_numeric_argument_types() -> None:
    assert render.int_arg(1)("3") == 3 and render.int_arg(None)("-7") == -7
    with pytest.raises(argparse.ArgumentTypeError, match="'0' is below 1"):
        render.int_arg(1)("0")
    with pytest.raises(argparse.ArgumentTypeError, match="'-1' is negative"):
        render.int_arg(0)("-1")
    with pytest.raises(argparse.ArgumentTypeError, match="not an integer"):
        render.int_arg(None)("1.5")
    ratio = render.float_arg(0, 1, above_minimum=True)
    assert ratio("0.5") == 0.5 and ratio("1") == 1.0
    for bad in ("0", "1.01", "nan", "-0.1"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"is not in \(0, 1\]"):
            ratio(bad)
    fraction = render.float_arg(0, 1)
    assert fraction("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError, match="not a number"):
        fraction("half")


def test_table_and_properties() -> None:
    t = render.table(("key", "seq", "value"), [("a", 1, "x"), ("bbb", 10, None)])
    assert t.splitlines() == ["key  seq  value", "a      1  x", "bbb   10  -"]
    assert render.table(("a", "b"), []) == "a  b"
    assert render.properties([("k", 1), ("long_name", None)]).splitlines() == ["k          1", "long_name  -"]
    assert render.human_bytes(1023) == "1023 B" and render.human_bytes(1536) == "1.5 KiB"


def test_json_array_streams_valid_json(capsys: pytest.CaptureFixture[str]) -> None:
    render.print_json_array(iter([{"a": 1}, {"b": "é"}]))
    render.print_json_array(iter([]))
    out = capsys.readouterr().out
    first, second = out.split("]\n", 1)
    assert json.loads(first + "]") == [{"a": 1}, {"b": "é"}]
    assert first.splitlines() == ["[", '  {"a": 1},', '  {"b": "é"}']
    assert json.loads(second) == []

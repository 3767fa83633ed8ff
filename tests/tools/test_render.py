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
    assert d == {"key": "user:1", "value": "ff00", "value_hex": True, "other": None}  # "auto" (dump files)
    # a printable key that looks like hex stays text: the _hex flag, not the string, tells them apart
    assert render.bytes_for_json(b"0xff") == ("0xff", None)
    assert render.bytes_for_json(b"tab\t") == ("74616209", "hex")  # control characters are not printable
    assert render.bytes_for_json("été".encode()) == ("été", None)
    assert render.bytes_for_json(b"ab", "hex") == ("6162", "hex")
    assert render.bytes_for_json(b"a\xff", "escaped") == ("a\\xff", None)  # the deprecated --utf8
    assert render.bytes_for_table(b"\xff\x00") == "0xff00"
    assert render.bytes_for_table(b"a\tb", "utf8") == "a\\tb"
    assert render.bytes_for_table(None) == "-"
    assert render.bytes_for_table(b"x" * 100, limit=10) == "xxxxxxx..."


def test_one_encoding_per_output() -> None:
    """utf8 writes any UTF-8 as its text (control characters too: JSON escapes them) and refuses the
    rest, naming the option; hex and base64 flag every field, whatever its bytes."""
    assert render.bytes_for_json(b"tab\t\x00", "utf8") == ("tab\t\x00", None)
    with pytest.raises(render.NotUtf8Error, match="--key-encoding hex or --key-encoding base64"):
        render.bytes_for_json(b"\xff\x00", "utf8", "key")
    with pytest.raises(render.NotUtf8Error, match="--value-encoding"):
        render.bytes_for_json(b"\xff", "utf8", "value")
    for mode, flag, text in (("hex", "key_hex", "61"), ("base64", "key_base64", "YQ==")):
        d: dict = {}
        render.put_bytes(d, "key", b"a", mode)
        assert d == {"key": text, flag: True}
        assert render.get_bytes(d, "key") == b"a"  # what lsm log write reads back
    assert render.bytes_for_table(b"\xff", "base64") == "/w=="
    with pytest.raises(ValueError, match="exclude each other"):
        render.get_bytes({"key": "61", "key_hex": True, "key_base64": True}, "key")
    with pytest.raises(ValueError, match="not base64"):
        render.get_bytes({"key": "*", "key_base64": True}, "key")


def test_bytes_mode_is_chosen_once_from_the_options() -> None:
    ns = argparse.Namespace
    mode = render.bytes_mode_of
    assert mode(ns(json=True, legacy_bytes=None, key_encoding=None, value_encoding=None)) == render.BytesMode("utf8", "utf8")
    assert mode(ns(json=False, legacy_bytes=None, key_encoding=None, value_encoding=None)) == render.BytesMode("auto", "auto")
    assert mode(ns(json=True, legacy_bytes=None, key_encoding="base64", value_encoding=None)) == render.BytesMode(
        "base64", "utf8", "base64", "utf8"
    )
    assert mode(ns(json=True, legacy_bytes="hex", key_encoding=None, value_encoding=None)) == render.BytesMode(
        "hex", "hex", "hex", "hex"
    )
    assert mode(ns(json=True, legacy_bytes="utf8", key_encoding=None, value_encoding=None)).key == "escaped"
    with pytest.raises(ValueError, match="--hex sets both encodings"):
        mode(ns(json=True, legacy_bytes="hex", key_encoding="utf8", value_encoding=None))


def test_parse_key() -> None:
    assert render.parse_key("k1", False) == b"k1"
    assert render.parse_key("0xff00", True) == b"\xff\x00"
    assert render.parse_key("ff00", True) == b"\xff\x00"
    assert render.parse_key("/wA=", "base64") == b"\xff\x00"
    with pytest.raises(ValueError, match="not hex"):
        render.parse_key("zz", True)
    with pytest.raises(ValueError, match="not base64"):
        render.parse_key("!!", "base64")


def test_fit_table_leaves_out_columns_in_order() -> None:
    headers = ("name", "wide column", "other", "keep")
    rows = [("a", "x" * 30, "y" * 30, "z")]
    text, out = render.fit_table(headers, rows, 50, ("other", "wide column"))
    assert out == ["other"] and max(map(len, text.splitlines())) <= 50
    text, out = render.fit_table(headers, rows, 10, ("other", "wide column"))
    assert out == ["other", "wide column"] and text.splitlines()[0].split() == ["name", "keep"]
    assert render.fit_table(headers, rows, None, ("other",))[1] == []


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

"""Partition log codec (formats/log.py): golden bytes, round-trips, torn tails, corruption."""

from __future__ import annotations

import msgpack
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.errors import CorruptionError, FormatVersionError
from formats.log import (
    FILE_HEADER,
    RECORD_HEADER,
    check_file_header,
    decode_record,
    decode_records,
    encode_file_header,
    encode_record,
)


def h(*fields: str) -> bytes:
    return bytes.fromhex("".join(fields))


def test_golden_put() -> None:
    payload = h("82", "a16b", "c4016b", "a176", "c40176")  # map(2) "k": bin b"k", "v": bin b"v"
    head = h("0000000b") + xxhash.xxh3_64_digest(payload)
    expected = head + (xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF).to_bytes(4, "big") + payload
    assert encode_record(b"k", b"v") == expected
    assert expected.hex() == "0000000bf0ff347146726941134502cd82a16bc4016ba176c40176"


def test_golden_delete_with_every_field() -> None:
    rec = encode_record(b"k", None, ttl=5, event_ts=7, tx=3, tx_end=True)
    payload = rec[RECORD_HEADER.size :]
    assert msgpack.unpackb(payload, raw=False) == {
        "k": b"k",
        "v": None,
        "ttl": 5,
        "ets": 7,
        "tx": 3,
        "end": True,
    }
    assert rec.hex() == (
        "0000001c714fca445dfc428fad58894986a16bc4016ba176c0a374746c05a365747307a2747803a3656e64c3"
    )


def test_file_header() -> None:
    assert encode_file_header() == b"LSMP\x00\x01"
    check_file_header(encode_file_header(), "f")
    with pytest.raises(CorruptionError, match="not a partition log"):
        check_file_header(b"LSMX\x00\x01", "f")
    with pytest.raises(FormatVersionError, match="version 3"):
        check_file_header(b"LSMP\x00\x03", "f")
    with pytest.raises(CorruptionError, match="truncated"):
        check_file_header(b"LSM", "f")


records = st.tuples(
    st.binary(min_size=1, max_size=40),
    st.none() | st.binary(max_size=300),
    st.none() | st.integers(0, 2**63 - 1),
    st.none() | st.integers(-(2**63), 2**63 - 1),
    st.none() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=20),
    st.booleans() | st.dictionaries(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), min_size=1, max_size=4),
).map(lambda t: t if t[4] is not None else (*t[:5], False))


@settings(max_examples=100, deadline=None)
@given(st.lists(records, max_size=20), st.integers(0, 1000))
def test_roundtrip(recs: list[tuple], base: int) -> None:
    buf = b"".join(encode_record(*r) for r in recs)
    entries, end = decode_records(buf, base, "p")
    assert end == len(buf)
    assert [(e.key, e.value, e.ttl, e.event_ts, e.tx, e.tx_end) for e in entries] == recs
    pos = base
    for e in entries:
        assert e.pos == pos
        pos = e.end
    assert pos == base + len(buf)


@settings(max_examples=100, deadline=None)
@given(st.lists(records, min_size=1, max_size=8), st.data())
def test_every_prefix_is_the_complete_records_and_a_torn_tail(recs: list[tuple], data: st.DataObject) -> None:
    encoded = [encode_record(*r) for r in recs]
    buf = b"".join(encoded)
    cut = data.draw(st.integers(0, len(buf)))
    entries, end = decode_records(buf[:cut])
    bounds = [0]
    for e in encoded:
        bounds.append(bounds[-1] + len(e))
    complete = max(i for i, b in enumerate(bounds) if b <= cut)
    assert len(entries) == complete and end == bounds[complete]


@settings(max_examples=100, deadline=None)
@given(st.lists(records, min_size=2, max_size=6), st.data())
def test_a_flipped_byte_in_a_complete_record_is_corruption_at_its_offset(
    recs: list[tuple], data: st.DataObject
) -> None:
    encoded = [encode_record(*r) for r in recs]
    buf = bytearray(b"".join(encoded))
    victim = data.draw(st.integers(0, len(encoded) - 1))
    start = sum(len(e) for e in encoded[:victim])
    at = start + data.draw(st.integers(0, len(encoded[victim]) - 1))
    buf[at] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(CorruptionError) as ei:
        decode_records(bytes(buf), 100, "part.log")
    assert (ei.value.path, ei.value.offset) == ("part.log", 100 + start)


def test_a_long_length_field_is_corruption_not_a_torn_tail() -> None:
    # a damaged length would otherwise make every later record look like the tail of one torn record
    good = encode_record(b"a", b"1") + encode_record(b"b", b"2")
    bad = bytearray(good)
    bad[0] = 0x7F
    with pytest.raises(CorruptionError, match="header checksum") as ei:
        decode_records(bytes(bad))
    assert ei.value.offset == 0


def _raw_record(payload: bytes) -> bytes:
    head = len(payload).to_bytes(4, "big") + xxhash.xxh3_64_digest(payload)
    return head + (xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF).to_bytes(4, "big") + payload


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        msgpack.packb([1, 2]),  # not a map
        msgpack.packb({"k": b"a"}),  # no value
        msgpack.packb({"k": "text", "v": b"x"}, use_bin_type=True),  # key not bytes
        msgpack.packb({"k": b"", "v": b"x"}, use_bin_type=True),  # empty key
        msgpack.packb({"k": b"a", "v": b"x", "ttl": -1}, use_bin_type=True),
        msgpack.packb({"k": b"a", "v": b"x", "end": True}, use_bin_type=True),  # end without tx
        msgpack.packb({"k": b"a", "v": b"x", "tx": 1.5}, use_bin_type=True),
        msgpack.packb({"k": b"a", "v": b"x", "txe": {0: 1}}, use_bin_type=True),  # txe without tx
        msgpack.packb({"k": b"a", "v": b"x", "tx": 1, "txe": {}}, use_bin_type=True),  # no counts
        msgpack.packb({"k": b"a", "v": b"x", "tx": 1, "txe": {0: -1}}, use_bin_type=True),
        msgpack.packb({"k": b"a", "v": b"x", "tx": 1, "txe": {"0": 1}}, use_bin_type=True),
        msgpack.packb({"k": b"a", "v": b"x", "tx": 1, "txe": [0, 1]}, use_bin_type=True),
        msgpack.packb({"k": b"a", "v": b"x", "tx": 1, "end": True, "txe": {0: 1}}, use_bin_type=True),
        msgpack.packb({"k": b"a", "v": b"x"}, use_bin_type=True) + b"\x00",  # trailing bytes
    ],
)
def test_malformed_payload_with_a_valid_checksum_is_corruption(payload: bytes) -> None:
    buf = encode_record(b"x", b"y") + _raw_record(payload)
    first = len(encode_record(b"x", b"y"))
    with pytest.raises(CorruptionError) as ei:
        decode_records(buf, 6, "p")
    assert ei.value.offset == 6 + first


def test_golden_transaction_end_across_partitions() -> None:
    """The txe field: a map of partition -> records, uint keys (docs/format.md's example bytes)."""
    rec = encode_record(b"k", b"v", tx=3, tx_end={0: 1, 1: 2})
    assert rec[16:].hex() == "84a16bc4016ba176c40176a2747803a37478658200010102"
    assert decode_record(rec, 0, 0, "p").tx_end == {0: 1, 1: 2}


def test_unknown_field_is_a_format_version_error() -> None:
    buf = _raw_record(msgpack.packb({"k": b"a", "v": b"x", "new": 1}, use_bin_type=True))
    with pytest.raises(FormatVersionError, match="unknown fields"):
        decode_records(buf)


def test_decode_record_of_a_torn_header_or_payload_is_none() -> None:
    rec = encode_record(b"key", b"value")
    for cut in range(len(rec)):
        assert decode_record(rec[:cut], 0, 0, "p") is None
    assert decode_record(rec, 0, 0, "p") is not None


@pytest.mark.parametrize(
    ("kwargs", "exc"),
    [
        ({"key": "str", "value": b"v"}, TypeError),
        ({"key": b"", "value": b"v"}, ValueError),
        ({"key": b"k" * 65536, "value": b"v"}, ValueError),
        ({"key": b"k", "value": "v"}, TypeError),
        ({"key": b"k", "value": b"v", "ttl": -1}, ValueError),
        ({"key": b"k", "value": b"v", "ttl": 1.0}, TypeError),
        ({"key": b"k", "value": b"v", "event_ts": "now"}, TypeError),
        ({"key": b"k", "value": b"v", "tx": b"bytes"}, TypeError),
        ({"key": b"k", "value": b"v", "tx_end": True}, ValueError),
        ({"key": b"k", "value": b"v", "tx_end": {0: 1}}, ValueError),
        ({"key": b"k", "value": b"v", "tx": 1, "tx_end": {}}, ValueError),
        ({"key": b"k", "value": b"v", "tx": 1, "tx_end": {-1: 1}}, ValueError),
        ({"key": b"k", "value": b"v", "tx": 1, "tx_end": {0: "1"}}, ValueError),
        ({"key": b"k", "value": b"v", "tx": 1, "tx_end": 1}, TypeError),
        ({"key": b"k", "value": b"v", "ttl": 2**64}, ValueError),
    ],
)
def test_encode_refuses_what_the_format_cannot_hold(kwargs: dict, exc: type) -> None:
    with pytest.raises(exc):
        encode_record(**kwargs)


def test_header_sizes() -> None:
    assert FILE_HEADER.size == 6 and RECORD_HEADER.size == 16


def _runs_of(buf: bytes, base: int = 0, path: str = "<bytes>", verify: bool = True) -> list[tuple]:
    from formats.log import decode_run

    run, has_tx = decode_run(buf, base, path, 7, 100, verify)
    assert has_tx == any(t[6] is not None for t in run)
    return run


@settings(max_examples=100, deadline=None)
@given(st.lists(records, max_size=20), st.booleans())
def test_decode_run_and_scan_records_agree_with_decode_records(recs: list[tuple], verify: bool) -> None:
    from formats.log import scan_records

    buf = b"".join(encode_record(*r) for r in recs)
    entries, end = decode_records(buf, 10, "p")
    run = _runs_of(buf + encode_record(b"torn", b"x")[:-1], 10, "p", verify)  # a torn tail is left out
    assert run == [(7, 100 + i, *r) for i, r in enumerate(recs)]
    positions: list[int] = []
    assert scan_records(buf + b"\x00" * 5, 10, "p", positions.append) == end
    assert positions == [e.pos for e in entries]


@pytest.mark.parametrize("klen", [1, 16, 255, 256])
@pytest.mark.parametrize("vlen", [None, 0, 1, 255, 256, 65535, 65536])
def test_decode_run_parses_every_bin_width_like_msgpack(klen: int, vlen: int | None) -> None:
    key = b"k" * klen
    value = None if vlen is None else bytes(range(256)) * (vlen // 256) + b"v" * (vlen % 256)
    buf = encode_record(key, value) + encode_record(b"x", b"y", tx=1)
    assert _runs_of(buf) == [
        (7, 100, key, value, None, None, None, False),
        (7, 101, b"x", b"y", None, None, 1, False),
    ]


@settings(max_examples=100, deadline=None)
@given(st.lists(records, min_size=2, max_size=6), st.data())
def test_decode_run_finds_a_flipped_byte_at_its_record(recs: list[tuple], data: st.DataObject) -> None:
    from formats.log import scan_records

    encoded = [encode_record(*r) for r in recs]
    buf = bytearray(b"".join(encoded))
    victim = data.draw(st.integers(0, len(encoded) - 1))
    start = sum(len(e) for e in encoded[:victim])
    buf[start + data.draw(st.integers(0, len(encoded[victim]) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    for call in (
        lambda: _runs_of(bytes(buf), 100, "part.log"),
        lambda: scan_records(bytes(buf), 100, "part.log", id),
    ):
        with pytest.raises(CorruptionError) as ei:
            call()
        assert (ei.value.path, ei.value.offset) == ("part.log", 100 + start)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x82\xa1k\xc4\x00\xa1v\xc4\x01x",  # the fast layout with an empty key
        b"\x82\xa1k\xc4\x01a\xa1v\xc4\x02x",  # a value running past the payload
        b"\x82\xa1k\xc4\x01a\xa1v\xc4\x01xy",  # trailing bytes
        b"\x82\xa1k\xc4\x01a\xa1w\xc4\x01x",  # another field name
        b"\x82\xa1k\xc4\x05a",  # a key running past the payload
        msgpack.packb({"k": "text", "v": b"x"}, use_bin_type=True),
        msgpack.packb({"k": b"a", "v": b"x", "ttl": -1}, use_bin_type=True),
    ],
)
def test_decode_run_refuses_malformed_payloads_with_valid_checksums(payload: bytes) -> None:
    first = len(encode_record(b"x", b"y"))
    buf = encode_record(b"x", b"y") + _raw_record(payload)
    for verify in (True, False):
        with pytest.raises(CorruptionError) as ei:
            _runs_of(buf, 6, "p", verify)
        assert ei.value.offset == 6 + first


def test_progress_marker_codec() -> None:
    from formats.log import MARKER_VERSION, decode_run_end, encode_marker, encode_record

    check_file_header(encode_file_header(MARKER_VERSION), "f")  # a file holding markers reads
    m = encode_marker(-5)
    e = decode_record(m, 0, 0, "p")
    assert e is not None and e.key is None and e.event_ts == -5 and e.end == len(m)
    buf = encode_record(b"k", b"v") + m + encode_record(b"j", None)
    run, special, end = decode_run_end(buf, 0, "p", 3, 10)
    assert special and end == len(buf)
    assert run == [
        (3, 10, b"k", b"v", None, None, None, False),
        (3, 11, None, None, None, -5, None, False),
        (3, 12, b"j", None, None, None, None, False),
    ]
    with pytest.raises(TypeError):
        encode_marker("5")

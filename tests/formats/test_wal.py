"""WAL record codec (formats/wal.py): golden bytes, round-trips, torn tails, checksum failures."""

from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.errors import CorruptionError
from formats.wal import HEADER, WalRecord, decode_segment, encode_put, encode_record

TS0 = 1_700_000_000_000


def h(*fields: str) -> bytes:
    return bytes.fromhex("".join(fields))


GOLDEN_PAYLOAD = h(
    "0000000000000005",  # u64 seq = 5
    "0000018bcfe56800",  # i64 ts = 1_700_000_000_000
    "00000003",  # u32 count = 3
    # row 1: put b"k" = b"v", no TTL
    "0001",  # u16 key_len
    "6b",  # key b"k"
    "00",  # u8 flags: none
    "0000000000000000",  # i64 expire_ts slot (unused: flag bit 1 unset)
    "00000001",  # u32 value_len
    "76",  # value b"v"
    # row 2: put b"d" = b"x" with expire_ts
    "0001",  # u16 key_len
    "64",  # key b"d"
    "02",  # u8 flags: has expire_ts
    "0000018bcfe65260",  # i64 expire_ts = 1_700_000_060_000
    "00000001",  # u32 value_len
    "78",  # value b"x"
    # row 3: delete b"d"
    "0001",  # u16 key_len
    "64",  # key b"d"
    "01",  # u8 flags: tombstone
    "0000000000000000",  # i64 expire_ts slot
    "00000000",  # u32 value_len = 0
)
GOLDEN = (
    h(
        "00000046",  # u32 payload_len = 70
        "f09c4eeeb1ddebca",  # u64 xxh3_64(payload)
    )
    + GOLDEN_PAYLOAD
)
GOLDEN_OPS = [(b"k", None, b"v"), (b"d", TS0 + 60_000, b"x"), (b"d", None, None)]
GOLDEN_ROWS = [
    (b"k", 5, TS0, None, b"v"),
    (b"d", 5, TS0, TS0 + 60_000, b"x"),
    (b"d", 5, TS0, None, None),
]


def test_golden_record_encodes():
    assert struct.unpack(">Q", GOLDEN[4:12])[0] == xxhash.xxh3_64_intdigest(GOLDEN_PAYLOAD)
    assert encode_record(5, TS0, GOLDEN_OPS) == GOLDEN


def test_golden_record_decodes():
    records, torn = decode_segment(GOLDEN)
    assert torn is None
    assert records == [WalRecord(0, 5, TS0, GOLDEN_ROWS)]


def test_empty_segment():
    assert decode_segment(b"") == ([], None)


def test_record_with_no_rows():
    rec = encode_record(1, 2, [])
    assert len(rec) == HEADER.size + 20
    assert decode_segment(rec) == ([WalRecord(0, 1, 2, [])], None)


# -- round-trips ---------------------------------------------------------------------------------------

OPS = st.lists(
    st.tuples(
        st.binary(min_size=1, max_size=20),
        st.none() | st.integers(-(2**63), 2**63 - 1),
        st.none() | st.binary(max_size=50),
    ).map(lambda t: (t[0], None if t[2] is None else t[1], t[2])),  # deletes carry no expire_ts
    max_size=6,
)
COMMITS = st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(-(2**63), 2**63 - 1), OPS), max_size=8)


def build(commits) -> tuple[bytes, list[WalRecord]]:
    buf = b""
    want = []
    for seq, ts, ops in commits:
        want.append(WalRecord(len(buf), seq, ts, [(k, seq, ts, exp, v) for k, exp, v in ops]))
        buf += encode_record(seq, ts, ops)
    return buf, want


@settings(max_examples=100, deadline=None)
@given(commits=COMMITS)
def test_round_trip(commits):
    buf, want = build(commits)
    assert decode_segment(buf, "seg.wal") == (want, None)


@settings(max_examples=30, deadline=None)
@given(commits=COMMITS.filter(lambda c: len(c) >= 1))
def test_every_truncation_returns_the_intact_prefix(commits):
    buf, want = build(commits)
    ends = [r.offset for r in want[1:]] + [len(buf)]
    for cut in range(len(buf) + 1):
        records, torn = decode_segment(buf[:cut])
        complete = [r for r, e in zip(want, ends, strict=True) if e <= cut]
        assert records == complete
        if cut in (0, *ends):
            assert torn is None
        else:
            assert torn == want[len(complete)].offset


def test_every_truncation_of_the_golden_segment():
    recs = [GOLDEN, encode_record(6, TS0 + 1, [(b"a", None, b"b")]), encode_record(7, TS0 + 2, [])]
    buf = b"".join(recs)
    starts = [0, len(recs[0]), len(recs[0]) + len(recs[1]), len(buf)]
    for cut in range(len(buf) + 1):
        records, torn = decode_segment(buf[:cut])
        n = sum(1 for s in starts[1:] if s <= cut)
        assert [r.seq for r in records] == [5, 6, 7][:n]
        assert torn == (None if cut in starts else starts[n])


@settings(max_examples=100, deadline=None)
@given(
    seq=st.integers(0, 2**64 - 1),
    ts=st.integers(-(2**63), 2**63 - 1),
    key=st.binary(min_size=1, max_size=30),
    expire_ts=st.none() | st.integers(-(2**63), 2**63 - 1),
    value=st.binary(max_size=60),
)
def test_encode_put_is_byte_identical_to_encode_record(seq, ts, key, expire_ts, value):
    """The write path's single-put encoder must produce the generic record, byte for byte."""
    rec = encode_put(seq, ts, key, expire_ts, value)
    assert rec == encode_record(seq, ts, [(key, expire_ts, value)])
    assert decode_segment(rec)[0] == [WalRecord(0, seq, ts, [(key, seq, ts, expire_ts, value)])]


# -- checksum failures ---------------------------------------------------------------------------------


def three_records() -> tuple[bytes, list[int]]:
    recs = [encode_record(i, TS0 + i, [(b"key%d" % i, None, b"value%d" % i)]) for i in (1, 2, 3)]
    offsets = [0, len(recs[0]), len(recs[0]) + len(recs[1])]
    return b"".join(recs), offsets


@pytest.mark.parametrize("where", ["payload", "checksum"])
def test_checksum_failure_of_a_middle_record_is_corruption(where):
    buf, offsets = three_records()
    at = offsets[1] + (HEADER.size + 5 if where == "payload" else 4)
    bad = buf[:at] + bytes([buf[at] ^ 0x01]) + buf[at + 1 :]
    with pytest.raises(CorruptionError, match="checksum") as ei:
        decode_segment(bad, "wal/00000000000000000001.wal")
    assert ei.value.offset == offsets[1]
    assert ei.value.path == "wal/00000000000000000001.wal"
    assert f"offset {offsets[1]}" in str(ei.value)


def test_checksum_failure_of_the_complete_last_record_is_corruption():
    """A complete record with a bad checksum is not what an interrupted append leaves (issue 12, item 7)."""
    buf, offsets = three_records()
    bad = buf[:-1] + bytes([buf[-1] ^ 0x01])
    with pytest.raises(CorruptionError, match="complete last record") as ei:
        decode_segment(bad, "w")
    assert (ei.value.path, ei.value.offset) == ("w", offsets[2])


def test_checksum_failure_of_the_last_record_is_dropped_only_on_request():
    buf, offsets = three_records()
    bad = buf[:-1] + bytes([buf[-1] ^ 0x01])
    records, torn = decode_segment(bad, drop_corrupted_tail=True)
    assert [r.seq for r in records] == [1, 2] and torn == offsets[2]


@pytest.mark.parametrize("byte", [0, 1, 2, 3])
@pytest.mark.parametrize("mask", [0xFF, 0x01, 0x80])
def test_damaged_length_of_a_middle_record_is_corruption(byte, mask):
    """A bad length can make a middle record look like it runs past the end: that is not a torn tail,
    because complete records follow it. Silently dropping them would lose acknowledged commits."""
    buf, offsets = three_records()
    at = offsets[1] + byte
    bad = buf[:at] + bytes([buf[at] ^ mask]) + buf[at + 1 :]
    with pytest.raises(CorruptionError) as ei:
        decode_segment(bad)
    assert ei.value.offset == offsets[1]


def test_length_reaching_exactly_to_the_end_is_corruption_when_records_follow():
    buf, offsets = three_records()
    length = len(buf) - offsets[1] - HEADER.size
    bad = buf[: offsets[1]] + struct.pack(">I", length) + buf[offsets[1] + 4 :]
    with pytest.raises(CorruptionError) as ei:
        decode_segment(bad)
    assert ei.value.offset == offsets[1]


def seal(payload: bytes) -> bytes:
    return HEADER.pack(len(payload), xxhash.xxh3_64_intdigest(payload)) + payload


@pytest.mark.parametrize(
    "payload, words",
    [
        (struct.pack(">QqI", 1, 2, 1), "malformed"),  # count says 1 row, none present
        (struct.pack(">QqI", 1, 2, 0) + b"\x00", "trailing"),
        (struct.pack(">Qq", 1, 2), "malformed"),  # header cut short
        (struct.pack(">QqI", 1, 2, 1) + h("0001", "6b", "04", "0000000000000000", "00000000"), "flag"),
        (
            struct.pack(">QqI", 1, 2, 1) + h("0001", "6b", "01", "0000000000000000", "00000001", "76"),
            "tombstone",
        ),
        (
            struct.pack(">QqI", 1, 2, 1) + h("0001", "6b", "00", "0000000000000000", "00000009", "76"),
            "past the end",
        ),
    ],
)
@pytest.mark.parametrize("last", [False, True])
def test_malformed_payload_with_a_good_checksum_is_corruption(payload, words, last):
    """A checksum that matches means the bytes are what was written: a bad structure is a bug, never torn."""
    good = encode_record(9, 9, [(b"a", None, b"b")])
    bad = seal(payload)
    buf = good + bad if last else good + bad + good
    with pytest.raises(CorruptionError, match=words) as ei:
        decode_segment(buf, "seg")
    assert ei.value.offset == len(good) and ei.value.path == "seg"


@pytest.mark.parametrize(
    "value",
    [
        bytes(200_000),  # zeros: every probe reads length 0
        struct.pack(">I", 300) * 50_000,  # every aligned probe reads a length that fits the tail
        bytes(range(256)) * 800,
    ],
)
def test_torn_tail_of_a_large_record(value):
    """The check that a torn record is not a damaged one costs O(tail), whatever the values hold."""
    first = encode_record(1, 2, [(b"a", None, b"x")])
    buf = first + encode_record(2, 3, [(b"big", None, value)])
    for cut in (len(first) + 5, len(first) + 40, len(buf) - 1):
        assert decode_segment(buf[:cut]) == ([WalRecord(0, 1, 2, [(b"a", 1, 2, None, b"x")])], len(first))

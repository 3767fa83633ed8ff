"""Row codec v0 / v1 (formats/row.py): golden bytes from the SlateDB TTL RFC layouts (docs/sources.md),
round-trips, and errors.

A row in memory is ``(key, seq, ts, expire_ts, value)``; value None is a tombstone.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import formats.row as row_mod
from formats.errors import CorruptionError, FormatVersionError
from formats.row import (
    FORMAT_V0,
    FORMAT_V1,
    MAX_KEY_LEN,
    Row,
    RowFeature,
    RowFlags,
    check_key,
    check_value,
    codec_for,
    features_for,
)

F = RowFeature
ALL_SUBSETS = [
    tuple(c) for n in range(len(RowFeature) + 1) for c in itertools.combinations(list(RowFeature), n)
]
I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)


def h(*fields: str) -> bytes:
    """Bytes from hex fields written one per line, so each golden test reads like the RFC diagram."""
    return bytes.fromhex("".join(fields))


# -- golden bytes: hand-written per the RFC layout ----------------------------------------------------

# ts 1_700_000_000_000 ms = 0x0000018BCFE56800; expire_ts 1_700_000_060_000 ms = 0x0000018BCFE65260
TS_HEX = "0000018bcfe56800"
EXP_HEX = "0000018bcfe65260"
TS = 1_700_000_000_000
EXP = 1_700_000_060_000

GOLDEN = [
    pytest.param(
        FORMAT_V0,
        (),
        h(
            "0002",  # u16 key_len = 2
            "6162",  # key b"ab"
            "00000003",  # u32 value_len = 3
            "78797a",  # value b"xyz"
        ),
        (b"ab", None, None, None, b"xyz"),
        id="v0-row",
    ),
    pytest.param(
        FORMAT_V0,
        (),
        h(
            "0002",  # u16 key_len = 2
            "6162",  # key b"ab"
            "ffffffff",  # u32 value_len = 0xFFFFFFFF: tombstone, no value bytes
        ),
        (b"ab", None, None, None, None),
        id="v0-tombstone",
    ),
    pytest.param(
        FORMAT_V0,
        (),
        h(
            "0001",  # u16 key_len = 1
            "6b",  # key b"k"
            "00000000",  # u32 value_len = 0: an empty value, NOT a tombstone in v0
        ),
        (b"k", None, None, None, b""),
        id="v0-empty-value",
    ),
    pytest.param(
        FORMAT_V1,
        (F.RowFlags,),
        h(
            "0001",  # u16 key_len = 1
            "6b",  # key b"k"
            "00",  # u8 row_flags = 0
            "00000001",  # u32 value_len = 1
            "76",  # value b"v"
        ),
        (b"k", None, None, None, b"v"),
        id="v1-flags-only",
    ),
    pytest.param(
        FORMAT_V1,
        (F.RowFlags, F.Timestamp, F.TimeToLive),
        h(
            "0003",  # u16 key_len = 3
            "6b6579",  # key b"key"
            "02",  # u8 row_flags: bit 1 = has expire_ts
            TS_HEX,  # i64 ts
            EXP_HEX,  # i64 expire_ts
            "00000003",  # u32 value_len = 3
            "76616c",  # value b"val"
        ),
        (b"key", None, TS, EXP, b"val"),
        id="v1-flags-ts-ttl-rfc-example",
    ),
    pytest.param(
        FORMAT_V1,
        (F.RowFlags, F.Timestamp, F.TimeToLive, F.Seq),
        h(
            "0003",  # u16 key_len = 3
            "6b6579",  # key b"key"
            "02",  # u8 row_flags: has expire_ts
            TS_HEX,  # i64 ts
            EXP_HEX,  # i64 expire_ts
            "000000000000002a",  # u64 seq = 42
            "00000003",  # u32 value_len = 3
            "76616c",  # value b"val"
        ),
        (b"key", 42, TS, EXP, b"val"),
        id="v1-all-features",
    ),
    pytest.param(
        FORMAT_V1,
        (F.RowFlags, F.Timestamp, F.Seq),
        h(
            "0001",  # u16 key_len = 1
            "6b",  # key b"k"
            "01",  # u8 row_flags: bit 0 = tombstone
            "ffffffffffffffff",  # i64 ts = -1 (two's complement; ts before the epoch is legal)
            "0000000000000007",  # u64 seq = 7
            "00000000",  # u32 value_len = 0, no value bytes
        ),
        (b"k", 7, -1, None, None),
        id="v1-tombstone",
    ),
    pytest.param(
        FORMAT_V1,
        (F.RowFlags, F.Timestamp, F.TimeToLive, F.Seq),
        h(
            "0001",  # u16 key_len = 1
            "6b",  # key b"k"
            "01",  # u8 row_flags: tombstone, no expire_ts
            TS_HEX,  # i64 ts
            "0000000000000000",  # i64 expire_ts slot: present (SST has TimeToLive), written as 0, ignored
            "0000000000000007",  # u64 seq = 7
            "00000000",  # u32 value_len = 0
        ),
        (b"k", 7, TS, None, None),
        id="v1-tombstone-in-ttl-sst",
    ),
    pytest.param(
        FORMAT_V1,
        (F.RowFlags, F.Timestamp, F.TimeToLive),
        h(
            "0001",  # u16 key_len = 1
            "6b",  # key b"k"
            "00",  # u8 row_flags: bit 1 unset -> no expire_ts
            TS_HEX,  # i64 ts
            "0000000000000000",  # i64 expire_ts slot, ignored
            "00000002",  # u32 value_len = 2
            "7676",  # value b"vv"
        ),
        (b"k", None, TS, None, b"vv"),
        id="v1-ttl-feature-bit-unset",
    ),
]


@pytest.mark.parametrize("version, features, encoded, fields", GOLDEN)
def test_golden_bytes_decode_to_fields(version, features, encoded, fields):
    codec = codec_for(version, features)
    assert codec.decode(encoded) == fields
    row, end = codec.decode_from(encoded, 0)
    assert row == fields and end == len(encoded)


@pytest.mark.parametrize("version, features, encoded, fields", GOLDEN)
def test_fields_encode_to_golden_bytes(version, features, encoded, fields):
    assert codec_for(version, features).encode(fields) == encoded


def test_ttl_slot_is_ignored_without_the_flag_bit():
    """With the TimeToLive feature but flag bit 1 unset, whatever sits in the expire_ts slot is ignored."""
    codec = codec_for(FORMAT_V1, (F.RowFlags, F.Timestamp, F.TimeToLive))
    encoded = h(
        "0001",  # u16 key_len
        "6b",  # key b"k"
        "00",  # u8 row_flags: no expire_ts
        TS_HEX,  # i64 ts
        EXP_HEX,  # i64 expire_ts slot holding a plausible value: still ignored
        "00000001",  # u32 value_len
        "76",  # value
    )
    assert codec.decode(encoded) == (b"k", None, TS, None, b"v")


def test_v1_empty_value_is_not_a_tombstone():
    codec = codec_for(FORMAT_V1, (F.RowFlags,))
    encoded = h("0001", "6b", "00", "00000000")
    assert codec.decode(encoded) == (b"k", None, None, None, b"")
    assert codec.encode((b"k", None, None, None, b"")) == encoded
    assert codec.encode((b"k", None, None, None, None)) == h("0001", "6b", "01", "00000000")


def test_default_seq_fills_layouts_without_seq():
    v0 = codec_for(FORMAT_V0)
    assert v0.decode_from(h("0001", "6b", "00000000"), 0, default_seq=99)[0] == (b"k", 99, None, None, b"")
    v1 = codec_for(FORMAT_V1, (F.RowFlags,))
    assert v1.decode_from(h("0001", "6b", "00", "00000000"), 0, default_seq=99)[0][1] == 99
    with_seq = codec_for(FORMAT_V1, (F.RowFlags, F.Seq))
    enc = with_seq.encode((b"k", 5, None, None, b""))
    assert with_seq.decode_from(enc, 0, default_seq=99)[0][1] == 5


def test_features_are_put_in_enum_order():
    codec = codec_for(FORMAT_V1, (F.Seq, F.RowFlags, F.Timestamp))
    assert codec.features == (F.RowFlags, F.Timestamp, F.Seq)
    # same bytes as the canonical order: the attrs follow the enum, not the caller's order
    r = (b"k", 3, 4, None, b"v")
    assert codec.encode(r) == codec_for(FORMAT_V1, (F.RowFlags, F.Timestamp, F.Seq)).encode(r)


def test_v0_ignores_features():
    assert codec_for(FORMAT_V0, (F.RowFlags, F.Seq)).features == ()


def test_enum_values_are_the_on_disk_values():
    # DO NOT CHANGE: stored on disk.
    assert [(f.name, int(f)) for f in RowFeature] == [
        ("RowFlags", 0),
        ("Timestamp", 1),
        ("TimeToLive", 2),
        ("Seq", 3),
    ]
    assert int(RowFlags.TOMBSTONE) == 1 and int(RowFlags.HAS_EXPIRE_TS) == 2
    assert (FORMAT_V0, FORMAT_V1) == (0, 1)


def test_features_for():
    assert features_for(False) == (F.RowFlags, F.Timestamp, F.Seq)
    assert features_for(True) == (F.RowFlags, F.Timestamp, F.TimeToLive, F.Seq)
    assert features_for(True, with_seq=False) == (F.RowFlags, F.Timestamp, F.TimeToLive)


def test_row_namedtuple_names_the_fields():
    r = Row(*codec_for(FORMAT_V0).decode(h("0001", "6b", "ffffffff")))
    assert r.key == b"k" and r.tombstone
    assert not Row(b"k", 1, 2, None, b"").tombstone


# -- round-trips ---------------------------------------------------------------------------------------

KEYS = st.binary(min_size=1, max_size=40)
VALUES = st.binary(max_size=80)


@st.composite
def rows_for(draw, version: int, features: tuple) -> tuple[tuple, tuple]:
    """(row to encode, row expected back) for this layout; only rows the layout can hold."""
    fs = set(features)
    can_tombstone = version == FORMAT_V0 or F.RowFlags in fs
    can_expire = version == FORMAT_V1 and {F.RowFlags, F.TimeToLive} <= fs
    key = draw(KEYS)
    value = None if can_tombstone and draw(st.booleans()) else draw(VALUES)
    seq = draw(U64)
    ts = draw(I64)
    expire_ts = draw(st.none() | I64) if can_expire else None
    if version == FORMAT_V0:
        expected = (key, None, None, None, value)
    else:
        expected = (
            key,
            seq if F.Seq in fs else None,
            ts if F.Timestamp in fs else None,
            expire_ts,
            value,
        )
    return (key, seq, ts, expire_ts, value), expected


LAYOUTS = [pytest.param(FORMAT_V0, (), id="v0")] + [
    pytest.param(FORMAT_V1, fs, id="v1-" + "+".join(f.name for f in fs) or "v1-none") for fs in ALL_SUBSETS
]


@pytest.mark.parametrize("version, features", LAYOUTS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_round_trip_every_layout(version, features, data):
    codec = codec_for(version, features)
    pairs = data.draw(st.lists(rows_for(version, features), min_size=1, max_size=8))
    # one row alone
    row, expected = pairs[0]
    assert codec.decode(codec.encode(row)) == expected
    # several rows back to back, as in a data block
    buf = b"".join(codec.encode(r) for r, _ in pairs)
    pos = 0
    got = []
    while pos < len(buf):
        r, pos = codec.decode_from(buf, pos)
        got.append(r)
    assert got == [e for _, e in pairs]
    # encode_parts returns the encoded length and appends the same bytes
    parts: list = []
    n = codec.encode_parts(row, parts)
    assert b"".join(parts) == codec.encode(row) and n == len(codec.encode(row))


@pytest.mark.parametrize(
    "version, features",
    [
        (FORMAT_V0, ()),
        (FORMAT_V1, (F.RowFlags,)),
        (FORMAT_V1, tuple(RowFeature)),
    ],
)
@pytest.mark.parametrize("value", [b"", b"v" * 1000, None])
def test_max_length_key_round_trips(version, features, value):
    codec = codec_for(version, features)
    key = bytes(range(256)) * 255 + b"\x00" * 255
    assert len(key) == MAX_KEY_LEN == 65535
    row = (key, 9, 10, None, value)
    enc = codec.encode(row)
    assert enc[:2] == b"\xff\xff"
    got = codec.decode(enc)
    assert got[0] == key and got[4] == value
    assert codec.key_at(enc, 0) == key


# -- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, exc, words",
    [
        (b"", ValueError, "65535"),
        (b"k" * 65536, ValueError, "65535"),
        ("k", TypeError, "bytes"),
        (None, TypeError, "bytes"),
        (bytearray(b"k"), TypeError, "bytes"),
        (memoryview(b"k"), TypeError, "bytes"),
        (1, TypeError, "bytes"),
    ],
)
def test_bad_keys_are_rejected(key, exc, words):
    with pytest.raises(exc, match=words):
        check_key(key)
    for version, features in [(FORMAT_V0, ()), (FORMAT_V1, tuple(RowFeature))]:
        with pytest.raises(exc, match=words):
            codec_for(version, features).encode((key, 1, 1, None, b"v"))


@pytest.mark.parametrize("value", ["v", 1, bytearray(b"v"), memoryview(b"v")])
def test_bad_values_are_rejected(value):
    with pytest.raises(TypeError, match="bytes"):
        check_value(value)
    with pytest.raises(TypeError, match="bytes"):
        codec_for(FORMAT_V1, tuple(RowFeature)).encode((b"k", 1, 1, None, value))


def test_none_is_not_a_value():
    """check_value is what a put uses: None is a delete, never a value."""
    with pytest.raises(TypeError, match="bytes"):
        check_value(None)


def test_value_length_limit(monkeypatch):
    # A 4 GiB value is too big for a test; lower the limit to check the comparison and the message.
    assert row_mod.MAX_VALUE_LEN == 0xFFFFFFFE
    monkeypatch.setattr(row_mod, "MAX_VALUE_LEN", 3)
    check_value(b"abc")
    with pytest.raises(ValueError, match="0xFFFFFFFF"):
        check_value(b"abcd")


def test_tombstone_needs_row_flags():
    for features in [(), (F.Timestamp, F.TimeToLive, F.Seq)]:
        with pytest.raises(ValueError, match="RowFlags"):
            codec_for(FORMAT_V1, features).encode((b"k", 1, 1, None, None))


def test_expire_ts_needs_time_to_live():
    for features in [(F.RowFlags,), (F.RowFlags, F.Timestamp, F.Seq)]:
        with pytest.raises(ValueError, match="TimeToLive"):
            codec_for(FORMAT_V1, features).encode((b"k", 1, 1, 5, b"v"))


def test_expire_ts_needs_row_flags_too():
    """Without RowFlags there is no bit 1, so a reader would ignore the expire_ts: refuse to write it."""
    with pytest.raises(ValueError, match="RowFlags"):
        codec_for(FORMAT_V1, (F.Timestamp, F.TimeToLive)).encode((b"k", 1, 1, 5, b"v"))


def test_v0_cannot_store_expire_ts():
    with pytest.raises(ValueError, match="expire_ts"):
        codec_for(FORMAT_V0).encode((b"k", 1, 1, 5, b"v"))


@pytest.mark.parametrize("bit", [0x04, 0x08, 0x10, 0x20, 0x40, 0x80])
def test_unknown_flag_bits_are_corruption(bit):
    codec = codec_for(FORMAT_V1, (F.RowFlags, F.TimeToLive))
    encoded = h("0001", "6b", f"{bit:02x}", "0000000000000000", "00000000")
    with pytest.raises(CorruptionError, match="unknown row flag bits") as ei:
        codec.decode_from(encoded, 0, "some.sst")
    assert ei.value.path == "some.sst" and ei.value.offset == 0


def test_unknown_flag_bits_report_the_row_offset():
    codec = codec_for(FORMAT_V1, (F.RowFlags,))
    good = codec.encode((b"k", None, None, None, b"v"))
    bad = h("0001", "6b", "80", "00000000")
    with pytest.raises(CorruptionError) as ei:
        codec.decode_from(good + bad, len(good), "f")
    assert ei.value.offset == len(good)


def test_expire_flag_without_time_to_live_feature_is_corruption():
    """Bit 1 claims an expire_ts the layout has no slot for: an error, not a row that never expires."""
    codec = codec_for(FORMAT_V1, (F.RowFlags, F.Timestamp))
    encoded = h("0001", "6b", "02", TS_HEX, "00000000")
    with pytest.raises(CorruptionError, match="expire_ts"):
        codec.decode(encoded)


def test_tombstone_with_value_bytes_is_corruption():
    codec = codec_for(FORMAT_V1, (F.RowFlags,))
    with pytest.raises(CorruptionError, match="tombstone"):
        codec.decode(h("0001", "6b", "01", "00000001", "76"))


@pytest.mark.parametrize("version", [2, 3, 255, -1])
def test_unknown_format_version(version):
    with pytest.raises(FormatVersionError, match=f"version {version}"):
        codec_for(version, ())


@pytest.mark.parametrize("feature", [4, 7, 255, -1])
def test_unknown_row_feature(feature):
    with pytest.raises(FormatVersionError, match=f"unknown row feature {feature}"):
        codec_for(FORMAT_V1, (F.RowFlags, feature))


@pytest.mark.parametrize("version, features, encoded, fields", GOLDEN)
def test_every_truncation_is_corruption(version, features, encoded, fields):
    codec = codec_for(version, features)
    for cut in range(len(encoded)):
        with pytest.raises(CorruptionError):
            codec.decode(encoded[:cut])


@pytest.mark.parametrize("version, features, encoded, fields", GOLDEN)
def test_trailing_bytes_are_corruption(version, features, encoded, fields):
    with pytest.raises(CorruptionError, match="trailing"):
        codec_for(version, features).decode(encoded + b"\x00")


# -- decode_block: the block decoder (with fast paths for the engine's layouts) must equal decode_from --


def decode_one_by_one(codec, buf: bytes, default_seq: int | None) -> list[tuple] | str:
    rows = []
    pos = 0
    try:
        while pos < len(buf):
            row, pos = codec.decode_from(buf, pos, "f", default_seq)
            rows.append(row)
    except CorruptionError:
        return "corrupt"
    return rows


def decode_as_block(codec, buf: bytes, default_seq: int | None) -> list[tuple] | str:
    try:
        return codec.decode_block(buf, "f", default_seq)
    except CorruptionError:
        return "corrupt"


@pytest.mark.parametrize("version, features", LAYOUTS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_decode_block_matches_decode_from(version, features, data):
    codec = codec_for(version, features)
    pairs = data.draw(st.lists(rows_for(version, features), min_size=1, max_size=6))
    buf = b"".join(codec.encode(r) for r, _ in pairs)
    assert codec.decode_block(buf, "f", 77) == decode_one_by_one(codec, buf, 77) != "corrupt"
    # damaged: one byte changed, or the end cut off; both decoders must agree (rows or corruption)
    at = data.draw(st.integers(0, len(buf) - 1))
    bad = buf[:at] + bytes([data.draw(st.integers(0, 255))]) + buf[at + 1 :]
    assert decode_as_block(codec, bad, 77) == decode_one_by_one(codec, bad, 77)
    cut = buf[: data.draw(st.integers(0, len(buf) - 1))]
    assert decode_as_block(codec, cut, 77) == decode_one_by_one(codec, cut, 77)


@pytest.mark.parametrize(
    "features",
    [(F.RowFlags, F.Timestamp, F.Seq), (F.RowFlags, F.Timestamp, F.TimeToLive, F.Seq)],
)
@pytest.mark.parametrize("flags", [0x02, 0x03, 0x04, 0x80, 0xFF])
def test_decode_block_rejects_the_flags_decode_from_rejects(features, flags):
    codec = codec_for(FORMAT_V1, features)
    good = codec.encode((b"a", 1, 2, None, b""))
    bad = bytearray(codec.encode((b"k", 1, 2, None, b"")))
    bad[3] = flags  # u16 key_len, 1-byte key, then the flags byte
    expect = decode_one_by_one(codec, good + bytes(bad), None)
    assert decode_as_block(codec, good + bytes(bad), None) == expect
    if flags & ~3 or F.TimeToLive not in features:
        assert expect == "corrupt"

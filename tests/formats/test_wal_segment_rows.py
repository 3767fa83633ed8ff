"""`formats.wal.segment_rows` (the flush worker's decode) agrees with the generic `decode_segment`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.errors import CorruptionError
from formats.wal import decode_segment, encode_put, encode_record, segment_rows

keys = st.binary(min_size=1, max_size=40)
values = st.binary(max_size=300)
expiry = st.one_of(st.none(), st.integers(-(1 << 63), (1 << 63) - 1))
op = st.tuples(keys, expiry, st.one_of(st.none(), values))  # value None = delete
commit = st.one_of(
    st.tuples(st.just("put"), keys, expiry, values),
    st.tuples(st.just("batch"), st.lists(op, min_size=1, max_size=4)),
)


def encode(commits: list) -> bytes:
    out = []
    for seq, c in enumerate(commits, 1):
        ts = 1_700_000_000_000 + seq
        if c[0] == "put":
            out.append(encode_put(seq, ts, c[1], c[2], c[3]))
        else:
            out.append(encode_record(seq, ts, c[1]))
    return b"".join(out)


def generic(buf: bytes) -> list[tuple]:
    records, _torn = decode_segment(buf, "seg")
    return [row for r in records for row in r.rows]


@settings(max_examples=100, deadline=None)
@given(st.lists(commit, max_size=30), st.integers(0, 40))
def test_segment_rows_equals_the_generic_decoder(commits, cut):
    buf = encode(commits)
    assert segment_rows(buf, "seg") == generic(buf)
    torn = buf[: max(0, len(buf) - cut)]  # a torn tail is dropped by both
    assert segment_rows(torn, "seg") == generic(torn)


def test_put_rows_are_the_memtable_tuples():
    buf = encode_put(7, 100, b"k", None, b"v") + encode_put(8, 101, b"k", 5_000, b"") + encode_record(
        9, 102, [(b"d", None, None)]
    )
    assert segment_rows(buf) == [(b"k", 7, 100, None, b"v"), (b"k", 8, 101, 5_000, b""), (b"d", 9, 102, None, None)]


def test_damage_is_reported_as_the_generic_decoder_does():
    buf = bytearray(encode_put(1, 1, b"a", None, b"x" * 10) + encode_put(2, 2, b"b", None, b"y" * 10))
    buf[20] ^= 0xFF  # inside the first record's payload: its checksum fails with a record after it
    with pytest.raises(CorruptionError):
        segment_rows(bytes(buf), "seg")


uniform_put = st.tuples(st.binary(min_size=6, max_size=6), expiry)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(uniform_put, min_size=64, max_size=120),
    st.integers(0, 12),
    st.sampled_from([0, 1, 37]),
    st.one_of(st.none(), st.integers(0, 10_000)),
)
def test_a_segment_of_same_size_puts_decodes_as_one_array(puts, value_len, cut, flip):
    """A segment of puts of one key length and one value length (one record size) is decoded as one
    numpy record array (`_uniform_put_rows`), with the same rows as the generic decoder; a torn tail or a
    damaged byte sends it back to the loop, which drops or reports them as before."""
    from formats.wal import _uniform_put_rows

    buf = b"".join(
        encode_put(seq, 1_700_000_000_000 + seq, key, exp, bytes([seq % 251]) * value_len)
        for seq, (key, exp) in enumerate(puts, 1)
    )
    fast = _uniform_put_rows(buf)
    assert fast is not None and fast == generic(buf) == segment_rows(buf, "seg")
    torn = buf[: len(buf) - cut]
    assert segment_rows(torn, "seg") == generic(torn)
    if flip is not None:
        bad = bytearray(buf)
        bad[flip % len(bad)] ^= 0x01
        assert _uniform_put_rows(bytes(bad)) is None  # any damaged bit: a length, a flag or a checksum fails
        try:
            expected = generic(bytes(bad))
        except CorruptionError:
            with pytest.raises(CorruptionError):
                segment_rows(bytes(bad), "seg")
        else:
            assert segment_rows(bytes(bad), "seg") == expected

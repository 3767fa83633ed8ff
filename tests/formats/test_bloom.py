"""Bloom filter (formats/bloom.py): no false negatives, ~1% false positives at 10 bits/key, the layout."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from formats.bloom import HEADER, BloomFilter, build


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=1, max_size=30), max_size=300),
    bits_per_key=st.integers(1, 20),
)
def test_no_false_negatives(keys, bits_per_key):
    f = BloomFilter(build(keys, bits_per_key))
    for k in keys:
        assert f.may_contain(k)


def test_false_positive_rate_at_10_bits_per_key():
    present = [b"present-%d" % i for i in range(10_000)]
    f = BloomFilter(build(present, 10))
    absent = [b"absent-%d" % i for i in range(20_000)]
    fp = sum(f.may_contain(k) for k in absent) / len(absent)
    # theory: (1 - e^(-7/10))^7 ~ 0.82%
    assert fp < 0.03
    assert fp > 0.001  # a filter that says "no" to everything would also pass the bound above


def test_fewer_bits_more_false_positives():
    present = [b"p%d" % i for i in range(2_000)]
    absent = [b"a%d" % i for i in range(5_000)]
    rates = []
    for bpk in (2, 6, 12):
        f = BloomFilter(build(present, bpk))
        rates.append(sum(f.may_contain(k) for k in absent))
    assert rates[0] > rates[1] > rates[2]


def test_header_layout():
    payload = build([b"a", b"b", b"c"], 10)
    probes, nbits = HEADER.unpack_from(payload, 0)
    assert HEADER.size == 5
    assert probes == 7  # round(10 * ln 2)
    assert nbits == 64  # 30 bits, raised to the minimum of 64
    assert len(payload) == 5 + 8
    payload = build([b"%d" % i for i in range(100)], 10)
    assert struct.unpack(">BI", payload[:5]) == (7, 1000)
    assert len(payload) == 5 + 125
    assert build([b"x"], 1)[0] == 1  # at least one probe
    assert build([b"x"], 100)[0] == 30  # capped


def test_bits_follow_the_documented_probe_formula():
    """Re-derive the bit array from the module docstring's formula: this pins the on-disk format."""
    keys = [b"alpha", b"beta", b"gamma", b"delta"]
    payload = build(keys, 10)
    k, nbits = HEADER.unpack_from(payload, 0)
    want = bytearray((nbits + 7) // 8)
    for key in keys:
        hsh = xxhash.xxh3_64_intdigest(key)
        h1, h2 = hsh & 0xFFFFFFFF, hsh >> 32
        for i in range(k):
            b = (h1 + i * h2) % nbits
            want[b >> 3] |= 1 << (b & 7)
    assert payload[5:] == bytes(want)


def test_empty_filter_contains_nothing():
    f = BloomFilter(build([], 10))
    assert not any(f.may_contain(b"%d" % i) for i in range(100))


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x07\x00\x00",
        struct.pack(">BI", 0, 64) + bytes(8),  # no probes
        struct.pack(">BI", 7, 0),  # no bits
        struct.pack(">BI", 7, 64) + bytes(7),  # bits shorter than num_bits
        struct.pack(">BI", 7, 64) + bytes(9),  # longer
    ],
)
def test_malformed_payload_is_rejected(payload):
    with pytest.raises(ValueError):
        BloomFilter(payload)


def test_a_local_readers_filter_is_read_where_the_file_is_mapped(tmp_path):
    """An open local SST keeps no copy of its filter: the bits are read through the file's mapping
    (page cache, like the data blocks), so what an open reader holds is less than the filter's size, and
    the filter still answers for every key; close unmaps the file (no view left behind)."""
    from formats.sst import SstReader
    from tests.formats.test_sst import write

    rows = [(b"k%08d" % i, i + 1, 7, None, b"") for i in range(50_000)]
    write(tmp_path / "a.sst", rows)
    SstReader(tmp_path / "a.sst").close()  # imports, and the search slices shared by its shape
    tracemalloc.start()
    try:
        r = SstReader(tmp_path / "a.sst")
        held = sum(s.size for s in tracemalloc.take_snapshot().statistics("filename"))
    finally:
        tracemalloc.stop()
    with r:
        assert r.info.filter_size > 60_000
        assert held < r.info.filter_size, (held, r.info.filter_size)  # a copy alone would be this much
        assert all(r.may_contain(row[0]) for row in rows)
        absent = sum(r.may_contain(b"x%08d" % i) for i in range(10_000))
        assert absent < 300  # ~1% at 10 bits a key
        assert r.get(rows[12_345][0]) == rows[12_345]
    with pytest.raises(ValueError):
        r.may_contain(rows[0][0])  # closed: the view is released with the mapping


def test_a_filter_with_a_bad_header_fails_the_open_and_leaves_nothing_mapped(tmp_path):
    """A filter block whose checksum holds but whose header disagrees with its size is named as a bad
    filter block (CorruptionError), and the failed open releases its view of the mapping: the
    CorruptionError is what the caller sees, not a BufferError from unmapping a file still viewed."""
    from formats.errors import CorruptionError
    from formats.sst import SstReader
    from formats.sst_layout import TRAILER
    from tests.formats.test_sst import write

    path = tmp_path / "a.sst"
    info = write(path, [(b"k%05d" % i, i + 1, 7, None, b"v") for i in range(2000)])
    data = bytearray(path.read_bytes())
    at, size = info.filter_offset, info.filter_size
    stored_end = at + size - TRAILER.size
    k, nbits = HEADER.unpack_from(data, at)
    HEADER.pack_into(data, at, k, nbits + 64)  # eight bytes more than the bits stored
    code = data[stored_end]
    TRAILER.pack_into(data, stored_end, code, xxhash.xxh3_64_intdigest(bytes(data[at : stored_end + 1])))
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match="bad filter block"):
        SstReader(path)

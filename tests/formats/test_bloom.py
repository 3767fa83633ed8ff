"""Bloom filter (formats/bloom.py): no false negatives, ~1% false positives at 10 bits/key, the layout."""

from __future__ import annotations

import struct

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

"""`formats.xxh3_numpy.key_hashes` gives, for a column of keys of one width, exactly the hashes
`xxhash.xxh3_64_intdigest` gives key by key (the bloom filters of the SST writer's record path depend on
it): every width of XXH3's four short-input paths, keys of random bytes and of all-NUL / all-0xFF, and a
strided record field."""

from __future__ import annotations

import numpy as np
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from formats import bloom
from formats.row_array import array_dtype
from formats.xxh3_numpy import MAX_WIDTH, key_hashes


@st.composite
def key_columns(draw) -> list[bytes]:
    width = draw(st.sampled_from([1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 96, 97, 127, 128]))
    edge = st.sampled_from([b"\x00" * width, b"\xff" * width])
    return draw(st.lists(st.one_of(st.binary(min_size=width, max_size=width), edge), min_size=1, max_size=40))


@settings(max_examples=150, deadline=None)
@given(keys=key_columns())
def test_key_hashes_are_xxh3_64(keys):
    width = len(keys[0])
    got = key_hashes(np.frombuffer(b"".join(keys), f"V{width}"))
    assert got.dtype == np.uint64
    assert got.tolist() == [xxhash.xxh3_64_intdigest(k) for k in keys]


def test_every_width_up_to_the_limit():
    rng = np.random.default_rng(7)
    for width in range(1, MAX_WIDTH + 1):
        raw = rng.integers(0, 256, (25, width), dtype=np.uint8).tobytes()
        keys = [raw[i : i + width] for i in range(0, len(raw), width)]
        assert key_hashes(np.frombuffer(raw, f"V{width}")).tolist() == list(map(xxhash.xxh3_64_intdigest, keys))


def test_a_record_field_and_the_bloom_filter_of_its_hashes():
    """Keys read from records (a strided field) hash as the bytes do; `bloom.build_hashed` of the hashes
    is `bloom.build` of the keys, below and above the size where `build` turns to numpy."""
    for n in (3, 2000):
        a = np.zeros(n, array_dtype(12, 5, True))
        keys = [b"key-%08d" % (i * 7) for i in range(n)]
        a["key"] = np.frombuffer(b"".join(keys), "V12")
        assert bloom.build_hashed(key_hashes(a["key"]), 10) == bloom.build(keys, 10)


def test_widths_outside_the_short_paths_are_left_to_the_caller():
    assert key_hashes(np.zeros(3, f"V{MAX_WIDTH + 1}")) is None

"""The reader's fast paths give exactly what the generic paths give.

The bloom probe walk, the one-unpack-per-row block decode, the single-row point-read decode, the
cached-block key index and the lazily trimmed block iteration are shortcuts: each is checked here
against the plain rule it replaces (the documented probe rule, `RowCodec.decode_from` row by row,
a model of the rows)."""

from __future__ import annotations

import os
import tempfile

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats.bloom import HEADER, BloomFilter, build
from formats.errors import CorruptionError
from formats.row import FORMAT_V0, FORMAT_V1, RowFeature, codec_for
from formats.sst import SstReader
from formats.sst_index import parse_fixed, parse_general
from tests.formats.test_sst import DictCache, expected_get, read_back_expected, sst_rows, write

F = RowFeature
FTS = (F.RowFlags, F.Timestamp, F.Seq)
FTTS = (F.RowFlags, F.Timestamp, F.TimeToLive, F.Seq)


def _reference_may_contain(payload: bytes, key: bytes) -> bool:
    """The probe rule exactly as formats/bloom.py's docstring states it."""
    k, nbits = HEADER.unpack_from(payload, 0)
    bits = payload[HEADER.size :]
    h = xxhash.xxh3_64_intdigest(key)
    h1, h2 = h & 0xFFFFFFFF, h >> 32
    return all(bits[b >> 3] & (1 << (b & 7)) for b in ((h1 + i * h2) % nbits for i in range(k)))


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=200),
    probes=st.lists(st.binary(min_size=1, max_size=20), max_size=200),
    bits_per_key=st.integers(1, 20),
)
def test_may_contain_answers_as_the_documented_probe_rule(keys, probes, bits_per_key):
    payload = build(keys, bits_per_key)
    f = BloomFilter(payload)
    for k in keys + probes:
        assert f.may_contain(k) == _reference_may_contain(payload, k)


def _rows_for(features, draw) -> list[tuple]:
    """Key-ordered rows for one layout, keys of mixed lengths (the decoder guesses the first row's)."""
    ttl = F.TimeToLive in features
    keys = sorted(draw(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=30, unique=True)))
    rows = []
    seq = 10_000
    for key in keys:
        for _ in range(draw(st.integers(1, 3))):
            seq -= 1
            tomb = draw(st.integers(0, 4)) == 0
            exp = draw(st.integers(-(2**63), 2**63 - 1)) if ttl and draw(st.booleans()) else None
            value = None if tomb else draw(st.binary(max_size=30))
            rows.append((key, seq, draw(st.integers(-(2**63), 2**63 - 1)), exp, value))
    return rows


@settings(max_examples=80, deadline=None)
@given(data=st.data(), with_ttl=st.booleans())
def test_block_decode_and_point_decode_match_the_row_by_row_decoder(data, with_ttl):
    features = FTTS if with_ttl else FTS
    codec = codec_for(FORMAT_V1, features)
    rows = _rows_for(features, data.draw)
    parts: list = []
    starts = []
    size = 0
    for r in rows:
        starts.append(size)
        size += codec.encode_parts(r, parts)
    buf = b"".join(parts)
    generic = []
    pos = 0
    while pos < len(buf):
        row, pos = codec.decode_from(buf, pos)
        generic.append(row)
    assert generic == rows
    assert codec.decode_block(buf) == rows
    for o, r in zip(starts, rows, strict=True):
        assert codec.decode_version(buf, o + 2 + len(r[0]), r[0]) == r
    # a block cut short is refused the same way, never read past its end
    if len(buf) > 3:
        cut = buf[: data.draw(st.integers(1, len(buf) - 1))]
        try:
            got = codec.decode_block(cut)
        except CorruptionError:
            pass
        else:  # only a cut on a row boundary decodes, to the rows before it
            assert got == rows[: len(got)] and len(got) < len(rows)


def test_block_decode_refuses_bad_flags_whatever_the_key_length():
    codec = codec_for(FORMAT_V1, FTS)
    for first in (b"a", b"abc", b"a-longer-key"):  # the bad row's key shorter, equal, longer than the first's
        parts: list = []
        codec.encode_parts((first, 3, 1, None, b"v"), parts)
        at = sum(map(len, parts))
        codec.encode_parts((b"abd", 2, 1, None, b"w"), parts)
        buf = bytearray(b"".join(parts))
        buf[at + 2 + 3] = 4  # the second row's flags byte: an unknown bit
        with pytest.raises(CorruptionError, match="flags"):
            codec.decode_block(bytes(buf))


class EvictingCache(DictCache):
    """Keeps only the last `cap` blocks put (so a reader's weak references die as blocks leave)."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def put(self, key, value, charge):
        super().put(key, value, charge)
        while len(self.d) > self.cap:
            self.d.pop(next(iter(self.d)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), version=st.sampled_from([FORMAT_V0, FORMAT_V1]))
def test_point_reads_through_every_cache_state_match_the_model(data, version):
    rows = data.draw(sst_rows(version))
    want = read_back_expected(version, rows)
    keys = sorted({r[0] for r in rows})
    probes = keys + [k + b"\x00" for k in keys] + [b"\x00", b"\xff" * 12]
    seqs = [None] + sorted({r[1] for r in want})[:: max(1, len(want) // 5)] + [0]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.sst")
        write(path, rows, format_version=version, block_bytes=64)
        for cache in (None, DictCache(), EvictingCache(2)):
            with SstReader(path, cache=cache) as r:
                for _ in range(3):  # cold, then a cached block, then its key index
                    for k in probes:
                        for s in seqs:
                            assert r.get(k, s) == expected_get(want, k, s), (k, s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_range_iteration_trims_only_at_the_bounds(data):
    rows = data.draw(sst_rows(FORMAT_V1))
    keys = sorted({r[0] for r in rows})
    cands = [None, b"", *keys, *(k + b"\x00" for k in keys)]
    start = data.draw(st.sampled_from(cands))
    end = data.draw(st.sampled_from(cands))
    start = None if start == b"" else start
    end = None if end == b"" else end
    inside = [r for r in rows if (start is None or r[0] >= start) and (end is None or r[0] < end)]
    by_key: dict[bytes, list] = {}
    for r in inside:
        by_key.setdefault(r[0], []).append(r)
    backward = [r for k in sorted(by_key, reverse=True) for r in by_key[k]]  # versions newest first
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.sst")
        write(path, rows, block_bytes=64)
        with SstReader(path, cache=DictCache()) as r:
            for _ in range(2):
                assert list(r.iter(start, end)) == inside
                assert list(r.iter(start, end, reverse=True)) == backward
                assert [row for block in r.iter_blocks(start, end) for row in block] == inside
                assert list(r) == rows


def test_a_dropped_block_is_read_again_not_served_from_a_dead_reference(tmp_path):
    rows = [(b"k%03d" % i, 100 - i, 5, None, b"v%d" % i) for i in range(60)]
    write(tmp_path / "t.sst", rows, block_bytes=64)
    cache = DictCache()
    with SstReader(tmp_path / "t.sst", cache=cache) as r:
        assert [r.get(row[0]) for row in rows] == rows
        puts = cache.puts
        cache.d.clear()  # every block leaves the cache: the reader holds no copy of its own
        assert [r.get(row[0]) for row in rows] == rows
        assert cache.puts == 2 * puts


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), width=st.one_of(st.none(), st.integers(1, 12)))
def test_the_index_of_fixed_size_keys_parses_as_the_general_loop_does(data, width):
    """`formats.sst_index.parse_fixed` (one struct.iter_unpack over entries of one shape) gives the block
    handles the entry-by-entry loop gives, and declines (None) any index of another shape."""
    if width is None:
        rows = data.draw(sst_rows(FORMAT_V1))  # keys of 1 to 10 bytes: mostly several lengths
    else:
        keys = data.draw(st.lists(st.binary(min_size=width, max_size=width), min_size=1, max_size=60, unique=True))
        rows = [(k, i + 1, 1000, None, b"v" * (i % 7)) for i, k in enumerate(sorted(keys))]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.sst")
        write(path, rows, block_bytes=data.draw(st.sampled_from([64, 128, 4096])))
        with SstReader(path) as r:
            idx = r._block_payload(r.info.index_offset, r.info.index_size)
            count = int.from_bytes(idx[:4], "big")
            fast = parse_fixed(idx, count, r.info.data_size)
            general = parse_general(idx, count, r.info.data_size)  # the entry-by-entry loop alone
            assert r.blocks == general  # what the open parsed, by whichever path
            firsts = {len(h.first_key) for h in general}
            lasts = {len(h.last_key) for h in general}
            if len(firsts) == 1 and len(lasts) == 1:
                assert fast == general
            else:
                assert fast is None

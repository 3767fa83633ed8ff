"""SST writer/reader (formats/sst.py): round-trips through every read path, SsTableInfo, layout, errors."""

from __future__ import annotations

import dataclasses
import os
import struct
import tempfile
import zlib

import lz4.block
import msgpack
import pytest
import xxhash
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats import bloom
from formats.errors import CorruptionError, FormatVersionError
from formats.row import FORMAT_V0, FORMAT_V1, RowFeature, codec_for
from formats.sst import FOOTER, MAGIC, SsTableInfo, SstReader, SstWriter, write_sst

F = RowFeature
TS0 = 1_700_000_000_000


def write(path, rows, **kw) -> SsTableInfo:
    kw.setdefault("sync", False)
    return write_sst(path, rows, **kw)


def newest_first_groups(rows: list[tuple]) -> list[list[tuple]]:
    groups: list[list[tuple]] = []
    for r in rows:
        if groups and groups[-1][0][0] == r[0]:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups


def expected_get(rows: list[tuple], key: bytes, max_seq: int | None = None) -> tuple | None:
    for r in rows:
        if r[0] == key and (max_seq is None or r[1] <= max_seq):
            return r
    return None


class DictCache:
    """The smallest BlockCache: remembers everything, counts puts and hits."""

    def __init__(self):
        self.d, self.puts, self.hits = {}, 0, 0

    def get(self, key):
        v = self.d.get(key)
        self.hits += v is not None
        return v

    def put(self, key, value, charge):
        assert charge > 0
        self.puts += 1
        self.d[key] = value


# -- hypothesis: random SSTs read back through every path ----------------------------------------------


@st.composite
def sst_rows(draw, version: int) -> list[tuple]:
    """Sorted rows: several versions per key with descending seqs, tombstones, TTL rows (v1 only)."""
    keys = sorted(draw(st.lists(st.binary(min_size=1, max_size=10), min_size=1, max_size=40, unique=True)))
    with_ts = version == FORMAT_V1 and draw(st.booleans())
    n_versions = draw(st.lists(st.integers(1, 3), min_size=len(keys), max_size=len(keys)))
    seqs = sorted(
        draw(
            st.lists(
                st.integers(0, 2**64 - 1), min_size=sum(n_versions), max_size=sum(n_versions), unique=True
            )
        )
    )
    rows = []
    for key, n in zip(keys, n_versions, strict=True):
        for _ in range(n):
            seq = seqs.pop()
            tomb = draw(st.integers(0, 4)) == 0
            value = None if tomb else draw(st.binary(max_size=40))
            ts = draw(st.integers(-(2**63), 2**63 - 1)) if with_ts else None
            exp = None
            if version == FORMAT_V1 and not tomb and draw(st.booleans()):
                exp = draw(st.integers(-(2**63), 2**63 - 1))
            rows.append((key, seq, ts, exp, value))
        # newest first within the key
        rows[len(rows) - n :] = sorted(rows[len(rows) - n :], key=lambda r: -r[1])
    return rows


def read_back_expected(version: int, rows: list[tuple]) -> list[tuple]:
    if version == FORMAT_V1:
        return rows
    # v0 rows carry no seq/ts/expire_ts: the reader reports the file's max_seq for every row
    top = max(r[1] for r in rows)
    return [(r[0], top, None, None, r[4]) for r in rows]


@pytest.mark.parametrize("compression", [None, "zlib", "zstd", "lz4"])
@pytest.mark.parametrize("version", [FORMAT_V0, FORMAT_V1])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_sst_reads_back_through_every_path(version, compression, data):
    rows = data.draw(sst_rows(version))
    block_bytes = data.draw(st.integers(64, 256))
    expected = read_back_expected(version, rows)
    keys = [g[0][0] for g in newest_first_groups(expected)]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.sst")
        info = write(path, rows, format_version=version, block_bytes=block_bytes, compression=compression)
        with SstReader(path) as r:
            assert r.info == info
            # whole
            assert list(r) == expected
            assert list(r.iter()) == expected
            # reverse: key descending, each key's versions still newest first
            rev = [row for g in reversed(newest_first_groups(expected)) for row in g]
            assert list(r.iter(reverse=True)) == rev
            # block boundaries are key boundaries and match the index
            for i, b in enumerate(r.blocks):
                br = r.block_rows(i)
                assert (br[0][0], br[-1][0]) == (b.first_key, b.last_key)
                if i:
                    assert r.blocks[i - 1].last_key < b.first_key
            # point reads, with and without max_seq
            for k in keys:
                assert r.get(k) == expected_get(expected, k)
                assert r.may_contain(k)
            seqs = [row[1] for row in expected]
            probes = data.draw(st.lists(st.sampled_from(seqs) | st.integers(0, 2**64 - 1), max_size=6))
            for s in probes + [min(seqs) - 1 if min(seqs) else 0]:
                for k in keys:
                    assert r.get(k, max_seq=s) == expected_get(expected, k, s)
            for k in data.draw(st.lists(st.binary(min_size=1, max_size=10), max_size=10)):
                assert r.get(k) == expected_get(expected, k)
            # ranges
            bounds = st.none() | st.sampled_from(keys) | st.binary(min_size=1, max_size=10)
            for _ in range(3):
                start, end = data.draw(bounds), data.draw(bounds)
                want = [
                    row
                    for row in expected
                    if (start is None or row[0] >= start) and (end is None or row[0] < end)
                ]
                assert list(r.iter(start, end)) == want
                want_rev = [row for g in reversed(newest_first_groups(want)) for row in g]
                assert list(r.iter(start, end, reverse=True)) == want_rev
            r.verify()
        # point reads through a block cache: a block read again is searched differently
        with SstReader(path, cache=DictCache()) as r:
            for _ in range(2):
                for k in keys:
                    assert r.get(k) == expected_get(expected, k)
                    for s in probes:
                        assert r.get(k, max_seq=s) == expected_get(expected, k, s)
                    assert r.get(k + b"\x00") == expected_get(expected, k + b"\x00")


def test_small_blocks_give_many_blocks_and_ranges_cross_them(tmp_path):
    rows = [(b"k%04d" % i, 100 - j, TS0 + i, None, b"v" * 30) for i in range(60) for j in range(2)]
    info = write(tmp_path / "t.sst", rows, block_bytes=64)
    assert info.num_blocks >= 30
    with SstReader(tmp_path / "t.sst") as r:
        assert len(r.blocks) == info.num_blocks
        assert list(r.iter(b"k0010", b"k0050")) == [x for x in rows if b"k0010" <= x[0] < b"k0050"]
        assert list(r.iter(b"k0010\x00", b"k0011")) == []
        assert list(r.iter(b"k0050", b"k0010")) == []
        assert list(r.iter(b"z")) == [] and list(r.iter(end=b"a")) == []
        assert r.get(b"k0005") == rows[10]
        assert r.get(b"k0005", max_seq=99) == rows[11]
        assert r.get(b"k0005", max_seq=98) is None
        assert r.get(b"k0005\x00") is None and r.get(b"a") is None and r.get(b"z") is None


def test_all_versions_of_a_key_stay_in_one_block(tmp_path):
    rows = [(b"a", 10 - j, TS0, None, b"x" * 50) for j in range(10)] + [(b"b", 1, TS0, None, b"y")]
    info = write(tmp_path / "t.sst", rows, block_bytes=64)
    assert info.num_blocks == 2
    with SstReader(tmp_path / "t.sst") as r:
        assert r.blocks[0].num_rows == 10 and r.blocks[0].last_key == b"a"
        assert r.get(b"a", max_seq=3) == rows[7]


def test_tombstones_and_ttl_rows_read_back(tmp_path):
    rows = [
        (b"a", 5, TS0, TS0 + 1000, b"expiring"),
        (b"a", 4, TS0 - 1, None, None),
        (b"b", 3, TS0, None, b""),
        (b"c", 2, TS0, None, None),
    ]
    write(tmp_path / "t.sst", rows)
    with SstReader(tmp_path / "t.sst") as r:
        assert list(r) == rows
        assert r.get(b"c") == (b"c", 2, TS0, None, None)
        assert r.get(b"b")[4] == b""


def test_max_length_key(tmp_path):
    big = b"\xff" * 65535
    rows = [(b"a", 1, 0, None, b"x"), (big, 3, 0, None, b"y"), (big, 2, 0, None, None)]
    info = write(tmp_path / "t.sst", rows, block_bytes=64)
    assert info.last_key == big
    with SstReader(tmp_path / "t.sst") as r:
        assert list(r) == rows
        assert r.get(big) == rows[1]
        r.verify()


# -- SsTableInfo ---------------------------------------------------------------------------------------


def test_info_fields_follow_the_data(tmp_path):
    rows = [
        (b"apple", 40, TS0 + 4, None, b"red"),
        (b"apple", 12, TS0 + 1, TS0 + 500, b"green"),
        (b"kiwi", 30, TS0 - 7, None, None),
        (b"plum", 25, TS0 + 9, TS0 + 90, b"p"),
        (b"plum", 11, TS0 + 2, None, None),
    ]
    path = tmp_path / "t.sst"
    info = write(path, rows, creation_timestamp=TS0 + 1234, block_bytes=64)
    assert info.format_version == 1
    assert info.row_features == (0, 1, 2, 3)
    assert info.creation_timestamp == TS0 + 1234
    assert (info.min_ts, info.max_ts) == (TS0 - 7, TS0 + 9)
    assert (info.min_seq, info.max_seq) == (11, 40)
    assert (info.first_key, info.last_key) == (b"apple", b"plum")
    assert (info.num_rows, info.num_tombstones, info.num_expiring) == (5, 2, 2)
    assert (info.min_expire_ts, info.max_expire_ts) == (TS0 + 90, TS0 + 500)
    assert info.key_bytes == 5 + 5 + 4 + 4 + 4
    assert info.value_bytes == 3 + 5 + 1
    assert info.compression is None
    assert info.file_size == os.path.getsize(path)
    assert info.has_ttl and info.has_timestamps
    with SstReader(path) as r:
        assert r.info == info
        assert info.num_blocks == len(r.blocks) > 1
        assert info.index_offset == info.data_size == sum(b.size for b in r.blocks)
        assert info.filter_offset == info.index_offset + info.index_size
        r.verify()


def test_no_ttl_feature_without_expiring_rows(tmp_path):
    info = write(tmp_path / "t.sst", [(b"a", 2, TS0, None, b"v"), (b"b", 1, TS0, None, None)])
    assert info.row_features == (F.RowFlags, F.Timestamp, F.Seq)
    assert not info.has_ttl
    assert (info.num_expiring, info.min_expire_ts, info.max_expire_ts) == (0, None, None)


def test_no_timestamp_feature_without_timestamps(tmp_path):
    info = write(tmp_path / "t.sst", [(b"a", 2, None, 7, b"v"), (b"b", 1, None, None, b"w")])
    assert info.row_features == (F.RowFlags, F.TimeToLive, F.Seq)
    assert not info.has_timestamps and (info.min_ts, info.max_ts) == (None, None)
    with SstReader(tmp_path / "t.sst") as r:
        assert list(r) == [(b"a", 2, None, 7, b"v"), (b"b", 1, None, None, b"w")]


def test_v0_info(tmp_path):
    rows = [(b"a", 9, None, None, b"v"), (b"a", 4, None, None, None), (b"b", 7, None, None, b"")]
    info = write(tmp_path / "t.sst", rows, format_version=FORMAT_V0, creation_timestamp=5)
    assert info.format_version == 0 and info.row_features == ()
    assert (info.min_seq, info.max_seq, info.num_tombstones, info.num_expiring) == (4, 9, 1, 0)
    assert info.creation_timestamp == 5
    with SstReader(tmp_path / "t.sst") as r:
        assert list(r) == [
            (b"a", 9, None, None, b"v"),
            (b"a", 9, None, None, None),
            (b"b", 9, None, None, b""),
        ]
        r.verify()


def test_info_dict_round_trip(tmp_path):
    info = write(tmp_path / "t.sst", [(b"a", 1, 2, 3, b"v")], compression="zlib")
    assert SsTableInfo.from_dict(info.to_dict()) == info
    assert SsTableInfo.from_dict(msgpack.unpackb(msgpack.packb(info.to_dict()), raw=False)) == info
    d = info.to_dict()
    del d["max_seq"]
    with pytest.raises(ValueError, match="max_seq"):
        SsTableInfo.from_dict(d)


# -- layout: the bytes of a one-row SST, assembled by hand ---------------------------------------------


def test_one_row_sst_layout(tmp_path):
    path = tmp_path / "t.sst"
    row = (b"k", 7, TS0, None, b"v")
    info = write(path, [row], creation_timestamp=99)
    buf = path.read_bytes()
    encoded = codec_for(1, (F.RowFlags, F.Timestamp, F.Seq)).encode(row)
    payload = encoded + struct.pack(">II", 0, 1)  # offsets [0], count 1
    stored = payload + b"\x00"  # compression byte: none
    block = stored + struct.pack(">Q", xxhash.xxh3_64_intdigest(stored))
    assert buf[: len(block)] == block
    assert info.data_size == len(block)
    # index: count, then (offset, size, rows, first_key, last_key)
    idx_payload = struct.pack(">IQIIH", 1, 0, len(block), 1, 1) + b"k" + struct.pack(">H", 1) + b"k"
    idx = idx_payload + b"\x00" + struct.pack(">Q", xxhash.xxh3_64_intdigest(idx_payload + b"\x00"))
    assert buf[info.index_offset : info.index_offset + info.index_size] == idx
    # filter: the bloom payload in a block
    filt_payload = bloom.build([b"k"], 10)
    filt = filt_payload + b"\x00" + struct.pack(">Q", xxhash.xxh3_64_intdigest(filt_payload + b"\x00"))
    assert buf[info.filter_offset : info.filter_offset + info.filter_size] == filt
    # footer: meta_offset, meta_size, format_version, magic, xxh32 of the 24 bytes before it
    meta_offset, meta_size, version, magic, check = FOOTER.unpack_from(buf, len(buf) - 28)
    assert FOOTER.size == 28
    assert buf[-12:-4] == b"LSMSIMST" and magic == MAGIC
    assert version == 1 and check == xxhash.xxh32_intdigest(buf[-28:-4])
    assert meta_offset == info.filter_offset + info.filter_size
    assert meta_offset + meta_size == len(buf) - 28
    meta = buf[meta_offset : meta_offset + meta_size]
    assert meta[-9] == 0 and struct.unpack(">Q", meta[-8:])[0] == xxhash.xxh3_64_intdigest(meta[:-8])
    d = msgpack.unpackb(meta[:-9], raw=False)
    assert "file_size" not in d  # the reader knows the file size; the rest is SsTableInfo
    assert set(d) == {f.name for f in dataclasses.fields(SsTableInfo)} - {"file_size"}
    assert d["creation_timestamp"] == 99 and d["first_key"] == b"k"


@pytest.mark.parametrize(
    "compression, code, decompress",
    [
        ("zlib", 1, zlib.decompress),
        ("zstd", 2, zstandard.decompress),
        ("lz4", 3, lz4.block.decompress),  # the raw block format, its 4-byte size first
    ],
)
def test_compressed_blocks_are_marked_and_smaller(tmp_path, compression, code, decompress):
    rows = [(b"k%04d" % i, 1, TS0, None, b"a" * 200) for i in range(50)]
    plain = write(tmp_path / "p.sst", rows, block_bytes=1024)
    packed = write(tmp_path / "z.sst", rows, block_bytes=1024, compression=compression)
    assert packed.compression == compression and plain.compression is None
    assert packed.data_size < plain.data_size / 3
    raw_file = (tmp_path / "z.sst").read_bytes()
    with SstReader(tmp_path / "z.sst") as r:
        for h in r.blocks:  # every data block, whichever encoder cut it, is stored with the code
            raw = raw_file[h.offset : h.offset + h.size]
            assert raw[-9] == code
            # the codec's own library reads it: the stored bytes are that codec's standard format
            assert decompress(raw[:-9]).endswith(struct.pack(">I", h.num_rows))
        assert list(r) == rows
        r.verify()
        # index, filter and metadata blocks stay uncompressed: an older reader can open the file and
        # read its metadata (and so name the codec it lacks)
        for off, size in ((packed.index_offset, packed.index_size), (packed.filter_offset, packed.filter_size)):
            assert raw_file[off + size - 9] == 0


def test_block_cache_is_used(tmp_path):
    rows = [(b"k%02d" % i, 1, TS0, None, b"v" * 20) for i in range(20)]
    info = write(tmp_path / "t.sst", rows, block_bytes=64)
    cache = DictCache()
    with SstReader(tmp_path / "t.sst", cache=cache, cache_id=("sst", 1)) as r:
        assert list(r) == rows
        assert cache.puts == info.num_blocks and all(k[0] == ("sst", 1) for k in cache.d)
        assert list(r) == rows
        assert cache.puts == info.num_blocks and cache.hits == info.num_blocks
        # point reads through cached blocks (twice: a block read again may answer differently inside)
        for _ in range(2):
            for row in rows:
                assert r.get(row[0]) == row
                assert r.get(row[0], max_seq=0) is None
                assert r.get(row[0] + b"\x00") is None
        assert cache.puts == info.num_blocks
    with SstReader(tmp_path / "t.sst", cache=DictCache()) as r:  # gets before any scan
        for _ in range(2):
            assert [r.get(row[0]) for row in rows] == rows
            assert r.get(b"k05\x00") is None and r.get(b"k") is None


# -- writer errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows",
    [
        [(b"b", 1, 0, None, b""), (b"a", 2, 0, None, b"")],  # keys descending
        [(b"a", 1, 0, None, b""), (b"a", 2, 0, None, b"")],  # seqs ascending within a key
        [(b"a", 1, 0, None, b""), (b"a", 1, 0, None, b"")],  # same version twice
        [(b"a", None, 0, None, b""), (b"a", None, 0, None, b"")],  # no seqs to order versions by
        [(b"a", 5, 0, None, b""), (b"c", 5, 0, None, b""), (b"b", 5, 0, None, b"")],
    ],
)
def test_rows_out_of_order_raise(tmp_path, rows):
    w = SstWriter(tmp_path / "t.sst", sync=False)
    for r in rows[:-1]:
        w.add(r)
    with pytest.raises(ValueError, match="order"):
        w.add(rows[-1])
    with pytest.raises(ValueError, match="order"):
        write(tmp_path / "u.sst", rows)


@pytest.mark.parametrize(
    "key, exc, words",
    [
        (b"", ValueError, r"1\.\.65535"),
        (b"k" * 65536, ValueError, r"1\.\.65535"),
        ("k", TypeError, "key must be bytes"),
    ],
)
@pytest.mark.parametrize("position", ["first", "second"])
def test_bad_keys_raise_naming_the_limit(tmp_path, key, exc, words, position):
    w = SstWriter(tmp_path / "t.sst", sync=False)
    if position == "second":
        w.add((b"\x00", 9, 0, None, b"v"))
    with pytest.raises(exc, match=words):
        w.add((key, 1, 0, None, b"v"))


@pytest.mark.parametrize("value", ["v", 5, bytearray(b"v")])
def test_bad_values_raise(tmp_path, value):
    with pytest.raises(TypeError, match="bytes"):
        SstWriter(tmp_path / "t.sst").add((b"k", 1, 0, None, value))


def test_writer_argument_errors(tmp_path):
    p = tmp_path / "t.sst"
    with pytest.raises(ValueError, match="at least one row"):
        SstWriter(p).finish()
    with pytest.raises(ValueError, match="compression 'brotli'; known: none .*zlib, zstd, lz4"):
        SstWriter(p, compression="brotli")
    with pytest.raises(ValueError, match="64"):
        SstWriter(p, block_bytes=63)
    with pytest.raises(FormatVersionError, match="version 2"):
        SstWriter(p, format_version=2)
    with pytest.raises(ValueError, match="expire_ts"):
        SstWriter(p, format_version=FORMAT_V0).add((b"k", 1, None, 5, b"v"))
    assert not p.exists()


# -- reader errors -------------------------------------------------------------------------------------


def footer_with(buf: bytes, **changes) -> bytes:
    """`buf` with footer fields changed and the footer checksum recomputed (a well-formed footer)."""
    names = ["meta_offset", "meta_size", "format_version", "magic"]
    vals = dict(zip(names, FOOTER.unpack_from(buf, len(buf) - FOOTER.size)[:4], strict=True))
    vals.update(changes)
    body = struct.pack(">QIIQ", *(vals[n] for n in names))
    return buf[: -FOOTER.size] + body + struct.pack(">I", xxhash.xxh32_intdigest(body))


DROP = object()


def with_metadata(buf: bytes, **changes) -> bytes:
    """`buf` with metadata fields changed (DROP removes one), the block re-sealed, the footer fixed."""
    meta_offset, meta_size = FOOTER.unpack_from(buf, len(buf) - FOOTER.size)[:2]
    d = msgpack.unpackb(buf[meta_offset : meta_offset + meta_size - 9], raw=False)
    d.update(changes)
    d = {k: v for k, v in d.items() if v is not DROP}
    stored = msgpack.packb(d, use_bin_type=True) + b"\x00"
    meta = stored + struct.pack(">Q", xxhash.xxh3_64_intdigest(stored))
    out = buf[:meta_offset] + meta + buf[-FOOTER.size :]
    return footer_with(out, meta_size=len(meta))


@pytest.fixture
def sst(tmp_path):
    rows = [(b"k%02d" % i, 50 - i, TS0 + i, TS0 + 99 if i % 3 else None, b"v" * i) for i in range(20)]
    path = tmp_path / "good.sst"
    write(path, rows, block_bytes=64)
    return path, path.read_bytes(), rows


@pytest.mark.parametrize("version", [2, 7, 0xFFFFFFFF])
def test_newer_format_version_in_footer(tmp_path, sst, version):
    _, buf, _ = sst
    p = tmp_path / "newer.sst"
    p.write_bytes(footer_with(buf, format_version=version))
    with pytest.raises(FormatVersionError, match=f"version {version} is newer") as ei:
        SstReader(p)
    assert ei.value.path == str(p)


def test_metadata_and_footer_must_agree_on_version(tmp_path, sst):
    _, buf, _ = sst
    p = tmp_path / "x.sst"
    p.write_bytes(footer_with(buf, format_version=0))
    with pytest.raises(CorruptionError, match="disagree") as ei:
        SstReader(p)
    assert ei.value.path == str(p)


@pytest.mark.parametrize("feature", [4, 9])
def test_unknown_row_feature_in_metadata(tmp_path, sst, feature):
    _, buf, _ = sst
    p = tmp_path / "x.sst"
    p.write_bytes(with_metadata(buf, row_features=[0, 1, 3, feature]))
    with pytest.raises(FormatVersionError, match=f"unknown row feature {feature}") as ei:
        SstReader(p)
    assert ei.value.path == str(p)


def test_patched_metadata_helper_keeps_a_readable_file(tmp_path, sst):
    """The helper above only changes what it is told: an unchanged re-seal still reads back."""
    _, buf, rows = sst
    p = tmp_path / "x.sst"
    p.write_bytes(with_metadata(buf))
    with SstReader(p) as r:
        assert list(r) == rows
        r.verify()


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("num_rows", 21, "says 21 rows, found 20"),
        ("num_tombstones", 3, "tombstones"),
        ("num_expiring", 1, "expire_ts"),
        ("max_seq", 51, "seq range"),
    ],
)
def test_verify_catches_metadata_that_disagrees_with_the_rows(tmp_path, sst, field, value, words):
    _, buf, rows = sst
    p = tmp_path / "x.sst"
    p.write_bytes(with_metadata(buf, **{field: value}))
    with SstReader(p) as r:
        assert list(r) == rows
        with pytest.raises(CorruptionError, match=words) as ei:
            r.verify()
    assert ei.value.path == str(p)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.sst"
    p.write_bytes(b"")
    with pytest.raises(CorruptionError, match="too short") as ei:
        SstReader(p)
    assert (ei.value.path, ei.value.offset) == (str(p), 0)


def test_not_an_sst(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_bytes(b"these are not the bytes you are looking for\n" * 10)
    with pytest.raises(CorruptionError, match="magic") as ei:
        SstReader(p)
    assert (ei.value.path, ei.value.offset) == (str(p), len(p.read_bytes()) - 28)


def test_truncated_file(tmp_path, sst):
    _, buf, _ = sst
    p = tmp_path / "t.sst"
    for cut in (0, 1, 27, 28, 29, len(buf) // 2, len(buf) - 29, len(buf) - 1):
        p.write_bytes(buf[:cut])
        with pytest.raises(CorruptionError) as ei:
            SstReader(p)
        assert ei.value.path == str(p)
        assert 0 <= ei.value.offset <= max(0, cut - 28)


def test_footer_checksum(tmp_path, sst):
    _, buf, _ = sst
    p = tmp_path / "t.sst"
    p.write_bytes(buf[:-1] + bytes([buf[-1] ^ 1]))
    with pytest.raises(CorruptionError, match="footer checksum") as ei:
        SstReader(p)
    assert ei.value.offset == len(buf) - 28


def test_data_block_damage_is_reported_at_first_read(tmp_path, sst):
    _, buf, _ = sst
    p = tmp_path / "t.sst"
    p.write_bytes(bytes([buf[0] ^ 0xFF]) + buf[1:])
    with SstReader(p) as r:  # open checks footer, metadata, index and filter only
        with pytest.raises(CorruptionError, match="checksum") as ei:
            list(r)
        assert (ei.value.path, ei.value.offset) == (str(p), 0)
        with pytest.raises(CorruptionError):
            r.get(b"k00")
        assert r.get(b"k19") is not None  # other blocks are fine


# -- structures that pass their checksum but do not fit: what a buggy writer would leave ----------------


def resealed(buf: bytes, offset: int, size: int, stored: bytes, code: int) -> bytes:
    """`buf` with the block at `offset` replaced by `stored` + `code`, checksum recomputed (same size)."""
    assert len(stored) == size - 9
    body = stored + bytes([code])
    return buf[:offset] + body + struct.pack(">Q", xxhash.xxh3_64_intdigest(body)) + buf[offset + size :]


def first_block(path) -> tuple[int, int]:
    with SstReader(path) as r:
        return r.blocks[0].offset, r.blocks[0].size


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda buf, b0: footer_with(buf, meta_size=len(buf)), "metadata block lies outside"),
        (lambda buf, b0: with_metadata(buf, num_rows="many"), None),
        (lambda buf, b0: with_metadata(buf, last_key=DROP), "undecodable metadata.*last_key"),
        (lambda buf, b0: with_metadata(buf, index_size=10**6), "index block lies outside"),
        (lambda buf, b0: with_metadata(buf, num_blocks=99), "block count"),
        (lambda buf, b0: with_metadata(buf, data_size=5), "index"),
        (lambda buf, b0: with_metadata(buf, filter_offset=0, filter_size=b0[1]), "filter"),
        (lambda buf, b0: resealed(buf, *b0, buf[b0[0] : b0[0] + b0[1] - 9], 1), "cannot decompress zlib"),
        (lambda buf, b0: resealed(buf, *b0, buf[b0[0] : b0[0] + b0[1] - 9], 2), "cannot decompress zstd"),
        (lambda buf, b0: resealed(buf, *b0, buf[b0[0] : b0[0] + b0[1] - 9], 3), "cannot decompress lz4"),
        (
            lambda buf, b0: resealed(buf, *b0, buf[b0[0] : b0[0] + b0[1] - 13] + struct.pack(">I", 999), 0),
            "block trailer",
        ),
        (
            lambda buf, b0: resealed(buf, *b0, b"\xff" + buf[b0[0] + 1 : b0[0] + b0[1] - 9], 0),
            "past the end|row count",
        ),
    ],
)
def test_checksum_valid_but_inconsistent_structures_are_corruption(tmp_path, sst, damage, words):
    path, buf, rows = sst
    p = tmp_path / "x.sst"
    p.write_bytes(damage(buf, first_block(path)))
    with pytest.raises(CorruptionError, match=words) as ei:
        with SstReader(p) as r:
            assert list(r) == rows
            r.verify()
    assert ei.value.path == str(p)

"""SST block compression (formats/sst_layout.py's codecs): files written before zstd and lz4 existed still
read, a code or codec this reader lacks is refused with an error that names it, and the zstd contexts
are reused per thread and never shared between threads."""

from __future__ import annotations

import re
import struct
import threading
from pathlib import Path

import msgpack
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from formats import sst_layout
from formats.errors import CorruptionError, FormatVersionError
from formats.sst import COMPRESSION_CODES, COMPRESSION_NAMES, FOOTER, SstReader, write_sst
from formats.verify import verify_sst

GOLDEN = Path(__file__).resolve().parent / "golden"
T0 = 1_700_000_000_000


def golden_rows() -> list[tuple]:
    """200 keys of a store's shape: several versions of some keys, tombstones, TTL rows, values that
    compress (a repeated pattern) and values that do not (a counter's bytes). tests/formats/golden/
    holds these rows as written (block_bytes=512, creation_timestamp=T0) by the code before zstd and lz4
    were added (commit dd07570)."""
    rows = []
    seq = 10_000
    for i in range(200):
        key = b"user:%06d" % (i * 7)
        for v in range(1 + (i % 3 == 0)):
            seq -= 1
            if i % 11 == 5 and v == 0:
                rows.append((key, seq, T0 + i, None, None))  # a tombstone
                continue
            value = (b"profile-%d;" % (i % 13)) * (3 + i % 5) + i.to_bytes(4, "big")
            expire = T0 + 86_400_000 + i if i % 4 == 1 else None
            rows.append((key, seq, T0 + i, expire, value))
    return rows


@pytest.mark.parametrize("compression", [None, "zlib"])
def test_files_written_before_zstd_and_lz4_read_unchanged(tmp_path, compression):
    path = GOLDEN / f"v1-{compression or 'none'}.sst"
    rows = golden_rows()
    with SstReader(path) as r:
        assert r.info.compression == compression and r.info.num_blocks > 10
        assert list(r) == rows
        newest = {}
        for row in rows:  # each key's first row is its newest version
            newest.setdefault(row[0], row)
        assert {k: r.get(k) for k in newest} == newest
        verify_sst(r)
        old_info = r.info
    # today's writer writes the same file for the codes that existed then: the on-disk format of none
    # and zlib did not move (zlib's bytes are compared too: the same zlib level and the same input)
    again = tmp_path / "again.sst"
    info = write_sst(again, rows, block_bytes=512, compression=compression, creation_timestamp=T0, sync=False)
    assert info == old_info
    assert again.read_bytes() == path.read_bytes()


def test_the_stored_codes_did_not_move():
    # DO NOT CHANGE: these numbers are in every block trailer on disk
    assert COMPRESSION_CODES == {None: 0, "none": 0, "zlib": 1, "zstd": 2, "lz4": 3}
    assert COMPRESSION_NAMES == {0: None, 1: "zlib", 2: "zstd", 3: "lz4"}


# -- a code or a codec this reader lacks -------------------------------------------------------------


def _with_block_code(buf: bytes, offset: int, size: int, code: int) -> bytes:
    """`buf` with the block at `offset` given compression byte `code`, checksum recomputed: what a newer
    writer with a codec this reader lacks would leave."""
    body = buf[offset : offset + size - 9] + bytes([code])
    return buf[:offset] + body + struct.pack(">Q", xxhash.xxh3_64_intdigest(body)) + buf[offset + size :]


def _with_metadata(buf: bytes, **changes) -> bytes:
    """`buf` with metadata fields changed, the metadata block resealed and the footer rewritten."""
    meta_offset, meta_size, version, magic, _ = FOOTER.unpack_from(buf, len(buf) - FOOTER.size)
    d = msgpack.unpackb(buf[meta_offset : meta_offset + meta_size - 9], raw=False)
    d.update(changes)
    meta = sst_layout._seal(msgpack.packb(d, use_bin_type=True))
    body = struct.pack(">QIIQ", meta_offset, len(meta), version, magic)
    return buf[:meta_offset] + meta + body + struct.pack(">I", xxhash.xxh32_intdigest(body))


@pytest.fixture
def small_sst(tmp_path) -> tuple[Path, bytes, tuple[int, int]]:
    path = tmp_path / "good.sst"
    write_sst(path, golden_rows()[:40], block_bytes=256, sync=False)
    with SstReader(path) as r:
        first = (r.blocks[0].offset, r.blocks[0].size)
    return path, path.read_bytes(), first


def test_an_unknown_block_code_is_a_format_version_error_naming_it(tmp_path, small_sst):
    _, buf, (offset, size) = small_sst
    p = tmp_path / "newer.sst"
    p.write_bytes(_with_block_code(buf, offset, size, 9))
    with SstReader(p) as r:  # open reads the uncompressed index, filter and metadata only
        with pytest.raises(FormatVersionError, match="block at offset 0: unknown compression code 9") as ei:
            list(r)
        assert ei.value.path == str(p)
        with pytest.raises(FormatVersionError, match="code 9"):
            r.get(r.blocks[0].first_key)
        assert r.get(r.blocks[1].first_key) is not None  # the other blocks still read
    # without checksums the byte may as well be damage: then it is corruption, still naming the code
    with SstReader(p, verify_checksums=False) as r:
        with pytest.raises(CorruptionError, match="unknown compression code 9") as ec:
            list(r)
        assert ec.value.offset == 0


def test_an_unknown_codec_in_the_metadata_is_refused_at_open(tmp_path, small_sst):
    _, buf, _ = small_sst
    for codec in ("brotli", 7, ["zstd"]):
        p = tmp_path / "newer.sst"
        p.write_bytes(_with_metadata(buf, compression=codec))
        with pytest.raises(FormatVersionError, match=re.escape(f"compressed with {codec!r}") + ".*does not know"):
            SstReader(p).close()


def test_each_known_codec_in_the_metadata_opens(tmp_path, small_sst):
    # the open-time check accepts every name this version writes (the blocks here are uncompressed, so
    # the rows still read: each block's own code, not the metadata, picks its decompressor)
    path, buf, _ = small_sst
    with SstReader(path) as r:
        rows = list(r)
    for codec in COMPRESSION_NAMES.values():
        p = tmp_path / f"{codec}.sst"
        p.write_bytes(_with_metadata(buf, compression=codec))
        with SstReader(p) as r:
            assert r.info.compression == codec and list(r) == rows


# -- the zstd contexts: reused within a thread, never shared between threads ---------------------------


def test_zstd_contexts_are_reused_per_thread_and_not_shared():
    mine = (sst_layout._zstd.compressor, sst_layout._zstd.decompressor)
    assert (sst_layout._zstd.compressor, sst_layout._zstd.decompressor) == mine  # the same objects again
    seen = []
    t = threading.Thread(target=lambda: seen.append((sst_layout._zstd.compressor, sst_layout._zstd.decompressor)))
    t.start()
    t.join()
    assert seen[0][0] is not mine[0] and seen[0][1] is not mine[1]


@pytest.mark.parametrize("compression", ["zstd", "lz4", "zlib"])
def test_threads_reading_one_compressed_sst_at_once_read_every_row(tmp_path, compression):
    rows = golden_rows()
    path = tmp_path / "t.sst"
    write_sst(path, rows, block_bytes=256, compression=compression, sync=False)
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def scan(r: SstReader) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                assert list(r) == rows
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    with SstReader(path) as r:  # no block cache: every pass decompresses every block again
        threads = [threading.Thread(target=scan, args=(r,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]



# payloads random (incompressible) or repetitive (compressible), empty included
_payloads = st.binary(max_size=5000) | st.builds(
    lambda piece, n: piece * n, st.binary(min_size=1, max_size=20), st.integers(1, 500)
)


@settings(max_examples=200, deadline=None)
@given(payload=_payloads, code=st.sampled_from(sorted(COMPRESSION_NAMES)))
def test_every_codec_round_trips_any_payload(payload, code):
    stored = sst_layout._compress(payload, code)
    assert sst_layout._decompress(stored, code) == payload
    # and the block as sealed: payload, code byte, checksum over both
    sealed = sst_layout._seal(payload, code)
    assert sealed[-9] == code and sealed[:-9] == stored
    assert struct.unpack(">Q", sealed[-8:])[0] == xxhash.xxh3_64_intdigest(sealed[:-8])

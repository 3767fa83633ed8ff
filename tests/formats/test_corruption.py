"""Damage every byte of each file the codecs write: the readers raise, or return exactly what was written.

For each file kind: flip each byte in turn (xor 0xFF, and a single-bit xor 0x01), read everything back,
and require either CorruptionError / FormatVersionError or a result identical to the undamaged read.
Never a different row. Truncation at every length is checked the same way.
"""

from __future__ import annotations

import os

import pytest

from formats import manifest as manifest_codec
from formats.errors import CorruptionError, FormatVersionError
from formats.manifest import Manifest, SortedRun, SstEntry
from formats.row import FORMAT_V0, FORMAT_V1
from formats.sst import SstReader, write_sst
from formats.wal import decode_segment, encode_record

TS0 = 1_700_000_000_000
REJECT = (CorruptionError, FormatVersionError)
MASKS = [0xFF, 0x01]


def flipped(buf: bytes, at: int, mask: int) -> bytes:
    return buf[:at] + bytes([buf[at] ^ mask]) + buf[at + 1 :]


# -- SST -----------------------------------------------------------------------------------------------


def sst_rows(version: int) -> list[tuple]:
    """A few dozen rows: several versions per key, tombstones and (v1) TTL rows."""
    rows = []
    seq = 1000
    for i in range(24):
        key = b"key-%03d" % i
        for j in range(1 + i % 3):
            seq -= 1
            tomb = (i + j) % 5 == 0
            exp = TS0 + 60_000 + i if version == FORMAT_V1 and not tomb and i % 2 else None
            ts = TS0 + i * 10 + j if version == FORMAT_V1 else None
            rows.append((key, seq, ts, exp, None if tomb else b"value-%d-%d" % (i, j)))
    return rows


def read_everything(path: str, keys: list[bytes]) -> tuple:
    """Open and read through every path: iterate, reverse, ranges, get every key (and older), verify."""
    with SstReader(path) as r:
        return (
            r.info,
            list(r),
            list(r.iter(reverse=True)),
            list(r.iter(keys[3], keys[-3])),
            [r.get(k) for k in keys],
            [r.get(k, max_seq=r.info.min_seq + 20) for k in keys],
            [r.get(k + b"\x00") for k in keys],
            r.verify(),
        )


@pytest.mark.parametrize(
    "version, compression, masks",
    [
        (FORMAT_V1, None, MASKS),
        (FORMAT_V1, "zlib", MASKS),
        (FORMAT_V1, "zstd", MASKS),
        (FORMAT_V1, "lz4", MASKS),
        (FORMAT_V0, None, [0xFF]),
    ],
)
def test_sst_every_byte_flipped(tmp_path, version, compression, masks):
    rows = sst_rows(version)
    keys = sorted({r[0] for r in rows})
    good = str(tmp_path / "good.sst")
    info = write_sst(good, rows, format_version=version, block_bytes=96, compression=compression, sync=False)
    assert info.num_blocks >= 4 and (version == FORMAT_V0 or info.num_expiring and info.num_tombstones)
    baseline = read_everything(good, keys)
    if version == FORMAT_V1:
        assert baseline[1] == rows
    else:  # v0 stores no seq/ts/expire_ts: every row reads back with the file's max_seq
        assert baseline[1] == [(k, info.max_seq, None, None, v) for k, _, _, _, v in rows]
    buf = open(good, "rb").read()
    bad = str(tmp_path / "bad.sst")
    outcomes = {"rejected": 0, "identical": 0}
    fd = os.open(bad, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, buf)
        for mask in masks:
            for at in range(len(buf)):
                # damage one byte in place and put it back after (rewriting the file costs 100x more)
                os.pwrite(fd, bytes([buf[at] ^ mask]), at)
                try:
                    got = read_everything(bad, keys)
                except REJECT as e:
                    assert e.path == bad
                    outcomes["rejected"] += 1
                    continue
                finally:
                    os.pwrite(fd, buf[at : at + 1], at)
                assert got == baseline, f"byte {at} ^ {mask:#x} changed what was read"
                outcomes["identical"] += 1
    finally:
        os.close(fd)
    assert read_everything(bad, keys) == baseline  # the file was restored after every flip
    # every byte of an SST is covered by a checksum: nothing damaged goes unnoticed
    assert outcomes == {"rejected": len(buf) * len(masks), "identical": 0}


def test_sst_every_truncation(tmp_path):
    rows = sst_rows(FORMAT_V1)
    good = str(tmp_path / "good.sst")
    write_sst(good, rows, block_bytes=96, sync=False)
    buf = open(good, "rb").read()
    bad = str(tmp_path / "bad.sst")
    fd = os.open(bad, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    try:
        for cut in range(len(buf)):
            # the file holds buf[:cut]: grow it by one byte per step instead of rewriting it
            with pytest.raises(CorruptionError) as ei:
                SstReader(bad).close()
            assert ei.value.path == bad and 0 <= ei.value.offset <= cut
            os.pwrite(fd, buf[cut : cut + 1], cut)
    finally:
        os.close(fd)
    assert open(bad, "rb").read() == buf


def test_sst_zeroed_block_is_caught(tmp_path):
    """A run of zeros (a lost page) inside a data block: rows never come back wrong."""
    rows = sst_rows(FORMAT_V1)
    good = str(tmp_path / "good.sst")
    write_sst(good, rows, block_bytes=96, sync=False)
    buf = bytearray(open(good, "rb").read())
    with SstReader(good) as r:
        h = r.blocks[2]
    buf[h.offset + 3 : h.offset + 40] = bytes(37)
    bad = str(tmp_path / "bad.sst")
    with open(bad, "wb") as f:
        f.write(buf)
    with SstReader(bad) as r:
        with pytest.raises(CorruptionError) as ei:
            list(r)
        assert ei.value.offset == h.offset
        with pytest.raises(CorruptionError):
            r.verify()


# -- manifest ------------------------------------------------------------------------------------------


def test_manifest_every_byte_flipped(tmp_path):
    info_a = write_sst(tmp_path / "a.sst", sst_rows(FORMAT_V1)[:10], sync=False)
    info_b = write_sst(tmp_path / "b.sst", sst_rows(FORMAT_V0)[10:], format_version=0, sync=False)
    m = Manifest(
        writer_epoch=2,
        compactor_epoch=1,
        next_sst_id=9,
        next_run_id=3,
        last_seq=999,
        wal_replay_from=4,
        clock_watermark=TS0,
        l0=(SstEntry("000008.sst", info_a),),
        runs=(SortedRun(2, (SstEntry("000005.sst", info_b),)),),
        seq_tracker=b"tracker-bytes",
        time_seq=b"bins",
    )
    buf = manifest_codec.encode(m)
    assert manifest_codec.decode(buf) == m
    for mask in MASKS:
        for at in range(len(buf)):
            try:
                got = manifest_codec.decode(flipped(buf, at, mask), "m")
            except REJECT as e:
                assert e.path == "m"
                continue
            raise AssertionError(f"byte {at} ^ {mask:#x} was accepted: {got}")
    for cut in range(len(buf)):
        with pytest.raises(CorruptionError):
            manifest_codec.decode(buf[:cut], "m")


# -- WAL -----------------------------------------------------------------------------------------------


def wal_segment() -> tuple[bytes, list]:
    commits = [
        (11, TS0, [(b"a", None, b"1")]),
        (12, TS0 + 1, [(b"b", TS0 + 500, b"expiring"), (b"c", None, None)]),
        (13, TS0 + 2, [(b"a", None, None)]),
        (14, TS0 + 3, [(b"d" * 40, None, b"x" * 60), (b"e", TS0 + 9, b"")]),
        (15, TS0 + 4, [(b"f", None, b"last")]),
    ]
    buf = b"".join(encode_record(*c) for c in commits)
    records, torn = decode_segment(buf)
    assert torn is None and [r.seq for r in records] == [11, 12, 13, 14, 15]
    return buf, records


@pytest.mark.parametrize("mask", MASKS)
def test_wal_every_byte_flipped(mask):
    buf, records = wal_segment()
    last = records[-1].offset
    for at in range(len(buf)):
        try:
            got, torn = decode_segment(flipped(buf, at, mask), "w")
        except CorruptionError as e:
            assert e.path == "w"
            # the error names the damaged record, not some later offset
            assert e.offset == max(r.offset for r in records if r.offset <= at)
            continue
        # only damage in the final record may pass as a torn tail, and then only the intact prefix returns
        assert at >= last, f"byte {at} ^ {mask:#x} in a non-final record was not reported"
        assert (got, torn) == (records[:-1], last)


def test_wal_every_truncation_is_a_prefix():
    buf, records = wal_segment()
    for cut in range(len(buf) + 1):
        got, torn = decode_segment(buf[:cut])
        assert got == records[: len(got)]
        assert (
            torn is None
            if cut in {r.offset for r in records} | {len(buf)}
            else torn == records[len(got)].offset
        )


@pytest.mark.parametrize("mask", MASKS)
def test_wal_flipped_and_truncated(mask):
    """Damage followed by a torn tail: still never a wrong record."""
    buf, records = wal_segment()
    cut = records[-1].offset + 7  # torn inside the last record's header
    for at in range(cut):
        try:
            got, torn = decode_segment(flipped(buf, at, mask)[:cut])
        except CorruptionError:
            continue
        assert got == records[: len(got)]
        assert at >= records[-2].offset  # only the record just before the torn one may read as torn
        assert torn == records[len(got)].offset


def test_wal_segment_on_disk(tmp_path):
    """The same checks through a real file, as lsm/wal.py reads it."""
    buf, records = wal_segment()
    p = tmp_path / "00000000000000000001.wal"
    p.write_bytes(buf[:-3])
    with open(p, "rb") as f:
        got, torn = decode_segment(f.read(), os.fspath(p))
    assert (got, torn) == (records[:-1], records[-1].offset)

"""The column decode of a row area (`RowCodec.rows_array`, a numpy view) gives exactly what `decode_block`
gives, and declines (None) every area it cannot read that way; `SstReader.iter_batches` gives exactly the
rows of `iter_blocks`, in groups of blocks, arrays where the rows are alike."""

from __future__ import annotations

import bisect
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats import sst_reader
from formats.errors import CorruptionError
from formats.row import FORMAT_V1, RowFeature, codec_for
from formats.row_array import RowArray
from formats.sst import SstReader
from tests.formats.test_sst import DictCache, sst_rows, write

F = RowFeature
FTS = (F.RowFlags, F.Timestamp, F.Seq)
FTTS = (F.RowFlags, F.Timestamp, F.TimeToLive, F.Seq)
I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def alike_rows(draw, ttl: bool) -> list[tuple]:
    """Key-ordered rows of one key width and one value width, no tombstone (keys may hold NUL and 0xFF
    bytes, which numpy's byte strings would strip at the end)."""
    width = draw(st.integers(1, 6))
    vwidth = draw(st.integers(0, 9))
    keys = sorted(draw(st.lists(st.binary(min_size=width, max_size=width), min_size=1, max_size=25, unique=True)))
    rows = []
    seq = 2**64 - 1
    for key in keys:
        for _ in range(draw(st.integers(1, 3))):
            seq -= draw(st.integers(1, 2**40))
            exp = draw(I64) if ttl and draw(st.booleans()) else None
            rows.append((key, seq, draw(I64), exp, draw(st.binary(min_size=vwidth, max_size=vwidth))))
    return rows


def encode(codec, rows) -> bytes:
    parts: list = []
    for r in rows:
        codec.encode_parts(r, parts)
    return b"".join(parts)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), ttl=st.booleans())
def test_the_column_decode_of_alike_rows_equals_decode_block(data, ttl):
    codec = codec_for(FORMAT_V1, FTTS if ttl else FTS)
    rows = data.draw(alike_rows(ttl))
    buf = encode(codec, rows)
    got = codec.rows_array(buf)
    assert got is not None and len(got) == len(rows)
    assert got.rows() == codec.decode_block(buf) == rows
    keys = [r[0] for r in rows]
    assert got.keys() == keys and all(type(k) is bytes for k in keys)
    assert got.arr["val"].tolist() == [r[4] for r in rows]
    assert got.arr["seq"].tolist() == [r[1] for r in rows]
    assert got.first_key() == keys[0] and got.last_key() == keys[-1]
    assert got.max_seq() == max(r[1] for r in rows)
    assert got.min_expire_ts() == min((r[3] for r in rows if r[3] is not None), default=None)
    # the numpy key column sorts and compares as the bytes do (NULs and 0xFF included)
    assert np.argsort(got.arr["skey"], kind="stable").tolist() == sorted(range(len(keys)), key=keys.__getitem__)
    assert (got.arr["skey"][1:] == got.arr["skey"][:-1]).tolist() == [a == b for a, b in zip(keys[1:], keys, strict=False)]
    probe = data.draw(st.sampled_from(keys))
    lo = data.draw(st.integers(0, len(rows)))
    assert got.bisect_right(probe, lo) == bisect.bisect_right(keys, probe, lo)
    cut = got[1:]
    assert isinstance(cut, RowArray) and cut.rows() == rows[1:]


@settings(max_examples=50, deadline=None)
@given(data=st.data(), ttl=st.booleans())
def test_the_column_decode_declines_what_it_cannot_read_and_never_differs(data, ttl):
    """Any rows (tombstones, mixed widths): either None, or exactly decode_block's rows, all alike."""
    features = FTTS if ttl else FTS
    codec = codec_for(FORMAT_V1, features)
    rows = data.draw(sst_rows(FORMAT_V1))
    rows = [(k, s, 0 if ts is None else ts, exp if ttl else None, v) for k, s, ts, exp, v in rows]
    buf = encode(codec, rows)
    got = codec.rows_array(buf)
    alike = (
        len({len(r[0]) for r in rows}) == 1
        and len({len(r[4] or b"") for r in rows}) == 1
        and all(r[4] is not None for r in rows)
    )
    assert (got is not None) == alike
    if got is not None:
        assert got.rows() == codec.decode_block(buf) == rows


def test_the_column_decode_declines_bad_flags_and_short_areas():
    codec = codec_for(FORMAT_V1, FTS)
    buf = bytearray(encode(codec, [(b"ab", 3, 1, None, b"v"), (b"ac", 2, 1, None, b"w")]))
    assert codec.rows_array(bytes(buf)) is not None
    assert codec.rows_array(bytes(buf[:-1])) is None  # decode_block names that fault
    buf[2 + 2] = 2  # "has expire_ts" in an SST without TimeToLive
    assert codec.rows_array(bytes(buf)) is None
    assert codec_for(FORMAT_V1, FTTS).rows_array(b"") is None
    assert codec_for(0, ()).rows_array(encode(codec_for(0, ()), [(b"a", None, None, None, b"v")])) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), alike=st.booleans(), group=st.sampled_from([1, 3, 2048]))
def test_iter_batches_gives_the_rows_of_iter_blocks(data, alike, group):
    rows = data.draw(alike_rows(data.draw(st.booleans())) if alike else sst_rows(FORMAT_V1))
    keys = sorted({r[0] for r in rows})
    cands = [None, *keys, *(k + b"\x00" for k in keys)]
    start = data.draw(st.sampled_from(cands))
    end = data.draw(st.sampled_from(cands))
    old = sst_reader.GROUP_ROWS
    sst_reader.GROUP_ROWS = group
    try:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.sst")
            write(path, rows, block_bytes=64)
            with SstReader(path, cache=DictCache()) as r:
                want = [row for block in r.iter_blocks(start, end) for row in block]
                batches = list(r.iter_batches(start, end))
                got = [row for b in batches for row in (b if type(b) is list else b.rows())]
                assert got == want
                if alike and r.info.num_tombstones == 0 and want:
                    assert any(type(b) is RowArray for b in batches)
    finally:
        sst_reader.GROUP_ROWS = old


@st.composite
def rows_with_tombstones(draw) -> list[tuple]:
    """Rows of one key width, values of one width or tombstones (TTL tombstones too), sometimes one
    value of another width (then the group is no array)."""
    width = draw(st.integers(1, 4))
    vwidth = draw(st.integers(1, 6))
    keys = sorted(draw(st.lists(st.binary(min_size=width, max_size=width), min_size=1, max_size=60, unique=True)))
    ttl = draw(st.booleans())
    odd = draw(st.integers(0, 4)) == 0
    rows = []
    seq = 2**64 - 1
    for key in keys:
        for _ in range(draw(st.integers(1, 2))):
            seq -= draw(st.integers(1, 2**40))
            exp = draw(I64) if ttl and draw(st.booleans()) else None
            value = None if draw(st.integers(0, 3)) == 0 else draw(st.binary(min_size=vwidth, max_size=vwidth))
            if odd and value is not None and draw(st.integers(0, 9)) == 0:
                value += b"+"
            rows.append((key, seq, draw(I64), exp, value))
    return rows


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=rows_with_tombstones(), block_bytes=st.sampled_from([64, 200, 4096]), group=st.sampled_from([1, 7, 2048]))
def test_ragged_batches_give_the_rows_of_iter_blocks(rows, block_bytes, group, monkeypatch):
    """With `tombstones`, a group alike but for its tombstones is a ragged `RowArray` whose rows (and
    slices, keys, max seq, min expire_ts) are exactly those the blocks decode to; without, none is."""
    monkeypatch.setattr(sst_reader, "GROUP_ROWS", group)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.sst")
        write(p, rows, block_bytes=block_bytes)
        with SstReader(p) as r:
            want = list(r.iter())
            batches = list(r.iter_batches(tombstones=True))
            plain = list(r.iter_batches())
    got = []
    for b in batches:
        if type(b) is RowArray:
            part = b.rows()
            assert b.ragged or None not in [x[4] for x in part]
            assert b.keys() == [x[0] for x in part]
            assert b.max_seq() == max(x[1] for x in part)
            exps = [x[3] for x in part if x[3] is not None]
            assert b.min_expire_ts() == (min(exps) if exps else None)
            assert b[1:].rows() == part[1:]
            got += part
        else:
            got += b
    assert got == want
    assert not any(type(b) is RowArray and b.ragged for b in plain)


def test_a_group_with_deletes_is_one_ragged_array():
    rows = [(b"k%05d" % i, 10_000 - i, i, None, None if i % 9 == 0 else b"v" * 20) for i in range(3000)]
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.sst")
        write(p, rows)
        with SstReader(p) as r:
            batches = list(r.iter_batches(tombstones=True))
            plain = list(r.iter_batches())
    assert all(type(b) is RowArray and b.ragged for b in batches)
    assert all(type(b) is list for b in plain)  # the scan's arrays hold no tombstone
    assert [x for b in batches for x in b.rows()] == rows


def test_keys_of_several_lengths_with_deletes_are_rows():
    """The value length read at the first key's length is meaningless for a key of another length: the
    group is decoded as rows (this raised a numpy error before)."""
    rows = [(b"t", 9, 1, 5, b"x"), (b"zz", 8, 1, None, None), (b"zzz", 7, 1, None, b"f")]
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.sst")
        write(p, rows)
        with SstReader(p) as r:
            assert list(r.iter_batches(tombstones=True)) == [rows]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=rows_with_tombstones(),
    block_bytes=st.sampled_from([64, 200, 4096]),
    group=st.sampled_from([1, 7, 2048]),
    compression=st.sampled_from([None, "zlib"]),
)
def test_the_compactions_group_read_gives_the_batches_of_the_block_path(
    rows, block_bytes, group, compression, monkeypatch
):
    """A reader without a cache (the compaction's) reads a group's blocks in one slice
    (`formats.sst_groups.group_records`); the batches are those a cached reader makes block by block: the
    same kind (rows or array, ragged or not) and the same rows."""
    monkeypatch.setattr(sst_reader, "GROUP_ROWS", group)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.sst")
        write(p, rows, block_bytes=block_bytes, compression=compression)
        with SstReader(p) as r:
            fast = list(r.iter_batches(tombstones=True))
        with SstReader(p, cache=DictCache()) as r:
            slow = list(r.iter_batches(tombstones=True))

    def kind(b):
        return "rows" if type(b) is list else ("ragged" if b.ragged else "array")

    assert [kind(b) for b in fast] == [kind(b) for b in slow]
    assert [b if type(b) is list else b.rows() for b in fast] == [b if type(b) is list else b.rows() for b in slow]


def test_the_group_read_names_a_damaged_block(tmp_path):
    """A flipped byte in a data block fails the group read's checksum; the block path then names the
    block, as it does for every reader."""
    rows = [(b"k%05d" % i, 10_000 - i, i, None, None if i % 9 == 0 else b"v" * 20) for i in range(3000)]
    p = tmp_path / "t.sst"
    write(p, rows)
    with SstReader(p) as r:
        victim = r.blocks[5]
    raw = bytearray(p.read_bytes())
    raw[victim.offset + 10] ^= 0x40
    p.write_bytes(bytes(raw))
    with SstReader(p) as r:
        with pytest.raises(CorruptionError) as e:
            list(r.iter_batches(tombstones=True))
    assert e.value.offset == victim.offset
    assert "checksum" in str(e.value)


def test_the_group_read_loads_no_block_one_by_one(tmp_path, monkeypatch):
    """Uncompressed groups alike (but for tombstones) are read without `_load` (a payload per block)."""
    rows = [(b"k%05d" % i, 10_000 - i, i, None, None if i % 9 == 0 else b"v" * 20) for i in range(3000)]
    write(tmp_path / "t.sst", rows)
    monkeypatch.setattr(SstReader, "_load", lambda *a, **k: pytest.fail("a block was loaded on its own"))
    with SstReader(tmp_path / "t.sst") as r:
        batches = list(r.iter_batches(tombstones=True))
    assert [x for b in batches for x in b.rows()] == rows

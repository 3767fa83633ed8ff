"""The SST writer's record path (`SstWriter.extend_records`, `formats.sst_records`, the block cuts, the
sealing and the index of `BlockEncoder.blocks_of_stream`) writes, byte for byte, the file the row path
(`SstWriter.add`) writes from the same rows.

Records are what the columnar merge holds: numpy arrays in the layout of `formats.row_array.array_dtype`,
one key and one value length per array, tombstones and expire_ts told by flag bits. The rows here have
keys with NUL and 0xFF bytes, several versions of a key (split between arrays too), tombstones, TTLs on
some, all or no rows, ts/seq/expire_ts at the edges of their fields, arrays with and without the
expire_ts slot in one file, and junk in every byte the writer must ignore.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats.row import FORMAT_V0, FORMAT_V1
from formats.row_array import array_dtype
from formats.sst import SstReader, SstWriter
from formats.sst_records import Scratch
from tests.formats._records import records_of

I64 = st.integers(-(2**63), 2**63 - 1)
U64 = st.integers(0, 2**64 - 1)
settings_ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def record_groups(draw, version: int = FORMAT_V1) -> tuple[list[tuple], list[tuple[list[tuple], bool]]]:
    """(rows, the same rows cut into groups, each with whether its records carry the expire_ts slot).
    A group has one value length; cuts fall anywhere, inside a key's versions too."""
    width = draw(st.integers(1, 20))
    keys = sorted(draw(st.sets(st.binary(min_size=width, max_size=width), min_size=1, max_size=60)))
    ttl_mode = "none" if version == FORMAT_V0 else draw(st.sampled_from(["none", "some", "all"]))
    versions = []
    for k in keys:
        seqs = sorted(draw(st.sets(U64, min_size=1, max_size=3)), reverse=True)
        versions += [(k, s) for s in seqs]
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(versions) - 1)), max_size=4)))
    bounds = [0, *(c for c in cuts if c < len(versions)), len(versions)]
    rows: list[tuple] = []
    groups = []
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        vlen = draw(st.sampled_from([0, 1, 7, 100]))
        group = []
        for k, s in versions[lo:hi]:
            exp = None
            if ttl_mode == "all" or (ttl_mode == "some" and draw(st.booleans())):
                exp = draw(I64)
            value = None if draw(st.integers(0, 4)) == 0 else draw(st.binary(min_size=vlen, max_size=vlen))
            group.append((k, s, draw(I64), exp, value))
        rows += group
        slot = any(r[3] is not None for r in group) or draw(st.booleans())
        groups.append((group, slot))
    return rows, groups


def _file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _write_both(d: str, rows: list[tuple], groups: list, junk: int, **kw) -> tuple:
    a = SstWriter(os.path.join(d, "rows.sst"), sync=False, **kw)
    for r in rows:
        a.add(r)
    ia = a.finish()
    b = SstWriter(os.path.join(d, "recs.sst"), sync=False, **kw)
    for group, slot in groups:
        vlen = next((len(r[4]) for r in group if r[4] is not None), 0)
        assert b.extend_records(records_of(group, ttl=slot, vlen=vlen, junk=junk))
    assert len(b) == len(rows)
    assert b.estimated_size == a.estimated_size or a.estimated_size == 0
    ib = b.finish()
    return (ia, _file(os.path.join(d, "rows.sst"))), (ib, _file(os.path.join(d, "recs.sst")))


@settings_
@given(
    data=record_groups(),
    junk=st.sampled_from([0, 0xFF, 0x5A]),
    block_bytes=st.sampled_from([64, 200, 4096]),
    compression=st.sampled_from([None, "zlib"]),
)
def test_records_write_the_file_the_rows_write(tmp_path_factory, data, junk, block_bytes, compression):
    rows, groups = data
    d = str(tmp_path_factory.mktemp("recs"))
    (ia, fa), (ib, fb) = _write_both(d, rows, groups, junk, block_bytes=block_bytes, compression=compression)
    assert fb == fa
    assert ib == ia
    with SstReader(os.path.join(d, "recs.sst")) as r:
        r.verify()
        assert list(r) == rows


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=record_groups(FORMAT_V0))
def test_records_in_a_version_0_file_go_as_rows(tmp_path_factory, data):
    """Format version 0 has another row layout: the records go through the row path, the same file."""
    rows, groups = data
    d = str(tmp_path_factory.mktemp("v0"))
    (ia, fa), (ib, fb) = _write_both(d, rows, groups, 0, format_version=FORMAT_V0)
    assert fb == fa and ib == ia


def test_records_mix_with_rows_added_otherwise(tmp_path):
    """Rows added by `add` before and after records, and records after columns: the order they were
    added in, and the file of `add` alone."""
    rows = [(b"k%03d" % i, 10, 100 + i, None if i % 4 else 5000 + i, b"v" * 8) for i in range(40)]
    a = SstWriter(tmp_path / "a.sst", sync=False)
    for r in rows:
        a.add(r)
    a.finish()
    b = SstWriter(tmp_path / "b.sst", sync=False)
    b.add(rows[0])
    assert b.extend_records(records_of(rows[1:10]))
    b.add(rows[10])
    assert b.extend_records(records_of(rows[11:30]))
    b.extend_columns(*map(list, zip(*rows[30:35], strict=True)))
    assert b.extend_records(records_of(rows[35:]))
    b.finish()
    assert (tmp_path / "b.sst").read_bytes() == (tmp_path / "a.sst").read_bytes()


def test_records_out_of_order_get_the_error_of_add(tmp_path):
    rows = [(b"b", 5, 1, None, b"x"), (b"a", 5, 1, None, b"x")]
    w = SstWriter(tmp_path / "x.sst", sync=False)
    with pytest.raises(ValueError, match="key order"):
        w.extend_records(records_of(rows))
    w = SstWriter(tmp_path / "y.sst", sync=False)
    assert w.extend_records(records_of([(b"b", 5, 1, None, b"x")]))
    with pytest.raises(ValueError, match="key order"):  # a version of the last key with a higher seq
        w.extend_records(records_of([(b"b", 6, 1, None, b"x")]))


def test_records_refuse_flag_bits_their_layout_cannot_hold(tmp_path):
    a = records_of([(b"a", 1, 1, None, b"x")], ttl=False)
    a["flags"] = 2  # "has expire_ts" with no expire_ts slot
    with pytest.raises(ValueError, match="flag bits"):
        SstWriter(tmp_path / "x.sst", sync=False).extend_records(a)
    b = records_of([(b"a", 1, 1, None, b"x")], ttl=True)
    b["flags"] = 4
    with pytest.raises(ValueError, match="flag bits"):
        SstWriter(tmp_path / "y.sst", sync=False).extend_records(b)


def test_extend_records_takes_only_records(tmp_path):
    w = SstWriter(tmp_path / "x.sst", sync=False)
    with pytest.raises(ValueError, match="array_dtype"):
        w.extend_records(np.zeros(3, [("key", "V4"), ("val", "V2")]))
    with pytest.raises(ValueError, match="array_dtype"):
        w.extend_records([(b"a", 1, 1, None, b"x")])
    assert w.extend_records(np.zeros(0, array_dtype(4, 2, False)))
    assert len(w) == 0


def test_extend_records_with_a_limit_adds_nothing_when_the_rows_would_reach_it(tmp_path):
    rows = [(b"k%03d" % i, 1, 7, None, b"v" * 10) for i in range(10)]
    w = SstWriter(tmp_path / "x.sst", sync=False)
    assert w.extend_records(records_of(rows[:5]), limit=10_000)
    before = w.estimated_size
    assert before == 5 * (4 + 10 + 33)
    assert not w.extend_records(records_of(rows[5:]), limit=before + 1)
    assert w.estimated_size == before and len(w) == 5
    assert w.extend_records(records_of(rows[5:]))
    w.finish()
    with SstReader(tmp_path / "x.sst") as r:
        assert list(r) == rows


@pytest.mark.parametrize("distinct", [True, False])
def test_records_of_several_key_widths_and_of_long_keys(tmp_path, distinct):
    """Arrays of other key widths in one file (the index and the filter then go key by key), and keys
    longer than the hashes in numpy take (the filter hashes them one by one): the file of `add`."""
    groups = [
        [(b"a", 9, 1, None, b"xy"), (b"a", 8, 1, 70, None)] if not distinct else [(b"a", 9, 1, None, b"xy")],
        [(b"ab\x00", 5, 2, None, b"z" * 30), (b"ab\xff", 5, 3, 12, b"q" * 30)],
        [(b"b" + bytes([i]) * 130, 4, 4, None, b"v") for i in range(1, 200)],
    ]
    rows = [r for g in groups for r in g]
    for block_bytes in (64, 4096):
        a = SstWriter(tmp_path / "a.sst", sync=False, block_bytes=block_bytes)
        for r in rows:
            a.add(r)
        ia = a.finish()
        b = SstWriter(tmp_path / "b.sst", sync=False, block_bytes=block_bytes)
        for g in groups:
            assert b.extend_records(records_of(g, junk=0x33))
        ib = b.finish()
        assert (tmp_path / "b.sst").read_bytes() == (tmp_path / "a.sst").read_bytes()
        assert ia == ib
        c = SstWriter(tmp_path / "c.sst", sync=False, block_bytes=block_bytes)
        assert c.extend_records(records_of(groups[2]))
        c.finish()
        a = SstWriter(tmp_path / "a.sst", sync=False, block_bytes=block_bytes)
        for r in groups[2]:
            a.add(r)
        a.finish()
        assert (tmp_path / "c.sst").read_bytes() == (tmp_path / "a.sst").read_bytes()


def test_writers_sharing_scratch_buffers_write_the_files_of_writers_without(tmp_path):
    """An output lends its writers one `Scratch` (the row stream and the sealed blocks of each file are
    built in its buffers, kept from file to file): a larger file, then a smaller, then a larger again
    are the files of writers with buffers of their own."""
    scratch = Scratch()
    for i, n in enumerate((900, 40, 1500)):
        rows = [(b"k%05d" % j, 7, j, None if j % 3 else 99, b"v" * (20 + i)) for j in range(n)]
        groups = [rows[: n // 2], rows[n // 2 :]]
        paths = []
        for name, sc in (("own", None), ("lent", scratch)):
            w = SstWriter(tmp_path / f"{name}-{i}.sst", sync=False, scratch=sc)
            for g in groups:
                assert w.extend_records(records_of(g))
            w.finish()
            paths.append(tmp_path / f"{name}-{i}.sst")
        assert paths[0].read_bytes() == paths[1].read_bytes()
    assert scratch.get("blocks", 10).base is not None  # a view of the kept buffer


def test_scratch_buffers_grow_and_are_kept():
    s = Scratch()
    a = s.get("x", 100)
    assert len(a) == 100 and a.dtype == np.uint8
    a[:] = 1
    b = s.get("x", 50)
    assert len(b) == 50 and b.base is a.base  # the same buffer, not a new one
    c = s.get("x", 10_000)
    assert len(c) == 10_000 and c.base is not a.base
    assert s.get("y", 5).base is not c.base  # one buffer per name

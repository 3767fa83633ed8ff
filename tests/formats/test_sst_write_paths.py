"""The SST writer's fast paths (formats/sst.py, formats/bloom.py) write the same bytes as the generic ones.

`BlockEncoder.encode_fast` (formats/sst_blocks.py) packs the two row layouts the engine writes with one struct per key length; the
generic path encodes every row through `RowCodec.encode_parts`. `bloom.build` sets the probes of a large
filter with numpy, of a small one with a Python loop. `SstWriter.extend` adds a list of rows checked
column by column instead of row by row through `add`. Each pair must give byte-identical files, and the
metadata `finish` computes column by column must match the rows.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formats.sst as sst_mod
from formats import bloom
from formats.row import FORMAT_V0, FORMAT_V1, MAX_KEY_LEN
from formats.sst import SstReader, SstWriter

TS0 = 1_700_000_000_000


@st.composite
def sst_rows(draw, version: int) -> list[tuple]:
    """Sorted rows (key asc, seq desc): several versions per key, tombstones, TTLs, a missing ts."""
    keys = sorted(draw(st.sets(st.binary(min_size=1, max_size=24), min_size=1, max_size=60)))
    with_ttl = version == FORMAT_V1 and draw(st.booleans())
    no_ts = version == FORMAT_V1 and draw(st.integers(0, 9)) == 0  # rows compacted from v0: no ts column
    seq = draw(st.integers(1, 2**40))
    rows = []
    for k in keys:
        for _ in range(draw(st.integers(1, 3))):
            value = draw(st.one_of(st.none(), st.binary(max_size=300)))
            exp = None
            if with_ttl and draw(st.booleans()):
                exp = draw(st.integers(-(2**62), 2**62))
            ts = None if no_ts else draw(st.integers(-(2**62), 2**62))
            if version == FORMAT_V0:
                ts = draw(st.one_of(st.none(), st.integers(0, 2**40)))
            rows.append((k, seq, ts, exp, value))
            seq += 1
    # seq descending within a key: renumber each key's versions from the top down
    out = []
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0] == rows[i][0]:
            j += 1
        group = rows[i:j]
        seqs = sorted((r[1] for r in group), reverse=True)
        out += [(r[0], s, r[2], r[3], r[4]) for r, s in zip(group, seqs, strict=True)]
        i = j
    return out


def _write(path: str, rows: list[tuple], version: int, block_bytes: int, bulk: bool = False) -> bytes:
    w = SstWriter(path, format_version=version, block_bytes=block_bytes, sync=False)
    if bulk:
        assert w.extend(rows)
    else:
        for r in rows:
            w.add(r)
    w.finish()
    with open(path, "rb") as f:
        return f.read()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), version=st.sampled_from([FORMAT_V0, FORMAT_V1]), block_bytes=st.sampled_from([64, 256, 4096]))
def test_fast_encoder_writes_the_generic_bytes(monkeypatch, data, version, block_bytes):
    rows = data.draw(sst_rows(version))
    with tempfile.TemporaryDirectory() as d:
        fast = _write(os.path.join(d, "fast.sst"), rows, version, block_bytes)
        bulk = _write(os.path.join(d, "bulk.sst"), rows, version, block_bytes, bulk=True)
        with monkeypatch.context() as m:
            m.setattr(sst_mod, "_FAST_LAYOUTS", ())  # every row through RowCodec.encode_parts
            generic = _write(os.path.join(d, "generic.sst"), rows, version, block_bytes)
        assert fast == generic
        assert bulk == generic
        with SstReader(os.path.join(d, "fast.sst")) as r:
            info = r.info
            back = list(r)
    # the metadata computed column by column, against the rows
    assert info.num_rows == len(rows)
    assert info.num_tombstones == sum(r[4] is None for r in rows)
    assert info.num_expiring == sum(r[3] is not None for r in rows)
    assert info.key_bytes == sum(len(r[0]) for r in rows)
    assert info.value_bytes == sum(len(r[4]) for r in rows if r[4] is not None)
    exps = [r[3] for r in rows if r[3] is not None]
    assert (info.min_expire_ts, info.max_expire_ts) == ((min(exps), max(exps)) if exps else (None, None))
    tss = [r[2] for r in rows if r[2] is not None]
    if version == FORMAT_V1 and len(tss) < len(rows):
        assert (info.min_ts, info.max_ts) == (None, None)
    else:
        assert (info.min_ts, info.max_ts) == ((min(tss), max(tss)) if tss else (None, None))
    assert (info.first_key, info.last_key) == (rows[0][0], rows[-1][0])
    if version == FORMAT_V1:
        assert (info.min_seq, info.max_seq) == (min(r[1] for r in rows), max(r[1] for r in rows))
        assert [(r[0], r[1], r[3], r[4]) for r in back] == [(r[0], r[1], r[3], r[4]) for r in rows]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.sets(st.binary(min_size=1, max_size=20), min_size=0, max_size=1500),
    bits=st.sampled_from([1, 3, 10, 16]),
)
def test_numpy_bloom_sets_the_same_bits_as_the_loop(monkeypatch, keys, bits):
    keys = sorted(keys)
    with monkeypatch.context() as m:
        m.setattr(bloom, "_NUMPY_MIN_KEYS", 0)
        vectorised = bloom.build(keys, bits)
    with monkeypatch.context() as m:
        m.setattr(bloom, "_NUMPY_MIN_KEYS", 10**9)
        loop = bloom.build(keys, bits)
    assert vectorised == loop
    f = bloom.BloomFilter(vectorised)
    assert all(f.may_contain(k) for k in keys)


def test_extend_with_a_limit_adds_nothing_when_the_rows_would_reach_it(tmp_path):
    w = SstWriter(tmp_path / "a.sst", sync=False)
    rows = [(b"k%03d" % i, i + 1, TS0, None, b"v" * 10) for i in range(10)]
    assert w.extend(rows[:5], limit=10_000)
    before = w.estimated_size
    assert not w.extend(rows[5:], limit=before + 1)
    assert len(w) == 5 and w.estimated_size == before
    assert w.extend(rows[5:], limit=None)
    assert len(w) == 10


@pytest.mark.parametrize(
    "rows, error",
    [
        ([(b"b", 2, TS0, None, b"x"), (b"a", 1, TS0, None, b"x")], ValueError),  # out of order
        ([(b"a", 1, TS0, None, b"x"), (b"a", 2, TS0, None, b"x")], ValueError),  # seq ascending
        ([(b"", 1, TS0, None, b"x")], ValueError),  # empty key
        ([(b"a" * (MAX_KEY_LEN + 1), 1, TS0, None, b"x")], ValueError),
        ([("a", 1, TS0, None, b"x")], TypeError),  # str key
        ([(b"a", 1, TS0, None, "x")], TypeError),  # str value
    ],
)
def test_extend_refuses_what_add_refuses(tmp_path, rows, error):
    for add in ("add", "extend"):
        w = SstWriter(tmp_path / f"{add}.sst", sync=False)
        with pytest.raises(error):
            if add == "add":
                for r in rows:
                    w.add(r)
            else:
                w.extend(rows)


def test_extend_takes_older_versions_of_a_key_through_add(tmp_path):
    rows = [(b"a", 5, TS0, None, b"new"), (b"a", 3, TS0, None, None), (b"b", 4, TS0, None, b"x")]
    w = SstWriter(tmp_path / "a.sst", sync=False)
    assert w.extend(rows)
    info = w.finish()
    assert info.num_rows == 3 and info.num_tombstones == 1
    with SstReader(tmp_path / "a.sst") as r:
        assert [row[:2] for row in r] == [(b"a", 5), (b"a", 3), (b"b", 4)]


def test_v0_writer_refuses_expire_ts_on_both_paths(tmp_path):
    row = (b"a", 1, None, TS0, b"x")
    with pytest.raises(ValueError, match="cannot store expire_ts"):
        SstWriter(tmp_path / "a.sst", format_version=FORMAT_V0, sync=False).add(row)
    with pytest.raises(ValueError, match="cannot store expire_ts"):
        SstWriter(tmp_path / "b.sst", format_version=FORMAT_V0, sync=False).extend([row])

"""The SST writer's column path (`SstWriter.extend_columns`, `BlockEncoder.encode_numpy`,
`compaction.merge.SstOutput.write_columns`) writes, byte for byte, the files the row path writes
(`SstWriter.add`, `SstOutput.write`) from the same rows.

The column path is what the bulk load's tasks use for plain slices: keys, values and expire_ts as
columns, seq and ts one value for every row. Rows whose keys all have one length are encoded with numpy
from `_NUMPY_MIN_ROWS` rows on; the tests lower that bound so small examples take that encoder too, and
compare it with the row path at every bound (numpy, the column-wise `encode_fast`, the generic
`RowCodec.encode_parts`).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import formats.sst as sst_mod
from compaction.merge import OutputSpec, SstOutput
from formats.row import FORMAT_V0, FORMAT_V1, MAX_KEY_LEN
from formats.sst import SstReader, SstWriter
from formats.sst_blocks import BlockEncoder

TS0 = 1_700_000_000_000
I64 = st.integers(-(2**63), 2**63 - 1)

settings_ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def column_rows(draw, version: int = FORMAT_V1) -> list[tuple]:
    """Rows with distinct, sorted keys (of one length in most examples, as the bulk load's usually are),
    values of one length or of many, tombstones, TTLs, and seq/ts/expire_ts either one value for every
    row or drawn per row, at the edges of their fields."""
    one_len = draw(st.booleans()) or draw(st.booleans())
    width = draw(st.integers(1, 20))
    key = st.binary(min_size=width, max_size=width) if one_len else st.binary(min_size=1, max_size=24)
    keys = sorted(draw(st.sets(key, min_size=1, max_size=120)))
    n = len(keys)
    vwidth = draw(st.integers(0, 120))
    value = draw(
        st.sampled_from(
            [
                st.binary(min_size=vwidth, max_size=vwidth),
                st.binary(max_size=200),
                st.one_of(st.none(), st.binary(min_size=vwidth, max_size=vwidth)),
                st.one_of(st.none(), st.binary(max_size=50)),
            ]
        )
    )
    values = [draw(value) for _ in range(n)]

    def column(values_st):
        if draw(st.booleans()):
            v = draw(values_st)
            return [v] * n
        return [draw(values_st) for _ in range(n)]

    seqs = column(st.one_of(st.integers(0, 2**40), st.sampled_from([0, 2**64 - 1])))
    tss = column(st.one_of(st.integers(TS0, TS0 + 10**6), I64))
    if version == FORMAT_V0:
        exps = [None] * n
        tss = [None] * n
    else:
        exps = column(st.one_of(st.none(), st.integers(TS0, TS0 + 10**6), I64))
    return list(zip(keys, seqs, tss, exps, values, strict=True))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _by_rows(path: str, rows: list[tuple], **kw) -> bytes:
    w = SstWriter(path, sync=False, **kw)
    for r in rows:
        w.add(r)
    w.finish()
    return _read(path)


def _value_array(values: list) -> object:
    """`values` as `extend_columns` also takes them when they have one length (w > 0, no tombstone): a
    numpy array of dtype V<w>; else `values` itself."""
    if None in values or len(set(map(len, values))) != 1 or not values[0]:
        return values
    return np.frombuffer(b"".join(values), f"V{len(values[0])}")


def _by_columns(path: str, rows: list[tuple], cuts: list[int], scalars: bool, **kw) -> bytes:
    """`rows` through `extend_columns`, in pieces cut at `cuts`; a column of one value passed as that
    value, and values of one length as a numpy array, when `scalars`."""
    w = SstWriter(path, sync=False, **kw)
    bounds = [0, *sorted(set(cuts)), len(rows)]
    for a, b in zip(bounds, bounds[1:], strict=False):
        if a >= b:
            continue
        keys, seqs, tss, exps, values = (list(c) for c in zip(*rows[a:b], strict=True))
        cols = []
        for c in (seqs, tss, exps):
            cols.append(c[0] if scalars and c.count(c[0]) == len(c) else c)
        assert w.extend_columns(keys, cols[0], cols[1], cols[2], _value_array(values) if scalars else values)
    w.finish()
    return _read(path)


@settings_
@given(
    data=st.data(),
    version=st.sampled_from([FORMAT_V1, FORMAT_V1, FORMAT_V0]),
    block_bytes=st.sampled_from([64, 256, 4096]),
    compression=st.sampled_from([None, "zlib", "zstd", "lz4"]),
    scalars=st.booleans(),
)
def test_columns_write_the_bytes_rows_write(monkeypatch, data, version, block_bytes, compression, scalars):
    rows = data.draw(column_rows(version))
    cuts = data.draw(st.lists(st.integers(0, len(rows)), max_size=3))
    kw = {"format_version": version, "block_bytes": block_bytes, "compression": compression}
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for bound in (1, 10**9):  # the numpy encoder for every key-length-uniform SST, then for none
            monkeypatch.setattr(sst_mod, "_NUMPY_MIN_ROWS", bound)
            files["rows", bound] = _by_rows(os.path.join(d, f"rows{bound}.sst"), rows, **kw)
            files["cols", bound] = _by_columns(os.path.join(d, f"cols{bound}.sst"), rows, cuts, scalars, **kw)
        monkeypatch.setattr(sst_mod, "_FAST_LAYOUTS", ())  # every row through RowCodec.encode_parts
        generic = _by_rows(os.path.join(d, "generic.sst"), rows, **kw)
        assert all(f == generic for f in files.values()), sorted(k for k, f in files.items() if f != generic)
        with SstReader(os.path.join(d, "generic.sst")) as r:
            assert r.info.num_rows == len(rows)


@settings_
@given(
    data=st.data(),
    target=st.sampled_from([None, 1, 200, 2000]),
    scalars=st.booleans(),
)
def test_output_columns_cut_the_files_rows_cut(monkeypatch, data, target, scalars):
    """`SstOutput.write_columns` makes the files `SstOutput.write` makes: the same cuts between them
    (older versions of a key included: those go through `add`), the same bytes in each."""
    rows = data.draw(column_rows())
    if data.draw(st.booleans()):  # some keys with an older version (seq descending): never split
        older = data.draw(st.sets(st.integers(0, len(rows) - 1), max_size=5))
        rows = [v for i, r in enumerate(rows) for v in ([r, (r[0], r[1] - 1, *r[2:])] if i in older and r[1] else [r])]
    monkeypatch.setattr(sst_mod, "_NUMPY_MIN_ROWS", data.draw(st.sampled_from([1, 10**9])))
    with tempfile.TemporaryDirectory() as d:
        got = {}
        for how in ("rows", "cols"):
            os.mkdir(os.path.join(d, how))
            spec = OutputSpec(os.path.join(d, how), "out", target_bytes=target, sync=False, block_bytes=256)
            out = SstOutput(spec, TS0)
            if how == "rows":
                outputs = out.write(iter(rows))
            else:
                keys, seqs, tss, exps, values = (list(c) for c in zip(*rows, strict=True))
                if scalars:
                    seqs, tss, exps = (c[0] if c.count(c[0]) == len(c) else c for c in (seqs, tss, exps))
                    values = _value_array(values)
                outputs = out.write_columns(keys, seqs, tss, exps, values)
            got[how] = [(name, info, _read(os.path.join(d, how, name))) for name, info in outputs]
        assert got["cols"] == got["rows"]


def test_extend_columns_with_a_limit_adds_nothing_when_the_rows_would_reach_it(tmp_path):
    w = SstWriter(tmp_path / "a.sst", sync=False)
    keys = [b"k%03d" % i for i in range(10)]
    assert w.extend_columns(keys[:5], 1, TS0, None, [b"v" * 10] * 5, limit=10_000)
    before = w.estimated_size
    assert not w.extend_columns(keys[5:], 1, TS0, None, [b"v" * 10] * 5, limit=before + 1)
    assert len(w) == 5 and w.estimated_size == before
    assert w.extend_columns(keys[5:], 1, TS0, None, [b"v" * 10] * 5)
    assert len(w) == 10
    assert w.finish().num_rows == 10


@pytest.mark.parametrize("arrays", ["", "aa", "al", "la"])
def test_rows_and_columns_mixed_keep_their_order(tmp_path, arrays):
    """`add`, `extend` and `extend_columns` (values as lists or arrays, `arrays` says which of the two
    column calls gets an array) in one writer: the rows in the order they were added."""
    rows = [(b"k%03d" % i, 9 - i % 3, TS0, None if i % 2 else TS0 + i, b"v%02d" % i) for i in range(16)]
    w = SstWriter(tmp_path / "mixed.sst", sync=False)
    w.add(rows[0])
    w.extend_columns(*(list(c) for c in zip(*rows[1:4], strict=True)))
    w.extend(rows[4:6])
    for k, (a, b) in enumerate([(6, 10), (10, 16)]):
        keys, seqs, tss, exps, values = (list(c) for c in zip(*rows[a:b], strict=True))
        if arrays[k : k + 1] == "a":
            values = _value_array(values)
        w.extend_columns(keys, seqs, tss, exps, values)
    w.finish()
    assert _read(tmp_path / "mixed.sst") == _by_rows(str(tmp_path / "rows.sst"), rows)


@pytest.mark.parametrize(
    "cols, error",
    [
        (([b"b", b"a"], 1, TS0, None, [b"x", b"x"]), ValueError),  # out of order
        (([b"a", b"a"], [1, 2], TS0, None, [b"x", b"x"]), ValueError),  # seq ascending
        (([b""], 1, TS0, None, [b"x"]), ValueError),  # empty key
        (([b"a" * (MAX_KEY_LEN + 1)], 1, TS0, None, [b"x"]), ValueError),
        ((["a"], 1, TS0, None, [b"x"]), TypeError),  # str key
        (([b"a"], 1, TS0, None, ["x"]), TypeError),  # str value
        (([b"a", b"b"], 1, TS0, None, [b"x"]), ValueError),  # columns of unequal length
    ],
)
def test_extend_columns_refuses_what_add_refuses(tmp_path, cols, error):
    w = SstWriter(tmp_path / "a.sst", sync=False)
    with pytest.raises(error):
        w.extend_columns(*cols)


def test_v0_refuses_expire_ts_in_columns(tmp_path):
    w = SstWriter(tmp_path / "a.sst", format_version=FORMAT_V0, sync=False)
    with pytest.raises(ValueError, match="cannot store expire_ts"):
        w.extend_columns([b"a"], None, None, TS0, [b"x"])


def test_numbers_out_of_their_fields_fail_as_on_the_row_path(tmp_path, monkeypatch):
    monkeypatch.setattr(sst_mod, "_NUMPY_MIN_ROWS", 1)
    for how in ("rows", "cols"):
        w = SstWriter(tmp_path / f"{how}.sst", sync=False)
        rows = [(b"a", 1, 2**63, None, b"x"), (b"b", 1, TS0, None, b"y")]
        if how == "rows":
            for r in rows:
                w.add(r)
        else:
            w.extend_columns(*(list(c) for c in zip(*rows, strict=True)))
        with pytest.raises(Exception) as e:
            w.finish()
        assert type(e.value).__name__ == "error"  # struct.error, from encode_fast on both paths


@pytest.mark.parametrize("values", ["fixed", "array", "varied", "tombstones"])
def test_a_bulk_shaped_sst_takes_the_numpy_encoder(tmp_path, monkeypatch, values):
    """Keys of one length and 600 rows (over `_NUMPY_MIN_ROWS`): the numpy encoder writes the file, and
    it is the one the row path writes without it."""
    n = 600
    keys = [b"%016d" % (i * 7) for i in range(n)]
    vals: list = {
        "fixed": [b"%0100d" % i for i in range(n)],
        "array": [b"%0100d" % i for i in range(n)],
        "varied": [b"v" * (i % 37) for i in range(n)],
        "tombstones": [None if i % 5 == 0 else b"%0100d" % i for i in range(n)],
    }[values]
    exps = [None if v is None else TS0 + 60_000 for v in vals]
    taken = []
    real = BlockEncoder.encode_numpy

    def spy(self, *a):
        out = real(self, *a)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(BlockEncoder, "encode_numpy", spy)
    w = SstWriter(tmp_path / "cols.sst", sync=False)
    assert w.extend_columns(keys, 42, TS0, exps, _value_array(vals) if values == "array" else vals)
    w.finish()
    assert taken == [True]
    monkeypatch.setattr(sst_mod, "_NUMPY_MIN_ROWS", 10**9)
    rows = list(zip(keys, [42] * n, [TS0] * n, exps, vals, strict=True))
    assert _read(tmp_path / "cols.sst") == _by_rows(str(tmp_path / "rows.sst"), rows)

"""The forward scan's column path (SST blocks as numpy `RowArray`s, a round resolved in numpy) returns
exactly what the row path returns.

Keys and values have one width (as db_bench's do), so SSTs decode into arrays; keys hold NUL and 0xFF
bytes. The databases spread rows over the memtable, L0 SSTs and sorted runs, with overwrites, deletes,
TTLs and a snapshot, and the batch sizes are cut so a scan takes many rounds. The reference is the same
scan with the column decode switched off (every block decoded into rows), and the model.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from compaction import stream
from formats import sst_reader
from formats.row import RowCodec
from lsm import readpath

T0 = 1_700_000_000_000
KEYS = [bytes([a, b, c]) for a, b, c in ((0, 0, 0), (0, 0, 1), (0, 1, 0), (7, 0, 0), (7, 0, 255), (255, 0, 0), (255, 255, 0), (255, 255, 255))]
KEYS += [b"k%02d" % i for i in range(16)]

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from([5, 40]))),
        st.tuples(st.just("delete"), st.sampled_from(KEYS), st.none()),
        st.tuples(st.just("flush"), st.none(), st.none()),
        st.tuples(st.just("compact"), st.none(), st.none()),
        st.tuples(st.just("tick"), st.none(), st.none()),
    ),
    min_size=1,
    max_size=80,
)


EXAMPLES = itertools.count()  # names a fresh root for each example


def row_path_scans(db, scans) -> list:
    """`scans` (callables on db) with the column decode off: every SST block becomes row tuples."""
    real = RowCodec.rows_array
    RowCodec.rows_array = lambda self, buf: None  # type: ignore[method-assign]
    try:
        return [list(s()) for s in scans]
    finally:
        RowCodec.rows_array = real  # type: ignore[method-assign]


# up to 80 operations with flushes and compactions an example: on the directory and the memory store
# (the object store's reads); S3 would add only its HTTP time, and the fixed shapes below run there too
@pytest.mark.parametrize("backend", ["local", "memory"])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=ops,
    batch_rows=st.sampled_from([1, 3, 1024]),
    group_rows=st.sampled_from([1, 4, 2048]),
    snap_at=st.integers(0, 80),
    odd_value_at=st.integers(0, 120),
    flush_at_end=st.booleans(),
)
def test_the_column_scan_returns_what_the_row_scan_returns(
    new_root, open_db, monkeypatch, ops, batch_rows, group_rows, snap_at, odd_value_at, flush_at_end
):
    monkeypatch.setattr(stream, "_BATCH_ROWS", batch_rows)
    monkeypatch.setattr(sst_reader, "GROUP_ROWS", group_rows)
    clock = lsm.ManualClock(T0)
    model: dict[bytes, tuple[bytes | None, int | None]] = {}
    snap = snap_model = None
    with open_db(clock, path=new_root(f"db{next(EXAMPLES)}"), memtable_bytes=1024, block_bytes=64) as db:
        for i, (op, key, ttl) in enumerate(ops):
            if i == snap_at:
                snap, snap_model = db.snapshot(), dict(model)
            if op == "put":
                value = b"v%03d" % i if i != odd_value_at else b"odd"  # one value of another width
                db.put(key, value, ttl=ttl if ttl is not None else lsm.NO_TTL)
                model[key] = (value, None if ttl is None else clock.now() + ttl)
            elif op == "delete":
                db.delete(key)
                model[key] = (None, None)
            elif op == "flush":
                db.flush()
            elif op == "compact":
                db.compact()
            else:
                clock.advance(20)
        if flush_at_end:  # no memtable rows: rounds made only of SST arrays
            db.flush()
        now = clock.now()
        scans = [
            lambda: db.scan(),
            lambda: db.scan(KEYS[3], b"k07"),
            lambda: db.scan(options=lsm.ReadOptions(now=T0)),  # nothing expired yet
        ]
        # expiry judged at other times, on and next to rows' expire_ts (puts at ticks of 20, TTLs 5 and 40)
        scans += [lambda d=d: db.scan(options=lsm.ReadOptions(now=now - d)) for d in (1, 5, 6, 15, 20, 35)]
        if snap is not None:
            scans.append(lambda: snap.scan())
        got = [list(s()) for s in scans]
        assert got == row_path_scans(db, scans)
        want = [(k, v) for k, (v, exp) in sorted(model.items()) if v is not None and (exp is None or now <= exp)]
        assert got[0] == want
        if snap is not None:
            snap_want = [
                (k, v) for k, (v, exp) in sorted(snap_model.items()) if v is not None and (exp is None or now <= exp)
            ]
            assert got[-1] == snap_want
            snap.release()


def bench_rows(backend: str) -> int:
    """Rows of db_bench's shape a test writes: a third on S3, where the dozen flushes and the compaction
    of the full count are HTTP time (still several SSTs of many blocks, so rounds of many arrays)."""
    return 1000 if backend == "s3" else 3000


def _bench_shape(db, n: int) -> dict[bytes, bytes]:
    """db_bench's rows (16-byte keys, 100-byte values, overwrites) over 3 L0 SSTs and a run; returns the
    model."""
    model = {}
    for seed in (1, 2):
        r = random.Random(seed)
        for _ in range(n):
            k, v = b"%016d" % r.randrange(n), b"%0100d" % r.randrange(10**6)
            db.put(k, v)
            model[k] = v
    db.flush()
    db.compact()
    db.put(b"%016d" % 5, b"x" * 100)
    model[b"%016d" % 5] = b"x" * 100
    db.flush()  # one more L0 SST (the compaction took the others)
    return model


def _spy(monkeypatch, name: str) -> list:
    calls: list = []
    real = getattr(readpath, name)

    def spy(pieces, *args):
        calls.append(len(pieces))
        return real(pieces, *args)

    monkeypatch.setattr(readpath, name, spy)
    return calls


def test_the_bench_shape_is_resolved_in_numpy(open_db, backend, monkeypatch):
    """Fixed-width keys and values over L0 SSTs and a run: every round of the scan goes through
    `_array_pairs` and the scan gives what the row path gives."""
    in_numpy = _spy(monkeypatch, "_array_pairs")
    by_dict = _spy(monkeypatch, "_dict_pairs")
    with open_db(memtable_bytes=64 << 10, background_flush=False) as db:
        model = _bench_shape(db, bench_rows(backend))
        got = list(db.scan())
        assert in_numpy and max(in_numpy) > 1 and not by_dict
        assert got == row_path_scans(db, [db.scan])[0] == sorted(model.items())


def test_memtable_rows_and_tombstones_join_the_arrays_by_dict(open_db, backend, monkeypatch):
    """The same SSTs with puts and deletes left in the memtable: rounds that mix row lists and arrays are
    resolved by `_dict_pairs`, newest version first, deletes hiding the SSTs' rows."""
    by_dict = _spy(monkeypatch, "_dict_pairs")
    with open_db(memtable_bytes=8 << 20, background_flush=False) as db:
        n = bench_rows(backend)
        model = _bench_shape(db, n)
        r = random.Random(3)
        for i in range(300):
            k = b"%016d" % r.randrange(n)
            if i % 3:
                db.put(k, b"m%d" % i)
                model[k] = b"m%d" % i
            else:
                db.delete(k)
                model.pop(k, None)
        got = list(db.scan())
        assert by_dict
        assert got == row_path_scans(db, [db.scan])[0] == sorted(model.items())


def test_expiry_and_snapshots_in_numpy_match_the_row_path(open_db, monkeypatch):
    """Rounds made only of SST arrays judge seq and expire_ts in numpy: a row is shown through its
    expire_ts and hidden one ms later, an expired newest version hides the older one, and rows newer
    than a snapshot do not exist for it."""
    in_numpy = _spy(monkeypatch, "_array_pairs")
    clock = lsm.ManualClock(T0)
    with open_db(clock, background_flush=False) as db:
        for i in range(40):
            db.put(b"k%03d" % i, b"old%03d" % i)
        db.flush()
        snap = db.snapshot()
        for i in range(0, 40, 2):
            db.put(b"k%03d" % i, b"new%03d" % i, ttl=10 if i % 4 else lsm.NO_TTL)
        db.flush()
        exp = T0 + 10
        scans = [lambda t=t: db.scan(options=lsm.ReadOptions(now=t)) for t in (exp - 1, exp, exp + 1)]
        scans.append(snap.scan)
        got = [list(s()) for s in scans]
        assert in_numpy
        assert got == row_path_scans(db, scans)
        at_exp = dict(got[1])
        assert at_exp[b"k002"] == b"new002" and at_exp[b"k004"] == b"new004"
        after = dict(got[2])
        assert b"k002" not in after and after[b"k004"] == b"new004" and after[b"k001"] == b"old001"
        assert got[3] == [(b"k%03d" % i, b"old%03d" % i) for i in range(40)]
        snap.release()

"""db.changes(since=TIME | seq=N): the keys whose latest version is newer than a point.

* ``changes(seq=N)``: one entry per key whose newest version has seq > N — that version, a delete (or an
  expired row) as value None — ordered by seq (keys of one batch by key), checked against a model.
* SSTs whose max_seq is not above the point are not read (a spy on SstReader.iter records the files).
* ``changes(since=T)`` maps T through the decaying time bins: it errs towards too many changes, never too
  few; a time more than 3 hours after the newest bin gives nothing; a time before everything gives
  everything. Times are epoch ms or RFC 3339 strings.
"""

from __future__ import annotations

import itertools
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from formats.sst import SstReader
from tools.render import rfc3339

T0 = 1_700_000_000_000
HOUR = 3_600_000
BIN = 3 * HOUR
KEYS = [b"k%d" % i for i in range(6)]


EXAMPLES = itertools.count()  # names a fresh root for each example of a property test


@pytest.fixture
def db_defaults():
    return {"time_seq_min_time": 0}


def bin_start(ms: int) -> int:
    return ms - ms % BIN


@pytest.fixture
def spy(monkeypatch):
    """The SST files whose rows are iterated, by name, in call order."""
    read: list[str] = []
    orig = SstReader.iter

    def iter_spy(self, *a, **kw):
        read.append(os.path.basename(self.path))
        return orig(self, *a, **kw)

    monkeypatch.setattr(SstReader, "iter", iter_spy)
    return read


# -- changes(seq=N) -----------------------------------------------------------------------------------
def test_changes_since_a_seq_by_hand(open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        assert db.put(b"a", b"1") == 1
        assert db.put(b"b", b"1") == 2
        clock.advance(10)
        assert db.put(b"a", b"2") == 3
        assert db.delete(b"b") == 4
        assert db.write(lsm.WriteBatch().put(b"d", b"x").put(b"c", b"y")) == 5
        assert db.put(b"e", b"1", ttl=5) == 6
        clock.advance(6)  # e expired
        t = T0 + 10
        assert list(db.changes(seq=0)) == [
            (3, b"a", b"2", t),
            (4, b"b", None, t),
            (5, b"c", b"y", t),
            (5, b"d", b"x", t),
            (6, b"e", None, t),
        ]
        assert list(db.changes(seq=4)) == [(5, b"c", b"y", t), (5, b"d", b"x", t), (6, b"e", None, t)]
        assert list(db.changes(seq=6)) == []
        assert list(db.changes(seq=100)) == []
        with pytest.raises(ValueError, match="exactly one"):
            db.changes()
        with pytest.raises(ValueError, match="exactly one"):
            db.changes(since=T0, seq=1)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), st.sampled_from([None, None, 1_000, 100_000])),
        st.tuples(st.just("del"), st.sampled_from(KEYS)),
        st.tuples(st.just("batch"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True)),
        st.tuples(st.just("adv"), st.integers(0, 3_000)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("compact")),
    ),
    min_size=1,
    max_size=40,
)


# up to 40 operations with flushes and full compactions an example: on the directory and the memory store
# (the object store's code paths); S3 would add only its HTTP time, and the fixed cases run there too
@pytest.mark.parametrize("backend", ["local", "memory"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, points=st.lists(st.integers(0, 60), min_size=1, max_size=6))
def test_changes_since_a_seq_match_a_model(new_root, open_db, ops, points):
    clock = lsm.ManualClock(T0)
    latest: dict[bytes, tuple[int, int, bytes | None, int | None]] = {}  # key -> seq, ts, value, exp
    maybe_collected: set[bytes] = set()  # deleted or expired keys a full compaction may have removed
    db = open_db(clock, path=new_root(f"db{next(EXAMPLES)}"), target_sst_bytes=1024)
    try:
        for i, op in enumerate(ops):
            if op[0] == "put":
                seq = db.put(op[1], b"v%d" % i, ttl=op[2])
                latest[op[1]] = (
                    seq,
                    clock.now(),
                    b"v%d" % i,
                    None if op[2] is None else clock.now() + op[2],
                )
                maybe_collected.discard(op[1])
            elif op[0] == "del":
                latest[op[1]] = (db.delete(op[1]), clock.now(), None, None)
                maybe_collected.discard(op[1])
            elif op[0] == "batch":
                b = lsm.WriteBatch()
                for k in op[1]:
                    b.put(k, b"b%d" % i)
                seq = db.write(b)
                for k in op[1]:
                    latest[k] = (seq, clock.now(), b"b%d" % i, None)
                    maybe_collected.discard(k)
            elif op[0] == "adv":
                clock.advance(op[1])
            elif op[0] == "flush":
                db.flush()
            else:
                db.flush()
                now = clock.now()
                maybe_collected |= {
                    k for k, (_s, _t, v, e) in latest.items() if v is None or (e is not None and now > e)
                }
                db.compact(full=True)
        now = clock.now()
        for n in sorted({p % (db.seq + 2) for p in points} | {0}):
            want = sorted(
                (s, k, None if e is not None and now > e else v, t)
                for k, (s, t, v, e) in latest.items()
                if s > n
            )
            got = list(db.changes(seq=n))
            assert [c[0] for c in got] == sorted(c[0] for c in got), "ordered by seq"
            # a delete whose tombstone a full compaction removed at the oldest run is not reported
            assert [c for c in want if c[1] not in maybe_collected or c in got] == got, n
            assert all(c[2] is None for c in want if c not in got)
    finally:
        db.close()


def test_ssts_not_newer_than_the_point_are_not_read(open_db, spy):
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        for i in range(5):
            db.put(b"old%d" % i, b"x")  # seqs 1..5
        db.flush()
        for i in range(5):
            db.put(b"new%d" % i, b"y")  # seqs 6..10
        db.flush()
        db.put(b"mem", b"z")  # seq 11, in the memtable
        older, newer = sorted(db.manifest.l0, key=lambda e: e.info.max_seq)
        assert (older.info.max_seq, newer.info.max_seq) == (5, 10)
        spy.clear()
        assert [c[1] for c in db.changes(seq=5)] == [b"new%d" % i for i in range(5)] + [b"mem"]
        assert spy == [newer.name]
        spy.clear()
        assert [c[0] for c in db.changes(seq=10)] == [11]
        assert spy == []
        spy.clear()
        assert len(list(db.changes(seq=4))) == 7
        assert sorted(spy) == sorted([older.name, newer.name])


def test_ssts_of_a_sorted_run_are_skipped_one_by_one(open_db, spy):
    clock = lsm.ManualClock(T0)
    with open_db(clock, target_sst_bytes=1024) as db:
        for i in range(40):
            db.put(b"a%03d" % i, b"v" * 100)  # seqs 1..40, key order = seq order
        db.flush()
        db.compact(full=True)
        (run,) = db.manifest.runs
        assert len(run.ssts) >= 3
        by_seq = sorted(run.ssts, key=lambda e: e.info.max_seq)
        point = by_seq[-2].info.max_seq  # only the last SST holds newer rows
        spy.clear()
        got = list(db.changes(seq=point))
        assert [c[0] for c in got] == list(range(point + 1, 41))
        assert spy == [by_seq[-1].name]


# -- changes(since=TIME) ---------------------------------------------------------------------------------
def three_bins(db: lsm.DB, clock: lsm.ManualClock) -> list[tuple[int, list[bytes]]]:
    """Writes in three 3-hour bins, 4h apart: [(bin start ms, keys written in it)]."""
    out = []
    for b in range(3):
        keys = [b"b%d-%d" % (b, i) for i in range(3)]
        for k in keys:
            db.put(k, b"v")
            clock.advance(60_000)
        out.append((bin_start(clock.now()), keys))
        clock.advance(4 * HOUR)
    return out


def test_changes_since_a_time(open_db):
    clock = lsm.ManualClock(T0 + 30 * 60_000)  # 1h30 into a bin
    with open_db(clock) as db:
        bins = three_bins(db, clock)
        (b0, k0), (b1, k1), (b2, k2) = bins
        assert [t for t, _n in db.time_seq_histogram()] == [rfc3339(b)[:19] + "Z" for b in (b0, b1, b2)]

        def keys(since) -> list[bytes]:
            return [c[1] for c in db.changes(since=since)]

        everything = k0 + k1 + k2
        assert keys(0) == everything
        assert keys(b0 - 1) == everything  # before everything
        assert keys("1970-01-01T00:00:00Z") == everything
        assert keys(b1) == k1 + k2
        assert keys(rfc3339(b1)) == k1 + k2
        assert keys(b1 + 2 * HOUR) == k1 + k2  # errs towards too many: the whole bin of the time
        assert keys(b2) == k2
        assert keys(b2 + BIN) == k2  # up to 3 hours after the newest bin: still that bin
        assert keys(b2 + BIN + 1_000) == []  # later: nothing happened since
        assert keys(b2 + 1000 * HOUR) == []
        assert keys("2100-01-01T00:00:00+00:00") == []
        # the answer is the seq-based one for the bin's first seq
        assert list(db.changes(since=b1)) == list(db.changes(seq=len(k0)))
        with pytest.raises(ValueError, match="RFC 3339"):
            db.changes(since="last tuesday")


def test_changes_since_a_time_after_reset_and_reopen(open_db):
    clock = lsm.ManualClock(T0)
    db = open_db(clock)
    bins = three_bins(db, clock)
    db.flush()
    db.close()
    db = open_db(clock)
    try:
        (_b0, _k0), (b1, k1), (b2, k2) = bins
        assert [c[1] for c in db.changes(since=b1)] == k1 + k2  # the bins came back from the manifest
        db.reset_time_seq()
        assert db.time_seq_histogram() == []
        # no bins: every time maps to the beginning (too many, never too few)
        assert [c[1] for c in db.changes(since=b2 + BIN + 1_000)] == [k for _b, ks in bins for k in ks]
        clock.advance(HOUR)
        db.put(b"after", b"reset")
        assert [c[1] for c in db.changes(since=clock.now())] == [b"after"]
    finally:
        db.close()
    with open_db(clock) as db:  # the reset was committed
        assert len(db.time_seq_histogram()) == 2  # 1970 (before tracking) and the new bin


def test_times_before_time_seq_min_time_are_not_binned(open_db):
    clock = lsm.ManualClock(T0)  # 2023, before the default min time (2025-08-01)
    with open_db(clock, time_seq_min_time=lsm.DbOptions().time_seq_min_time) as db:
        db.put(b"a", b"1")
        clock.advance(4 * HOUR)
        db.put(b"b", b"1")
        assert db.time_seq_histogram() == []
        assert [c[1] for c in db.changes(since=clock.now())] == [b"a", b"b"]  # too many, never too few


# up to 120 writes an example: on the directory and the memory store, as the model test above
@pytest.mark.parametrize("backend", ["local", "memory"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(st.integers(0, 30 * HOUR), min_size=1, max_size=120),
    flushes=st.sets(st.integers(0, 119), max_size=4),
    probes=st.lists(st.integers(-HOUR, 200 * 24 * HOUR), min_size=1, max_size=8),
)
def test_changes_since_a_time_never_misses_a_change(new_root, open_db, steps, flushes, probes):
    """Whatever the roll-ups did to the bins, every key written at or after T is reported."""
    clock = lsm.ManualClock(T0)
    written: dict[bytes, tuple[int, int]] = {}
    db = open_db(clock, path=new_root(f"db{next(EXAMPLES)}"))
    try:
        for i, step in enumerate(steps):
            clock.advance(step)
            key = KEYS[i % len(KEYS)] + b"-%d" % (i % 9)
            written[key] = (db.put(key, b"%d" % i), clock.now())
            if i in flushes:
                db.flush()
        for p in probes:
            t = T0 + p
            got = list(db.changes(since=t))
            assert [c[0] for c in got] == sorted(c[0] for c in got)
            want = {k for k, (_s, ts) in written.items() if ts >= t}
            assert want <= {c[1] for c in got}, t
            for _seq, k, _v, _ts in got:
                assert written[k][0] == _seq  # the newest version, never an older one
    finally:
        db.close()


def test_changes_take_read_options(open_db):
    """ReadOptions: `now` judges expiry, `include_expired` keeps an expired row's value, and a snapshot
    ends the changes at its seq."""
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        db.put(b"a", b"1")
        db.put(b"t", b"x", ttl=1_000)
        snap = db.snapshot()
        db.put(b"a", b"2")
        clock.advance(5_000)
        assert list(db.changes(seq=0)) == [(2, b"t", None, T0), (3, b"a", b"2", T0)]
        assert list(db.changes(seq=0, options=lsm.ReadOptions(include_expired=True)))[0] == (2, b"t", b"x", T0)
        assert list(db.changes(seq=0, options=lsm.ReadOptions(now=T0 + 1_000)))[0] == (2, b"t", b"x", T0)
        with snap:
            assert list(db.changes(seq=0, options=lsm.ReadOptions(snapshot=snap, now=T0))) == [
                (1, b"a", b"1", T0),
                (2, b"t", b"x", T0),
            ]

"""The synchronous flush (DbOptions(background_flush=False)), the idle flush, and the purge bound they
give together with periodic compaction: on a ManualClock driven by one thread, with periodic compaction
P and writes that stop, every expired row and deleted key is gone from disk — SST files AND WAL
segments — by its expiry (or delete) + P + one driver step. On every backend (an object store's WAL
objects are looked at as a directory's segments are)."""

from __future__ import annotations

import random
import threading

import pytest

import lsm
from storage.ssts import open_sst
from tests import _store
from tests.lsm import _wal

T0 = 1_700_000_000_000


@pytest.fixture
def db_defaults():
    return {"background_flush": False}


def keys_on_disk(path, db: lsm.DB, seen: dict | None = None) -> set[bytes]:
    """Every key stored in any file under sst/ (referenced or not) or in any WAL segment.

    On an object store, of the WAL only the records replay would apply (above the manifest's last_seq):
    a flushed memtable's last records may share a WAL object with the next memtable (lsm/wal_object.py),
    live until that one is flushed, and flushed objects stay for the WAL's grace in wall time (at least
    15 s, docs/reliability.md "The WAL and a slow request"), which a bound on a ManualClock cannot
    cover. Replay skips those records, so the bound holds for what a reader or a reopen can see, not
    for those bytes."""
    keys: set[bytes] = set()
    seen = {} if seen is None else seen  # an SST never changes: `seen` keeps its keys by name
    for name in _store.names(path, "sst"):
        if name.endswith(".sst"):
            if name not in seen:
                try:
                    with open_sst(_store.path(path, "sst", name)) as r:
                        seen[name] = {row[0] for row in r}
                except FileNotFoundError:  # listed, then deleted (a compaction's retired input): gone
                    continue
            keys |= seen[name]
    return keys | {row[0] for row in wal_rows(path, db, seen)}


def wal_rows(path, db: lsm.DB, seen: dict | None = None) -> list[tuple]:
    """The rows of the WAL segments (objects) as `keys_on_disk` counts them: on an object store only
    the records above the manifest's last_seq. A WAL object is written once, so `seen` keeps its records
    by path (a directory's segment grows: read each time)."""
    appends = _store.store(path).storage.appends
    floor = -1 if appends else db.manifest.last_seq
    seen = {} if seen is None or appends else seen
    rows = []
    for _sid, p in _wal.segments(path):
        if p not in seen:
            try:
                seen[p] = _wal.records(path, p)[0]
            except FileNotFoundError:  # listed, then retired by a flush: gone
                continue
        rows += [row for rec in seen[p] if rec.seq > floor for row in rec.rows]
    return rows


def test_full_memtable_is_flushed_in_the_writing_thread(open_db):
    before = set(threading.enumerate())
    clock = lsm.ManualClock(T0)
    with open_db(clock, memtable_bytes=1024) as db:
        assert not [t for t in set(threading.enumerate()) - before if t.name == "lsm-flush"]
        n = 0
        while not db.manifest.l0:  # no waiting: the put that fills the memtable returns after the flush
            db.put(b"k%04d" % n, b"v" * 40)
            n += 1
        assert db.lsm_shape()["immutable_memtables"] == 0 and db.lsm_shape()["memtable_rows"] == 0
        with open_sst(db.sst_path(db.manifest.l0[0].name)) as r:
            assert r.info.num_rows == n
        assert all(db.get(b"k%04d" % i) == b"v" * 40 for i in range(n))
        db.put(b"tail", b"t")
        db.flush()
        assert len(db.manifest.l0) == 2
    with open_db(clock) as db:
        assert db.get(b"tail") == b"t" and db.get(b"k0000") == b"v" * 40


def test_idle_flush_waits_for_the_interval_then_empties_memtable_and_wal(open_db, db_root):
    clock = lsm.ManualClock(T0)
    with open_db(clock, periodic_compaction_interval=10_000) as db:
        db.put(b"a", b"1")
        clock.advance(5_000)
        db.put(b"b", b"2")  # the age is the oldest row's: "a"
        clock.set(T0 + 9_999)
        db.compact()
        assert db.manifest.l0 == () and db.lsm_shape()["memtable_rows"] == 2
        clock.set(T0 + 10_000)
        db.compact()
        assert len(db.manifest.l0) == 1 and db.lsm_shape()["memtable_rows"] == 0
        assert keys_on_disk(db_root, db) == {b"a", b"b"}  # in the SST only
        assert wal_rows(db_root, db) == []  # no row is left in a WAL
        assert db.get(b"a") == b"1"


def test_no_idle_flush_without_periodic_compaction(open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        db.put(b"a", b"1", ttl=5)
        clock.advance(10**9)
        db.compact()
        assert db.manifest.l0 == () and db.lsm_shape()["memtable_rows"] == 1


def test_idle_flush_with_the_flush_thread_and_background_compaction(open_db, db_root):
    """The default mode: the background compactor's poll (every P/4, at least 50 ms) does it."""
    clock = lsm.ManualClock(T0)
    db = open_db(clock, periodic_compaction_interval=200, background_compaction=True, background_flush=True)
    try:
        db.put(b"x", b"1", ttl=50)
        clock.advance(400)  # x expired 350 ms ago and its memtable is 400 ms old
        done = threading.Event()
        for _ in range(200):  # up to ~10 s of wall time for the poll
            shape = db.lsm_shape()  # wait for the frozen memtable's flush too, not only the freeze
            if (
                shape["memtable_rows"] == 0
                and shape["immutable_memtables"] == 0
                and not db.manifest.l0
                and not db.manifest.runs
                and db.purge_lag.count == 1
            ):
                done.set()
                break
            done.wait(0.05)
        assert done.is_set(), db.lsm_shape()
        assert b"x" not in keys_on_disk(db_root, db)
        assert db.purge_lag.count == 1 and db.purge_lag.max >= 350
    finally:
        db.close()


def drive(open_db, path, periodic: int | None, seed: int = 3) -> tuple[lsm.DB, list[str]]:
    """Writes for 2P, then quiet; db.compact() every STEP ms. Returns the DB and the bound violations
    seen at each step (rows that should be gone by then but were still on disk)."""
    P, STEP = 30_000, 2_000
    rng = random.Random(seed)
    clock = lsm.ManualClock(T0)
    db = open_db(clock, periodic_compaction_interval=periodic, memtable_bytes=4096, l0_compaction_threshold=3)
    gone_by: dict[bytes, int] = {}  # key -> time by which it must be off disk
    seen: dict = {}  # each SST's keys and WAL object's records once read (a GET each on S3, not one a step)
    plain: list[bytes] = []
    violations: list[str] = []
    n = 0
    end_writes = T0 + 2 * P
    end = end_writes + 90_000 + 2 * P
    t = T0
    while t <= end:
        if t < end_writes:
            for k in range(8):  # writes inside this step, at increasing times
                clock.set(t + k * (STEP // 8))
                key = b"r%05d" % n
                n += 1
                ttl = rng.choice([100, 2_000, 20_000, 90_000, None])
                if ttl is None:
                    db.put(key, b"v" * 20, ttl=lsm.NO_TTL)
                    plain.append(key)
                else:
                    db.put(key, b"v" * 20, ttl=ttl)
                    gone_by[key] = clock.now() + ttl + P + STEP
                if plain and rng.random() < 0.1:
                    victim = plain.pop(rng.randrange(len(plain)))
                    db.delete(victim)
                    gone_by[victim] = clock.now() + P + STEP
        clock.set(t)
        db.compact()
        if periodic is not None or t >= end - STEP:
            on_disk = keys_on_disk(path, db, seen)
            late = sorted(k for k, due in gone_by.items() if due <= t and k in on_disk)
            if late:
                violations.append(f"t=+{t - T0}: {len(late)} rows past their bound still on disk: {late[:5]}")
        t += STEP
    return db, violations


def test_expired_and_deleted_rows_leave_disk_within_expiry_plus_p_plus_one_step(open_db, db_root):
    db, violations = drive(open_db, db_root, periodic=30_000)
    assert violations == []
    lag = db.purge_lag
    assert lag.count > 100
    assert lag.max <= 30_000 + 2_000  # the histogram agrees with the bound
    assert db.lsm_shape()["memtable_rows"] == 0  # the last memtable left by the idle flush


def test_without_periodic_compaction_expired_rows_stay_on_disk(open_db, db_root):
    """The same workload without P: the check above would fail (the bound is not vacuous)."""
    db, violations = drive(open_db, db_root, periodic=None)
    assert violations, "expired rows should outlive their bound without periodic compaction"
    assert db.lsm_shape()["memtable_rows"] > 0  # nothing flushes an idle memtable without P

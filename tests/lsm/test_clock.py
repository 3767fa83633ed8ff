"""The clock: the engine never stamps a row before a time it already used.

* A ManualClock set back makes writes raise ClockError and nothing is written.
* The floor survives a restart: it is seeded from max(manifest clock watermark, newest WAL record), so
  a new process with a lagging clock cannot write rows older than rows already stored — after a clean
  close (watermark) and after a crash (WAL).
* Equal times are allowed (the SlateDB TTL RFC's clock is "greater than or equal to previous"): writes resume as
  soon as the clock reaches the floor again, not one millisecond after it.
"""

from __future__ import annotations

import hashlib
import time

import pytest

import lsm
from tests import _store
from tests.lsm._lsm_proc import Served

T0 = 1_700_000_000_000


def wal_digest(db: lsm.DB, root: str) -> dict[str, str]:
    """{name: sha256} of the WAL segments (objects) once everything `db` acknowledged is in them: an
    object store's group commit would otherwise write its buffer whenever its timer fires."""
    db.flush_wal()
    return {n: hashlib.sha256(_store.read(root, "wal", n)).hexdigest() for n in _store.names(root, "wal")}


def copy_store(src: str, dst: str) -> None:
    """Every file of the database at `src` copied to `dst`, as a copy of a live store is taken."""
    target = _store.store(dst)
    for kind in _store.DIRS:
        target.storage.makedirs(getattr(target.paths, f"{kind}_dir"))  # a directory needs them first
        for name in _store.names(src, kind):
            _store.write(dst, kind, name, _store.read(src, kind, name))


def test_clock_set_back_raises_and_writes_nothing(db_root, open_db):
    clock = lsm.ManualClock(T0)
    db = open_db(clock)
    db.put(b"before", b"1")
    seq, wal = db.seq, wal_digest(db, db_root)
    clock.set(T0 - 1)
    attempts = [
        lambda: db.put(b"k", b"v"),
        lambda: db.put(b"k", b"v", ttl=10),
        lambda: db.delete(b"before"),
        lambda: db.write(lsm.WriteBatch().put(b"k", b"v").delete(b"before")),
    ]
    for attempt in attempts:
        with pytest.raises(lsm.ClockError, match=f"clock went back: {T0 - 1} ms is below {T0} ms") as ei:
            attempt()
        assert "nothing was written" in str(ei.value)
    assert db.seq == seq
    assert db.get(b"k") is None and db.get(b"before") == b"1"
    assert wal_digest(db, db_root) == wal
    # reads still work, at the floor
    assert db.get_entry(b"before").ts == T0
    clock.set(T0)  # equal to the last used time: allowed
    db.put(b"after", b"2")
    assert db.get_entry(b"after").ts == T0
    db.close()
    with open_db(clock) as db:
        assert dict(db.scan()) == {b"before": b"1", b"after": b"2"}
        assert db.get(b"k") is None
        assert db.seq == seq + 1


def test_clock_that_returns_a_non_int_raises_clock_error(open_db):
    class FloatClock:
        def now(self):
            return 1.5e12

    with open_db(FloatClock()) as db:
        with pytest.raises(lsm.ClockError, match="not int milliseconds"):
            db.put(b"k", b"v")
        assert db.seq == 0 and db.get(b"k") is None


def test_lagging_clock_after_clean_reopen(open_db):
    with open_db(lsm.ManualClock(10_000)) as db:
        db.put(b"a", b"1")
    lagging = lsm.ManualClock(5_000)
    db = open_db(lagging)
    for t in (5_000, 9_000, 9_999):
        lagging.set(t)
        with pytest.raises(lsm.ClockError, match="below 10000 ms"):
            db.put(b"b", b"1")
        assert db.seq == 1
    assert db.get(b"a") == b"1"  # reads are fine meanwhile
    lagging.set(10_000)
    assert db.put(b"b", b"1") == 2
    assert db.get_entry(b"b").ts == 10_000
    db.close()


def test_watermark_remembers_flushed_rows(open_db):
    """Rows already in SSTs, WAL gone: the manifest watermark alone holds the floor."""
    db = open_db(lsm.ManualClock(10_000))
    db.put(b"a", b"1")
    db.flush()
    assert db.manifest.clock_watermark >= 10_000
    db.close()
    with open_db(lsm.ManualClock(5_000)) as db2:
        with pytest.raises(lsm.ClockError):
            db2.put(b"b", b"1")


def _assert_floor(root: str, db_options, floor: int) -> None:
    """A fresh handle on a clock just below `floor` cannot write; at `floor` it can (then it closes)."""
    clock = lsm.ManualClock(floor - 1)
    db = lsm.DB.open(root, db_options(clock))
    try:
        seq = db.seq
        with pytest.raises(lsm.ClockError, match=f"below {floor} ms"):
            db.put(b"late", b"x")
        assert db.seq == seq
    finally:
        db.close()


def test_floor_is_seeded_from_the_wal_after_a_killed_writer(shared_root, db_options):
    path = shared_root
    child = Served(path, 10_000)
    try:
        assert child.call("put a 1") == "ok"
        assert child.call("clock 12000") == "ok"
        assert child.call("put b 2") == "ok"
    finally:
        child.kill()  # SIGKILL: no close, no watermark commit; only the WAL knows about ts 12000
    _assert_floor(path, db_options, 12_000)
    # the recovery flush retired the WAL: the floor must now live in the manifest
    _assert_floor(path, db_options, 12_000)
    with lsm.DB.open(path, db_options(lsm.ManualClock(12_000))) as db:
        assert dict(db.scan()) == {b"a": b"1", b"b": b"2"}
        assert db.get_entry(b"b").ts == 12_000


def test_floor_is_seeded_from_the_wal_of_a_copy_taken_while_open(db_root, new_root, open_db, db_options):
    """A copy of a live store looks like a crash: WAL records that the manifest never heard of."""
    copy = new_root("copy")
    clock = lsm.ManualClock(10_000)
    db = open_db(clock)
    db.put(b"a", b"1")
    clock.advance(500)
    db.write(lsm.WriteBatch().put(b"b", b"2").put(b"c", b"3"), lsm.WriteOptions(sync=True))
    assert db.manifest.clock_watermark < 10_500  # the manifest has not seen these writes
    copy_store(db_root, copy)
    db.close()
    _assert_floor(copy, db_options, 10_500)
    _assert_floor(copy, db_options, 10_500)
    with open_db(lsm.ManualClock(10_500), path=copy) as db2:
        assert dict(db2.scan()) == {b"a": b"1", b"b": b"2", b"c": b"3"}


def test_manual_clock_contract():
    c = lsm.ManualClock(5)
    assert c.now() == 5
    assert c.advance(10) == 15
    with pytest.raises(ValueError):
        c.advance(-1)
    with pytest.raises(TypeError):
        c.advance(1.0)
    with pytest.raises(TypeError):
        c.set(b"10")
    with pytest.raises(TypeError):
        lsm.ManualClock(0.5)
    c.set(3)
    assert c.now() == 3
    assert isinstance(c, lsm.Clock) and isinstance(lsm.SystemClock(), lsm.Clock)


def test_manual_clock_takes_rfc3339_like_every_time_argument():
    c = lsm.ManualClock("2026-01-01T00:00:00Z")
    assert c.now() == 1_767_225_600_000 == lsm.timeline.parse_time("2026-01-01T00:00:00Z")
    c.set("2026-01-01T02:00:00.250+01:00")
    assert c.now() == 1_767_225_600_000 + 3_600_250
    c.set("42")  # digits are epoch ms, as for as_of= and the CLI's time options
    assert c.now() == 42
    with pytest.raises(ValueError, match="needs a zone"):
        lsm.ManualClock("2026-01-01T00:00:00")  # no offset: refused, not guessed
    with pytest.raises(ValueError, match="cannot read"):
        c.set("tomorrow")
    assert c.now() == 42
    with pytest.raises(TypeError):
        c.advance("1000")  # advance takes a duration in ms, not a time


def test_system_clock_sanity(db_root):
    clock = lsm.SystemClock()
    readings = [clock.now() for _ in range(1000)]
    assert all(type(r) is int for r in readings)
    assert abs(readings[-1] - time.time() * 1000) < 5_000  # ms since the Unix epoch
    assert lsm.DbOptions().clock.__class__ is lsm.SystemClock  # the default
    path = db_root
    before = time.time_ns() // 1_000_000
    with lsm.DB.open(path, lsm.DbOptions(default_ttl=60_000, background_compaction=False)) as db:
        db.put(b"k", b"v")
        after = time.time_ns() // 1_000_000
        e = db.get_entry(b"k")
        assert before <= e.ts <= after
        assert e.expire_ts == e.ts + 60_000
        db.flush()
        assert db.get_entry(b"k") == e
    with lsm.DB.open(path, lsm.DbOptions(background_compaction=False)) as db:
        assert db.get_entry(b"k") == e
        assert db.manifest.clock_watermark >= e.ts
        db.put(b"k2", b"v")
        assert db.get_entry(b"k2").ts >= e.ts


def test_a_read_between_clock_reading_and_check_is_not_time_going_back():
    """tick() must read the user clock under its lock: a concurrent read() advancing the floor in
    between used to make a never-decreasing clock look as if it went back (ClockError on one writer)."""
    from lsm.clock import MonotonicClock

    class Clock:
        t = 1_000
        hook = None

        def now(self):
            t = self.t
            if self.hook is not None:
                hook, self.hook = self.hook, None
                hook()  # another thread's read, in the middle of this reading
            return t

    c = Clock()
    mc = MonotonicClock(c, 0)

    def other_thread_reads():
        c.t = 1_001
        mc.read()

    # the interleaved read runs on another thread: with the fix it waits for tick()'s lock
    import threading

    done = []
    c.hook = lambda: threading.Thread(target=lambda: (other_thread_reads(), done.append(1))).start()
    assert mc.tick() == 1_000
    for _ in range(200):
        if done:
            break
        threading.Event().wait(0.01)
    assert done and mc.read() == 1_001
    assert mc.tick() == 1_001  # the clock reads 1_001 now: not below anything used


class FixedClock:
    """A clock that reads whatever it is told to, even values no format can store."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def now(self) -> int:
        return self.ms


@pytest.mark.parametrize("absurd", [2**63, 2**70, -(2**63) - 1])
def test_an_absurd_clock_reading_is_refused_and_does_not_poison_the_watermark(db_root, open_db, absurd):
    """Issue 12 item 6: one reading outside i64 fails that write with ClockError naming the value; reads do
    not adopt it; the next write with a sane clock works, and so does every write after a reopen."""
    clock = FixedClock(T0)
    db = open_db(clock)
    db.put(b"a", b"1")
    before = wal_digest(db, db_root)
    clock.ms = absurd
    with pytest.raises(lsm.ClockError, match=str(absurd)):
        db.put(b"b", b"2")
    with pytest.raises(lsm.ClockError, match=str(absurd)):
        db.write(lsm.WriteBatch().put(b"b", b"2"))
    assert db.get(b"a") == b"1"  # a read at the absurd time neither fails nor moves the engine's time
    assert wal_digest(db, db_root) == before and db.seq == 1
    clock.ms = T0 + 1
    assert db.put(b"c", b"3") == 2
    db.close()
    with open_db(FixedClock(T0 + 2)) as db2:
        assert db2.manifest.clock_watermark == T0 + 1
        assert db2.put(b"d", b"4") == 3


@pytest.mark.parametrize("ttl", [2**63, 2**70])
def test_a_ttl_that_does_not_fit_i64_is_refused(open_db, ttl):
    with pytest.raises(ValueError, match=str(ttl)):
        lsm.DbOptions(default_ttl=ttl)
    with open_db() as db:
        for attempt in (lambda: db.put(b"k", b"v", ttl=ttl), lambda: db.write(lsm.WriteBatch().put(b"k", b"v", ttl=ttl))):
            with pytest.raises(ValueError, match=str(ttl)):
                attempt()
        assert db.seq == 0


def test_an_expiry_that_overflows_i64_is_refused_and_writes_nothing(db_root, open_db):
    """ts + ttl must fit the row format's i64 expire_ts: ValueError naming the sum, no seq used."""
    ttl = 2**63 - 1 - T0 + 1  # fits i64 alone; ts + ttl does not
    with open_db(lsm.ManualClock(T0)) as db:
        before = wal_digest(db, db_root)
        with pytest.raises(ValueError, match=str(T0 + ttl)):
            db.put(b"k", b"v", ttl=ttl)
        with pytest.raises(ValueError, match="expiry"):
            db.write(lsm.WriteBatch().put(b"j", b"v").put(b"k", b"v", ttl=ttl))
        assert wal_digest(db, db_root) == before and db.seq == 0
        assert db.put(b"k", b"v", ttl=ttl - 1) == 1
        assert db.get_entry(b"k").expire_ts == 2**63 - 1


def test_manual_clock_refuses_times_outside_i64():
    with pytest.raises(ValueError, match=str(2**63)):
        lsm.ManualClock(2**63)
    c = lsm.ManualClock(2**63 - 10)
    with pytest.raises(ValueError):
        c.advance(2**63)

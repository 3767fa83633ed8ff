"""Issue 24 defect 5: one far-future clock reading must not brick the store.

A user clock (any clock but `lsm.ManualClock`) reading more than `DbOptions.max_clock_skew_ms` ahead of the
host's wall clock is refused with ClockError and nothing is written; the next sane reading writes, in that
handle and after a reopen. `max_clock_skew_ms=None` turns the guard off.
"""

from __future__ import annotations

import time

import pytest

import lsm
from lsm.inspect import check_database
from tests.lsm.test_clock import FixedClock, wal_digest

DAY = 86_400_000
YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00:00Z in ms


class GlitchClock:
    """The host's time, except that the reading after `glitch = far` is `far` (a clock that glitched once)."""

    glitch: int | None = None

    def now(self) -> int:
        far, self.glitch = self.glitch, None
        return far if far is not None else time.time_ns() // 1_000_000


@pytest.mark.parametrize("far", [2**63 - 1, YEAR_10000])
def test_one_far_future_reading_is_refused_and_the_store_keeps_working(db_root, open_db, far):
    clock = GlitchClock()
    db = open_db(clock)
    db.put(b"a", b"1")
    before, seq = wal_digest(db, db_root), db.seq
    clock.glitch = far
    with pytest.raises(lsm.ClockError) as ei:
        db.put(b"b", b"2")  # one reading far in the future
    msg = str(ei.value)
    assert str(far) in msg and "max_clock_skew_ms" in msg and "nothing was written" in msg
    assert wal_digest(db, db_root) == before and db.seq == seq and db.get(b"b") is None
    db.put(b"c", b"3")  # the next sane reading writes
    db.close()
    with open_db(lsm.SystemClock()) as db2:
        assert db2.manifest.clock_watermark < time.time_ns() // 1_000_000 + DAY
        db2.put(b"d", b"4")
        assert dict(db2.scan()) == {b"a": b"1", b"c": b"3", b"d": b"4"}


def test_a_batch_and_a_delete_are_refused_too(open_db):
    far = time.time_ns() // 1_000_000 + 2 * DAY
    clock = FixedClock(time.time_ns() // 1_000_000)
    with open_db(clock) as db:
        db.put(b"a", b"1")
        clock.ms = far
        for attempt in (lambda: db.delete(b"a"), lambda: db.write(lsm.WriteBatch().put(b"x", b"y"))):
            with pytest.raises(lsm.ClockError, match=str(far)):
                attempt()
        assert db.seq == 1 and db.get(b"a") == b"1"


def test_a_far_future_read_does_not_move_time(open_db):
    """A read at a refused reading judges expiry at the last used time and does not become the
    watermark: a TTL row stays visible and the next write takes a sane ts."""
    now = time.time_ns() // 1_000_000
    clock = FixedClock(now)
    with open_db(clock) as db:
        db.put(b"a", b"1", ttl=60_000)
        clock.ms = YEAR_10000
        assert db.get(b"a") == b"1"
        clock.ms = now + 1
        db.put(b"b", b"2")
    with open_db(FixedClock(now + 2)) as db:
        assert db.manifest.clock_watermark == now + 1


def test_the_skew_is_measured_against_the_host_clock_and_is_configurable(open_db, new_root):
    clock = FixedClock(time.time_ns() // 1_000_000 + 10_000)
    with open_db(clock, max_clock_skew_ms=60_000) as db:
        db.put(b"a", b"1")  # 10 s ahead: within a minute
        clock.ms += 120_000
        with pytest.raises(lsm.ClockError, match="max_clock_skew_ms=60000"):
            db.put(b"b", b"1")
    with open_db(clock, path=new_root("db2"), max_clock_skew_ms=None) as db:
        clock.ms = YEAR_10000
        db.put(b"a", b"1")  # the guard is off: the caller takes the consequences
        assert db.get_entry(b"a").ts == YEAR_10000


def test_a_manual_clock_is_never_judged_against_the_host(open_db):
    clock = lsm.ManualClock(YEAR_10000)
    with open_db(clock) as db:
        db.put(b"a", b"1")
        assert db.get_entry(b"a").ts == YEAR_10000


@pytest.mark.parametrize("bad", [-1, 1.5, "1d", True])
def test_the_option_is_validated(bad):
    with pytest.raises(ValueError, match="max_clock_skew_ms"):
        lsm.DbOptions(max_clock_skew_ms=bad)


# -- repairing a store whose watermark is already in the future --------------------------------------


def _bricked_store(open_db, log_dir) -> tuple[lsm.DB, dict]:
    """A store that accepted year-10000 readings (the guard off, as before it existed): rows and a remap
    binding stamped in the future, written between rows stamped now. Returns the handle that wrote them
    (left open, its last rows in the WAL but not flushed, as a killed process would) and seq -> key."""
    from lsm.sources import LogWriter, PartitionedLog

    now = time.time_ns() // 1_000_000
    clock = FixedClock(now)
    with LogWriter(log_dir) as w:
        w.append(0, b"log-a", b"1")
    db = open_db(clock, max_clock_skew_ms=None)
    seqs = {db.put(b"old", b"0"): b"old"}
    clock.ms = YEAR_10000
    seqs[db.put(b"far", b"1", ttl=60_000)] = b"far"
    seqs[db.put(b"old", b"2")] = b"old"  # a newer version of a key, stamped in the future
    db.flush()
    seqs[db.put(b"mem", b"3")] = b"mem"  # still in the WAL when the store is reopened
    db.ingest(PartitionedLog(log_dir), "events")
    clock.ms = now + 1
    with pytest.raises(lsm.ClockError, match="clock went back"):
        db.put(b"x", b"y")
    db.flush_wal()  # in the WAL now, not when an object store's group commit fires (or never: fenced)
    return db, seqs


def test_a_store_bricked_by_a_future_watermark_is_repaired(db_root, open_db, tmp_path):
    from lsm.sources import LogWriter, PartitionedLog

    log_dir = tmp_path / "log"
    old, seqs = _bricked_store(open_db, log_dir)
    db = open_db(lsm.SystemClock())  # fences `old`; replays "mem" and the binding from its WAL
    with pytest.raises(lsm.ClockError, match="clock went back"):
        db.put(b"x", b"y")  # bricked across a reopen
    before = {e.key: e for e in db.scan_entries(options=lsm.ReadOptions(include_expired=True))}
    assert before[b"far"].ts == YEAR_10000
    to = time.time_ns() // 1_000_000
    report = db.repair_clock(to)
    assert report.repaired and report.watermark_before == YEAR_10000 and report.rows_moved >= 4
    after = {e.key: e for e in db.scan_entries(options=lsm.ReadOptions(include_expired=True))}
    # every row stays, with its value and seq; the future ones are stamped at the repair time with
    # their TTL kept; rows stamped before it are untouched
    assert after.keys() == before.keys()
    for k, e in after.items():
        assert (e.value, e.seq) == (before[k].value, before[k].seq)
        assert e.ts == min(before[k].ts, to)
    assert after[b"far"].expire_ts == to + 60_000
    assert db.get(b"far") == b"1"  # TTL counted from the repair time, not expired, not immortal
    # the repair time, or the handle's clock if it has moved on since (a read used that time already)
    assert to <= db.manifest.clock_watermark == report.watermark_after <= time.time_ns() // 1_000_000
    assert db.timestamp_for_seq(db.seq) is None or db.timestamp_for_seq(db.seq) <= to
    # writes work again and sort after everything stored, in ts as in seq
    s = db.put(b"x", b"y")
    assert db.get_entry(b"x").ts >= to and s > max(seqs)
    with LogWriter(log_dir) as w:
        w.append(0, b"log-b", b"2")
    db.ingest(PartitionedLog(log_dir), "events")  # the remap's times went back too: no "binding went back"
    assert [b.ts <= db.get_entry(b"log-b").ts for b in db.remap("events").bindings()] == [True] * len(
        db.remap("events").bindings()
    )
    with pytest.raises(lsm.ClockRepairError):  # the rows written since are legitimate: not moved back
        db.repair_clock(to)
    assert db.repair_clock().repaired is False  # nothing left in the future: a no-op
    db.close()
    old.close()  # fenced: writes nothing
    check_database(db_root)
    with open_db(lsm.SystemClock()) as db:
        db.put(b"z", b"1")
        assert db.get(b"log-b") == b"2" and db.get(b"old") == b"2"


def test_repair_refuses_a_bad_time(open_db):
    with open_db(lsm.ManualClock(0)) as db:
        with pytest.raises(TypeError):
            db.repair_clock(1.5)
        with pytest.raises(ValueError, match=str(2**63)):
            db.repair_clock(2**63)
        with pytest.raises(lsm.ClockRepairError, match="before 1970"):
            db.repair_clock(-1)
        with pytest.raises(lsm.ClockRepairError, match="before 1970"):
            db.repair_clock(-1, force=True)  # no force stamps rows before the epoch
        with pytest.raises(lsm.ClockRepairError, match="before 1970"):
            db.plan_clock_repair(-1)


def _mixed_store(open_db) -> tuple[lsm.DB, int]:
    """A store with a row committed legitimately now (two days of TTL left) and a row stamped in year 10000
    (the guard off), both still in the WAL of the returned handle, left open as after a crash; returns
    it and 'now'."""
    now = time.time_ns() // 1_000_000
    clock = FixedClock(now)
    db = open_db(clock, max_clock_skew_ms=None)
    db.put(b"legit", b"1", ttl=2 * DAY)
    clock.ms = YEAR_10000
    db.put(b"far", b"2", ttl=60_000)
    db.flush_wal()  # in the WAL now, not when an object store's group commit fires (or never: fenced)
    return db, now


def test_repair_refuses_a_time_before_a_row_committed_within_the_guard(open_db):
    """Issue 32 defect 7: repair_clock(0) restamped a row committed now at 1970, its two days of TTL with
    it: the repair's compaction dropped it as expired. A time below a row the skew guard let through is
    refused, naming what would move, unless forced; the default never moves such a row."""
    old, now = _mixed_store(open_db)
    db = open_db(lsm.SystemClock())  # the rows come back from the WAL into its memtable
    try:
        plan = db.plan_clock_repair(0)
        assert (plan.rows_moved, plan.legit_moved, plan.legit_last, plan.expire_at_once) == (2, 1, now, 1)
        with pytest.raises(lsm.ClockRepairError) as e:
            db.repair_clock(0)
        msg = str(e.value)
        assert "1 row(s) committed within the skew guard" in msg and f"at or after {now} ms" in msg
        assert "1 would expire at once and be dropped" in msg and "nothing was changed" in msg
        assert db.manifest.clock_watermark == YEAR_10000  # not lowered
        every = lsm.ReadOptions(include_expired=True)  # read in year 10000, the legitimate row has expired
        assert db.get_entry(b"legit", every).expire_ts == now + 2 * DAY and db.get_entry(b"far").ts == YEAR_10000
        report = db.repair_clock()  # the default: now, never below the legitimate row
        assert report.repaired and (report.rows_moved, report.rows_forced) == (1, 0)
        legit, far = db.get_entry(b"legit"), db.get_entry(b"far")
        assert (legit.ts, legit.expire_ts) == (now, now + 2 * DAY)  # untouched
        assert now <= far.ts <= time.time_ns() // 1_000_000 and far.expire_ts == far.ts + 60_000
        db.put(b"x", b"y")
    finally:
        db.close()
        old.close()


def test_a_forced_repair_moves_rows_committed_within_the_guard(db_root, open_db):
    old, now = _mixed_store(open_db)
    old.close()
    with open_db(lsm.SystemClock()) as db:
        to = now - 3_600_000  # an hour back: the legitimate row moves too, its TTL with it
        with pytest.raises(lsm.ClockRepairError):
            db.repair_clock(to)
        report = db.repair_clock(to, force=True)
        assert (report.rows_moved, report.rows_forced) == (2, 1)
        legit = db.get_entry(b"legit")
        assert (legit.ts, legit.expire_ts) == (to, to + 2 * DAY) and db.get(b"legit") == b"1"
    with lsm.DB.open(db_root, read_only=True) as ro:  # a read-only handle surveys: nothing left to move
        plan = ro.plan_clock_repair()
        assert plan.watermark <= plan.to and plan.rows_moved == 0

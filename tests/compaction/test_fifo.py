"""The FIFO policy: expired SSTs leave by a manifest edit, the oldest beyond fifo_max_bytes too (the
databases on every backend: the `open_db` fixture)."""

from __future__ import annotations

import dataclasses

import pytest

import lsm
from compaction.drop import drop_stats, droppable
from compaction.fifo import FifoPolicy
from compaction.filter import Reason
from compaction.scheduler import apply_plan
from formats.manifest import Manifest, SortedRun, SstEntry
from lsm.inspect import check_database
from tests import _store
from tests.compaction._util import fake_sst


def _sst(first: bytes, last: bytes, max_exp: int | None, *, rows: int = 10, size: int = 100, seq: int = 1) -> SstEntry:
    e = fake_sst(size, expiring=rows if max_exp is not None else 0)
    info = dataclasses.replace(
        e.info, first_key=first, last_key=last, num_rows=rows, min_expire_ts=max_exp and max_exp - 5,
        max_expire_ts=max_exp, min_seq=seq, max_seq=seq,
    )
    return SstEntry(e.name, info)


def test_expired_ssts_go_unless_a_kept_sst_beneath_overlaps() -> None:
    old_live = _sst(b"a", b"f", None, seq=1)  # oldest, no TTL: stays
    over_live = _sst(b"e", b"k", 50, seq=2)  # expired, but old_live beneath overlaps: stays
    apart = _sst(b"m", b"p", 50, seq=3)  # expired, nothing kept beneath: goes
    young = _sst(b"a", b"z", 500, seq=4)  # not expired yet
    m = Manifest(l0=(young, apart, over_live, old_live))
    assert droppable(m, 100) == [apart]
    # partly expired (one row has no expire_ts) never goes
    partly = dataclasses.replace(apart.info, num_expiring=9)
    assert droppable(Manifest(l0=(SstEntry("x.sst", partly),)), 100) == []
    # once the live SST beneath is gone, the one above it may go too
    assert droppable(Manifest(l0=(young, over_live)), 100) == [over_live]
    # expired exactly at the tick is not expired yet (the merge's rule: tick > expire_ts)
    assert droppable(Manifest(l0=(apart,)), 50) == [] and droppable(Manifest(l0=(apart,)), 51) == [apart]


def test_size_cap_drops_the_oldest_first_runs_before_l0() -> None:
    run_old = (_sst(b"a", b"c", None, seq=1), _sst(b"d", b"f", None, seq=2))
    run_new = (_sst(b"a", b"f", None, seq=5),)
    l0 = (_sst(b"a", b"z", None, seq=9), _sst(b"a", b"z", None, seq=8))
    m = Manifest(l0=l0, runs=(SortedRun(2, run_new), SortedRun(1, run_old)))
    assert droppable(m, 0, budget=500) == []
    assert droppable(m, 0, budget=350) == [run_old[0], run_old[1]]
    assert droppable(m, 0, budget=150) == [*run_old, run_new[0], l0[1]]
    plan = FifoPolicy(lsm.DbOptions(fifo_max_bytes=150)).pick(m, 0)
    assert plan is not None and plan.reason is Reason.FIFO and plan.drop == (tuple(e.name for e in (*run_old, run_new[0], l0[1])))
    assert apply_plan(m, plan, (), 0, 5) == m.replace(l0=l0[:1], runs=(), history_floor=5)  # emptied runs go


def test_drop_stats_account_for_every_row() -> None:
    expired, live = _sst(b"a", b"b", 40), _sst(b"c", b"d", None, rows=7)
    s = drop_stats([expired, live], tick=100, expired_before=100)
    assert (s.jobs, s.dropped_files, s.dropped_bytes, s.bytes_in, s.bytes_out) == (1, 2, 200, 0, 0)
    assert (s.rows_in, s.expired_dropped, s.evicted_rows, s.rows_out) == (17, 10, 7, 0)
    assert (s.purge_lag.count, s.purge_lag.max) == (10, 100 - 35)


def _ttl_writes(db: lsm.DB, clock: lsm.ManualClock, batches: int, rows: int, ttl: int) -> list[int]:
    """`batches` flushes of `rows` TTL rows each, one clock step apart; the last expire_ts of each."""
    last = []
    for b in range(batches):
        for i in range(rows):
            db.put(b"k%03d-%04d" % (b, i), b"v" * 20, ttl=ttl)
        last.append(clock.now() + ttl)
        db.flush()
        clock.advance(100)
    return last


def test_fifo_ttl_workload_writes_once_and_purges_within_one_pass(open_db, db_root) -> None:
    clock = lsm.ManualClock(1_000)
    path = db_root
    db = open_db(clock, compaction_policy="fifo", l0_compaction_threshold=2)
    last = _ttl_writes(db, clock, batches=6, rows=50, ttl=1_000)
    assert db.compact().jobs == 0  # nothing expired: FIFO never merges
    names = [e.name for e in reversed(db.manifest.l0)]  # oldest first
    for k, expiry in enumerate(last):
        clock.set(expiry)  # the last row of SST k expires at this tick: not yet expired
        db.compact()
        assert [e.name for e in reversed(db.manifest.l0)] == names[k:]
        clock.set(expiry + 1)  # one pass after it expired, SST k is gone, file and all
        stats = db.compact()
        assert stats.dropped_files == 1 and stats.expired_dropped == 50
        assert [e.name for e in reversed(db.manifest.l0)] == names[k + 1 :]
        assert names[k] not in _store.names(path, "sst")
        assert check_database(path).ssts == len(names) - k - 1
    assert db.compaction_stats.bytes_out == 0 and db.compaction_stats.rows_in == 300
    assert db.write_amplification() == db.flush_bytes_written / db.user_bytes_written  # flushes only
    assert db.purge_lag.count == 300
    db.close()


def test_fifo_size_cap_and_reads(open_db, db_root) -> None:
    clock = lsm.ManualClock(1_000)
    path = db_root
    db = open_db(clock, compaction_policy="fifo")
    for b in range(4):
        for i in range(100):
            db.put(b"k%04d" % i, b"%d" % b * 30)  # no TTL: only the cap takes them
        db.flush()
    sizes = [e.size for e in db.manifest.l0]
    db.close()
    db = open_db(clock, compaction_policy="fifo", fifo_max_bytes=sum(sizes[:2]))
    stats = db.compact()
    assert stats.dropped_files == 2 and stats.evicted_rows == 200 and stats.bytes_out == 0
    assert len(db.manifest.l0) == 2
    assert db.get(b"k0007") == b"3" * 30  # the newest SSTs stay
    check_database(path)
    db.close()


def test_fifo_with_periodic_compaction_still_purges_deletes(open_db, db_root) -> None:
    clock = lsm.ManualClock(1_000)
    path = db_root
    db = open_db(clock, compaction_policy="fifo", periodic_compaction_interval=1_000)
    db.put(b"a", b"1")
    db.put(b"b", b"2")
    db.flush()
    db.delete(b"a")
    db.flush()
    clock.advance(1_000)
    stats = db.compact()  # no SST is expired; the delete's SST is due: merged into the oldest run
    assert stats.jobs == 1 and stats.tombstones_dropped == 1 and stats.bytes_out > 0
    m = db.manifest
    assert (len(m.l0), len(m.runs)) == (0, 1) and db.get(b"a") is None and db.get(b"b") == b"2"
    check_database(path)
    db.close()


def test_bad_fifo_max_bytes() -> None:
    with pytest.raises(ValueError, match="fifo_max_bytes"):
        lsm.DbOptions(fifo_max_bytes=0)


def test_a_drop_is_reported_as_a_job_with_the_drop_executor(open_db) -> None:
    from lsm.events import EventListener

    seen = []

    class Listener(EventListener):
        def on_compaction_end(self, info) -> None:
            seen.append(info)

    clock = lsm.ManualClock(1_000)
    db = open_db(clock, compaction_policy="fifo", event_listeners=[Listener()])
    db.put(b"a", b"1", ttl=10)
    db.flush()
    name = db.manifest.l0[0].name
    clock.advance(11)
    db.compact()
    assert [(i.reason, i.executor, i.inputs, i.outputs, i.error) for i in seen] == [
        ("fifo", "drop", (name,), (), None)
    ]
    assert seen[0].stats.expired_dropped == 1 and db.purge_lag.count == 1
    db.close()


def test_background_compaction_drops_expired_ssts_without_a_flush(open_db) -> None:
    import time

    clock = lsm.ManualClock(1_000)
    db = open_db(clock, compaction_policy="fifo", background_compaction=True)
    assert db.engine.compactor.policy.poll_seconds() == 1.0
    db.put(b"a", b"1", ttl=10)
    db.flush()
    time.sleep(0.2)  # the flush's wake-up pass finds nothing expired
    assert len(db.manifest.l0) == 1
    clock.advance(11)  # no write, no flush: only the poll can find it
    deadline = time.monotonic() + 5
    while db.manifest.l0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert db.manifest.l0 == () and db.compaction_stats.dropped_files == 1
    db.close()

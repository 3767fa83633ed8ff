"""Periodic compaction: which SSTs are due (compaction/scheduler.py) and the purge-time bound it gives.

Scheduler unit tests build LSM shapes from SsTableInfo records with chosen creation_timestamps. The end
to end test drives a DB on a ManualClock with background compaction off, calling ``db.compact()`` as
"one scheduler pass" every time the clock moves, and checks after every pass that no SST file on disk
holds a row that expired more than the interval (plus one pass) ago, on every backend (the `open_db`
fixture).
"""

from __future__ import annotations

import itertools
import random

import pytest

import lsm
from compaction.filter import CompactionFilter, CompactionFilterFactory, Reason
from compaction.scheduler import SchedulerOptions, is_due, pick, pick_periodic
from formats.manifest import SortedRun, SstEntry
from storage.ssts import open_sst
from tests import _store
from tests.compaction._util import fake_sst

P = 1_000  # the periodic interval (ms) of the unit tests
def sst(created: int, *, size: int = 100, tombstones: int = 0, expiring: int = 1, name=None, oldest_row=None):
    return fake_sst(size, created=created, tombstones=tombstones, expiring=expiring, name=name, oldest_row=oldest_row)


def opts(**kw) -> SchedulerOptions:
    base = {"l0_compaction_threshold": 8, "periodic_compaction_interval": P}
    base.update(kw)
    return SchedulerOptions(**base)


# -- what is due --------------------------------------------------------------------------------------


def test_due_only_when_older_than_interval():
    e = sst(created=5_000)
    assert not is_due(e, 5_000 + P - 1, opts())
    assert is_due(e, 5_000 + P, opts())
    assert is_due(e, 5_000 + 10 * P, opts())


def test_only_ssts_with_ttl_rows_or_tombstones_are_due():
    plain = sst(0, expiring=0, tombstones=0)
    assert not is_due(plain, 100 * P, opts())
    assert is_due(sst(0, expiring=0, tombstones=1), 100 * P, opts())
    assert is_due(sst(0, expiring=3, tombstones=0), 100 * P, opts())


def test_nothing_due_without_interval():
    e = sst(0)
    o = SchedulerOptions(periodic_compaction_interval=None)
    assert not is_due(e, 10**12, o)
    assert pick_periodic([e], [], 10**12, o) is None


def test_periodic_picks_old_ssts_not_fresh_ones():
    now = 10 * P
    fresh = sst(now - 10)
    old = sst(now - 2 * P)
    # only fresh SSTs: nothing due
    assert pick_periodic([fresh], [SortedRun(1, (sst(now - 5),))], now, opts()) is None
    # an old L0 SST under a fresh one: the job takes the old one (and everything older), not the fresh
    plan = pick_periodic([fresh, old], [], now, opts())
    assert plan.reason is Reason.PERIODIC
    assert plan.l0 == (old.name,)
    assert plan.is_last_run


def test_due_l0_sst_reaches_down_to_the_oldest_run():
    now = 10 * P
    l0 = [sst(now), sst(now - 2 * P), sst(now - 50)]  # newest first; the middle one is due
    runs = [SortedRun(2, (sst(now),)), SortedRun(1, (sst(now),))]
    plan = pick_periodic(l0, runs, now, opts())
    assert plan.l0 == (l0[1].name, l0[2].name)  # the due SST and every older L0 SST
    assert plan.runs == (2, 1)
    assert plan.partial is None
    assert plan.is_last_run


def test_due_sst_in_a_middle_run_takes_that_run_and_older_ones():
    now = 10 * P
    l0 = [sst(now)]
    runs = [SortedRun(3, (sst(now),)), SortedRun(2, (sst(now), sst(now - P))), SortedRun(1, (sst(now),))]
    plan = pick_periodic(l0, runs, now, opts())
    assert plan.l0 == ()
    assert plan.runs == (2, 1)
    assert plan.is_last_run


def test_size_tiered_goes_before_periodic():
    now = 10 * P
    l0 = [sst(0) for _ in range(8)]  # at the threshold and all due
    plan = pick(l0, [], now, opts())
    assert plan.reason is Reason.SIZE_TIERED


def test_upper_ssts_age_by_their_oldest_row():
    """A size-tiered rewrite above the oldest run does not restart an SST's clock: rows written long ago
    are due by their age, or steady writes would keep tombstones (and what they shadow) forever."""
    now = 10 * P
    rewritten = sst(now - 10, oldest_row=now - 2 * P, tombstones=1)  # fresh file, old rows
    assert is_due(rewritten, now, opts(), by_rows=True)
    assert not is_due(rewritten, now, opts())  # judged by creation it would wait
    plan = pick_periodic([], [SortedRun(2, (rewritten,)), SortedRun(1, (sst(now),))], now, opts())
    assert plan.runs == (2, 1) and plan.is_last_run
    plan = pick_periodic([rewritten], [SortedRun(1, (sst(now),))], now, opts())
    assert plan.l0 == (rewritten.name,) and plan.runs == (1,)


def test_oldest_run_ages_by_creation_so_it_is_not_rewritten_again_and_again():
    now = 10 * P
    bottom = sst(now - 10, oldest_row=now - 5 * P)  # just rewritten by a periodic job; rows keep their ts
    assert pick_periodic([], [SortedRun(1, (bottom,))], now, opts()) is None
    assert pick_periodic([], [SortedRun(2, (sst(now),)), SortedRun(1, (bottom,))], now, opts()) is None


# -- jitter ---------------------------------------------------------------------------------------------


def _due_age(e: SstEntry, o: SchedulerOptions) -> int:
    """The smallest age (tick - creation) at which `e` is due."""
    created = e.info.creation_timestamp
    lo, hi = 0, 10 * P
    while lo < hi:
        mid = (lo + hi) // 2
        if is_due(e, created + mid, o):
            hi = mid
        else:
            lo = mid + 1
    return lo


def test_jitter_spreads_due_times_and_is_stable_per_name():
    o = opts(periodic_compaction_jitter=0.5)
    entries = [sst(0, name=f"{i:020d}-e1-0000.sst") for i in range(30)]
    ages = [_due_age(e, o) for e in entries]
    assert all(P <= a < 1.5 * P for a in ages)
    assert len(set(ages)) > 10  # spread out, not all compacted at once
    # stable: the same name is due at the same age, whatever its creation time or another options object
    again = [_due_age(sst(12_345, name=e.name), opts(periodic_compaction_jitter=0.5)) for e in entries]
    assert again == ages
    # without jitter every SST is due at exactly the interval
    assert {_due_age(e, opts()) for e in entries} == {P}


# -- the cap on bytes: an in-place window of the oldest run ---------------------------------------------


def test_cap_rewrites_a_window_of_the_oldest_run_in_place():
    now = 10 * P
    oldest = SortedRun(1, tuple(sst(now if i in (0, 3) else now - 2 * P, size=100) for i in range(6)))
    # SSTs 1, 2, 4, 5 are due; the first due is 1; 100 + 100 <= 250 < 300
    runs = [SortedRun(2, (sst(now, size=100),)), oldest]
    plan = pick_periodic([], runs, now, opts(periodic_compaction_max_bytes=250))
    assert plan.reason is Reason.PERIODIC
    assert plan.l0 == () and plan.runs == ()
    assert plan.partial == (1, (oldest.ssts[1].name, oldest.ssts[2].name))
    assert plan.is_last_run
    # inputs of the plan: just that window, as one sorted source
    assert [[e.name for e in s] for s in plan.input_entries([], runs)] == [
        [oldest.ssts[1].name, oldest.ssts[2].name]
    ]


def test_cap_window_holds_at_least_one_sst():
    now = 10 * P
    oldest = SortedRun(1, (sst(now - 2 * P, size=1_000), sst(now - 2 * P, size=1_000)))
    plan = pick_periodic([], [oldest], now, opts(periodic_compaction_max_bytes=10))
    assert plan.partial == (1, (oldest.ssts[0].name,))


def test_cap_not_needed_when_job_is_small_enough():
    now = 10 * P
    oldest = SortedRun(1, (sst(now - 2 * P, size=100), sst(now, size=100)))
    plan = pick_periodic([], [oldest], now, opts(periodic_compaction_max_bytes=10_000))
    assert plan.partial is None and plan.runs == (1,)


def test_cap_applies_only_when_due_ssts_sit_in_the_oldest_run():
    now = 10 * P
    runs = [SortedRun(2, (sst(now - 2 * P, size=500),)), SortedRun(1, (sst(now, size=5_000),))]
    plan = pick_periodic([], runs, now, opts(periodic_compaction_max_bytes=100))
    assert plan.partial is None
    assert plan.runs == (2, 1)


# -- end to end: the purge-time bound -------------------------------------------------------------------




class _Recorder(CompactionFilter):
    pass


class ReasonRecorder(CompactionFilterFactory):
    """Keeps every row; records each job's FilterContext."""

    def __init__(self):
        self.contexts = []

    def create(self, ctx):
        self.contexts.append(ctx)
        return _Recorder()


def _rows_on_disk(db):
    rows = []
    for name in _store.names(db.path, "sst"):
        if name.endswith(".sst"):
            with open_sst(db.sst_path(name)) as r:
                rows += [(name, r.info.creation_timestamp, row) for row in r]
    return rows


def test_periodic_compaction_picks_old_ssts_end_to_end(open_db):
    clock = lsm.ManualClock(1_000_000)
    rec = ReasonRecorder()
    o = dict(periodic_compaction_interval=10_000, l0_compaction_threshold=8, compaction_filters=[rec])
    with open_db(clock, **o) as db:
        db.put(b"old", b"1", ttl=1_000_000)
        db.flush()
        old_name = db.lsm_shape()["l0"][0]
        clock.advance(6_000)
        db.put(b"fresh", b"2", ttl=1_000_000)
        db.flush()
        fresh_name = db.lsm_shape()["l0"][0]
        clock.advance(3_999)  # old SST is 9_999 ms old: not yet due
        db.compact()
        assert rec.contexts == []
        clock.advance(1)
        db.compact()
        assert [c.reason for c in rec.contexts] == [Reason.PERIODIC]
        assert rec.contexts[0].is_last_run
        assert [i.creation_timestamp for i in rec.contexts[0].inputs] == [1_000_000]
        shape = db.lsm_shape()
        assert shape["l0"] == [fresh_name]  # the fresh SST stays where it is
        assert len(shape["runs"]) == 1 and old_name not in shape["runs"][0]
        assert db.get(b"old") == b"1" and db.get(b"fresh") == b"2"


def _simulate(open_db, *, seed, interval, step, steps, threshold, jitter=0.0, max_bytes=None):
    rng = random.Random(seed)
    clock = lsm.ManualClock(10_000_000)
    rec = ReasonRecorder()
    o = dict(
        periodic_compaction_interval=interval,
        periodic_compaction_jitter=jitter,
        periodic_compaction_max_bytes=max_bytes,
        l0_compaction_threshold=threshold,
        target_sst_bytes=16_384,
        compaction_filters=[rec],
    )
    model: dict[bytes, tuple[bytes, int | None]] = {}
    deletes: dict[int, int] = {}  # seq of a user delete -> its ts
    purged_seen = 0
    # every check runs right after a pass (db.compact() at `now`), so the bound is expire_ts + P (+ the
    # largest jitter) with no slack: a row still on disk after the pass at `now` must have
    # expire_ts + P >= now. A pass every `step` ms thus purges within expire_ts + P + step.
    bound = interval + int(interval * jitter)
    with open_db(clock, **o) as db:
        # a big oldest run of rows without TTL: size-tiered jobs stay above it, so only periodic
        # jobs reach the bottom where expired rows and tombstones can be dropped
        for i in range(600):
            db.put(b"base%04d" % i, b"b" * 60)
        db.flush()
        db.compact(full=True)
        for _ in range(steps):
            now = clock.advance(step)
            for _ in range(rng.randint(1, 12)):
                k = b"k%03d" % rng.randrange(60)
                if rng.random() < 0.15:
                    deletes[db.delete(k)] = now
                    model.pop(k, None)
                    continue
                ttl = rng.choice([None, 0, 1, step // 2, step, 3 * step, interval // 2, interval, 5 * interval])
                v = b"v%d-" % now + b"x" * rng.randrange(0, 80)
                db.put(k, v, ttl=ttl)
                model[k] = (v, None if ttl is None else now + ttl)
            db.flush()
            db.compact()  # one scheduler pass
            for name, _created, (key, seq, _ts, exp, value) in _rows_on_disk(db):
                if exp is not None:
                    assert exp + bound >= now, f"{key!r} expired at {exp} still in {name} at {now}"
                    if now > exp:
                        purged_seen += 1  # an expired row waiting on disk: the bound was exercised
                if value is None and seq in deletes:
                    # a user delete's tombstone: the same bound from the time of the delete
                    assert deletes[seq] + bound >= now, f"tombstone {key!r}@{seq} in {name} at {now}"
            # reads match the model all along
            for k in (b"k%03d" % i for i in range(60)):
                want = model.get(k)
                got = db.get(k)
                if want is None or (want[1] is not None and now > want[1]):
                    assert got is None, k
                else:
                    assert got == want[0], k
    return rec, purged_seen


SIMULATIONS = [
    (1, 2_000, 250, 4, 0.0, None),
    (2, 1_000, 400, 3, 0.0, None),
    (3, 3_000, 500, 6, 0.3, None),
    (4, 1_500, 300, 4, 0.0, 20_000),  # capped: in-place windows of the oldest run
]


# every simulation on the directory and the memory store; on S3 (seconds of requests each: every pass reads
# every SST) the capped one, whose in-place windows write and delete the most objects
@pytest.mark.parametrize(
    ("backend", "seed", "interval", "step", "threshold", "jitter", "max_bytes"),
    [(b, *sim) for b in ("local", "memory") for sim in SIMULATIONS]
    + [pytest.param("s3", *SIMULATIONS[3], marks=pytest.mark.s3)],
)
def test_expired_rows_are_gone_from_disk_within_interval(open_db, seed, interval, step, threshold, jitter, max_bytes):
    rec, purged_seen = _simulate(
        open_db,
        seed=seed,
        interval=interval,
        step=step,
        steps=40,
        threshold=threshold,
        jitter=jitter,
        max_bytes=max_bytes,
    )
    reasons = {c.reason for c in rec.contexts}
    assert Reason.PERIODIC in reasons  # the bound came from periodic jobs, not only size-tiered luck
    assert purged_seen > 0  # some expired rows did sit on disk for a while


def test_partial_periodic_window_keeps_runs_valid_and_purges(open_db):
    """With a byte cap, in-place rewrites of the oldest run purge expired rows without breaking reads."""
    clock = lsm.ManualClock(1_000)
    o = dict(
        periodic_compaction_interval=1_000,
        periodic_compaction_max_bytes=1_500,
        target_sst_bytes=1024,
        l0_compaction_threshold=16,
    )
    with open_db(clock, **o) as db:
        for i in range(200):
            db.put(b"k%04d" % i, b"v" * 30, ttl=500 if i % 2 else None)
        db.flush()
        db.compact(full=True)
        assert len(db.lsm_shape()["runs"][0]) > 4  # the oldest run has many SSTs
        clock.advance(1_000)
        stats = db.compact()
        assert stats.jobs > 1  # several capped windows, not one big job
        on_disk = _rows_on_disk(db)
        assert all(exp is None for _, _, (_, _, _, exp, _) in on_disk)
        assert sorted(k for k, _ in db.scan()) == [b"k%04d" % i for i in range(0, 200, 2)]
        run = db.manifest.runs[0].ssts
        assert all(a.info.last_key < b.info.first_key for a, b in itertools.pairwise(run))


def test_deleted_value_leaves_disk_despite_steady_writes(open_db):
    """Steady writes keep size-tiered jobs rewriting the runs above the oldest one. A delete's tombstone
    rides along in those rewrites; the value it deletes, in the oldest run, must still be physically
    gone within the periodic interval (plus a pass), not survive as long as writes keep coming."""
    clock = lsm.ManualClock(1_000_000)
    interval, step = 2_000, 200
    with open_db(clock, periodic_compaction_interval=interval, l0_compaction_threshold=2) as db:
        for i in range(300):
            db.put(b"base%04d" % i, b"b" * 60)
        db.put(b"secret", b"the deleted value")
        db.flush()
        db.compact(full=True)
        deleted_at = clock.advance(step)
        db.delete(b"secret")
        n = 0
        while clock.now() < deleted_at + 3 * interval:
            now = clock.advance(step)
            for _ in range(3):
                db.put(b"filler%05d" % n, b"f" * 20, ttl=interval * 10)
                n += 1
            db.flush()
            db.compact()
            on_disk = [row for _, _, row in _rows_on_disk(db) if row[0] == b"secret"]
            if now > deleted_at + interval + step:
                assert on_disk == [], f"at {now - deleted_at} ms after the delete: {on_disk}"
            assert db.get(b"secret") is None


def test_row_flushed_after_it_expired_is_purged_by_its_age_not_the_flush_time(open_db):
    """A memtable flushed long after its rows expired: the new L0 SST is due by its oldest row, so the
    expired rows do not sit on disk for another full interval."""
    clock = lsm.ManualClock(1_000)
    with open_db(clock, periodic_compaction_interval=1_000) as db:
        db.put(b"keep", b"k")
        db.flush()
        db.compact(full=True)
        db.put(b"short", b"s", ttl=10)
        clock.advance(5_000)
        db.flush()  # the SST is fresh, its row expired 4_990 ms ago
        assert sorted(r[0] for _, _, r in _rows_on_disk(db)) == [b"keep", b"short"]
        db.compact()
        assert [r for _, _, r in _rows_on_disk(db) if r[0] == b"short"] == []
        assert db.get(b"keep") == b"k"

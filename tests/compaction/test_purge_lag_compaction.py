"""Purge lag as compactions count it: every expired row and tombstone the oldest-run step drops is
recorded ``tick - expire_ts`` (or ``tick - ts`` for a delete) ms after it stopped being visible, through
the resolver, run_job, the worker process and the DB (CompactionStats and the manifest; the DB on every
backend, the `open_db` fixture)."""

from __future__ import annotations

import dataclasses

import lsm
from compaction.filter import TtlFilter
from compaction.local import run_in_worker
from compaction.merge import CompactionStats, Resolver
from compaction.purge_lag import PurgeLag, bucket_lower
from formats.manifest import decode, encode
from tests import _store
from tests.compaction.test_ttl_compaction import build_oldest_run
from tests.compaction.test_worker import _job

T0 = 1_700_000_000_000
K = b"k"


def resolve(versions, *, tick, last=True):
    stats = CompactionStats()
    out = Resolver(tick=tick, is_last_run=last, filters=[TtlFilter(tick)], stats=stats).resolve(list(versions))
    return out, stats


def test_resolver_counts_each_drop_from_its_expiry_or_delete():
    # a delete at ts 100 over an expired row (expire_ts 50): both go, each with its own lag
    out, stats = resolve([(K, 9, 100, None, None), (K, 5, 40, 50, b"v")], tick=1_000, last=True)
    assert out == []
    # 5:v shares the tombstone's stripe: it is a shadowed version, not an expired drop
    assert stats.versions_dropped == 1 and stats.tombstones_dropped == 1
    assert stats.purge_lag.buckets == {bucket_lower(900): 1} and stats.purge_lag.max == 900


def test_resolver_expired_row_under_a_snapshot_line_counts_from_expire_ts():
    stats = CompactionStats()
    r = Resolver(tick=1_000, is_last_run=True, snapshots=[7], filters=[TtlFilter(1_000)], stats=stats)
    assert r.resolve([(K, 9, 90, None, b"b"), (K, 5, 50, 60, b"a")]) == [(K, 9, 90, None, b"b")]
    assert stats.expired_dropped == 1 and stats.purge_lag.max == 940


def test_ttl_tombstone_counts_from_expiry_not_from_write_time():
    # not the oldest run: the expired row becomes a tombstone that keeps expire_ts; nothing is purged yet
    out, stats = resolve([(K, 9, 90, 95, b"v")], tick=1_000, last=False)
    assert out == [(K, 9, 90, 95, None)] and stats.purge_lag.count == 0
    # later, into the oldest run: the lag runs from the expiry (95), not from the write (90)
    out, stats = resolve(out, tick=2_000, last=True)
    assert out == [] and stats.purge_lag.max == 1_905 and stats.purge_lag.count == 1


def test_nothing_counted_outside_the_oldest_run_or_for_rows_without_ts():
    _, stats = resolve([(K, 9, 90, None, None)], tick=1_000, last=False)
    assert stats.purge_lag.count == 0
    _, stats = resolve([(K, 9, None, None, None)], tick=1_000, last=True)  # a v0 tombstone: no ts
    assert stats.tombstones_dropped == 1 and stats.purge_lag.count == 0


def test_forced_compaction_at_known_tick_puts_rows_in_the_right_buckets(open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        for i in range(10):
            db.put(b"exp%02d" % i, b"v", ttl=1_000)  # expire_ts = T0 + 1000
        db.put(b"keep", b"forever")
        db.delete(b"gone0")
        db.delete(b"gone1")  # tombstones with ts T0
        db.flush()
        clock.set(T0 + 1_005)
        stats = db.compact(full=True)
        lag = stats.purge_lag
        # expired rows: 1005 - 1000 = 5 ms (a bucket of its own); tombstones: 1005 ms (bucket 896..1023)
        assert lag.buckets == {5: 10, bucket_lower(1_005): 2}
        assert (lag.count, lag.max) == (12, 1_005)
        assert lag.quantile(0.5) == 5 and lag.quantile(1.0) == 1_005
        assert stats.expired_dropped + stats.tombstones_dropped == 12
        # the same histogram is committed to the manifest, handle stats agree, and it survives a reopen
        assert db.manifest.purge_lag == lag.to_dict()
        assert db.compaction_stats.purge_lag == lag == db.purge_lag
    with open_db(clock) as db:
        assert db.purge_lag == lag
        clock.advance(10)
        db.put(b"exp00", b"again", ttl=1)
        db.flush()
        clock.advance(50)
        db.compact(full=True)  # expired 49 ms ago: the cumulative histogram grows by one
        total = db.purge_lag
        assert total.count == 13 and total.buckets[bucket_lower(49)] == 1
        assert total == PurgeLag().merge(lag).merge(db.compaction_stats.purge_lag)


def test_ttl_tombstone_made_above_the_oldest_run_is_counted_from_its_expiry(open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock, l0_compaction_threshold=2) as db:
        build_oldest_run(db)  # big: size-tiered jobs over L0 leave it out
        clock.advance(1_000)
        t1 = clock.now()
        db.put(b"t", b"x", ttl=100)  # expire_ts = t1 + 100
        db.flush()
        db.put(b"zz", b"f")
        db.flush()
        clock.advance(200)
        first = db.compact()  # L0 -> a run above the oldest: "t" becomes a tombstone, nothing purged
        assert first.jobs == 1 and first.filters["ttl"].removed == 1 and first.purge_lag.count == 0
        assert db.manifest.purge_lag is None
        clock.advance(2_900)  # now = t1 + 3100
        final = db.compact(full=True)
        assert final.purge_lag.count == 1
        assert final.purge_lag.max == 3_000  # from the expiry (t1 + 100), not from the write (t1)
        assert clock.now() - t1 == 3_100


def _into_store(job, root: str, prefix: str):
    """`job` with its outputs going to the sst/ of the database at `root`, named `prefix`-..."""
    store = _store.store(root)
    store.storage.makedirs(store.paths.sst_dir)
    return dataclasses.replace(job, output=dataclasses.replace(job.output, directory=store.paths.sst_dir, prefix=prefix))


def test_worker_process_reports_the_same_purge_lag_as_in_process(tmp_path, shared_root):
    """The outputs go to a store the worker process opens too: a local directory and S3 (the inputs are
    local files: they are input)."""
    from compaction.merge import run_job

    a = run_job(_into_store(_job(tmp_path, "a"), shared_root, "a"))
    b = run_in_worker(_into_store(_job(tmp_path, "b"), shared_root, "b"))
    assert a.stats.purge_lag.count > 0
    assert b.stats.purge_lag == a.stats.purge_lag
    assert a.stats.purge_lag.max == 10_000 - 5_000  # the job's tick minus the rows' expire_ts
    assert _store.names(shared_root, "sst") == sorted(n for r in (a, b) for n, _ in r.outputs)


def test_manifest_without_purges_encodes_as_before_and_with_one_round_trips():
    from formats.manifest import Manifest

    plain = encode(Manifest())
    assert b"purge_lag" not in plain  # the optional field is omitted while empty
    h = PurgeLag()
    h.record(5, n=3)
    m = Manifest(purge_lag=h.to_dict())
    assert decode(encode(m)).purge_lag == h.to_dict()
    assert PurgeLag.from_dict(decode(encode(m)).purge_lag) == h

"""Trivial move (compaction/trivial_move.py, lsm/compactor.py): a size-tiered job whose inputs do not
overlap and whose rows a merge would not change becomes the new run by a manifest edit; every case in
which a merge would change a row (filters, expired rows, tombstones at the bottom, shadowed versions,
snapshot stripes, the periodic purge) is rewritten as before. The end-to-end tests run on every backend
(the `open_db` fixture)."""

from __future__ import annotations

import dataclasses
import hashlib
import random

import pytest

import lsm
from compaction.filter import CompactionFilter, CompactionFilterFactory, Decision, Reason
from compaction.scheduler import Plan
from compaction.trivial_move import DistinctKeys, movable, sst_has_distinct_keys
from lsm.events import EventListener
from lsm.inspect import check_database
from storage.ssts import open_sst, write_sst
from tests import _store
from tests.compaction._util import fake_sst

# -- the rules, on manifest entries ---------------------------------------------------------------------


def entry(first: bytes, last: bytes, size: int = 1000, **info):
    e = fake_sst(size)
    return dataclasses.replace(e, info=dataclasses.replace(e.info, first_key=first, last_key=last, **info))


def check(plan, sources, tick=100, *, filters=False, fmt=1, compression=None, min_bytes=0, distinct=True):
    return movable(
        plan,
        sources,
        tick,
        has_filters=filters,
        format_version=fmt,
        compression=compression,
        min_bytes=min_bytes,
        distinct=lambda e: distinct,
    )


def st_plan(last=True, reason=Reason.SIZE_TIERED):
    return Plan(reason, ("x",), (), None, is_last_run=last)


def test_disjoint_inputs_move_in_key_order():
    a, b, c = entry(b"a", b"c"), entry(b"d", b"f"), entry(b"g", b"k")
    got = check(st_plan(), [[c], [a], [b]])
    assert got == (a, b, c)


def test_overlapping_or_touching_inputs_are_merged():
    assert check(st_plan(), [[entry(b"a", b"m")], [entry(b"k", b"z")]]) is None
    assert check(st_plan(), [[entry(b"a", b"k")], [entry(b"k", b"z")]]) is None  # one key in both


@pytest.mark.parametrize("reason", [Reason.PERIODIC, Reason.MANUAL])
def test_only_size_tiered_jobs_move(reason):
    assert check(st_plan(reason=reason), [[entry(b"a", b"b")], [entry(b"c", b"d")]]) is None


def test_partial_plans_never_move():
    plan = Plan(Reason.SIZE_TIERED, (), (), (1, ("x",)), True)
    assert check(plan, [[entry(b"a", b"b")]]) is None


def test_a_compaction_filter_forbids_a_move():
    assert check(st_plan(), [[entry(b"a", b"b")]], filters=True) is None


def test_rows_expired_at_the_tick_forbid_a_move_unexpired_ones_do_not():
    # expired means tick > expire_ts
    assert (
        check(st_plan(), [[entry(b"a", b"b", num_expiring=1, min_expire_ts=99, max_expire_ts=500)]]) is None
    )
    moved = entry(b"a", b"b", num_expiring=1, min_expire_ts=100, max_expire_ts=500)
    assert check(st_plan(), [[moved]]) == (moved,)


def test_tombstones_move_above_the_oldest_run_only():
    e = entry(b"a", b"b", num_tombstones=3)
    assert check(st_plan(last=True), [[e]]) is None
    assert check(st_plan(last=False), [[e]]) == (e,)


def test_format_and_compression_must_match_what_the_db_writes():
    e = entry(b"a", b"b")
    assert check(st_plan(), [[e]], fmt=0) is None
    assert check(st_plan(), [[e]], compression="zlib") is None
    z = entry(b"a", b"b", compression="zlib")
    assert check(st_plan(), [[z]], compression="zlib") == (z,)
    assert check(st_plan(), [[e]], compression="none") == (e,)  # "none" is no compression


def test_small_jobs_and_disabled_moves_are_merged():
    e = entry(b"a", b"b", size=1000)
    assert check(st_plan(), [[e]], min_bytes=1001) is None
    assert check(st_plan(), [[e]], min_bytes=1000) == (e,)
    assert check(st_plan(), [[e]], min_bytes=None) is None


def test_an_sst_with_several_versions_of_a_key_is_merged():
    assert check(st_plan(), [[entry(b"a", b"b")]], distinct=False) is None


def test_distinct_keys_reads_the_sst(db_root):
    """It reads an SST of a database's sst/, where a compaction finds its inputs: on every backend."""
    store = _store.store(db_root)
    store.storage.makedirs(store.paths.sst_dir)
    one = [(b"k%04d" % i, 5, 1, None, b"v") for i in range(300)]
    p = _store.path(db_root, "sst", "one.sst")
    write_sst(p, one, creation_timestamp=1, block_bytes=256)
    assert sst_has_distinct_keys(p)
    # a key's two versions inside one block, and straddling two blocks
    for at in (10, 150):
        rows = sorted(one + [(b"k%04d" % at, 3, 1, None, b"old")], key=lambda r: (r[0], -r[1]))
        q = _store.path(db_root, "sst", f"two{at}.sst")
        write_sst(q, rows, creation_timestamp=1, block_bytes=64 if at == 150 else 4096)
        assert not sst_has_distinct_keys(q)
    calls = []
    cache = DistinctKeys(lambda path: calls.append(path) or True)
    assert cache("a.sst", p) and cache("a.sst", p)
    assert calls == [p]  # each SST is read once
    cache.forget(["a.sst"])
    cache("a.sst", p)
    assert calls == [p, p]


# -- end to end ------------------------------------------------------------------------------------------


def digest(db, name):
    return hashlib.sha256(_store.read(db.path, "sst", name)).hexdigest()


def seq_fill(db, first, count, ttl=None, value=b"v" * 40):
    for i in range(first, first + count):
        db.put(b"k%06d" % i, value, ttl=ttl)
    db.flush()


def test_fillseq_is_moved_not_rewritten(open_db):
    with open_db(l0_compaction_threshold=4, trivial_move_min_bytes=0, min_merge_width=2) as db:
        for n in range(4):
            seq_fill(db, n * 100, 100)
        l0 = {e.name: digest(db, e.name) for e in db.manifest.l0}
        stats = db.compact()
        assert stats.jobs == 1 and stats.bytes_out == 0 and stats.moved_files == 4
        assert stats.moved_bytes == sum(_store.size(db.path, "sst", n) for n in l0)
        (run,) = db.manifest.runs
        assert {e.name: digest(db, e.name) for e in run.ssts} == l0  # same names, same bytes
        assert [e.info.first_key for e in run.ssts] == sorted(e.info.first_key for e in run.ssts)
        for n in range(4, 8):
            seq_fill(db, n * 100, 100)
        stats = db.compact()  # L0 takes the run along (w = 2): all of it moves again
        assert stats.bytes_out == 0 and db.write_amplification() == pytest.approx(
            db.flush_bytes_written / db.user_bytes_written
        )
        assert db.compaction_stats.moved_files == 12
        assert dict(db.scan()) == {b"k%06d" % i: b"v" * 40 for i in range(800)}
    with open_db() as db:
        assert len(list(db.scan())) == 800
        assert _store.names(db.path, "sst") == sorted(e.name for e in db.manifest.all_ssts())
    check_database(db.path)  # what `lsm check` runs; a memory store cannot be reached from its process


def test_overlapping_flushes_are_merged(open_db):
    with open_db(l0_compaction_threshold=2, trivial_move_min_bytes=0) as db:
        seq_fill(db, 0, 100)
        seq_fill(db, 50, 100)
        stats = db.compact()
        assert stats.moved_files == 0 and stats.bytes_out > 0
        assert len(list(db.scan())) == 150


def test_the_default_minimum_keeps_small_jobs_merging(open_db):
    with open_db(l0_compaction_threshold=2) as db:
        seq_fill(db, 0, 10)
        seq_fill(db, 10, 10)
        stats = db.compact()
        assert stats.moved_files == 0 and stats.bytes_out > 0


def test_a_released_snapshots_versions_are_collapsed_not_moved(open_db):
    with open_db(l0_compaction_threshold=2, trivial_move_min_bytes=0) as db:
        db.put(b"a", b"old")
        with db.snapshot() as snap:
            db.put(b"a", b"new")
            db.flush()  # the snapshot needs both versions: the SST holds two versions of b"a"
            assert snap.get(b"a") == b"old"
        seq_fill(db, 0, 50)
        stats = db.compact()
        assert stats.moved_files == 0 and stats.versions_dropped == 1
        assert db.get(b"a") == b"new"
        with open_sst(db.sst_path(db.manifest.runs[0].ssts[0].name)) as r:
            assert [row[0] for row in r].count(b"a") == 1


def test_a_live_snapshot_keeps_its_versions_through_a_merge(open_db):
    with open_db(l0_compaction_threshold=2, trivial_move_min_bytes=0) as db:
        db.put(b"a", b"old")
        snap = db.snapshot()
        db.put(b"a", b"new")
        db.flush()
        seq_fill(db, 0, 50)
        stats = db.compact()
        assert stats.moved_files == 0  # two versions of b"a" in one SST: merged (and both kept)
        assert snap.get(b"a") == b"old" and db.get(b"a") == b"new"
        snap.close()


def test_expired_rows_are_dropped_by_a_merge_not_moved(open_db):
    clock = lsm.ManualClock(1_000)
    with open_db(clock, l0_compaction_threshold=2, trivial_move_min_bytes=0) as db:
        seq_fill(db, 0, 50, ttl=100)
        seq_fill(db, 50, 50)
        clock.advance(101)
        stats = db.compact()
        assert stats.moved_files == 0 and stats.expired_dropped + stats.filters["ttl"].removed > 0
        assert len(list(db.scan())) == 50


def test_unexpired_ttl_rows_move_and_keep_their_age(open_db):
    clock = lsm.ManualClock(1_000)
    with open_db(clock, l0_compaction_threshold=2, trivial_move_min_bytes=0) as db:
        seq_fill(db, 0, 50, ttl=10_000)
        seq_fill(db, 50, 50)
        created = {e.name: e.info.creation_timestamp for e in db.manifest.l0}
        clock.advance(500)
        stats = db.compact()
        assert stats.moved_files == 2
        assert {e.name: e.info.creation_timestamp for e in db.manifest.runs[0].ssts} == created


def test_tombstones_in_the_oldest_run_are_dropped_by_a_merge(open_db):
    with open_db(l0_compaction_threshold=2, trivial_move_min_bytes=0) as db:
        seq_fill(db, 0, 50)
        db.delete(b"zz")
        seq_fill(db, 100, 50)  # this SST holds the tombstone of b"zz" too (it sorts after k...)
        stats = db.compact()
        assert stats.moved_files == 0 and stats.tombstones_dropped == 1


class _Upper(CompactionFilter):
    def filter(self, entry):
        return Decision.change_value(entry.value.upper())


class UpperFactory(CompactionFilterFactory):
    def create(self, ctx):
        return _Upper()


def test_a_compaction_filter_sees_every_row(open_db):
    with open_db(l0_compaction_threshold=2, trivial_move_min_bytes=0, compaction_filters=[UpperFactory()]
    ) as db:
        seq_fill(db, 0, 10)
        seq_fill(db, 10, 10)
        stats = db.compact()
        assert stats.moved_files == 0
        assert db.get(b"k000001") == b"V" * 40


def test_an_explicit_executor_runs_the_merge(open_db):
    with open_db(l0_compaction_threshold=2, trivial_move_min_bytes=0) as db:
        seq_fill(db, 0, 10)
        seq_fill(db, 10, 10)
        stats = db.compact(executor="local")
        assert stats.moved_files == 0 and stats.bytes_out > 0


class Events(EventListener):
    def __init__(self):
        self.seen = []

    def on_compaction_begin(self, info):
        self.seen.append(("begin", info))

    def on_compaction_end(self, info):
        self.seen.append(("end", info))


def test_a_move_is_reported_as_a_compaction_with_executor_move(open_db):
    ev = Events()
    with open_db(l0_compaction_threshold=2, trivial_move_min_bytes=0, event_listeners=[ev]) as db:
        seq_fill(db, 0, 10)
        seq_fill(db, 10, 10)
        names = sorted(e.name for e in db.manifest.l0)
        db.compact()
        (_, begin), (_, end) = ev.seen
        assert (begin.reason, begin.executor) == ("size_tiered", "move")
        assert sorted(begin.inputs) == names and sorted(end.outputs) == names
        assert end.stats.moved_files == 2 and end.error is None


def _periodic_run(open_db, path, seed):
    """Ascending writes (every flush moves) with TTL rows; after each scheduler pass no row expired more
    than the periodic interval ago is left on disk. Returns the (reason, executor) pairs of the jobs."""
    rng = random.Random(seed)
    clock = lsm.ManualClock(10_000_000)
    ev = Events()
    interval, step = 2_000, 250
    o = dict(
        periodic_compaction_interval=interval,
        l0_compaction_threshold=3,
        trivial_move_min_bytes=0,
        event_listeners=[ev],
    )
    nxt = 0
    with open_db(clock, path=path, **o) as db:
        for _ in range(40):
            now = clock.advance(step)
            for _ in range(rng.randint(1, 12)):
                db.put(b"k%06d" % nxt, b"x" * 30, ttl=rng.choice([None, step, interval // 2, 3 * interval]))
                nxt += 1
            db.flush()
            db.compact()
            for e in db.manifest.all_ssts():
                with open_sst(db.sst_path(e.name)) as r:
                    for key, _seq, _ts, exp, _v in r:
                        assert exp is None or exp + interval >= now, f"{key!r} expired at {exp}, now {now}"
    return {(i.reason, i.executor) for k, i in ev.seen if k == "begin"}


def test_periodic_bound_holds_with_moves(open_db, new_root, backend):
    """Moves never restart an SST's age, and periodic jobs rewrite: the TTL bound holds exactly (one seed
    on S3, where reading every SST after each of its 40 passes takes seconds)."""
    kinds = set()
    for seed in (1,) if backend == "s3" else (1, 2, 3):
        kinds |= _periodic_run(open_db, new_root(f"db-{seed}"), seed)
    assert ("size_tiered", "move") in kinds and ("periodic", "local") in kinds

"""The leveled policy: levels are the sorted runs, targets from the bottom, one SST pushed at a time."""

from __future__ import annotations

import dataclasses
import random

import pytest

import lsm
from compaction.filter import Reason
from compaction.leveled import LeveledPolicy, levels_wanted, overlapping, targets
from compaction.scheduler import apply_plan
from formats.manifest import Manifest, SortedRun, SstEntry
from lsm.inspect import check_database
from tests.compaction._util import fake_sst


def _sst(first: bytes, last: bytes, size: int = 100) -> SstEntry:
    e = fake_sst(size)
    return SstEntry(e.name, dataclasses.replace(e.info, first_key=first, last_key=last))


def test_levels_and_targets_are_computed_from_the_bottom() -> None:
    assert [levels_wanted(b, 100, 10) for b in (50, 100, 101, 1000, 1001, 10_000)] == [1, 1, 2, 2, 3, 3]
    runs = (SortedRun(3, (_sst(b"a", b"b", 10),)), SortedRun(2, (_sst(b"a", b"b", 50),)), SortedRun(1, (_sst(b"a", b"z", 1000),)))
    assert targets(runs, 10) == [10.0, 100.0, 1000.0]
    # no level above the last targets less than the base (RocksDB's floor); the last is its size
    assert targets(runs, 10, floor=200) == [200, 200, 1000.0]
    run = SortedRun(1, (_sst(b"a", b"c"), _sst(b"d", b"f"), _sst(b"g", b"i")))
    assert overlapping(run, b"c", b"d") == run.ssts[:2]
    assert overlapping(run, b"ca", b"cz") == () and overlapping(run, b"j", b"k") == ()
    assert overlapping(run, b"0", b"z") == run.ssts


def _policy(**kw) -> LeveledPolicy:
    kw.setdefault("max_bytes_for_level_base", 1000)
    return LeveledPolicy(lsm.DbOptions(l0_compaction_threshold=2, **kw))


def test_l0_goes_into_the_top_level_with_the_ssts_it_overlaps() -> None:
    p = _policy()
    l0 = (_sst(b"c", b"e"), _sst(b"d", b"f"))
    top = SortedRun(1, (_sst(b"a", b"b"), _sst(b"c", b"d"), _sst(b"e", b"g"), _sst(b"h", b"i")))
    plan = p.pick(Manifest(l0=l0, runs=(top,)), 0)
    assert plan is not None and plan.reason is Reason.LEVELED and plan.is_last_run
    assert plan.l0 == tuple(e.name for e in l0) and plan.partial == (1, (top.ssts[1].name, top.ssts[2].name))
    # fewer levels than the bottom's size needs: L0 becomes a new top level, nothing below is read
    big = SortedRun(1, (_sst(b"a", b"z", 5000),))
    plan = p.pick(Manifest(l0=l0, runs=(big,)), 0)
    assert plan is not None and (plan.runs, plan.partial, plan.is_last_run) == ((), None, False)
    assert p.pick(Manifest(l0=l0[:1], runs=(top,)), 0) is None  # below the trigger, levels in shape


def test_the_most_oversized_level_pushes_its_cheapest_sst_down() -> None:
    p = _policy(max_bytes_for_level_base=100)
    # bottom 10_000 -> targets 100, 1_000, 10_000; the top (300) is 3x over, the middle (1_500) 1.5x
    lower_ssts = (_sst(b"a", b"c", 400), _sst(b"d", b"f", 1100))
    top = SortedRun(3, (_sst(b"a", b"b", 100), _sst(b"c", b"c", 100), _sst(b"g", b"h", 100)))
    m = Manifest(runs=(top, SortedRun(2, lower_ssts), SortedRun(1, (_sst(b"a", b"z", 10_000),))))
    plan = p.pick(m, 0)
    # g..h overlaps nothing below (cost 0): pushed first, as a move if the compactor may
    assert plan is not None and plan.lifted == (3, (top.ssts[2].name,)) and plan.partial == (2, ())
    assert not plan.is_last_run and plan.input_entries(m.l0, m.runs) == [[top.ssts[2]]]
    after = apply_plan(m, plan, (top.ssts[2],), 0)
    assert [len(r.ssts) for r in after.runs] == [2, 3, 1]
    assert [e.info.first_key for e in after.runs[1].ssts] == [b"a", b"d", b"g"]
    plan = p.pick(after, 0)  # a..b and c..c both overlap a..c (400): the smaller ratio is equal; first wins
    assert plan.lifted == (3, (top.ssts[0].name,)) and plan.partial == (2, (lower_ssts[0].name,))
    assert plan.input_entries(after.l0, after.runs) == [[top.ssts[0]], [lower_ssts[0]]]


def test_a_level_within_the_base_is_not_pushed_even_above_a_tenth_of_the_bottom() -> None:
    """RocksDB floors every level's target at max_bytes_for_level_base: a top level of 600 over a
    bottom of 5_000 (a tenth: 500) stays, so the next L0 job merges into it instead of the bottom."""
    p = _policy()  # base 1000
    top = SortedRun(2, (_sst(b"a", b"m", 300), _sst(b"n", b"z", 300)))
    m = Manifest(runs=(top, SortedRun(1, (_sst(b"a", b"z", 5000),))))
    assert p.pick(m, 0) is None
    grown = Manifest(runs=(SortedRun(2, (*top.ssts, _sst(b"zz", b"zz", 500))), m.runs[1]))
    plan = p.pick(grown, 0)  # 1_100 > 1_000: now it is pushed
    assert plan is not None and plan.lifted is not None and plan.lifted[0] == 2


def _fill(db: lsm.DB, model: dict, rng: random.Random, n: int, keys: int, ttl_every: int = 0) -> None:
    for i in range(n):
        k = b"key-%05d" % rng.randrange(keys)
        if rng.random() < 0.05:
            db.delete(k)
            model.pop(k, None)
        else:
            v = b"%d-" % i + b"x" * rng.randrange(10, 60)
            db.put(k, v)
            model[k] = v


def _same(db: lsm.DB, model: dict) -> None:
    assert dict(db.scan()) == model


# on the directory and the memory store (the object store's code); on S3 every pass rewrites dozens of
# 4 KiB objects and the check reads them all after each of the six rounds: 40 s of requests
@pytest.mark.parametrize("backend", ["local", "memory"])
def test_leveled_db_builds_levels_reads_right_and_checks_clean(open_db, db_root) -> None:
    rng = random.Random(7)
    db = open_db(
        compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=16 << 10, max_bytes_for_level_multiplier=4, l0_compaction_threshold=2,
        trivial_move_min_bytes=0,
    )
    model: dict = {}
    for _ in range(6):
        _fill(db, model, rng, 1500, 3000)
        db.flush()
        db.compact()
        _same(db, model)
        check_database(db_root)
    m = db.manifest
    assert len(m.runs) >= 3 and len(m.l0) < 2
    sizes = [r.size for r in m.runs]
    assert sizes[-1] == max(sizes)  # the last level holds the most
    for k, t in enumerate(targets(m.runs, 4, floor=16 << 10)[:-1]):
        assert m.runs[k].size <= t or len(m.runs[k].ssts) == 1  # every level within its target
    assert db.compaction_stats.moved_files > 0 or db.compaction_stats.jobs > 0
    for k in list(model)[:50]:
        assert db.get(k) == model[k]
    db.close()


def test_sequential_writes_move_down_without_a_rewrite(open_db, db_root, backend) -> None:
    db = open_db(
        compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=8 << 10, l0_compaction_threshold=2, trivial_move_min_bytes=0,
    )
    for i in range(1500 if backend == "s3" else 4000):  # S3: 12 SSTs instead of 36, each still moved down
        db.put(b"seq-%06d" % i, b"v" * 30)
    db.flush()
    db.compact()
    s = db.compaction_stats
    assert s.moved_files > 0 and s.bytes_out == 0  # every job was a move: each row written once
    check_database(db_root)
    assert db.get(b"seq-000123") == b"v" * 30
    db.close()


POLICIES = ("tiered", "leveled", "fifo")


# each first policy on the directory and the memory store; on S3 (seconds of requests a reopening) the
# tiered start, with a third of the rows a round (three flushes): tiered, leveled, fifo, tiered
@pytest.mark.parametrize(
    ("backend", "first"),
    [(b, first) for b in ("local", "memory") for first in POLICIES] + [pytest.param("s3", "tiered", marks=pytest.mark.s3)],
)
def test_a_store_opens_under_every_other_policy(open_db, db_root, backend, first) -> None:
    rng = random.Random(3)
    clock = lsm.ManualClock(1_000)
    kw = dict(memtable_bytes=8 << 10, target_sst_bytes=4 << 10, max_bytes_for_level_base=8 << 10,
              l0_compaction_threshold=2)
    n, keys = (250, 500) if backend == "s3" else (800, 1500)
    model: dict = {}
    for policy in [first] + [p for p in POLICIES if p != first] + [first]:
        db = open_db(clock, compaction_policy=policy, **kw)
        _same(db, model)
        _fill(db, model, rng, n, keys)
        db.flush()
        db.compact()
        _same(db, model)
        db.close()
        check_database(db_root)


def test_leveled_with_ttl_and_periodic_compaction(open_db, db_root, backend) -> None:
    clock = lsm.ManualClock(1_000)
    db = open_db(
        clock, compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=8 << 10, l0_compaction_threshold=2, periodic_compaction_interval=5_000,
    )
    n = 1_000 if backend == "s3" else 3_000  # on S3 a third of the rows: 15 SSTs instead of 44, all due
    for i in range(n):
        db.put(b"t-%05d" % i, b"v" * 20, ttl=1_000 if i % 2 else None)
    db.flush()
    db.compact()
    clock.advance(6_000)  # every TTL row expired, every SST due
    db.compact()
    assert db.get(b"t-00001") is None and db.get(b"t-00002") == b"v" * 20
    rows = sum(e.info.num_rows for e in db.manifest.all_ssts())
    assert rows == n // 2  # the expired rows are physically gone, not only hidden
    check_database(db_root)
    db.close()


def test_bad_level_options() -> None:
    with pytest.raises(ValueError, match="max_bytes_for_level_multiplier"):
        lsm.DbOptions(max_bytes_for_level_multiplier=1)
    with pytest.raises(ValueError, match="max_bytes_for_level_base"):
        lsm.DbOptions(max_bytes_for_level_base=0)


def test_check_still_finds_levels_read_in_the_wrong_order(open_db, db_root, backend) -> None:
    from lsm.inspect import CheckError
    from tests.tools._cli import write_manifest

    rng = random.Random(5)
    db = open_db(
        compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=4 << 10, max_bytes_for_level_multiplier=4, l0_compaction_threshold=2,
    )
    # on S3 (seconds of requests a round) two smaller rounds: they still leave two levels of a dozen SSTs
    rounds, n = (2, 600) if backend == "s3" else (3, 1500)
    for _ in range(rounds):
        _fill(db, {}, rng, n, n)  # many overwrites: the levels share keys
        db.flush()
        db.compact()
    runs = db.manifest.runs
    db.close()
    assert len(runs) >= 2
    check_database(db_root)
    write_manifest(db_root, runs=runs[::-1], l0=())
    with pytest.raises(CheckError, match="does not hold only newer seqs"):
        check_database(db_root)

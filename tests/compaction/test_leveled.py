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
from tests.compaction._util import fake_sst, open_db


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


def test_leveled_db_builds_levels_reads_right_and_checks_clean(tmp_path) -> None:
    rng = random.Random(7)
    path = str(tmp_path / "db")
    db = open_db(
        path, compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=16 << 10, max_bytes_for_level_multiplier=4, l0_compaction_threshold=2,
        trivial_move_min_bytes=0,
    )
    model: dict = {}
    for _ in range(6):
        _fill(db, model, rng, 1500, 3000)
        db.flush()
        db.compact()
        _same(db, model)
        check_database(path)
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


def test_sequential_writes_move_down_without_a_rewrite(tmp_path) -> None:
    path = str(tmp_path / "db")
    db = open_db(
        path, compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=8 << 10, l0_compaction_threshold=2, trivial_move_min_bytes=0,
    )
    for i in range(4000):
        db.put(b"seq-%06d" % i, b"v" * 30)
    db.flush()
    db.compact()
    s = db.compaction_stats
    assert s.moved_files > 0 and s.bytes_out == 0  # every job was a move: each row written once
    check_database(path)
    assert db.get(b"seq-000123") == b"v" * 30
    db.close()


@pytest.mark.parametrize("first", ["tiered", "leveled", "fifo"])
def test_a_store_opens_under_every_other_policy(tmp_path, first) -> None:
    rng = random.Random(3)
    path = str(tmp_path / "db")
    clock = lsm.ManualClock(1_000)
    kw = dict(memtable_bytes=8 << 10, target_sst_bytes=4 << 10, max_bytes_for_level_base=8 << 10,
              l0_compaction_threshold=2)
    model: dict = {}
    for policy in [first] + [p for p in ("tiered", "leveled", "fifo") if p != first] + [first]:
        db = open_db(path, clock, compaction_policy=policy, **kw)
        _same(db, model)
        _fill(db, model, rng, 800, 1500)
        db.flush()
        db.compact()
        _same(db, model)
        db.close()
        check_database(path)


def test_leveled_with_ttl_and_periodic_compaction(tmp_path) -> None:
    clock = lsm.ManualClock(1_000)
    path = str(tmp_path / "db")
    db = open_db(
        path, clock, compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=8 << 10, l0_compaction_threshold=2, periodic_compaction_interval=5_000,
    )
    for i in range(3000):
        db.put(b"t-%05d" % i, b"v" * 20, ttl=1_000 if i % 2 else None)
    db.flush()
    db.compact()
    clock.advance(6_000)  # every TTL row expired, every SST due
    db.compact()
    assert db.get(b"t-00001") is None and db.get(b"t-00002") == b"v" * 20
    rows = sum(e.info.num_rows for e in db.manifest.all_ssts())
    assert rows == 1500  # the expired rows are physically gone, not only hidden
    check_database(path)
    db.close()


def test_bad_level_options() -> None:
    with pytest.raises(ValueError, match="max_bytes_for_level_multiplier"):
        lsm.DbOptions(max_bytes_for_level_multiplier=1)
    with pytest.raises(ValueError, match="max_bytes_for_level_base"):
        lsm.DbOptions(max_bytes_for_level_base=0)


def test_check_still_finds_levels_read_in_the_wrong_order(tmp_path) -> None:
    from lsm.inspect import CheckError
    from tests.tools._cli import write_manifest

    rng = random.Random(5)
    path = tmp_path / "db"
    db = open_db(
        str(path), compaction_policy="leveled", memtable_bytes=8 << 10, target_sst_bytes=4 << 10,
        max_bytes_for_level_base=4 << 10, max_bytes_for_level_multiplier=4, l0_compaction_threshold=2,
    )
    for _ in range(3):
        _fill(db, {}, rng, 1500, 1500)  # many overwrites: the levels share keys
        db.flush()
        db.compact()
    runs = db.manifest.runs
    db.close()
    assert len(runs) >= 2
    check_database(str(path))
    write_manifest(path, runs=runs[::-1], l0=())
    with pytest.raises(CheckError, match="does not hold only newer seqs"):
        check_database(str(path))

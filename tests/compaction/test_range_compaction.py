"""Range compaction (RocksDB's CompactRange): `compaction.scheduler.pick_range` on plain manifests, and
``DB.compact(start=, end=)`` on a real store, on every backend (the `open_db` fixture).

Rules under test: every SST overlapping [start, end) is an input, and so is every SST overlapping the
inputs' key span, until none left out does (else an output in the oldest run would overlap an SST kept
beside it, or sit under a newer source that shares a key with it); the outputs replace the oldest run's
inputs there; SSTs outside the span are not touched; reads give what they gave before; the oldest-run
purge (tombstones, expired rows) happens inside the range; bad arguments are refused.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

import lsm
from compaction.filter import Reason
from compaction.scheduler import Plan, apply_plan, pick_range
from formats.manifest import Manifest, SortedRun, SstEntry
from lsm.inspect import check_database
from tests.compaction._util import fake_sst


def keyed(first: bytes, last: bytes) -> SstEntry:
    e = fake_sst()
    return SstEntry(e.name, dataclasses.replace(e.info, first_key=first, last_key=last))


def test_pick_range_takes_what_overlaps_and_closes_over_overlap():
    a, b, c = keyed(b"a", b"c"), keyed(b"d", b"f"), keyed(b"g", b"i")  # the oldest run
    upper = keyed(b"e", b"h")  # a newer run's SST spanning two of them
    far = keyed(b"x", b"z")
    runs = (SortedRun(2, (upper, far)), SortedRun(1, (a, b, c)))
    plan = pick_range((), runs, b"a", b"b")  # only a holds keys there, and nothing overlaps a
    assert plan is not None and plan.reason is Reason.MANUAL and plan.is_last_run
    assert plan.taken == () and plan.partial == (1, (a.name,))
    # [d, e) meets only b, but the newer run's "upper" (e..h) overlaps b's span and brings c (g..i)
    plan = pick_range((), runs, b"d", b"e")
    assert plan.taken == ((2, (upper.name,)),) and plan.partial == (1, (b.name, c.name))
    # the inputs in read order: the newer run's SST, then the oldest run's
    sources = plan.input_entries((), runs)
    assert [[e.name for e in s] for s in sources] == [[upper.name], [b.name, c.name]]
    out = keyed(b"d", b"i")
    m = apply_plan(Manifest(runs=runs, next_run_id=3), plan, (out,), tick=0)
    assert [[e.name for e in r.ssts] for r in m.runs] == [[far.name], [a.name, out.name]]
    assert pick_range((), runs, b"j", b"w") is None  # nothing stored there
    tail = pick_range((), runs, b"z", None)  # nothing of the oldest run: the output joins it all the same
    assert tail.taken == ((2, (far.name,)),) and tail.partial == (1, ())


def test_pick_range_takes_l0_and_a_run_emptied_by_it_goes():
    l0_new, l0_old = keyed(b"b", b"b"), keyed(b"a", b"m")  # newest first
    only = keyed(b"k", b"l")
    runs = (SortedRun(3, (only,)), SortedRun(1, (keyed(b"a", b"c"), keyed(b"x", b"y"))))
    plan = pick_range((l0_new, l0_old), runs, b"b", b"c")
    # l0_old (a..m) joins through b, and brings the newer run's only SST (k..l) with it
    assert set(plan.l0) == {l0_new.name, l0_old.name}
    assert plan.taken == ((3, (only.name,)),)
    out = keyed(b"a", b"m")
    m = apply_plan(Manifest(l0=(l0_new, l0_old), runs=runs, next_run_id=4), plan, (out,), tick=0)
    assert m.l0 == () and [r.id for r in m.runs] == [1]  # run 3 gave up its only SST
    assert [e.info.first_key for e in m.runs[0].ssts] == [b"a", b"x"]
    # without runs, the output is the one run
    plan = pick_range((l0_new,), (), None, None)
    assert plan == Plan(Reason.MANUAL, (l0_new.name,), (), None, is_last_run=True)


def _fill(db: lsm.DB, clock: lsm.ManualClock, rnd: random.Random, model: dict, n: int, keys: range) -> None:
    for _ in range(n):
        k = b"k%04d" % rnd.choice(keys)
        if rnd.random() < 0.15:
            db.delete(k)
            model.pop(k, None)
        else:
            v = b"v%d" % rnd.randrange(10**6)
            db.put(k, v, ttl=rnd.choice((None, None, 500)))
            model[k] = v
    db.flush()


def test_range_compaction_rewrites_the_range_only_and_reads_the_same(open_db, db_root):
    clock = lsm.ManualClock(1_700_000_000_000)
    opts = dict(target_sst_bytes=2048, l0_compaction_threshold=100)
    rnd = random.Random(7)
    model: dict[bytes, bytes] = {}
    with open_db(clock, **opts) as db:
        _fill(db, clock, rnd, model, 1500, range(1000))
        db.compact(full=True)  # one run of many small SSTs
        _fill(db, clock, rnd, model, 200, range(300, 400))  # L0 that stays within [k0300, k0400)
        clock.advance(1_000)  # the TTL rows have expired
        expected = dict(db.scan())
        before = db.manifest
        stats = db.compact(start=b"k0300", end=b"k0400")
        after = db.manifest
        assert stats.jobs == 1 and stats.tombstones_dropped > 0
        assert dict(db.scan()) == expected
        # no tombstone and no expired row is left in the range: it was purged in the oldest run
        versions = list(lsm.inspect.stored_versions(db_root, b"k0300", b"k0400"))
        assert versions and all(v[4] is not None and (v[3] is None or v[3] >= clock.now()) for v in versions)
        assert after.l0 == () and len(after.runs) == 1
        gone = {e.name for e in before.all_ssts()} - {e.name for e in after.all_ssts()}
        kept = [e for e in after.runs[0].ssts if e.name not in {x.name for x in before.all_ssts()}]
        # what left is the L0 and the run's SSTs that overlap the range; the rest stayed as they were
        assert gone == {e.name for e in before.l0} | {
            e.name for e in before.runs[0].ssts if e.info.last_key >= b"k0300" and e.info.first_key < b"k0400"
        }
        assert kept and all(b"k0250" < e.info.first_key and e.info.last_key < b"k0450" for e in kept)
    check_database(db_root)
    with open_db(clock, read_only=True, **opts) as db:
        assert dict(db.scan()) == expected


def test_range_compaction_arguments(open_db):
    with open_db() as db:
        db.put(b"a", b"1")
        db.flush()
        assert db.compact(start=b"x").jobs == 0  # nothing stored at or after x
        with pytest.raises(ValueError, match="after end"):
            db.compact(start=b"z", end=b"a")
        with pytest.raises(ValueError, match="full=True compacts every key"):
            db.compact(full=True, start=b"a")
        with pytest.raises(TypeError, match="start must be bytes"):
            db.compact(start="a")  # type: ignore[arg-type]
        assert db.compact(end=b"b").jobs == 1 and db.lsm_shape()["l0"] == []

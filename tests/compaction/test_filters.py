"""User compaction filters end to end through the DB (compaction/filter.py, merge.py, lsm/compactor.py).

Each test opens a DB with ``compaction_filters=[SomeFactory()]``, writes, flushes, compacts and reads
back, on every backend (the `open_db` fixture); files are read with formats.sst.SstReader where the test is
about what is stored.
"""

from __future__ import annotations

import pytest

import lsm
from compaction.filter import (
    CompactionFilter,
    CompactionFilterFactory,
    Decision,
    Entry,
    FilterContext,
    Reason,
)
from storage.ssts import open_sst
from tests import _store


def rows_on_disk(db):
    out = []
    for name in _store.names(db.path, "sst"):
        with open_sst(db.sst_path(name)) as r:
            out += list(r)
    return out


# -- filters used below ------------------------------------------------------------------------------


class Upper(CompactionFilter):
    def filter(self, entry: Entry):
        return Decision.change_value(entry.value.upper())


class UpperFactory(CompactionFilterFactory):
    def create(self, ctx):
        return Upper()


class RemovePrefix(CompactionFilter):
    def __init__(self, prefix: bytes):
        self.prefix = prefix

    def filter(self, entry: Entry):
        return Decision.REMOVE if entry.key.startswith(self.prefix) else Decision.KEEP


class RemovePrefixFactory(CompactionFilterFactory):
    def __init__(self, prefix: bytes):
        self.prefix = prefix

    def create(self, ctx):
        return RemovePrefix(self.prefix)


class ByValue(CompactionFilter):
    """Applies `decision` to entries whose value equals `value`."""

    def __init__(self, value, decision):
        self.value, self.decision = value, decision

    def filter(self, entry):
        return self.decision if entry.value == self.value else Decision.KEEP


class ByValueFactory(CompactionFilterFactory):
    def __init__(self, value, decision):
        self.value, self.decision = value, decision

    def create(self, ctx):
        return ByValue(self.value, self.decision)


class Recording(CompactionFilter):
    def __init__(self, log, tag, fn=None):
        self.log, self.tag, self.fn = log, tag, fn

    @property
    def name(self):
        return self.tag

    def filter(self, entry):
        self.log.append((self.tag, entry))
        return self.fn(entry) if self.fn else Decision.KEEP


class RecordingFactory(CompactionFilterFactory):
    """Records every FilterContext it is given and every entry its filters see."""

    def __init__(self, tag="rec", fn=None, log=None):
        self.tag, self.fn = tag, fn
        self.contexts: list[FilterContext] = []
        self.log = [] if log is None else log

    def create(self, ctx):
        self.contexts.append(ctx)
        return Recording(self.log, self.tag, self.fn)


class Boom(Exception):
    pass


class RaiseOn(CompactionFilter):
    def __init__(self, key):
        self.key = key

    def filter(self, entry):
        if entry.key == self.key:
            raise Boom(f"filter refused {entry.key!r}")
        return Decision.KEEP


class RaiseOnFactory(CompactionFilterFactory):
    def __init__(self, key):
        self.key = key
        self.armed = True

    def create(self, ctx):
        return RaiseOn(self.key if self.armed else None)


# -- CHANGE_VALUE and REMOVE end to end ----------------------------------------------------------------


def test_change_value_filter_rewrites_values(open_db):
    with open_db(compaction_filters=[UpperFactory()]) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"value-%02d" % i)
        db.flush()
        assert db.get(b"k03") == b"value-03"  # filters run at compaction, not at flush or read
        stats = db.compact(full=True)
        assert stats.filters["Upper"].changed == 20
        assert db.get(b"k03") == b"VALUE-03"
        assert dict(db.scan()) == {b"k%02d" % i: b"VALUE-%02d" % i for i in range(20)}
        assert {r[4] for r in rows_on_disk(db)} == {b"VALUE-%02d" % i for i in range(20)}
        e = db.get_entry(b"k03")
        assert e.value == b"VALUE-03" and e.seq == 4  # the row keeps its seq
    with open_db(compaction_filters=[UpperFactory()]) as db:  # durable
        assert db.get(b"k19") == b"VALUE-19"


def test_remove_filter_deletes_a_key_prefix(open_db):
    with open_db(compaction_filters=[RemovePrefixFactory(b"tmp:")]) as db:
        for i in range(10):
            db.put(b"tmp:%d" % i, b"scratch")
            db.put(b"keep:%d" % i, b"data")
        db.flush()
        assert db.get(b"tmp:3") == b"scratch"
        stats = db.compact(full=True)
        assert stats.filters["RemovePrefix"].removed == 10
        assert db.get(b"tmp:3") is None
        assert list(db.scan(prefix=b"tmp:")) == []
        assert len(list(db.scan(prefix=b"keep:"))) == 10
        # into the oldest run the tombstones REMOVE produced are dropped as well: nothing left on disk
        assert not [r for r in rows_on_disk(db) if r[0].startswith(b"tmp:")]


def test_remove_keeps_a_tombstone_when_not_into_the_oldest_run(open_db):
    """REMOVE in a job above older runs leaves a tombstone, so an older version cannot resurface."""
    f = ByValueFactory(b"v2", Decision.REMOVE)
    with open_db(compaction_filters=[f], l0_compaction_threshold=2) as db:
        seq_v2 = _old_version_in_oldest_run(db)
        stats = db.compact()
        assert stats.filters["ByValue"].removed == 1
        assert db.get(b"k") is None
        mine = sorted((r for r in rows_on_disk(db) if r[0] == b"k"), key=lambda r: -r[1])
        assert [(r[1], r[4]) for r in mine] == [(seq_v2, None), (1, b"v1")]  # tombstone keeps v2's seq
        db.compact(full=True)
        assert db.get(b"k") is None
        assert [r for r in rows_on_disk(db) if r[0] == b"k"] == []


# -- DROP -----------------------------------------------------------------------------------------------


def _old_version_in_oldest_run(db):
    """k = v1 in a big oldest run, then k = v2 in L0 with another L0 SST: a size-tiered job over L0
    alone (the big run stays out of it) is what db.compact() will run next. Returns v2's seq."""
    db.put(b"k", b"v1")
    for i in range(400):
        db.put(b"big%04d" % i, b"x" * 50)
    db.flush()
    db.compact(full=True)
    seq_v2 = db.put(b"k", b"v2")
    db.flush()
    db.put(b"other", b"o")
    db.flush()
    assert len(db.manifest.l0) == 2 and len(db.manifest.runs) == 1
    assert db.get(b"k") == b"v2"
    return seq_v2


def test_drop_lets_an_older_version_in_a_run_outside_the_job_resurface(open_db):
    f = ByValueFactory(b"v2", Decision.DROP)
    with open_db(compaction_filters=[f], l0_compaction_threshold=2) as db:
        _old_version_in_oldest_run(db)
        base = db.manifest.runs[0].id
        stats = db.compact()
        assert stats.filters["ByValue"].dropped == 1
        assert base in [r.id for r in db.manifest.runs]  # the old run was not part of the job
        assert len(db.manifest.runs) == 2
        assert db.get(b"k") == b"v1"  # DROP wrote no tombstone: the older version shows again
        assert dict(db.scan())[b"k"] == b"v1"


# -- what the factory is told ----------------------------------------------------------------------------


def test_context_carries_tick_last_run_reason_and_inputs(open_db):
    clock = lsm.ManualClock(50_000)
    rec = RecordingFactory()
    with open_db(clock, compaction_filters=[rec], l0_compaction_threshold=2,
                 periodic_compaction_interval=10_000) as db:
        # manual full compaction
        db.put(b"a", b"1", ttl=1_000_000)
        db.flush()
        infos = [e.info for e in db.manifest.all_ssts()]
        clock.advance(5)
        db.compact(full=True)
        ctx = rec.contexts[-1]
        assert ctx.reason is Reason.MANUAL and ctx.reason == "manual"
        assert ctx.is_last_run is True
        assert ctx.tick == 50_005
        assert list(ctx.inputs) == infos
        # size-tiered: L0 at the threshold above a big run that stays out of the job
        for i in range(300):
            db.put(b"big%04d" % i, b"x" * 50)
        db.flush()
        db.compact(full=True)
        clock.advance(10)
        db.put(b"b", b"2")
        db.flush()
        db.put(b"c", b"3")
        db.flush()
        l0_infos = [e.info for e in db.manifest.l0]
        n = len(rec.contexts)
        db.compact()
        ctx = rec.contexts[n]
        assert ctx.reason is Reason.SIZE_TIERED and ctx.reason == "size_tiered"
        assert ctx.is_last_run is False
        assert ctx.tick == 50_015
        assert list(ctx.inputs) == l0_infos
        # periodic: the oldest run holds a TTL row and gets old
        clock.advance(20_000)
        n = len(rec.contexts)
        db.compact()
        assert [c.reason for c in rec.contexts[n:]] == [Reason.PERIODIC]
        assert rec.contexts[n].reason == "periodic"
        assert rec.contexts[n].is_last_run is True
        assert rec.contexts[n].tick == 70_015
        assert all(i.creation_timestamp <= 50_015 for i in rec.contexts[n].inputs)


def test_factory_creates_a_fresh_filter_per_job(open_db):
    made = []

    class Counting(CompactionFilterFactory):
        def create(self, ctx):
            f = Upper()
            made.append(f)
            return f

    with open_db(compaction_filters=[Counting()]) as db:
        db.put(b"a", b"x")
        db.flush()
        db.compact(full=True)
        db.put(b"b", b"y")
        db.flush()
        db.compact(full=True)
    assert len(made) == 2 and made[0] is not made[1]


# -- order and counts ----------------------------------------------------------------------------------


def test_filters_run_in_order_after_ttl(open_db):
    clock = lsm.ManualClock(1_000)
    log = []
    first = RecordingFactory("first", lambda e: Decision.change_value(e.value + b"+1"), log)
    second = RecordingFactory("second", lambda e: Decision.change_value(e.value + b"+2"), log)
    with open_db(clock, compaction_filters=[first, second]) as db:
        db.put(b"live", b"v")
        db.put(b"short", b"gone soon", ttl=10)
        db.flush()
        clock.advance(11)
        stats = db.compact(full=True)
        # the TTL filter ran first and removed the expired row: no user filter saw it
        assert [(tag, e.key) for tag, e in log] == [("first", b"live"), ("second", b"live")]
        assert log[1][1].value == b"v+1"  # the second filter sees the first one's new value
        assert db.get(b"live") == b"v+1+2"
        assert db.get(b"short", lsm.ReadOptions(include_expired=True)) is None
        assert stats.filters["ttl"].removed == 1
        assert stats.filters["first"].changed == 1
        assert stats.filters["second"].changed == 1
        # counts accumulate on the DB across jobs
        db.put(b"more", b"m")
        db.flush()
        db.compact(full=True)
        total = db.compaction_stats.filters
        assert total["first"].changed == 3  # live again (already +1+2) and more
        assert total["ttl"].removed == 1


def test_filters_do_not_touch_versions_a_snapshot_sees(open_db):
    with open_db(compaction_filters=[UpperFactory()]) as db:
        db.put(b"a", b"old")
        db.put(b"pinned", b"p")
        snap = db.snapshot()
        db.put(b"a", b"new")
        db.flush()
        db.compact(full=True)
        assert db.get(b"a") == b"NEW"  # newest version, visible to no snapshot: filtered
        assert db.get(b"pinned") == b"p"  # the snapshot sees it: left alone
        assert snap.get(b"a") == b"old" and snap.get(b"pinned") == b"p"
        snap.close()
        db.compact(full=True)
        assert db.get(b"pinned") == b"P"


# -- a filter that raises aborts the job -------------------------------------------------------------


def _db_state(db):
    return (
        _store.names(db.path, "manifest"),
        db.manifest,
        _store.names(db.path, "sst"),
        list(db.scan()),
        [db.get(b"k%03d" % i) for i in range(0, 120, 7)],
    )


@pytest.mark.parametrize("full", [True, False])
def test_raising_filter_aborts_the_job_and_leaves_the_db_as_it_was(open_db, full):
    f = RaiseOnFactory(b"k100")  # late in key order: output files may already exist when it raises
    with open_db(compaction_filters=[f], l0_compaction_threshold=3, target_sst_bytes=1024) as db:
        for part in range(3):
            for i in range(part, 120, 3):
                db.put(b"k%03d" % i, b"v%d" % part * 20)
            db.flush()
        before = _db_state(db)
        with pytest.raises(Boom, match="k100"):
            db.compact(full=full)
        assert _db_state(db) == before
        assert db.compaction_stats.jobs == 0
        # the DB still works, and the same job succeeds once the filter lets it
        db.put(b"new", b"n")
        f.armed = False
        db.compact(full=full)
        assert db.get(b"new") == b"n"
        assert dict(db.scan()) == dict(before[3]) | {b"new": b"n"}
        assert db.compaction_stats.jobs >= 1


def test_raising_filter_in_background_compaction_leaves_the_db_as_it_was(open_db):
    import time

    f = RaiseOnFactory(b"k001")
    with open_db(compaction_filters=[f], l0_compaction_threshold=2, background_compaction=True) as db:
        db.put(b"k001", b"a")
        db.flush()
        db.put(b"k002", b"b")
        db.flush()
        deadline = time.monotonic() + 10
        while db.compaction_error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(db.compaction_error, Boom)
        assert len(db.manifest.l0) == 2 and db.manifest.runs == ()
        assert _store.names(db.path, "sst") == sorted(e.name for e in db.manifest.l0)
        assert dict(db.scan()) == {b"k001": b"a", b"k002": b"b"}
        with pytest.raises(Boom):
            db.compact()  # the caller gets the error afresh

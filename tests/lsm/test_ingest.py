"""db.ingest: atomic batches with their binding, transactions, TTL bases, bad sources, fencing, restart."""

from __future__ import annotations

import os

import pytest

import lsm
from lsm import ingest as ingest_mod
from lsm.remap import Pending
from lsm.sources import LogWriter, PartitionedLog, SourceRecord
from lsm.sources.partitioned_log import partition_path

FAR = 10**12  # a history window that keeps everything


@pytest.fixture
def db_defaults():
    return {"history_retention": FAR}


@pytest.fixture
def env(tmp_path, open_db):
    """The store on each backend (db_root); the source log is a local directory on every one."""
    clock = lsm.ManualClock(1000)
    log_dir = str(tmp_path / "log")
    w = LogWriter(log_dir)
    db = open_db(clock)
    yield clock, w, PartitionedLog(log_dir), db, tmp_path
    db.close()
    w.close()


def test_design_worked_example_through_the_store(env) -> None:
    clock, w, log, db, _ = env
    for batch_end, at in ((3, 1000), (5, 2000), (7, 3000)):
        clock.set(at)
        while w.end(0) < batch_end:
            i = w.end(0)
            w.append(0, b"k%d" % i, b"v%d" % i)
        stats = db.ingest(log, name="events")
        assert stats.frontier == {0: batch_end} and stats.batches == 1
    r = db.remap("events")
    assert r.upper == 3000  # the clock still reads 3000: another batch may still come at 3000
    with pytest.raises(lsm.NotYetCompleteError):
        r.as_of(3000)
    clock.set(3001)
    r = db.remap("events")
    assert r.upper == 3001
    assert [(b.ts, b.frontier) for b in r.bindings()] == [(1000, {0: 3}), (2000, {0: 5}), (3000, {0: 7})]
    assert r.as_of(3000).frontier == {0: 7} and r.as_of(2999).frontier == {0: 5} and r.as_of(999) is None
    assert r.binding_for(0, 4).ts == 2000
    assert r.rows() == [(1000, 0, 3), (2000, 0, 5), (3000, 0, 7)]
    assert db.sources() == ["events"]
    # each binding is one commit: the store at its seq holds exactly the records below its frontier
    for b in r.bindings():
        with db.snapshot_at_seq(b.seq) as snap:
            assert dict(snap.scan()) == {b"k%d" % i: b"v%d" % i for i in range(b.frontier[0])}
    assert db.ingest(log, name="events") == lsm.IngestStats(0, 0, {0: 7})  # nothing new: no binding
    assert len(db.remap("events")) == 3


def test_batches_are_exact_and_resume_after_restart(env, open_db) -> None:
    clock, w, log, db, tmp = env
    for i in range(95):
        w.append(i % 3, b"p%d-%03d" % (i % 3, i), b"%d" % i)
    seen = []
    tick = lambda _s: clock.advance(1)  # noqa: E731 - each batch at its own ms (one binding per ms)
    stats = db.ingest(log, name="s", batch_records=10, max_records=40, progress=lambda s: (seen.append(s), tick(s)))
    assert stats.records == 40 and stats.batches == 4
    assert [s.records for s in seen] == [10, 20, 30, 40]
    db.close()
    db2 = open_db(clock)
    try:
        stats = db2.ingest(log, name="s", batch_records=10, progress=tick)
        assert stats.records == 55 and stats.frontier == {0: 32, 1: 32, 2: 31}
        assert len(list(db2.scan())) == 95
        bs = db2.remap("s").bindings()
        assert len(bs) == 10 and all(b.seq > a.seq for a, b in zip(bs, bs[1:], strict=False))
    finally:
        db2.close()


def test_a_transaction_lands_in_one_binding_and_an_open_one_waits_in_temp(env) -> None:
    _clock, w, log, db, _ = env
    w.append(0, b"a", b"1")
    for i in range(7):  # a transaction larger than a batch
        w.append(0, b"t%d" % i, b"x", tx="T1", tx_end=i == 6)
    w.append(0, b"b", b"2")
    w.append(0, b"u0", b"y", tx=9)  # open at the end: waits in TEMP; what follows it does not wait
    w.append(0, b"c", b"3")
    stats = db.ingest(log, name="s", batch_records=3)
    assert stats.frontier == {0: 11}
    remap = db.remap("s")
    t1 = [b for b in remap.bindings() if db.snapshot_at_seq(b.seq).get(b"t0") is not None]
    assert t1 and all(db.snapshot_at_seq(b.seq).get(b"t6") == b"x" for b in t1)  # all of T1 at once
    assert db.get(b"u0") is None and db.get(b"c") == b"3" and remap.pending == Pending(1, 1)
    w.append(0, b"u1", b"y", tx=9, tx_end=True)
    stats = db.ingest(log, name="s", batch_records=3)
    assert stats.frontier == {0: 12} and db.get(b"u0") == db.get(b"u1") == b"y"
    assert db.remap("s").pending == Pending(0, 0)


class ListSource:
    """A source over a list of records (the protocol, for offsets shared by several records)."""

    name = "list"

    def __init__(self, records: list[SourceRecord]) -> None:
        self.records = records

    def partitions(self) -> list[int]:
        return sorted({r.partition for r in self.records})

    def end(self, partition: int) -> int:
        return max((r.offset + 1 for r in self.records if r.partition == partition), default=0)

    def read(self, partition, start, stop=None):
        for r in self.records:
            if r.partition == partition and r.offset >= start and (stop is None or r.offset < stop):
                yield r


def test_records_sharing_an_offset_land_in_one_binding(env) -> None:
    clock, _w, _log, db, _ = env
    recs = [SourceRecord(0, off, b"k%d-%d" % (off, j), b"v") for off in (0, 5, 9) for j in range(4)]
    stats = db.ingest(ListSource(recs), name="shared", batch_records=1, progress=lambda _s: clock.advance(1))
    assert stats.frontier == {0: 10} and stats.batches == 3
    assert [b.frontier[0] for b in db.remap("shared").bindings()] == [1, 6, 10]
    for b in db.remap("shared").bindings():
        with db.snapshot_at_seq(b.seq) as snap:
            assert len(list(snap.scan())) == 4 * len([o for o in (0, 5, 9) if o < b.frontier[0]])


def test_ttl_from_commit_or_event_time(env) -> None:
    clock, w, log, db, tmp = env
    clock.set(50_000)
    w.append(0, b"commit", b"v", ttl=1000, event_ts=10_000)
    db.ingest(log, name="c")
    assert db.get_entry(b"commit").expire_ts == 51_000
    w2 = LogWriter(tmp / "log2")
    w2.append(0, b"event", b"v", ttl=1000, event_ts=49_500)
    w2.append(0, b"late", b"v", ttl=1000, event_ts=10_000)  # expired on arrival
    w2.append(0, b"no-event-ts", b"v", ttl=1000)
    w2.close()
    db.ingest(PartitionedLog(tmp / "log2"), name="e", ttl_base="event")
    assert db.get_entry(b"event").expire_ts == 50_500
    assert db.get(b"late") is None
    assert db.get_entry(b"late", lsm.ReadOptions(include_expired=True)).expire_ts == 11_000
    assert db.get_entry(b"no-event-ts").expire_ts == 51_000
    clock.advance(600)
    assert db.get(b"event") is None and db.get(b"commit") == b"v"


def test_deletes_and_overwrites_in_offset_order(env) -> None:
    _clock, w, log, db, _ = env
    db.put(b"gone", b"old")
    w.append(0, b"k", b"1")
    w.append(0, b"k", b"2")
    w.append(0, b"gone", None)
    w.append(0, b"k", b"3")
    db.ingest(log, name="s")
    assert db.get(b"k") == b"3" and db.get(b"gone") is None


def test_a_partition_that_went_backwards_writes_nothing(env) -> None:
    _clock, w, log, db, tmp = env
    for i in range(5):
        w.append(0, b"k%d" % i, b"v")
    w.append(1, b"x", b"v")
    db.ingest(log, name="s")
    w.close()
    path = partition_path(str(tmp / "log"), 0)
    with open(path, "r+b") as f:  # cut the file inside record 3
        size = os.path.getsize(path)
        f.truncate(size - 2 * (size // 10))
    seq = db.seq
    with pytest.raises(lsm.SourceRegressedError) as e:
        db.ingest(PartitionedLog(tmp / "log"), name="s")
    msg = str(e.value)
    assert "partition 0" in msg and "offset 5" in msg and "ends at" in msg and str(tmp / "log") in msg
    assert db.seq == seq and db.remap("s").frontier == {0: 5, 1: 1}
    os.unlink(partition_path(str(tmp / "log"), 1))  # a partition that vanished went back to 0
    with pytest.raises(lsm.SourceRegressedError, match="partition 0"):
        db.ingest(PartitionedLog(tmp / "log"), name="s")


def test_a_partition_added_later_joins_the_frontier(env) -> None:
    clock, w, log, db, _ = env
    w.append(0, b"a", b"1")
    db.ingest(log, name="s")
    w.append(2, b"b", b"2")
    clock.advance(1)
    db.ingest(log, name="s")
    clock.advance(1)
    r = db.remap("s")
    assert [b.frontier for b in r.bindings()] == [{0: 1}, {0: 1, 2: 1}]
    assert r.binding_for(2, 0) == r.bindings()[1] and r.as_of(1001).offset(2) == 1


def test_fenced_ingest_makes_nothing_visible(env, open_db) -> None:
    clock, w, log, db, tmp = env
    for i in range(10):
        w.append(0, b"k%d" % i, b"v")
    db.ingest(log, name="s", max_records=4)
    other = open_db(clock)  # a second process takes the database over
    try:
        with pytest.raises(lsm.FencedError):
            db.ingest(log, name="s")
        assert other.remap("s").frontier == {0: 4}
        assert sorted(k for k, _ in other.scan()) == [b"k%d" % i for i in range(4)]
        assert other.ingest(log, name="s").records == 6
        assert len(list(other.scan())) == 10
    finally:
        other.close()


def test_reserved_keys_are_hidden_and_refused(env, open_db, new_root) -> None:
    from compaction.filter import CompactionFilter, CompactionFilterFactory, Decision

    seen: list[bytes] = []

    class Spy(CompactionFilter):
        def filter(self, entry):
            seen.append(entry.key)
            return Decision.KEEP

    class SpyFactory(CompactionFilterFactory):
        def create(self, ctx):
            return Spy()

    clock, w, log, db, _ = env
    db.close()
    db = open_db(clock, path=new_root("db2"), compaction_filters=[SpyFactory()], compaction_process=False)
    try:
        w.append(0, b"k", b"v")
        high = b"\xff\xff\xff\xfflsm\x01user"  # just above the reserved range: an ordinary key
        db.put(high, b"h")
        db.put(b"\xff", b"ff")
        db.ingest(log, name="s")
        sys_key = lsm.syskeys.SYSTEM_PREFIX + b"x"
        for bad in (
            lambda: db.put(sys_key, b"v"),
            lambda: db.delete(sys_key),
            lambda: lsm.WriteBatch().put(sys_key, b""),
        ):
            with pytest.raises(ValueError, match="reserved"):
                bad()
        assert db.get(lsm.syskeys.SYSTEM_PREFIX + b"remap\x00s\x00" + (1).to_bytes(8, "big")) is None
        expected = [(b"k", b"v"), (b"\xff", b"ff"), (high, b"h")]
        assert list(db.scan()) == expected
        assert list(db.scan(reverse=True)) == expected[::-1]
        assert list(db.scan(start=b"\xff\xff")) == [(high, b"h")]
        assert list(db.scan(prefix=b"\xff\xff\xff\xfflsm")) == [(high, b"h")]
        assert list(db.scan(prefix=lsm.syskeys.SYSTEM_PREFIX)) == []
        with db.snapshot() as snap:
            assert list(snap.scan()) == expected
        assert sorted(c[1] for c in db.changes(seq=0)) == [b"k", b"\xff", high]
        db.flush()
        db.compact(full=True)
        assert seen and not any(lsm.syskeys.is_system(k) for k in seen)
        assert db.remap("s").frontier == {0: 1} and list(db.scan()) == expected
    finally:
        db.close()


def test_remap_survives_flush_compaction_and_restart(env, open_db) -> None:
    clock, w, log, db, tmp = env
    for round_ in range(6):
        clock.advance(1000)
        for i in range(50):
            w.append(i % 2, b"r%d-%d" % (round_, i), b"v" * 20)
        db.ingest(log, name="s", batch_records=30)
        if round_ % 2:
            db.flush()
    before = db.remap("s").bindings()
    db.compact(full=True)
    assert db.remap("s").bindings() == before
    db.close()
    db2 = open_db(clock)
    try:
        assert db2.remap("s").bindings() == before and db2.sources() == ["s"]
        assert len(list(db2.scan())) == 300
        for b in before:
            with db2.snapshot_at_seq(b.seq) as snap:
                assert len(list(snap.scan())) == sum(b.frontier.values())
    finally:
        db2.close()


def test_remap_compaction_in_the_store(env, open_db, monkeypatch) -> None:
    clock, w, log, db, tmp = env
    for i in range(40):
        clock.advance(100)
        w.append(0, b"k%03d" % i, b"v")
        db.ingest(log, name="s")
    full = db.remap("s")
    since = full.bindings()[25].ts - 50
    compacted = ingest_mod.compact_remap(db, "s", since)
    assert compacted is not None
    expected = full.compact(since)
    got = db.remap("s")
    assert got.bindings() == expected.bindings() and got.since == since
    with pytest.raises(lsm.RetentionError):
        got.as_of(since - 1)
    for t in range(since, full.bindings()[-1].ts + 1, 37):
        assert got.as_of(t) == expected.as_of(t)
    assert ingest_mod.compact_remap(db, "s", since - 10) is None  # since never goes back
    db.close()
    db = open_db(clock)
    try:
        assert db.remap("s").bindings() == expected.bindings() and db.remap("s").since == since
        # ingest keeps going on top of the compacted remap; the cadence compacts at now - retention
        monkeypatch.setattr(ingest_mod, "REMAP_COMPACT_EVERY", 5)
        db.options.history_retention = 250
        for i in range(40, 50):
            clock.advance(100)
            w.append(0, b"k%03d" % i, b"v")
            db.ingest(log, name="s")
        r = db.remap("s")
        assert r.since is not None and r.since >= clock.now() - 250 - 5 * 100
        assert r.frontier == {0: 50} and len(r) < 10
        assert len(list(db.scan())) == 50
    finally:
        db.close()


def test_remap_compaction_after_the_store_time_is_refused(env) -> None:
    """A since ahead of the store's time would rewrite the merged binding after the time the next ingest
    commits at, and that ingest's binding would leave the stored remap out of order (db.remap raised
    ValueError from then on). It is refused, nothing written, and the next ingests read back in order."""
    clock, w, log, db, _ = env
    for _ in range(2):
        clock.advance(5)
        w.append(0, b"k", b"v")
        db.ingest(log, name="s")
    before = db.remap("s")
    with pytest.raises(ValueError, match="after the store's time now"):
        ingest_mod.compact_remap(db, "s", clock.now() + 5)
    clock.advance(1)  # before the refused since
    w.append(0, b"k", b"v")
    db.ingest(log, name="s")
    after = db.remap("s")
    assert after.since is None and after.bindings()[:2] == before.bindings() and len(after.bindings()) == 3
    assert ingest_mod.compact_remap(db, "s", clock.now()) is not None  # at the store's time: allowed


# not on S3: 800 commits and 41 opens are a minute of requests there; memory:// runs the object store's code
@pytest.mark.parametrize("backend", ["local", "memory"])
def test_the_remap_compaction_cadence_survives_restarts(tmp_path, open_db) -> None:
    """Issue 24 defect 6: 800 batches over 40 short runs, each in a new handle, with retention 0. The
    cadence counts the bindings stored since the last compaction, not one handle's batches, so the remap
    is compacted (the last time after 768 batches): 1 consolidated binding and the 32 after it."""
    clock = lsm.ManualClock(1000)
    log_dir = str(tmp_path / "log")
    with LogWriter(log_dir) as w:
        for i in range(800):
            w.append(i % 2, b"k%04d" % i, b"v")
    log = PartitionedLog(log_dir)
    for _run in range(40):
        clock.advance(1000)
        with open_db(clock, history_retention=0) as db:
            tick = lambda _s: clock.advance(1)  # noqa: E731 - one binding per batch: each at its own ms
            assert db.ingest(log, name="s", max_records=20, batch_records=1, progress=tick).batches == 20
    with open_db(clock) as db:
        r = db.remap("s")
        assert r.frontier == {0: 400, 1: 400} and len(list(db.scan())) == 800
        assert r.since is not None and len(r) == 1 + 800 - 768
        assert ingest_mod.REMAP_COMPACT_EVERY == 256


def test_snapshot_at_seq_outside_history_is_refused(open_db) -> None:
    clock = lsm.ManualClock(1000)
    with open_db(clock, history_retention=1000) as db:
        s1 = db.put(b"a", b"1")
        clock.advance(10)
        db.put(b"a", b"2")
        with db.snapshot_at_seq(s1) as snap:
            assert snap.get(b"a") == b"1"
        clock.advance(5000)
        with pytest.raises(lsm.RetentionError):
            db.snapshot_at_seq(s1)
        with db.snapshot_at_seq(db.seq) as snap:  # the latest state is always readable
            assert snap.get(b"a") == b"2"
        with pytest.raises(ValueError):
            db.snapshot_at_seq(db.seq + 1)


def test_bad_arguments(env) -> None:
    _clock, w, log, db, _ = env
    w.append(0, b"k", b"v")
    for kw, exc in (
        ({"name": ""}, ValueError),
        ({"name": "a\x00b"}, ValueError),
        ({"name": 3}, TypeError),
        ({"name": "s", "batch_records": 0}, ValueError),
        ({"name": "s", "max_records": -1}, ValueError),
        ({"name": "s", "ttl_base": "wall"}, ValueError),
        ({"name": "s", "engine": "bulk"}, ValueError),
        ({"name": "s", "engine": "local", "max_records": 5}, ValueError),
        ({"name": "s", "engine": "local", "master": "local[2]"}, ValueError),
        ({"name": "s", "engine": "local", "tasks": 0}, ValueError),
        ({"name": "s", "engine": "local", "ttl_base": "wall"}, ValueError),
        ({"name": "s", "tasks": 2}, ValueError),
    ):
        with pytest.raises(exc):
            db.ingest(log, **kw)
    with pytest.raises(lsm.UnknownSourceError) as e:
        db.remap("nope")
    assert isinstance(e.value, lsm.LsmError) and "nope" in str(e.value)
    assert db.sources() == [] and db.seq == 0
    bad = ListSource(
        [SourceRecord(0, 0, b"ok", b"v"), SourceRecord(0, 1, lsm.syskeys.SYSTEM_PREFIX + b"x", b"v")]
    )
    with pytest.raises(ValueError, match="reserved"):
        db.ingest(bad, name="bad")
    assert db.seq == 0 and db.sources() == []


def test_a_corrupt_record_stops_ingest_at_the_record_before_it(env) -> None:
    """A damaged record is a CorruptionError with file and offset, never a skip: a fresh reader refuses
    before writing anything; a reader that indexed the file before the damage commits only the batches
    wholly below it."""
    clock, w, log, db, tmp = env
    for i in range(40):
        w.append(0, b"k%02d" % i, b"v%02d" % i)
    w.flush()
    path = partition_path(str(tmp / "log"), 0)
    rec_len = (os.path.getsize(path) - 6) // 40
    assert log.end(0) == 40  # indexed (verified) before the damage
    with open(path, "r+b") as f:
        f.seek(6 + 25 * rec_len + 18)
        f.write(b"\x00")
    with pytest.raises(lsm.CorruptionError) as ei:
        db.ingest(PartitionedLog(str(tmp / "log")), name="fresh", batch_records=10)
    assert (ei.value.path, ei.value.offset) == (path, 6 + 25 * rec_len)
    assert "fresh" not in db.sources()
    with pytest.raises(lsm.CorruptionError) as ei:
        db.ingest(log, name="old", batch_records=10)
    assert (ei.value.path, ei.value.offset) == (path, 6 + 25 * rec_len)
    frontier = db.remap("old").frontier if "old" in db.sources() else {}
    assert frontier.get(0, 0) <= 25
    assert dict(db.scan()) == {b"k%02d" % i: b"v%02d" % i for i in range(frontier.get(0, 0))}


def test_a_flush_that_raises_the_history_floor_compacts_the_remap(tmp_path, open_db) -> None:
    """Issue 32 defect 9: the history floor rose in a flush (it dropped versions older than the window),
    not in a compaction; the next compaction found its floor unchanged by its own job and left the
    remap's 40 bindings, all outside the window, until the 256-batch cadence."""
    clock = lsm.ManualClock(1000)
    log_dir = str(tmp_path / "log")
    w = LogWriter(log_dir)
    with open_db(clock, history_retention=10_000) as db:
        for i in range(40):
            clock.advance(10)
            w.append(0, b"k%d" % (i % 5), b"v%d" % i)
            db.ingest(PartitionedLog(log_dir), name="s")
        assert len(db.remap("s")) == 40 and db.remap("s").since is None
        clock.advance(60_000)
        floor = db.manifest.history_floor
        db.put(b"x", b"1")
        db.flush()
        assert db.manifest.history_floor > floor  # the flush dropped the overwritten versions
        db.compact(full=True)
        r = db.remap("s")
        assert r.since == clock.now() - 10_000 and len(r) == 1
        assert r.frontier == {0: 40} and db.get(b"k4") == b"v39"
    w.close()

"""DatabaseLog (lsm/sources/database_log.py) and the history floor (lsm/history.py) on real databases on
every backend, including a real second process writing the upstream while the replica reads."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from formats.wal import encode_record
from lsm import HistoryUnavailableError, NotADatabaseError
from lsm.history import open_view
from lsm.sources import DatabaseLog, Source, SourceRecord
from lsm.syskeys import SYSTEM_PREFIX
from storage import storage_for
from tests import _store
from tests.lsm import _wal

PRODUCER = str(Path(__file__).with_name("_log_producer.py"))
T0 = 1_700_000_000_000
YEAR = 365 * 86_400_000


def records(log: DatabaseLog, start: int = 0, stop: int | None = None) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.ttl, r.event_ts) for r in log.read(0, start, stop)]


def test_commits_become_records_with_their_seq_ts_and_ttl(db_root: str, open_db) -> None:
    clock = lsm.ManualClock(T0)
    db = open_db(clock, history_retention=YEAR)
    log = DatabaseLog(db_root)
    assert isinstance(log, Source) and log.name == str(db_root)
    assert log.partitions() == [0] and log.end(0) == 1 and records(log) == []
    s1 = db.put(b"a", b"1")
    clock.advance(10)
    s2 = db.write(lsm.WriteBatch().put(b"c", b"3", ttl=500).put(b"b", b"2").delete(b"a"))
    clock.advance(10)
    # a sync write makes every write before it durable too (on an object store, unsynced writes wait
    # in the group commit's buffer for up to wal_flush_interval_ms)
    s3 = db.delete(b"zzz", options=lsm.WriteOptions(sync=True))
    assert log.end(0) == s3 + 1 == 4  # read from the WAL of a database still open in this process
    want = [
        (s1, b"a", b"1", None, T0),
        (s2, b"a", None, None, T0 + 10),  # rows of one commit share its seq, ordered by key
        (s2, b"b", b"2", None, T0 + 10),
        (s2, b"c", b"3", 500, T0 + 10),
        (s3, b"zzz", None, None, T0 + 20),
    ]
    assert records(log) == want
    assert records(log, s2) == want[1:] and records(log, s2, s3) == want[1:4] and records(log, 9) == []
    assert log.end(1) == 0 and list(log.read(1, 0)) == []
    db.flush()  # now from an SST: the same records
    assert records(log) == want and log.end(0) == 4
    db.close()
    assert records(DatabaseLog(db_root)) == want
    assert list(log.read(0, 0))[3] == SourceRecord(0, s2, b"c", b"3", ttl=500, event_ts=T0 + 10)


def test_full_history_survives_flush_and_compaction_with_retention(db_root: str, open_db) -> None:
    clock = lsm.ManualClock(T0)
    db = open_db(clock, history_retention=YEAR, memtable_bytes=1024)
    want = []
    for i in range(300):
        key = b"k%d" % (i % 7)
        if i % 5 == 4:
            key = b"k%d" % ((i - 1) % 7)  # a key that exists: a lone tombstone would be dropped
            seq = db.delete(key)
            want.append((seq, key, None))
        else:
            seq = db.put(key, b"%d" % i)
            want.append((seq, key, b"%d" % i))
        clock.advance(3)
        if i % 50 == 49:
            db.compact(full=True)
    db.close()
    log = DatabaseLog(db_root)
    assert log.floor() == 0
    assert [(r.offset, r.key, r.value) for r in log.read(0, 0)] == want
    assert len(db.manifest.runs) >= 1


def test_dropped_versions_raise_the_floor_and_reads_below_it_fail(db_root: str, open_db) -> None:
    clock = lsm.ManualClock(T0)
    db = open_db(clock)  # no history retention: a flush drops shadowed versions
    s1 = db.put(b"k", b"1")
    s2 = db.put(b"k", b"2")
    s3 = db.put(b"other", b"x", options=lsm.WriteOptions(sync=True))  # durable, with those before it
    log = DatabaseLog(db_root)
    assert records(log, 1) != [] and log.floor() == 0  # still in the WAL: everything is there
    db.flush()
    assert log.floor() == s1
    with pytest.raises(HistoryUnavailableError, match=f"up to seq {s1}"):
        log.read(0, 0)
    with pytest.raises(HistoryUnavailableError):
        log.read(0, s1)
    assert [(r.offset, r.value) for r in log.read(0, s2)] == [(s2, b"2"), (s3, b"x")]
    s4 = db.delete(b"k")
    db.flush()
    db.compact(full=True)  # the bottom tombstone goes: everything up to it is history no more
    assert log.floor() == s4
    with pytest.raises(HistoryUnavailableError):
        log.read(0, s2)
    assert list(log.read(0, s4 + 1)) == [] and log.end(0) == s4 + 1
    db.close()


def test_ttl_rewrites_raise_the_floor(db_root: str, open_db) -> None:
    clock = lsm.ManualClock(T0)
    db = open_db(clock)
    s1 = db.put(b"a", b"1", ttl=100)
    db.put(b"b", b"2")
    db.flush()
    db.flush()
    assert DatabaseLog(db_root).floor() == 0
    clock.advance(1000)
    db.put(b"c", b"3")
    db.flush()
    db.compact(full=True)  # a expired: the TTL filter drops it, and history at s1 is gone
    assert DatabaseLog(db_root).floor() >= s1
    with pytest.raises(HistoryUnavailableError):
        DatabaseLog(db_root).read(0, s1)
    db.close()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from([b"a", b"b", b"c"]), st.none() | st.integers(0, 50)),
        st.tuples(st.just("delete"), st.sampled_from([b"a", b"b", b"d"]), st.none()),
        st.tuples(st.just("batch"), st.sampled_from([b"a", b"b", b"c"]), st.none()),
        st.tuples(st.just("flush"), st.none(), st.none()),
        st.tuples(st.just("compact"), st.none(), st.none()),
        st.tuples(st.just("advance"), st.none(), st.integers(1, 40)),
        st.tuples(st.just("snapshot"), st.none(), st.none()),
    ),
    max_size=40,
)


# Not on S3: 40 examples of up to 40 flushes, compactions and reads of the whole history are a minute of
# requests there, through the code memory:// runs.
@pytest.mark.parametrize("backend", ["local", "memory"])
# new_root is function-scoped, but each example opens a root of its own with it
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops, st.sampled_from([0, 30, YEAR]))
def test_history_is_exact_above_the_floor_or_refused(
    open_db, new_root, tmp_path_factory: pytest.TempPathFactory, backend: str, program: list, retention: int
) -> None:
    """Whatever flushes, compactions, TTLs and snapshots did, a read returns exactly the committed rows
    from its start, or raises HistoryUnavailableError, and only when start is at or below the floor."""
    path = str(tmp_path_factory.mktemp("up")) if backend == "local" else new_root("up")
    clock = lsm.ManualClock(T0)
    db = open_db(clock, path=path, history_retention=retention)
    log: list[tuple] = []
    snaps = []
    n = 0
    for op, key, arg in program:
        n += 1
        ts = clock.now()
        if op == "put":
            seq = db.put(key, b"v%d" % n, ttl=arg)
            log.append((seq, key, b"v%d" % n, arg, ts))
        elif op == "delete":
            seq = db.delete(key)
            log.append((seq, key, None, None, ts))
        elif op == "batch":
            seq = db.write(lsm.WriteBatch().put(key, b"b%d" % n).put(b"z", b"b%d" % n).delete(b"y"))
            log += sorted(
                [
                    (seq, key, b"b%d" % n, None, ts),
                    (seq, b"z", b"b%d" % n, None, ts),
                    (seq, b"y", None, None, ts),
                ]
            )
        elif op == "flush":
            db.flush()
        elif op == "compact":
            db.compact(full=True)
        elif op == "advance":
            clock.advance(arg)
        elif len(snaps) < 2:
            snaps.append(db.snapshot())
        else:
            snaps.pop(0).close()
    db.flush_wal()  # every write durable: on an object store unsynced ones wait in a buffer readers miss
    src = DatabaseLog(path)
    with open_view(path) as view:
        floor = view.floor
    assert src.end(0) == db.seq + 1
    if retention == YEAR and all(r[2] is not None for r in log):
        assert floor == 0  # a year of retention keeps every version; only a lone tombstone can go
    for start in range(0, db.seq + 2):
        want = [r for r in log if r[0] >= start]
        if 0 < floor and start <= floor:
            with pytest.raises(HistoryUnavailableError):
                src.read(0, start)
        else:
            assert records(src, start) == want
    for s in snaps:
        s.close()
    db.close()


def test_system_rows_are_never_records(db_root: str, open_db) -> None:
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        db.put(b"a", b"1")
    m = open_db(read_only=True)
    nxt, seq = m.manifest.wal_replay_from, m.seq
    m.close()
    # a WAL segment (object) holding a commit with an engine row and a user row, and one with an engine row
    segment = os.path.basename(_wal.segment_path(db_root, nxt))
    _store.write(
        db_root,
        "wal",
        segment,
        encode_record(seq + 1, T0 + 5, [(SYSTEM_PREFIX + b"remap", None, b"x"), (b"b", None, b"2")])
        + encode_record(seq + 2, T0 + 6, [(SYSTEM_PREFIX + b"only", None, b"y")]),
    )
    log = DatabaseLog(db_root)
    assert log.end(0) == seq + 3
    assert [(r.offset, r.key) for r in log.read(0, 0)] == [(seq, b"a"), (seq + 1, b"b")]


def test_a_torn_wal_tail_is_not_yet_a_record(tmp_path: Path, db_options) -> None:
    """A local segment file grows by appends, and a reader may see half of one; a WAL object is written
    whole: a local directory's mechanic."""
    clock = lsm.ManualClock(T0)
    with lsm.DB.open(tmp_path, db_options(clock)) as db:
        db.put(b"a", b"1")
    m = lsm.DB.open(tmp_path, read_only=True)
    nxt, seq = m.manifest.wal_replay_from, m.seq
    m.close()
    rec = encode_record(seq + 1, T0 + 5, [(b"b", None, b"2" * 100)])
    segment = tmp_path / "wal" / f"{nxt:020d}.wal"
    segment.write_bytes(rec[:40])
    log = DatabaseLog(tmp_path)
    assert log.end(0) == seq + 1 and [r.key for r in log.read(0, 0)] == [b"a"]
    with open(segment, "ab") as f:
        f.write(rec[40:])
    assert log.end(0) == seq + 2 and [r.key for r in log.read(0, 0)] == [b"a", b"b"]


def test_not_a_database(tmp_path: Path, db_root: str, open_db) -> None:
    with pytest.raises(NotADatabaseError):
        DatabaseLog(tmp_path)  # a directory, but no database in it
    with pytest.raises(NotADatabaseError):
        DatabaseLog(db_root)  # nothing there yet
    with open_db():
        pass
    log = DatabaseLog(db_root)
    with pytest.raises(ValueError):
        log.read(0, -1)
    with pytest.raises(TypeError):
        log.end("0")


def test_a_copy_or_an_unpickled_log_reads_what_the_original_reads(db_root: str, open_db) -> None:
    """A bulk load's local task reads its own deepcopy of the source, a Spark task an unpickled one: on an
    object store too, where the log's tail holds a client that neither copies nor pickles."""
    db = open_db(history_retention=YEAR)
    for i in range(20):
        db.put(b"k%d" % (i % 3), b"%d" % i)
    db.flush()
    db.put(b"late", b"x", options=lsm.WriteOptions(sync=True))
    log = DatabaseLog(db_root)
    want = records(log)
    assert len(want) == 21 and log.end(0) == 22
    for other in (copy.deepcopy(log), pickle.loads(pickle.dumps(log))):
        assert isinstance(other, DatabaseLog) and other.name == log.name
        assert records(other) == want and other.end(0) == 22
    db.close()


def test_a_replica_follows_an_upstream_another_process_is_writing(shared_root: str) -> None:
    """The upstream process commits batches (flushing and compacting in the background) while this
    process polls end() and reads, lagging behind on purpose so that it reads from the WAL, from flushed
    SSTs and across compactions: every commit arrives once, whole, in seq order."""
    # each sync batch is one PUT on the S3 server: fewer of them there, still many flushes and compactions
    batches, keys = (150 if "://" in shared_root else 400), 4
    up = os.path.join(shared_root, "up")
    with lsm.DB.open(up, lsm.DbOptions()):
        pass  # the database exists before the reader starts
    proc = subprocess.Popen(
        [sys.executable, PRODUCER, "db", str(up), str(batches), str(keys), "4096"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = DatabaseLog(up)
    got: dict[int, list[SourceRecord]] = defaultdict(list)
    frontier = 1
    polls = 0
    try:
        while True:
            done = proc.poll() is not None
            end = log.end(0)
            assert end >= frontier
            stop = end if done else min(end, frontier + 7)  # lag behind: read flushed, compacted history
            for r in log.read(0, frontier, stop):
                assert frontier <= r.offset < stop
                got[r.offset].append(r)
            frontier = stop
            polls += 1
            if done and frontier == log.end(0):
                break
        assert proc.returncode == 0, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert sorted(got) == list(range(1, batches + 1))
    for i, rows in got.items():  # the upstream's seq i is batch i (nothing else commits)
        want = {b"%08d-%02d" % (i, j): b"%d" % i for j in range(keys)} | {b"last": b"%d" % i}
        if i % 3 == 0:
            want[b"%08d-00" % (i - 1)] = None
        assert {r.key: r.value for r in rows} == want
        assert len({r.event_ts for r in rows}) == 1
    assert polls > 2
    assert storage_for(up).list_names(os.path.join(up, "sst"))  # the upstream flushed while we read


def test_a_replica_ingesting_a_database_log_matches_the_upstream_at_every_binding(open_db, new_root) -> None:
    """db.ingest(DatabaseLog(upstream), ttl_base="event") on a replica: at every binding, the replica
    reads exactly what the upstream read as of the seq below the binding's frontier."""
    clock = lsm.ManualClock(T0)
    up_root = new_root("up")
    up = open_db(clock, path=up_root, history_retention=YEAR, memtable_bytes=2048)
    for i in range(120):
        key = b"k%d" % (i % 11)
        if i % 7 == 6:
            up.delete(b"k%d" % ((i - 1) % 11))  # an existing key (a lone tombstone would be dropped)
        elif i % 5 == 0:
            up.write(lsm.WriteBatch().put(key, b"b%d" % i).put(b"z%d" % (i % 3), b"%d" % i, ttl=200))
        else:
            up.put(key, b"%d" % i, ttl=None if i % 2 else 5_000)
        clock.advance(17)
        if i % 40 == 39:
            up.flush()
            up.compact(full=True)
    replica = open_db(clock, path=new_root("replica"), history_retention=YEAR)
    tick = lambda _s: clock.advance(1)  # noqa: E731 - each batch its own ms: bindings of one ms merge
    stats = replica.ingest(DatabaseLog(up_root), name="up", batch_records=9, ttl_base="event", progress=tick)
    assert stats.frontier == {0: up.seq + 1}
    bindings = replica.remap("up").bindings()
    assert len(bindings) > 5
    for b in bindings:
        mine = replica.snapshot_at_seq(b.seq)
        theirs = up.snapshot_at_seq(b.frontier[0] - 1)
        try:
            assert list(mine.scan()) == list(theirs.scan())
        finally:
            mine.close()
            theirs.close()
    clock.advance(300)  # the ttl=200 rows expire at the same moment on both sides (event-time TTL)
    assert list(replica.scan()) == list(up.scan())
    replica.close()
    up.close()


def test_ingest_stops_with_history_unavailable_and_writes_nothing(open_db, new_root) -> None:
    clock = lsm.ManualClock(T0)
    up_root = new_root("up")
    up = open_db(clock, path=up_root)  # no retention: the flush drops k=1
    up.put(b"k", b"1")
    up.put(b"k", b"2")
    up.flush()
    replica = open_db(clock, path=new_root("replica"))
    with pytest.raises(HistoryUnavailableError):
        replica.ingest(DatabaseLog(up_root), name="up")
    assert list(replica.scan()) == [] and replica.sources() == [] and replica.seq == 0
    replica.close()
    up.close()


def test_a_view_opens_only_the_ssts_its_range_needs(db_root: str, open_db) -> None:
    clock = lsm.ManualClock(T0)
    with open_db(clock, history_retention=YEAR) as db:
        for i in range(3):  # three L0 SSTs: seqs 1-2, 3-4, 5-6
            db.put(b"a%d" % i, b"1")
            db.put(b"b%d" % i, b"2")
            db.flush()
        # seq 7, in the WAL (synced: on an object store an unsynced write waits in the group commit's
        # buffer, unseen by another reader)
        db.put(b"c", b"3", options=lsm.WriteOptions(sync=True))
        with open_view(db_root, 5) as view:
            assert len(view.readers) == 1 and view.last_seq == 7
            assert [r[1] for r in view.versions(5)] == [5, 6, 7]
            with pytest.raises(ValueError, match="outside the view's range"):
                view.versions(3)
        with open_view(db_root, 2, 4) as view:
            assert len(view.readers) == 2
            assert [(r[0], r[1]) for r in view.versions(2, 4)] == [(b"b0", 2), (b"a1", 3)]
            with pytest.raises(ValueError):
                view.versions(2)
        assert DatabaseLog(db_root).floor() == 0

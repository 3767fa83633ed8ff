"""Bulk load with the local engine (lsm.bulk): equivalence with streaming ingest of one batch, cuts at
transactions, concurrent writes, failed jobs, conflicts with compaction, a driver killed mid-job. The
stores are on every backend; the logs they load are local directories."""

from __future__ import annotations

import os
import signal
import time

import pytest

import lsm
from lsm.sources import LogWriter, PartitionedLog, SourceRecord
from tests import _store
from tests.lsm._bulk_util import FailsOn, Stores, WrappedLog, contents, spawn_slow_load, write_log
from tests.lsm.test_ingest import ListSource


@pytest.fixture
def stores(open_db, new_root) -> Stores:
    return Stores(open_db, new_root)


def sst_files(db: lsm.DB) -> set[str]:
    return {n for n in _store.names(db.path, "sst") if n.endswith(".sst")}


def live_files(db: lsm.DB) -> set[str]:
    return {e.name for e in db.manifest.all_ssts()}


GRID = [(tasks, ttl_base) for tasks in (1, 3, 8) for ttl_base in ("commit", "event")]


# the grid varies the plan, not the store: S3 runs one point of it (each run is 1.5 s of requests there)
@pytest.mark.parametrize(
    ("backend", "tasks", "ttl_base"),
    [(b, t, base) for b in ("local", "memory") for t, base in GRID]
    + [pytest.param("s3", 3, "event", marks=pytest.mark.s3)],
)
def test_local_equals_streaming_ingest_of_one_batch(tmp_path, stores, tasks, ttl_base) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=tasks, n=3000)
    want = stores.load("stream", log, "stream", ttl_base=ttl_base)
    got = stores.load("bulk", log, "local", tasks=tasks, ttl_base=ttl_base)
    assert got == want
    assert len(want["rows"]) > 100 and len(want["bindings"]) == 1
    # and after reopening, a full compaction and a second (empty) load
    db = stores.open("bulk")
    try:
        assert contents(db) == want
        assert db.ingest(PartitionedLog(log), name="events", engine="local") == lsm.IngestStats(
            0, 0, want["bindings"][0][1]
        )
        db.compact(full=True)  # drops the rows that expired: the visible state stays
        after = contents(db)
        assert after["visible"] == want["visible"] and after["bindings"] == want["bindings"]
    finally:
        db.close()


def test_plan_seqs_and_files(tmp_path, open_db) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=1, n=2000, partitions=3)
    db = open_db()
    try:
        db.put(b"before", b"x")
        stats = db.ingest(PartitionedLog(log), name="events", engine="local", tasks=6)
        b = db.remap("events").bindings()[-1]
        assert stats.records == sum(PartitionedLog(log).end(p) for p in range(3)) and stats.batches == 1
        # slice i of the plan writes seq 2 + i (a slice of transactional records only writes no file:
        # the driver handles those), the binding takes the next one; L0 is newest first, with the
        # flushed memtable ("before", seq 1) below the load
        l0 = [(e.info.min_seq, e.info.max_seq) for e in db.manifest.l0]
        seqs = [lo for lo, _hi in l0]
        assert len(l0) >= 8 and all(lo == hi for lo, hi in l0) and seqs == sorted(set(seqs), reverse=True)
        assert seqs[-1] == 1 and b.seq == seqs[0] == db.seq == db.manifest.last_seq
    finally:
        db.close()


def test_offsets_shared_by_records_and_a_generic_source(open_db, new_root) -> None:
    recs = [
        SourceRecord(p, off, b"k%d" % (off % 7), b"v%d-%d-%d" % (p, off, j))
        for p in (0, 1)
        for off in range(0, 60, 3)
        for j in range(3)
    ]
    dbs = []
    for engine in ("stream", "local"):
        db = open_db(path=new_root(engine))
        kw = {"tasks": 5} if engine == "local" else {"batch_records": 10**9}
        db.ingest(ListSource(recs), name="events", engine=engine, **kw)
        dbs.append(db)
    try:
        assert contents(dbs[0]) == contents(dbs[1])
        assert dbs[1].remap("events").frontier == {0: 58, 1: 58}
    finally:
        for db in dbs:
            db.close()


def test_an_open_trailing_transaction_waits_in_temp_like_streaming(tmp_path, stores) -> None:
    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        for i in range(100):
            w.append(0, b"a%03d" % i, b"x")
        # a long closed transaction across slice boundaries, then one left open, then more records
        for i in range(50):
            w.append(1, b"t%03d" % i, b"y", tx="long", tx_end=i == 49)
        w.append(1, b"open-1", b"z", tx="open")
        w.append(1, b"other", b"z", tx="short")
        w.append(1, b"other2", b"z", tx="short", tx_end=True)
        w.append(1, b"after", b"z")
    want = stores.load("stream", log, "stream")
    got = stores.load("bulk", log, "local", tasks=7)
    assert got == want and want["bindings"][0][1] == {0: 100, 1: 54}
    with LogWriter(log) as w:
        w.append(1, b"open-2", b"z", tx="open", tx_end=True)
    assert stores.load("stream", log, "stream") == stores.load("bulk", log, "local", tasks=7)
    db = stores.open("bulk")
    try:
        remap = db.remap("events")
        assert remap.frontier == {0: 100, 1: 55} and db.get(b"open-1") == b"z" and remap.pending == lsm.Pending()
        assert not sst_files(db) - live_files(db)  # the shortened slices' first outputs were removed
    finally:
        db.close()


class _Hooked(WrappedLog):
    """Calls `hook` (once, in a task thread) before reading partition 1."""

    hook = None

    def read(self, partition, start, stop=None):
        if partition == 1 and _Hooked.hook is not None:
            hook, _Hooked.hook = _Hooked.hook, None
            hook()
        return super().read(partition, start, stop)


def test_concurrent_writes_keep_their_order(tmp_path, open_db) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=3, n=1000, partitions=2, keys=50)
    db = open_db(memtable_bytes=1 << 20, history_retention=10**12)
    seqs = {}
    try:
        db.put(b"k0001", b"before")

        def during() -> None:
            seqs["put"] = db.put(b"k0002", b"during")
            db.flush()  # an L0 file above the reserved range
            # synced: on an object store a sync=False write waits in the WAL buffer, which the second
            # handle below fences away (docs/object-store.md); the recovery is to find this one
            seqs["put2"] = db.put(b"k0003", b"during-in-memtable", options=lsm.WriteOptions(sync=True))

        _Hooked.hook = during
        db.ingest(_Hooked(log), name="events", engine="local", tasks=2)
        b = db.remap("events").bindings()[-1]
        assert seqs["put"] == b.seq + 1 and seqs["put2"] == b.seq + 2 and db.seq == b.seq + 2
        assert db.get(b"k0002") == b"during" and db.get(b"k0003") == b"during-in-memtable"
        with db.snapshot_at_seq(b.seq) as snap:  # the binding's state: the load, not the later writes
            assert snap.get(b"k0002") != b"during"
        want = contents(db)
        # recovery (a second handle fences this one, replays the WAL): no seq is handed out twice
        db2 = open_db(history_retention=10**12)
        try:
            assert db2.seq == b.seq + 2 and contents(db2) == want
            assert db2.put(b"next", b"n") == b.seq + 3
        finally:
            db2.close()
    finally:
        db.close()


def test_a_failed_job_changes_nothing_and_gc_collects_its_files(tmp_path, open_db, db_options) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=4, n=2000, partitions=4)
    db = open_db()
    try:
        db.ingest(PartitionedLog(log), name="events", max_records=300)  # an earlier streaming binding
        db.flush()
        before, manifest = contents(db), db.manifest
        with pytest.raises(RuntimeError, match="exploded"):
            db.ingest(FailsOn(log, bad=2), name="events", engine="local", tasks=4)
        assert contents(db) == before and db.manifest.l0 == manifest.l0
        assert db.remap("events").frontier == before["bindings"][-1][1]
        leftovers = sst_files(db) - live_files(db)
        assert set(db.gc(grace_ms=0)) == leftovers
        assert sst_files(db) == live_files(db)
        db.ingest(
            PartitionedLog(log), name="events", engine="local", tasks=4
        )  # the rerun loads the rest once
        got = contents(db)
    finally:
        db.close()
    assert got == stream_in_two(lsm.DB.open(str(tmp_path / "stream"), db_options()), log, 300)


def stream_in_two(db: lsm.DB, log: str, first: int) -> dict:
    """The reference: streaming ingest of `first` records into `db`, then of the rest in one batch; `db`
    closed. (A local directory will do: what it holds is compared, wherever the store under test is.)"""
    try:
        db.ingest(PartitionedLog(log), name="events", max_records=first)
        db.ingest(PartitionedLog(log), name="events", batch_records=10**9)
        return contents(db)
    finally:
        db.close()


def test_a_compaction_across_the_reserved_range_is_a_conflict(tmp_path, open_db) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=5, n=500, partitions=2)
    db = open_db()
    try:
        db.put(b"old", b"o")
        db.flush()

        def during() -> None:
            db.put(b"new", b"n")
            db.flush()
            db.compact(full=True)  # merges the file below the range with the one above it

        _Hooked.hook = during
        with pytest.raises(lsm.BulkLoadConflictError):
            db.ingest(_Hooked(log), name="events", engine="local", tasks=2)
        assert db.sources() == [] and db.get(b"new") == b"n" and db.get(b"k0000") is None
        assert sst_files(db) == live_files(db)
        db.ingest(PartitionedLog(log), name="events", engine="local", tasks=2)
        assert db.remap("events").frontier == {p: PartitionedLog(log).end(p) for p in (0, 1)}
        assert db.get(b"new") == b"n"  # written after the failed load's range: still the newest
    finally:
        db.close()


def test_a_driver_killed_mid_job_leaves_the_old_frontier_and_a_rerun_loads_once(
    tmp_path, shared_root, db_options
) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=6, n=1500, partitions=3)
    path = shared_root  # the driver is another process
    db = lsm.DB.open(path, db_options())
    db.ingest(PartitionedLog(log), name="events", max_records=200)
    before = contents(db)
    db.close()
    with LogWriter(log) as w:
        for p in range(3):
            w.append(p, b"late%d" % p, b"l")
    reading = tmp_path / "reading"
    proc = spawn_slow_load(path, log)
    try:
        deadline = time.monotonic() + 60
        # partition 0's task has written its SST and the others are reading: kill the driver
        while time.monotonic() < deadline and not (
            reading.exists()
            and any("-bulk-" in n and "-t0000-" in n for n in _store.names(path, "sst"))
        ):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        assert reading.exists()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    db = lsm.DB.open(path, db_options())
    try:
        assert contents(db) == before
        leftovers = sst_files(db) - live_files(db)
        assert leftovers and all("-bulk-" in n for n in leftovers)
        assert set(db.gc(grace_ms=0)) == leftovers
        stats = db.ingest(PartitionedLog(log), name="events", engine="local", tasks=3)
        assert stats.batches == 1 and stats.frontier == {p: PartitionedLog(log).end(p) for p in range(3)}
        assert db.ingest(PartitionedLog(log), name="events", engine="local").records == 0
        got = contents(db)
    finally:
        db.close()
    assert got == stream_in_two(lsm.DB.open(str(tmp_path / "stream"), db_options()), log, 200)


def test_a_database_log_bulk_loads_like_streaming(open_db, new_root) -> None:
    from lsm.sources import DatabaseLog

    up_root = new_root("up")
    up = open_db(path=up_root, history_retention=10**12)
    try:
        for i in range(300):
            b = lsm.WriteBatch()
            b.put(b"u%03d" % (i % 97), b"v%d" % i)
            if i % 7 == 0:
                b.delete(b"u%03d" % ((i + 3) % 97))
            up.write(b)
        up.flush()
        for i in range(40):
            up.put(b"w%02d" % i, b"late", ttl=60_000)
    finally:
        up.close()
    got = []
    for engine, kw in (("stream", {"batch_records": 10**9}), ("local", {"tasks": 4})):
        db = open_db(path=new_root(engine))
        try:
            db.ingest(DatabaseLog(up_root), name="events", engine=engine, ttl_base="event", **kw)
            got.append(contents(db))
        finally:
            db.close()
    assert got[0] == got[1] and len(got[0]["rows"]) > 100
    assert got[1]["bindings"][0][1] == {0: 341}

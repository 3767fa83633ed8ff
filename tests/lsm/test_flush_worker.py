"""The flush worker (compaction/flush.py): L0 SSTs written in a worker process from the WAL segment are
byte-identical to the in-thread flush's; the worker's failures fall back or fail the store as promised.
A directory's: the worker rebuilds a memtable from its one WAL segment file, and an object store's
memtables are flushed in the flush thread (lsm/flusher.py)."""

from __future__ import annotations

import os

import pytest

import lsm
from compaction import flush as flush_mod
from compaction.flush import FlushJob, SegmentMismatch
from compaction.merge import OutputSpec, flush_rows
from compaction.worker import WorkerDied
from formats import fileio
from lsm.inspect import check_database

T0 = 1_700_000_000_000


@pytest.fixture(autouse=True)
def every_flush_in_the_worker(monkeypatch):
    """The DB flushes small memtables in its thread; these tests want the worker for every flush."""
    monkeypatch.setattr("lsm.flusher.FLUSH_PROCESS_MIN_BYTES", 0)


@pytest.fixture
def db_defaults():
    return {"memtable_bytes": 4096}


def workload(db: lsm.DB, clock: lsm.ManualClock) -> None:
    """Puts, overwrites, TTLs, deletes and batches over many flushes, a snapshot held across some.

    The clock moves and the snapshot changes only between explicit flushes, so every background flush
    sees the same tick and snapshots in both runs."""
    snap = None
    for i in range(600):
        k = b"k%03d" % (i % 150)
        if i % 17 == 0:
            db.delete(k)
        elif i % 11 == 0:
            db.write(lsm.WriteBatch().put(k, b"b%d" % i, ttl=700).delete(b"k%03d" % ((i + 1) % 150)))
        else:
            db.put(k, b"v%d-" % i * (i % 7), ttl=60_000 if i % 3 == 0 else None)
        if i % 50 == 49:
            db.flush()
            clock.advance(300)
            if i == 149:
                snap = db.snapshot()
            if i == 449:
                snap.close()
    db.flush()


def l0_bytes(db: lsm.DB, path) -> list[bytes]:
    return [open(os.path.join(path, "sst", e.name), "rb").read() for e in db.manifest.l0]


@pytest.mark.parametrize("retention", [0, 500])
def test_worker_flush_writes_the_same_ssts_as_the_thread(tmp_path, retention, db_options):
    out = {}
    for proc in (True, False):
        o = db_options(flush_process=proc, history_retention=retention)
        path = tmp_path / f"db-{proc}"
        with lsm.DB.open(path, o) as db:
            workload(db, o.clock)
            out[proc] = (l0_bytes(db, path), list(db.scan_entries()), db.manifest.history_floor)
    assert len(out[True][0]) > 3
    assert out[True] == out[False]


def test_the_flush_runs_in_the_worker_process(tmp_path, db_options):
    o = db_options()
    with lsm.DB.open(tmp_path / "db", o) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"x" * 64)
        db.flush()
        assert db.manifest.l0
    assert flush_mod._worker._proc is not None and flush_mod._worker._proc.poll() is None


def test_a_worker_that_cannot_flush_falls_back_to_the_thread(tmp_path, monkeypatch, db_options):
    def dies(job):
        # a half-written output of the dead worker is cleaned up before the thread flushes
        open(os.path.join(job.output.directory, job.output.prefix + "-0000.sst"), "wb").write(b"half")
        raise WorkerDied("killed")

    monkeypatch.setattr("lsm.flusher.run_flush_in_worker", dies)
    path = tmp_path / "db"
    with lsm.DB.open(path, db_options()) as db:
        for i in range(200):
            db.put(b"k%03d" % i, b"x" * 64)
        db.flush()
        assert db.failure is None
        names = {e.name for e in db.manifest.l0}
        assert set(os.listdir(path / "sst")) == names
    with lsm.DB.open(path, db_options()) as db:
        assert dict(db.scan()) == {b"k%03d" % i: b"x" * 64 for i in range(200)}
    check_database(str(path))


def test_an_io_error_in_the_worker_fails_the_store_and_the_plan_reaches_it(tmp_path, db_options):
    path = tmp_path / "db"
    db = lsm.DB.open(path, db_options())
    try:
        db.put(b"a", b"1")
        with fileio.faults("eio", 1, ops={"write"}, path="/sst/") as plan:
            with pytest.raises(lsm.DbFailedError) as ei:
                db.flush()
        assert plan.fired == 1 and plan.log[0][1].endswith(".sst")
        assert "/sst/" in str(ei.value) and db.failure is not None
        with pytest.raises(lsm.DbFailedError):
            db.put(b"b", b"2")
    finally:
        db.close()
    with lsm.DB.open(path, db_options()) as db:
        assert db.get(b"a") == b"1"  # acknowledged: replayed from the WAL


def test_flush_job_checks_the_segment_holds_the_memtable(tmp_path, db_options):
    path = tmp_path / "db"
    with lsm.DB.open(path, db_options(memtable_bytes=1 << 20)) as db:
        for i in range(50):
            db.put(b"k%02d" % (i % 20), b"v%d" % i)
        mem = db.engine.versions.state.mem
        seg = db.store.paths.wal(mem.segment_id)
        out = tmp_path / "out"
        out.mkdir()
        spec = OutputSpec(str(out), "x", target_bytes=None)
        rows, max_seq = len(mem), mem.max_seq
        got, _stats = FlushJob(seg, rows, max_seq, spec, T0).run()
        want = flush_rows(mem.iter(), OutputSpec(str(out), "y", target_bytes=None), tick=T0)
        assert [i for _, i in got] == [i for _, i in want]
        assert open(out / "x-0000.sst", "rb").read() == open(out / "y-0000.sst", "rb").read()
        with pytest.raises(SegmentMismatch):
            FlushJob(seg, rows + 1, max_seq, spec, T0).run()
        with pytest.raises(SegmentMismatch):
            FlushJob(str(tmp_path / "gone.wal"), rows, max_seq, spec, T0).run()


def test_small_memtables_are_flushed_in_the_thread(tmp_path, monkeypatch, db_options):
    monkeypatch.setattr("lsm.flusher.FLUSH_PROCESS_MIN_BYTES", 1 << 20)
    calls = []
    monkeypatch.setattr("lsm.flusher.run_flush_in_worker", lambda job: calls.append(job))
    with lsm.DB.open(tmp_path / "db", db_options()) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"x" * 64)
        db.flush()
        assert len(db.manifest.l0) > 1 and calls == []


@pytest.mark.parametrize("kind", ["enospc", "eio", "short"])
def test_fault_sweep_of_worker_flushes(tmp_path, kind, db_options):
    """Every I/O call of flushes run in the worker fails in turn (the plan travels to the worker):
    the store fails cleanly, and after a crash every acknowledged write is there and lsm check passes."""

    def workload(db):
        acked = {}
        try:
            for i in range(60):
                db.put(b"k%03d" % i, b"v%03d" % i)
                acked[b"k%03d" % i] = b"v%03d" % i
                if i % 20 == 19:
                    db.flush()
        except lsm.DbFailedError:
            pass
        return acked

    path = tmp_path / "count"
    with lsm.DB.open(path, db_options(memtable_bytes=1024)) as db:
        with fileio.faults(kind, 0, ops=fileio.WRITE_OPS if kind == "short" else None, path="/sst/") as plan:
            workload(db)
    total = plan.calls
    assert total >= 3  # every flush writes, fsyncs and renames its SST
    fired = 0
    for nth in range(1, total + 1):
        path = tmp_path / f"{kind}-{nth}"
        db = lsm.DB.open(path, db_options(memtable_bytes=1024))
        with fileio.faults(kind, nth, ops=fileio.WRITE_OPS if kind == "short" else None, path="/sst/") as plan:
            acked = workload(db)
            if plan.fired:
                with pytest.raises(lsm.DbFailedError):
                    db.flush()
        fired += plan.fired
        db.engine.crash()  # drop the handle as kill -9 would
        with lsm.DB.open(path, db_options()) as db2:
            for k, v in acked.items():
                assert db2.get(k) == v, (nth, k)
        check_database(str(path))
    assert fired >= total // 2

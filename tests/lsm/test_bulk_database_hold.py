"""A bulk load of a `DatabaseLog` on an object store reads through a checkpoint on the upstream
(lsm.sources.database_hold): the upstream's writer compacting fully and collecting with grace 0 while
the load's tasks read cannot delete an SST under them, and the load takes exactly the planned state."""

from __future__ import annotations

import random
import threading

import pytest

import lsm
from lsm.sources import DatabaseLog, database_hold, database_log

OBJECT = pytest.mark.parametrize("backend", ["memory", pytest.param("s3", marks=pytest.mark.s3)])
FAR = 10**12  # history kept: a replica may read from seq 0


def fill(up: lsm.DB, rnd: random.Random) -> None:
    """Two flushed SSTs larger than what opening an object-store SST fetches (its 256 KiB tail), with
    overwrites, so that a task reads blocks after it opened its view, and a full compaction rewrites
    every file."""
    for _ in range(2):
        for _i in range(1500):
            up.put(b"k%05d" % rnd.randrange(2500), rnd.randbytes(300))
        up.flush()


def sst_names(db: lsm.DB) -> set[str]:
    return {e.name for e in db.manifest.all_ssts()}


def interfere(monkeypatch: pytest.MonkeyPatch, up: lsm.DB) -> list[set[str]]:
    """Make the upstream write, compact fully and gc with grace 0 right after the first view a task
    opens (before it reads a row): returns the SSTs the compaction replaced (none survives it)."""
    real = database_log.open_view
    lock = threading.Lock()
    replaced: list[set[str]] = []

    def open_then_collect(*a, **kw):
        view = real(*a, **kw)
        with lock:
            if not replaced:
                before = sst_names(up)
                up.put(b"after-plan", b"not in this load")
                up.flush()
                up.compact(full=True)
                up.gc(grace_ms=0)
                assert not before & sst_names(up)
                replaced.append(before)
        return view

    monkeypatch.setattr(database_log, "open_view", open_then_collect)
    return replaced


@OBJECT
def test_upstream_gc_during_the_load_removes_no_input(open_db, new_root, monkeypatch) -> None:
    up_root = new_root("up")
    up = open_db(path=up_root, history_retention=FAR)
    fill(up, random.Random(7))
    want, planned = dict(up.scan()), up.manifest.last_seq
    up.put(b"wal-only", b"unflushed")  # in the WAL, not in the checkpoint's version: the next load's
    replaced = interfere(monkeypatch, up)
    db = open_db(path=new_root("replica"))
    stats = db.ingest(DatabaseLog(up_root), name="primary", engine="local", tasks=2)
    assert replaced, "no task opened a view: the test would prove nothing"
    assert dict(db.scan()) == want
    assert stats.frontier == {0: planned + 1}
    up.put(b"tick", b"")  # the writer's next commit reads the manifest the hold's release edited
    up.flush()
    assert up.checkpoints() == []  # the load's hold is gone, and with it what only it kept:
    assert {n.rsplit("/", 1)[-1] for n in up.gc(grace_ms=0)} >= replaced[0]
    monkeypatch.undo()
    db.ingest(DatabaseLog(up_root), name="primary", engine="local", tasks=2)
    assert dict(db.scan()) == dict(up.scan())  # the rest, flushed by the upstream's compaction


@OBJECT
def test_without_the_hold_the_same_load_loses_an_input(open_db, new_root, monkeypatch) -> None:
    # the interleaving above bites: the hold, not luck, is what makes that load succeed
    up_root = new_root("up")
    up = open_db(path=up_root, history_retention=FAR)
    fill(up, random.Random(7))
    interfere(monkeypatch, up)
    monkeypatch.setattr(database_hold, "needs_hold", lambda source: False)
    db = open_db(path=new_root("replica"))
    with pytest.raises(FileNotFoundError):
        db.ingest(DatabaseLog(up_root), name="primary", engine="local", tasks=2)
    assert dict(db.scan()) == {}


@OBJECT
def test_a_failed_load_releases_its_checkpoint(open_db, new_root, monkeypatch) -> None:
    up_root = new_root("up")
    up = open_db(path=up_root, history_retention=FAR)
    fill(up, random.Random(3))

    def broken(*a, **kw):
        raise OSError("the task's read failed")

    monkeypatch.setattr(database_log, "open_view", broken)
    db = open_db(path=new_root("replica"))
    with pytest.raises(OSError, match="the task's read failed"):
        db.ingest(DatabaseLog(up_root), name="primary", engine="local", tasks=2)
    up.put(b"tick", b"")  # the writer's next commit reads the manifest the hold's release edited
    up.flush()
    assert up.checkpoints() == []


@OBJECT
def test_a_log_at_a_version_reads_that_version_alone(open_db, new_root) -> None:
    import pickle

    up_root = new_root("up")
    up = open_db(path=up_root, history_retention=FAR)
    for i in range(10):
        up.put(b"a%d" % i, b"1")
    cp = up.checkpoint()  # flushes: the version it names holds the ten rows in SSTs
    for i in range(5):
        up.put(b"b%d" % i, b"2")
    up.flush()
    log = DatabaseLog(up_root, at=cp.manifest_id)
    assert log.end(0) == cp.seq + 1 < DatabaseLog(up_root).end(0)
    assert sorted(r.key for r in log.read(0, 0)) == [b"a%d" % i for i in range(10)]
    assert pickle.loads(pickle.dumps(log)).at == cp.manifest_id
    with pytest.raises(lsm.LsmError, match="manifest version 999 is gone"):
        DatabaseLog(up_root, at=999).end(0)


@OBJECT
def test_a_replica_past_the_upstreams_last_flush_loads_nothing_and_keeps_its_frontier(open_db, new_root) -> None:
    up_root = new_root("up")
    up = open_db(path=up_root, history_retention=FAR)
    up.put(b"a", b"1")
    up.flush()
    up.put(b"b", b"2")  # in the WAL only: a streaming ingest reads it, a held load's version has it not
    up.flush_wal()
    db = open_db(path=new_root("replica"))
    first = db.ingest(DatabaseLog(up_root), name="primary", batch_records=10**9).frontier
    assert first == {0: up.manifest.last_seq + 2}
    assert db.ingest(DatabaseLog(up_root), name="primary", engine="local").records == 0
    assert db.remap("primary").bindings()[-1].frontier == first and dict(db.scan()) == {b"a": b"1", b"b": b"2"}

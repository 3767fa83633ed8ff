"""close() releases everything: SST readers (their descriptors), WAL and epoch files, threads; also in
the failed state and when close itself fails (issue 12, item 9)."""

from __future__ import annotations

import gc
import os
import threading

import pytest

import lsm
from formats import fileio
from storage.objstore import WINDOWS, drop_memory_store
from storage.registry import detach


def held() -> set[tuple]:
    """What the process holds: each open descriptor with its target, and each live thread.

    A test compares the sets before and after a DB's life: anything the DB left behind is new. Things
    that went away meanwhile (a thread or socket of an earlier test that ended) are not the DB's, so
    counting would report them as a leak of the wrong sign."""
    gc.collect()
    out: set[tuple] = {("thread", t) for t in threading.enumerate()}  # the objects: idents are reused
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(("fd", fd, os.readlink(f"/proc/self/fd/{fd}")))
        except FileNotFoundError:  # the listing's own descriptor, closed by now
            pass
    return out


def leaked(before: set[tuple]) -> set[tuple]:
    return held() - before


@pytest.fixture
def db_defaults():
    return {"memtable_bytes": 2048, "l0_compaction_threshold": 3, "compaction_process": False,
            "background_compaction": True}


def forget_memory_store(root: str) -> None:
    """Drop the memory store under `root` and everything it holds."""
    detach(root)
    drop_memory_store(root.removeprefix("memory://").split("/")[0])


def busy(db: lsm.DB, n: int = 400) -> None:
    for i in range(n):
        db.put(b"k%05d" % i, b"v" * 30)
    db.flush()
    db.compact()
    assert len(list(db.scan())) == n
    assert db.get(b"k00007") == b"v" * 30


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_close_releases_every_descriptor_and_thread(db_root, new_root, db_options, monkeypatch):
    # an object store's read-ahead windows (file-backed buffers) go back to a process-wide pool that
    # keeps a few for the next reader: none kept here, so a window a reader never gave back still shows
    monkeypatch.setattr(WINDOWS, "keep", 0)
    with lsm.DB.open(new_root("warm"), db_options()) as db:  # imports, caches, connections: not counted
        busy(db)
    before = held()
    for i in range(3):
        db = lsm.DB.open(db_root, db_options())
        busy(db)
        assert db.engine.versions.live_files()  # SST readers are open
        db.close()
        if db_root.startswith("memory://"):
            # the memory store keeps the very buffer an SST was uploaded from (a mapped temporary file,
            # compaction.output) as the object's bytes: the store's, not the closed DB's, so it goes
            # (with the closed handle, which still names the store)
            del db
            forget_memory_store(db_root)
        assert not leaked(before), f"round {i}"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_close_in_the_failed_state_and_a_failing_close_release_everything(tmp_path, db_options):
    """On a directory: the failures are injected into its file operations (formats.fileio)."""
    before = held()
    db = lsm.DB.open(tmp_path / "db", db_options())
    busy(db, 100)
    with fileio.faults("eio", 1, ops={"write"}, path="/wal/"):
        with pytest.raises(lsm.DbFailedError):
            db.put(b"x", b"y")
    db.close()  # quiet: the failure was already reported
    assert not leaked(before)

    db = lsm.DB.open(tmp_path / "db", db_options())
    db.put(b"z", b"1")
    with fileio.faults("eio", 1, ops={"link"}, path="/manifest/"):
        with pytest.raises(lsm.DbFailedError, match="link"):
            db.close()
    assert not leaked(before)
    with pytest.raises(lsm.ClosedError):
        db.put(b"a", b"b")
    with lsm.DB.open(tmp_path / "db", db_options()) as db2:
        assert db2.get(b"z") == b"1" and db2.get(b"x") is None

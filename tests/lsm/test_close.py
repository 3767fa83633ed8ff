"""close() releases everything: SST readers (their descriptors), WAL and epoch files, threads; also in
the failed state and when close itself fails (issue 12, item 9)."""

from __future__ import annotations

import os
import threading

import pytest

import lsm
from formats import fileio

T0 = 1_700_000_000_000


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def opts(**kw) -> lsm.DbOptions:
    base = dict(clock=lsm.ManualClock(T0), memtable_bytes=2048, l0_compaction_threshold=3, compaction_process=False)
    return lsm.DbOptions(**{**base, **kw})


def busy(db: lsm.DB, n: int = 400) -> None:
    for i in range(n):
        db.put(b"k%05d" % i, b"v" * 30)
    db.flush()
    db.compact()
    assert len(list(db.scan())) == n
    assert db.get(b"k00007") == b"v" * 30


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_close_releases_every_descriptor_and_thread(tmp_path):
    with lsm.DB.open(tmp_path / "warm", opts()) as db:  # imports, caches: not what we count
        busy(db)
    before = (fds(), threading.active_count())
    for i in range(3):
        db = lsm.DB.open(tmp_path / "db", opts())
        busy(db)
        assert db.engine.versions.live_files()  # SST readers are open
        db.close()
        assert (fds(), threading.active_count()) == before, f"round {i}: leaked"


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_close_in_the_failed_state_and_a_failing_close_release_everything(tmp_path):
    before = (fds(), threading.active_count())
    db = lsm.DB.open(tmp_path / "db", opts())
    busy(db, 100)
    with fileio.faults("eio", 1, ops={"write"}, path="/wal/"):
        with pytest.raises(lsm.DbFailedError):
            db.put(b"x", b"y")
    db.close()  # quiet: the failure was already reported
    assert (fds(), threading.active_count()) == before

    db = lsm.DB.open(tmp_path / "db", opts())
    db.put(b"z", b"1")
    with fileio.faults("eio", 1, ops={"link"}, path="/manifest/"):
        with pytest.raises(lsm.DbFailedError, match="link"):
            db.close()
    assert (fds(), threading.active_count()) == before
    with pytest.raises(lsm.ClosedError):
        db.put(b"a", b"b")
    with lsm.DB.open(tmp_path / "db", opts()) as db2:
        assert db2.get(b"z") == b"1" and db2.get(b"x") is None

"""A bulk load's I/O errors (issue 24, defects 2 and 7): the failed state as on every other write path, and
no deletion of an SST a manifest on disk may name. The sweep over every call is in test_fault_injection.py.
The faults are a directory's (`formats.fileio`: link, directory fsync, ENOSPC): these tests are about the
local backend only."""

from __future__ import annotations

import errno
import os

import pytest

import lsm
from formats import fileio
from lsm.inspect import check_database
from lsm.sources import PartitionedLog
from tests.lsm._bulk_util import contents, ingest_contents, write_log
from tests.lsm.test_fault_injection import crash


@pytest.fixture
def backend() -> str:
    """A local directory only (db_root, open_db): the injected faults are its file operations'."""
    return "local"


@pytest.fixture
def log(tmp_path) -> str:
    d = str(tmp_path / "log")
    write_log(d, seed=7, n=600, partitions=3)
    return d


def referenced(db: lsm.DB) -> list[str]:
    return [e.name for e in db.manifest.all_ssts()]


@pytest.mark.parametrize("op", ["link", "fsync_dir"])
def test_a_maybe_published_load_keeps_its_ssts(open_db, db_root, new_root, log, op) -> None:
    """The manifest's link or directory fsync fails: the load's manifest may be on disk, so its SSTs stay,
    and the next open has the whole load (fsync_dir: the link happened) or none of it (link)."""
    want = ingest_contents(open_db(path=new_root("ref")), log, "local", tasks=3)
    db = open_db()
    # the load publishes two manifest versions: its seq reservation, then its commit; fail the commit's
    with fileio.faults("eio", 2, ops={op}, path="/manifest"):
        with pytest.raises(lsm.DbFailedError, match=op) as ei:
            db.ingest(PartitionedLog(log), name="events", engine="local", tasks=3)
    assert ei.value.published is None
    with pytest.raises(lsm.DbFailedError):
        db.put(b"later", b"x")
    crash(db)
    db = open_db()
    try:
        for name in referenced(db):
            assert os.path.exists(db.sst_path(name)), name
        got = contents(db)
        assert got == (want if op == "fsync_dir" else {"rows": {}, "visible": {}, "bindings": [], "pending": None})
    finally:
        db.close()
    check_database(db_root)


@pytest.mark.parametrize("nth", [1, 3])
def test_a_failing_task_enters_the_failed_state(open_db, db_root, log, nth) -> None:
    """A task's SST write fails (ENOSPC): DbFailedError naming the file, published False, writes refused,
    nothing of the load after a reopen."""
    db = open_db()
    db.put(b"before", b"x")
    with fileio.faults("enospc", nth, ops={"write", "fsync"}, path="-bulk-") as plan:
        with pytest.raises(lsm.DbFailedError, match=r"of .*-bulk-.*\.sst failed") as ei:
            db.ingest(PartitionedLog(log), name="events", engine="local", tasks=3)
    assert plan.fired == 1
    assert ei.value.published is False and ei.value.__cause__.errno == errno.ENOSPC
    assert db.failure is ei.value
    with pytest.raises(lsm.DbFailedError):
        db.put(b"later", b"x")
    assert db.get(b"before") == b"x"
    # the failing task removed what it wrote, the job the SSTs of the tasks that had finished
    assert [n for n in os.listdir(os.path.join(db.path, "sst")) if "-bulk-" in n] == []
    crash(db)
    db = open_db()
    try:
        assert dict(db.scan()) == {b"before": b"x"} and db.sources() == []
    finally:
        db.close()
    check_database(db_root)


def test_a_failing_sst_directory_fsync_enters_the_failed_state(open_db, log) -> None:
    db = open_db()
    with fileio.faults("eio", 1, ops={"fsync_dir"}, path="/sst"):
        with pytest.raises(lsm.DbFailedError, match=r"fsync_dir of .*/sst failed") as ei:
            db.ingest(PartitionedLog(log), name="events", engine="local", tasks=2)
    assert ei.value.published is False and db.failure is ei.value
    # nothing of the load was published (its seq reservation was, before the load ran)
    _, newest = db.engine.versions.store.latest()
    assert [e.name for e in newest.all_ssts() if "-bulk-" in e.name] == []
    assert [n for n in os.listdir(os.path.join(db.path, "sst")) if "-bulk-" in n] == []  # and nothing kept
    with pytest.raises(lsm.DbFailedError):
        db.ingest(PartitionedLog(log), name="events", engine="local", tasks=2)
    db.close()
    assert ingest_contents(open_db(), log, "local", tasks=2)["bindings"]  # a reopen loads it

"""A bulk load of a `DatabaseLog` on an object store reads through a checkpoint on the upstream
(lsm.sources.database_hold): the upstream's writer compacting fully and collecting with grace 0 while
the load's tasks read cannot delete an SST under them, and the load takes exactly the planned state."""

from __future__ import annotations

import pytest

import lsm
from lsm.sources import DatabaseLog

OBJECT = pytest.mark.parametrize("backend", ["memory", pytest.param("s3", marks=pytest.mark.s3)])
FAR = 10**12  # history kept: a replica may read from seq 0



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

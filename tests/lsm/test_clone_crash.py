"""A clone under real SIGKILLs: a writer process, on the clone or on its source, is killed in the middle of
its writes while the source flushes, compacts and collects with no grace; the clone still opens, reads
the state it started from, keeps every batch its writer had acknowledged, and passes `lsm check`. On a
local directory (a clone of hard links) and on S3 (a clone that reads the source's objects, kept there by
its checkpoint), both reachable from another process (`shared_root`).

The writer is tests/lsm/_lsm_proc.py's ``writer`` mode: sync batches of 5 keys and ``last`` = the batch
id, printing ``A <id>`` after each acknowledgement, into a small memtable (it flushes as it goes).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

import lsm
from lsm.inspect import check_database
from tests.lsm._lsm_proc import spawn

ROWS = 120
KEYS_PER_BATCH = 5


def source_rows(db: lsm.DB, tag: bytes) -> None:
    for i in range(ROWS):
        db.put(b"s:%03d" % i, tag + b"%03d" % i)
    db.flush()


def acked(child) -> list[int]:
    """Batch ids the child acknowledges, read in a thread; the list grows while the child runs."""
    seen: list[int] = []

    def read() -> None:
        for line in child.stdout:
            if line.startswith("A "):
                seen.append(int(line.split()[1]))

    threading.Thread(target=read, daemon=True).start()
    return seen


def kill_after(child, seen: list[int], batches: int, work=None) -> int:
    """Run `work()` over and over until the child acknowledged `batches`, then SIGKILL it; the newest
    acknowledged batch id."""
    deadline = time.monotonic() + 120
    while len(seen) < batches and time.monotonic() < deadline and child.poll() is None:
        if work is not None:
            work()
        else:
            time.sleep(0.05)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert seen, child.stderr.read()
    return seen[-1]


def check_batches(db: lsm.DB, newest: int) -> None:
    """Every batch up to the one acknowledged last is there whole (and `last` at least that)."""
    last = int(db.get(b"last"))
    assert last >= newest
    for i in range(1, last + 1):
        for k in range(KEYS_PER_BATCH):
            v = db.get(b"%08d-%02d" % (i, k))
            assert v is not None and v.startswith(b"%d:" % i), (i, k, v)


@pytest.mark.slow  # a writer process per test, SIGKILLed
@pytest.mark.parametrize("killed", ["the clone's writer", "the source's writer"])
def test_a_clone_survives_a_killed_writer_while_the_source_collects(shared_root, killed, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    opts = lsm.DbOptions(background_compaction=False)
    clone_root = shared_root.rstrip("/") + "-clone"
    src = lsm.DB.open(shared_root, opts)
    source_rows(src, b"then")
    cp = src.checkpoint(name="for the clone")
    lsm.DB.clone(src, clone_root, checkpoint=cp.id, options=opts).close()
    src.delete_checkpoint(cp.id)  # the clone holds what it reads by a checkpoint of its own

    def source_goes_on() -> None:
        source_rows(src, b"now")
        src.compact(full=True)
        src.gc(grace_ms=0)

    if killed == "the clone's writer":
        child = spawn("writer", clone_root, KEYS_PER_BATCH, 16384)
        newest = kill_after(child, acked(child), 150, source_goes_on)
    else:
        src.close()
        child = spawn("writer", shared_root, KEYS_PER_BATCH, 16384)
        newest = kill_after(child, acked(child), 150)
        src = lsm.DB.open(shared_root, opts)  # recovers what the killed writer acknowledged
        check_batches(src, newest)
    source_goes_on()
    src.close()

    with lsm.DB.open(clone_root, opts) as c:
        assert [c.get(b"s:%03d" % i) for i in range(ROWS)] == [b"then%03d" % i for i in range(ROWS)]
        if killed == "the clone's writer":
            check_batches(c, newest)
        else:
            assert c.get(b"last") is None  # the source's later writes are not the clone's
        c.compact(full=True)
        c.gc(grace_ms=0)
    check_database(clone_root)
    with lsm.DB.open(clone_root, opts, read_only=True) as c:
        assert [c.get(b"s:%03d" % i) for i in range(ROWS)] == [b"then%03d" % i for i in range(ROWS)]

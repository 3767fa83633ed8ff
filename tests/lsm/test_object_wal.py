"""The WAL of an object-store database (lsm.wal_object), on obstore's memory store and moto's S3 server, in
one process: group commit, sync=True durable on return, fencing by WAL object id and its claims. What
every backend's WAL does (replay from the replay point, recovery modes) is in test_wal_recovery.py; real
process kills in test_crash.py."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time

import pytest

import lsm
from formats.fileio import FileOpError
from lsm.events import EventListener
from lsm.wal_object import CLOCK_MARGIN_MS, WalBound, claim
from storage import PublishUnknownError, storage_for
from storage.paths import open_store
from tests.lsm import _wal

SYNC = lsm.WriteOptions(sync=True)
# a group commit interval no test waits out: only sync writes, full buffers and rotations write objects
NEVER = 600_000


@pytest.fixture(params=["memory", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest) -> str:
    """This module's stores: the two object stores (a directory's WAL is a segment file appended in place,
    with nothing buffered: test_wal_recovery.py and test_fencing.py run there too)."""
    return request.param


def opts(**kw) -> lsm.DbOptions:
    return lsm.DbOptions(background_compaction=False, **kw)


def wal_ids(root: str) -> list[int]:
    return [i for i, _ in _wal.segments(root)]


def visible(url: str) -> dict[bytes, bytes]:
    with lsm.DB.open(url, read_only=True) as db:
        return dict(db.scan())


def test_sync_write_is_in_an_object_when_it_returns(db_root):
    db = lsm.DB.open(db_root, opts(wal_flush_interval_ms=NEVER))
    try:
        db.put(b"a", b"1")  # buffered: no object yet
        assert visible(db_root) == {}
        db.put(b"b", b"2", options=SYNC)  # its object holds the buffered write too, in order
        assert visible(db_root) == {b"a": b"1", b"b": b"2"}
    finally:
        db.close()


def test_unsynced_writes_are_group_committed_within_the_interval(db_root):
    db = lsm.DB.open(db_root, opts(wal_flush_interval_ms=200))
    try:
        before = db.object_store_stats()["put"]
        t0 = time.monotonic()
        for i in range(300):
            db.put(b"k%03d" % i, b"v")
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 5
        while len(visible(db_root)) < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(visible(db_root)) == 300  # durable within the interval, without a sync or a close
        puts = db.object_store_stats()["put"] - before
        # one object per interval (plus the one that was due when the loop ended), not one per write
        assert puts <= elapsed / 0.2 + 2, (puts, elapsed)
    finally:
        db.close()


def test_a_full_buffer_is_written_at_once(db_root):
    db = lsm.DB.open(db_root, opts(wal_flush_interval_ms=NEVER, wal_flush_bytes=4096))
    try:
        for i in range(40):
            db.put(b"k%03d" % i, b"x" * 200)  # ~8 KiB in all: the buffer filled at least once
        assert len(visible(db_root)) >= 15
    finally:
        db.close()


def test_a_fenced_writer_fails_at_its_next_object_and_its_buffered_writes_never_appear(db_root):
    a = lsm.DB.open(db_root, opts(wal_flush_interval_ms=NEVER))
    try:
        a.put(b"acked", b"1", options=SYNC)
        a.put(b"buffered", b"2")  # acknowledged, still in a's buffer
        b = lsm.DB.open(db_root, opts())  # claims the id after a's last object: a is fenced
        try:
            with pytest.raises(lsm.FencedError):
                a.put(b"refused", b"3", options=SYNC)
            with pytest.raises(lsm.FencedError):
                a.put(b"later", b"4")  # the handle stays fenced
            assert dict(b.scan()) == {b"acked": b"1"}
            b.put(b"new owner", b"5", options=SYNC)
        finally:
            b.close()
    finally:
        # nothing of a's reaches the store on close either, and close says its buffered writes are lost
        with pytest.raises(lsm.FencedError, match="lost"):
            a.close()
    assert a.closed
    assert visible(db_root) == {b"acked": b"1", b"new owner": b"5"}


def test_a_fenced_writers_close_writes_nothing(db_root):
    a = lsm.DB.open(db_root, opts(wal_flush_interval_ms=NEVER))
    a.put(b"acked", b"1", options=SYNC)
    a.put(b"buffered", b"2")
    b = lsm.DB.open(db_root, opts())
    b.close()
    # its final object finds its id taken: fenced, so close releases everything and says "buffered" is lost
    with pytest.raises(lsm.FencedError, match="1 WAL record"):
        a.close()
    assert a.closed
    assert visible(db_root) == {b"acked": b"1"}


class _BlockFirstFlush(EventListener):
    """Holds the first flush at its start until `go` is set."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go = threading.Event()

    def on_flush_begin(self, info) -> None:
        if not self.started.is_set():
            self.started.set()
            assert self.go.wait(30)


def test_close_after_a_flush_lost_to_a_new_owner_releases_the_handle(db_root):
    # the flush of a's frozen memtable finds b's manifest (FencedError); a's next WAL still buffers a
    # write whose object id b claimed. close() must release the handle, keep that write invisible, and
    # say it is lost.
    gate = _BlockFirstFlush()
    a = lsm.DB.open(db_root, opts(wal_flush_interval_ms=NEVER, memtable_bytes=1024, event_listeners=[gate]))
    a.put(b"big", b"x" * 2048, options=SYNC)  # fills the memtable: rotated, its flush held at the gate
    assert gate.started.wait(30)
    a.put(b"buffered", b"2")  # in the new memtable's WAL buffer
    b = lsm.DB.open(db_root, opts())  # replays a's objects and claims the next id
    b.close()
    gate.go.set()
    deadline = time.monotonic() + 30
    while a.engine.failure is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert isinstance(a.engine.failure, lsm.FencedError)  # the held flush lost its manifest commit to b
    with pytest.raises(lsm.FencedError, match="lost"):
        a.close()
    assert a.engine.closed
    with pytest.raises(lsm.ClosedError):
        a.get(b"big")
    assert visible(db_root) == {b"big": b"x" * 2048}


def test_an_idle_writer_reads_the_manifest_before_writing_again(db_root, monkeypatch):
    # a recheck window of 0 (lsm.wal_object.WalBound): every object write of a writer idle for any time
    # first checks the manifest's writer epoch
    monkeypatch.setattr("lsm.wal_manager.wal_bound", lambda options: WalBound(10**9, 10**9 + CLOCK_MARGIN_MS))
    a = lsm.DB.open(db_root, opts(wal_flush_interval_ms=NEVER))
    try:
        a.put(b"acked", b"1", options=SYNC)
        b = lsm.DB.open(db_root, opts())
        b.close()
        # the claim b wrote is gone (its grace is over): only the manifest tells a it is fenced
        claim = _wal.segment_path(db_root, wal_ids(db_root)[-1])
        storage_for(db_root).delete(claim)
        time.sleep(0.01)
        with pytest.raises(lsm.FencedError):
            a.put(b"refused", b"2", options=SYNC)
    finally:
        a.close()
    assert visible(db_root) == {b"acked": b"1"}


def test_a_wal_object_write_that_failed_in_the_background_fails_the_handle(db_root, monkeypatch):
    # the group commit's PUT fails (persistently, or with an unknown outcome): the records it held may
    # or may not be in the store, so nothing may go on from that id: the next write, flush or close
    # reports the failed state instead of starting the next WAL at the same id
    db = lsm.DB.open(db_root, opts(wal_flush_interval_ms=20))
    store = storage_for(db_root)
    real = store.put_if_absent

    def failing(path: str, data: bytes) -> bool:
        if "/wal/" in path:
            raise PublishUnknownError(FileOpError(errno.EIO, "injected", path, "put"))
        return real(path, data)

    monkeypatch.setattr(store, "put_if_absent", failing)
    db.put(b"a", b"1")
    time.sleep(0.3)  # the flusher tried and failed
    monkeypatch.setattr(store, "put_if_absent", real)
    with pytest.raises(lsm.DbFailedError, match="injected"):
        db.flush()
    with pytest.raises(lsm.DbFailedError):
        db.put(b"b", b"2")
    db.close()
    with lsm.DB.open(db_root, opts()) as db2:  # what the store holds is a prefix: here, nothing or a
        assert dict(db2.scan()) in ({}, {b"a": b"1"})
        db2.put(b"c", b"3", options=SYNC)  # and the next owner writes on
    assert visible(db_root)[b"c"] == b"3"


def test_of_two_openers_claiming_one_wal_id_the_older_is_fenced_at_open(db_root, monkeypatch):
    # an empty claim has the same bytes whoever writes it, so an opener whose claim finds the id taken
    # by an equal claim cannot tell it from its own lost response: both would believe they own the WAL.
    # Here a's claim is held until b (the newer epoch) has opened and claimed the same id.
    lsm.DB.open(db_root, opts()).close()
    store = storage_for(db_root)
    real = store.put_if_absent
    newer: list[lsm.DB] = []

    def claim_after_b(path: str, data: bytes) -> bool:
        if "/wal/" in path and not data and not newer:
            monkeypatch.setattr(store, "put_if_absent", real)
            newer.append(lsm.DB.open(db_root, opts()))  # publishes a newer epoch, claims the same id
        return real(path, data)

    monkeypatch.setattr(store, "put_if_absent", claim_after_b)
    with pytest.raises(lsm.FencedError):
        lsm.DB.open(db_root, opts())
    (b,) = newer
    try:
        b.put(b"owner", b"b", options=SYNC)  # the newer handle keeps the WAL
    finally:
        b.close()
    assert visible(db_root) == {b"owner": b"b"}


def test_a_process_that_exits_without_closing_still_writes_its_buffer(shared_root, tmp_path):
    # a normal exit is no crash: what the group commit still buffers is written on the way out (a killed
    # process loses it: test_crash.py). Another process's store: a directory (whose write(2) keeps it
    # anyway) or S3, not memory://
    script = tmp_path / "exit_without_close.py"
    script.write_text(
        "import sys\n"
        "import lsm\n"
        "db = lsm.DB.open(sys.argv[1], lsm.DbOptions(wal_flush_interval_ms=600_000))\n"
        "db.put(b'unsynced', b'1')\n"
        "sys.exit(0)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run([sys.executable, str(script), shared_root], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert visible(shared_root) == {b"unsynced": b"1"}


def test_sync_writes_of_concurrent_threads_share_objects(db_root, backend, monkeypatch):
    # each sync write returns once durable, but the writes that arrive while an object is being written
    # wait for the next one together instead of one object (and one PUT) each
    threads, per_thread = 8, 15
    if backend == "memory":
        # a memory PUT takes microseconds: no write would arrive while one is in flight. Each WAL PUT
        # takes a few milliseconds here, as one to S3 does, so both stores are asked the same
        store = open_store(db_root).storage  # the backend the database will be opened on
        real = store.put_if_absent

        def slow(path: str, data: bytes) -> bool:
            if "/wal/" in path:
                time.sleep(0.003)
            return real(path, data)

        monkeypatch.setattr(store, "put_if_absent", slow)
    db = lsm.DB.open(db_root, opts(wal_flush_interval_ms=NEVER))
    try:
        before = db.object_store_stats()["put"]
        start = threading.Barrier(threads)

        def writer(t: int) -> None:
            start.wait()
            for i in range(per_thread):
                db.put(b"t%d-%02d" % (t, i), b"v", options=SYNC)

        pool = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        puts = db.object_store_stats()["put"] - before
        assert len(visible(db_root)) == threads * per_thread  # every acknowledged write is in an object
        # one PUT per write without sharing; how many share depends on the scheduler (a loaded 2-core
        # machine shares least), so the bound only asks that a good part of them did
        assert puts < threads * per_thread * 0.85, puts
    finally:
        db.close()


def test_two_claims_of_one_wal_id_do_not_both_win(db_root):
    # two openers claim the id after the last WAL object with the same empty object: the second is
    # refused (and claims the next id), although the bytes there are the same as its own
    store = open_store(db_root)
    claim(store, 5)
    with pytest.raises(FileExistsError):
        claim(store, 5)

"""Request faults under a database on S3: the store talks to the moto server through a fault-injecting
s3_proxy (tests/s3proxy.py). Transient faults on reads, SST PUTs, WAL PUTs and manifest PUTs are retried
and the operation succeeds; a persistent fault is the failed state, as a disk error is; a PUT whose
response was lost after its object landed is recognised as ours, or the handle fails without guessing
and the next open finds the object there or not."""

from __future__ import annotations

import time

import pytest

import lsm
from storage import objstore, register
from tests.lsm import _wal
from tests.s3proxy import FaultProxy

TRANSIENT = ["500", "503", "reset"]
SYNC = lsm.WriteOptions(sync=True)


def open_db(url: str, s3_server, s3_proxy: FaultProxy | None = None, retries: int = 3,
            interval_ms: int = 60_000) -> lsm.DB:
    """`url` opened through `s3_proxy` (None: straight to the server) with small retry limits; WAL objects
    are written by sync writes and flushes only (the interval is long), so each test knows its PUTs."""
    endpoint = s3_proxy.endpoint if s3_proxy is not None else None
    store = s3_server.options(endpoint=endpoint) | {"max_retries": retries, "retry_timeout_ms": 2000}
    opts = lsm.DbOptions(object_store_options=store, wal_flush_interval_ms=interval_ms,
                         background_compaction=False)
    return lsm.DB.open(url, opts)


def wal_seqs(url: str, s3_server) -> list[int]:
    """The seq of every record in the WAL objects of `url` (read straight from the server)."""
    register(url, s3_server.options())
    seqs = []
    for _sid, path in _wal.segments(url):
        records, _ = _wal.records(url, path)
        seqs += [r.seq for r in records]
    return seqs


@pytest.mark.parametrize("action", TRANSIENT)
@pytest.mark.parametrize("target", ["wal", "sst", "manifest", "get"])
def test_a_transient_fault_is_retried_and_the_operation_succeeds(s3_server, s3_proxy, target: str,
                                                                   action: str) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy)
    db.put(b"a", b"1", options=SYNC)
    s3_proxy.log.clear()
    if target == "wal":
        s3_proxy.fail(action, method="PUT", key="/wal/")
        db.put(b"b", b"2", options=SYNC)
    elif target in ("sst", "manifest"):
        s3_proxy.fail(action, method="PUT", key=f"/{target}/")
        db.put(b"b", b"2")
        db.flush()
        assert len(db.manifest.l0) == 1
    else:  # an SST read: its first GET (the open's tail read) fails once
        db.put(b"b", b"2")
        db.close()
        s3_proxy.log.clear()
        s3_proxy.fail(action, method="GET", key="/sst/")
        db = open_db(url, s3_server, s3_proxy)
    method, key = ("GET", "/sst/") if target == "get" else ("PUT", f"/{target}/")
    assert [s.action for s in s3_proxy.requests(method, key)][:2] == [action, "forward"]
    assert db.object_store_stats()["retries"] >= 1
    assert db.failure is None
    assert (db.get(b"a"), db.get(b"b")) == (b"1", b"2")
    db.close()
    db = open_db(url, s3_server)
    assert (db.get(b"a"), db.get(b"b")) == (b"1", b"2")
    db.close()


@pytest.mark.parametrize("target", ["wal", "sst"])
def test_a_persistent_fault_is_the_failed_state_and_a_reopen_loses_no_acknowledged_write(
        s3_server, s3_proxy, target: str) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=2)
    acked = {}
    for i in range(5):
        db.put(b"k%d" % i, b"v%d" % i, options=SYNC if i % 2 else None)
        acked[b"k%d" % i] = b"v%d" % i
    db.put(b"k5", b"v5", options=SYNC)  # a durable point: the sync=False writes before it are in its object
    acked[b"k5"] = b"v5"
    s3_proxy.fail("500", method="PUT", key=f"/{target}/", count=None)
    with pytest.raises(lsm.DbFailedError) as e:
        if target == "wal":
            db.put(b"lost", b"x", options=SYNC)
        else:
            db.flush()
    assert f"/{target}/" in (e.value.file or "") and e.value.op == "put"
    with pytest.raises(lsm.DbFailedError):
        db.put(b"later", b"x", options=SYNC)
    assert {k: db.get(k) for k in acked} == acked  # reads keep working
    db.close()
    s3_proxy.heal()
    db = open_db(url, s3_server, s3_proxy)
    assert {k: db.get(k) for k in acked} == acked
    assert db.get(b"later") is None
    assert db.get(b"lost") is None  # its only PUT was refused: it never landed
    db.put(b"after", b"ok", options=SYNC)
    db.close()


def test_a_persistent_fault_of_the_background_wal_flush_fails_the_next_write(s3_server, s3_proxy) -> None:
    # sync=False writes are acknowledged from the buffer; the flusher's PUT keeps failing: the next write
    # raises DbFailedError. After a reopen the store holds a prefix of the acknowledged writes: the
    # durable ones, without those of the failed object
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=1, interval_ms=20)
    db.put(b"durable", b"1", options=SYNC)
    s3_proxy.fail("500", method="PUT", key="/wal/", count=None)
    db.put(b"buffered", b"2")
    deadline = time.monotonic() + 10
    with pytest.raises(lsm.DbFailedError):
        while time.monotonic() < deadline:
            db.put(b"more", b"3")
            time.sleep(0.01)
    assert db.get(b"buffered") == b"2"  # reads keep working, from the memtable
    db.close()
    s3_proxy.heal()
    db = open_db(url, s3_server, s3_proxy)
    assert db.get(b"durable") == b"1"
    assert db.get(b"buffered") is None and db.get(b"more") is None
    db.close()


def test_a_manifest_put_whose_response_was_lost_is_recognised_as_ours(s3_server, s3_proxy) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy)
    db.put(b"a", b"1")
    s3_proxy.log.clear()
    s3_proxy.fail("lost", method="PUT", key="/manifest/")
    db.flush()  # its version landed, the response was lost; the repeat finds the same bytes
    assert db.failure is None and len(db.manifest.l0) == 1
    assert [s.action for s in s3_proxy.requests("PUT", "/manifest/")] == ["lost", "forward"]
    db.put(b"b", b"2")
    db.flush()  # and the next commit follows it
    db.close()
    db = open_db(url, s3_server)
    assert (db.get(b"a"), db.get(b"b")) == (b"1", b"2")
    db.close()


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_a_manifest_put_whose_outcome_is_unknown_is_resolved_by_the_next_open(s3_server, s3_proxy,
                                                                             landed: bool) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=2)
    db.put(b"a", b"1", options=SYNC)
    s3_proxy.unknowable("/manifest/", landed)  # no repeat nor read back gets an answer
    with pytest.raises(lsm.DbFailedError) as e:
        db.flush()
    assert e.value.published is None  # not guessed: maybe published
    flushed = [s.key.rsplit("/", 1)[1] for s in s3_proxy.requests("PUT", "/sst/")]
    assert len(flushed) == 1
    assert db.get(b"a") == b"1"
    with pytest.raises(lsm.DbFailedError):
        db.put(b"b", b"2")
    db.close()
    db = open_db(url, s3_server)
    # the flush's version is the newest on the store iff it landed; its SST was kept either way
    assert (flushed[0] in [s.name for s in db.manifest.l0]) == landed
    assert db.get(b"a") == b"1" and db.get(b"b") is None
    assert flushed[0] in register(url, s3_server.options()).list_names(url + "/sst")
    db.close()


def test_a_wal_put_whose_response_was_lost_is_acknowledged_once(s3_server, s3_proxy) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy)
    s3_proxy.log.clear()
    s3_proxy.fail("lost", method="PUT", key="/wal/")
    seq = db.put(b"a", b"1", options=SYNC)
    assert [s.action for s in s3_proxy.requests("PUT", "/wal/")] == ["lost", "forward"]
    assert seq in wal_seqs(url, s3_server)  # durable when the write returned
    db.put(b"b", b"2", options=SYNC)
    db.close()
    seqs = wal_seqs(url, s3_server)
    assert len(seqs) == len(set(seqs))  # no record written twice
    db = open_db(url, s3_server)
    assert (db.get(b"a"), db.get(b"b")) == (b"1", b"2")
    assert db.get_entry(b"a").seq == seq
    db.close()


@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_a_wal_put_whose_outcome_is_unknown_raises_and_the_next_open_decides(s3_server, s3_proxy,
                                                                            landed: bool) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=2)
    first = db.put(b"a", b"1", options=SYNC)
    s3_proxy.unknowable("/wal/", landed)  # no repeat nor read back gets an answer
    with pytest.raises(lsm.DbFailedError):
        db.put(b"b", b"2", options=SYNC)  # not acknowledged: its object may or may not be there
    with pytest.raises(lsm.DbFailedError):
        db.put(b"c", b"3", options=SYNC)
    db.close()
    db = open_db(url, s3_server)
    assert db.get(b"a") == b"1"
    assert (db.get(b"b") == b"2") == landed
    assert db.get(b"c") is None
    if landed:
        assert db.get_entry(b"b").seq == first + 1
    db.put(b"d", b"4", options=SYNC)  # the next write takes a fresh seq after whatever was replayed
    assert db.get_entry(b"d").seq > (first + 1 if landed else first)
    db.close()
    seqs = wal_seqs(url, s3_server)
    assert len(seqs) == len(set(seqs))


@pytest.mark.parametrize("reported", [True, False], ids=["reported", "not-reported-yet"])
def test_a_background_wal_put_whose_outcome_is_unknown_fails_the_handle(s3_server, s3_proxy, reported) -> None:
    # the flusher's object lands but every repeat fails: the handle enters the failed state at once, and
    # must never rotate past that id (its next object there would be refused, and it would take itself
    # for fenced). "not-reported-yet": the flush comes before the flusher thread has reported the failure
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=1, interval_ms=20)
    db.put(b"a", b"1", options=SYNC)
    if not reported:
        db.engine.wal.writer.on_broken = None
    s3_proxy.unknowable("/wal/", landed=True)
    db.put(b"b", b"2")  # acknowledged from the buffer; the flusher writes it
    deadline = time.monotonic() + 10
    while db.engine.wal.writer.broken is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if reported:
        assert isinstance(db.failure, lsm.DbFailedError) and "/wal/" in (db.failure.file or "")
    s3_proxy.heal()
    with pytest.raises(lsm.DbFailedError):
        db.flush()
    with pytest.raises(lsm.DbFailedError):
        db.put(b"c", b"3", options=SYNC)
    assert db.get(b"b") == b"2"
    db.close()
    db = open_db(url, s3_server)
    assert (db.get(b"a"), db.get(b"b"), db.get(b"c")) == (b"1", b"2", None)  # b's object landed
    db.close()


@pytest.mark.parametrize("action", ["500", "503", "reset", "lost"])
def test_a_workload_with_every_third_request_failing_once_loses_nothing(s3_server, s3_proxy, monkeypatch,
                                                                         action: str) -> None:
    # every request kind (GET, HEAD, LIST, PUT, conditional PUT, bulk DELETE) through every engine path
    # (open, WAL, flush, compaction, reads, close, reopen) meets faults; each is retried and succeeds
    monkeypatch.setattr(objstore, "BACKOFF_FIRST", 0.002)  # dozens of faults: keep their waits short
    url = s3_server.new_url()
    s3_proxy.fail(action, every=3)
    db = open_db(url, s3_server, s3_proxy, interval_ms=10)
    want = {}
    for i in range(150):
        k, v = b"key%04d" % (i * 7 % 100), b"v%d" % i
        db.put(k, v, options=SYNC if i % 25 == 0 else None)
        want[k] = v
        if i % 50 == 49:
            db.flush()
    db.delete(b"key0000")
    del want[b"key0000"]
    db.compact(full=True)
    assert dict(db.scan()) == want
    assert db.failure is None
    db.close()
    db = open_db(url, s3_server, s3_proxy)
    assert dict(db.scan()) == want
    db.close()
    assert len(s3_proxy.requests(action=action)) >= 10


def test_a_wal_cleanup_listing_that_fails_leaves_the_store_writable(s3_server, s3_proxy) -> None:
    # after a committed flush the WAL objects below its replay point are listed for deletion: a listing
    # that keeps failing leaves them for a later flush or `lsm gc`; the flush has succeeded
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=1)
    db.put(b"a", b"1", options=SYNC)
    prefix = url.split("/", 3)[3]
    s3_proxy.fail("500", method="GET", key=f"prefix={prefix}/wal/", count=None)
    db.flush()
    assert s3_proxy.requests(action="500")
    assert db.failure is None and len(db.manifest.l0) == 1
    db.put(b"b", b"2", options=SYNC)
    db.close()
    db = open_db(url, s3_server)
    assert (db.get(b"a"), db.get(b"b")) == (b"1", b"2")
    db.close()


def test_a_manifest_put_to_a_vanished_bucket_is_the_failed_state(s3_server, s3_proxy) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=1)
    db.put(b"a", b"1", options=SYNC)
    prefix = url.split("/", 3)[3]
    s3_proxy.fail("404", method="PUT", key="/manifest/", count=None)
    s3_proxy.fail("404", method="GET", key=f"prefix={prefix}/manifest/", count=None)
    with pytest.raises(lsm.DbFailedError) as e:
        db.flush()
    assert e.value.published is False and "/manifest/" in (e.value.file or "")
    assert db.get(b"a") == b"1"
    db.close()
    s3_proxy.heal()
    db = open_db(url, s3_server)
    assert db.get(b"a") == b"1"
    db.close()


def test_an_open_whose_manifest_put_is_unknown_raises_and_the_next_open_resolves_it(s3_server, s3_proxy) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server)
    db.put(b"a", b"1", options=SYNC)
    db.close()
    s3_proxy.unknowable("/manifest/", landed=True, method="PUT")  # the open's version (new epochs) lands
    with pytest.raises(OSError, match="manifest"):
        open_db(url, s3_server, s3_proxy, retries=1)
    landed = s3_proxy.requests("PUT", "/manifest/", "lost")[0].key.rsplit("/", 1)[1]
    s3_proxy.heal()
    db = open_db(url, s3_server, s3_proxy)
    assert db.get(b"a") == b"1"
    assert db.engine.versions.manifest_id > int(landed.split(".")[0])  # it read the landed version
    db.put(b"b", b"2", options=SYNC)
    db.close()


def test_a_manifest_prune_listing_that_fails_does_not_undo_the_commit(s3_server, s3_proxy) -> None:
    # every 16th commit prunes old manifest versions, which lists them: a listing that keeps failing
    # must leave the commit as it is, published and installed, its SSTs kept
    url = s3_server.new_url()
    db = open_db(url, s3_server, s3_proxy, retries=1)
    versions = db.engine.versions
    i = 0
    while versions.manifest_id % 16 != 15:
        db.put(b"k%d" % i, b"v")
        db.flush()
        i += 1
    db.put(b"last", b"v")
    prefix = url.split("/", 3)[3]
    s3_proxy.fail("500", method="GET", key=f"prefix={prefix}/manifest/", count=None)
    db.flush()
    assert s3_proxy.requests(action="500")
    assert versions.manifest_id % 16 == 0 and db.failure is None
    db.close()
    s3_proxy.heal()
    db = open_db(url, s3_server)
    assert db.get(b"last") == b"v" and all(db.get(b"k%d" % j) == b"v" for j in range(i))
    db.close()


def test_a_read_that_outlasts_the_retries_is_an_os_error_and_the_store_stays_writable(s3_server, s3_proxy) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server)
    for i in range(160):  # 400 KB: the first blocks lie outside the tail an SST's open fetches
        db.put(b"k%04d" % i, bytes([i % 251]) * 2500)
    db.close()
    db = open_db(url, s3_server, s3_proxy, retries=1)
    s3_proxy.fail("503", method="GET", key="/sst/", count=None)
    with pytest.raises(OSError, match="sst"):
        db.get(b"k0000")
    db.put(b"new", b"1", options=SYNC)
    assert db.failure is None
    s3_proxy.heal()
    assert db.get(b"k0000") == bytes([0]) * 2500
    db.close()


def test_a_compaction_read_that_outlasts_the_retries_is_the_failed_state(s3_server, s3_proxy) -> None:
    url = s3_server.new_url()
    db = open_db(url, s3_server)
    for i in range(3):
        db.put(b"k%d" % i, b"v%d" % i)
        db.flush()
    db.close()
    db = open_db(url, s3_server, s3_proxy, retries=1)
    s3_proxy.fail("500", method="GET", key="/sst/", count=None)
    with pytest.raises(lsm.DbFailedError):
        db.compact(full=True)
    with pytest.raises(lsm.DbFailedError):
        db.put(b"k9", b"v9")
    with pytest.raises(OSError, match="/sst/"):  # a read the store cannot answer names the object
        db.get(b"k1")
    s3_proxy.heal()
    assert db.get(b"k1") == b"v1"  # the failed handle reads again once the store answers
    db.close()
    db = open_db(url, s3_server)
    assert [db.get(b"k%d" % i) for i in range(3)] == [b"v0", b"v1", b"v2"]
    db.close()

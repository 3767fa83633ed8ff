"""Fencing: opening a path again fences the older handle; it gets FencedError, never a lost write.

What a fenced handle wrote before it was fenced is kept (the new handle replays its WAL); nothing it
tries after is visible, to the new handle or after a reopen, and it cannot damage the new handle's files.
On every backend; the races of a local directory's fencing protocol (the segment flock an open waits on,
the manifest's temporary file and link) on a directory only. An object store's own (WAL object claims,
the group commit's buffer) are in test_object_wal.py.
"""

from __future__ import annotations

import os
import threading

import pytest

import lsm
from lsm.events import EventListener
from storage.paths import open_store
from tests import _store
from tests.lsm._lsm_proc import Forks, Served

T0 = 1_700_000_000_000
SYNC = lsm.WriteOptions(sync=True)


def at_once(root: str) -> lsm.WriteOptions:
    """Write options under which a write reaches the store when it returns, so the next opener replays
    it and a fenced handle meets its fence: any write to a directory (its write(2) appends to the
    segment file), a sync one on an object store (an unsynced write waits in the handle's buffer for the
    group commit: test_object_wal.py)."""
    return lsm.WriteOptions(sync=not open_store(root).storage.appends)


def test_second_handle_fences_the_first(db_root, db_options):
    path, w = db_root, at_once(db_root)
    a = lsm.DB.open(path, db_options())
    a.put(b"before", b"a", options=w)
    a.write(lsm.WriteBatch().put(b"batch1", b"a").put(b"batch2", b"a"), w)
    b = lsm.DB.open(path, db_options())
    assert dict(b.scan()) == {b"batch1": b"a", b"batch2": b"a", b"before": b"a"}
    seq_a = a.seq
    # the first attempt is the one an object store learns the fence at (its WAL object's id is taken; an
    # unsynced write would wait in the buffer); on a directory each one meets it alone
    attempts = {
        "sync put": lambda: a.put(b"after", b"a", options=lsm.WriteOptions(sync=True)),
        "put": lambda: a.put(b"after", b"a"),
        "put ttl": lambda: a.put(b"after", b"a", ttl=5),
        "delete": lambda: a.delete(b"before"),
        "write": lambda: a.write(lsm.WriteBatch().put(b"after", b"a").delete(b"before")),
    }
    for name, attempt in attempts.items():
        with pytest.raises(lsm.FencedError, match="fenced") as ei:
            attempt()
        assert str(path) in str(ei.value), name
    # a directory's fence is read before a write takes its seq; an object store's sync put met it at its
    # WAL object, after its seq was taken (the commit comes before the wait for the object): none after
    assert a.seq == seq_a + (0 if open_store(path).storage.appends else 1)
    b.put(b"from_b", b"b")
    a.close()  # closing a fenced handle is quiet and commits nothing
    assert b.get(b"after") is None and b.get(b"before") == b"a"
    b.close()
    with lsm.DB.open(path, db_options()) as c:
        assert dict(c.scan()) == {b"batch1": b"a", b"batch2": b"a", b"before": b"a", b"from_b": b"b"}


@pytest.mark.parametrize("memtable", ["empty", "with rows"])
def test_fenced_flush_raises_and_touches_no_file(db_root, memtable, db_options):
    path = db_root
    a = lsm.DB.open(path, db_options())
    if memtable == "with rows":
        a.put(b"k", b"a", options=at_once(path))
    b = lsm.DB.open(path, db_options())
    # b's own WAL object is written now: one its group commit wrote after `before` would not be a's
    b.put(b"mine", b"b", options=at_once(path))
    b.flush()
    before = _store.files(path)
    manifest_ids = b.engine.versions.store.ids()
    appends = open_store(path).storage.appends
    if memtable == "empty" and not appends:
        # an object store's handle learns of the fence at its next write to the store, and a flush of
        # nothing writes nothing: the write after it is refused
        a.flush()
        with pytest.raises(lsm.FencedError):
            a.put(b"k2", b"a", options=SYNC)
    else:
        with pytest.raises(lsm.FencedError):
            a.flush()
    after = _store.files(path)
    if not appends:
        # an object store's flush meets the fence at its manifest commit, with its SST written; a fenced
        # handle deletes nothing (the deletion rule), so that SST, named with its own epoch, is left to
        # the owner's gc. A directory's fence is read before the flush writes anything.
        left = set(after["sst"]) - set(before["sst"])
        assert all(f"-e{a.engine.versions.writer_epoch}-" in n for n in left), left
        assert sorted(b.gc(grace_ms=0)) == sorted(left)
        after = _store.files(path)
    assert after == before
    assert b.engine.versions.store.ids() == manifest_ids
    # b's SSTs are intact and it keeps working
    b.put(b"more", b"b")
    b.flush()
    expected = {b"mine": b"b", b"more": b"b"} | ({b"k": b"a"} if memtable == "with rows" else {})
    assert dict(b.scan()) == expected
    a.close()
    b.close()
    with lsm.DB.open(path, db_options()) as c:
        assert dict(c.scan()) == expected


def test_flush_in_flight_when_fenced_cannot_clobber_the_new_handle(db_root, db_options):
    """The old handle's background flush was already running when the new handle opened.

    Both handles name SSTs from the same manifest counter; the old one must neither overwrite nor
    delete a file of the new one when its commit fails.
    """
    path = db_root
    release = threading.Event()
    started = threading.Event()

    class SlowFlush(EventListener):
        def on_flush_begin(self, info) -> None:  # runs in the flush thread, before the SST is written
            if not started.is_set():
                started.set()
                release.wait(10)

    a = lsm.DB.open(path, db_options(memtable_bytes=1024, event_listeners=[SlowFlush()]))
    i = 0
    while not a.lsm_shape()["immutable_memtables"]:  # until the first memtable is frozen
        a.put(b"a%04d" % i, b"x" * 64, options=at_once(path))
        i += 1
    assert started.wait(10)
    b = lsm.DB.open(path, db_options())  # replays a's segments, flushes them to its own L0 SST
    b_ssts = [e.name for e in b.manifest.l0]
    assert b_ssts
    release.set()
    with pytest.raises(lsm.FencedError):
        a.flush()  # surfaces the failed background flush (or the fence itself)
    assert set(b_ssts) <= set(_store.names(path, "sst"))
    expected = {b"a%04d" % j: b"x" * 64 for j in range(i)}
    b.flush()
    assert dict(b.scan()) == expected
    a.close()
    b.close()
    with lsm.DB.open(path, db_options()) as c:
        assert dict(c.scan()) == expected


def test_a_third_handle_fences_the_second(db_root, db_options):
    path = db_root
    a = lsm.DB.open(path, db_options())
    b = lsm.DB.open(path, db_options())
    b.put(b"k", b"b", options=at_once(path))
    c = lsm.DB.open(path, db_options())
    for h in (a, b):
        with pytest.raises(lsm.FencedError):
            h.put(b"k", b"stale", options=at_once(path))
    c.put(b"k2", b"c")
    for h in (a, b, c):
        h.close()
    with lsm.DB.open(path, db_options()) as d:
        assert dict(d.scan()) == {b"k": b"b", b"k2": b"c"}


def test_read_only_handle_does_not_fence(db_root, db_options):
    path = db_root
    a = lsm.DB.open(path, db_options())
    a.put(b"k", b"1", options=at_once(path))
    ro = lsm.DB.open(path, db_options(), read_only=True)
    assert ro.get(b"k") == b"1"
    with pytest.raises(lsm.ReadOnlyError):
        ro.put(b"k", b"2")
    a.put(b"k", b"2", options=at_once(path))  # still the writer
    ro.close()
    a.close()


def test_fenced_by_another_process(shared_root, db_options):
    path = shared_root
    a = lsm.DB.open(path, db_options())
    a.put(b"from_a", b"1", options=lsm.WriteOptions(sync=True))
    child = Served(path, T0)  # the child's open fences us
    try:
        assert child.call("get from_a") == "ok 1"
        with pytest.raises(lsm.FencedError):
            a.put(b"stale", b"1", options=at_once(path))
        with pytest.raises(lsm.FencedError):
            a.flush()
        assert child.call("put from_child 2") == "ok"
        assert child.call("get stale") == "ok <none>"
        assert child.call("flush") == "ok"
        assert child.call("close") == "ok"
    finally:
        child.kill()
    a.close()
    with lsm.DB.open(path, db_options()) as c:
        assert dict(c.scan()) == {b"from_a": b"1", b"from_child": b"2"}


def test_fencing_another_process(shared_root, db_options):
    path = shared_root
    child = Served(path, T0)
    try:
        assert child.call("put from_child 1") == "ok"
        b = lsm.DB.open(path, db_options())
        assert b.get(b"from_child") == b"1"
        assert child.call("put stale 2").startswith("err FencedError")
        assert child.call("flush").startswith("err FencedError")
        assert child.call("close") == "ok"
        b.put(b"from_b", b"3")
        b.close()
    finally:
        child.kill()
    with lsm.DB.open(path, db_options()) as c:
        assert dict(c.scan()) == {b"from_child": b"1", b"from_b": b"3"}


def test_racing_open_never_shows_a_fenced_write_and_keeps_every_acknowledged_one(tmp_path, db_options):
    """Issue 12 item 5: a second process opens the store while the first appends sync writes. A write that
    raised FencedError must never be visible; every acknowledged one must be. Many trials, real processes,
    the open racing the first writer's fence check and append (docs/architecture.md "Failure model").
    Each trial's writer is a process forked for it by one `forks` process (tests/lsm/_lsm_proc.py)."""
    fenced_writes = 0
    forks = Forks()
    try:
        for trial in range(25):
            path = tmp_path / f"db{trial}"
            lsm.DB.open(path, db_options()).close()
            forks.start("racer", path, 2048)
            early = [forks.readline()]
            assert early[0].startswith("A "), early[0] + forks.close()
            for _ in range(trial % 5):  # vary where in the writer's stream the open lands
                early.append(forks.readline())
            b = lsm.DB.open(path, lsm.DbOptions(background_compaction=False))
            rest, status = forks.rest()  # once this trial's writer has exited
            lines = early + [ln.decode() for ln in rest]
            assert status == 0, lines[-5:] + [forks.close()]
            acked = [ln.split()[1].encode() for ln in lines if ln.startswith("A ")]
            fenced = [ln.split()[1].encode() for ln in lines if ln.startswith("F ")]
            assert len(fenced) == 3, lines[-5:] + [forks.close()]
            fenced_writes += len(fenced)
            for handle in (b, None):
                db = handle or lsm.DB.open(path, lsm.DbOptions(background_compaction=False))
                try:
                    visible = {k for k, _ in db.scan()}
                    assert set(acked) <= visible, f"trial {trial}: acknowledged writes lost: {set(acked) - visible}"
                    assert not set(fenced) & visible, f"trial {trial}: FencedError writes visible: {set(fenced) & visible}"
                    assert visible == set(acked), f"trial {trial}: unexplained rows {visible - set(acked)}"
                finally:
                    db.close()
    finally:
        forks.close()
    assert fenced_writes == 75


class PausingClock:
    """A ManualClock whose next reading blocks until released: it holds a writer between its fence check
    and its WAL append (the clock is read in between), which is the window of issue 12 item 5."""

    def __init__(self, t: int) -> None:
        self.t = t
        self.pause = False
        self.reached = threading.Event()
        self.go = threading.Event()

    def now(self) -> int:
        if self.pause:
            self.pause = False
            self.reached.set()
            assert self.go.wait(30)
        return self.t


def test_an_open_waits_for_an_append_whose_fence_check_passed(tmp_path, db_options):
    """Deterministic form of the race: the writer has passed its fence check; the opener publishes its
    epoch and must then wait for the append (and replay it) instead of reading the segment under it."""
    path = tmp_path / "db"
    clock = PausingClock(T0)
    a = lsm.DB.open(path, db_options(clock))
    a.put(b"first", b"a")
    clock.pause = True
    result = {}
    writer = threading.Thread(target=lambda: result.setdefault("seq", a.put(b"raced", b"a")))
    writer.start()
    assert clock.reached.wait(30)  # the writer is between its fence check and its append
    opened = {}
    opener = threading.Thread(target=lambda: opened.setdefault("db", lsm.DB.open(path, db_options())))
    opener.start()
    opener.join(0.5)
    assert opener.is_alive(), "the open read the WAL while an append that passed its fence check was pending"
    clock.go.set()
    writer.join(30)
    opener.join(30)
    assert result["seq"] == 2  # reported as a success...
    b = opened["db"]
    assert b.get_entry(b"raced").seq == 2  # ...because the opener replayed it
    with pytest.raises(lsm.FencedError):
        a.put(b"late", b"a")
    a.close()
    b.close()
    with lsm.DB.open(path, db_options()) as c:
        assert dict(c.scan()) == {b"first": b"a", b"raced": b"a"}


def hold_first_link(monkeypatch, thread: str) -> tuple[threading.Event, threading.Event]:
    """Hold the first `fileio.link` made by the thread named `thread` (a manifest publication, just before
    its link) until the second event is set; the first is set once it is held."""
    from formats import fileio

    at_link, go = threading.Event(), threading.Event()
    real_link = fileio.link

    def held_link(src, dst):
        if threading.current_thread().name == thread and not at_link.is_set():
            at_link.set()
            assert go.wait(10)
        return real_link(src, dst)

    monkeypatch.setattr(fileio, "link", held_link)
    return at_link, go


def test_an_open_while_the_old_writer_links_its_manifest_fences_it(tmp_path, monkeypatch, db_options):
    """Issue 24 defect 4: the old handle's commit is paused just before it links its `manifest/.tmp-*`; a
    new owner opens (and removes leftover temporary files, that one included). The old link fails with
    ENOENT: the old handle is fenced (FencedError), not failed, and nothing of its commit is visible."""
    path = tmp_path / "db"
    a = lsm.DB.open(path, db_options(background_flush=False))  # the flush commits in the caller's thread
    a.put(b"k", b"a")
    at_link, go = hold_first_link(monkeypatch, "flusher-a")
    errors: list[BaseException] = []

    def flush_a() -> None:
        try:
            a.flush()
        except BaseException as e:  # noqa: BLE001 - checked below
            errors.append(e)

    t = threading.Thread(target=flush_a, name="flusher-a")
    t.start()
    assert at_link.wait(10)
    tmp = [n for n in os.listdir(path / "manifest") if n.startswith(".tmp-")]
    assert tmp  # a's version, written and fsynced, about to be linked
    b = lsm.DB.open(path, db_options())
    assert not (path / "manifest" / tmp[0]).exists()
    go.set()
    t.join(10)
    assert len(errors) == 1 and isinstance(errors[0], lsm.FencedError), errors
    assert a.failure is None or isinstance(a.failure, lsm.FencedError)
    assert b.get(b"k") == b"a"
    b.put(b"k2", b"b")
    a.close()
    b.close()
    with lsm.DB.open(path, db_options()) as c:
        assert dict(c.scan()) == {b"k": b"a", b"k2": b"b"}


def test_an_open_that_loses_the_race_to_another_open_retries(tmp_path, monkeypatch, db_options):
    """Two opens race: a's link of its bumped manifest is held; b publishes the same id, fencing, and
    removes a's temporary file. a's link fails with ENOENT: a lost the race (as with an existing file),
    reads b's version and opens above it, fencing b."""
    path = tmp_path / "db"
    with lsm.DB.open(path, db_options()) as db:
        db.put(b"k", b"1")
    at_link, go = hold_first_link(monkeypatch, "opener-a")
    opened: list = []

    def open_a() -> None:
        try:
            opened.append(lsm.DB.open(path, db_options()))
        except BaseException as e:  # noqa: BLE001 - checked below
            opened.append(e)

    t = threading.Thread(target=open_a, name="opener-a")
    t.start()
    assert at_link.wait(10)
    b = lsm.DB.open(path, db_options())
    go.set()
    t.join(10)
    assert len(opened) == 1 and isinstance(opened[0], lsm.DB), opened
    a = opened[0]
    assert a.engine.versions.writer_epoch > b.engine.versions.writer_epoch
    with pytest.raises(lsm.FencedError):
        b.put(b"k", b"b")
    a.put(b"k", b"a")
    b.close()
    a.close()
    with lsm.DB.open(path, db_options()) as c:
        assert c.get(b"k") == b"a"

"""Named after what they break: a handle fenced by a newer opener must destroy nothing, must never have a
write reported as not written that is there, nor one reported as written that is lost.

Each test is one interleaving that a hostile round of tests (or the simulation, tests/lsm/test_dst.py)
found: on a real backend where a real backend can show it (a local directory, moto's S3 server), else
scripted on the simulated object store, whose scheduler makes the interleaving exact.
"""

from __future__ import annotations

import pytest

import lsm
from lsm.events import EventListener
from storage import attach, detach, storage_for
from storage.objstore import ObjectStorage
from storage.simstore import NO_FAULTS, Fate, Faults, SimClient, SimTime, SimWorld
from tests.conftest import backend_root
from tests.lsm._dst import STORE_OPTIONS, SimClock, abandon

SYNC = lsm.WriteOptions(sync=True)


def _sst_names(db: lsm.DB) -> set[str]:
    d = db.engine.versions.sst_dir
    return {n for n in storage_for(d).list_names(d) if n.endswith(".sst")}


# -- a fenced handle destroys nothing ------------------------------------------------------------------
def test_a_fenced_handles_gc_deletes_nothing_and_raises(db_root):
    a = lsm.DB.open(db_root, lsm.DbOptions(background_compaction=False))
    a.put(b"old", b"1")
    a.flush()
    b = lsm.DB.open(db_root, lsm.DbOptions(background_compaction=False))  # fences a
    try:
        b.put(b"k", b"v", options=SYNC)
        b.flush()
        before = _sst_names(b)
        with pytest.raises(lsm.FencedError):
            a.gc(grace_ms=0)
        assert _sst_names(b) == before  # b's new SST (which a's manifest does not name) is still there
        assert b.get(b"k") == b"v" and b.get(b"old") == b"1"
    finally:
        a.close()
        b.close()
    with lsm.DB.open(db_root) as c:
        assert c.get(b"k") == b"v" and c.get(b"old") == b"1"


def test_a_fenced_handle_leaves_its_retired_files_to_the_owner(db_root):
    """A fenced handle whose compaction commit fails keeps nothing and deletes nothing of the owner's;
    the files it wrote are the owner's gc's to remove (they are named by no manifest)."""
    opts = lsm.DbOptions(background_compaction=False, l0_compaction_threshold=2)
    a = lsm.DB.open(db_root, opts)
    for i in range(3):
        a.put(b"k%d" % i, b"v")
        a.flush()
    b = lsm.DB.open(db_root, opts)
    try:
        live = {e.name for e in b.manifest.all_ssts()}
        with pytest.raises(lsm.FencedError):
            a.compact(full=True)
        assert live <= _sst_names(b)
        assert [b.get(b"k%d" % i) for i in range(3)] == [b"v"] * 3
        assert b.gc(grace_ms=0) or True  # the owner may collect what a left
        assert live <= _sst_names(b)
    finally:
        a.close()
        b.close()


# -- a write whose record is in never reads as "not written" -------------------------------------------
class _OpenOnFlush(EventListener):
    """Opens the store writable (fencing the writer) when the writer's flush begins: the takeover lands
    between a commit's WAL record and the flush its rotation runs."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.taker: lsm.DB | None = None

    def on_flush_begin(self, info) -> None:
        if self.taker is None:
            self.taker = lsm.DB.open(self.root, lsm.DbOptions(background_compaction=False))


def test_a_write_whose_rotation_is_fenced_is_reported_as_it_ends(db_root):
    """The flush a full memtable runs in the writing thread (background_flush=False) loses its manifest
    commit to a newer opener. Whether the write is there depends only on its WAL record: the opener
    replays a local segment (the write is there: it returns its seq, and the fence is raised by the
    next write; it used to raise FencedError from this one, a write every later reader then saw), while
    on an object store the record waits for its WAL object, whose id the opener claimed (FencedError,
    and it is absent). Either way: returned means there, raised means absent."""
    taker = _OpenOnFlush(db_root)
    # no group commit timer: on an object store the record waits for the object the sync write asks
    # for (a timer could write it before the opener's claim on a loaded machine, and the write would
    # then be there, returned: right, but not the interleaving this test is about)
    a = lsm.DB.open(db_root, lsm.DbOptions(background_flush=False, background_compaction=False,
                                            memtable_bytes=1024, event_listeners=[taker],
                                            wal_flush_interval_ms=None))
    try:
        try:
            told: object = a.put(b"big", b"x" * 2000, options=SYNC)
        except lsm.FencedError as e:
            told = e
        assert taker.taker is not None
        with pytest.raises(lsm.FencedError):
            a.put(b"after", b"y")
    finally:
        _close_quietly(a)
        taker.taker.close()
    with lsm.DB.open(db_root) as c:
        if "://" in db_root:
            assert isinstance(told, lsm.FencedError) and c.get(b"big") is None
        else:
            assert isinstance(told, int) and c.get(b"big") == b"x" * 2000
        assert c.get(b"after") is None


def _close_quietly(db: lsm.DB) -> None:
    try:
        db.close()
    except lsm.FencedError:
        pass


@pytest.fixture(params=["memory", pytest.param("s3", marks=pytest.mark.s3)])
def object_root(request: pytest.FixtureRequest, tmp_path) -> str:
    """A database root on each object store: the group commit's buffer is theirs (a directory's WAL
    appends every write when it is made)."""
    return backend_root(request.param, request, tmp_path)


def test_close_of_a_fenced_handle_says_its_buffered_writes_are_lost(object_root):
    """On an object store, writes acknowledged with sync=False wait in the WAL buffer; a handle fenced
    before it wrote them cannot: its close raises FencedError instead of returning as if they were kept."""
    a = lsm.DB.open(object_root, lsm.DbOptions(wal_flush_interval_ms=None, background_compaction=False))
    a.put(b"buffered", b"1")  # acknowledged, in the buffer
    b = lsm.DB.open(object_root, lsm.DbOptions(background_compaction=False))  # claims the next WAL id
    b.close()
    with pytest.raises(lsm.FencedError, match="1 WAL record"):
        a.close()
    assert a.closed
    with lsm.DB.open(object_root) as c:
        assert c.get(b"buffered") is None


def test_a_handle_that_wrote_everything_closes_quietly_even_when_fenced(object_root):
    a = lsm.DB.open(object_root, lsm.DbOptions(wal_flush_interval_ms=None, background_compaction=False))
    a.put(b"synced", b"1", options=SYNC)
    lsm.DB.open(object_root, lsm.DbOptions(background_compaction=False)).close()
    a.close()  # nothing it acknowledged is lost: no error
    with lsm.DB.open(object_root) as c:
        assert c.get(b"synced") == b"1"


# -- options that give the WAL no bound are refused -------------------------------------------------------
@pytest.mark.parametrize("bad", [{"timeout": "forever"}, {"timeout": "0s"}, {"retry_timeout_ms": -1},
                                 {"retry_timeout_ms": "5s"}])
def test_object_store_options_without_a_request_bound_are_refused(bad):
    with pytest.raises(ValueError, match="object_store_options"):
        lsm.DbOptions(object_store_options=bad)


def test_the_wal_grace_outlasts_a_request():
    from lsm.wal_object import CLOCK_MARGIN_MS, MIN_RECHECK_MS, wal_bound

    b = wal_bound(lsm.DbOptions(gc_grace_ms=1000))
    assert b.request_ms == 20_000 + 30_000 + 1_000  # retry window + one whole attempt + backoff
    assert b.grace_ms == b.request_ms + MIN_RECHECK_MS + CLOCK_MARGIN_MS
    assert b.recheck_ms >= MIN_RECHECK_MS and b.safe_ms == b.grace_ms - CLOCK_MARGIN_MS
    slow = wal_bound(lsm.DbOptions(object_store_options={"timeout": "2min", "retry_timeout_ms": 0}))
    assert slow.request_ms == 121_000 and slow.grace_ms > slow.request_ms
    assert wal_bound(lsm.DbOptions(gc_grace_ms=3_600_000)).grace_ms == 3_600_000


# -- scripted interleavings on the simulated object store ---------------------------------------------------
class _Sim:
    """One simulated store, its world and the handles opened on it (abandoned at the end)."""

    def __init__(self, name: str, script=None, faults: Faults = NO_FAULTS, **options) -> None:
        self.world = SimWorld(0, faults, script=script)
        self.root = f"sim://{name}/db"
        self.storage = attach(self.root, ObjectStorage(self.root, STORE_OPTIONS, client=SimClient(self.world),
                                                       clock=SimTime(self.world)))
        self.options = lsm.DbOptions(
            clock=SimClock(self.world), max_clock_skew_ms=None, background_flush=False, background_compaction=False,
            compaction_process=False, flush_process=False, wal_flush_interval_ms=None,
            object_store_options=dict(STORE_OPTIONS), **({"gc_grace_ms": 1000} | options))
        self.handles: list[lsm.DB] = []
        self.out: dict[str, object] = {}

    def open(self, **kw) -> lsm.DB:
        db = lsm.DB.open(self.root, self.options, **kw)
        self.handles.append(db)
        return db

    def outcome(self, name: str, fn) -> None:
        try:
            self.out[name] = fn()
        except Exception as e:  # noqa: BLE001 - what the call was told
            self.out[name] = e

    def final(self) -> lsm.DB:
        return self.open()

    def close(self) -> None:
        for db in self.handles:
            abandon(db)
        detach(self.root)


def _nth_wal_put(actor: str, n: int, fate: Fate):
    """A script giving `fate` to the `n`th PUT of a WAL object by `actor` (0: the claim of its open)."""
    seen = {"n": 0}

    def script(who: str, kind: str, key: str) -> Fate | None:
        if who == actor and kind == "put" and "/wal/" in key:
            seen["n"] += 1
            if seen["n"] == n + 1:
                return fate
        return None

    return script


def test_a_sync_write_held_in_flight_past_the_wal_grace_is_never_acknowledged_and_lost():
    """The issue's interleaving: A's WAL PUT is held 16 s; B opens at +1 s (claiming that id), flushes
    at +12.7 s and deletes the old WAL objects, its claim among them. The held PUT then creates the id.
    With the grace at max(gc_grace_ms, 10 s) A acknowledged the write and it was lost; the grace now
    outlasts any request the client lets return, so the claim is still there and A is fenced."""
    sim = _Sim("held-wal", script=_nth_wal_put("A", 1, Fate(hold_s=16.0)))
    try:
        def a() -> None:
            db = sim.open()
            sim.outcome("put", lambda: db.put(b"k", b"from A", options=SYNC))

        def b() -> None:
            db = sim.open()
            db.put(b"other", b"from B", options=SYNC)
            sim.world.sleep(11.5)
            db.flush()  # retires (and, past the grace, deletes) the WAL objects below its memtable
            db.close()

        sim.world.spawn("A", a, at=0.0)
        sim.world.spawn("B", b, at=1.0)
        sim.world.run()
        final = sim.final()
        got = final.get(b"k")
        if isinstance(sim.out["put"], int):
            assert got == b"from A", "acknowledged, then lost"
        else:
            assert isinstance(sim.out["put"], lsm.FencedError)
            assert got is None
        assert final.get(b"other") == b"from B"
    finally:
        sim.close()


def test_a_wal_put_that_outlives_the_grace_is_not_acknowledged():
    """A client that does not honour its own timeout (the simulated one is told to wait 600 s) lets a
    PUT return 300 s after it was sent: longer than the WAL grace allows, so the writer cannot know that
    a newer owner did not delete that id's claim meanwhile. The write fails (the failed state) instead of
    being acknowledged."""
    sim = _Sim("too-slow", script=_nth_wal_put("A", 1, Fate(hold_s=300.0)), faults=Faults(timeout_s=600.0))
    try:
        def a() -> None:
            db = sim.open()
            sim.outcome("put", lambda: db.put(b"k", b"v", options=SYNC))

        sim.world.spawn("A", a)
        sim.world.run()
        assert isinstance(sim.out["put"], lsm.DbFailedError)
        assert "proved it owned the store" in str(sim.out["put"])
    finally:
        sim.close()


def test_a_sync_write_flushed_before_its_wal_was_fenced_returns_its_seq():
    """A sync write fills the memtable, whose flush publishes the write's rows in an SST; its WAL PUT is
    held, and B opens and claims that id meanwhile. The PUT then fails as fenced, but the write is in
    the store: it must return its seq (it used to raise FencedError, a "not written" write that every
    reader then saw)."""
    sim = _Sim("flushed-sync", script=_nth_wal_put("A", 1, Fate(hold_s=5.0)), memtable_bytes=1024)
    try:
        def a() -> None:
            db = sim.open()
            sim.outcome("put", lambda: db.put(b"big", b"x" * 2000, options=SYNC))

        def b() -> None:
            sim.open().close()

        sim.world.spawn("A", a, at=0.0)
        sim.world.spawn("B", b, at=2.0)
        sim.world.run()
        assert isinstance(sim.out["put"], int), sim.out["put"]
        assert sim.final().get(b"big") == b"x" * 2000
    finally:
        sim.close()


def test_two_openers_never_share_an_epoch():
    """A's open bumps the manifest; its first attempt fails before landing and the retry is held while B
    bumps the same version to the same bytes. A's retry then finds "already exists" and reads back its
    own bytes: which are B's too. Taking them as its own gave two writers one epoch (and each other's
    SST names); the open now bumps again past them."""
    n = {"A": 0}

    def script(who: str, kind: str, key: str) -> Fate | None:
        if who == "A" and kind == "put" and "/manifest/" in key:  # A's first manifest PUT: its bump
            n["A"] += 1
            return Fate(fail=True) if n["A"] == 1 else Fate(hold_s=6.0) if n["A"] == 2 else None
        return None

    sim = _Sim("epochs", script=script)
    try:
        epochs: dict[str, int] = {}

        def opener(name: str) -> None:
            db = sim.open()
            epochs[name] = db.engine.versions.writer_epoch

        sim.world.spawn("seed", lambda: sim.open().close(), at=0.0)  # the store exists (manifest 1)
        sim.world.spawn("A", lambda: opener("A"), at=1.0)
        sim.world.spawn("B", lambda: opener("B"), at=1.5)
        sim.world.run()
        assert set(epochs) == {"A", "B"} and epochs["A"] != epochs["B"], epochs
    finally:
        sim.close()

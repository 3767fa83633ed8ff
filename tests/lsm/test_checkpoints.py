"""Checkpoints (lsm/checkpoints.py): a checkpoint reads exactly its state whatever the source does next,
keeps its files and manifest version from compaction, gc and pruning while it lives, and releases them
once deleted or expired. On every backend (tests/conftest.py: db_root, open_db)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import lsm
from storage.paths import open_store
from tests._store import names


def sst_names(root: str) -> list[str]:
    return names(root, "sst")

FAR = 10**12


@pytest.fixture
def db_defaults():
    # every checkpoint version must outlive many commits: keep only two manifest versions besides
    return {"history_retention": FAR, "manifest_history": 2, "l0_compaction_threshold": 2}


def visible(model: dict[bytes, tuple[bytes, int | None]], now: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) pairs of `model` a read at time `now` shows (a row expires after its expire_ts)."""
    return sorted((k, v) for k, (v, exp) in model.items() if exp is None or now <= exp)


def drive(db: lsm.DB, clock: lsm.ManualClock, rng: random.Random, model: dict, n: int) -> None:
    """`n` random writes (puts, some with a TTL, and deletes of 24 keys), applied to the model too."""
    for _ in range(n):
        clock.advance(rng.randint(1, 5))
        k = b"k%02d" % rng.randrange(24)
        if rng.random() < 0.25:
            db.delete(k)
            model.pop(k, None)
            continue
        v = b"v%d" % rng.randrange(10**6)
        ttl = rng.choice([None, None, 50, 400])
        db.put(k, v, ttl=ttl)
        model[k] = (v, None if ttl is None else clock.now() + ttl)


@pytest.mark.parametrize("seed", range(3))
def test_a_checkpoint_reads_exactly_its_state(open_db, db_root, db_options, seed):
    rng = random.Random(seed)
    clock = lsm.ManualClock(1_700_000_000_000)
    db = open_db(clock)
    model: dict[bytes, tuple[bytes, int | None]] = {}
    taken: list[tuple[lsm.Checkpoint, dict, int]] = []  # (checkpoint, its model, a time inside its history)
    for round_ in range(3):
        drive(db, clock, rng, model, rng.randint(20, 60))
        mid = clock.now()
        mid_model = dict(model)
        drive(db, clock, rng, model, rng.randint(5, 30))
        if rng.random() < 0.5:
            db.flush()
        cp = db.checkpoint(name=f"round {round_}")
        assert cp.seq == db.seq and cp.ts == clock.now() and cp.name == f"round {round_}"
        taken.append((cp, dict(model), mid, mid_model))
    # the source goes on: overwrites, deletes, TTL rows expire, full compaction, gc with no grace, reopen
    for _ in range(2):
        drive(db, clock, rng, model, 80)
        clock.advance(1000)  # every TTL row written so far has expired
        db.flush()
        db.compact(full=True)
        db.gc(grace_ms=0)
        db.close()
        db = open_db(clock)
        for k in list(model):
            db.delete(k)
        model.clear()
        db.flush()
        db.compact(full=True)
        db.gc(grace_ms=0)
    assert db.scan_entries() is not None and list(db.scan()) == []
    assert [c.id for c in db.checkpoints()] == [c.id for c, *_ in taken]
    for cp, state, mid, mid_state in taken:
        r = lsm.DB.open(db_root, db_options(clock), read_only=True, checkpoint=cp.id)
        try:
            assert r.seq == cp.seq
            assert list(r.scan(options=lsm.ReadOptions(now=cp.ts))) == visible(state, cp.ts)
            assert list(r.scan()) == visible(state, clock.now())  # expiry judged now, as any read
            shown = dict(visible(state, cp.ts))
            for k in state:
                assert r.get(k, lsm.ReadOptions(now=cp.ts)) == shown.get(k)
            # the seq<->time maps are the checkpoint's: an as-of read inside its history answers as then
            assert list(r.scan(as_of=mid, options=lsm.ReadOptions(now=mid))) == visible(mid_state, mid)
            with pytest.raises(lsm.NotYetCompleteError):
                r.snapshot_at(clock.now())  # after the checkpoint: not part of its state
            with pytest.raises(lsm.ReadOnlyError):
                r.put(b"x", b"y")
        finally:
            r.close()


def test_checkpoint_keeps_its_files_until_deleted(open_db, db_root, db_options):
    clock = lsm.ManualClock(1_700_000_000_000)
    db = open_db(clock)
    for i in range(50):
        db.put(b"a%03d" % i, b"x" * 100)
    cp = db.checkpoint()
    kept = set(sst_names(db_root))
    assert kept and kept <= {e.name for e in db.manifest.all_ssts()}
    for i in range(50):
        db.put(b"a%03d" % i, b"y" * 100)
    db.flush()
    db.compact(full=True)
    assert db.gc(grace_ms=0) == []
    assert kept <= set(sst_names(db_root))  # retired by the compaction, kept for the checkpoint
    db.delete_checkpoint(cp.id)
    assert not kept & set(sst_names(db_root))  # released at once: nothing else names them
    assert db.checkpoints() == []
    with pytest.raises(lsm.UnknownCheckpointError):
        lsm.DB.open(db_root, db_options(clock), read_only=True, checkpoint=cp.id)


def test_an_expired_checkpoint_releases_its_files(open_db, db_root, db_options):
    clock = lsm.ManualClock(1_700_000_000_000)
    db = open_db(clock)
    db.put(b"k", b"v1")
    cp = db.checkpoint(lifetime_ms=60_000, name="short")
    assert cp.expires_at == cp.ts + 60_000
    kept = set(sst_names(db_root))
    db.put(b"k", b"v2")
    db.flush()
    db.compact(full=True)
    db.gc(grace_ms=0)
    assert kept <= set(sst_names(db_root))
    clock.advance(59_999)
    with lsm.DB.open(db_root, db_options(clock), read_only=True, checkpoint=cp.id) as r:
        assert r.get(b"k") == b"v1"
    clock.advance(1)  # the store's clock reaches expires_at: released
    assert db.checkpoints() == []
    with pytest.raises(lsm.UnknownCheckpointError, match="expired"):
        lsm.DB.open(db_root, db_options(clock), read_only=True, checkpoint=cp.id)
    db.gc(grace_ms=0)
    assert not kept & set(sst_names(db_root))
    assert db.manifest.checkpoints == ()  # gc dropped the expired record from the manifest


def test_the_checkpoint_version_outlives_manifest_pruning(open_db, db_root, db_options):
    clock = lsm.ManualClock(1_700_000_000_000)
    db = open_db(clock)
    db.put(b"k", b"old")
    cp = db.checkpoint()
    for i in range(40):  # > 16 commits: the version set prunes to the newest `manifest_history`
        db.put(b"k", b"new%d" % i)
        db.flush()
    db.compact(full=True)
    db.close()
    db = open_db(clock)
    db.close()
    with lsm.DB.open(db_root, db_options(clock), read_only=True, checkpoint=cp.id) as r:
        assert r.get(b"k") == b"old"


def test_bad_checkpoint_requests(open_db, db_root, db_options):
    db = open_db()
    db.put(b"k", b"v")
    with pytest.raises(lsm.CheckpointError, match="read_only"):
        lsm.DB.open(db_root, db_options(), checkpoint="x")
    with pytest.raises(lsm.UnknownCheckpointError):
        lsm.DB.open(db_root, db_options(), read_only=True, checkpoint="no-such-id")
    with pytest.raises(lsm.UnknownCheckpointError):
        db.delete_checkpoint("no-such-id")
    for bad in (0, -5, 1.5, "10"):
        with pytest.raises(lsm.CheckpointError, match="lifetime"):
            db.checkpoint(lifetime_ms=bad)
    with pytest.raises(lsm.CheckpointError, match="name"):
        db.checkpoint(name=b"bytes")
    assert db.checkpoints() == [] and db.manifest.format_version == 1  # nothing was recorded
    db.close()
    with lsm.DB.open(db_root, db_options(), read_only=True) as r, pytest.raises(lsm.ReadOnlyError):
        r.checkpoint()


@pytest.mark.s3
def test_opening_a_checkpoint_costs_no_more_gets_than_opening_the_store(s3_server, db_options):
    root = s3_server.new_url("db")
    opts = db_options(wal_flush_interval_ms=None)
    with lsm.DB.open(root, opts) as db:
        for i in range(200):
            db.put(b"k%04d" % i, b"v" * 50)
        cp = db.checkpoint()
        for i in range(200):
            db.put(b"k%04d" % i, b"w" * 50)
        db.flush()
        db.compact(full=True)
        db.put(b"tail", b"in the WAL")
        db.flush_wal()

    def gets(**kw) -> int:
        before = open_store(root).storage.stats()["get"]
        with lsm.DB.open(root, opts, read_only=True, **kw) as r:
            return r.object_store_stats()["get"] - before

    store, at_cp = gets(), gets(checkpoint=cp.id)
    assert at_cp <= store, (at_cp, store)
    with lsm.DB.open(root, opts, read_only=True, checkpoint=cp.id) as r:
        assert r.get(b"k0000") == b"v" * 50 and r.get(b"tail") is None


def test_check_counts_checkpoint_files_and_finds_them_gone(open_db, db_root):
    from tests._store import remove

    db = open_db()
    for i in range(30):
        db.put(b"k%02d" % i, b"a")
    db.checkpoint()
    kept = names(db_root, "sst")
    for i in range(30):
        db.put(b"k%02d" % i, b"b")
    db.flush()
    db.compact(full=True)
    db.gc(grace_ms=0)
    db.close()
    rep = lsm.inspect.check_database(db_root)
    assert not any("not referenced" in n for n in rep.notes), rep.notes  # kept, not garbage
    assert any(f"keep {len(kept)} SST" in n for n in rep.notes), rep.notes
    remove(db_root, "sst", kept[0])
    with pytest.raises(lsm.inspect.CheckError, match="checkpoint .* is gone"):
        lsm.inspect.check_database(db_root)


@pytest.mark.slow  # a writer process, SIGKILLed
def test_a_checkpoint_outlives_a_killed_writer(shared_root, monkeypatch):
    """kill -9 of a writer that keeps writing and flushing after the checkpoint, then recovery, a full
    compaction and gc with no grace: the checkpoint reads what it named."""
    import os
    import signal

    from tests.lsm._lsm_proc import spawn

    # the child imports this checkout's lsm (its script's own directory comes first on its path)
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    opts = lsm.DbOptions(background_compaction=False)
    with lsm.DB.open(shared_root, opts) as db:
        for i in range(100):
            db.put(b"00000000-%02d" % (i % 50), b"before-%d" % i)
        cp = db.checkpoint(name="before the crash")
        state = list(db.scan())
    child = spawn("writer", shared_root, 5, 65536)
    try:
        for _ in range(300):  # acknowledged batches, some memtable flushes among them
            assert child.stdout.readline().startswith("A "), child.stderr.read()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        for f in (child.stdin, child.stdout, child.stderr):
            f.close()
    with lsm.DB.open(shared_root, opts) as db:  # recovery of the killed writer's WAL
        assert db.get(b"last") is not None
        db.compact(full=True)
        db.gc(grace_ms=0)
    with lsm.DB.open(shared_root, opts, read_only=True, checkpoint=cp.id) as r:
        assert list(r.scan()) == state and r.seq == cp.seq


def test_a_checkpoint_answers_remaps_as_of_itself(open_db, db_root, db_options, tmp_path):
    from lsm.sources import LogWriter, PartitionedLog

    clock = lsm.ManualClock(1_700_000_000_000)
    db = open_db(clock)
    w = LogWriter(str(tmp_path / "log"))
    try:
        for i in range(5):
            w.append(0, b"k%d" % i, b"v%d" % i)
        w.flush()
        db.ingest(PartitionedLog(str(tmp_path / "log")), name="events")
        clock.advance(1000)
        then = db.remap("events")
        cp = db.checkpoint()
        clock.advance(1000)
        for i in range(5, 9):
            w.append(0, b"k%d" % i, b"v%d" % i)
        w.flush()
        db.ingest(PartitionedLog(str(tmp_path / "log")), name="events")
        db.flush()
        db.compact(full=True)
        db.gc(grace_ms=0)
        assert db.remap("events").frontier == {0: 9}
    finally:
        w.close()
    with lsm.DB.open(db_root, db_options(clock), read_only=True, checkpoint=cp.id) as r:
        got = r.remap("events")
        assert got.frontier == {0: 5} == then.frontier
        assert got.bindings() == then.bindings()
        assert r.get(b"k4") == b"v4" and r.get(b"k5") is None

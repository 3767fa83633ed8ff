"""Clones (lsm/clone.py): a writable store starting from a checkpoint of another, sharing its SSTs
without copying them on an object store (hard links between directories); neither sees the other's
later writes, and the source's compaction and gc never break the clone. On every backend."""

from __future__ import annotations

import os
import random

import pytest

import lsm
from storage.paths import open_store
from tests._store import names

T = 1_700_000_000_000


@pytest.fixture
def db_defaults():
    return {"l0_compaction_threshold": 2, "manifest_history": 2}


def fill(db: lsm.DB, model: dict, rng: random.Random, n: int, tag: bytes) -> None:
    for _ in range(n):
        k = b"k%03d" % rng.randrange(60)
        if rng.random() < 0.2:
            db.delete(k)
            model.pop(k, None)
        else:
            v = tag + b"%d" % rng.randrange(10**6)
            db.put(k, v)
            model[k] = v


def churn(db: lsm.DB, model: dict, rng: random.Random, tag: bytes) -> None:
    """Writes, a full compaction and a gc with no grace: what must not disturb the other store."""
    fill(db, model, rng, 150, tag)
    db.flush()
    db.compact(full=True)
    db.gc(grace_ms=0)


@pytest.mark.parametrize("seed", range(2))
def test_a_clone_and_its_source_go_their_own_ways(open_db, db_root, new_root, db_options, seed):
    rng = random.Random(seed)
    src = open_db(lsm.ManualClock(T))
    src_model: dict[bytes, bytes] = {}
    fill(src, src_model, rng, 200, b"s")
    if seed:
        src.flush()  # a clone of flushed and of unflushed rows alike: the checkpoint flushes
    dst = new_root("clone")
    clone = lsm.DB.clone(src, dst, options=db_options(lsm.ManualClock(T)))
    clone_model = dict(src_model)
    assert clone.seq == src.seq
    churn(src, src_model, rng, b"s")
    churn(clone, clone_model, rng, b"c")
    assert list(src.scan()) == sorted(src_model.items())
    assert list(clone.scan()) == sorted(clone_model.items())
    # a clone of the clone, then every store goes on, reopens, compacts and collects
    dst2 = new_root("clone2")
    clone2 = lsm.DB.clone(clone, dst2, options=db_options(lsm.ManualClock(T)))
    clone2_model = dict(clone_model)
    stores = [(src, db_root, src_model, b"s"), (clone, dst, clone_model, b"c"), (clone2, dst2, clone2_model, b"d")]
    for i, (db, root, model, tag) in enumerate(stores):
        churn(db, model, rng, tag)
        db.close()
        db = open_db(lsm.ManualClock(T), path=root)
        churn(db, model, rng, tag)
        stores[i] = (db, root, model, tag)
    for db, root, model, _tag in stores:
        assert list(db.scan()) == sorted(model.items()), root
        for k in list(model)[:10]:
            assert db.get(k) == model[k]
    for db, root, _model, _tag in stores:
        db.close()
        assert lsm.inspect.check_database(root).ssts > 0, root  # raises on any problem


def test_clone_of_a_checkpoint_by_id(open_db, db_root, new_root, db_options):
    src = open_db()
    src.put(b"k", b"then")
    cp = src.checkpoint()
    src.put(b"k", b"now")
    src.flush()
    src.compact(full=True)
    src.gc(grace_ms=0)
    src.close()
    with lsm.DB.clone(db_root, new_root("c"), checkpoint=cp.id, options=db_options()) as c:
        assert c.get(b"k") == b"then" and c.seq == cp.seq
    with lsm.DB.open(db_root, db_options(), read_only=True) as r:
        assert cp.id in [x.id for x in r.checkpoints()]  # the user's checkpoint, left as it was


def test_a_clone_of_a_checkpoint_outlives_the_checkpoint(open_db, db_root, new_root, db_options):
    """The caller's checkpoint is the caller's: deleting it leaves the clone whole, and the clone's gc
    letting go of what it held leaves the checkpoint (the deterministic simulation found both)."""
    src = open_db()
    for i in range(30):
        src.put(b"k%02d" % i, b"then")
    cp = src.checkpoint()
    clone = lsm.DB.clone(src, new_root("c"), checkpoint=cp.id, options=db_options())
    src.delete_checkpoint(cp.id)
    for i in range(30):
        src.put(b"k%02d" % i, b"now")
    src.flush()
    src.compact(full=True)
    src.gc(grace_ms=0)
    assert [v for _k, v in clone.scan()] == [b"then"] * 30
    first = [x.checkpoint_id for x in clone.manifest.external]  # its own hold (none with hard links)
    clone.close()
    with lsm.DB.open(clone.path, db_options()) as c:
        assert [v for _k, v in c.scan()] == [b"then"] * 30
    keep = src.checkpoint(name="the user's")
    with lsm.DB.clone(src, new_root("c2"), checkpoint=keep.id, options=db_options()) as c:
        for i in range(30):
            c.put(b"k%02d" % i, b"mine")
        c.flush()
        c.compact(full=True)  # nothing of the source's is read any more: the clone lets go of its hold
        c.gc(grace_ms=0)
        assert c.manifest.external == ()
    src.put(b"poke", b"1")
    src.flush()  # the writer's next commit reads the version the clone's release published
    assert [x.id for x in src.checkpoints()] == first + [keep.id]  # the second clone let go of its own only
    with lsm.DB.open(db_root, db_options(), read_only=True, checkpoint=keep.id) as r:
        assert [v for _k, v in r.scan()] == [b"now"] * 30


def test_the_source_checkpoint_is_released_when_the_clone_no_longer_reads_it(open_db, db_root, new_root,
                                                                             db_options, backend):
    src = open_db()
    for i in range(50):
        src.put(b"k%02d" % i, b"x" * 100)
    clone = lsm.DB.clone(src, new_root("c"), options=db_options())
    held = [x.checkpoint_id for x in clone.manifest.external]
    if backend == "local":
        assert held == [] and src.checkpoints() == []  # hard links hold the bytes: nothing to keep
        first = src.manifest.all_ssts()[0].name
        a, b = src.sst_path(first), clone.sst_path(first)
        assert os.stat(a).st_ino == os.stat(b).st_ino
        return
    assert len(held) == 1 and [c.id for c in src.checkpoints()] == held
    for i in range(50):
        clone.put(b"k%02d" % i, b"y" * 100)
    clone.flush()
    clone.compact(full=True)  # the clone's own SSTs now hold every key: the source's are unread
    assert not {e.name for e in clone.manifest.all_ssts()} & set(clone.manifest.external[0].names)
    clone.gc(grace_ms=0)
    assert clone.manifest.external == ()
    src.put(b"poke", b"1")
    src.flush()  # the writer's next commit reads the version the clone's release published
    assert src.checkpoints() == []
    kept = set(names(db_root, "sst"))
    for i in range(50):
        src.put(b"k%02d" % i, b"z")
    src.flush()
    src.compact(full=True)
    src.gc(grace_ms=0)
    assert not kept & set(names(db_root, "sst")) - {e.name for e in src.manifest.all_ssts()}
    assert clone.get(b"k00") == b"y" * 100


def test_clone_refusals_write_nothing(open_db, db_root, new_root, db_options):
    src = open_db()
    src.put(b"k", b"v")
    other = new_root("other")
    lsm.DB.open(other, db_options()).close()
    with pytest.raises(lsm.CloneError, match="already holds a database"):
        lsm.DB.clone(src, other, options=db_options())
    with pytest.raises(lsm.CloneError, match="onto itself"):
        lsm.DB.clone(src, db_root, options=db_options())
    empty = new_root("empty")
    with pytest.raises(lsm.UnknownCheckpointError):
        lsm.DB.clone(db_root, empty, checkpoint="nope", options=db_options())
    assert names(empty, "manifest") == [] and names(empty, "sst") == []
    assert src.checkpoints() == [] and src.get(b"k") == b"v"


@pytest.mark.s3
def test_a_clone_on_s3_copies_no_sst(s3_server, db_options):
    src_root, dst_root = s3_server.new_url("src"), s3_server.new_url("dst")
    opts = db_options(wal_flush_interval_ms=None, memtable_bytes=1 << 18)
    with lsm.DB.open(src_root, opts) as src:
        for i in range(20_000):
            src.put(b"k%06d" % i, b"v" * 40)
        src.flush()
        n_src = len(src.manifest.all_ssts())
        assert n_src > 2
        with lsm.DB.clone(src, dst_root, options=opts) as c:
            stats = c.object_store_stats()
            assert c.get(b"k012345") == b"v" * 40
            assert len(c.manifest.external[0].names) == n_src
    assert stats["put_sst"] == 0 and stats["put"] <= 5, stats
    assert names(dst_root, "sst") == []
    assert open_store(dst_root).storage.stats()["put_sst"] == 0

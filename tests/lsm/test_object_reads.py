"""Point reads of a database on an object store (obstore's memory store and moto's S3 server): what they
cost in GETs, with and without the local disk cache of SST ranges (DbOptions.object_cache_dir), and the
garbage collection of SST objects by listing and age. Request counts are an object store's: a directory
reads through its mapped files."""

from __future__ import annotations

import math
import os
import random
import time

import pytest

import lsm
from storage import storage_for
from storage.objcache import cache_for
from storage.objstore import READAHEAD_BYTES, TAIL_BYTES
from storage.ssts import open_sst
from tests import _store

ROUNDS = 4
KEYS = 150


@pytest.fixture(params=["memory", pytest.param("s3", marks=pytest.mark.s3)])
def backend(request: pytest.FixtureRequest) -> str:
    """This module's stores: the two object stores."""
    return request.param


def _options(**kw) -> lsm.DbOptions:
    # no background work: the only requests are the reads the test makes
    return lsm.DbOptions(background_compaction=False, l0_compaction_threshold=100, **kw)


def _key(r: int, i: int) -> bytes:
    return b"k%d-%04d" % (r, i)


def _write_ssts(url: str, **kw) -> dict[bytes, bytes]:
    """ROUNDS L0 SSTs of KEYS keys each, in disjoint key ranges; returns the contents. Values are 4 KB
    of noise, so an SST (~600 KB) is larger than the tail its open reads (its first half is not in it)."""
    model = {}
    rng = random.Random(7)
    with lsm.DB.open(url, _options(**kw)) as db:
        for r in range(ROUNDS):
            for i in range(KEYS):
                model[_key(r, i)] = v = b"value-%d-%d-" % (r, i) + rng.randbytes(4000)
                db.put(_key(r, i), v)
            db.flush()
        assert len(db.manifest.l0) == ROUNDS
    return model


def _gets(db: lsm.DB) -> int:
    return db.object_store_stats()["get"]


def test_a_cold_point_read_costs_at_most_one_get_per_sst_probed(db_root) -> None:
    model = _write_ssts(db_root)
    with lsm.DB.open(db_root, _options()) as db:  # every SST is opened here: tail, index and bloom
        readers = [open_sst(db.sst_path(e.name)) for e in db.manifest.l0]
        puts = db.object_store_stats()["put"]
        present = [_key(r, i) for r in range(ROUNDS) for i in range(0, KEYS, 7)]
        absent = [_key(r, i) + b"-absent" for r in range(ROUNDS) for i in range(3, KEYS, 11)]
        cold = 0
        for key in present + absent:
            # an SST is probed (a block read) when its key range covers the key and its bloom agrees
            probed = sum(1 for r in readers if r.info.first_key <= key <= r.info.last_key and r.may_contain(key))
            before = _gets(db)
            assert db.get(key) == model.get(key)
            cost = _gets(db) - before
            assert cost <= probed, (key, cost, probed)
            if key in model:
                # one GET for its block, even one the tail read at open held (a DB's reader keeps
                # none of the tail: what it reads again is the block cache's); the bloom, the index
                # and the footer cost nothing
                assert cost == 1, key
                cold += cost
        assert cold > len(present) // 3
        for r in readers:
            r.close()
        # a read of a block already read is free (the block cache)
        before = _gets(db)
        for key in present:
            assert db.get(key) == model[key]
        assert _gets(db) == before
        assert db.object_store_stats()["put"] == puts  # reads write nothing


def test_the_disk_cache_makes_a_reopened_stores_reads_free(db_root, tmp_path) -> None:
    cache_dir = str(tmp_path / "cache")
    model = _write_ssts(db_root)
    keys = sorted(model)[::5]
    with lsm.DB.open(db_root, _options(object_cache_dir=cache_dir)) as db:
        before = _gets(db)
        assert [db.get(k) for k in keys] == [model[k] for k in keys]
        assert _gets(db) > before  # cold: the blocks came from the store, and went to the disk cache
    assert os.listdir(cache_dir)
    with lsm.DB.open(db_root, _options(object_cache_dir=cache_dir)) as db:
        before = _gets(db)
        assert [db.get(k) for k in keys] == [model[k] for k in keys]
        assert _gets(db) == before  # every block was on the local disk
        missing = [k for k in sorted(model) if k not in keys][:1]
        assert [db.get(k) for k in missing] == [model[k] for k in missing]


def test_the_disk_cache_stays_under_its_bound(db_root, tmp_path) -> None:
    cache_dir = str(tmp_path / "cache")
    bound = 512 << 10  # less than the blocks the reads fetch (about 1.3 MB)
    model = _write_ssts(db_root)
    with lsm.DB.open(db_root, _options(object_cache_dir=cache_dir, object_cache_bytes=bound)) as db:
        for _ in range(2):
            for k in sorted(model):
                assert db.get(k) == model[k]
        assert sum(e.size for e in db.manifest.l0) > bound
    assert 0 < cache_for(cache_dir, bound).total_bytes() <= bound


def test_without_a_cache_dir_nothing_goes_to_the_cache(db_root, tmp_path) -> None:
    cache_dir = str(tmp_path / "cache")
    model = _write_ssts(db_root)
    with lsm.DB.open(db_root, _options(object_cache_dir=cache_dir)) as db:
        assert db.get(_key(0, 0)) == model[_key(0, 0)]
    cached = sorted(os.listdir(cache_dir))
    with lsm.DB.open(db_root, _options()) as db:  # this open takes the store's cache away
        assert [db.get(k) for k in sorted(model)] == [model[k] for k in sorted(model)]
    assert sorted(os.listdir(cache_dir)) == cached


def test_a_compaction_reads_its_inputs_a_mib_per_get(db_root, tmp_path) -> None:
    model = _write_ssts(db_root)
    cache_dir = tmp_path / "cache"
    # compaction in this process, so its requests are counted here
    with lsm.DB.open(db_root, _options(compaction_process=False, object_cache_dir=str(cache_dir))) as db:
        sizes = [e.size for e in db.manifest.l0]
        before = _gets(db)
        db.compact(full=True)
        gets = _gets(db) - before
        # per input: its tail at open, then what lies before the tail in reads of READAHEAD_BYTES
        # (block by block it was one GET per 4 KiB block: about 80 per input here); per output, the
        # tail its reader reads when the new version is installed
        outputs = len(db.manifest.all_ssts())
        assert gets <= sum(1 + math.ceil(max(0, n - TAIL_BYTES) / READAHEAD_BYTES) for n in sizes) + outputs
        assert len(db.manifest.l0) == 0
        assert os.listdir(cache_dir) == []  # inputs about to be deleted are not kept on local disk
        assert dict(db.scan()) == model


def test_gc_deletes_unreferenced_sst_objects_after_the_grace_period(db_root) -> None:
    # the S3 server keeps modification times in whole seconds; the memory store's are exact
    grace_s = 3 if db_root.startswith("s3://") else 1
    opts = _options(gc_grace_ms=int(grace_s * 1000))
    with lsm.DB.open(db_root, opts) as db:
        for r in range(3):
            for i in range(50):
                db.put(_key(r, i), b"v%d" % r)
            db.flush()
        st = storage_for(db_root)
        sst_dir = _store.store(db_root).paths.sst_dir
        some = db.manifest.l0[0].name
        leftover = _store.path(db_root, "sst", "00000000000000099999.sst")  # a failed job's output
        st.write_file(leftover, (st.read(db.sst_path(some)),))
        assert db.gc() == []  # the leftover is younger than gc_grace_ms
        db.compact(full=True)  # the inputs are retired (deleted once no reader pins them)
        live = {e.name for e in db.manifest.all_ssts()}
        assert len(live) == 1
        assert set(st.list_names(sst_dir)) == live | {os.path.basename(leftover)}
        time.sleep(grace_s + 0.2)
        before = db.object_store_stats()
        assert db.gc() == [os.path.basename(leftover)]
        after = db.object_store_stats()
        assert after["list"] > before["list"] and after["delete"] == before["delete"] + 1
        assert set(st.list_names(sst_dir)) == live  # listed by prefix: only the referenced object is left
        assert db.get(_key(2, 7)) == b"v2"
    with lsm.DB.open(db_root, opts) as db:
        assert len(list(db.scan())) == 150

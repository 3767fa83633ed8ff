"""The block cache (lsm/cache.py): bounded by charge, LRU order, and a second chance for blocks that
point reads used (those reads go through the reader's weak reference, not `LruCache.get`)."""

from __future__ import annotations

import gc

import pytest

import lsm
from lsm.cache import LruCache
from storage import storage_for
from storage.ssts import open_sst, write_sst

# The tests that read through a cache run on a directory and on the memory store, which reads an SST by
# the object store's ranges like S3: their reads miss a tiny cache on purpose, and on S3 each miss would
# be a GET, thousands a test, which add the HTTP time and nothing the memory store does not check
OBJECT_AND_FILE = pytest.mark.parametrize("backend", ["local", "memory"])


class Blk:
    """A cache value with the `touched` flag point reads set on a formats.sst block."""

    def __init__(self) -> None:
        self.touched = False


def sst_at(root: str) -> str:
    """Where a test's SST goes on the test's backend (a directory is made for it; an object store has none)."""
    storage_for(root).makedirs(root)
    return f"{root}/t.sst"


def test_least_recently_used_goes_first_and_the_bound_holds():
    c = LruCache(300)
    for k in "abc":
        c.put(k, Blk(), 100)
    assert c.get("a") is not None  # a is now the most recent
    c.put("d", Blk(), 100)
    assert c.get("b") is None and c.used == 300 and len(c) == 3
    assert all(c.get(k) is not None for k in "acd")
    c.put("big", Blk(), 301)  # larger than the whole cache: not cached, nothing evicted
    assert c.get("big") is None and len(c) == 3


def test_a_touched_block_gets_a_second_chance_then_goes():
    c = LruCache(300)
    blocks = {k: Blk() for k in "abc"}
    for k, b in blocks.items():
        c.put(k, b, 100)
    blocks["a"].touched = True  # a point read used it; the LRU order did not see that
    c.put("d", Blk(), 100)
    assert c.get("a") is blocks["a"] and not blocks["a"].touched
    assert c.get("b") is None and c.used == 300
    c.put("e", Blk(), 100)  # a was moved to the recent end by get("a"): c goes now
    assert c.get("c") is None and c.get("a") is blocks["a"]
    for k in list("ade"):  # all touched: one pass clears the flags, then the oldest goes
        c.get(k).touched = True
    c.put("f", Blk(), 100)
    assert c.used == 300 and len(c) == 3


@OBJECT_AND_FILE
def test_an_evicted_block_is_not_kept_alive_by_its_reader(db_root):
    rows = [(b"k%04d" % i, 1000 - i, 7, None, b"v" * 50) for i in range(400)]
    path = sst_at(db_root)
    info = write_sst(path, rows, block_bytes=256)
    cache = LruCache(4 * 1024)  # a few blocks of this file
    with open_sst(path, cache=cache) as r:
        for _ in range(2):
            assert [r.get(row[0]) for row in rows] == rows
        gc.collect()
        assert cache.used <= cache.capacity
        alive = sum(slot() is not None for slot in r._slots)
        assert 0 < alive <= len(cache) < info.num_blocks


@OBJECT_AND_FILE
def test_a_db_reads_the_same_through_a_tiny_block_cache(open_db):
    with open_db(lsm.ManualClock(1), block_cache_bytes=8 * 1024, block_bytes=256) as db:
        for i in range(2000):
            db.put(b"key%05d" % (i * 7 % 2000), b"value-%d" % i)
        with db.snapshot() as snap:
            for i in range(0, 2000, 3):
                db.put(b"key%05d" % i, b"new-%d" % i)
            db.flush()
            for _ in range(2):
                for i in range(2000):
                    k = b"key%05d" % (i * 7 % 2000)
                    assert snap.get(k) == b"value-%d" % i
                    assert db.get(k) == (b"new-%d" % (i * 7 % 2000) if (i * 7 % 2000) % 3 == 0 else b"value-%d" % i)
            assert [k for k, _ in db.scan()] == [b"key%05d" % i for i in range(2000)]


def test_grow_charges_an_entry_more_and_keeps_the_bound():
    c = LruCache(300)
    c.put("a", Blk(), 100)
    c.put("b", Blk(), 100)
    c.grow("a", 50)
    assert c.used == 250
    c.grow("gone", 1000)  # no longer cached: nothing to charge
    assert c.used == 250 and len(c) == 2
    c.grow("b", 100)  # over the bound: the least recently used entry goes
    assert c.get("a") is None and c.used == 200


@OBJECT_AND_FILE
def test_a_point_read_key_index_is_charged_to_its_block(db_root):
    from formats.sst import ROW_INDEX_BYTES

    rows = [(b"k%04d" % i, 1000 - i, 7, None, b"v" * 50) for i in range(400)]
    path = sst_at(db_root)
    write_sst(path, rows, block_bytes=256)
    cache = LruCache(1 << 20)
    with open_sst(path, cache=cache) as r:
        list(r)  # every block cached, no key index yet
        plain = cache.used
        for row in rows:
            assert r.get(row[0]) == row
        assert cache.used == plain + ROW_INDEX_BYTES * len(rows)

"""The point-read index over L0 (lsm.l0_index): what it maps, when it is built, and that gets through it
see exactly what they saw without it (snapshots included, whose version may sit in an older L0 file)."""

from __future__ import annotations

import random

import pytest

import lsm
from formats.sst import SstReader
from lsm.l0_index import L0Index
from storage.ssts import open_sst, write_sst

T0 = 1_700_000_000_000


def readers_of(tmp_path, files: list[list[tuple]]) -> list[SstReader]:
    """Readers of mapped files: the build rule counted in reads is theirs (an object store's index waits
    for cached blocks, the last test)."""
    out = []
    for i, rows in enumerate(files):
        path = tmp_path / f"{i}.sst"
        write_sst(path, rows)
        out.append(open_sst(str(path)))
    return out


def test_index_maps_each_key_to_the_newest_l0_file_that_holds_it_once_reads_pay_for_it(tmp_path):
    newest = [(b"a", 9, T0, None, b"a9"), (b"c", 8, T0, None, None)]  # a tombstone is a version too
    middle = [(b"a", 5, T0, None, b"a5"), (b"b", 4, T0, None, b"b4")]
    oldest = [(b"b", 2, T0, None, b"b2"), (b"d", 1, T0, None, b"d1")]
    readers = readers_of(tmp_path, [newest, middle, oldest])
    index = L0Index()
    rows = 6
    for _ in range(rows):  # as many reads as L0 rows: not worth building yet
        assert index.lookup(readers) is None
    assert index.lookup(readers) == {b"a": 0, b"c": 0, b"b": 1, b"d": 2}
    for r in readers:
        r.close()


def test_no_index_for_a_single_l0_file(tmp_path):
    readers = readers_of(tmp_path, [[(b"a", 1, T0, None, b"x")]])
    index = L0Index()
    assert all(index.lookup(readers) is None for _ in range(100))
    readers[0].close()


def test_gets_through_the_index_equal_the_model_at_the_head_and_at_snapshots(open_db):
    rng = random.Random(7)
    clock = lsm.ManualClock(T0)
    keys = [b"k%03d" % i for i in range(60)]
    model: dict[bytes, bytes | None] = {}
    snaps = []
    with open_db(clock, l0_compaction_threshold=50) as db:
        for round_ in range(6):  # six L0 files, keys overwritten and deleted across them
            for k in rng.sample(keys, 25):
                if rng.random() < 0.2:
                    db.delete(k)
                    model[k] = None
                else:
                    v = b"%s@%d" % (k, round_)
                    db.put(k, v)
                    model[k] = v
                clock.advance(1)
            db.flush()
            snaps.append((db.snapshot(), dict(model)))
        assert len(db.lsm_shape()["l0"]) == 6
        for _ in range(40):  # well past the L0 row count: the index is built and used
            for k in keys + [b"absent", b"k0005"]:
                assert db.get(k) == model.get(k)
        for snap, seen in snaps:
            for k in keys:
                assert snap.get(k) == seen.get(k)
            snap.close()


# the object stores' rule, their requests counted
@pytest.mark.parametrize("backend", ["memory", pytest.param("s3", marks=pytest.mark.s3)])
def test_on_an_object_store_the_index_is_built_only_from_cached_blocks_and_costs_no_request(db_root):
    from lsm.cache import LruCache
    from lsm.l0_index import OBJECT_CHECK_EVERY
    from storage import storage_for

    url = db_root
    st = storage_for(url)
    files = [[(b"k%04d" % i, 10 - f, T0, None, b"v" * 40) for i in range(f, 400, 3)] for f in range(3)]
    for f, rows in enumerate(files):
        write_sst(f"{url}/{f}.sst", rows, block_bytes=512)
    cache = LruCache(64 << 20)
    readers = [open_sst(f"{url}/{f}.sst", cache=cache, cache_id=f) for f in range(3)]
    index = L0Index()
    st.reset_stats()
    reads = 0
    while reads < 4 * OBJECT_CHECK_EVERY:  # past the threshold, but the blocks are not all cached
        assert index.lookup(readers) is None
        reads += 1
    assert st.stats()["get"] == 0  # looking never read a block
    for r in readers:  # what point reads do: every block loaded into the cache, a GET each
        for i in range(len(r.blocks)):
            r.key_index(i)
    assert all(r.all_cached() for r in readers)
    gets = st.stats()["get"]
    built = None
    for _ in range(OBJECT_CHECK_EVERY):
        built = index.lookup(readers)
        if built is not None:
            break
    assert built is not None and built[b"k0000"] == 0 and built[b"k0001"] == 1
    assert st.stats()["get"] == gets  # built from the cache: no request
    for r in readers:
        r.close()

"""Point reads' shortcuts give exactly what the general paths give: a block indexed as a point read
loads it into the engine's LRU while it has room (and searched, then indexed on its second read, once
the LRU is nearly full), the L0 index built early from cached key indexes, and `DB.get` (which skips
memtables that lack the key) against `get` with ReadOptions and `get_entry`."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from formats.row import FORMAT_V1
from formats.sst import ROW_INDEX_BYTES
from lsm.cache import LruCache
from lsm.l0_index import CACHED_BUILD_DIVISOR, L0Index
from storage import storage_for
from storage.ssts import open_sst, write_sst
from tests.formats.test_sst import expected_get, sst_rows

T0 = 1_700_000_000_000
EXAMPLES = itertools.count()  # names a fresh root for each example
# the property tests make a store an example and read it hundreds of times: on the directory and the
# memory store (the object store's reads); S3 would add only its HTTP time
FILE_AND_OBJECT = pytest.mark.parametrize("backend", ["local", "memory"])
SUPPRESS = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]


def sst_at(root: str, name: str = "t.sst") -> str:
    """Where a test's SST goes on the test's backend (a directory is made for it; an object store has none)."""
    storage_for(root).makedirs(root)
    return f"{root}/{name}"


@FILE_AND_OBJECT
@settings(max_examples=40, deadline=None, suppress_health_check=SUPPRESS)
@given(data=st.data(), room=st.booleans())
def test_point_reads_through_the_lru_match_the_model_with_and_without_room(new_root, data, room):
    rows = data.draw(sst_rows(FORMAT_V1))
    keys = sorted({r[0] for r in rows})
    probes = keys + [k + b"\x00" for k in keys] + [b"\x00", b"\xff" * 12]
    seqs = [None] + sorted({r[1] for r in rows})[:: max(1, len(rows) // 5)] + [0]
    path = sst_at(new_root(f"s{next(EXAMPLES)}"))
    write_sst(path, rows, block_bytes=64)
    cache = LruCache(1 << 20)
    if not room:  # nearly full: a block read once keeps no index
        cache.put("ballast", object(), (1 << 20) - 8)
    with open_sst(path, cache=cache) as r:
        for _ in range(3):
            for k in probes:
                for s in seqs:
                    assert r.get(k, s) == expected_get(rows, k, s), (k, s)


def test_a_block_a_point_read_loads_gets_its_index_at_once_while_the_lru_has_room(db_root):
    rows = [(b"k%04d" % i, 1000 - i, 7, None, b"v" * 50) for i in range(400)]
    path = sst_at(db_root)
    write_sst(path, rows, block_bytes=256)
    cache = LruCache(1 << 20)
    with open_sst(path, cache=cache) as r:
        assert r.get(rows[0][0]) == rows[0]
        blk = cache.get((r.cache_id, 0))
        assert blk.index is not None and rows[0][0] in blk.index  # indexed on its first read
        assert cache.used == len(blk.data) + 4 * len(blk.offsets) + 4 + (8 + ROW_INDEX_BYTES) * len(blk.offsets)
    tight = LruCache(1 << 20)
    tight.put("ballast", object(), (1 << 20) - 4096)
    with open_sst(path, cache=tight) as r:
        assert r.get(rows[0][0]) == rows[0]
        blk = tight.get((r.cache_id, 0))
        assert blk is not None and blk.index is None  # a nearly full cache: searched, not indexed
        assert r.get(rows[1][0]) == rows[1]
        assert blk.index is not None  # its second read builds it


def test_with_a_block_cache_the_l0_index_is_built_after_a_sixteenth_of_the_rows_in_reads(tmp_path):
    """Mapped files' rule (on an object store the index waits for every block to be cached instead:
    test_l0_index)."""
    files = []
    for f in range(3):
        rows = [(b"k%03d" % i, 1000 * (3 - f) - i, T0, None, b"v%d" % f) for i in range(f, 96, 3 - f)]
        write_sst(tmp_path / f"{f}.sst", rows, block_bytes=128, sync=False)
        files.append(rows)
    cache = LruCache(1 << 20)
    readers = [open_sst(tmp_path / f"{f}.sst", cache=cache, cache_id=f) for f in range(3)]
    index = L0Index()
    total = sum(len(rows) for rows in files)
    for _ in range(total // CACHED_BUILD_DIVISOR):
        assert index.lookup(readers) is None
    keys = index.lookup(readers)
    want: dict[bytes, int] = {}
    for j in range(2, -1, -1):
        want.update(dict.fromkeys((row[0] for row in files[j]), j))
    assert keys == want
    for r in readers:
        r.close()


@FILE_AND_OBJECT
@settings(max_examples=25, deadline=None, suppress_health_check=SUPPRESS)
@given(seed=st.integers(0, 2**32 - 1))
def test_get_equals_the_general_path_through_memtables_l0_and_runs(new_root, open_db, seed):
    rng = random.Random(seed)
    clock = lsm.ManualClock(T0)
    keys = [b"k%02d" % i for i in range(40)]
    with open_db(clock, path=new_root(f"db{next(EXAMPLES)}"), l0_compaction_threshold=8) as db:
        snap = None
        for round_ in range(5):
            for k in rng.sample(keys, 15):
                roll = rng.random()
                if roll < 0.2:
                    db.delete(k)
                elif roll < 0.4:
                    db.put(k, b"%s@%d" % (k, round_), ttl=rng.randint(1, 30))
                else:
                    db.put(k, b"%s@%d" % (k, round_))
                clock.advance(rng.randint(0, 3))
            if round_ == 2:
                snap = db.snapshot()
            if round_ < 4:
                db.flush()
            if round_ == 1:
                db.compact(full=True)  # rounds 0-1 in a run, 2-3 in two L0 files, 4 in the memtable
        shape = db.lsm_shape()
        assert len(shape["l0"]) == 2 and shape["runs"], shape
        for _ in range(3):
            for k in keys + [b"absent", b"k"]:
                got = db.get(k)
                assert got == db.get(k, lsm.ReadOptions())
                e = db.get_entry(k)
                assert got == (None if e is None else e.value)
            clock.advance(7)
        assert snap is not None
        snap.close()

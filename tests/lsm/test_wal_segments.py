"""lsm.wal_replay.live_segments: the one listing of the WAL segments not yet flushed (id >= the manifest's
wal_replay_from), which recovery, the history readers, `lsm check`/`lsm du` and the simulator share.
On every backend: a directory's segment files and an object store's WAL objects are listed alike."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from lsm.wal_replay import live_segments
from storage.paths import open_store, wal_ids
from tests import _store


def make_segments(root: str, ids) -> None:
    """Empty WAL segments (objects) `ids` at `root`, on its backend."""
    store = open_store(root)
    store.storage.makedirs(store.paths.wal_dir)  # a directory's; an object store has none to make
    for i in ids:
        store.storage.write_file(store.paths.wal(i), [b""])


def live(db_dir: str, replay_from: int) -> list[tuple[int, str]]:
    return live_segments(open_store(db_dir), replay_from)


def test_segments_from_the_replay_point_ascending(db_root):
    db_dir = db_root
    make_segments(db_dir, [12, 3, 7, 10, 1])
    for stray in ("notes.txt", "00000000000000000009.wal.tmp", "x0000000000000000005.wal"):
        _store.write(db_dir, "wal", stray, b"")
    paths = open_store(db_dir).paths
    assert live(db_dir, 7) == [(7, paths.wal(7)), (10, paths.wal(10)), (12, paths.wal(12))]
    assert [i for i, _ in live(db_dir, 1)] == [1, 3, 7, 10, 12]
    assert live(db_dir, 13) == []


def test_a_missing_wal_directory_has_no_segments(db_root):
    assert live(db_root, 1) == []


# a directory and memory:// (forty examples; the listing's S3 variant is the test above); a fresh root per
# example from the function-scoped `new_root`
@pytest.mark.parametrize("backend", ["local", "memory"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ids=st.sets(st.integers(1, 10**6), max_size=8), replay_from=st.integers(0, 10**6 + 1))
def test_exactly_the_segments_at_or_after_the_replay_point(new_root, ids, replay_from):
    d = new_root(f"db-{uuid.uuid4().hex[:8]}")
    make_segments(d, ids)
    got = live(d, replay_from)
    assert got == [(i, open_store(d).paths.wal(i)) for i in sorted(ids) if i >= replay_from]


def test_a_flushed_segment_is_not_live(open_db, db_root):
    """Against a database: after a flush only the segment of the new memtable is live, even while the
    flushed one is still on disk (it is kept below the replay point here by hand). The write is synced
    so that an object store's group commit has written the new memtable's first object."""
    path = db_root
    with open_db() as db:
        db.put(b"a", b"1")
        db.flush()
        db.put(b"b", b"2", options=lsm.WriteOptions(sync=True))
        replay_from = db.manifest.wal_replay_from
        make_segments(path, [replay_from - 1])  # a flushed segment its flush has not deleted yet
        assert [i for i, _ in live(path, replay_from)] == [replay_from]
        store = open_store(path)
        assert (replay_from - 1) in [i for i, _ in wal_ids(store.storage, store.paths)]

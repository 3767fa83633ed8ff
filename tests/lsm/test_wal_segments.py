"""lsm.wal.live_segments: the one listing of the WAL segments not yet flushed (id >= the manifest's
wal_replay_from), which recovery, the history readers, `lsm check`/`lsm du` and the simulator share."""

from __future__ import annotations

import os
import shutil

from hypothesis import given, settings
from hypothesis import strategies as st

from lsm import wal as wal_files
from tests.compaction._util import fast_tmp, open_db


def make_segments(wal_dir: str, ids) -> None:
    os.makedirs(wal_dir, exist_ok=True)
    for i in ids:
        with open(wal_files.segment_path(wal_dir, i), "wb"):
            pass


def test_segments_from_the_replay_point_ascending(tmp_path):
    wal_dir = str(tmp_path / "wal")
    make_segments(wal_dir, [12, 3, 7, 10, 1])
    for stray in ("notes.txt", "00000000000000000009.wal.tmp", "x0000000000000000005.wal"):
        (tmp_path / "wal" / stray).write_bytes(b"")
    assert wal_files.live_segments(wal_dir, 7) == [
        (7, wal_files.segment_path(wal_dir, 7)),
        (10, wal_files.segment_path(wal_dir, 10)),
        (12, wal_files.segment_path(wal_dir, 12)),
    ]
    assert [i for i, _ in wal_files.live_segments(wal_dir, 1)] == [1, 3, 7, 10, 12]
    assert wal_files.live_segments(wal_dir, 13) == []


def test_a_missing_wal_directory_has_no_segments(tmp_path):
    assert wal_files.live_segments(str(tmp_path / "absent"), 1) == []


@settings(max_examples=40, deadline=None)
@given(ids=st.sets(st.integers(1, 10**6), max_size=8), replay_from=st.integers(0, 10**6 + 1))
def test_exactly_the_segments_at_or_after_the_replay_point(ids, replay_from):
    d = fast_tmp("lsm-wal-segments-")
    try:
        wal_dir = os.path.join(d, "wal")
        make_segments(wal_dir, ids)
        got = wal_files.live_segments(wal_dir, replay_from)
        assert got == [(i, wal_files.segment_path(wal_dir, i)) for i in sorted(ids) if i >= replay_from]
    finally:
        shutil.rmtree(d)


def test_a_flushed_segment_is_not_live(tmp_path):
    """Against a database: after a flush only the segment of the new memtable is live, even while the
    flushed one is still on disk (it is kept below the replay point here by hand)."""
    path = str(tmp_path / "db")
    with open_db(path) as db:
        db.put(b"a", b"1")
        db.flush()
        db.put(b"b", b"2")
        wal_dir = os.path.join(path, "wal")
        replay_from = db.manifest.wal_replay_from
        make_segments(wal_dir, [replay_from - 1])  # a flushed segment its flush has not deleted yet
        live = wal_files.live_segments(wal_dir, replay_from)
        assert [i for i, _ in live] == [replay_from]
        assert (replay_from - 1) in [i for i, _ in wal_files.list_segments(wal_dir)]

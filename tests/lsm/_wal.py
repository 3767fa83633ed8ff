"""WAL segments (objects) of a database as tests look at them, through the store's own names and replay."""

from __future__ import annotations

from formats.wal import WalRecord
from lsm.wal_replay import read_segments
from storage.paths import open_store, wal_ids


def segments(db_path: str) -> list[tuple[int, str]]:
    """(id, path) of every WAL segment (object) the database at `db_path` holds, ascending."""
    store = open_store(db_path)
    return wal_ids(store.storage, store.paths)


def segment_path(db_path: str, segment_id: int) -> str:
    """The path of WAL segment `segment_id` of the database at `db_path`."""
    return open_store(db_path).paths.wal(segment_id)


def records(db_path: str, segment: str) -> tuple[list[WalRecord], int | None]:
    """The records of one segment and its torn tail offset (None when intact)."""
    store = open_store(db_path)
    (seg,) = read_segments(store, [(0, segment)])
    return seg.records, seg.torn

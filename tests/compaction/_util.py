"""Helpers shared by the compaction tests."""

from __future__ import annotations

import itertools
import os
import tempfile

import lsm
from formats.manifest import SstEntry
from formats.sst import SsTableInfo

_names = itertools.count()


def fake_sst(
    size: int = 100,
    *,
    created: int = 0,
    tombstones: int = 0,
    expiring: int = 0,
    name: str | None = None,
    oldest_row: int | None = None,
) -> SstEntry:
    """A manifest entry with made-up metadata, for scheduler tests that never open the file."""
    info = SsTableInfo(
        format_version=1,
        row_features=(0, 1, 2, 3),
        creation_timestamp=created,
        min_ts=created if oldest_row is None else oldest_row,
        max_ts=created,
        min_seq=1,
        max_seq=1,
        first_key=b"a",
        last_key=b"z",
        num_rows=10,
        num_tombstones=tombstones,
        num_expiring=expiring,
        min_expire_ts=None,
        max_expire_ts=None,
        num_blocks=1,
        data_size=size,
        index_offset=size,
        index_size=0,
        filter_offset=size,
        filter_size=0,
        file_size=size,
    )
    return SstEntry(name or f"p{next(_names):06d}.sst", info)


def fast_tmp(prefix: str) -> str:
    """A temp dir in /dev/shm when it is writable (databases there test ~10x faster), else the default."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def open_db(path, clock=None, **kw) -> lsm.DB:
    kw.setdefault("background_compaction", False)
    return lsm.DB.open(path, lsm.DbOptions(clock=clock or lsm.ManualClock(1_000), **kw))

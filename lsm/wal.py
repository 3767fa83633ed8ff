"""WAL segments on disk: ``wal/%020d.wal``, one per memtable, records as in `formats.wal`."""

from __future__ import annotations

import os

from formats.wal import WalRecord, decode_segment
from lsm.fsutil import fsync_dir, numbered_files, write_all

SUFFIX = ".wal"


def segment_path(wal_dir: str, segment_id: int) -> str:
    """The file of WAL segment `segment_id` in `wal_dir`."""
    return os.path.join(wal_dir, f"{segment_id:020d}{SUFFIX}")


def list_segments(wal_dir: str) -> list[tuple[int, str]]:
    """(segment id, path) of every WAL segment in `wal_dir`, ascending."""
    return numbered_files(wal_dir, SUFFIX)


def read_segment(path: str) -> tuple[list[WalRecord], int | None]:
    """Records of one segment and the offset of a torn tail (None when intact)."""
    with open(path, "rb") as f:
        buf = f.read()
    return decode_segment(buf, path)


class WalWriter:
    """Appends records to one segment. Each append is one write(2): it survives a killed process;
    `sync=True` also fsyncs, which makes it survive a machine crash."""

    def __init__(self, wal_dir: str, segment_id: int) -> None:
        self.segment_id = segment_id
        self.path = segment_path(wal_dir, segment_id)
        # O_EXCL: a segment belongs to exactly one handle; finding it already there means another
        # handle (the one that fenced us, or one we fenced) created it, and two writers must never
        # append to one file
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        fsync_dir(wal_dir)

    def append(self, record: bytes, sync: bool = False) -> None:
        """Append one encoded record with one write(2); fdatasync it too when `sync`."""
        n = os.write(self.fd, record)
        if n != len(record):  # a short write is rare: hand over the rest
            write_all(self.fd, record[n:])
        if sync:
            os.fdatasync(self.fd)

    def sync(self) -> None:
        """fdatasync everything appended so far."""
        os.fdatasync(self.fd)

    def close(self) -> None:
        """Close the segment file; idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

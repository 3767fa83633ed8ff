"""Snapshots: a pinned sequence number that reads go through."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from lsm.errors import ClosedError

if TYPE_CHECKING:
    from lsm.db import DB, Entry


class Snapshot:
    """Reads through a snapshot see the database as of `seq`, whatever is written or flushed later.

    Compaction keeps every version a live snapshot can read. TTL expiry is still judged by the clock at
    read time (a row can expire while a snapshot is open), as in RocksDB and SlateDB. Release with
    `close()` or a ``with`` block; until then old versions are kept on disk.
    """

    def __init__(self, db: DB, seq: int, read_ts: int | None = None) -> None:
        self._db = db
        self.seq = seq
        self.read_ts = read_ts  # as-of reads judge expiry at this time; None = the clock's now
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise ClosedError("snapshot is released")
        if self._db._closed:  # scans do not pass through the DB's own check
            raise ClosedError(f"{self._db.path}: DB is closed")

    def get(self, key: bytes) -> bytes | None:
        """The value of `key` as of the snapshot (None if absent, deleted or expired at its read time)."""
        self._check()
        e = self._db._get_entry(key, self.seq, False, self.read_ts)
        return None if e is None else e.value

    def get_entry(self, key: bytes, include_expired: bool = False) -> Entry | None:
        """The `lsm.Entry` of `key` as of the snapshot, or None; `include_expired` also returns a
        row whose TTL has passed."""
        self._check()
        return self._db._get_entry(key, self.seq, include_expired, self.read_ts)

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        reverse: bool = False,
        *,
        prefix: bytes | None = None,
        include_expired: bool = False,
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs as of the snapshot, in key order (descending with `reverse`); `end` is
        exclusive, `prefix` limits the keys, `include_expired` also yields rows whose TTL has passed."""
        self._check()
        return self._db._user_scan(start, end, reverse, prefix, self.seq, include_expired, self.read_ts, False)

    def close(self) -> None:
        """Release the snapshot (compaction may then drop the versions only it needed); idempotent."""
        if not self._closed:
            self._closed = True
            self._db._release_snapshot(self.seq)

    release = close

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"Snapshot(seq={self.seq})"

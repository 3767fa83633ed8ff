"""Snapshots: a pinned sequence number that reads go through.

A snapshot reads through the DB's public read path: ``db.get(key, ReadOptions(snapshot=snap))`` is
what `Snapshot.get` does, so the DB, a snapshot and a time-travel read share one code path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from lsm.options import ReadOptions

if TYPE_CHECKING:
    from lsm.db import DB, Entry


class Snapshot:
    """Reads through a snapshot see the database as of `seq`, whatever is written or flushed later.

    Compaction keeps every version a live snapshot can read. TTL expiry is still judged by the clock at
    read time (a row can expire while a snapshot is open), as in RocksDB and SlateDB, unless the snapshot
    has a `read_ts` (as-of snapshots judge expiry at their time). Release with `close()` or a ``with``
    block; until then old versions are kept on disk. Made by `DB.snapshot`, `DB.snapshot_at` and
    `DB.snapshot_at_seq`; `release(seq)` is the DB's unpin, called once by `close()`.
    """

    def __init__(
        self, db: DB, seq: int, read_ts: int | None = None, *, release: Callable[[int], None] | None = None
    ) -> None:
        self.db = db
        self.seq = seq
        self.read_ts = read_ts  # as-of reads judge expiry at this time; None = the clock's now
        self._release = release
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once the snapshot is released (its reads then raise ClosedError)."""
        return self._closed

    def _options(self, include_expired: bool) -> ReadOptions:
        return ReadOptions(include_expired=include_expired, snapshot=self)

    def get(self, key: bytes) -> bytes | None:
        """The value of `key` as of the snapshot (None if absent, deleted or expired at its read time)."""
        return self.db.get(key, self._options(False))

    def get_entry(self, key: bytes, include_expired: bool = False) -> Entry | None:
        """The `lsm.Entry` of `key` as of the snapshot, or None; `include_expired` also returns a
        row whose TTL has passed."""
        return self.db.get_entry(key, self._options(include_expired))

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
        return self.db.scan(start, end, reverse, prefix=prefix, options=self._options(include_expired))

    def scan_entries(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        reverse: bool = False,
        *,
        prefix: bytes | None = None,
        include_expired: bool = False,
    ) -> Iterator[Entry]:
        """Like `scan`, yielding `lsm.Entry` rows with their seq, ts and expire_ts."""
        return self.db.scan_entries(start, end, reverse, prefix=prefix, options=self._options(include_expired))

    def close(self) -> None:
        """Release the snapshot (compaction may then drop the versions only it needed); idempotent."""
        if not self._closed:
            self._closed = True
            if self._release is not None:
                self._release(self.seq)

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

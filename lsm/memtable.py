"""The memtable: recent writes in memory, every version kept, until a flush turns it into an L0 SST.

Point reads hit a dict (O(1)); ordered reads need sorted keys, kept in a SortedList that new keys join
lazily at the next ordered read (so a write costs a dict insert, not a sorted insert). Rows are the
`formats.row` tuples ``(key, seq, ts, expire_ts, value)``. A key with one version maps to its row
tuple; from the second version on, to a list of rows in commit order (oldest first) — most keys have
one version, and a list per key would double the objects every write creates.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from sortedcontainers import SortedList

ROW_OVERHEAD = 32  # bytes charged per row beyond key and value (roughly what an encoded row adds)


class Memtable:
    """The in-memory, sorted table of recent writes (every version of a key, newest first), backed
    by one WAL segment. Writers insert under the DB's commit order; readers see a consistent view."""

    def __init__(self, segment_id: int) -> None:
        self.segment_id = segment_id  # the WAL segment holding exactly this memtable's commits
        # the first WAL segment after this memtable's: replay starts there once it is flushed (an
        # object-store WAL is a run of objects per memtable, so the next one starts further on)
        self.next_segment_id = segment_id + 1
        self.data: dict[bytes, tuple | list[tuple]] = {}
        self._sorted = SortedList()
        # every key in insertion order; _pending[:_merged] are in _sorted. Writers only append (no lock:
        # a list append is atomic), an ordered read merges the rest under _lock (readers only)
        self._pending: list[bytes] = []
        self._merged = 0
        self._lock = threading.Lock()
        self.bytes = 0
        self.rows = 0
        self.max_seq = 0
        self.max_ts = 0
        self.min_ts = 0  # ts of the oldest row (0 while empty): the idle flush judges its age by it

    def add(self, row: tuple) -> None:
        """Add one version (O(1) amortized). The caller serializes writers."""
        key, seq, ts, _exp, value = row
        data = self.data
        versions = data.setdefault(key, row)
        if versions is row:  # a new key: visible to get() now, to ordered reads once in _pending
            self._pending.append(key)
        elif type(versions) is list:
            versions.append(row)
        else:
            data[key] = [versions, row]  # one atomic store: readers see one version or both
        if not self.rows:
            self.min_ts = ts
        self.bytes += len(key) + ROW_OVERHEAD + (len(value) if value is not None else 0)
        self.rows += 1
        # commits arrive in seq order with non-decreasing ts (the clock never goes back)
        self.max_seq = seq
        self.max_ts = ts

    def get(self, key: bytes, max_seq: int | None = None) -> tuple | None:
        """Newest version of `key` with seq <= max_seq. O(1) for the newest, O(versions) otherwise."""
        versions = self.data.get(key)
        if versions is None:
            return None
        if type(versions) is not list:
            return versions if max_seq is None or versions[1] <= max_seq else None
        if max_seq is None:
            return versions[-1]
        for row in reversed(versions):
            if row[1] <= max_seq:
                return row
        return None

    def keys(self, start: bytes | None = None, end: bytes | None = None) -> list[bytes]:
        """Sorted keys with start <= key < end, as a list (a stable copy while writes go on)."""
        with self._lock:
            pending = self._pending
            n = len(pending)  # keys appended after this are not in this read (their rows came later)
            if n > self._merged:
                self._sorted.update(pending[self._merged : n])
                self._merged = n
            return list(self._sorted.irange(start, end, inclusive=(True, False)))

    def iter(self, start: bytes | None = None, end: bytes | None = None, reverse: bool = False) -> Iterator[tuple]:
        """Every version in the range: keys ascending (descending if reverse), each key newest first."""
        keys = self.keys(start, end)
        if reverse:
            keys.reverse()
        data = self.data
        for k in keys:
            versions = data[k]
            if type(versions) is not list:
                yield versions
            else:
                yield from versions[::-1]

    def __len__(self) -> int:
        return self.rows

    def is_empty(self) -> bool:
        """True when no row was inserted."""
        return self.rows == 0

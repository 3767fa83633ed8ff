"""Incremental disk accounting: the byte classes of `lsm du`, kept up to date without a full scan.

`lsm du` (tools/cmd_db.py `space_usage`) merges every stored row — WAL rows past the manifest's
last_seq, L0 SSTs, sorted runs — and calls the first version of each key *live*, *expired* (past its
expire_ts) or *tombstone*, and every older version *shadowed*. Doing that at every sample would cost a
full read of the database per sample. `DiskAccount` gets the same numbers incrementally from what the
simulator knows anyway:

* the simulator issued every write, so it knows each key's newest seq (`on_write`, O(1));
* a stored row is the first version of its key exactly when its seq is the key's newest seq (a newer
  version is always stored until a compaction purges it, and a purge removes the older ones with it);
* each SST is read once, when a sample first sees it in the manifest (`sync`), and reduced to its row
  bytes and the keys whose newest version it held; an SST that a compaction replaced between two samples
  is never read at all. When an SST leaves the manifest its summary is subtracted;
* rows age from live to expired through a heap of expire_ts, popped as the clock passes them; rows that
  are pending purge (expired, or deleted) sit in sorted lists by expiry/delete time, so counting them
  and finding the oldest is a bisect.

Row sizes are du's: the encoded row plus its 4-byte offset slot in an SST, the encoded row in the WAL.
``disk_bytes`` is du's total ``size`` (SST files plus the WAL segments from the replay point).
"""

from __future__ import annotations

import heapq
import os
from collections import deque
from typing import Any

from sortedcontainers import SortedList

from formats.manifest import Manifest
from formats.sst import SstReader
from formats.wal import ROW_CODEC as WAL_ROW_CODEC
from lsm import wal as wal_files

LIVE, EXPIRED, TOMBSTONE = 0, 1, 2
CLASSES = ("live", "expired", "tombstone")
WAL = ""  # the location of rows still in the WAL (no SST has an empty name)
WAL_FIXED = 2 + WAL_ROW_CODEC.attrs.size


class DiskAccount:
    """Live / expired / tombstone / shadowed bytes and rows of one database, updated incrementally."""

    def __init__(self, db_path: str) -> None:
        self.sst_dir = os.path.join(db_path, "sst")
        self.wal_dir = os.path.join(db_path, "wal")
        self.newest: dict[bytes, int] = {}  # key -> seq of its newest write
        self.due: dict[bytes, int | None] = {}  # key -> expire_ts of its newest write (None: no TTL)
        # key -> (seq, location, size, class, expire_ts or None, tombstone ts or None) of its stored newest row
        self.stored: dict[bytes, tuple] = {}
        self.bytes = [0, 0, 0]
        self.rows = [0, 0, 0]
        self.total_bytes = 0  # every stored row, shadowed ones included
        self.total_rows = 0
        self.ssts: dict[str, tuple[int, int, list[bytes]]] = {}  # name -> (row bytes, rows, newest keys)
        self.ssts_read = 0
        self._wal: deque[tuple[int, bytes, int, int | None, bool]] = deque()  # (seq, key, size, exp, tomb)
        self._wal_counted = 0
        self._heap: list[tuple[int, bytes, int]] = []  # (expire_ts, key, seq) of rows stored as live
        self.pending_expired = SortedList()  # (expire_ts, seq) of stored newest rows with a TTL
        self.pending_deleted = SortedList()  # (ts, seq) of stored newest tombstones of deletes
        self.disk_bytes = 0

    # -- the simulator's writes ----------------------------------------------------------------------
    def on_write(self, key: bytes, seq: int, ts: int, exp: int | None, value_len: int | None) -> None:
        """A committed put (value_len = its value's length) or delete (value_len None). O(log n)."""
        self.newest[key] = seq
        self.due[key] = exp if value_len is not None else -ts - 1  # < 0: a delete at ts
        s = self.stored.pop(key, None)
        if s is not None:
            self._drop(s)
        tomb = value_len is None
        self._wal.append((seq, key, WAL_FIXED + len(key) + (0 if tomb else value_len), exp, tomb))

    # -- samples -------------------------------------------------------------------------------------
    def sync(self, m: Manifest, now: int) -> None:
        """Bring the classes up to the manifest `m` and the clock `now` (call at each sample)."""
        entries = {e.name: e for e in m.all_ssts()}
        for name in [n for n in self.ssts if n not in entries]:
            nbytes, nrows, keys = self.ssts.pop(name)
            self.total_bytes -= nbytes
            self.total_rows -= nrows
            stored = self.stored
            for k in keys:
                s = stored.get(k)
                if s is not None and s[1] == name:
                    del stored[k]
                    self._drop(s)
        self._sync_wal(m.last_seq, now)
        for name in entries:
            if name not in self.ssts:
                self._add_sst(name, now)
        self._age(now)
        wal_bytes = 0
        for sid, p in wal_files.list_segments(self.wal_dir):
            if sid >= m.wal_replay_from:
                try:
                    wal_bytes += os.path.getsize(p)
                except FileNotFoundError:
                    pass
        self.disk_bytes = wal_bytes + sum(e.size for e in entries.values())

    def _sync_wal(self, last_seq: int, now: int) -> None:
        wal, stored, newest = self._wal, self.stored, self.newest
        while wal and wal[0][0] <= last_seq:  # flushed: no longer WAL rows
            seq, key, size, _exp, _tomb = wal.popleft()
            if self._wal_counted:
                self._wal_counted -= 1
                self.total_bytes -= size
                self.total_rows -= 1
                s = stored.get(key)
                if s is not None and s[1] == WAL and s[0] == seq:
                    del stored[key]
                    self._drop(s)
        for i in range(self._wal_counted, len(wal)):
            seq, key, size, exp, tomb = wal[i]
            self.total_bytes += size
            self.total_rows += 1
            if newest.get(key) == seq:
                self._store(key, seq, WAL, size, exp, tomb, now)
        self._wal_counted = len(wal)

    def _add_sst(self, name: str, now: int) -> None:
        newest, store = self.newest, self._store
        nbytes = nrows = 0
        keys: list[bytes] = []
        with SstReader(os.path.join(self.sst_dir, name)) as r:
            fixed = 2 + r.codec.attrs.size + 4
            for key, seq, _ts, exp, value in r:
                size = fixed + len(key) + (len(value) if value is not None else 0)
                nbytes += size
                nrows += 1
                if newest.get(key) == seq:
                    keys.append(key)
                    store(key, seq, name, size, exp, value is None, now)
        self.ssts[name] = (nbytes, nrows, keys)
        self.total_bytes += nbytes
        self.total_rows += nrows
        self.ssts_read += 1

    def _store(
        self, key: bytes, seq: int, loc: str, size: int, exp: int | None, tomb: bool, now: int
    ) -> None:
        if tomb:
            cls = TOMBSTONE
        elif exp is not None and now > exp:
            cls = EXPIRED
        else:
            cls = LIVE
            if exp is not None:
                heapq.heappush(self._heap, (exp, key, seq))
        due = self.due[key]  # the newest write's: this row is it (perhaps as the TTL filter's tombstone)
        pexp = pdel = None
        if due is not None:
            if due >= 0:
                pexp = (due, seq)
                self.pending_expired.add(pexp)
            else:
                pdel = (-due - 1, seq)
                self.pending_deleted.add(pdel)
        self.stored[key] = (seq, loc, size, cls, pexp, pdel)
        self.bytes[cls] += size
        self.rows[cls] += 1

    def _drop(self, s: tuple) -> None:
        """Forget a stored newest row's class (it was shadowed by a write, or left the disk)."""
        self.bytes[s[3]] -= s[2]
        self.rows[s[3]] -= 1
        if s[4] is not None:
            self.pending_expired.remove(s[4])
        if s[5] is not None:
            self.pending_deleted.remove(s[5])

    def _age(self, now: int) -> None:
        heap, stored = self._heap, self.stored
        while heap and heap[0][0] < now:
            _exp, key, seq = heapq.heappop(heap)
            s = stored.get(key)
            if s is not None and s[0] == seq and s[3] == LIVE:
                stored[key] = (s[0], s[1], s[2], EXPIRED, s[4], s[5])
                self.bytes[LIVE] -= s[2]
                self.rows[LIVE] -= 1
                self.bytes[EXPIRED] += s[2]
                self.rows[EXPIRED] += 1

    # -- what a sample reports -----------------------------------------------------------------------
    def classes(self) -> dict[str, int]:
        """Bytes and rows by du class: {live,expired,tombstone,shadowed}_{bytes,rows}."""
        out: dict[str, int] = {}
        for i, c in enumerate(CLASSES):
            out[f"{c}_bytes"] = self.bytes[i]
            out[f"{c}_rows"] = self.rows[i]
        out["shadowed_bytes"] = self.total_bytes - sum(self.bytes)
        out["shadowed_rows"] = self.total_rows - sum(self.rows)
        return out

    def unpurged(self, now: int) -> dict[str, Any]:
        """Rows whose newest write expired (or was a delete) and that are still stored, in any form.

        ``oldest_*_ms``: how long ago the oldest of them expired (was deleted); None when there is none."""
        n_exp = self.pending_expired.bisect_left((now, -1))
        oldest_exp = now - self.pending_expired[0][0] if n_exp else None
        n_del = len(self.pending_deleted)
        oldest_del = now - self.pending_deleted[0][0] if n_del else None
        return {
            "unpurged_expired_rows": n_exp,
            "oldest_unpurged_expired_ms": oldest_exp,
            "unpurged_deleted_rows": n_del,
            "oldest_unpurged_delete_ms": oldest_del,
        }


__all__ = ["DiskAccount", "CLASSES"]

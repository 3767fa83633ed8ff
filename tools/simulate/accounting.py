"""Incremental disk accounting: the byte classes of `lsm du`, kept up to date without a full scan.

`lsm du` (`lsm.inspect.space_usage`) merges every stored row — WAL rows past the manifest's
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
* a compaction or flush moves rows: a newest row found in a new SST that is already counted elsewhere
  only changes location (and maybe size or class), so moving rows costs a dict update each;
* rows age from live to expired through a heap of expire_ts, popped as the clock passes them; the oldest
  row still stored after its expiry (or delete) is the top of a lazy heap whose stale entries (rows
  purged or shadowed since) are popped when met.

Row sizes are du's: the encoded row plus its 4-byte offset slot in an SST, the encoded row in the WAL.
``disk_bytes`` is du's total ``size`` (SST files plus the WAL segments from the replay point).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
from collections import deque
from typing import Any

from formats.manifest import Manifest, SstEntry
from formats.row import codec_for
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
        # key -> [seq, location, size, class, expire_ts] of its stored newest row
        self.stored: dict[bytes, list] = {}
        self.bytes = [0, 0, 0]
        self.rows = [0, 0, 0]
        # stored newest rows that are tombstones with an expire_ts: the TTL filter's, for expired rows
        self.ttl_tombstones = 0
        self.total_bytes = 0  # every stored row, shadowed ones included
        self.total_rows = 0
        self.ssts: dict[str, tuple[int, int, list[bytes]]] = {}  # name -> (row bytes, rows, newest keys)
        self.ssts_read = 0  # SSTs read row by row (the others came from the WAL rows they flushed)
        self._wal: deque[tuple] = deque()  # (seq, key, size, ts, exp, tomb) of rows not flushed yet
        self._wal_counted = 0
        self._aging: list[tuple[int, bytes, int]] = []  # (expire_ts, key, seq) of rows stored as live
        # lazy min-heaps of (expire_ts | delete ts, key, seq): an entry counts while that row is stored
        self._expired: list[tuple[int, bytes, int]] = []
        self._deleted: list[tuple[int, bytes, int]] = []
        self.disk_bytes = 0

    # -- the simulator's writes ----------------------------------------------------------------------
    def on_write(self, key: bytes, seq: int, ts: int, exp: int | None, value_len: int | None) -> None:
        """A committed put (value_len = its value's length) or delete (value_len None). O(1)."""
        self.newest[key] = seq
        s = self.stored.pop(key, None)
        if s is not None:  # its stored row is now an older version: shadowed
            self.bytes[s[3]] -= s[2]
            self.rows[s[3]] -= 1
            if s[3] == TOMBSTONE and s[4] is not None:
                self.ttl_tombstones -= 1
        if value_len is None:
            self._wal.append((seq, key, WAL_FIXED + len(key), ts, None, True))
        else:
            self._wal.append((seq, key, WAL_FIXED + len(key) + value_len, ts, exp, False))

    # -- samples -------------------------------------------------------------------------------------
    def sync(self, m: Manifest, now: int) -> None:
        """Bring the classes up to the manifest `m` and the clock `now` (call at each sample).

        New SSTs come first: a newest row found there that is already stored elsewhere (in the WAL, or
        in an SST this manifest dropped) moved, and only its location, size and class are updated. Then
        what left the disk (dropped SSTs, flushed WAL rows) and was not found again is forgotten: those
        rows were purged. A flush's L0 SST is taken from the flushed WAL rows instead of being read when
        they match its metadata exactly (row count, key and value bytes): a flush keeps the newest
        version of each key of the memtable and nothing else."""
        entries = {e.name: e for e in m.all_ssts()}
        flushed: list[tuple] = []
        wal = self._wal
        while wal and wal[0][0] <= m.last_seq:  # no longer WAL rows: in L0 SSTs, or purged since
            flushed.append(wal.popleft())
        counted = min(self._wal_counted, len(flushed))
        self._wal_counted -= counted
        l0 = {e.name for e in m.l0}
        for name, e in entries.items():
            if name not in self.ssts and not (name in l0 and flushed and self._add_flushed(e, flushed, now)):
                self._add_sst(name, now)
        stored = self.stored
        for name in [n for n in self.ssts if n not in entries]:
            nbytes, nrows, keys = self.ssts.pop(name)
            self.total_bytes -= nbytes
            self.total_rows -= nrows
            for k in keys:
                s = stored.get(k)
                if s is not None and s[1] == name:
                    del stored[k]
                    self._uncount(s)
        for row in flushed[:counted]:
            self.total_bytes -= row[2]
            self.total_rows -= 1
            s = stored.get(row[1])
            if s is not None and s[1] == WAL and s[0] == row[0]:  # not found in an SST: purged
                del stored[row[1]]
                self._uncount(s)
        self._count_wal(now)
        self._age(now)
        wal_bytes = 0
        for sid, p in wal_files.list_segments(self.wal_dir):
            if sid >= m.wal_replay_from:
                try:
                    wal_bytes += os.path.getsize(p)
                except FileNotFoundError:
                    pass
        self.disk_bytes = wal_bytes + sum(e.size for e in entries.values())

    def _count_wal(self, now: int) -> None:
        """Count the WAL rows written since the last sample (each is new: never counted anywhere)."""
        wal, newest_get, stored, byts, rows = self._wal, self.newest.get, self.stored, self.bytes, self.rows
        push = heapq.heappush
        nbytes = 0
        for seq, key, size, ts, exp, tomb in itertools.islice(wal, self._wal_counted, None):
            nbytes += size
            if newest_get(key) != seq:
                continue
            if tomb:  # a delete (WAL tombstones carry no expire_ts)
                cls = TOMBSTONE
                push(self._deleted, (ts, key, seq))
            elif exp is None:
                cls = LIVE
            elif now > exp:
                cls = EXPIRED
                push(self._expired, (exp, key, seq))
            else:
                cls = LIVE
                push(self._aging, (exp, key, seq))
            stored[key] = [seq, WAL, size, cls, exp]
            byts[cls] += size
            rows[cls] += 1
        self.total_bytes += nbytes
        self.total_rows += len(wal) - self._wal_counted
        self._wal_counted = len(wal)

    def _add_flushed(self, e: SstEntry, flushed: list, now: int) -> bool:
        """Account the L0 SST `e` from the flushed WAL rows of its seq range; False if they do not match."""
        info = e.info
        lo = bisect.bisect_left(flushed, (info.min_seq,))
        hi = bisect.bisect_right(flushed, (info.max_seq + 1,))
        last: dict[bytes, tuple] = {}
        for row in flushed[lo:hi]:
            last[row[1]] = row  # in seq order: the newest version of each key wins
        key_bytes = value_bytes = 0
        for _seq, key, size, _ts, _exp, tomb in last.values():
            key_bytes += len(key)
            value_bytes += 0 if tomb else size - WAL_FIXED - len(key)
        if (len(last), key_bytes, value_bytes) != (info.num_rows, info.key_bytes, info.value_bytes):
            return False
        fixed = 2 + codec_for(info.format_version, info.row_features).attrs.size + 4
        newest_get, stored_get, byts, name = self.newest.get, self.stored.get, self.bytes, e.name
        keys = []
        for seq, key, size, ts, exp, tomb in last.values():
            if newest_get(key) != seq:
                continue
            keys.append(key)
            size += fixed - WAL_FIXED
            s = stored_get(key)
            if s is not None and s[0] == seq:
                cls = TOMBSTONE if tomb else EXPIRED if exp is not None and now > exp else LIVE
                if s[3] == cls:
                    s[1] = name
                    byts[cls] += size - s[2]
                    s[2] = size
                    continue
            self._place(key, seq, name, size, ts, exp, tomb, now)
        nbytes = fixed * info.num_rows + info.key_bytes + info.value_bytes
        self.ssts[name] = (nbytes, info.num_rows, keys)
        self.total_bytes += nbytes
        self.total_rows += info.num_rows
        return True

    def _add_sst(self, name: str, now: int) -> None:
        newest_get, stored_get, place, byts = self.newest.get, self.stored.get, self._place, self.bytes
        keys: list[bytes] = []
        with SstReader(os.path.join(self.sst_dir, name)) as r:
            info = r.info
            fixed = 2 + r.codec.attrs.size + 4
            for i in range(len(r.blocks)):
                for key, seq, ts, exp, value in r.block_rows(i):
                    if newest_get(key) != seq:
                        continue  # an older version: shadowed
                    keys.append(key)
                    size = fixed + len(key) + (len(value) if value is not None else 0)
                    s = stored_get(key)
                    # the common case, inlined: a row that moved (a flush or a compaction), same class
                    if s is not None and s[0] == seq:
                        cls = (
                            TOMBSTONE if value is None else EXPIRED if exp is not None and now > exp else LIVE
                        )
                        if s[3] == cls:
                            s[1] = name
                            if s[2] != size:
                                byts[cls] += size - s[2]
                                s[2] = size
                            continue
                    place(key, seq, name, size, ts, exp, value is None, now)
        nbytes = fixed * info.num_rows + info.key_bytes + info.value_bytes  # du's sizes, from the metadata
        self.ssts[name] = (nbytes, info.num_rows, keys)
        self.total_bytes += nbytes
        self.total_rows += info.num_rows
        self.ssts_read += 1

    def _place(
        self, key: bytes, seq: int, loc: str, size: int, ts: int, exp: int | None, tomb: bool, now: int
    ) -> None:
        """The newest row of `key` is stored at `loc`: count it, or move it if it was stored elsewhere.

        What the row is waiting for comes from the row itself: a put with a TTL its expire_ts, a delete's
        tombstone its ts, the TTL filter's tombstone (which keeps the expire_ts) its expire_ts."""
        if tomb:
            cls = TOMBSTONE
        elif exp is not None and now > exp:
            cls = EXPIRED
        else:
            cls = LIVE
        s = self.stored.get(key)
        if s is not None and s[0] == seq:  # moved (flush or compaction)
            s[1] = loc
            if s[2] == size and s[3] == cls:
                return
            self._uncount(s)
            s[2], s[3], s[4] = size, cls, exp
            if cls == EXPIRED or (cls == TOMBSTONE and exp is not None):
                heapq.heappush(self._expired, (exp, key, seq))
        else:
            s = self.stored[key] = [seq, loc, size, cls, exp]
            if exp is None:
                if tomb:
                    heapq.heappush(self._deleted, (ts, key, seq))
            elif cls == LIVE:
                heapq.heappush(self._aging, (exp, key, seq))
            else:  # first seen already expired, or as the TTL filter's tombstone
                heapq.heappush(self._expired, (exp, key, seq))
        self.bytes[cls] += size
        self.rows[cls] += 1
        if cls == TOMBSTONE and exp is not None:
            self.ttl_tombstones += 1

    def _uncount(self, s: list) -> None:
        """Take a stored newest row out of its class (purged, or moving)."""
        self.bytes[s[3]] -= s[2]
        self.rows[s[3]] -= 1
        if s[3] == TOMBSTONE and s[4] is not None:
            self.ttl_tombstones -= 1

    def _age(self, now: int) -> None:
        heap, stored = self._aging, self.stored
        while heap and heap[0][0] < now:
            exp, key, seq = heapq.heappop(heap)
            s = stored.get(key)
            if s is not None and s[0] == seq and s[3] == LIVE:
                s[3] = EXPIRED
                self.bytes[LIVE] -= s[2]
                self.rows[LIVE] -= 1
                self.bytes[EXPIRED] += s[2]
                self.rows[EXPIRED] += 1
                heapq.heappush(self._expired, (exp, key, seq))

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
        """Rows whose newest write expired (or was a delete) and that are still stored, in any form (the
        TTL filter turns expired rows into tombstones before the oldest run drops them).

        ``oldest_*_ms``: how long ago the oldest of them expired (was deleted); None when there is none."""
        return {
            "unpurged_expired_rows": self.rows[EXPIRED] + self.ttl_tombstones,
            "oldest_unpurged_expired_ms": self._oldest(self._expired, now),
            "unpurged_deleted_rows": self.rows[TOMBSTONE] - self.ttl_tombstones,
            "oldest_unpurged_delete_ms": self._oldest(self._deleted, now),
        }

    def _oldest(self, heap: list[tuple[int, bytes, int]], now: int) -> int | None:
        stored = self.stored
        while heap:
            t, key, seq = heap[0]
            s = stored.get(key)
            if s is not None and s[0] == seq:
                return now - t
            heapq.heappop(heap)  # that row is gone (purged or shadowed)
        return None


__all__ = ["DiskAccount", "CLASSES"]

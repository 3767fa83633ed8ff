"""Incremental disk accounting: the byte classes of `lsm du`, kept up to date without a full scan.

`lsm du` (`lsm.inspect.space_usage`) merges every stored row — WAL rows past the manifest's
last_seq, L0 SSTs, sorted runs — and calls the first version of each key *live*, *expired* (past its
expire_ts) or *tombstone*, and every older version *shadowed*. Doing that at every sample would cost a
full read of the database per sample. `DiskAccount` gets the same numbers incrementally from what the
simulator knows anyway and from what the engine reports as it works (it is an `lsm.events` listener):

* the simulator issued every write, so it counts each row it wrote: the key's newest row, in the WAL
  (or already in an L0 SST, when a flush took it); the key's previous newest row, wherever it is, is
  now shadowed. The writes are noted as they commit (``writes``, one list append) and applied in one
  loop at the next flush, compaction or sample, in commit order;
* a flush (``on_flush_end``) moves the WAL rows up to the manifest's last_seq into its L0 SSTs: the
  newest ones change size (a WAL record's fixed part differs from an SST row's). No SST is read;
* a compaction (``on_compaction_end``) copies every row unchanged except those the engine lists in
  ``CompactionStats.changed_rows`` (``EventListener.wants_changed_rows``, counted in the merge): a
  newest row dropped (purged) leaves the account, a rewritten one (the TTL filter's tombstone, a user
  filter's change) changes class and size. No SST is read, except when an output's row layout differs
  from an input's (a TimeToLive column gained or lost): then that output is read once to resize the rows;
* rows age from live to expired as the clock passes their expire_ts: one queue per TTL (writes come in
  time order, so each queue's expire_ts ascend; a heap only for rows placed out of order), and the
  rows aged from a queue go, still in expire_ts order, to that TTL's queue of expired rows; the oldest
  row still stored after its expiry (or delete) is the first of those queues (or the top of a lazy
  heap, for the rows a compaction or recount placed) whose stale entries (rows purged or shadowed
  since) are popped when met;
* shadowed bytes are all stored bytes (each SST's from its metadata, the WAL's as written) minus the
  newest rows'.

Row sizes are du's: the encoded row plus its 4-byte offset slot in an SST, the encoded row in the WAL.
``disk_bytes`` is du's total ``size`` (SST files plus the WAL segments from the replay point).

A compaction whose executor reported nothing (``changed_rows`` None, a custom executor) is accounted by
reading every SST of the new manifest once. At the end of a run `verify` recounts every row from the
files once and raises `AccountingMismatch` if the incremental account drifted (`ssts_read` counts the
SSTs read, for any of these reasons).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
import time
from collections import deque
from collections.abc import Callable
from heapq import heappush
from typing import Any

from compaction.stream import cyclic_gc_paused
from formats.manifest import Manifest, SstEntry
from formats.row import codec_for
from formats.sst import SsTableInfo, SstReader
from formats.wal import ROW_CODEC as WAL_ROW_CODEC
from lsm import wal as wal_files
from lsm.events import CompactionInfo, EventListener, FlushInfo

LIVE, EXPIRED, TOMBSTONE = 0, 1, 2
CLASSES = ("live", "expired", "tombstone")
WAL_FIXED = 2 + WAL_ROW_CODEC.attrs.size  # a WAL record's bytes besides its key and value


class AccountingMismatch(RuntimeError):
    """`DiskAccount.verify` found the incremental account different from the files (a bug, not bad input)."""


def row_fixed(info: SsTableInfo) -> int:
    """An SST row's bytes besides its key and value (key length, attrs, value length, offset slot)."""
    return 2 + codec_for(info.format_version, info.row_features).attrs.size + 4


class DiskAccount(EventListener):
    """Live / expired / tombstone / shadowed bytes and rows of one database, updated incrementally.

    Give it to the DB as an event listener and `bind` the open DB before the first write."""

    wants_changed_rows = True

    def __init__(self, db_path: str) -> None:
        self.sst_dir = os.path.join(db_path, "sst")
        self.wal_dir = os.path.join(db_path, "wal")
        # key -> (seq, size, class, expire_ts) of its newest write, while that row is stored. Tuples of
        # atoms, replaced rather than changed: the garbage collector stops tracking them, where lists
        # (100k+ of them) made every full collection of the simulation walk the whole account
        self.stored: dict[bytes, tuple] = {}
        self.bytes = [0, 0, 0]
        self.rows = [0, 0, 0]
        # stored newest rows that are tombstones with an expire_ts: the TTL filter's, for expired rows
        self.ttl_tombstones = 0
        self.total_bytes = 0  # every stored row, shadowed ones included (as of the last sync)
        self.total_rows = 0
        self.ssts_read = 0  # SSTs read row by row (see the module docstring: rare)
        self._wal: deque = deque()  # seq, key, size of each row not flushed yet (flat)
        self._wal_bytes = 0
        self._sst_totals: dict[str, tuple[int, int]] = {}  # SST name -> (row bytes, rows), from metadata
        self._input_fixed: set[int] = set()  # row_fixed of the running compaction's inputs
        # The per-write structures below are flat (one item per field, no tuple per write): a tuple that
        # lives on counts towards the cyclic garbage collector's next pass, and three of them per write
        # made the collector run three times as often as the engine alone makes it run.
        # key, seq, ts, expire_ts, value_len (None: a delete) of each write not applied yet (`on_write`)
        self.writes: list = []
        self._aging: list[tuple[int, bytes, int]] = []  # (expire_ts, key, seq) of rows stored as live
        # the same for the simulator's writes, without a heap: per TTL (expire_ts - ts) the writes come in
        # time order, so their expire_ts ascend: a queue of expire_ts, key, seq popped from the left as
        # they age, and the queue of those aged (still in expire_ts order; stale entries popped lazily)
        self._aging_fifo: dict[int, tuple[deque, deque]] = {}
        # lazy min-heaps of (expire_ts | delete ts, key, seq): an entry counts while that row is stored
        self._expired: list[tuple[int, bytes, int]] = []
        self._deleted: list[tuple[int, bytes, int]] = []
        self.disk_bytes = 0
        self._flushed_seq = -1  # the last flush's last_seq: a noted write at or below it is in its SSTs
        self._flushed_fixed: Callable[[bytes], int] = lambda _key: WAL_FIXED
        self.event_cpu_s = 0.0  # CPU time spent in the flush and compaction events
        self._manifest: Callable[[], Manifest] | None = None

    def bind(self, manifest: Callable[[], Manifest]) -> None:
        """Where the events read the DB's current manifest from (e.g. ``lambda: db.manifest``)."""
        self._manifest = manifest

    # -- the simulator's writes ----------------------------------------------------------------------
    def on_write(self, key: bytes, seq: int, ts: int, exp: int | None, value_len: int | None) -> None:
        """A committed put (value_len = its value's length) or delete (value_len None). O(1): noted in
        `writes` (the simulator extends it with the same five items itself) and applied at the next
        flush, compaction or `sync`."""
        self.writes.extend((key, seq, ts, exp, value_len))

    def _apply_writes(self, last: int | None = None, fixed_of: Callable[[bytes], int] | None = None) -> None:
        """`_apply_noted` with the cyclic garbage collector paused: the loop makes tuples and no reference
        cycle, and the collector's passes it would trigger cost a quarter of its time."""
        if self.writes:
            with cyclic_gc_paused():
                self._apply_noted(last, fixed_of)

    def _apply_noted(self, last: int | None, fixed_of: Callable[[bytes], int] | None) -> None:
        """Apply the noted writes in commit order. A write with seq <= the previous flush's last_seq is in
        that flush's SSTs (the write that filled the memtable flushed it before it was noted); with seq
        <= `last`, in the SSTs of the flush being handled (`fixed_of` its outputs); any later one is in
        the WAL."""
        writes = self.writes
        if not writes:
            return
        stored, byts, rows = self.stored, self.bytes, self.rows
        flushed, flushed_fixed = self._flushed_seq, self._flushed_fixed
        if last is None:
            last = flushed
        wal_extend = self._wal.extend
        deleted, fifos = self._deleted, self._aging_fifo
        wal_bytes = 0
        ttl_tombstones = 0
        it = iter(writes)
        for key, seq, ts, exp, value_len in zip(it, it, it, it, it, strict=True):
            s = stored.get(key)
            if s is not None:  # its stored row is now an older version: shadowed
                cls = s[2]
                byts[cls] -= s[1]
                rows[cls] -= 1
                if cls == TOMBSTONE and s[3] is not None:
                    ttl_tombstones += 1
            in_wal = seq > last
            if in_wal:
                fixed = WAL_FIXED
            elif seq > flushed:
                fixed = fixed_of(key)
            else:
                fixed = flushed_fixed(key)
            if value_len is None:  # a delete (its tombstone carries no expire_ts)
                size = fixed + len(key)
                stored[key] = (seq, size, TOMBSTONE, None)
                byts[TOMBSTONE] += size
                rows[TOMBSTONE] += 1
                heappush(deleted, (ts, key, seq))
            else:
                size = fixed + len(key) + value_len
                stored[key] = (seq, size, LIVE, exp)  # it ages to expired at a sample (`_age`)
                byts[LIVE] += size
                rows[LIVE] += 1
                if exp is not None:
                    q = fifos.get(exp - ts)
                    if q is None:
                        q = fifos[exp - ts] = (deque(), deque())
                    tail = q[0] or q[1]
                    if tail and tail[-3] > exp:  # time went backwards (not the simulator's writes)
                        heappush(self._aging, (exp, key, seq))
                    else:
                        q[0].extend((exp, key, seq))
            if in_wal:
                wal_extend((seq, key, size))
                wal_bytes += size
        writes.clear()
        self._wal_bytes += wal_bytes
        self.ttl_tombstones -= ttl_tombstones

    # -- the engine's events -------------------------------------------------------------------------
    def on_flush_end(self, info: FlushInfo) -> None:
        """The WAL rows up to the manifest's last_seq are now in the flush's L0 SSTs: resize them."""
        if info.error is not None:
            return
        c0 = time.process_time()
        m = self._current()
        names = set(info.outputs)
        outs = sorted((e for e in m.l0 if e.name in names), key=lambda e: e.info.first_key)
        fixed_of = self._fixed_of(outs)
        last = m.last_seq
        # the writes noted since the last event that this flush took go straight to its SSTs
        self._apply_writes(last, fixed_of)
        with cyclic_gc_paused():
            self._flushed_wal(last, fixed_of, {row_fixed(e.info) for e in outs})
        # a put or delete that fills the memtable flushes it before it is noted: it lands in these SSTs
        self._flushed_seq, self._flushed_fixed = last, fixed_of
        self.event_cpu_s += time.process_time() - c0

    def _flushed_wal(self, last: int, fixed_of: Callable[[bytes], int], layouts: set[int]) -> None:
        """The WAL rows up to `last` are in the flush's SSTs (of row_fixed `layouts`): give the newest of
        them an SST row's size."""
        wal, stored, byts = self._wal, self.stored, self.bytes
        n = freed = 0
        if len(layouts) == 1:  # one row layout (the common case): every row grows by the same bytes
            (f,) = layouts
            delta = f - WAL_FIXED
            grown = [0, 0, 0]
            it = iter(wal)
            for seq, key, size in zip(it, it, it, strict=True):
                if seq > last:
                    break
                n += 1
                freed += size
                s = stored.get(key)
                if s is not None and s[0] == seq:  # a newest row (older ones are shadowed, or were dropped)
                    stored[key] = (seq, s[1] + delta, s[2], s[3])
                    grown[s[2]] += 1
            for cls, k in enumerate(grown):
                byts[cls] += k * delta
        it = itertools.islice(wal, 3 * n, None)
        for seq, key, size in zip(it, it, it, strict=True):
            if seq > last:
                break
            n += 1
            freed += size
            s = stored.get(key)
            if s is not None and s[0] == seq:  # a newest row (older ones are shadowed, or were dropped)
                new = size - WAL_FIXED + fixed_of(key)
                byts[s[2]] += new - s[1]
                stored[key] = (seq, new, s[2], s[3])
        if 3 * n == len(wal):
            wal.clear()
        else:
            for _ in range(3 * n):
                wal.popleft()
        self._wal_bytes -= freed

    def on_compaction_begin(self, info: CompactionInfo) -> None:
        """Note the row layouts of the job's inputs (a move between layouts resizes rows)."""
        c0 = time.process_time()
        self._apply_writes()
        inputs = set(info.inputs)
        self._input_fixed = {row_fixed(e.info) for e in self._current().all_ssts() if e.name in inputs}
        self.event_cpu_s += time.process_time() - c0

    def on_compaction_end(self, info: CompactionInfo) -> None:
        """Apply what the job dropped or rewrote; every other row moved unchanged."""
        if info.error is not None:
            return
        c0 = time.process_time()
        try:
            self._apply_writes()
            self._compacted(info)
        finally:
            self.event_cpu_s += time.process_time() - c0

    def _compacted(self, info: CompactionInfo) -> None:
        m = self._current()
        names = set(info.outputs)
        changed = info.stats.changed_rows if info.stats is not None else None
        if changed is None:
            if not names <= set(info.inputs):  # rewritten by an executor that did not report
                self._recount(m)
            return  # else nothing was rewritten (files moved as they are)
        outs = sorted((e for e in m.all_ssts() if e.name in names), key=lambda e: e.info.first_key)
        fixed_of = self._fixed_of(outs)
        stored = self.stored
        for key, seq, new in changed:
            s = stored.get(key)
            if s is None or s[0] != seq:
                continue  # not the key's newest write: already counted as shadowed
            self._uncount(s)
            if new is None:  # purged
                del stored[key]
                continue
            value, exp = new[4], new[3]
            size = fixed_of(key) + len(key) + (0 if value is None else len(value))
            cls = s[2]
            if value is None:  # a filter's tombstone (the TTL filter's keeps the expire_ts)
                cls = TOMBSTONE
                if exp is not None:
                    heapq.heappush(self._expired, (exp, key, seq))
                elif new[2] is not None:
                    heapq.heappush(self._deleted, (new[2], key, seq))
            s = stored[key] = (seq, size, cls, exp)
            self._count(s)
        for e in outs:  # a layout change resizes every newest row the output holds: read it
            f = row_fixed(e.info)
            if any(x != f for x in self._input_fixed):
                self._resize(e.name, f)

    def verify(self, m: Manifest, now: int) -> None:
        """Recount every row from the files (the SSTs of `m`, the WAL rows past its last_seq) and raise
        `AccountingMismatch` if the incremental classes differ: the end-of-run check that what the engine
        reported (flushes, ``changed_rows``) was complete. Reads every SST once (counted in `ssts_read`)."""
        self.sync(m, now)
        before = self.classes(), self.ttl_tombstones
        self._recount(m)
        self._age(now)
        after = self.classes(), self.ttl_tombstones
        if before != after:
            diff = {k: (before[0][k], after[0][k]) for k in before[0] if before[0][k] != after[0][k]}
            raise AccountingMismatch(
                f"incremental accounting differs from a recount of the files at {now}: {diff} "
                f"(TTL tombstones {before[1]} vs {after[1]}); the engine's change reports were incomplete"
            )

    # -- samples -------------------------------------------------------------------------------------
    def sync(self, m: Manifest, now: int) -> None:
        """Bring the classes up to the clock `now` and the totals up to the manifest `m` (each sample)."""
        self._apply_writes()
        with cyclic_gc_paused():
            self._age(now)
        totals = self._sst_totals
        nbytes = self._wal_bytes
        nrows = len(self._wal) // 3
        size = 0
        seen = set()
        for e in m.all_ssts():
            t = totals.get(e.name)
            if t is None:
                info = e.info
                t = totals[e.name] = (row_fixed(info) * info.num_rows + info.key_bytes + info.value_bytes, info.num_rows)
            nbytes += t[0]
            nrows += t[1]
            size += e.size
            seen.add(e.name)
        for name in [n for n in totals if n not in seen]:
            del totals[name]
        self.total_bytes, self.total_rows = nbytes, nrows
        wal_bytes = 0
        for sid, p in wal_files.list_segments(self.wal_dir):
            if sid >= m.wal_replay_from:
                try:
                    wal_bytes += os.path.getsize(p)
                except FileNotFoundError:
                    pass
        self.disk_bytes = wal_bytes + size

    # -- helpers -------------------------------------------------------------------------------------
    def _current(self) -> Manifest:
        if self._manifest is None:
            raise RuntimeError("DiskAccount.bind(...) the DB before it flushes or compacts")
        return self._manifest()

    @staticmethod
    def _fixed_of(outs: list[SstEntry]) -> Callable[[bytes], int]:
        """key -> the row_fixed of the output SST (of `outs`, in key order) that holds it."""
        fixed = [row_fixed(e.info) for e in outs]
        if len(set(fixed)) <= 1:
            f = fixed[0] if fixed else 0
            return lambda _key: f
        last_keys = [e.info.last_key for e in outs]
        return lambda key: fixed[min(bisect.bisect_left(last_keys, key), len(fixed) - 1)]

    def _count(self, s: tuple) -> None:
        self.bytes[s[2]] += s[1]
        self.rows[s[2]] += 1
        if s[2] == TOMBSTONE and s[3] is not None:
            self.ttl_tombstones += 1

    def _uncount(self, s: tuple) -> None:
        """Take a stored newest row out of its class (purged, shadowed or changing)."""
        self.bytes[s[2]] -= s[1]
        self.rows[s[2]] -= 1
        if s[2] == TOMBSTONE and s[3] is not None:
            self.ttl_tombstones -= 1

    def _resize(self, name: str, fixed: int) -> None:
        """Give the newest rows held by SST `name` that SST's row size."""
        stored, byts = self.stored, self.bytes
        with SstReader(os.path.join(self.sst_dir, name)) as r:
            for i in range(len(r.blocks)):
                for key, seq, _ts, _exp, value in r.block_rows(i):
                    s = stored.get(key)
                    if s is not None and s[0] == seq:
                        new = fixed + len(key) + (0 if value is None else len(value))
                        byts[s[2]] += new - s[1]
                        stored[key] = (seq, new, s[2], s[3])
        self.ssts_read += 1

    def _recount(self, m: Manifest) -> None:
        """Account every SST row again from the files (after a compaction that reported nothing)."""
        last = m.last_seq
        found: dict[bytes, tuple] = {}  # key -> (seq, size, ts, exp, tombstone) of its newest SST row
        for e in m.all_ssts():
            f = row_fixed(e.info)
            with SstReader(os.path.join(self.sst_dir, e.name)) as r:
                for i in range(len(r.blocks)):
                    for key, seq, ts, exp, value in r.block_rows(i):
                        old = found.get(key)
                        if old is None or seq > old[0]:
                            size = f + len(key) + (0 if value is None else len(value))
                            found[key] = (seq, size, ts, exp, value is None)
            self.ssts_read += 1
        wal_rows = {k: s for k, s in self.stored.items() if s[0] > last}  # newest rows still in the WAL
        self.stored = dict(wal_rows)
        self.bytes, self.rows, self.ttl_tombstones = [0, 0, 0], [0, 0, 0], 0
        for s in wal_rows.values():
            self._count(s)
        for key, (seq, size, ts, exp, tomb) in found.items():
            if key in wal_rows:
                continue
            s = self.stored[key] = (seq, size, TOMBSTONE if tomb else LIVE, exp)
            self._count(s)
            if not tomb:
                if exp is not None:
                    heapq.heappush(self._aging, (exp, key, seq))
            elif exp is not None:
                heapq.heappush(self._expired, (exp, key, seq))
            elif ts is not None:
                heapq.heappush(self._deleted, (ts, key, seq))

    def _age(self, now: int) -> None:
        stored = self.stored
        nbytes = nrows = 0
        for aging, expired in self._aging_fifo.values():
            pop = aging.popleft
            while aging and aging[0] < now:
                exp, key, seq = pop(), pop(), pop()
                s = stored.get(key)
                if s is not None and s[0] == seq and s[2] == LIVE:
                    stored[key] = (seq, s[1], EXPIRED, exp)
                    nbytes += s[1]
                    nrows += 1
                    expired.extend((exp, key, seq))
        heap = self._aging
        while heap and heap[0][0] < now:
            exp, key, seq = heapq.heappop(heap)
            s = stored.get(key)
            if s is not None and s[0] == seq and s[2] == LIVE:
                stored[key] = (seq, s[1], EXPIRED, exp)
                nbytes += s[1]
                nrows += 1
                heapq.heappush(self._expired, (exp, key, seq))
        self.bytes[LIVE] -= nbytes
        self.rows[LIVE] -= nrows
        self.bytes[EXPIRED] += nbytes
        self.rows[EXPIRED] += nrows

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
            "oldest_unpurged_expired_ms": self._oldest_expired(now),
            "unpurged_deleted_rows": self.rows[TOMBSTONE] - self.ttl_tombstones,
            "oldest_unpurged_delete_ms": self._oldest(self._deleted, now),
        }

    def _oldest_expired(self, now: int) -> int | None:
        oldest = self._oldest(self._expired, now)
        stored = self.stored
        for _aging, expired in self._aging_fifo.values():
            while expired:
                t, key, seq = expired[0], expired[1], expired[2]
                s = stored.get(key)
                if s is not None and s[0] == seq:
                    if oldest is None or now - t > oldest:
                        oldest = now - t
                    break
                for _ in range(3):  # that row is gone (purged or shadowed)
                    expired.popleft()
        return oldest

    def _oldest(self, heap: list[tuple[int, bytes, int]], now: int) -> int | None:
        stored = self.stored
        while heap:
            t, key, seq = heap[0]
            s = stored.get(key)
            if s is not None and s[0] == seq:
                return now - t
            heapq.heappop(heap)  # that row is gone (purged or shadowed)
        return None


__all__ = ["CLASSES", "AccountingMismatch", "DiskAccount", "row_fixed"]

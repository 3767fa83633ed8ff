"""Incremental disk accounting: the byte classes of `lsm du`, kept up to date without a full scan.

`lsm du` (`lsm.inspect.space_usage`) merges every stored row — WAL rows past the manifest's
last_seq, L0 SSTs, sorted runs — and calls the first version of each key *live*, *expired* (past its
expire_ts) or *tombstone*, and every older version *shadowed*. Doing that at every sample would cost a
full read of the database per sample. `DiskAccount` gets the same numbers from what the simulator knows
anyway and from what the engine reports as it works (it is an `lsm.events` listener).

The simulator's keys are key indexes in ``[0, keys)`` (`tools.simulate.workload.key_bytes`), and it
knows before it starts which of them it will write. So the account is a handful of numpy columns with
one slot per key written (slots in key index order: the columns grow with the keys written, not with
the key space), describing each key's **newest stored row**: its seq (-1: nothing stored), its size, the part of
it besides the key and value where it lies now (a WAL record's fixed part, or its SST's row layout),
whether it is a tombstone, its expire_ts and its ts. No Python object per write or per key:

* the simulator issued every write: it hands the account its puts and deletes as columns up front
  (`bind_writes`: key index, ts, expire_ts, value length) and notes each write's seq as it commits (one
  ``array('q').append``); the account applies the committed writes in one vectorised step at the next
  flush, compaction or sample, in commit order: the last write of each key in the batch becomes its
  newest row (the previous one is now shadowed);
* a flush (``on_flush_end``) moves the WAL rows up to the manifest's last_seq into its L0 SSTs: the
  newest among them take their SST's row layout. No SST is read;
* a compaction (``on_compaction_end``) copies every row unchanged except those the engine lists in
  ``CompactionStats.changed_rows`` (``EventListener.wants_changed_rows``, counted in the merge): a
  newest row dropped (purged) leaves the account, a rewritten one (the TTL filter's tombstone, a user
  filter's change) takes its new form. No SST is read, except when an output's row layout differs
  from an input's (a TimeToLive column gained or lost): then that output is read once to resize the rows;
* the classes are computed from the columns when asked (`classes`, `unpurged`: a few array passes over
  the key space per sample): live, expired (expire_ts before the sample's time) or tombstone; the oldest
  row still stored after its expiry (or its delete) is a minimum over the same columns;
* shadowed bytes are all stored bytes (each SST's from its metadata, the WAL's as written) minus the
  newest rows'.

Row sizes are du's: the encoded row plus its 4-byte offset slot in an SST, the encoded row in the WAL.
``disk_bytes`` is du's total ``size`` (SST files plus the WAL segments from the replay point).

A drop (``executor == "drop"``: a policy removing whole SSTs by a manifest edit, compaction/drop.py)
reports no rows, so the account reads the dropped SSTs' keys and seqs when it begins (their files go
once it commits), and the newest rows among them leave the account when it ends.

A compaction whose executor reported nothing (``changed_rows`` None, a custom executor) is accounted by
reading every SST of the new manifest once. At the end of a run `verify` recounts every row from the
files once and raises `AccountingMismatch` if the incremental account drifted (`ssts_read` counts the
SSTs read, for any of these reasons).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from formats.manifest import Manifest, SstEntry
from formats.row import codec_for
from formats.sst import SsTableInfo
from formats.wal import ROW_CODEC as WAL_ROW_CODEC
from lsm.events import CompactionInfo, EventListener, FlushInfo
from storage import storage_for
from storage.paths import DbPaths, wal_ids
from storage.ssts import open_sst
from tools.simulate.workload import key_bytes, key_index

CLASSES = ("live", "expired", "tombstone")
WAL_FIXED = 2 + WAL_ROW_CODEC.attrs.size  # a WAL record's bytes besides its key and value
NEVER = np.iinfo(np.int64).max  # the expire_ts column of a row without one

FixedOf = Callable[[np.ndarray], np.ndarray]  # slots -> the row_fixed of the SST holding each


class AccountingMismatch(RuntimeError):
    """`DiskAccount.verify` found the incremental account different from the files (a bug, not bad input)."""


def row_fixed(info: SsTableInfo) -> int:
    """An SST row's bytes besides its key and value (key length, attrs, value length, offset slot)."""
    return 2 + codec_for(info.format_version, info.row_features).attrs.size + 4


class DiskAccount(EventListener):
    """Live / expired / tombstone / shadowed bytes and rows of one database the simulator writes,
    updated incrementally.

    Give it to the DB as an event listener, `bind` the open DB and `bind_writes` the workload before the
    first write."""

    wants_changed_rows = True

    def __init__(self, db_path: str) -> None:
        self._paths = DbPaths(db_path)
        self.sst_dir = self._paths.sst_dir
        self.wal_dir = self._paths.wal_dir
        # on an object store (register its root first): the requests the account itself makes (reading
        # SSTs, listing the WAL), which the simulation leaves out of the engine's counts
        self._storage = storage_for(db_path)
        self.requests: Counter[str] = Counter()
        # the newest stored row of each key the simulator writes, by slot: the rank of its key index
        # among those written (`bind_writes`), so the columns grow with the keys written, not the space
        self.slot_keys = np.zeros(0, np.int64)  # slot -> key index, ascending
        self._klen = np.zeros(0, np.int64)  # slot -> its key's length
        self.seq = np.zeros(0, np.int64)  # -1: nothing stored
        self.size = np.zeros(0, np.int64)  # the row's bytes where it lies (du's size)
        self.fixed = np.zeros(0, np.int64)  # of which those besides its key and value
        self.tomb = np.zeros(0, bool)
        self.expire = np.zeros(0, np.int64)  # NEVER: no expire_ts
        self.ts = np.zeros(0, np.int64)
        self.total_bytes = 0  # every stored row, shadowed ones included (as of the last sync)
        self.total_rows = 0
        self.ssts_read = 0  # SSTs read row by row (see the module docstring: rare)
        self.seqs = array("q")  # the seq of each write committed so far, in commit order (`bind_writes`)
        self._applied = 0  # writes applied so far
        self._w: tuple[np.ndarray, ...] = (np.zeros(0, np.int64),) * 4  # `bind_writes`' columns
        # the WAL's rows not flushed yet (shadowed ones too), one array each per applied batch
        self._wal: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (key index, seq, row bytes)
        self._wal_bytes = 0
        self._wal_rows = 0
        self._sst_totals: dict[str, tuple[int, int]] = {}  # SST name -> (row bytes, rows), from metadata
        self._input_fixed: set[int] = set()  # row_fixed of the running compaction's inputs
        self._dropping = np.zeros((2, 0), np.int64)  # a running drop's (key index, seq) rows, by column
        self.disk_bytes = 0
        self._now = 0  # the time of the last sync: what expiry is judged against
        self._code: tuple | None = None  # `_tally` as of _code_now (None: the account changed)
        self._code_now = 0
        self._flushed_seq = -1  # the last flush's last_seq: a noted write at or below it is in its SSTs
        self._flushed_fixed: FixedOf = lambda ids: np.full(len(ids), WAL_FIXED, np.int64)
        self.event_cpu_s = 0.0  # CPU time spent in the flush and compaction events
        self._manifest: Callable[[], Manifest] | None = None

    def bind(self, manifest: Callable[[], Manifest]) -> None:
        """Where the events read the DB's current manifest from (e.g. ``lambda: db.manifest``)."""
        self._manifest = manifest

    # -- the simulator's writes ----------------------------------------------------------------------
    def bind_writes(self, key: np.ndarray, ts: np.ndarray, expire: np.ndarray, value_len: np.ndarray) -> None:
        """The writes the simulator will commit, in commit order, as int64 columns: key index, ts,
        expire_ts (-1: none) and value length (-1: a delete). As each commits, the simulator appends its
        seq to `seqs` (one C call, nothing else per write); the account applies the writes whose seqs
        arrived at the next flush, compaction or `sync`. Call it once, before the first write."""
        self.slot_keys = np.unique(key)
        n = len(self.slot_keys)
        if n and int(self.slot_keys[-1]) >= 10**12:  # key_bytes grows past 12 digits
            self._klen = np.fromiter((len(key_bytes(int(i))) for i in self.slot_keys), np.int64, n)
        else:
            self._klen = np.full(n, len(key_bytes(0)), np.int64)
        self.seq = np.full(n, -1, np.int64)
        self.size = np.zeros(n, np.int64)
        self.fixed = np.zeros(n, np.int64)
        self.tomb = np.zeros(n, bool)
        self.expire = np.full(n, NEVER, np.int64)
        self.ts = np.zeros(n, np.int64)
        self._w = (np.searchsorted(self.slot_keys, key), ts, expire, value_len)

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        """The slots of key indexes `ids`, each one the simulator wrote (AccountingMismatch otherwise:
        the database holds a key it never got)."""
        slots = np.searchsorted(self.slot_keys, ids)
        if len(ids):
            inside = (slots < len(self.slot_keys)).all()
            if not inside or not (self.slot_keys[slots] == ids).all():
                raise AccountingMismatch(f"the database holds keys the simulation never wrote: {ids[:5]}")
        return slots

    def _apply_writes(self, last: int | None = None, fixed_of: FixedOf | None = None) -> None:
        """Apply the writes committed since the last call, in commit order. A write with seq <= the
        previous flush's last_seq is in that flush's SSTs (the write that filled the memtable flushed it
        before its seq was noted); with seq <= `last`, in the SSTs of the flush being handled (`fixed_of`
        its outputs); any later one is in the WAL."""
        lo, hi = self._applied, len(self.seqs)
        if lo == hi:
            return
        seq = np.frombuffer(self.seqs, np.int64)[lo:hi].copy()  # (no view may outlive: seqs grows)
        k, ts, exp, vlen = (c[lo:hi] for c in self._w)
        self._applied = hi
        flushed = self._flushed_seq
        if last is None or fixed_of is None:
            last = flushed
        deleted = vlen < 0
        payload = self._klen[k] + np.where(deleted, 0, vlen)
        fixed = np.full(len(k), WAL_FIXED, np.int64)
        if seq[0] <= last:  # seqs ascend: some of the batch is in SSTs already
            now_flushed = (seq <= last) & (seq > flushed)
            if now_flushed.any():
                fixed[now_flushed] = fixed_of(k[now_flushed])
            before = seq <= flushed
            if before.any():
                fixed[before] = self._flushed_fixed(k[before])
        in_wal = seq > last
        if in_wal.any():
            sizes = payload[in_wal] + WAL_FIXED
            self._wal.append((k[in_wal], seq[in_wal], sizes))
            self._wal_bytes += int(sizes.sum())
            self._wal_rows += int(in_wal.sum())
        # the last write of each key in the batch is its newest row
        rev = k[::-1]
        keys, first = np.unique(rev, return_index=True)
        at = len(k) - 1 - first
        self._code = None
        self.seq[keys] = seq[at]
        self.size[keys] = payload[at] + fixed[at]
        self.fixed[keys] = fixed[at]
        self.tomb[keys] = deleted[at]
        self.expire[keys] = np.where(exp[at] < 0, NEVER, exp[at])
        self.ts[keys] = ts[at]

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
        self._flushed_wal(last, fixed_of)
        # a put or delete that fills the memtable flushes it before it is noted: it lands in these SSTs
        self._flushed_seq, self._flushed_fixed = last, fixed_of
        self.event_cpu_s += time.process_time() - c0

    def _flushed_wal(self, last: int, fixed_of: FixedOf) -> None:
        """The WAL rows up to `last` are in the flush's SSTs: the newest of them take an SST row's size."""
        if not self._wal:
            return
        k, seq, size = (np.concatenate(c) for c in zip(*self._wal, strict=True))
        gone = seq <= last
        newest = gone & (self.seq[k] == seq)
        self._refix(k[newest], fixed_of(k[newest]))
        self._wal_bytes -= int(size[gone].sum())
        self._wal_rows -= int(gone.sum())
        keep = ~gone
        self._wal = [(k[keep], seq[keep], size[keep])] if keep.any() else []

    def on_compaction_begin(self, info: CompactionInfo) -> None:
        """Note the row layouts of the job's inputs (a move between layouts resizes rows); for a drop,
        which keys' rows the dropped SSTs hold (read now: the files are retired once it commits)."""
        c0 = time.process_time()
        self._apply_writes()
        inputs = set(info.inputs)
        self._input_fixed = {row_fixed(e.info) for e in self._current().all_ssts() if e.name in inputs}
        if info.executor == "drop":
            pairs = [(key_index(r[0]), r[1]) for name in info.inputs for r in self._rows_of(name)]
            self._dropping = np.array(pairs, np.int64).reshape(-1, 2).T
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
        if info.executor == "drop":  # whole SSTs gone, no outputs: their newest rows leave the account
            k, seq = self._dropping
            k = self._slots(k)
            self._forget(k[self.seq[k] == seq])
            return
        names = set(info.outputs)
        changed = info.stats.changed_rows if info.stats is not None else None
        if changed is None:
            if not names <= set(info.inputs):  # rewritten by an executor that did not report
                self._recount(m)
            return  # else nothing was rewritten (files moved as they are)
        outs = sorted((e for e in m.all_ssts() if e.name in names), key=lambda e: e.info.first_key)
        if changed:
            k = self._slots(np.fromiter((key_index(c[0]) for c in changed), np.int64, len(changed)))
            seq = np.fromiter((c[1] for c in changed), np.int64, len(changed))
            newest = self.seq[k] == seq  # else not the key's newest write: already shadowed
            self._code = None
            purged = np.fromiter((c[2] is None for c in changed), bool, len(changed))
            self._forget(k[newest & purged])
            kept = np.flatnonzero(newest & ~purged)
            if len(kept):
                rows = [changed[i][2] for i in kept]
                ids = k[kept]
                fixed = self._fixed_of(outs)(ids)
                self.size[ids] = (
                    self._klen[ids]
                    + np.fromiter((0 if r[4] is None else len(r[4]) for r in rows), np.int64, len(rows))
                    + fixed
                )
                self.fixed[ids] = fixed
                self.tomb[ids] = np.fromiter((r[4] is None for r in rows), bool, len(rows))
                # a filter's tombstone: the TTL filter's keeps the expire_ts; a delete's has its ts
                exp = (NEVER if r[3] is None else r[3] for r in rows)
                self.expire[ids] = np.fromiter(exp, np.int64, len(rows))
                ts = np.fromiter((-1 if r[2] is None else r[2] for r in rows), np.int64, len(rows))
                self.ts[ids] = np.where(ts < 0, self.ts[ids], ts)
        for e in outs:  # a layout change resizes every newest row the output holds: read it
            f = row_fixed(e.info)
            if any(x != f for x in self._input_fixed):
                self._resize(e.name, f)

    def verify(self, m: Manifest, now: int) -> None:
        """Recount every row from the files (the SSTs of `m`, the WAL rows past its last_seq) and raise
        `AccountingMismatch` if the incremental classes differ: the end-of-run check that what the engine
        reported (flushes, ``changed_rows``) was complete. Reads every SST once (counted in `ssts_read`)."""
        self.sync(m, now)
        self._code = None  # counted from the columns as they are, not from a tally kept since
        before = self.classes(), self.unpurged(now)
        self._recount(m)
        after = self.classes(), self.unpurged(now)
        if before != after:
            b, a = {**before[0], **before[1]}, {**after[0], **after[1]}
            diff = {k: (b[k], a[k]) for k in b if b[k] != a[k]}
            raise AccountingMismatch(
                f"incremental accounting differs from a recount of the files at {now}: {diff}; "
                "the engine's change reports were incomplete"
            )

    # -- samples -------------------------------------------------------------------------------------
    def sync(self, m: Manifest, now: int) -> None:
        """Bring the account up to the clock `now` and the totals up to the manifest `m` (each sample)."""
        self._apply_writes()
        self._now = now
        totals = self._sst_totals
        nbytes, nrows = self._wal_bytes, self._wal_rows
        size = 0
        seen = set()
        for e in m.all_ssts():
            t = totals.get(e.name)
            if t is None:
                info = e.info
                row_bytes = row_fixed(info) * info.num_rows + info.key_bytes + info.value_bytes
                t = totals[e.name] = (row_bytes, info.num_rows)
            nbytes += t[0]
            nrows += t[1]
            size += e.size
            seen.add(e.name)
        for name in [n for n in totals if n not in seen]:
            del totals[name]
        self.total_bytes, self.total_rows = nbytes, nrows
        self.disk_bytes = self._wal_bytes_from(m.wal_replay_from) + size

    def _wal_bytes_from(self, first: int) -> int:
        """Bytes of the WAL segments (or objects: one listing) from id `first` on."""
        with self._io():  # one listing (a stat a file in a directory)
            sizes = self._storage.list_sizes(self.wal_dir)
        return sum(sizes[os.path.basename(p)] for sid, p in wal_ids(self._storage, self._paths, list(sizes))
                   if sid >= first)

    @contextlib.contextmanager
    def _io(self):
        """Count the object-store requests made inside the block as the account's (`requests`)."""
        before = self._storage.stats()
        try:
            yield
        finally:
            after = self._storage.stats()
            for k, v in after.items():
                self.requests[k] += v - before.get(k, 0)

    # -- helpers -------------------------------------------------------------------------------------
    def _current(self) -> Manifest:
        if self._manifest is None:
            raise RuntimeError("DiskAccount.bind(...) the DB before it flushes or compacts")
        return self._manifest()

    def _fixed_of(self, outs: list[SstEntry]) -> FixedOf:
        """slots -> the row_fixed of the output SST (of `outs`, in key order) that holds each."""
        fixed = np.array([row_fixed(e.info) for e in outs], np.int64)
        if len(set(fixed.tolist())) <= 1:
            f = int(fixed[0]) if len(fixed) else 0
            return lambda ids: np.full(len(ids), f, np.int64)
        # outputs of several row layouts (rare: a TimeToLive column gained or lost): find each key's
        # output by its bytes (key indexes past 12 digits do not sort as their keys do)
        last_keys = [e.info.last_key for e in outs]
        top = len(fixed) - 1

        def of(slots: np.ndarray) -> np.ndarray:
            keys = map(key_bytes, self.slot_keys[slots].tolist())
            return fixed[[min(bisect.bisect_left(last_keys, k), top) for k in keys]]

        return of

    def _rows_of(self, name: str) -> Iterable[tuple[bytes, int, int | None, int | None, bytes | None]]:
        # callers read every row before the engine runs again, so the requests in here are the account's
        with self._io(), open_sst(os.path.join(self.sst_dir, name)) as r:
            for i in range(len(r.blocks)):
                yield from r.block_rows(i)
        self.ssts_read += 1

    def _resize(self, name: str, fixed: int) -> None:
        """Give the newest rows held by SST `name` that SST's row size."""
        pairs = [(key_index(key), seq) for key, seq, _ts, _exp, _value in self._rows_of(name)]
        if pairs:
            k, seq = np.array(pairs, np.int64).T
            k = self._slots(k)
            ids = k[self.seq[k] == seq]
            self._refix(ids, np.full(len(ids), fixed, np.int64))

    def _recount(self, m: Manifest) -> None:
        """Account every SST row again from the files (after a compaction that reported nothing)."""
        # key index -> (seq, size, fixed, tombstone, exp, ts) of its newest SST row
        found: dict[int, tuple] = {}
        for e in m.all_ssts():
            f = row_fixed(e.info)
            for key, seq, ts, exp, value in self._rows_of(e.name):
                i = key_index(key)
                old = found.get(i)
                if old is None or seq > old[0]:
                    size = len(key) + (0 if value is None else len(value)) + f
                    found[i] = (seq, size, f, value is None, NEVER if exp is None else exp, ts)
        self._code = None
        in_wal = self.seq > m.last_seq  # the newest rows still in the WAL stay as they are
        self._forget(np.flatnonzero(~in_wal))
        if found:
            cols = np.array([(i, *v) for i, v in found.items()], np.int64).T
            cols = cols[:, ~in_wal[self._slots(cols[0])]]
            ids = self._slots(cols[0])
            self.seq[ids], self.size[ids], self.fixed[ids] = cols[1], cols[2], cols[3]
            self.tomb[ids], self.expire[ids], self.ts[ids] = cols[4].astype(bool), cols[5], cols[6]

    # -- what a sample reports -----------------------------------------------------------------------
    def _refix(self, ids: np.ndarray, fixed: np.ndarray) -> None:
        """The newest rows of slots `ids` (no repeats) now lie where a row has `fixed` extra bytes."""
        self._code = None
        self.size[ids] += fixed - self.fixed[ids]
        self.fixed[ids] = fixed

    def _forget(self, ids: np.ndarray) -> None:
        """Slots `ids` no longer have a stored row. Their columns go back to the empty state (no
        seq, size 0, no expire_ts, no tombstone), which `_tally` relies on."""
        self._code = None
        self.seq[ids] = -1
        self.size[ids] = 0
        self.fixed[ids] = 0
        self.expire[ids] = NEVER
        self.tomb[ids] = False

    def _tally(self) -> tuple[tuple[int, ...], tuple[int, ...], int | None, int | None]:
        """The newest rows at the last sync, by kind (live, expired, a delete's tombstone, the TTL filter's
        tombstone, which keeps the expire_ts): (rows per kind, bytes per kind, the oldest expire_ts of
        the expired rows and TTL tombstones, the oldest ts of the deletes' tombstones). A few passes over
        the key space's columns (a key with nothing stored has size 0 and no expire_ts: `_forget`), the
        tombstones taken apart by index; kept until the account or the time changes."""
        if self._code is None or self._code_now != self._now:
            now, expire, size = self._now, self.expire, self.size
            past = expire < now  # expired rows, and TTL tombstones (almost always)
            tombs = np.flatnonzero(self.tomb)
            t_exp, t_size = expire[tombs], size[tombs]
            t_ttl = t_exp != NEVER
            t_past = t_ttl & (t_exp < now)
            n_past = int(np.count_nonzero(past)) - int(np.count_nonzero(t_past))
            b_past = int(size @ past) - int(t_size[t_past].sum())
            n_ttl = int(np.count_nonzero(t_ttl))
            b_ttl = int(t_size[t_ttl].sum())
            n_del, b_del = len(tombs) - n_ttl, int(t_size.sum()) - b_ttl
            n_live = int(np.count_nonzero(self.seq >= 0)) - n_past - n_ttl - n_del
            b_live = int(size.sum()) - b_past - b_ttl - b_del
            first = int(expire.min()) if len(expire) else NEVER
            oldest = [first] if first < now else []
            if n_ttl:
                oldest.append(int(t_exp[t_ttl].min()))
            oldest_del = int(self.ts[tombs[~t_ttl]].min()) if n_del else None
            self._code = (
                (n_live, n_past, n_del, n_ttl),
                (b_live, b_past, b_del, b_ttl),
                min(oldest) if oldest else None,
                oldest_del,
            )
            self._code_now = now
        return self._code

    def classes(self) -> dict[str, int]:
        """Bytes and rows by du class: {live,expired,tombstone,shadowed}_{bytes,rows}."""
        rows, byts, _e, _d = self._tally()
        out: dict[str, int] = {}
        for c, n, b in (
            ("live", rows[0], byts[0]),
            ("expired", rows[1], byts[1]),
            ("tombstone", rows[2] + rows[3], byts[2] + byts[3]),
        ):
            out[f"{c}_bytes"] = int(b)
            out[f"{c}_rows"] = int(n)
        out["shadowed_bytes"] = self.total_bytes - sum(byts)
        out["shadowed_rows"] = self.total_rows - sum(rows)
        return out

    def unpurged(self, now: int) -> dict[str, Any]:
        """Rows whose newest write expired (or was a delete) and that are still stored, in any form (the
        TTL filter turns expired rows into tombstones before the oldest run drops them), as of the last
        sync (`now` is what the ages are counted from).

        ``oldest_*_ms``: how long ago the oldest of them expired (was deleted); None when there is none."""
        rows, _b, oldest_exp, oldest_del = self._tally()
        return {
            "unpurged_expired_rows": int(rows[1] + rows[3]),
            "oldest_unpurged_expired_ms": None if oldest_exp is None else now - oldest_exp,
            "unpurged_deleted_rows": int(rows[2]),
            "oldest_unpurged_delete_ms": None if oldest_del is None else now - oldest_del,
        }


__all__ = ["CLASSES", "AccountingMismatch", "DiskAccount", "row_fixed"]

"""The write path of a handle: the write lock, the seq, the clock, and THE commit sequence every write
takes, a put (a one-op batch), a batch, a delete, and the engine's own rows (an ingest batch and its
binding) alike (LevelDB's ``DB::Put`` is a one-entry ``WriteBatch`` through ``Write``):

1. take the write lock, and the WAL segment's shared flock if the writer does not hold it yet
   (lsm.wal_lock keeps it across writes);
2. check the fence (a memory read of the writer epoch; lsm.manifest.FenceToken);
3. read the clock (never backwards; lsm.clock) and take the next seq;
4. build the rows (expiry from the TTL, or the caller's `rows_at(ts, seq)`) and append ONE WAL record
   (fdatasync with `sync=True` on a directory);
5. add the rows to the memtable, then publish the seq (a reader never sees part of a commit);
6. rotate a full memtable to the flusher (lsm.flusher);
7. a `sync=True` write on an object store waits for its WAL object outside the lock (the group commit).

An opener publishes its epoch before it locks and reads the segments, so an append either passed its
fence check before the publish (the opener waits for it and replays it: the write succeeded) or fails
that check (nothing written). A failure after the record is appended never makes the write report "not
written" (`_rotate_after_commit`, `_await_durable`): recovery replays what reached the WAL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from formats.wal import encode_put, encode_record
from lsm.batch import WriteBatch
from lsm.clock import I64_MAX, MonotonicClock
from lsm.errors import BulkLoadConflictError, ClosedError, FencedError, LsmError
from lsm.options import NO_TTL, WriteOptions
from lsm.syskeys import check_user_key

if TYPE_CHECKING:
    from formats.manifest import Manifest, SstEntry
    from lsm.failure import Failure
    from lsm.flusher import Flusher
    from lsm.options import DbOptions
    from lsm.timeline import Timeline
    from lsm.versions import VersionSet
    from lsm.wal_manager import WalManager

RowsAt = Callable[[int, int], tuple[list[tuple], int]]


class ReadOnlyError(LsmError):
    """A write on a DB opened with read_only=True."""


class WritePath:
    """The commit sequence and what it guards (module docstring). `seq` is the last seq handed out,
    `last_commit_ts` the last commit's time; both change only under `lock`."""

    def __init__(self, path: str, options: DbOptions, versions: VersionSet, wal: WalManager, failure: Failure,
                 clock: MonotonicClock, timeline: Timeline, seq: int, last_commit_ts: int, read_only: bool) -> None:
        self.path = path
        self.options = options
        self.versions = versions
        self.wal = wal
        self.failure = failure
        self.clock = clock
        self.timeline = timeline
        self.read_only = read_only
        self.flusher: Flusher | None = None  # set once the flusher exists (it needs this path to exist)
        self.lock = threading.Lock()  # the write path: seq, WAL appends, memtable rotation; taken first
        self.seq = seq
        self.last_commit_ts = last_commit_ts
        self.closed = False
        self.user_bytes_written = 0
        # seq ranges reserved by bulk loads and not committed yet (see `stable_seq`), under versions.lock
        self.reserved: tuple[tuple[int, int], ...] = ()
        self.default_ttl = options.default_ttl
        self.memtable_bytes = options.memtable_bytes
        self.v0 = options.sst_format_version == 0
        self.objects = not wal.segments  # a sync write waits for its WAL object (the group commit)
        self.token_bytes = versions.token_bytes
        self.epoch_bytes = versions.epoch_bytes

    # -- the user's writes -------------------------------------------------------------------------------
    def delete(self, key: bytes, options: WriteOptions | None = None) -> int:
        """Write a tombstone for `key`; returns the commit's seq."""
        check_user_key(key)
        return self.commit(((key, None, None),), options is not None and options.sync)[0]

    def write(self, batch: WriteBatch, options: WriteOptions | None = None) -> int:
        """Commit `batch` atomically under one seq and one ts; returns the seq."""
        if not isinstance(batch, WriteBatch):
            raise TypeError(f"write() takes a WriteBatch, not {type(batch).__name__}")
        if not batch.ops:
            raise ValueError("write() of an empty WriteBatch")
        ops = batch.ops
        if len(ops) > 1:
            ops = list({op[0]: op for op in ops}.values())  # the last operation on a key wins
        return self.commit(ops, options is not None and options.sync)[0]

    # -- THE commit sequence -------------------------------------------------------------------------------
    def commit(self, ops: Any = (), sync: bool = False, rows_at: RowsAt | None = None,
               at: tuple[str, int] | None = None) -> tuple[int, int]:
        """Commit under one seq and ts, as the module docstring says, and return (seq, ts). The rows are
        the user's `ops`, ``(key, ttl, value)`` (value None: a delete), or what ``rows_at(ts, seq)``
        builds once the commit's ts and seq are known, as ``(key, expire_ts, value)`` with the user bytes
        they hold (an ingest batch's rows and binding; system keys allowed). `at` = (source, ts): the
        commit's ts is the source's own (lsm.clock.MonotonicClock.tick_at), not the clock's."""
        lock = self.lock
        lock.acquire()  # not `with`: acquire/release is cheaper, and try/finally costs nothing
        try:
            if self.closed or self.failure.error is not None or self.read_only:
                self.check_writable()
            wal = self.wal.writer
            if not wal.held:  # the segment lock of the fencing protocol (lsm.wal_lock): kept across writes
                self.wal.hold(wal)
            if self.token_bytes[0:8] != self.epoch_bytes:
                self._fenced(wal)
            ts = self.clock.tick() if at is None else self.clock.tick_at(at[1], at[0], self.last_commit_ts)
            seq = self.seq + 1
            single = rows_at is None and len(ops) == 1 and ops[0][2] is not None
            if single:  # one put, the hot path: its expiry inline, its own encoder, no row list
                key, ttl, value = ops[0]
                if ttl is None:
                    ttl = self.default_ttl
                exp = None if ttl is None or ttl is NO_TTL else self._expiry(ts, ttl)
                nbytes = len(key) + len(value)
                record = encode_put(seq, ts, key, exp, value)
            elif rows_at is not None:
                rows, nbytes = rows_at(ts, seq)
                record = encode_record(seq, ts, rows)
            else:
                rows, nbytes = self._rows(ops, ts)
                record = encode_record(seq, ts, rows)
            try:
                ticket = wal.append(record, sync and not self.objects, seq)
            except OSError as e:
                wal.release()
                raise self.failure.fail(e) from e
            mem = self.versions.state.mem
            if single:
                mem.add((key, seq, ts, exp, value))
            else:
                for key, exp, value in rows:
                    mem.add((key, seq, ts, exp, value))
            self.seq = seq
            self.last_commit_ts = ts
            if ts >= self.timeline.next_ms:
                self.timeline.on_commit(seq, ts)
            self.user_bytes_written += nbytes
            if mem.bytes >= self.memtable_bytes:
                self._rotate_after_commit()
        finally:
            lock.release()
        if sync and self.objects:
            self._await_durable(wal, ticket, seq)  # outside the write lock: the group commit
        return seq, ts

    def _expiry(self, ts: int, ttl: int | None) -> int | None:
        if ttl is None:
            ttl = self.default_ttl
        if ttl is None or ttl is NO_TTL:
            return None
        if self.v0:
            raise ValueError("sst_format_version 0 cannot store TTLs")
        exp = ts + ttl
        if exp > I64_MAX:
            raise ValueError(
                f"expiry {ts} + ttl {ttl} = {exp} ms does not fit a signed 64-bit integer; nothing was written"
            )
        return exp

    def _rows(self, ops: Any, ts: int) -> tuple[list[tuple], int]:
        rows = []
        nbytes = 0
        for key, ttl, value in ops:
            if value is None:
                rows.append((key, None, None))
                nbytes += len(key)
            else:
                rows.append((key, self._expiry(ts, ttl), value))
                nbytes += len(key) + len(value)
        return rows, nbytes

    def _await_durable(self, wal: Any, ticket: int, seq: int) -> None:
        """A sync write on an object store, after the write lock: return once the WAL object holding
        record `ticket` is written. Waiting outside the lock is the group commit of sync writes: the
        writes that arrive while one object is being written go into the next one together.

        A flush may have put the write's rows into an SST and published it while the write waited: then
        the write is durable and visible whatever becomes of its WAL object, so a takeover that fences the
        WAL afterwards (FencedError) must not report it as not written."""
        try:
            wal.wait_durable(ticket)
        except FencedError:
            if self.versions.manifest.last_seq >= seq:  # published by a flush of ours before the takeover
                return
            self.wal.unacknowledged.add(seq)
            raise
        except OSError as e:
            self.wal.unacknowledged.add(seq)
            raise self.failure.fail(e) from e

    def flush_wal(self) -> None:
        """Make every write acknowledged so far durable now (RocksDB's ``FlushWAL(sync=true)``)."""
        with self.lock:
            if self.closed or self.failure.error is not None or self.read_only:
                self.check_writable()
            if not self.objects:
                try:
                    self.wal.sync_now()
                except OSError as e:
                    raise self.failure.fail(e) from e
                return
        try:
            self.wal.sync_now()  # outside the write lock, as a sync write waits (the group commit)
        except OSError as e:
            raise self.failure.fail(e) from e

    # -- rotation -------------------------------------------------------------------------------------------
    def _rotate_after_commit(self) -> None:
        """Rotate the memtable a commit filled, after its record was appended (write lock held). The
        commit happened whatever becomes of the rotation or of the flush it runs in this thread
        (background_flush=False): recovery replays its record. So an error here (fenced, a failed
        flush) is kept as the handle's failure, raised by its next write, and never by this one, which
        would tell the caller "not written" about a write that is there."""
        try:
            self.rotate()
        except LsmError as e:
            self.failure.keep(e)

    def rotate(self) -> None:
        """Freeze the memtable behind a new WAL segment and hand it to the flusher (write lock held)."""
        old = self.versions.state.mem
        if old.is_empty():
            return
        self.versions.swap_memtable(self.wal.rotate(old, self.failure.fail))
        self.flusher.frozen()

    def rotate_and_wait(self) -> None:
        """Freeze the memtable (after a fence check: a fenced handle must not rotate into, or name files
        like, the new owner's) and wait until every frozen memtable is flushed."""
        with self.lock:
            self.check_fence()
            self.rotate()
        self.flusher.wait_flushed()

    # -- bulk load reservations -------------------------------------------------------------------------------
    def reserve_seqs(self, n: int) -> tuple[int, int]:
        """Reserve `n` consecutive seqs for a bulk load; return (first seq, the load's ts). See
        `lsm.db.DB.reserve_seqs`."""
        if type(n) is not int or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        self.check_writable()
        vs = self.versions
        with self.lock:
            if self.closed or self.failure.error is not None:
                self.check_writable()
            self.check_fence()
            self.rotate()
            ts = self.clock.tick()
            base = self.seq + 1
            held = (base, base + n - 1)
            # published before the write lock is released: no commit above the range is durable while
            # a reader of the files could still miss the reservation
            vs.commit(lambda m: m.replace(seq_reservations=(*m.seq_reservations, held)))
            with vs.lock:  # loads of other sources reserve and release concurrently
                self.reserved = (*self.reserved, held)
            self.seq = base + n - 1
            self.last_commit_ts = ts
            if ts >= self.timeline.next_ms:
                self.timeline.on_commit(base, ts)  # the load commits at ts from its first seq on
        self.flusher.wait_flushed()
        return base, ts

    def abandon_seqs(self, base: int, last: int) -> None:
        """Give up the reserved seqs [base, last] of a bulk load that will not commit (`DB.abandon_seqs`)."""
        held = (base, last)
        if held not in self.reserved or self.closed or self.failure.error is not None:
            return
        # every seq below the range was flushed before it was reserved (reserve_seqs waits for that), so
        # last_seq may move over the range: readers of the files see the gap as final at once
        self.versions.commit(
            lambda m: m.replace(
                seq_reservations=tuple(r for r in m.seq_reservations if r != held), last_seq=max(m.last_seq, last)
            )
        )
        self.release_reservation(held)

    def commit_reserved(self, entries: list[SstEntry], base: int, last: int, ts: int) -> None:
        """Commit a bulk load's SSTs (seqs in [base, last], reserved by `reserve_seqs`; newest first) in
        ONE manifest edit, placed in L0 in seq order (`place_bulk`): the reservation becomes a committed
        load, one commit at `last` for readers of history. The caller keeps compactions out meanwhile."""
        self.check_writable()
        vs = self.versions
        try:
            vs.storage.fsync_dir(vs.sst_dir)
        except OSError as e:
            raise self.failure.fail(e) from e
        held = (base, last)
        timeline = self.timeline

        def edit(m: Manifest) -> Manifest:
            loads = tuple(r for r in m.bulk_loads if r[1] > m.history_floor) + (held,)
            return m.replace(
                l0=place_bulk(m, entries, base, last),
                last_seq=max(m.last_seq, last),
                clock_watermark=max(m.clock_watermark, ts),
                seq_reservations=tuple(r for r in m.seq_reservations if r != held),
                bulk_loads=loads,
                **timeline.to_manifest(),
            )

        def installed(m: Manifest) -> None:
            vs.install(m)
            self.release_reservation(held)  # after the install: stable_seq never runs ahead of reads

        vs.commit(edit, installed)

    def release_reservation(self, held: tuple[int, int]) -> None:
        """Forget the reserved range `held` (committed or abandoned)."""
        with self.versions.lock:
            self.reserved = tuple(r for r in self.reserved if r != held)

    def abandon_all(self) -> None:
        """At a writable open, after the replayed WAL is flushed: the seq ranges an earlier handle reserved
        for bulk loads can never commit now (that handle is fenced), so they are dropped from the manifest
        and `last_seq` moves past them: readers stop waiting for them and no later write reuses them."""
        held = self.versions.manifest.seq_reservations
        if not held:
            return
        top = max(last for _first, last in held)
        self.versions.commit(lambda m: m.replace(seq_reservations=(), last_seq=max(m.last_seq, top)))
        self.seq = max(self.seq, top)

    # -- refusals ----------------------------------------------------------------------------------------------
    def check_writable(self) -> None:
        """Raise ClosedError / ReadOnlyError / the failed-state error if writes are refused."""
        if self.closed:
            raise ClosedError(f"{self.path}: DB is closed")
        if self.read_only:
            raise ReadOnlyError(f"{self.path}: opened read-only")
        self.failure.raise_if_failed()

    def check_fence(self) -> None:
        """FencedError if a newer handle has published its epoch."""
        if self.versions.is_fenced():
            raise FencedError(f"{self.path}: another handle opened this database; this one is fenced")

    def _fenced(self, wal: Any) -> None:
        """A write found a newer epoch: give the segment lock to the opener waiting for it, then raise."""
        wal.release()
        self.check_fence()
        raise FencedError(f"{self.path}: another handle opened this database; this one is fenced")

    # -- the idle release of the segment lock (lsm.wal_lock.WriterHost) ----------------------------------------
    def release_idle_lock(self, last_seq: int) -> int:
        """Drop the writer's WAL segment flock if no commit happened since `last_seq`; returns the current
        seq. Never waits for the write lock."""
        seq = self.seq
        if self.wal.lock_held and seq == last_seq and self.lock.acquire(blocking=False):
            try:
                self.wal.release_if_idle(lambda: self.seq == seq)
            finally:
                self.lock.release()
        return seq

    def segment_lock_held(self) -> bool:
        """Whether the writer holds its WAL segment flock now."""
        return self.wal.lock_held


def place_bulk(m: Manifest, entries: list[SstEntry], base: int, last: int) -> tuple:
    """The L0 of manifest `m` with `entries` (seqs in [base, last], newest first) placed in seq order:
    below the files flushed since the reservation, above every older file. BulkLoadConflictError if a
    file or run holds seqs on both sides of the range."""
    newer = [e for e in m.l0 if e.info.min_seq > last]
    older = [e for e in m.l0 if e.info.max_seq < base]
    if len(newer) + len(older) != len(m.l0) or any(e.info.max_seq >= base for r in m.runs for e in r.ssts):
        raise BulkLoadConflictError(
            "a compaction merged SSTs from before and after the bulk load's seq range while it ran; "
            "nothing was committed: run the load again"
        )
    if newer and m.l0[: len(newer)] != tuple(newer):
        raise BulkLoadConflictError("L0 is not in seq order; nothing was committed")
    return tuple(newer) + tuple(entries) + tuple(older)


__all__ = ["ReadOnlyError", "RowsAt", "WritePath", "place_bulk"]

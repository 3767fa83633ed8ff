"""The DB's write path and flushes (part of `lsm.db.DB`; see lsm/db_time.py on the mixin split).

A commit takes the write lock and (if it does not hold it yet) a shared flock on the active WAL
segment, checks the fence, reads the clock (never backwards), takes the next seq, appends one WAL
record, then adds its rows to the memtable. A full memtable is frozen behind a new WAL segment and
flushed to an L0 SST by the flush thread (which has the flush worker process, compaction.flush, write
the SST from that segment, off the writers' GIL); the version set (lsm.versions) then commits and installs the
new shape, and only after that commit are the flushed segments deleted. Details in lsm/db.py.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from compaction.flush import FlushJob, SegmentMismatch, run_flush_in_worker
from compaction.merge import CompactionStats, OutputSpec, flush_rows
from compaction.worker import WorkerDied
from formats.manifest import Manifest, SstEntry
from formats.row import MAX_KEY_LEN, MAX_VALUE_LEN, check_value
from formats.storage import numbered
from formats.wal import encode_put, encode_record
from lsm import wal as wal_files
from lsm.batch import WriteBatch
from lsm.clock import I64_MAX
from lsm.errors import ClosedError, DbFailedError, FencedError, LsmError
from lsm.events import FlushInfo, notify
from lsm.fsutil import fsync_dir
from lsm.memtable import Memtable
from lsm.options import NO_TTL, WriteOptions, check_ttl
from lsm.syskeys import SYSTEM_PREFIX, check_user_key
from lsm.wal_object import ObjectWal, wal_grace_ms

# a smaller memtable is flushed in the flush thread even with DbOptions.flush_process: its GIL time is
# short, and the worker's round trip (and its start, the first time) would only delay the flush. The
# worker starts with the first flush that uses it (a program that never writes this much never starts
# it); that flush waits for the start, the writers do not.
FLUSH_PROCESS_MIN_BYTES = 256 << 10


class ReadOnlyError(LsmError):
    """A write on a DB opened with read_only=True."""


class WriteMixin:
    """The write path of `lsm.db.DB`: put, delete, write, flush and the flush thread."""

    # -- write path --------------------------------------------------------------------------------
    def put(self, key: bytes, value: bytes, ttl: int | None = None, options: WriteOptions | None = None) -> int:
        """Write `key` = `value`; ttl (ms) overrides DbOptions.default_ttl, NO_TTL disables it.

        Returns the commit's seq."""
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_LEN or key >= SYSTEM_PREFIX:
            check_user_key(key)
        if type(value) is not bytes or len(value) > MAX_VALUE_LEN:
            check_value(value)
        if ttl is not None:
            check_ttl(ttl)
        sync = options is not None and options.sync
        # the generic _commit_ops, specialised for one put: this is the write path's hot loop
        lock = self._write_lock
        lock.acquire()  # not `with`: acquire/release is cheaper, and try/finally costs nothing
        try:
            if self._closed or self._bg_error is not None or self.read_only:
                self._check_writable()
            wal = self._wal
            if not wal.held:  # the segment lock of the fencing protocol (lsm.wal_lock): kept across writes
                self._hold_segment(wal)
            if self._token_bytes[0:8] != self._epoch_bytes:
                self._fenced(wal)
            ts = self._clock.tick()
            if ttl is None:
                ttl = self._default_ttl
            exp = None
            if ttl is not None and ttl is not NO_TTL:
                if self.options.sst_format_version == 0:
                    raise ValueError("sst_format_version 0 cannot store TTLs")
                exp = ts + ttl
                if exp > I64_MAX:
                    _expiry_overflow(ts, ttl)
            seq = self._seq + 1
            try:
                ticket = wal.append(encode_put(seq, ts, key, exp, value), sync and not self._objects, seq)
            except OSError as e:
                wal.release()
                raise self._fail(e) from e
            mem = self._vs.state.mem
            mem.add((key, seq, ts, exp, value))
            self._seq = seq
            self._last_commit_ts = ts
            if ts >= self._timeline.next_ms:
                self._timeline.on_commit(seq, ts)
            self.user_bytes_written += len(key) + len(value)
            if mem.bytes >= self._memtable_bytes:
                self._rotate_after_commit()
            if not (sync and self._objects):
                return seq
        finally:
            lock.release()
        self._await_durable(wal, ticket, seq)
        return seq

    def flush_wal(self) -> None:
        """Make every write acknowledged so far durable now (RocksDB's ``FlushWAL(sync=true)``): a local
        segment is fdatasynced; an object store's buffered records are written as one WAL object, as
        the group commit does every ``DbOptions.wal_flush_interval_ms`` (needed when that is None)."""
        with self._write_lock:
            if self._closed or self._bg_error is not None or self.read_only:
                self._check_writable()
            wal = self._wal
            if not self._objects:
                try:
                    wal.sync()
                except OSError as e:
                    raise self._fail(e) from e
                return
        try:
            wal.sync()  # outside the write lock, as a sync write waits (the group commit)
        except OSError as e:
            raise self._fail(e) from e

    def _await_durable(self, wal: ObjectWal, ticket: int, seq: int) -> None:
        """A sync write on an object store, after the write lock: return once the WAL object holding
        record `ticket` is written. Waiting outside the lock is the group commit of sync writes: the
        writes that arrive while one object is being written go into the next one together.

        A flush may have put the write's rows into an SST and published it while the write waited: then
        the write is durable and visible whatever becomes of its WAL object, so a takeover that fences the
        WAL afterwards (FencedError) must not report it as not written."""
        try:
            wal.wait_durable(ticket)
        except FencedError:
            if self._vs.manifest.last_seq >= seq:  # published by a flush of ours before the takeover
                return
            self._unacknowledged.add(seq)
            raise
        except OSError as e:
            self._unacknowledged.add(seq)
            raise self._fail(e) from e

    def reserve_seqs(self, n: int) -> tuple[int, int]:
        """Reserve `n` consecutive seqs for a bulk load (lsm.bulk); return (first seq, the load's ts).

        Freezes the memtable and waits for its flush, so every L0 file lies wholly below or above the
        range; later commits take seqs above it. The range is recorded in the manifest
        (`seq_reservations`) before any later seq can be written, and holds `stable_seq` below it (here
        and for readers of the files) until `commit_bulk` publishes it or `abandon_seqs` gives it up;
        the next writable open abandons what is left. An abandoned range is a gap in the seqs."""
        if type(n) is not int or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        self._check_writable()
        with self._write_lock:
            if self._closed or self._bg_error is not None:
                self._raise_not_writable()
            self._check_fence()
            self._rotate_locked()
            ts = self._clock.tick()
            base = self._seq + 1
            held = (base, base + n - 1)
            # published before the write lock is released: no commit above the range is durable while
            # a reader of the files could still miss the reservation
            self._vs.commit(lambda m: m.replace(seq_reservations=(*m.seq_reservations, held)))
            with self._state_lock:  # loads of other sources reserve and release concurrently
                self._reserved = (*self._reserved, held)
            self._seq = base + n - 1
            self._last_commit_ts = ts
            if ts >= self._timeline.next_ms:
                self._timeline.on_commit(base, ts)  # the load commits at ts from its first seq on
        self._wait_flushed()
        return base, ts

    def abandon_seqs(self, base: int, last: int) -> None:
        """Give up the reserved seqs [base, last] of a bulk load that will not commit: dropped from the
        manifest, so that `stable_seq` (and readers of the files) move past them. Nothing if the range
        is not reserved (the load committed it). A handle that cannot commit any more (failed, fenced,
        closed) keeps holding the range back until the store is reopened, which abandons it."""
        held = (base, last)
        if held not in self._reserved or self._closed or self._bg_error is not None:
            return
        # every seq below the range was flushed before it was reserved (reserve_seqs waits for that), so
        # last_seq may move over the range: readers of the files see the gap as final at once
        self._vs.commit(
            lambda m: m.replace(
                seq_reservations=tuple(r for r in m.seq_reservations if r != held), last_seq=max(m.last_seq, last)
            )
        )
        self._release_reservation(held)

    def _release_reservation(self, held: tuple[int, int]) -> None:
        with self._state_lock:
            self._reserved = tuple(r for r in self._reserved if r != held)

    def delete(self, key: bytes, options: WriteOptions | None = None) -> int:
        """Write a tombstone for `key` (it carries a ts and no expire_ts). Returns the commit's seq."""
        check_user_key(key)
        return self._commit_ops(((key, None, None),), options)

    def write(self, batch: WriteBatch, options: WriteOptions | None = None) -> int:
        """Commit a WriteBatch atomically under one seq and one ts. Returns the seq."""
        if not isinstance(batch, WriteBatch):
            raise TypeError(f"write() takes a WriteBatch, not {type(batch).__name__}")
        if not batch.ops:
            raise ValueError("write() of an empty WriteBatch")
        ops = batch.ops
        if len(ops) > 1:
            ops = list({op[0]: op for op in ops}.values())  # the last operation on a key wins
        return self._commit_ops(ops, options)

    def _hold_segment(self, wal: Any) -> None:
        """Take the WAL segment's shared flock (under the write lock), then wake the idle releaser, which
        sleeps while the lock is not held (`lsm.wal_lock.IdleReleaser`)."""
        wal.hold()
        releaser = self._lock_releaser
        if releaser is not None:
            releaser.wake()

    def _check_writable(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: DB is closed")
        if self.read_only:
            raise ReadOnlyError(f"{self.path}: opened read-only")
        if self._bg_error is not None:
            raise self._bg_error

    def _raise_not_writable(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: DB is closed")
        raise self._bg_error

    def _check_fence(self) -> None:
        if self._vs.is_fenced():
            raise FencedError(f"{self.path}: another handle opened this database; this one is fenced")

    def _fenced(self, wal: wal_files.WalWriter) -> None:
        """A write found a newer epoch: give the segment lock to the opener waiting for it, then raise."""
        wal.release()
        self._check_fence()
        raise FencedError(f"{self.path}: another handle opened this database; this one is fenced")

    def _commit_ops(self, ops, options: WriteOptions | None) -> int:
        default_ttl = self._default_ttl
        v0 = self.options.sst_format_version == 0

        def rows_at(ts: int, seq: int) -> tuple[list[tuple], int]:
            wal_ops = []
            nbytes = 0
            for key, ttl, value in ops:
                exp = None
                if value is not None:
                    if ttl is None:
                        ttl = default_ttl
                    if ttl is not None and ttl is not NO_TTL:
                        if v0:
                            raise ValueError("sst_format_version 0 cannot store TTLs")
                        exp = ts + ttl
                        if exp > I64_MAX:
                            _expiry_overflow(ts, ttl)
                    nbytes += len(key) + len(value)
                else:
                    nbytes += len(key)
                wal_ops.append((key, exp, value))
            return wal_ops, nbytes

        return self._commit_rows(rows_at, options is not None and options.sync)[0]

    def _commit_rows(
        self, rows_at: Callable[[int, int], tuple[list[tuple], int]], sync: bool, at: tuple[str, int] | None = None
    ) -> tuple[int, int]:
        """Commit the rows ``rows_at(ts, seq)`` builds, as (key, expire_ts, value), under one seq and ts.
        `at` = (source, ts): the commit's ts is the source's own (lsm.clock.MonotonicClock.tick_at), not
        the clock's.

        `rows_at` runs under the write lock and the segment flock once the commit's ts and seq are known
        (ingest needs both for its binding row) and also returns the user bytes it holds. Returns (seq, ts)."""
        self._check_writable()
        with self._write_lock:
            if self._closed or self._bg_error is not None:
                self._raise_not_writable()
            wal = self._wal
            if not wal.held:  # as in put
                self._hold_segment(wal)
            if self._vs.is_fenced():
                self._fenced(wal)
            ts = self._clock.tick() if at is None else self._clock.tick_at(at[1], at[0], self._last_commit_ts)
            seq = self._seq + 1
            wal_ops, nbytes = rows_at(ts, seq)
            try:
                ticket = wal.append(encode_record(seq, ts, wal_ops), sync and not self._objects, seq)
            except OSError as e:
                wal.release()
                raise self._fail(e) from e
            mem = self._vs.state.mem
            for key, exp, value in wal_ops:
                mem.add((key, seq, ts, exp, value))
            self._seq = seq
            self._last_commit_ts = ts
            if ts >= self._timeline.next_ms:
                self._timeline.on_commit(seq, ts)
            self.user_bytes_written += nbytes
            if mem.bytes >= self._memtable_bytes:
                self._rotate_after_commit()
        if sync and self._objects:
            self._await_durable(wal, ticket, seq)  # outside the write lock: the group commit (see put)
        return seq, ts

    def _rotate_after_commit(self) -> None:
        """Rotate the memtable a commit filled, after its record was appended (write lock held). The
        commit happened whatever becomes of the rotation or of the flush it runs in this thread
        (background_flush=False): recovery replays its record. So an error here (fenced, a failed
        flush) is kept as the handle's failure, raised by its next write, and never by this one, which
        would tell the caller "not written" about a write that is there."""
        try:
            self._rotate_locked()
        except LsmError as e:
            with self._cv:
                if self._bg_error is None:
                    self._bg_error = e
                self._cv.notify_all()

    def _rotate_locked(self) -> None:
        """Freeze the memtable behind a new WAL segment and hand it to the flush thread (write lock held)."""
        old = self._vs.state.mem
        if old.is_empty():
            return
        if self._objects:
            self._rotate_objects(old)
        else:
            self._rotate_segment(old)
        if self._flush_thread is None:
            self._flush_frozen()
            return
        with self._cv:
            self._cv.notify_all()
            while len(self._vs.state.imm) > self.options.max_immutable_memtables and self._bg_error is None:
                self._cv.wait()

    def _rotate_objects(self, old: Memtable) -> None:
        """An object-store WAL goes on as it is: the new memtable starts at the id of the object the
        group commit writes next, which may also hold the old memtable's last records (replay skips
        records at or below the manifest's last_seq), so a rotation costs no PUT of its own and the WAL
        stays at one PUT per interval (lsm.wal_object)."""
        broken = self._wal.broken
        if broken is not None:  # a group commit failed: its object may or may not exist
            raise self._fail(broken) if isinstance(broken, OSError) else broken
        new = Memtable(self._wal.next_id)
        old.next_segment_id = new.segment_id
        self._vs.swap_memtable(new)

    def _rotate_segment(self, old: Memtable) -> None:
        """A local WAL: the next segment file, for the new memtable alone."""
        try:
            new_wal = self._new_wal(old.segment_id + 1)
        except FileExistsError:
            raise FencedError(
                f"{self.path}: WAL segment {old.segment_id + 1} belongs to another handle; this one is fenced"
            ) from None
        except OSError as e:
            raise self._fail(e) from e
        new = Memtable(new_wal.segment_id)
        old_wal, self._wal = self._wal, new_wal
        old_wal.close()
        self._vs.swap_memtable(new)

    def flush(self) -> None:
        """Flush the memtable to an L0 SST and wait until every frozen memtable is flushed."""
        self._check_writable()
        with self._write_lock:
            self._check_fence()  # a fenced handle must not rotate into (or name files like) the new owner's
            self._rotate_locked()
        self._wait_flushed()

    def _wait_flushed(self) -> None:
        with self._cv:
            while self._vs.state.imm and self._bg_error is None:
                self._cv.wait()
        if self._bg_error is not None:
            raise self._bg_error

    def _flush_loop(self) -> None:
        while True:
            with self._cv:
                while not self._vs.state.imm and not self._stopping:
                    self._cv.wait()
                if not self._vs.state.imm:
                    return
            try:
                self._flush_memtable(self._vs.state.imm[-1])
            except BaseException as e:  # noqa: BLE001 - surfaced to writers as the background error
                with self._cv:
                    if self._bg_error is None:  # the first failure is the one to report
                        self._bg_error = e
                    self._cv.notify_all()
                return
            with self._cv:
                self._cv.notify_all()
            for hook in self._on_flush_hooks:
                hook()

    def _flush_frozen(self) -> None:
        """background_flush=False: flush every frozen memtable in this thread, oldest first (write lock
        held). A failure is the background error, as it would be in the flush thread."""
        while self._vs.state.imm and self._bg_error is None:
            try:
                self._flush_memtable(self._vs.state.imm[-1])
            except BaseException as e:
                with self._cv:
                    if self._bg_error is None:  # the first failure is the one to report
                        self._bg_error = e
                    self._cv.notify_all()
                raise
        for hook in self._on_flush_hooks:
            hook()

    def _flush_if_idle(self) -> bool:
        """The idle flush: when the memtable's oldest row is periodic_compaction_interval old, flush it,
        so rows that never fill a memtable (writes stopped) still reach disk and the periodic purge
        bound. Called where the engine checks periodic compaction; True if it flushed."""
        p = self.options.periodic_compaction_interval
        if p is None or self.read_only or self._closed:
            return False
        mem = self._vs.state.mem
        if mem.is_empty() or self._clock.read() - mem.min_ts < p:
            return False
        with self._write_lock:
            if self._closed or self._bg_error is not None:
                return False
            self._check_fence()
            mem = self._vs.state.mem
            if mem.is_empty() or self._clock.read() - mem.min_ts < p:
                return False
            self._rotate_locked()
        self._wait_flushed()
        return True

    def _flush_memtable(self, mem: Memtable) -> None:
        """`_write_l0` with the flush events around it (lsm.events)."""
        listeners = self.options.event_listeners
        if not listeners:
            self._write_l0(mem)
            return
        notify(listeners, "on_flush_begin", FlushInfo(len(mem), mem.bytes))
        t0 = time.perf_counter()
        try:
            names = self._write_l0(mem)
        except BaseException as e:
            notify(listeners, "on_flush_end", FlushInfo(len(mem), mem.bytes, (), time.perf_counter() - t0, e))
            raise
        notify(listeners, "on_flush_end", FlushInfo(len(mem), mem.bytes, names, time.perf_counter() - t0))

    def _write_l0(self, mem: Memtable) -> tuple[str, ...]:
        """Write one frozen memtable to L0, commit, swap it into the read path, retire its WAL."""
        tick = self._clock.read()
        spec = self._vs.new_output(None)
        snapshots = self.snapshot_seqs()
        cutoff = self._retention_cutoff(tick)
        done = None
        if (
            self.options.flush_process
            and not self._objects  # the worker rebuilds the memtable from one local segment file
            and mem.bytes >= FLUSH_PROCESS_MIN_BYTES
            and threading.current_thread() is self._flush_thread
        ):
            done = self._flush_in_worker(mem, spec, tick, snapshots, cutoff)
            if done is None:  # the worker could not: flush here, under a fresh name
                spec = self._vs.new_output(None)
        if done is not None:
            outputs, dropped = done
        else:
            dropped = CompactionStats()  # its history_floor: the newest version the flush dropped
            try:
                # on failure flush_rows removes what it wrote: nothing references it yet
                outputs = flush_rows(
                    mem.iter(), spec, tick=tick, snapshots=snapshots, retention_cutoff=cutoff, stats=dropped
                )
            except OSError as e:
                raise self._fail(e) from e
        entries = tuple(SstEntry(name, info) for name, info in outputs)
        try:
            fsync_dir(self._sst_dir)
        except OSError as e:
            self._vs.discard_outputs(entries)
            raise self._fail(e) from e
        watermark = max(mem.max_ts, self._clock.last)

        def edit(m: Manifest) -> Manifest:
            return m.replace(
                l0=entries + m.l0,
                last_seq=max(m.last_seq, mem.max_seq),
                wal_replay_from=max(m.wal_replay_from, mem.next_segment_id),
                clock_watermark=max(m.clock_watermark, watermark),
                history_floor=max(m.history_floor, dropped.history_floor),
                **self._manifest_extras(m),
            )

        try:
            self._vs.commit(edit, lambda m: self._vs.install(m, drop_imm=mem))
        except BaseException as e:
            self._vs.discard_outputs(entries, e)  # kept if a manifest on disk may name them
            raise
        self.flush_bytes_written += sum(e.info.file_size for e in entries)
        self._delete_wal_below(mem.next_segment_id)
        return tuple(e.name for e in entries)

    def _flush_in_worker(self, mem: Memtable, spec: OutputSpec, tick: int, snapshots: tuple[int, ...],
                         cutoff: int | None) -> tuple[list, CompactionStats] | None:
        """`flush_rows` of `mem` in the flush worker process, rebuilt from its WAL segment
        (compaction.flush); None when the worker cannot (its process died, or the segment is not the
        memtable's), and the caller flushes in this thread. An I/O error is the failed state, as here."""
        job = FlushJob(wal_files.segment_path(self._wal_dir, mem.segment_id), len(mem), mem.max_seq, spec,
                       tick, snapshots, cutoff)
        try:
            return run_flush_in_worker(job)
        except (WorkerDied, SegmentMismatch):
            # what a killed worker left half written
            self._vs.delete_files(glob.glob(os.path.join(glob.escape(spec.directory), glob.escape(spec.prefix) + "-*")))
            return None
        except OSError as e:
            raise self._fail(e) from e

    def _fail(self, error: BaseException, published: bool | None = False) -> DbFailedError:
        """Enter the failed state for `error` (an I/O error on the write path); return the error to raise.

        Later writes raise the first failure's error (the ones after it are its consequences)."""
        err = DbFailedError(self.path, error, published)
        err.__cause__ = error
        with self._cv:
            if self._bg_error is None:
                self._bg_error = err
            self._cv.notify_all()
        return err

    def _manifest_extras(self, m: Manifest) -> dict[str, Any]:
        """Fields folded into every writer commit: the seq<->time maps (see lsm.timeline)."""
        return self._timeline.to_manifest()

    def _retention_cutoff(self, tick: int) -> int | None:
        r = self.options.history_retention
        cutoff = tick - r if r else None
        # an open as-of snapshot judges expiry at its own time: keep what had not expired by then
        with self._state_lock:
            snaps = list(self._as_of_snapshots)  # dropped outside the lock: a last reference runs close()
        held = [s.read_ts for s in snaps if not s.closed]
        if held:
            cutoff = min(held) if cutoff is None else min(cutoff, *held)
        return cutoff

    def _delete_wal_below(self, segment_id: int) -> None:
        """Delete the WAL segments (objects) below `segment_id`, once a flush published that replay starts
        there: listed first, then deleted through the version set's deletion rule (the fence asked after
        the listing). On an object store only objects older than the WAL's grace (lsm.wal_object)."""
        # cleanup after a committed flush: a listing that fails leaves the files for the next flush or
        # `lsm gc` (as unlink_quiet does a failed delete), it must not fail the flush that committed
        try:
            if self._objects:  # only objects older than the grace (lsm.wal_object: an idle writer's fence)
                cutoff = self._storage.now() - wal_grace_ms(self.options) / 1000
                mtimes = self._storage.list_mtimes(self._wal_dir)  # one listing gives names and ages
                old = [name for name, mtime in mtimes.items() if mtime < cutoff]
                segments = numbered(self._wal_dir, old, wal_files.SUFFIX)
            else:
                segments = wal_files.list_segments(self._wal_dir)
        except OSError:
            return
        self._vs.delete_files([p for sid, p in segments if sid < segment_id])


def _expiry_overflow(ts: int, ttl: int) -> None:
    raise ValueError(
        f"expiry {ts} + ttl {ttl} = {ts + ttl} ms does not fit a signed 64-bit integer; nothing was written"
    )

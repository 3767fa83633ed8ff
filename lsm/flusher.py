"""The flusher of a handle: frozen memtables to L0 SSTs (LevelDB's ``BuildTable`` and its caller).

The write path freezes a full memtable behind a new WAL segment (lsm.write_path) and tells the flusher
(`frozen`). A flush thread (or, with ``background_flush=False``, the writing thread itself) writes the
oldest frozen memtable to an L0 SST (`flush_rows`, compaction.merge; or in the flush worker process,
compaction.flush, from the memtable's WAL segment, off the writers' GIL), publishes it through the
version set with the new WAL replay point, swaps it into the read path, and only then retires the WAL
segments it covered (lsm.wal_manager). A failure is the handle's failed state (lsm.failure).

Waiting on the hand-off: `Failure.cv` guards the frozen queue as seen here, the stop flag and the failed
state; writers wait on it when more than ``max_immutable_memtables`` are frozen.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from compaction.flush import FlushJob, SegmentMismatch, run_flush_in_worker
from compaction.merge import CompactionStats, OutputSpec, flush_rows
from compaction.worker import WorkerDied
from formats.manifest import Manifest, SstEntry
from lsm.events import FlushInfo, notify

if TYPE_CHECKING:
    from lsm.clock import MonotonicClock
    from lsm.failure import Failure
    from lsm.memtable import Memtable
    from lsm.options import DbOptions
    from lsm.snapshots import SnapshotList
    from lsm.timeline import Timeline
    from lsm.versions import VersionSet
    from lsm.wal_manager import WalManager
    from lsm.write_path import WritePath

# a smaller memtable is flushed in the flush thread even with DbOptions.flush_process: its GIL time is
# short, and the worker's round trip (and its start, the first time) would only delay the flush. The
# worker starts with the first flush that uses it (a program that never writes this much never starts
# it); that flush waits for the start, the writers do not.
FLUSH_PROCESS_MIN_BYTES = 256 << 10


class Flusher:
    """Writes frozen memtables to L0 (module docstring); `flush_bytes_written` counts its SST bytes."""

    def __init__(self, options: DbOptions, versions: VersionSet, wal: WalManager, failure: Failure,
                 writer: WritePath, snapshots: SnapshotList, clock: MonotonicClock, timeline: Timeline) -> None:
        self.options = options
        self.versions = versions
        self.wal = wal
        self.failure = failure
        self.writer = writer
        self.snapshots = snapshots
        self.clock = clock
        self.timeline = timeline
        self.cv = failure.cv
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.on_flush: list[Callable[[], None]] = []  # called after each flush (the compactor's wake-up)
        self.flush_bytes_written = 0
        self.objects = not wal.segments  # the worker rebuilds a memtable from one local segment file

    def start(self) -> None:
        """Start the flush thread (``background_flush``; else the writing thread flushes)."""
        if self.options.background_flush:
            self.thread = threading.Thread(target=self._loop, name="lsm-flush", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        """Stop the flush thread once the frozen memtables are flushed (or the store failed)."""
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()

    # -- the hand-off ---------------------------------------------------------------------------------------
    def frozen(self) -> None:
        """A memtable was frozen (write lock held): flush it in this thread, or wake the flush thread and
        wait while too many are frozen."""
        if self.thread is None:
            self._flush_frozen()
            return
        with self.cv:
            self.cv.notify_all()
            while len(self.versions.state.imm) > self.options.max_immutable_memtables and self.failure.error is None:
                self.cv.wait()

    def wait_flushed(self) -> None:
        """Wait until every frozen memtable is flushed; raise the failed state's error if one failed."""
        with self.cv:
            while self.versions.state.imm and self.failure.error is None:
                self.cv.wait()
        self.failure.raise_if_failed()

    def _loop(self) -> None:
        while True:
            with self.cv:
                while not self.versions.state.imm and not self.stopping:
                    self.cv.wait()
                if not self.versions.state.imm:
                    return
            try:
                self.flush(self.versions.state.imm[-1])
            except BaseException as e:  # noqa: BLE001 - surfaced to writers as the background error
                self.failure.keep(e)  # the first failure is the one to report
                return
            with self.cv:
                self.cv.notify_all()
            for hook in self.on_flush:
                hook()

    def _flush_frozen(self) -> None:
        """background_flush=False: flush every frozen memtable in this thread, oldest first (write lock
        held). A failure is the background error, as it would be in the flush thread."""
        while self.versions.state.imm and self.failure.error is None:
            try:
                self.flush(self.versions.state.imm[-1])
            except BaseException as e:
                self.failure.keep(e)
                raise
        for hook in self.on_flush:
            hook()

    def flush_if_idle(self) -> bool:
        """The idle flush: when the memtable's oldest row is periodic_compaction_interval old, flush it,
        so rows that never fill a memtable (writes stopped) still reach disk and the periodic purge
        bound. Called where the engine checks periodic compaction; True if it flushed."""
        p = self.options.periodic_compaction_interval
        w = self.writer
        if p is None or w.read_only or w.closed:
            return False
        mem = self.versions.state.mem
        if mem.is_empty() or self.clock.read() - mem.min_ts < p:
            return False
        with w.lock:
            if w.closed or self.failure.error is not None:
                return False
            w.check_fence()
            mem = self.versions.state.mem
            if mem.is_empty() or self.clock.read() - mem.min_ts < p:
                return False
            w.rotate()
        self.wait_flushed()
        return True

    # -- one flush ---------------------------------------------------------------------------------------
    def flush(self, mem: Memtable) -> None:
        """Write frozen memtable `mem` to L0 with the flush events around it (lsm.events)."""
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
        vs = self.versions
        tick = self.clock.read()
        spec = vs.new_output(None)
        snapshots = self.snapshots.seqs()
        cutoff = self.snapshots.retention_cutoff(tick)
        done = None
        if (
            self.options.flush_process
            and not self.objects
            and mem.bytes >= FLUSH_PROCESS_MIN_BYTES
            and threading.current_thread() is self.thread
        ):
            done = self._flush_in_worker(mem, spec, tick, snapshots, cutoff)
            if done is None:  # the worker could not: flush here, under a fresh name
                spec = vs.new_output(None)
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
                raise self.failure.fail(e) from e
        entries = tuple(SstEntry(name, info) for name, info in outputs)
        try:
            vs.storage.fsync_dir(vs.sst_dir)
        except OSError as e:
            vs.discard_outputs(entries)
            raise self.failure.fail(e) from e
        watermark = max(mem.max_ts, self.clock.last)
        timeline = self.timeline

        def edit(m: Manifest) -> Manifest:
            return m.replace(
                l0=entries + m.l0,
                last_seq=max(m.last_seq, mem.max_seq),
                wal_replay_from=max(m.wal_replay_from, mem.next_segment_id),
                clock_watermark=max(m.clock_watermark, watermark),
                history_floor=max(m.history_floor, dropped.history_floor),
                **timeline.to_manifest(),
            )

        try:
            vs.commit(edit, lambda m: vs.install(m, drop_imm=mem))
        except BaseException as e:
            vs.discard_outputs(entries, e)  # kept if a manifest on disk may name them
            raise
        self.flush_bytes_written += sum(e.info.file_size for e in entries)
        self.wal.retire_below(mem.next_segment_id)
        return tuple(e.name for e in entries)

    def _flush_in_worker(self, mem: Memtable, spec: OutputSpec, tick: int, snapshots: tuple[int, ...],
                         cutoff: int | None) -> tuple[list, CompactionStats] | None:
        """`flush_rows` of `mem` in the flush worker process, rebuilt from its WAL segment
        (compaction.flush); None when the worker cannot (its process died, or the segment is not the
        memtable's), and the caller flushes in this thread. An I/O error is the failed state, as here."""
        job = FlushJob(self.wal.store.paths.wal(mem.segment_id), len(mem), mem.max_seq, spec, tick, snapshots,
                       cutoff)
        try:
            return run_flush_in_worker(job)
        except (WorkerDied, SegmentMismatch):
            # what a killed worker left half written
            self.versions.delete_files(glob.glob(os.path.join(glob.escape(spec.directory), glob.escape(spec.prefix) + "-*")))
            return None
        except OSError as e:
            raise self.failure.fail(e) from e


__all__ = ["FLUSH_PROCESS_MIN_BYTES", "Flusher"]

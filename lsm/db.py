"""DB: an embedded, time-aware LSM store, composed of the objects that do its work (docs/architecture.md).

    store       storage.paths.DbStore     the database's files: one backend, resolved once, and their names
    versions    lsm.versions.VersionSet   the manifest, live SSTs, pins, commits and the deletion rule
    wal         lsm.wal_manager           the WAL: recovery, the log being written, rotation, retiring
    writer      lsm.write_path            the write lock, seq, clock and THE commit sequence
    flusher     lsm.flusher               frozen memtables to L0 SSTs
    reads       lsm.reads                 point reads and scans over the published state
    time        lsm.time_travel           seq<->time, snapshots at a seq or a time, the change feed
    compactor   lsm.compactor             what to compact, its jobs and their commits
    engine      lsm.engine                what the engine's modules may use of the handle

`DB.open` builds them in that order and recovers: the version set publishes a manifest with bumped epochs
(fencing every earlier handle), the WAL manager replays what no SST holds yet (claiming the next WAL id on
an object store), the replayed rows are flushed to L0 and the old segments retired, and reservations of
bulk loads an earlier handle never committed are abandoned. Every public method below is a call into one
of those objects; the DB keeps nothing of its own but them and its open/closed state.

Locks, in acquisition order: the write lock (writer.lock), the compactor's job lock, the version set's
commit lock, its state lock (versions.lock); the flush hand-off (failure.cv) and the timeline's lock are
leaves (docs/architecture.md, "Owners, callers and locks").
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator
from typing import Any

from compaction.filter import Entry
from compaction.merge import CompactionStats
from compaction.purge_lag import PurgeLag
from formats.manifest import Checkpoint, Manifest
from formats.row import MAX_KEY_LEN, MAX_VALUE_LEN, check_value
from lsm.approx import ApproximateSize, approximate_size
from lsm.checkpoints import Checkpoints
from lsm.clock import MonotonicClock
from lsm.clock_repair import ClockRepair, RepairSurvey
from lsm.clone import clone, release_sources
from lsm.compactor import DbCompactor
from lsm.engine import Engine
from lsm.errors import CheckpointError, FencedError
from lsm.failure import Failure
from lsm.flusher import Flusher
from lsm.follower import Follower
from lsm.ingest import compact_remaps
from lsm.ingest_job import ingest as run_ingest
from lsm.memtable import Memtable
from lsm.options import DbOptions, ReadOptions, WriteOptions, check_ttl
from lsm.readpath import prefix_end
from lsm.reads import ReadPath, check_range
from lsm.remap import IngestStats, Remap
from lsm.remap_store import list_sources, load_remap
from lsm.seq_tracker import Round
from lsm.snapshot import Snapshot
from lsm.snapshots import SnapshotList
from lsm.syskeys import SYSTEM_PREFIX, check_user_key
from lsm.time_travel import TimeTravel
from lsm.timeline import Timeline, parse_time
from lsm.versions import Run, State, VersionSet, prepare_store
from lsm.wal_manager import WalManager
from lsm.write_path import ReadOnlyError, WritePath
from storage import is_attached
from storage.objcache import cache_for
from storage.objstore_config import check_location
from storage.paths import DbStore, open_store


class DB:
    """An embedded, time-aware LSM key-value store on one directory or object-store prefix. Use `DB.open`."""

    # -- open ------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], options: DbOptions | None = None, *, read_only: bool = False,
             checkpoint: str | None = None, follow: bool = False) -> DB:
        """Open (creating if needed) the database at `path` (a directory, or an ``s3://`` / ``memory://``
        URL).

        A writable open fences every earlier handle on the path. ``read_only=True`` opens without
        fencing anyone, replays the WAL in memory only, and refuses writes (for tools). With
        ``checkpoint=id`` (read_only only, else CheckpointError) it reads exactly the state that
        checkpoint named, with no WAL replay (UnknownCheckpointError if it is not live); with ``follow=True``
        (read_only only) it follows the writer (`refresh`; docs/checkpoints.md). A malformed URL (no bucket or key, an unsupported scheme, ``s3:/b`` with one slash) or endpoint
        raises `ObjectStoreConfigError` before anything is created or sent.
        """
        options = options or DbOptions()
        if (checkpoint is not None or follow) and not read_only:
            raise CheckpointError(f"{'a checkpoint' if checkpoint else 'a following reader'} opens with read_only=True")
        if checkpoint is not None and follow:
            raise CheckpointError("a checkpoint is one past state: it cannot be followed")
        path = os.fspath(path)
        # a backend the caller attached (a simulation's) has a scheme of its own: only a user's URL is checked
        path = path if is_attached(path) else check_location(path)
        return cls(open_store(path, options.object_store_options), options, read_only, checkpoint, follow)

    # lsm.DB.clone(src, dst, checkpoint=None, options=None): a new writable store from src's state (lsm.clone)
    clone = staticmethod(clone)

    def __init__(self, store: DbStore, options: DbOptions, read_only: bool = False,
                 checkpoint: str | None = None, follow: bool = False) -> None:
        """Open the database `store` names (`DB.open` resolves a path to it)."""
        self._closed = True
        self.path = store.root
        self.options = options
        self.read_only = read_only
        self.store = store
        # SST ranges an object store serves, kept on local disk if asked (storage.objcache); a directory
        # has no use for it
        d = options.object_cache_dir
        store.storage.cache = cache_for(d, options.object_cache_bytes) if d is not None else None
        prepare_store(store, create=not read_only)
        self._failure = failure = Failure(self.path)
        self._versions = vs = VersionSet(store, options, read_only, lambda: failure.error, failure.fail, checkpoint)
        if not read_only:
            vs.delete_files(vs.store.stale_tmp())
        man = vs.manifest
        self._timeline = timeline = Timeline(man.seq_tracker, man.time_seq, options.time_seq_min_time)
        self._wal = wal = WalManager(store, options, vs, failure, read_only)
        recovered = wal.recover(man, timeline, replay=checkpoint is None and not follow)  # a follower reads it at once
        mem = recovered.mem
        watermark = max(man.clock_watermark, recovered.max_ts)
        self._clock = clock = MonotonicClock(options.clock, watermark, options.max_clock_skew_ms)
        vs.now = clock.read
        self._writer = writer = WritePath(self.path, options, vs, wal, failure, clock, timeline,
                                          max(man.last_seq, mem.max_seq), watermark, read_only)
        if read_only:
            # seq ranges reserved by bulk loads and not committed yet: held back as the manifest says
            writer.reserved = man.seq_reservations
        self._snapshots = snapshots = SnapshotList(vs.lock, options.history_retention)
        self._time = tt = TimeTravel(self.path, self, options, vs, writer, snapshots, clock, timeline, read_only)
        self._reads = reads = ReadPath(self.path, self, vs, writer, clock, tt.as_of_seq)
        tt.reads = reads
        self._flusher = flusher = Flusher(options, vs, wal, failure, writer, snapshots, clock, timeline)
        writer.flusher = tt.flusher = flusher
        self._engine = engine = Engine(self.path, options, vs, failure, writer, reads, snapshots, clock, wal)
        engine.release = self._release
        engine.flusher = flusher
        engine.on_history_advanced = lambda: compact_remaps(self)
        self._compactor: DbCompactor | None = None
        self._checkpoints = Checkpoints(vs, writer, clock)
        self._follower = Follower(store, options, vs, writer, timeline, clock, engine) if follow else None
        vs.open_state(mem, files=not follow)
        self._closed = False
        if read_only:
            if self._follower is not None:
                self._follower.refresh()
                self._follower.start()
            return
        try:
            if not mem.is_empty():
                vs.swap_memtable(Memtable(recovered.last_segment + 1))
                flusher.flush(mem)
            writer.abandon_all()
            next_seg = max(recovered.last_segment + 1, vs.manifest.wal_replay_from)
            # every older segment is flushed or empty: retire them all, so that a fenced handle still
            # appending to one can never have those writes replayed
            wal.retire_below(next_seg)
            vs.state = dataclasses.replace(vs.state, mem=wal.start(next_seg, writer))
            flusher.start()
            self._compactor = engine.compactor = DbCompactor(engine)
            if self._compactor.background is not None:
                flusher.on_flush.append(self._compactor.background.wake)
                self._compactor.background.wake()
        except BaseException:
            self._release()
            raise

    def object_store_stats(self) -> dict[str, int]:
        """Object-store requests this database made, by kind (put, get, list, delete, head), and the
        bytes put and got; all zeros for a local directory (docs/object-store.md)."""
        return self.store.storage.stats()

    def sst_path(self, name: str) -> str:
        """The path of the SST file `name` in this database's ``sst/`` directory."""
        return self.store.paths.sst(name)

    # -- writes ------------------------------------------------------------------------------------
    def put(self, key: bytes, value: bytes, ttl: int | None = None, options: WriteOptions | None = None) -> int:
        """Write `key` = `value`; ttl (ms) overrides DbOptions.default_ttl, NO_TTL disables it. Returns the
        commit's seq. A one-op batch through the commit sequence (lsm.write_path), checked here first:
        this is the write path's hot loop, one call from the caller to the commit."""
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_LEN or key >= SYSTEM_PREFIX:
            check_user_key(key)
        if type(value) is not bytes or len(value) > MAX_VALUE_LEN:
            check_value(value)
        if ttl is not None:
            check_ttl(ttl)
        return self._writer.commit(((key, ttl, value),), options is not None and options.sync)[0]

    def delete(self, key: bytes, options: WriteOptions | None = None) -> int:
        """Write a tombstone for `key` (it carries a ts and no expire_ts). Returns the commit's seq."""
        return self._writer.delete(key, options)

    def write(self, batch: Any, options: WriteOptions | None = None) -> int:
        """Commit a WriteBatch atomically under one seq and one ts. Returns the seq."""
        return self._writer.write(batch, options)

    def flush_wal(self) -> None:
        """Make every write acknowledged so far durable now (RocksDB's ``FlushWAL(sync=true)``): a local
        segment is fdatasynced; an object store's buffered records are written as one WAL object, as
        the group commit does every ``DbOptions.wal_flush_interval_ms`` (needed when that is None)."""
        self._writer.flush_wal()

    def flush(self) -> None:
        """Flush the memtable to an L0 SST and wait until every frozen memtable is flushed."""
        self._writer.check_writable()
        self._writer.rotate_and_wait()

    def reserve_seqs(self, n: int) -> tuple[int, int]:
        """Reserve `n` consecutive seqs for a bulk load (lsm.bulk); return (first seq, the load's ts).

        Freezes the memtable and waits for its flush, so every L0 file lies wholly below or above the
        range; later commits take seqs above it. The range is recorded in the manifest
        (`seq_reservations`) before any later seq can be written, and holds `stable_seq` below it (here
        and for readers of the files) until `commit_bulk` publishes it or `abandon_seqs` gives it up;
        the next writable open abandons what is left. An abandoned range is a gap in the seqs."""
        return self._writer.reserve_seqs(n)

    def abandon_seqs(self, base: int, last: int) -> None:
        """Give up the reserved seqs [base, last] of a bulk load that will not commit: dropped from the
        manifest, so that `stable_seq` (and readers of the files) move past them. Nothing if the range
        is not reserved (the load committed it). A handle that cannot commit any more (failed, fenced,
        closed) keeps holding the range back until the store is reopened, which abandons it."""
        self._writer.abandon_seqs(base, last)

    # -- reads -------------------------------------------------------------------------------------
    @property
    def seq(self) -> int:
        """The last sequence number handed out (to a commit, or reserved by a running bulk load)."""
        return self._writer.seq

    @property
    def stable_seq(self) -> int:
        """The largest seq S such that every seq <= S is committed or can never commit: `seq`, except
        while a bulk load has a reserved range outstanding, which holds it below the range's first seq
        until the load commits or is abandoned (then it jumps over the whole load at once). A reader
        that takes "every seq up to N is final" (a change feed, a replica's frontier) must take N from
        here, not from `seq` (docs/reliability.md, "Which seqs are final")."""
        return self._time.stable_seq()

    def get(self, key: bytes, options: ReadOptions | None = None) -> bytes | None:
        """The value of `key`, or None if it is absent, deleted or expired.

        ReadOptions: `snapshot` reads as of that snapshot, `now` judges expiry at that time."""
        reads = self._reads  # straight to the read path's one frame: this is the point-read hot path
        row = reads.visible(key, None, False, None) if options is None else reads.visible(key, *reads.read_point(options))
        return None if row is None else row[4]

    def get_entry(self, key: bytes, options: ReadOptions | None = None) -> Entry | None:
        """The visible row of `key` with its metadata (seq, ts, expire_ts), or None (ReadOptions as in get)."""
        return self._reads.get_entry(key, options)

    def scan(self, start: bytes | None = None, end: bytes | None = None, reverse: bool = False, *,
             prefix: bytes | None = None, options: ReadOptions | None = None,
             as_of: int | str | None = None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with start <= key < end (and key starting with prefix), in key order.

        as_of (ms or RFC 3339) reads the state as of that time (see `snapshot_at`); ReadOptions as in
        `get` (a snapshot excludes as_of; `now` overrides the expiry time as_of sets)."""
        return self._reads.user_scan(start, end, reverse, prefix, options, as_of, False)

    def scan_entries(self, start: bytes | None = None, end: bytes | None = None, reverse: bool = False, *,
                     prefix: bytes | None = None, options: ReadOptions | None = None,
                     as_of: int | str | None = None) -> Iterator[Entry]:
        """Like `scan`, yielding `Entry` rows with their metadata."""
        return self._reads.user_scan(start, end, reverse, prefix, options, as_of, True)

    # -- snapshots and time ------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Pin the current seq: reads through the snapshot see exactly this state until released."""
        self._reads.check_open()
        return self._time.snapshot()

    def snapshot_seqs(self) -> tuple[int, ...]:
        """Seqs of live snapshots, ascending (what compaction must keep readable)."""
        return self._snapshots.seqs()

    def snapshot_at(self, ts_ms: int | str) -> Snapshot:
        """A snapshot of the state as of `ts_ms` (ms or RFC 3339): exactly the commits with ts <= ts_ms.

        The seq tracker narrows the search, the rows' own commit times decide it (lsm.commit_time).
        Expiry is judged at `ts_ms`. The time must lie within DbOptions.history_retention of now (else
        RetentionError) and before the store's upper (else NotYetCompleteError: a later commit could
        still land at or before it)."""
        self._reads.check_open()
        return self._time.snapshot_at(ts_ms)

    def snapshot_at_seq(self, seq: int, *, read_ts: int | None = None) -> Snapshot:
        """A snapshot of the state exactly as of `seq` (e.g. a remap binding's seq).

        Any seq up to the latest is readable while the commit after it lies within
        DbOptions.history_retention of now (judged from the seq tracker, conservatively); older ones
        raise RetentionError. Expiry is judged at `read_ts` (ms), default now; pass a binding's ts to see
        rows that have expired since.

        A bulk load is one commit at its last seq: a `seq` inside a load's range but below its last seq
        (or inside a range still reserved) reads the state just before the load, and the snapshot's
        `seq` is that of the state it reads (the load's first seq - 1)."""
        self._reads.check_open()
        return self._time.snapshot_at_seq(seq, read_ts)

    def timestamp_for_seq(self, seq: int, round: Round = Round.UP) -> int | None:
        """Approximate commit time (ms, whole seconds) of `seq` from the seq tracker.

        Without an exact entry, Round.UP takes the next tracked seq's time, Round.DOWN the previous
        one's; None when there is none in that direction."""
        self._reads.check_open()
        return self._timeline.timestamp_for_seq(seq, round)

    def seq_tracker_entries(self) -> list[tuple[int, int]]:
        """The seq tracker's (seq, unix second) pairs, oldest first: what timestamp_for_seq and
        seq_for_timestamp interpolate between."""
        self._reads.check_open()
        return self._timeline.tracker_entries()

    def seq_for_timestamp(self, ts_ms: int | str, round: Round = Round.DOWN) -> int | None:
        """The seq tracked at time `ts_ms` (ms or RFC 3339); otherwise the previous (DOWN) or next (UP)."""
        self._reads.check_open()
        return self._timeline.seq_for_timestamp(parse_time(ts_ms), round)

    def changes(self, since: int | str | None = None, *, seq: int | None = None,
                options: ReadOptions | None = None, with_expire_ts: bool = False) -> Iterator[tuple]:
        """(seq, key, value or None, ts) for keys whose latest version is newer than a point, oldest
        change first, one per key (its newest version; None for a delete or an expired row).

        The point is `since` (ms or RFC 3339, mapped through the decaying time bins: it errs towards
        too many changes, never too few) or `seq=` directly. SSTs whose max_seq is not newer are skipped.
        Only final seqs are returned: none above `stable_seq` (a running bulk load holds the feed below
        its range until it commits, then its rows come in one answer, whatever their seqs in the range).
        ReadOptions as in `get`: `now` judges expiry at that time, `include_expired` reports an expired
        row with its value, and `snapshot` ends the changes at its seq instead of the latest.
        `with_expire_ts=True` yields (seq, key, value or None, ts, expire_ts) instead: a delete has no
        expire_ts, a row with a TTL has its own, so an expiry is told from a delete."""
        self._reads.check_open()
        return self._time.changes(since, seq, options, with_expire_ts)

    def time_seq_histogram(self) -> list[tuple[str, int]]:
        """(RFC 3339 bin start, number of updates) oldest first, from the decaying time bins."""
        self._reads.check_open()
        return self._timeline.histogram(self._writer.seq)

    def repair_clock(self, to_ms: int | None = None, *, force: bool = False) -> ClockRepair:
        """Mend a store whose clock watermark is in the future (a far-future clock reading was once
        accepted): every row stamped after `to_ms` is restamped at `to_ms` with its expire_ts moved back as
        much, remap times are clamped likewise, the seq tracker forgets the pairs after it and the time
        bins are reset; then the watermark becomes `to_ms` (or the handle's clock, if later). Seqs and the
        order of versions are unchanged. A full compaction does the rewrite. Returns a
        `lsm.clock_repair.ClockRepair`; with nothing after `to_ms` it changes nothing (docs/time.md).

        `to_ms` defaults to the host's wall clock now, or the newest row committed within the skew guard
        if later (`plan_clock_repair`). A `to_ms` below a row committed within the guard (stamped at most
        DbOptions.max_clock_skew_ms ahead of the host's clock) raises `ClockRepairError` naming what would
        move, unless `force`; one before 1970 always does. Nothing is changed then."""
        return self._time.repair_clock(
            to_ms, force, lambda row_map: self._compactor.compact(full=True, executor="local", row_map=row_map),
            self._engine.forget_source_heads,
        )

    def plan_clock_repair(self, to_ms: int | None = None) -> RepairSurvey:
        """What `repair_clock(to_ms)` would do, changing nothing (a read-only handle may ask): the repair
        time (`to`: the default resolved), the watermark, the rows it would move and, of those, the ones
        committed within the skew guard, which make the repair refuse without force (`refusal()`).
        ClockRepairError for a time before 1970. Reads every row of the SSTs whose ts bounds straddle the
        repair time or the guard's limit."""
        self._reads.check_open()
        return self._time.plan_clock_repair(to_ms)

    def reset_time_seq(self) -> None:
        """Forget the time bins (after a clock mishap); committed to the manifest at once."""
        self._time.reset_time_seq()

    # -- checkpoints (lsm.checkpoints) ---------------------------------------------------------------
    def checkpoint(self, lifetime_ms: int | None = None, name: str | None = None) -> Checkpoint:
        """Flush, then record a durable checkpoint of this state in the manifest: nothing deletes its
        files until `delete_checkpoint`, or until the store's clock is `lifetime_ms` past now. Open it
        with ``DB.open(path, read_only=True, checkpoint=cp.id)``."""
        return self._checkpoints.create(lifetime_ms, name)

    def checkpoints(self) -> list[Checkpoint]:
        """The live checkpoints of the store, oldest first."""
        self._reads.check_open()
        return self._checkpoints.list()

    def refresh(self) -> bool:
        """A following reader (``follow=True``): move to the writer's newest state now; True if it moved."""
        self._reads.check_open()
        if self._follower is None:
            raise CheckpointError(f"{self.path}: refresh() is for a handle opened with follow=True")
        return self._follower.refresh()

    def delete_checkpoint(self, cp_id: str) -> None:
        """Drop checkpoint `cp_id` (UnknownCheckpointError if not live); the files only it kept go."""
        self._checkpoints.delete(cp_id)

    # -- compaction --------------------------------------------------------------------------------
    def compact(self, full: bool = False, executor: str | None = None, *, start: bytes | None = None,
                end: bytes | None = None) -> CompactionStats:
        """Run what the scheduler picks until nothing is due; full=True merges everything into one run.

        `start` and/or `end` (bytes; end exclusive, None unbounded) compact a key range instead, as
        RocksDB's CompactRange: every SST overlapping [start, end) in L0 and the runs is merged (with the
        SSTs overlapping those, so that nothing left out overlaps the output), and the output takes their
        place in the oldest run, where tombstones and expired rows are dropped. Rows still in the
        memtable are not part of it (flush first), as with full=True. A start after end is ValueError.

        executor: None (local, or Spark for jobs of at least DbOptions.spark_offload_min_bytes),
        "local" or "spark". Returns the jobs' CompactionStats (also accumulated in compaction_stats).
        A failing job (e.g. a filter that raises) leaves the database as it was and raises here."""
        self._writer.check_writable()
        if start is None and end is None:
            return self._compactor.compact(full=full, executor=executor)
        check_range(start, end)
        if full:
            raise ValueError("full=True compacts every key: give it or start/end, not both")
        return self._compactor.compact(executor=executor, key_range=(start, end))

    def gc(self, grace_ms: int | None = None) -> list[str]:
        """Delete SST files the manifest does not reference and older than the grace period
        (DbOptions.gc_grace_ms, by the store's clock): leftovers of failed jobs or crashes. Returns their
        names. A fenced handle raises FencedError and deletes nothing (docs/reliability.md)."""
        self._writer.check_writable()
        self._checkpoints.drop_expired()
        release_sources(self._versions, self._clock.read(), self.options.object_store_options)
        return self._compactor.gc(grace_ms)

    @property
    def compaction_stats(self) -> CompactionStats:
        """CompactionStats accumulated over every job this handle ran (background ones included)."""
        return self._compactor.stats if self._compactor is not None else CompactionStats()

    @property
    def compaction_error(self) -> BaseException | None:
        """The error that stopped background compaction, if any (db.compact() raises it afresh)."""
        bg = self._compactor.background if self._compactor is not None else None
        return bg.error if bg is not None else None

    @property
    def purge_lag(self) -> PurgeLag:
        """Cumulative histogram of ms from expiry or delete to physical removal, over every compaction
        ever committed to this database (kept in the manifest; `compaction_stats` is this handle's)."""
        d = self._versions.manifest.purge_lag
        return PurgeLag.from_dict(d) if d is not None else PurgeLag()

    @property
    def user_bytes_written(self) -> int:
        """Bytes of user keys and values this handle committed."""
        return self._writer.user_bytes_written

    @property
    def flush_bytes_written(self) -> int:
        """Bytes of the L0 SSTs this handle's flushes wrote."""
        return self._flusher.flush_bytes_written

    def write_amplification(self) -> float:
        """Bytes written to SSTs (flushes and compactions) per byte of user keys and values written."""
        if not self.user_bytes_written:
            return 0.0
        return (self.flush_bytes_written + self.compaction_stats.bytes_out) / self.user_bytes_written

    # -- reclocked ingest (lsm.ingest, lsm.bulk, lsm.remap) -----------------------------------------
    def ingest(self, source: Any, name: str, max_records: int | None = None, batch_records: int = 10_000,
               ttl_base: str = "commit", *, engine: str = "stream", spark: Any = None, master: str | None = None,
               tasks: int | None = None, sync: bool = True, progress: Callable[[IngestStats], None] | None = None,
               should_stop: Callable[[], bool] | None = None, tx_order: str = "arrival",
               times: str = "store") -> IngestStats:
        """Apply the records of `source` (lsm.sources.Source) beyond the durable frontier of remap `name`,
        exactly once: each batch of up to `batch_records` is one atomic commit of its rows and its binding.

        ttl_base "commit" counts record TTLs from the commit ts, "event" from the record's event_ts.
        times "store" stamps each batch with the DB's clock; "source" with the source's own progress (a
        `lsm.sources.ProgressSource`): records with event_ts below it commit at its time - 1, and from
        then on the source's commits drive the store's clock (other writes get ClockError).
        `progress(stats)` runs after each batch; `should_stop()` is asked before each. Returns
        lsm.IngestStats(records, batches, frontier). See lsm.ingest for the rules.

        tx_order "arrival" makes a transaction visible once it is complete, "commit" once it and every
        transaction whose end marker came earlier are (lsm.ingest_tx).

        engine "local" (threads of this process) or "spark" (`spark=` session or `master=` URL) runs a bulk
        load instead: `tasks` slices written to SSTs in parallel, committed as ONE batch (lsm.bulk)."""
        return run_ingest(
            self, source, name, engine=engine, max_records=max_records, batch_records=batch_records,
            ttl_base=ttl_base, spark=spark, master=master, tasks=tasks, sync=sync, progress=progress,
            should_stop=should_stop, tx_order=tx_order, times=times,
        )

    def remap(self, name: str) -> Remap:
        """The lsm.Remap of source `name` (its bindings, frontier, as-of lookups); UnknownSourceError if
        no ingest wrote it. Its `upper` is the store's (`snapshot_at` answers below the same time)."""
        self._reads.check_open()
        upper, _seq = self._time.complete_upto()  # read first: the remap read after it holds every binding below
        return load_remap(self, name, upper=upper)

    def sources(self) -> list[str]:
        """Names of the sources ingested into this database, ascending."""
        self._reads.check_open()
        return list_sources(self)

    # -- introspection -----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the handle is closed (reads and writes then raise ClosedError)."""
        return self._closed

    @property
    def failure(self) -> BaseException | None:
        """Why writes are refused (the failed state's `DbFailedError`, or a flush error), else None."""
        return self._failure.error

    @property
    def engine(self) -> Engine:
        """The engine's internal services (compaction, ingest, the WAL lock); not a user API."""
        return self._engine

    @property
    def manifest(self) -> Manifest:
        """The current manifest (the LSM shape)."""
        return self._versions.manifest

    def approximate_size(self, start: bytes | None = None, end: bytes | None = None, *,
                         include_memtables: bool = True) -> ApproximateSize:
        """Estimated bytes of the keys in [start, end) (None: unbounded), RocksDB's GetApproximateSizes:
        the stored size of the SSTs' data blocks that can hold keys of the range, from their block
        indexes (no data block read; block-grained, every stored version counted), and with
        `include_memtables` the unflushed versions in the range. An `lsm.approx.ApproximateSize`."""
        self._reads.check_open()
        check_range(start, end)
        return self._versions.pinned(lambda st: approximate_size(st, start, end, include_memtables))

    def lsm_shape(self) -> dict[str, Any]:
        """The current shape, for tools and tests: memtable rows, immutable memtables, L0 SST names
        (newest first) and each sorted run's SST names (newest run first)."""
        return self._versions.shape()

    # -- close -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush the memtable, record the clock watermark, stop threads, release files. Idempotent.

        In the failed state it writes nothing and just releases; an I/O error during close raises
        DbFailedError after everything is released. A handle fenced before its object-store WAL could
        write what it buffered raises FencedError once released (docs/reliability.md)."""
        if self._closed:
            return
        try:
            if self._compactor is not None:
                self._compactor.stop()
            if not self.read_only and self._failure.error is None:
                for hook in self._engine.on_close:
                    hook()
                self._writer.rotate_and_wait()
                # a reading, not the last commit's time: a read-only handle opened later is complete up
                # to it (no later commit can be stamped below it), see TimeTravel.complete_upto
                watermark = self._clock.read()
                timeline = self._timeline
                self._versions.commit(
                    lambda m: m.replace(clock_watermark=max(m.clock_watermark, watermark), **timeline.to_manifest())
                )
        except FencedError:
            pass
        finally:
            self._release()

    def _release(self) -> None:
        """Stop the threads and close every file this handle holds, whatever fails on the way; then raise
        what the WAL's close reported (an I/O error of its last write, or writes a fence stranded)."""
        failure: BaseException | None = None
        try:
            if self._compactor is not None:
                self._compactor.stop()
            if self._follower is not None:
                self._follower.stop()
        finally:
            self._flusher.stop()
            self._wal.stop_releaser()
            failure = self._wal.close(self._first_failure)
            self._versions.close()
            self._closed = self._writer.closed = self._reads.closed = True
        if failure is not None:
            raise failure

    def _first_failure(self, error: OSError) -> BaseException | None:
        """Enter the failed state for `error`; the error to raise from close if it is the first failure."""
        err = self._failure.fail(error)
        return err if self._failure.error is err else None

    def __enter__(self) -> DB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DB({self.path!r}, seq={self._writer.seq})"


__all__ = ["DB", "Engine", "Entry", "ReadOnlyError", "Run", "State", "prefix_end"]

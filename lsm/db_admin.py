"""The DB's compaction, ingest and introspection methods (part of `lsm.db.DB`; see lsm/db_time.py on
the mixin split). Each is a thin call into the module that owns the work: lsm.compactor, lsm.ingest,
lsm.remap_store, lsm.versions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from compaction.merge import CompactionStats, OutputSpec
from compaction.purge_lag import PurgeLag
from formats.manifest import Manifest, SstEntry
from lsm import bulk as bulk_mod
from lsm import ingest as ingest_mod
from lsm.approx import ApproximateSize, approximate_size
from lsm.errors import RetentionError
from lsm.fsutil import fsync_dir
from lsm.remap import IngestStats, Remap
from lsm.remap_store import list_sources, load_remap
from lsm.seq_tracker import Round
from lsm.snapshot import Snapshot

if TYPE_CHECKING:
    from lsm.db import Engine


class AdminMixin:
    """Compaction, reclocked ingest and introspection of `lsm.db.DB`."""

    # -- compaction --------------------------------------------------------------------------------
    def compact(
        self,
        full: bool = False,
        executor: str | None = None,
        *,
        start: bytes | None = None,
        end: bytes | None = None,
    ) -> CompactionStats:
        """Run what the scheduler picks until nothing is due; full=True merges everything into one run.

        `start` and/or `end` (bytes; end exclusive, None unbounded) compact a key range instead, as
        RocksDB's CompactRange: every SST overlapping [start, end) in L0 and the runs is merged (with the
        SSTs overlapping those, so that nothing left out overlaps the output), and the output takes their
        place in the oldest run, where tombstones and expired rows are dropped. Rows still in the
        memtable are not part of it (flush first), as with full=True. A start after end is ValueError.

        executor: None (local, or Spark for jobs of at least DbOptions.spark_offload_min_bytes),
        "local" or "spark". Returns the jobs' CompactionStats (also accumulated in compaction_stats).
        A failing job (e.g. a filter that raises) leaves the database as it was and raises here."""
        self._check_writable()
        if start is None and end is None:
            return self._compactor.compact(full=full, executor=executor)
        for name, key in (("start", start), ("end", end)):
            if key is not None and type(key) is not bytes:
                raise TypeError(f"{name} must be bytes or None, not {type(key).__name__}")
        if full:
            raise ValueError("full=True compacts every key: give it or start/end, not both")
        if start is not None and end is not None and start > end:
            raise ValueError(f"start {start!r} is after end {end!r}")
        return self._compactor.compact(executor=executor, key_range=(start, end))

    @property
    def compaction_stats(self) -> CompactionStats:
        """CompactionStats accumulated over every job this handle ran (background ones included)."""
        return self._compactor.stats if self._compactor is not None else CompactionStats()

    @property
    def failure(self) -> BaseException | None:
        """Why writes are refused (the failed state's `DbFailedError`, or a flush error), else None."""
        return self._bg_error

    @property
    def compaction_error(self) -> BaseException | None:
        """The error that stopped background compaction, if any (db.compact() raises it afresh)."""
        bg = self._compactor.background if self._compactor is not None else None
        return bg.error if bg is not None else None

    @property
    def purge_lag(self) -> PurgeLag:
        """Cumulative histogram of ms from expiry or delete to physical removal, over every compaction
        ever committed to this database (kept in the manifest; `compaction_stats` is this handle's)."""
        d = self._vs.manifest.purge_lag
        return PurgeLag.from_dict(d) if d is not None else PurgeLag()

    def write_amplification(self) -> float:
        """Bytes written to SSTs (flushes and compactions) per byte of user keys and values written."""
        if not self.user_bytes_written:
            return 0.0
        written = self.flush_bytes_written + self.compaction_stats.bytes_out
        return written / self.user_bytes_written

    def gc(self, grace_ms: int | None = None) -> list[str]:
        """Delete SST files the manifest does not reference and older than the grace period
        (DbOptions.gc_grace_ms, wall time): leftovers of failed jobs or crashes. Returns their names."""
        self._check_writable()
        return self._compactor.gc(grace_ms)

    # -- reclocked ingest (lsm.ingest, lsm.remap) -----------------------------------------------------
    def ingest(
        self,
        source: Any,
        name: str,
        max_records: int | None = None,
        batch_records: int = 10_000,
        ttl_base: str = "commit",
        *,
        engine: str = "stream",
        spark: Any = None,
        master: str | None = None,
        tasks: int | None = None,
        sync: bool = True,
        progress: Callable[[IngestStats], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        tx_order: str = "arrival",
        times: str = "store",
    ) -> IngestStats:
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
        if engine != "stream":
            if engine in ("local", "spark"):
                if max_records is not None:
                    raise ValueError("max_records applies to engine='stream' only: a bulk load takes everything")
                if times != "store":
                    raise ValueError("times='source' applies to engine='stream' only: a bulk load commits at one time")
                return bulk_mod.bulk_ingest(
                    self, source, name, engine=engine, spark=spark, master=master, tasks=tasks, ttl_base=ttl_base,
                    tx_order=tx_order,
                )
            raise ValueError(f"unknown ingest engine {engine!r}: use 'stream', 'local' or 'spark'")
        if tasks is not None:
            raise ValueError("tasks= applies to engine='local' or 'spark' only")
        if spark is not None or master is not None:
            raise ValueError("spark= and master= apply to engine='spark' only")
        return ingest_mod.ingest(
            self, source, name, max_records=max_records, batch_records=batch_records, ttl_base=ttl_base,
            sync=sync, progress=progress, should_stop=should_stop, tx_order=tx_order, times=times,
        )

    def bulk_output_spec(self) -> OutputSpec:
        """Where and how a bulk load writes its SSTs (tasks add attempt-unique suffixes to the prefix)."""
        self._check_writable()
        return self._vs.output_spec(f"{self._vs.alloc_ids():020d}-bulk", self.options.target_sst_bytes)

    def commit_bulk(self, entries: list[SstEntry], base: int, last: int, ts: int) -> None:
        """Commit a bulk load's SSTs (seqs in [base, last], from `reserve_seqs`; newest first) in ONE
        manifest edit, placed in L0 in seq order (lsm.bulk.place_bulk; BulkLoadConflictError if it cannot
        be). Pauses compaction for the edit, so none can commit across it."""
        self._check_writable()
        try:
            fsync_dir(self._sst_dir)
        except OSError as e:
            raise self._fail(e) from e
        held = (base, last)
        with self._compactor.exclusive():

            def edit(m: Manifest) -> Manifest:
                # the reservation becomes a committed load: one commit at `last` for readers of history
                loads = tuple(r for r in m.bulk_loads if r[1] > m.history_floor) + (held,)
                return m.replace(
                    l0=bulk_mod.place_bulk(m, entries, base, last),
                    last_seq=max(m.last_seq, last),
                    clock_watermark=max(m.clock_watermark, ts),
                    seq_reservations=tuple(r for r in m.seq_reservations if r != held),
                    bulk_loads=loads,
                    **self._manifest_extras(m),
                )

            def installed(m: Manifest) -> None:
                self._vs.install(m)
                self._release_reservation(held)  # after the install: stable_seq never runs ahead of reads

            self._vs.commit(edit, installed)

    def remap(self, name: str) -> Remap:
        """The lsm.Remap of source `name` (its bindings, frontier, as-of lookups); UnknownSourceError if
        no ingest wrote it. Its `upper` is the store's (`snapshot_at` answers below the same time)."""
        self._check_open()
        upper, _seq = self._complete_upto()  # read first: the remap read after it holds every binding below
        return load_remap(self, name, upper=upper)

    def sources(self) -> list[str]:
        """Names of the sources ingested into this database, ascending."""
        self._check_open()
        return list_sources(self)

    def snapshot_at_seq(self, seq: int, *, read_ts: int | None = None) -> Snapshot:
        """A snapshot of the state exactly as of `seq` (e.g. a remap binding's seq).

        Any seq up to the latest is readable while the commit after it lies within
        DbOptions.history_retention of now (judged from the seq tracker, conservatively); older ones
        raise RetentionError. Expiry is judged at `read_ts` (ms), default now; pass a binding's ts to see
        rows that have expired since.

        A bulk load is one commit at its last seq: a `seq` inside a load's range but below its last seq
        (or inside a range still reserved) reads the state just before the load, and the snapshot's
        `seq` is that of the state it reads (the load's first seq - 1)."""
        self._check_open()
        if type(seq) is not int:
            raise TypeError(f"seq must be an int, not {type(seq).__name__}")
        if read_ts is not None and type(read_ts) is not int:
            raise TypeError(f"read_ts must be int ms, not {type(read_ts).__name__}")
        with self._state_lock:
            if not 0 <= seq <= self._seq:
                raise ValueError(f"{self.path}: seq {seq} is not in 0..{self._seq}")
            seq = self._before_partial_load(seq)
            if seq < self._seq:
                now = self._clock.read()
                keep = self.options.history_retention
                after = self._timeline.timestamp_for_seq(seq + 1, Round.DOWN)  # <= the next commit's ts
                if after is None or after <= now - keep or (read_ts is not None and read_ts <= now - keep):
                    raise RetentionError(
                        f"{self.path}: cannot read as of seq {seq}: the database keeps history back to "
                        f"{now - keep} ms only (history_retention={keep} ms; the commit after seq {seq} is "
                        f"known to be no later than {after} ms)"
                    )
            self._snapshots[seq] += 1
            snap = Snapshot(self, seq, read_ts=read_ts, release=self._release_snapshot)
            if read_ts is not None:
                self._as_of_snapshots.add(snap)
        return snap

    def _before_partial_load(self, seq: int) -> int:
        """`seq`, or the seq just before the bulk load whose range holds it when the state as of `seq`
        would show part of the load (a committed load below its last seq, any seq of a reserved range)."""
        for first, last in self._vs.manifest.bulk_loads:
            if first <= seq < last:
                return first - 1
        for first, last in self._reserved:
            if first <= seq <= last:
                return first - 1
        return seq

    # -- introspection -----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once the handle is closed (reads and writes then raise ClosedError)."""
        return self._closed

    @property
    def engine(self) -> Engine:
        """The engine's internal services (compaction, ingest, the WAL lock); not a user API."""
        return self._engine

    @property
    def manifest(self) -> Manifest:
        """The current manifest (the LSM shape)."""
        return self._vs.manifest

    def lsm_shape(self) -> dict[str, Any]:
        """The current shape, for tools and tests: memtable rows, immutable memtables, L0 SST names
        (newest first) and each sorted run's SST names (newest run first)."""
        st = self._vs.state
        return {
            "memtable_rows": len(st.mem),
            "immutable_memtables": len(st.imm),
            "l0": [e.name for e, _ in st.l0],
            "runs": [[e.name for e in run.record.ssts] for run in st.runs],
        }

    def approximate_size(
        self, start: bytes | None = None, end: bytes | None = None, *, include_memtables: bool = True
    ) -> ApproximateSize:
        """Estimated bytes of the keys in [start, end) (None: unbounded), RocksDB's GetApproximateSizes:
        the stored size of the SSTs' data blocks that can hold keys of the range, from their block
        indexes (no data block read; block-grained, every stored version counted), and with
        `include_memtables` the unflushed versions in the range. An `lsm.approx.ApproximateSize`."""
        self._check_open()
        for name, key in (("start", start), ("end", end)):
            if key is not None and type(key) is not bytes:
                raise TypeError(f"{name} must be bytes or None, not {type(key).__name__}")
        if start is not None and end is not None and start > end:
            raise ValueError(f"start {start!r} is after end {end!r}")
        st = self._vs.pin()
        try:
            return approximate_size(st, start, end, include_memtables)
        finally:
            self._vs.unpin(st.gen)

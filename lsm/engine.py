"""The handle's services for the engine's own modules (reached as ``db.engine``; not a user API): the
`CompactionHost` of lsm.compactor and the `SystemRowsHost` of lsm.remap_store and lsm.ingest, built from
the parts a DB is made of, so that no module touches another's private state.

Every method is safe to call from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from lsm.errors import DbFailedError
from lsm.ingest_state import NOT_READ, SourceState

if TYPE_CHECKING:
    from compaction.output import OutputSpec
    from formats.manifest import SstEntry
    from lsm.clock import MonotonicClock
    from lsm.compactor import DbCompactor
    from lsm.failure import Failure
    from lsm.flusher import Flusher
    from lsm.options import DbOptions
    from lsm.reads import ReadPath
    from lsm.snapshots import SnapshotList
    from lsm.versions import VersionSet
    from lsm.wal_manager import WalManager
    from lsm.write_path import WritePath


class Engine:
    """What the engine's modules may use of one handle (module docstring)."""

    def __init__(self, path: str, options: DbOptions, versions: VersionSet, failure: Failure, writer: WritePath,
                 reads: ReadPath, snapshots: SnapshotList, clock: MonotonicClock, wal: WalManager) -> None:
        self.path = path
        self.options = options
        self.versions = versions
        self.wal = wal
        self._failure = failure
        self._writer = writer
        self._reads = reads
        self._snapshots = snapshots
        self._clock = clock
        self._sources: dict[str, SourceState] = {}  # per source name (lsm.ingest_state)
        self.flusher: Flusher | None = None  # a writable handle's
        self.compactor: DbCompactor | None = None  # a writable handle's compaction driver
        self.on_history_advanced: Callable[[], None] | None = None  # compacts the remaps (lsm.ingest)
        self.on_close: list[Callable[[], None]] = []  # run by close() before its final flush
        self.release: Callable[[], None] | None = None  # the DB's release of its threads and files

    @property
    def closed(self) -> bool:
        """Is the DB closed?"""
        return self._reads.closed

    @property
    def failure(self) -> BaseException | None:
        """The failed-state (or flush) error refusing writes, else None."""
        return self._failure.error

    def now(self) -> int:
        """The DB clock's current time (ms; never goes backwards)."""
        return self._clock.read()

    def clock_driver(self) -> str | None:
        """The source whose times drive this handle's clock (an ingest with times="source"), or None."""
        return self._clock.driver

    def source_state(self, name: str) -> SourceState:
        """The ingest state of source `name` on this handle (lsm.ingest_state), created on first use."""
        with self.versions.lock:
            st = self._sources.get(name)
            if st is None:
                st = self._sources[name] = SourceState()
            return st

    def forget_source_heads(self) -> None:
        """Drop every cached remap head: they are read again (after a clock repair moved their times)."""
        for st in list(self._sources.values()):
            with st.lock:
                st.head = NOT_READ

    def check_writable(self) -> None:
        """Raise ClosedError / ReadOnlyError / the failed-state error if writes are refused."""
        self._writer.check_writable()

    def fail(self, error: BaseException, published: bool | None = False) -> DbFailedError:
        """Enter the failed state for I/O error `error`; return the `DbFailedError` to raise."""
        return self._failure.fail(error, published)

    def retention_cutoff(self, tick: int) -> int | None:
        """The expiry time before which a flush or compaction at `tick` may drop expired rows."""
        return self._snapshots.retention_cutoff(tick)

    def snapshot_seqs(self) -> tuple[int, ...]:
        """Seqs of live snapshots, ascending."""
        return self._snapshots.seqs()

    def flush_if_idle(self) -> bool:
        """The idle flush (lsm.flusher.Flusher.flush_if_idle); True if it flushed."""
        return self.flusher is not None and self.flusher.flush_if_idle()

    def history_advanced(self) -> None:
        """A compaction or a flush advanced the history floor: compact every source's remap to the history
        window's start (lsm.ingest.compact_remaps)."""
        if self.on_history_advanced is not None:
            self.on_history_advanced()

    def commit_rows(
        self, rows_at: Callable[[int, int], tuple[list[tuple], int]], sync: bool, at: tuple[str, int] | None = None
    ) -> tuple[int, int]:
        """Commit the (key, expire_ts, value) rows ``rows_at(ts, seq)`` builds under one seq and ts, system
        keys allowed; returns (seq, ts). `at` = (source, ts): at the source's own time. The commit
        sequence of lsm.write_path."""
        self._writer.check_writable()
        return self._writer.commit(sync=sync, rows_at=rows_at, at=at)

    def bulk_output_spec(self) -> OutputSpec:
        """Where and how a bulk load writes its SSTs (tasks add attempt-unique suffixes to the prefix)."""
        self._writer.check_writable()
        vs = self.versions
        return vs.output_spec(f"{vs.alloc_ids():020d}-bulk", self.options.target_sst_bytes)

    def reserve_seqs(self, n: int) -> tuple[int, int]:
        """`DB.reserve_seqs`: seqs for a bulk load (lsm.write_path.WritePath.reserve_seqs)."""
        return self._writer.reserve_seqs(n)

    def abandon_seqs(self, base: int, last: int) -> None:
        """`DB.abandon_seqs`: give up a bulk load's reserved seqs."""
        self._writer.abandon_seqs(base, last)

    def commit_bulk(self, entries: list[SstEntry], base: int, last: int, ts: int) -> None:
        """Commit a bulk load's SSTs in one manifest edit (lsm.write_path.WritePath.commit_reserved),
        compaction paused meanwhile so that no job commits across the load's seq range."""
        if self.compactor is None:
            self._writer.check_writable()  # a read-only handle has no compactor: ReadOnlyError
        with self.compactor.exclusive():  # type: ignore[union-attr]
            self._writer.commit_reserved(entries, base, last, ts)

    def scan_raw(
        self, start: bytes, end: bytes, reverse: bool = False, max_seq: int | None = None, entries: bool = False
    ) -> Iterator:
        """(key, value) rows in [start, end) as of `max_seq` (None: latest), system keys and expired rows
        included (for the engine's own rows, e.g. the remap); `Entry` rows (with seq and ts) if `entries`."""
        return self._reads.scan(start, end, reverse, None, max_seq, True, None, entries)

    def segment_lock_held(self) -> bool:
        """Whether the writer holds its WAL segment flock now (lsm.wal_lock)."""
        return self._writer.segment_lock_held()

    def crash(self) -> None:
        """Drop the handle as a killed process would (for tests and simulations): its WAL writes nothing
        more (no final sync, no buffered object, not even at interpreter exit), no manifest is committed,
        threads stop and files are released."""
        self.wal.abandon()
        self._failure.keep(DbFailedError(self.path, OSError("the handle was dropped as after a crash"), False))
        if self.release is not None:
            self.release()


__all__ = ["Engine"]

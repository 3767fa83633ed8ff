"""The WAL of one handle, on either backend (Pebble's wal.Manager): recover it at open, write to it,
rotate it with the memtable, retire what a flush covered, close it.

The log takes the form its backend allows (the one place that asks, through the backend's `appends`):

* a directory: one segment file per memtable, appended with one write(2) a record and locked with the
  fencing protocol's flock (lsm.wal: `WalWriter`; lsm.wal_lock drops the lock when idle);
* an object store: immutable, group-committed WAL objects, one writer for every memtable, fenced by
  claiming the next id (lsm.wal_object: `ObjectWal`).

Replay is lsm.wal_replay's, the same for open, the history reader and inspection. Retired segments are
deleted through the version set's deletion rule (`VersionSet.delete_files`): listed first, then the
fence is asked; an object-store WAL keeps objects until they are older than its grace (`wal_bound`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

from formats.manifest import Manifest
from lsm.errors import FencedError
from lsm.memtable import Memtable
from lsm.wal import WalWriter
from lsm.wal_lock import IdleReleaser, WriterHost
from lsm.wal_object import ObjectWal, wal_bound, wal_grace_ms
from lsm.wal_object import claim as claim_wal_id
from lsm.wal_replay import live_segments, read_segments
from storage.paths import DbStore, wal_ids

if TYPE_CHECKING:
    from lsm.failure import Failure
    from lsm.options import DbOptions
    from lsm.timeline import Timeline
    from lsm.versions import VersionSet


@dataclasses.dataclass
class Recovered:
    """What an open's replay found: the memtable of unflushed rows, the newest ts of any record, and
    the id of the last segment it read (or the one before the replay point)."""

    mem: Memtable
    max_ts: int
    last_segment: int


class WalManager:
    """The WAL of one handle (module docstring). `writer` is the log being appended to (None until
    `start`, and for a read-only handle)."""

    def __init__(self, store: DbStore, options: DbOptions, versions: VersionSet, failure: Failure,
                 read_only: bool) -> None:
        self.store = store
        self.options = options
        self.versions = versions
        self.failure = failure
        self.read_only = read_only
        self.segments = store.storage.appends  # a segment file per memtable (else WAL objects)
        self.writer: WalWriter | ObjectWal | None = None
        self.releaser: IdleReleaser | None = None
        self._claim_sent: float | None = None  # when the open's claim was sent (the writer's first anchor)
        self.unacknowledged: set[int] = set()  # seqs of sync writes whose WAL object write raised
        self.abandoned = False  # dropped as after a crash: nothing is written, nothing reported

    # -- open ------------------------------------------------------------------------------------------
    def recover(self, manifest: Manifest, timeline: Timeline, replay: bool = True) -> Recovered:
        """Replay the unflushed records into a memtable (and the seq<->time maps); nothing with `replay`
        False (a checkpoint: its version is the whole state, lsm.checkpoints). A writable open on an
        object store first claims the next WAL id, fencing the writer before it; on a directory it reads
        each segment under the exclusive flock, waiting out an append whose fence check passed before
        the open published its epoch."""
        if not replay:
            return Recovered(Memtable(manifest.wal_replay_from - 1), 0, manifest.wal_replay_from - 1)
        segments = live_segments(self.store, manifest.wal_replay_from)
        if not self.segments and not self.read_only:
            segments = self._claim(manifest, segments)
        last = segments[-1][0] if segments else manifest.wal_replay_from - 1
        mem = Memtable(last)
        max_ts = 0
        for seg in read_segments(self.store, segments, self.options.wal_recovery_mode, exclusive=not self.read_only):
            for rec in seg.records:
                if rec.ts > max_ts:
                    max_ts = rec.ts
                if rec.seq <= manifest.last_seq:
                    continue
                for row in rec.rows:
                    mem.add(row)
                if rec.ts >= timeline.next_ms:
                    timeline.on_commit(rec.seq, rec.ts)
        return Recovered(mem, max_ts, last)

    def _claim(self, manifest: Manifest, segments: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """Claim the WAL object id after the last one there with an empty object: the writer we fence
        fails to write it. If it wrote that id first, list again and claim the next. Returns the objects
        to replay, the claimed one last (it is empty).

        An empty claim has the same bytes whoever writes it, so a newer opener that listed before our
        claim landed may have claimed the same id and taken ours for its own; it published its epoch
        before it listed, so reading the manifest after the claim finds it, and we are fenced."""
        vs = self.versions
        while True:
            nxt = max(segments[-1][0] + 1 if segments else 0, manifest.wal_replay_from)
            # the WAL writer's first anchor (lsm.wal_object): an owner after us can claim an id of ours
            # only once it has seen this claim
            self._claim_sent = self.store.storage.clock.monotonic()
            try:
                claim_wal_id(self.store, nxt)
            except FileExistsError:
                # taken by the writer we fence (list again and replay it), or by a newer opener, which
                # published its epoch before it listed: then we are the one fenced, and must not claim
                # the next id (that would fence the newer owner)
                if vs.fenced_on_store():
                    raise FencedError(f"{self.store.root}: another handle opened this database while this one did") from None
                segments = live_segments(self.store, manifest.wal_replay_from)
                continue
            if vs.fenced_on_store():
                raise FencedError(f"{self.store.root}: another handle opened this database while this one did")
            return [*segments, (nxt, self.store.paths.wal(nxt))]

    def start(self, next_segment: int, host: WriterHost) -> Memtable:
        """Start writing at segment `next_segment` (past one a handle we just fenced rotated into) and
        return the first memtable of the handle. `host` serves the idle release of a segment lock."""
        while True:
            try:
                self.writer = self._new_writer(next_segment)
                break
            except FileExistsError:  # a handle we just fenced rotated into it: skip past
                next_segment += 1
        if self.segments:  # an object-store WAL holds no lock (fencing by create-if-absent)
            self.releaser = IdleReleaser(host)
        return Memtable(next_segment)

    def _new_writer(self, segment_id: int) -> WalWriter | ObjectWal:
        if self.segments:
            return WalWriter(self.store, segment_id)
        o = self.options
        return ObjectWal(self.store, segment_id, o.wal_flush_interval_ms, o.wal_flush_bytes,
                         on_fenced=self.versions.mark_fenced, check_fence=self.versions.fenced_on_store,
                         bound=wal_bound(o), anchor=self._claim_sent, on_broken=self.failure.fail)

    # -- writing ---------------------------------------------------------------------------------------
    def hold(self, wal: WalWriter | ObjectWal) -> None:
        """Take the segment's shared flock (under the write lock), then wake the idle releaser, which
        sleeps while the lock is not held (`lsm.wal_lock.IdleReleaser`)."""
        wal.hold()
        if self.releaser is not None:
            self.releaser.wake()

    def rotate(self, old: Memtable, fail: Callable[[OSError], BaseException]) -> Memtable:
        """The memtable after `old` (write lock held). A directory's log moves to the next segment file,
        for the new memtable alone. An object-store log goes on as it is: the new memtable starts at the
        id the group commit writes next, which may also hold the old memtable's last records (replay
        skips records at or below the manifest's last_seq), so a rotation costs no PUT of its own."""
        wal = self.writer
        if not self.segments:
            broken = wal.broken
            if broken is not None:  # a group commit failed: its object may or may not exist
                raise fail(broken) if isinstance(broken, OSError) else broken
            new = Memtable(wal.next_id)
            old.next_segment_id = new.segment_id
            return new
        try:
            new_wal = self._new_writer(old.segment_id + 1)
        except FileExistsError:
            raise FencedError(
                f"{self.store.root}: WAL segment {old.segment_id + 1} belongs to another handle; this one is fenced"
            ) from None
        except OSError as e:
            raise fail(e) from e
        self.writer = new_wal
        wal.close()
        return Memtable(new_wal.segment_id)

    def sync_now(self) -> None:
        """Make everything appended durable: fdatasync a segment, write an object store's buffer."""
        self.writer.sync()

    def release_if_idle(self, idle: Callable[[], bool]) -> None:
        """Drop the segment lock if the writer holds it and `idle()` (asked under the caller's write
        lock) says no commit came since."""
        wal = self.writer
        if wal is not None and wal.held and idle():
            wal.release()

    @property
    def lock_held(self) -> bool:
        """Whether the writer holds its segment flock now."""
        wal = self.writer
        return wal is not None and wal.held

    # -- retiring ----------------------------------------------------------------------------------------
    def retire_below(self, segment_id: int) -> None:
        """Delete the segments (objects) below `segment_id`, once a flush published that replay starts
        there: listed first, then deleted through the version set's deletion rule. On an object store only
        objects older than the WAL's grace (lsm.wal_object: a slow or idle writer's fence)."""
        storage = self.store.storage
        # cleanup after a committed flush: a listing that fails leaves the files for the next flush or
        # `lsm gc`, it must not fail the flush that committed
        try:
            if self.segments:
                segments = wal_ids(storage, self.store.paths)
            else:
                cutoff = storage.now() - wal_grace_ms(self.options) / 1000
                mtimes = storage.list_mtimes(self.store.paths.wal_dir)  # one listing gives names and ages
                segments = wal_ids(storage, self.store.paths, [n for n, mtime in mtimes.items() if mtime < cutoff])
        except OSError:
            return
        self.versions.delete_files([p for sid, p in segments if sid < segment_id])

    # -- closing -----------------------------------------------------------------------------------------
    def stop_releaser(self) -> None:
        """Stop the idle-release thread."""
        if self.releaser is not None:
            self.releaser.stop()
            self.releaser = None

    def abandon(self) -> None:
        """Write nothing more, as a killed process would not: the writer is marked broken, so neither
        close nor the interpreter's exit writes what it buffered (lsm.wal_object)."""
        self.abandoned = True
        wal = self.writer
        if wal is not None and wal.broken is None:
            wal.broken = OSError("the handle was dropped as after a crash")

    def close(self, fail: Callable[[OSError], BaseException]) -> BaseException | None:
        """Write what is buffered and close the log; returns the error to raise after everything is
        released, if any: the failed state's for an I/O error, FencedError when a handle fenced before
        its object-store WAL could write its buffer leaves writes acknowledged with sync=False behind."""
        wal, self.writer = self.writer, None
        if wal is None:
            return None
        if self.abandoned:
            wal.close()
            return None
        failure: BaseException | None = None
        try:
            if wal.broken is None:
                wal.sync()
        except FencedError:
            pass  # an object-store WAL whose next id another handle claimed: its buffer stays unwritten
        except OSError as e:
            failure = fail(e)
        finally:
            try:
                wal.close()
            except FencedError:
                pass
        if failure is None and isinstance(wal, ObjectWal) and isinstance(wal.broken, FencedError):
            lost = wal.stranded(self.versions.manifest.last_seq, self.unacknowledged)
            if lost:
                failure = FencedError(
                    f"{self.store.root}: this handle was fenced before it could write its last {lost} WAL "
                    "record(s): the writes among them acknowledged with sync=False are lost (another "
                    "handle owns the database)")
        return failure


__all__ = ["Recovered", "WalManager"]

"""The WAL of an object-store database: group-committed, immutable WAL objects (as SlateDB writes them).

An object cannot be appended to, so a writer buffers its encoded records and writes them as one new
object ``wal/%020d.wal`` (the same record format as a local segment) every
``DbOptions.wal_flush_interval_ms`` (default 100 ms), or as soon as the buffer holds ``wal_flush_bytes``,
or when a ``WriteOptions(sync=True)`` write asks: that write returns only once its object is durable
(it waits outside the DB's write lock, `wait_durable`, so concurrent sync writes share objects).
Objects are written one at a time, in order, so after a crash the store holds a prefix of the
acknowledged order: never a later write without an earlier one.

Ids are claimed with create-if-absent (one PUT with If-None-Match). An opener claims the id after the
last one it replayed with an empty object, so the writer it fenced fails to write that id, learns it
is fenced, and raises `FencedError`: the writes it had buffered are never visible. If the old writer got
its object in first, the opener's claim fails, and it replays that object too before claiming the next.

A claim, like every WAL object, is deleted only once it is older than the WAL's grace (`wal_bound`), and
that grace is what keeps a slow writer from outrunning it (docs/reliability.md, "The WAL and a slow
request"): were the claim of id N gone, a fenced writer's PUT of N would create it, be acknowledged, and
never be replayed (the new owner's replay point is past N). A new owner claims N only after it saw the
writer's object N-1 (or the flush that retired it), so its claim is younger than the moment the writer
sent N-1: its *anchor*. The writer therefore acknowledges object N only if N's PUT returned within
`safe_ms` (the grace less `CLOCK_MARGIN_MS` for the store's clock against ours) of its anchor; a PUT that
took longer breaks it unacknowledged (`WalTooSlowError`). An idle writer whose anchor is older than
`recheck_ms` first reads the newest manifest (the read is its new anchor: an owner publishes its epoch
before it claims). The grace is at least `request_ms` (one PUT with its retries, bounded by the client's
timeout and retry window) plus that recheck window plus the margin, so a PUT that obeys the client's own
bound is never refused: only a request that outlives every timeout (a partition that lets it land long
after it was sent) can be, and then nothing is acknowledged.

A process that exits normally without closing its database still writes what its writers buffer (an
``atexit`` hook); a killed one loses it, as the durability rules above allow.

Failures: an object write that fails (after the store's retries, formats.objstore) breaks the writer
for good, like a failed append of a local segment: the write waiting for it raises, later appends raise
the same error, and the DB is in its failed state (at once when the background flusher's write failed:
`on_broken`). Its object may have landed (a lost response), so no later object may be written after it
by this handle: only an open, which reads what is there, decides. The records of a broken writer's
buffer were acknowledged only if their writes had ``sync=False``; they are lost as after a kill, and the
store holds a prefix of the acknowledged order.

One writer serves every memtable of a handle. A memtable's WAL is a run of consecutive ids: a new
memtable starts at `next_id`, the id the group commit writes next, which may also hold the previous
memtable's last records (so a rotation costs no PUT of its own). Once a memtable is flushed, replay
starts at the next memtable's first id (replay skips records at or below the manifest's last_seq), and
the ids below it are deleted.
"""

from __future__ import annotations

import atexit
import dataclasses
import errno
import threading
import weakref
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from formats.storage import PublishUnknownError, request_bound_ms, storage_for
from lsm import wal as wal_files
from lsm.errors import FencedError

if TYPE_CHECKING:
    from lsm.options import DbOptions


class ObjectWal:
    """A writer of WAL objects from id `segment_id` on (same interface as `lsm.wal.WalWriter`).

    `on_fenced()` runs once when a write finds its id
    taken: another handle owns the database. `on_broken(error)` runs when the background flusher's
    object write fails (an OSError): nobody waits for that write, so the handle learns of it here and
    enters its failed state at once, as a failed disk write would put it, instead of at its next write."""

    held = True  # no segment flock on an object store: fencing is the create-if-absent of each id

    def __init__(self, wal_dir: str, segment_id: int, interval_ms: int | None, flush_bytes: int, *,
                 on_fenced: Callable[[], None] | None = None,
                 check_fence: Callable[[], bool] | None = None, bound: WalBound | None = None,
                 anchor: float | None = None,
                 on_broken: Callable[[OSError], object] | None = None) -> None:
        self.wal_dir = wal_dir
        self.segment_id = segment_id
        self.next_id = segment_id
        self.path = wal_files.segment_path(wal_dir, segment_id)
        self.storage = storage_for(wal_dir)
        self.interval = None if interval_ms is None else interval_ms / 1000  # None: no flusher thread
        self.flush_bytes = flush_bytes
        self.on_fenced = on_fenced
        self.on_broken = on_broken
        self.check_fence = check_fence
        self.bound = bound
        self._clock = self.storage.clock  # the store's clocks (a simulation's, or the host's)
        # when the request that last proved this writer the owner was sent (module docstring): the open's
        # claim of the id before `segment_id`, then each object's PUT, or a manifest check
        self._anchor = self._clock.monotonic() if anchor is None else anchor
        self.broken: BaseException | None = None
        self._buf: list[bytes] = []
        self._buf_seqs: list[int] = []  # the commit seq of each buffered record
        self._unwritten: list[int] = []  # seqs of the batch whose object write broke the writer
        self._buf_bytes = 0
        self._appended = 0  # records appended so far
        self._durable = 0  # records in objects written so far
        self._lock = threading.Lock()  # the buffer and the counters
        self._put_lock = threading.Lock()  # one object PUT at a time, in id order
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        _open_writers.add(self)

    # -- WalWriter's interface ---------------------------------------------------------------------------
    def hold(self) -> None:
        """Nothing to hold (see `held`)."""

    def release(self) -> None:
        """Nothing to release."""

    def append(self, record: bytes, sync: bool = False, seq: int = 0) -> int:
        """Buffer one encoded record; with `sync`, return once an object holding it is durable. Returns
        the record's ticket for `wait_durable`. A failed object write breaks the writer: later appends
        raise the same error."""
        if self.broken is not None:
            raise self.broken
        with self._lock:
            self._buf.append(record)
            self._buf_seqs.append(seq)
            self._buf_bytes += len(record)
            self._appended += 1
            mine = self._appended
            full = self._buf_bytes >= self.flush_bytes
        if self._thread is None and self.interval is not None:
            self._start()
        if sync or full:
            self._flush_through(mine)
        return mine

    def wait_durable(self, ticket: int) -> None:
        """Return once record `ticket` (what `append` returned) is in a written object: write what is
        buffered now unless an object being written holds it already. Threads that call this together
        share objects (the group commit of sync writes)."""
        self._flush_through(ticket)

    def sync(self) -> None:
        """Write what is buffered now (a durable point, as fdatasync is locally)."""
        if self.broken is not None:
            raise self.broken
        with self._lock:
            mine = self._appended
        self._flush_through(mine)

    def close(self) -> None:
        """Write what is buffered, then stop the flusher; idempotent. The caller rotates to
        `ObjectWal(wal_dir, self.next_id, ...)` after it."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._thread is not None:
            self._thread.join()
        if self.broken is None:
            self.sync()

    def stranded(self, after_seq: int, told: Collection[int] = ()) -> int:
        """How many records of commits above `after_seq` were appended (acknowledged, if their writes had
        sync=False) that no written object holds and none ever will: what a writer broken or fenced
        before writing its buffer leaves behind. `after_seq`: what the store holds by other means (the
        seqs a flush published in an SST); `told`: seqs whose writes already raised (not acknowledged)."""
        if self.broken is None:
            return 0
        with self._lock:
            return sum(1 for s in (*self._unwritten, *self._buf_seqs) if s > after_seq and s not in told)

    # -- the flusher -------------------------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(target=self._loop, name="lsm-wal-flush", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while not self._closed.wait(self.interval):
            if self.broken is not None:
                return
            try:
                self.sync()
            except OSError as e:  # kept in self.broken too: the next write raises it
                if self.on_broken is not None:
                    self.on_broken(e)
                return
            except BaseException:  # noqa: BLE001 - kept in self.broken (fenced: on_fenced ran)
                return

    def _flush_through(self, count: int) -> None:
        """Return once the first `count` appended records are in durable objects."""
        with self._put_lock:
            if self._durable >= count:  # another flush (the flusher, a sync write) took ours along
                return
            if self.broken is not None:
                raise self.broken
            with self._lock:
                batch, self._buf, self._buf_bytes = self._buf, [], 0
                seqs, self._buf_seqs = self._buf_seqs, []
                upto = self._appended
            try:
                self._put(b"".join(batch))
            except BaseException as e:
                self.broken = e
                self._unwritten = seqs  # never to be written now (`stranded`)
                raise
            self._durable = upto

    def _put(self, data: bytes) -> None:
        path = wal_files.segment_path(self.wal_dir, self.next_id)
        clock, bound = self._clock, self.bound
        sent = clock.monotonic()
        if bound is not None and sent - self._anchor > bound.recheck_ms / 1000:
            # idle through a takeover? its claim may be gone by now: the manifest says
            if self.check_fence is not None and self.check_fence():
                self._fenced(path)
            self._anchor = sent
        try:
            created = self.storage.put_if_absent(path, data)
        except PublishUnknownError as e:
            # the object may exist: nothing may follow it until an open has read what is there
            raise e.error from None
        if not created:
            self._fenced(path)
        took = clock.monotonic() - self._anchor
        if bound is not None and took > bound.safe_ms / 1000:
            raise WalTooSlowError(
                errno.ETIMEDOUT,
                f"WAL object written {took:.1f} s after this writer last proved it owned the store, more than "
                f"the {bound.safe_ms / 1000:.1f} s its grace allows: a newer owner may have deleted the id's "
                "claim, so the object may never be replayed and its writes are not acknowledged",
                path,
            )
        self.next_id += 1
        self._anchor = sent

    def _fenced(self, path: str) -> None:
        if self.on_fenced is not None:
            self.on_fenced()
        raise FencedError(f"{path}: another handle took over this database's WAL; this handle is fenced")


def claim(wal_dir: str, segment_id: int) -> None:
    """Claim WAL object id `segment_id` with an empty object (an open, fencing the writer before it:
    module docstring); FileExistsError if the id is taken. A PUT whose outcome is unknown raises its
    OSError: the next open reads what is there."""
    path = wal_files.segment_path(wal_dir, segment_id)
    try:
        created = storage_for(wal_dir).put_if_absent(path, b"")
    except PublishUnknownError as e:
        raise e.error from None
    if not created:
        raise FileExistsError(errno.EEXIST, "WAL object id taken", path)


# writers not closed yet: a normal interpreter exit writes their buffers (the flusher threads are
# daemons, stopped mid-interval otherwise)
_open_writers: weakref.WeakSet[ObjectWal] = weakref.WeakSet()


@atexit.register
def _write_buffers_at_exit() -> None:
    for w in list(_open_writers):
        if w._closed.is_set() or w.broken is not None:
            continue
        try:
            w.sync()
        except BaseException:  # noqa: BLE001, S110 - exiting: a fenced or failed writer keeps its buffer
            pass


class WalTooSlowError(OSError):
    """A WAL object's PUT returned too long after the writer last proved it owned the store (module
    docstring): the object may have landed in an id whose claim a newer owner deleted, so its writes
    are not acknowledged and the writer is broken (the DB's failed state)."""


# how far the store's clock (the last-modified time of objects, by which their age is judged) may be off
# the clock of the host that judges it: NTP keeps hosts far closer than this
CLOCK_MARGIN_MS = 5_000
# a writer idle for longer than this reads the manifest before its next WAL object (at least)
MIN_RECHECK_MS = 10_000


@dataclasses.dataclass(frozen=True)
class WalBound:
    """The timing rule of an object-store WAL (module docstring), from the store's client options."""

    request_ms: int  # the longest one PUT, with its retries, takes before it is acknowledged
    grace_ms: int  # how old a WAL object (a claim among them) must be before anyone deletes it

    @property
    def safe_ms(self) -> int:
        """A WAL object is acknowledged only if its PUT returned within this of the writer's anchor."""
        return self.grace_ms - CLOCK_MARGIN_MS

    @property
    def recheck_ms(self) -> int:
        """A writer whose anchor is older than this reads the manifest before its next object."""
        return self.safe_ms - self.request_ms


def wal_bound(options: DbOptions) -> WalBound:
    """The WAL's timing for `options`: the grace is `gc_grace_ms`, raised to what one request may take
    (`formats.storage.request_bound_ms`: the retry window plus the client's timeout) plus the recheck
    window and the clock margin. ValueError if the client options give no bound (checked at open)."""
    request = request_bound_ms(options.object_store_options)
    return WalBound(request, max(options.gc_grace_ms, request + MIN_RECHECK_MS + CLOCK_MARGIN_MS))


def wal_grace_ms(options: DbOptions) -> int:
    """How old a flushed WAL object must be before it is deleted (`wal_bound`)."""
    return wal_bound(options).grace_ms

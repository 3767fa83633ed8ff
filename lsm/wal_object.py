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

A writer idle for longer than half the WAL's deletion grace (`wal_grace_ms`) first reads the newest
manifest before it writes again: the opener's claim object is deleted only once it is older than that
grace, so a writer that slept through a takeover learns of it from the manifest's epoch instead of
writing into an id nobody will replay.

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
import errno
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from formats.storage import PublishUnknownError, storage_for
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

    def __init__(self, wal_dir: str, segment_id: int, interval_ms: int, flush_bytes: int, *,
                 on_fenced: Callable[[], None] | None = None,
                 check_fence: Callable[[], bool] | None = None, recheck_after: float = 5.0,
                 on_broken: Callable[[OSError], object] | None = None) -> None:
        self.wal_dir = wal_dir
        self.segment_id = segment_id
        self.next_id = segment_id
        self.path = wal_files.segment_path(wal_dir, segment_id)
        self.storage = storage_for(wal_dir)
        self.interval = interval_ms / 1000
        self.flush_bytes = flush_bytes
        self.on_fenced = on_fenced
        self.on_broken = on_broken
        self.check_fence = check_fence
        self.recheck_after = recheck_after
        self._last_put = time.monotonic()
        self.broken: BaseException | None = None
        self._buf: list[bytes] = []
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

    def append(self, record: bytes, sync: bool = False) -> int:
        """Buffer one encoded record; with `sync`, return once an object holding it is durable. Returns
        the record's ticket for `wait_durable`. A failed object write breaks the writer: later appends
        raise the same error."""
        if self.broken is not None:
            raise self.broken
        with self._lock:
            self._buf.append(record)
            self._buf_bytes += len(record)
            self._appended += 1
            mine = self._appended
            full = self._buf_bytes >= self.flush_bytes
        if self._thread is None:
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
                upto = self._appended
            try:
                self._put(b"".join(batch))
            except BaseException as e:
                self.broken = e
                raise
            self._durable = upto

    def _put(self, data: bytes) -> None:
        path = wal_files.segment_path(self.wal_dir, self.next_id)
        if self.check_fence is not None and time.monotonic() - self._last_put > self.recheck_after:
            if self.check_fence():  # idle through a takeover: the claim object may be gone by now
                self._fenced(path)
        try:
            created = self.storage.put_if_absent(path, data)
        except PublishUnknownError as e:
            # the object may exist: nothing may follow it until an open has read what is there
            raise e.error from None
        if not created:
            self._fenced(path)
        self.next_id += 1
        self._last_put = time.monotonic()

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


def wal_grace_ms(options: DbOptions) -> int:
    """How old a flushed WAL object must be before it is deleted (see the module docstring): the GC
    grace, and at least 10 s so that an idle writer's manifest check stays rare."""
    return max(options.gc_grace_ms, 10_000)

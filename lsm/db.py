"""DB: open/close, the write path, the read path, flush and recovery.

Directory layout::

    PATH/manifest/%020d.manifest   versions of the LSM shape (lsm.manifest), newest wins
    PATH/manifest/WRITER_EPOCH     the current writer epoch, memory-mapped by writers (fencing)
    PATH/wal/%020d.wal             WAL segments, one per memtable (formats.wal)
    PATH/sst/<name>.sst            SSTs (formats.sst); only those the manifest names are live

Where the code is: `DB` is one class assembled from mixins, one module per concern — this module (open,
recovery, close, the read path's entry points, and `Engine`, the DB's services for the engine's own
modules), lsm/db_write.py (the write path, flushes, the failed state), lsm/db_time.py (time lookups
and time travel), lsm/db_admin.py (compaction, ingest, introspection). The manifest, the SST readers and
the read path's `State` belong to the version set (lsm.versions); lock-free reads over a pinned State
are lsm.readpath. Locks, in acquisition order: the write lock (`_write_lock`), the compactor's job lock,
the version set's commit lock, its state lock (`_state_lock`); the flush condition (`_cv`) and the
timeline's lock are leaves (docs/architecture.md, "Owners, callers and locks").

Write path: a commit takes the write lock and (if it does not hold it yet) a shared flock on the active
WAL segment, checks the fence, reads the clock (never backwards), takes the next seq, appends one WAL
record (one write(2); fsync when sync=True), then adds its rows to the memtable. The flock is kept
across writes and dropped when idle or fenced (lsm.wal_lock). An opener publishes its epoch before
it locks and reads the segments, so an append either passed its fence check before the publish (the
opener waits for it and replays it: the write succeeded) or fails that check (nothing written). A full memtable
is frozen behind a new WAL segment and flushed to an L0 SST by the flush thread while writes go on; the
manifest then records the SST and the new WAL replay point, and only after that commit are the
flushed segments deleted.

Read path: the active memtable, frozen memtables newest first, L0 SSTs newest first, then sorted runs
newest first; the first version with seq <= the read's seq decides. Structures are searched in that
order because their seq ranges are ordered the same way.

Failure: an I/O error on the write path (WAL append or sync, flush, manifest commit, compaction, close)
puts the DB into the failed state (`DbFailedError`, naming the file and the call): writes are refused
until it is reopened, reads go on, nothing is appended after a possibly partial record, and no file a
possibly published manifest references is deleted. The failed write's seq is never given to another write.

Recovery: open replays WAL segments from the manifest's replay point (records past the manifest's
last_seq), dropping a torn final record (DbOptions.wal_recovery_mode), flushes what it replayed to L0 and retires the old segments, so
a fenced older handle appending to them can never make those writes visible. It then abandons the seq ranges an
earlier handle reserved for bulk loads that never committed (`stable_seq`; docs/reliability.md).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterator

from compaction.filter import Entry
from formats.manifest import Manifest
from formats.objcache import cache_for
from formats.objstore_config import check_location
from formats.row import MAX_KEY_LEN, check_key
from formats.storage import is_attached, is_url, register, storage_for
from lsm import history
from lsm import wal as wal_files
from lsm.clock import MonotonicClock
from lsm.compactor import DbCompactor
from lsm.db_admin import AdminMixin
from lsm.db_time import TimeMixin
from lsm.db_write import ReadOnlyError, WriteMixin
from lsm.errors import (
    ClosedError,
    DbFailedError,
    FencedError,
    NotADatabaseError,
)
from lsm.ingest_state import SourceState
from lsm.memtable import Memtable
from lsm.options import DbOptions, ReadOptions
from lsm.readpath import clip_to_prefix, find_row_below_mem, prefix_end, scan_state, user_ranges
from lsm.snapshot import Snapshot
from lsm.syskeys import SYSTEM_PREFIX, is_system
from lsm.timeline import Timeline, parse_time
from lsm.versions import Run, State, VersionSet
from lsm.wal_lock import IdleReleaser
from lsm.wal_object import ObjectWal, wal_bound
from lsm.wal_object import claim as claim_wal_id

SST_SUFFIX = ".sst"


class DB(WriteMixin, TimeMixin, AdminMixin):
    """An embedded, time-aware LSM key-value store on one directory. Use `DB.open`."""

    # -- open ------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], options: DbOptions | None = None, *, read_only: bool = False) -> DB:
        """Open (creating if needed) the database at `path`.

        A writable open fences every earlier handle on the path. ``read_only=True`` opens without
        fencing anyone, replays the WAL in memory only, and refuses writes (for tools). A malformed URL
        (no bucket or key, an unsupported scheme, ``s3:/b`` with one slash) or endpoint raises
        `ObjectStoreConfigError` before anything is created or sent.
        """
        db = cls.__new__(cls)
        path = os.fspath(path)
        # a backend the caller attached (a simulation's) has a scheme of its own: only a user's URL is checked
        db._init(path if is_attached(path) else check_location(path), options or DbOptions(), read_only)
        return db

    def _init(self, path: str, options: DbOptions, read_only: bool) -> None:
        self._closed = True
        self.path = path
        self.options = options
        self.read_only = read_only
        self._wal_dir = os.path.join(path, "wal")
        # an object-store database (s3://, memory://): its backend, with this database's request counters
        self._storage = register(path, options.object_store_options) if is_url(path) else storage_for(path)
        self._objects = not self._storage.local
        if self._objects:  # SST ranges read from the store kept on local disk, if asked (formats.objcache)
            d = options.object_cache_dir
            self._storage.cache = cache_for(d, options.object_cache_bytes) if d is not None else None
        _prepare_dir(path, create=not read_only)
        self._bg_error: BaseException | None = None
        # the version set owns the manifest, the SST readers and the read path's State (lsm.versions);
        # its locks come after the write lock: write lock -> commit lock -> state lock (self._state_lock)
        vs = self._vs = VersionSet(path, options, read_only, lambda: self._bg_error, self._fail)
        self._sst_dir = vs.sst_dir
        self._write_lock = threading.Lock()  # the write path: seq, WAL appends, memtable rotation; taken first
        self._state_lock = vs.lock  # the version set's state lock (taken last, held briefly)
        self._cv = threading.Condition(threading.Lock())  # flush hand-off: imm queue, _stopping, _bg_error
        self._stopping = False
        self._snapshots: Counter[int] = Counter()  # guarded by the state lock
        self._as_of_snapshots: weakref.WeakSet[Snapshot] = weakref.WeakSet()  # open snapshot_at() results
        self._wal: wal_files.WalWriter | None = None
        self._flush_thread: threading.Thread | None = None
        self._on_flush_hooks: list[Callable[[], None]] = []
        self._on_close_hooks: list[Callable[[], None]] = []
        self._compactor: DbCompactor | None = None
        self._lock_releaser: IdleReleaser | None = None
        self._claim_sent: float | None = None
        self._unacknowledged: set[int] = set()  # seqs of sync writes on an object store that raised
        self._memtable_bytes = options.memtable_bytes
        self._default_ttl = options.default_ttl
        self.user_bytes_written = 0
        self.flush_bytes_written = 0
        self._engine = Engine(self)

        man = vs.manifest
        if not read_only:
            vs.delete_files(vs.store.stale_tmp())
        self._writer_epoch = vs.writer_epoch
        self._token_bytes, self._epoch_bytes = vs.token_bytes, vs.epoch_bytes

        self._timeline = Timeline(man.seq_tracker, man.time_seq, options.time_seq_min_time)
        mem, max_ts, last_seg = self._replay_wal(man)
        self._seq = max(man.last_seq, mem.max_seq)
        # seq ranges reserved by bulk loads and not committed yet (see `stable_seq`): a writable open
        # abandons what an earlier handle left (below), a read-only one holds back as the manifest says
        self._reserved: tuple[tuple[int, int], ...] = man.seq_reservations if read_only else ()
        self._ingest_states: dict[str, SourceState] = {}  # per source name (lsm.ingest_state)
        self._last_commit_ts = max(man.clock_watermark, max_ts)
        self._clock = MonotonicClock(options.clock, max(man.clock_watermark, max_ts), options.max_clock_skew_ms)
        vs.open_state(mem)
        self._closed = False
        if read_only:
            return
        try:
            if not mem.is_empty():
                vs.swap_memtable(Memtable(last_seg + 1))
                self._flush_memtable(mem)
            self._abandon_reservations()
            next_seg = max(last_seg + 1, vs.manifest.wal_replay_from)
            # every older segment is flushed or empty: retire them all, so that a fenced handle still
            # appending to one can never have those writes replayed
            self._delete_wal_below(next_seg)
            while True:
                try:
                    self._wal = self._new_wal(next_seg)
                    break
                except FileExistsError:  # a handle we just fenced rotated into it: skip past
                    next_seg += 1
            new_mem = Memtable(next_seg)
            vs.state = dataclasses.replace(vs.state, mem=new_mem)
            if options.background_flush:  # else frozen memtables are flushed by the writer (_flush_frozen)
                self._flush_thread = threading.Thread(target=self._flush_loop, name="lsm-flush", daemon=True)
                self._flush_thread.start()
            if not self._objects:  # an object store's WAL holds no lock (fencing by create-if-absent)
                self._lock_releaser = IdleReleaser(self._engine)
            self._compactor = DbCompactor(self._engine)
            if self._compactor.background is not None:
                self._on_flush_hooks.append(self._compactor.background.wake)
                self._compactor.background.wake()
        except BaseException:
            self._release()
            raise

    def _abandon_reservations(self) -> None:
        """At a writable open, after the replayed WAL is flushed: the seq ranges an earlier handle reserved
        for bulk loads can never commit now (that handle is fenced), so they are dropped from the manifest
        and `last_seq` moves past them: readers stop waiting for them and no later write reuses them."""
        held = self._vs.manifest.seq_reservations
        if not held:
            return
        top = max(last for _first, last in held)
        self._vs.commit(lambda m: m.replace(seq_reservations=(), last_seq=max(m.last_seq, top)))
        self._seq = max(self._seq, top)

    def _replay_wal(self, man: Manifest) -> tuple[Memtable, int, int]:
        """Replay unflushed WAL records into a memtable; return it, the newest ts seen, and the last segment."""
        segments = wal_files.live_segments(self._wal_dir, man.wal_replay_from)
        if self._objects and not self.read_only:
            segments = self._claim_wal(man, segments)  # fences the writer before us (lsm.wal_object)
        last_seg = segments[-1][0] if segments else man.wal_replay_from - 1
        mem = Memtable(last_seg)
        max_ts = 0
        mode = self.options.wal_recovery_mode
        for _sid, path in segments:
            # exclusive (writable open): waits out an append whose fence check passed before our publish
            records, stop = wal_files.replay_segment(path, mode, exclusive=not self.read_only)
            for rec in records:
                if rec.ts > max_ts:
                    max_ts = rec.ts
                if rec.seq <= man.last_seq:
                    continue
                for row in rec.rows:
                    mem.add(row)
                if rec.ts >= self._timeline.next_ms:
                    self._timeline.on_commit(rec.seq, rec.ts)
            if stop:
                break
        return mem, max_ts, last_seg

    def _claim_wal(self, man: Manifest, segments: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """Claim the WAL object id after the last one there with an empty object: the writer we fence
        fails to write it. If it wrote that id first, list again and claim the next. Returns the
        objects to replay, the claimed one last (it is empty).

        An empty claim has the same bytes whoever writes it, so a newer opener that listed before our
        claim landed may have claimed the same id and taken ours for its own; it published its epoch
        before it listed, so reading the manifest after the claim finds it, and we are fenced."""
        while True:
            nxt = max(segments[-1][0] + 1 if segments else 0, man.wal_replay_from)
            # the WAL writer's first anchor (lsm.wal_object): an owner after us can claim an id of ours only
            # once it has seen this claim
            self._claim_sent = self._storage.clock.monotonic()
            try:
                claim_wal_id(self._wal_dir, nxt)
            except FileExistsError:
                # taken by the writer we fence (list again and replay it), or by a newer opener, which
                # published its epoch before it listed: then we are the one fenced, and must not claim
                # the next id (that would fence the newer owner)
                if self._vs.fenced_on_store():
                    raise FencedError(f"{self.path}: another handle opened this database while this one did") from None
                segments = wal_files.live_segments(self._wal_dir, man.wal_replay_from)
                continue
            if self._vs.fenced_on_store():
                raise FencedError(f"{self.path}: another handle opened this database while this one did")
            return [*segments, (nxt, wal_files.segment_path(self._wal_dir, nxt))]

    def _new_wal(self, segment_id: int) -> wal_files.WalWriter | ObjectWal:
        """The writer of the WAL from `segment_id` on: a segment file, or WAL objects (lsm.wal_object)."""
        if not self._objects:
            return wal_files.WalWriter(self._wal_dir, segment_id)
        o = self.options
        return ObjectWal(self._wal_dir, segment_id, o.wal_flush_interval_ms, o.wal_flush_bytes,
                         on_fenced=self._vs.mark_fenced, check_fence=self._vs.fenced_on_store,
                         bound=wal_bound(o), anchor=self._claim_sent, on_broken=self._fail)

    def object_store_stats(self) -> dict[str, int]:
        """Object-store requests this database made, by kind (put, get, list, delete, head), and the
        bytes put and got; all zeros for a local directory (docs/object-store.md)."""
        return self._storage.stats()

    # -- SST bookkeeping ---------------------------------------------------------------------------
    def sst_path(self, name: str) -> str:
        """The path of the SST file `name` in this database's ``sst/`` directory."""
        return self._vs.sst_path(name)

    # -- read path ---------------------------------------------------------------------------------
    @property
    def seq(self) -> int:
        """The last sequence number handed out (to a commit, or reserved by a running bulk load)."""
        return self._seq

    @property
    def stable_seq(self) -> int:
        """The largest seq S such that every seq <= S is committed or can never commit: `seq`, except
        while a bulk load has a reserved range outstanding, which holds it below the range's first seq
        until the load commits or is abandoned (then it jumps over the whole load at once). A reader
        that takes "every seq up to N is final" (a change feed, a replica's frontier) must take N from
        here, not from `seq` (docs/reliability.md, "Which seqs are final")."""
        seq = self._seq  # read before the reservations: a reservation made in between is >= seq + 1
        return history.stable_seq(self._reserved, seq)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: DB is closed")

    def _visible(self, key: bytes, max_seq: int | None, include_expired: bool, now: int | None) -> tuple | None:
        """The row of `key` a read at `max_seq` (None: now) and time `now` sees, or None."""
        if self._closed:
            self._check_open()
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_LEN:
            check_key(key)
        if key >= SYSTEM_PREFIX and is_system(key):
            return None  # the engine's own rows are not the user's to read
        if max_seq is None:
            # A batch is seen whole or not at all: its rows reach the memtable before its seq is
            # published, so rows newer than the seq are ignored. The state is read BEFORE the seq: a
            # flush that completes in between may drop versions <= seq that newer rows shadow, so a
            # state read after the seq can lack them. Read first, it holds every commit up to the
            # last one in its memtable, a consistent prefix of what the seq allows.
            st = self._vs.state
            max_seq = self._seq
        else:
            st = self._vs.state
        mem = st.mem
        row = mem.get(key, max_seq) if key in mem.data else None  # most keys miss: no call for them
        if row is None:
            row = find_row_below_mem(st, key, max_seq)
        if row is None or row[4] is None:
            return None
        exp = row[3]
        if exp is not None and not include_expired:
            if now is None:
                now = self._clock.read()
            if now > exp:
                return None
        return row

    def _get_entry(self, key: bytes, max_seq: int | None, include_expired: bool, now: int | None) -> Entry | None:
        row = self._visible(key, max_seq, include_expired, now)
        return None if row is None else Entry(row[0], row[4], row[1], row[2], row[3])

    def _read_point(self, options: ReadOptions) -> tuple[int | None, bool, int | None]:
        """(max_seq, include_expired, now) of a read with `options` (its snapshot and its time)."""
        now = options.now
        if now is not None and type(now) is not int:
            now = parse_time(now)
        snap = options.snapshot
        if snap is None:
            return None, options.include_expired, now
        if snap.db is not self:
            raise ValueError("ReadOptions.snapshot belongs to another DB handle")
        if snap.closed:
            raise ClosedError("snapshot is released")
        return snap.seq, options.include_expired, snap.read_ts if now is None else now

    def get(self, key: bytes, options: ReadOptions | None = None) -> bytes | None:
        """The value of `key`, or None if it is absent, deleted or expired.

        ReadOptions: `snapshot` reads as of that snapshot, `now` judges expiry at that time."""
        if options is None:
            row = self._visible(key, None, False, None)
        else:
            row = self._visible(key, *self._read_point(options))
        return None if row is None else row[4]

    def get_entry(self, key: bytes, options: ReadOptions | None = None) -> Entry | None:
        """The visible row of `key` with its metadata (seq, ts, expire_ts), or None (ReadOptions as in get)."""
        if options is None:
            return self._get_entry(key, None, False, None)
        return self._get_entry(key, *self._read_point(options))

    def scan(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        reverse: bool = False,
        *,
        prefix: bytes | None = None,
        options: ReadOptions | None = None,
        as_of: int | str | None = None,
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) pairs with start <= key < end (and key starting with prefix), in key order.

        as_of (ms or RFC 3339) reads the state as of that time (see `snapshot_at`); ReadOptions as in
        `get` (a snapshot excludes as_of; `now` overrides the expiry time as_of sets)."""
        return self._public_scan(start, end, reverse, prefix, options, as_of, False)

    def scan_entries(
        self,
        start: bytes | None = None,
        end: bytes | None = None,
        reverse: bool = False,
        *,
        prefix: bytes | None = None,
        options: ReadOptions | None = None,
        as_of: int | str | None = None,
    ) -> Iterator[Entry]:
        """Like `scan`, yielding `Entry` rows with their metadata."""
        return self._public_scan(start, end, reverse, prefix, options, as_of, True)

    def _public_scan(self, start, end, reverse, prefix, options, as_of, entries: bool) -> Iterator:
        self._check_open()
        max_seq, include, now = (None, False, None) if options is None else self._read_point(options)
        if as_of is not None:
            if max_seq is not None:
                raise ValueError("scan() takes as_of= or ReadOptions.snapshot, not both")
            t = parse_time(as_of)
            return self._user_scan(start, end, reverse, prefix, self._as_of_seq(t), include, t if now is None else now, entries)
        return self._user_scan(start, end, reverse, prefix, max_seq, include, now, entries)

    def _user_scan(self, start, end, reverse, prefix, max_seq, include_expired, now, entries) -> Iterator:
        """`_scan` without the reserved key space [SYSTEM_PREFIX, SYSTEM_END): the parts below and above it."""
        start, end = clip_to_prefix(start, end, prefix)
        return self._scan(start, end, reverse, None, max_seq, include_expired, now, entries, user_ranges(start, end))

    def _scan(
        self,
        start: bytes | None,
        end: bytes | None,
        reverse: bool,
        prefix: bytes | None,
        max_seq: int | None,
        include_expired: bool,
        now: int | None,
        entries: bool,
        ranges: list[tuple[bytes | None, bytes | None]] | None = None,
    ) -> Iterator:
        for k in (start, end, prefix):
            if k is not None and type(k) is not bytes:
                raise TypeError(f"scan bounds must be bytes, not {type(k).__name__}")
        start, end = clip_to_prefix(start, end, prefix)
        if now is None:
            now = self._clock.read()
        vs = self._vs
        if max_seq is None:
            st, max_seq = vs.pin_with(lambda: self._seq)  # the seq read with the state, see _get_entry
        else:
            st = vs.pin()
        it = scan_state(st, vs.unpin, start, end, reverse, max_seq, include_expired, now, entries, ranges)
        next(it)  # run it to its first yield, inside the try: dropped unread, it still unpins st.gen
        return it

    # -- snapshots ---------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """Pin the current seq: reads through the snapshot see exactly this state until released."""
        self._check_open()
        with self._state_lock:
            seq = self._seq
            self._snapshots[seq] += 1
        return Snapshot(self, seq, release=self._release_snapshot)

    def _release_snapshot(self, seq: int) -> None:
        with self._state_lock:
            self._snapshots[seq] -= 1
            if self._snapshots[seq] <= 0:
                del self._snapshots[seq]

    def snapshot_seqs(self) -> tuple[int, ...]:
        """Seqs of live snapshots, ascending (what compaction must keep readable)."""
        with self._state_lock:
            return tuple(sorted(self._snapshots))

    # -- close -------------------------------------------------------------------------------------
    def close(self) -> None:
        """Flush the memtable, record the clock watermark, stop threads, release files. Idempotent.

        In the failed state it writes nothing and just releases; an I/O error during close raises
        DbFailedError after everything is released."""
        if self._closed:
            return
        try:
            if self._compactor is not None:
                self._compactor.stop()
            if not self.read_only and self._bg_error is None:
                for hook in self._on_close_hooks:
                    hook()
                with self._write_lock:
                    self._check_fence()  # fenced: nothing of ours may reach the new owner's files
                    self._rotate_locked()
                self._wait_flushed()
                # a reading, not the last commit's time: a read-only handle opened later is complete up
                # to it (no later commit can be stamped below it), see DB._complete_upto
                watermark = self._clock.read()
                self._vs.commit(
                    lambda m: m.replace(
                        clock_watermark=max(m.clock_watermark, watermark), **self._manifest_extras(m)
                    )
                )
        except FencedError:
            pass
        finally:
            self._release()

    def _release(self) -> None:
        """Stop the threads and close every file this handle holds, whatever fails on the way. A handle
        fenced before its object-store WAL could write what it buffered raises FencedError at the end:
        writes it acknowledged with sync=False are lost, and a close that returned would say otherwise."""
        failure: BaseException | None = None
        try:
            if self._compactor is not None:
                self._compactor.stop()
        finally:
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
            if self._flush_thread is not None and self._flush_thread is not threading.current_thread():
                self._flush_thread.join()
            if self._lock_releaser is not None:
                self._lock_releaser.stop()
                self._lock_releaser = None
            if self._wal is not None:
                try:
                    if self._wal.broken is None:
                        self._wal.sync()
                except FencedError:
                    pass  # an object-store WAL whose next id another handle claimed: its buffer stays unwritten
                except OSError as e:
                    err = self._fail(e)
                    failure = err if self._bg_error is err else None
                finally:
                    wal, self._wal = self._wal, None
                    try:
                        wal.close()
                    except FencedError:
                        pass
                    lost = (wal.stranded(self._vs.manifest.last_seq, self._unacknowledged)
                            if isinstance(wal, ObjectWal) else 0)
                    if lost and failure is None and isinstance(wal.broken, FencedError):
                        failure = FencedError(
                            f"{self.path}: this handle was fenced before it could write its last {lost} WAL "
                            "record(s): the writes among them acknowledged with sync=False are lost (another "
                            "handle owns the database)")
            self._vs.close()
            self._closed = True
        if failure is not None:
            raise failure

    def __enter__(self) -> DB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DB({self.path!r}, seq={self._seq})"

class Engine:
    """The DB's services for the engine's own modules: the `CompactionHost` of lsm.compactor, the
    `WriterHost` of lsm.wal_lock and the write/read primitives lsm.ingest and lsm.remap_store use.

    Not a user API (reach it as ``db.engine``); it exists so that no module outside lsm/db.py touches a
    private DB member. Every method is safe to call from any thread."""

    def __init__(self, db: DB) -> None:
        self._db = db
        self.versions: VersionSet = db._vs
        self.options: DbOptions = db.options
        self.path: str = db.path

    @property
    def closed(self) -> bool:
        """Is the DB closed?"""
        return self._db._closed

    @property
    def failure(self) -> BaseException | None:
        """The failed-state (or flush) error refusing writes, else None."""
        return self._db._bg_error

    @property
    def compactor(self) -> DbCompactor | None:
        """The handle's compaction driver (None for a read-only handle); `step()` runs one due job."""
        return self._db._compactor

    def now(self) -> int:
        """The DB clock's current time (ms; never goes backwards)."""
        return self._db._clock.read()

    def clock_driver(self) -> str | None:
        """The source whose times drive this handle's clock (an ingest with times="source"), or None."""
        return self._db._clock.driver

    def source_state(self, name: str) -> SourceState:
        """The ingest state of source `name` on this handle (lsm.ingest_state), created on first use."""
        db = self._db
        with db._state_lock:
            st = db._ingest_states.get(name)
            if st is None:
                st = db._ingest_states[name] = SourceState()
            return st

    def check_writable(self) -> None:
        """Raise ClosedError / ReadOnlyError / the failed-state error if writes are refused."""
        self._db._check_writable()

    def fail(self, error: BaseException, published: bool | None = False) -> DbFailedError:
        """Enter the failed state for I/O error `error`; return the `DbFailedError` to raise."""
        return self._db._fail(error, published)

    def retention_cutoff(self, tick: int) -> int | None:
        """The expiry time before which a flush or compaction at `tick` may drop expired rows."""
        return self._db._retention_cutoff(tick)

    def snapshot_seqs(self) -> tuple[int, ...]:
        """Seqs of live snapshots, ascending."""
        return self._db.snapshot_seqs()

    def flush_if_idle(self) -> bool:
        """The idle flush (see DB._flush_if_idle); True if it flushed."""
        return self._db._flush_if_idle()

    def history_advanced(self) -> None:
        """A flush or compaction advanced the history floor: compact every source's remap to the history
        window's start (lsm.ingest.compact_remaps)."""
        from lsm.ingest import compact_remaps  # lsm.ingest imports what imports this module

        compact_remaps(self._db)

    def commit_rows(
        self, rows_at: Callable[[int, int], tuple[list[tuple], int]], sync: bool, at: tuple[str, int] | None = None
    ) -> tuple[int, int]:
        """Commit the (key, expire_ts, value) rows ``rows_at(ts, seq)`` builds under one seq and ts, system
        keys allowed; returns (seq, ts). `at` = (source, ts): at the source's own time. See DB._commit_rows."""
        return self._db._commit_rows(rows_at, sync, at)

    def scan_raw(
        self, start: bytes, end: bytes, reverse: bool = False, max_seq: int | None = None, entries: bool = False
    ) -> Iterator:
        """(key, value) rows in [start, end) as of `max_seq` (None: latest), system keys and expired rows
        included (for the engine's own rows, e.g. the remap); `Entry` rows (with seq and ts) if `entries`."""
        return self._db._scan(start, end, reverse, None, max_seq, True, None, entries)

    def segment_lock_held(self) -> bool:
        """Whether the writer holds its WAL segment flock now (lsm.wal_lock)."""
        wal = self._db._wal
        return wal is not None and wal.held

    def release_idle_lock(self, last_seq: int) -> int:
        """Drop the writer's WAL segment flock if no commit happened since `last_seq` (lsm.wal_lock);
        returns the current seq. Never waits for the write lock."""
        db = self._db
        wal = db._wal
        seq = db._seq
        if wal is not None and wal.held and seq == last_seq and db._write_lock.acquire(blocking=False):
            try:
                if db._wal is wal and db._seq == seq:
                    wal.release()
            finally:
                db._write_lock.release()
        return seq


def _prepare_dir(path: str, create: bool) -> None:
    if is_url(path):  # an object store has no directories: a database is its manifest objects
        if not create and not storage_for(path).list_names(os.path.join(path, "manifest")):
            raise NotADatabaseError(f"{path}: no such database")
        return
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADatabaseError(f"{path}: is a file, not a database directory")
    if os.path.isdir(path):
        entries = set(os.listdir(path))
        if entries and not os.path.isdir(os.path.join(path, "manifest")):
            raise NotADatabaseError(f"{path}: directory is not empty and holds no lsm-sim database")
    elif not create:
        raise NotADatabaseError(f"{path}: no such database")
    if create:
        for sub in ("", "manifest", "wal", "sst"):
            os.makedirs(os.path.join(path, sub), exist_ok=True)


__all__ = ["DB", "Engine", "Entry", "ReadOnlyError", "State", "Run", "prefix_end"]

"""DB: open/close, the write path, the read path, flush and recovery.

Directory layout::

    PATH/manifest/%020d.manifest   versions of the LSM shape (lsm.manifest), newest wins
    PATH/manifest/WRITER_EPOCH     the current writer epoch, memory-mapped by writers (fencing)
    PATH/wal/%020d.wal             WAL segments, one per memtable (formats.wal)
    PATH/sst/<name>.sst            SSTs (formats.sst); only those the manifest names are live

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
a fenced older handle appending to them can never make those writes visible.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from compaction.filter import Entry
from compaction.merge import CompactionStats, OutputSpec, flush_rows, merge_sources
from formats.manifest import Manifest, SstEntry
from formats.row import MAX_KEY_LEN, MAX_VALUE_LEN, check_key, check_value
from formats.wal import encode_put, encode_record
from lsm import bulk as bulk_mod
from lsm import ingest as ingest_mod
from lsm import wal as wal_files
from lsm.batch import WriteBatch
from lsm.clock import I64_MAX, MonotonicClock
from lsm.compactor import DbCompactor
from lsm.errors import (
    ClosedError,
    DbFailedError,
    FencedError,
    LsmError,
    NotADatabaseError,
    RetentionError,
)
from lsm.fsutil import fsync_dir, unlink_quiet
from lsm.iterators import run_iter, visible_rows
from lsm.memtable import Memtable
from lsm.options import NO_TTL, DbOptions, ReadOptions, WriteOptions, check_ttl
from lsm.remap import IngestStats, Remap
from lsm.remap_store import list_sources, load_remap
from lsm.seq_tracker import Round
from lsm.snapshot import Snapshot
from lsm.syskeys import SYSTEM_END, SYSTEM_PREFIX, check_user_key, is_system
from lsm.timeline import Timeline, parse_time
from lsm.versions import Run, State, VersionSet
from lsm.wal_lock import IdleReleaser

SST_SUFFIX = ".sst"


class ReadOnlyError(LsmError):
    """A write on a DB opened with read_only=True."""


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None if there is none)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


class DB:
    """An embedded, time-aware LSM key-value store on one directory. Use `DB.open`."""

    # -- open ------------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], options: DbOptions | None = None, *, read_only: bool = False) -> DB:
        """Open (creating if needed) the database at `path`.

        A writable open fences every earlier handle on the path. ``read_only=True`` opens without
        fencing anyone, replays the WAL in memory only, and refuses writes (for tools).
        """
        db = cls.__new__(cls)
        db._init(os.fspath(path), options or DbOptions(), read_only)
        return db

    def _init(self, path: str, options: DbOptions, read_only: bool) -> None:
        self._closed = True
        self.path = path
        self.options = options
        self.read_only = read_only
        self._wal_dir = os.path.join(path, "wal")
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
        self._memtable_bytes = options.memtable_bytes
        self._default_ttl = options.default_ttl
        self.user_bytes_written = 0
        self.flush_bytes_written = 0
        self._engine = Engine(self)

        man = vs.manifest
        if not read_only:
            vs.store.remove_stale_tmp()
        self._writer_epoch = vs.writer_epoch
        self._token_bytes, self._epoch_bytes = vs.token_bytes, vs.epoch_bytes

        self._timeline = Timeline(man.seq_tracker, man.time_seq, options.time_seq_min_time)
        mem, max_ts, last_seg = self._replay_wal(man)
        self._seq = max(man.last_seq, mem.max_seq)
        self._last_commit_ts = max(man.clock_watermark, max_ts)
        self._clock = MonotonicClock(options.clock, max(man.clock_watermark, max_ts))
        vs.open_state(mem)
        self._closed = False
        if read_only:
            return
        try:
            if not mem.is_empty():
                vs.swap_memtable(Memtable(last_seg + 1))
                self._flush_memtable(mem)
            next_seg = max(last_seg + 1, vs.manifest.wal_replay_from)
            # every older segment is flushed or empty: retire them all, so that a fenced handle still
            # appending to one can never have those writes replayed
            self._delete_wal_below(next_seg)
            while True:
                try:
                    self._wal = wal_files.WalWriter(self._wal_dir, next_seg)
                    break
                except FileExistsError:  # a handle we just fenced rotated into it: skip past
                    next_seg += 1
            new_mem = Memtable(next_seg)
            vs.state = dataclasses.replace(vs.state, mem=new_mem)
            self._flush_thread = threading.Thread(target=self._flush_loop, name="lsm-flush", daemon=True)
            self._flush_thread.start()
            self._lock_releaser = IdleReleaser(self._engine)
            self._compactor = DbCompactor(self._engine)
            if self._compactor.background is not None:
                self._on_flush_hooks.append(self._compactor.background.wake)
                self._compactor.background.wake()
        except BaseException:
            self._release()
            raise

    def _replay_wal(self, man: Manifest) -> tuple[Memtable, int, int]:
        """Replay unflushed WAL records into a memtable; return it, the newest ts seen, and the last segment."""
        segments = [(i, p) for i, p in wal_files.list_segments(self._wal_dir) if i >= man.wal_replay_from]
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

    # -- SST bookkeeping ---------------------------------------------------------------------------
    def sst_path(self, name: str) -> str:
        """The path of the SST file `name` in this database's ``sst/`` directory."""
        return self._vs.sst_path(name)

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
        if self._closed or self.read_only:
            self._check_writable()
        sync = options is not None and options.sync
        # the generic _commit_ops, specialised for one put: this is the write path's hot loop
        with self._write_lock:
            if self._closed or self._bg_error is not None:
                self._raise_not_writable()
            wal = self._wal
            if not wal.held:  # the segment lock of the fencing protocol (lsm.wal_lock): kept across writes
                wal.hold()
            token, epoch = self._token_bytes, self._epoch_bytes
            if token[0:8] != epoch:
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
                wal.append(encode_put(seq, ts, key, exp, value), sync)
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
                self._rotate_locked()
            return seq

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

    def _commit_rows(self, rows_at: Callable[[int, int], tuple[list[tuple], int]], sync: bool) -> tuple[int, int]:
        """Commit the rows ``rows_at(ts, seq)`` builds, as (key, expire_ts, value), under one seq and ts.

        `rows_at` runs under the write lock and the segment flock once the commit's ts and seq are known
        (ingest needs both for its binding row) and also returns the user bytes it holds. Returns (seq, ts)."""
        self._check_writable()
        with self._write_lock:
            if self._closed or self._bg_error is not None:
                self._raise_not_writable()
            wal = self._wal
            if not wal.held:  # as in put
                wal.hold()
            if self._vs.is_fenced():
                self._fenced(wal)
            ts = self._clock.tick()
            seq = self._seq + 1
            wal_ops, nbytes = rows_at(ts, seq)
            try:
                wal.append(encode_record(seq, ts, wal_ops), sync)
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
                self._rotate_locked()
            return seq, ts

    def _rotate_locked(self) -> None:
        """Freeze the memtable behind a new WAL segment and hand it to the flush thread (write lock held)."""
        old = self._vs.state.mem
        if old.is_empty():
            return
        new = Memtable(old.segment_id + 1)
        try:
            new_wal = wal_files.WalWriter(self._wal_dir, new.segment_id)
        except FileExistsError:
            raise FencedError(
                f"{self.path}: WAL segment {new.segment_id} belongs to another handle; this one is fenced"
            ) from None
        except OSError as e:
            raise self._fail(e) from e
        old_wal, self._wal = self._wal, new_wal
        old_wal.close()
        self._vs.swap_memtable(new)
        with self._cv:
            self._cv.notify_all()
            while len(self._vs.state.imm) > self.options.max_immutable_memtables and self._bg_error is None:
                self._cv.wait()

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

    def _flush_memtable(self, mem: Memtable) -> None:
        """Write one frozen memtable to L0, commit, swap it into the read path, retire its WAL."""
        tick = self._clock.read()
        spec = self._vs.new_output(None)
        dropped = CompactionStats()  # its history_floor: the newest version the flush dropped
        try:
            # on failure flush_rows removes what it wrote: nothing references it yet
            outputs = flush_rows(
                mem.iter(),
                spec,
                tick=tick,
                snapshots=self.snapshot_seqs(),
                retention_cutoff=self._retention_cutoff(tick),
                stats=dropped,
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
                wal_replay_from=max(m.wal_replay_from, mem.segment_id + 1),
                clock_watermark=max(m.clock_watermark, watermark),
                history_floor=max(m.history_floor, dropped.history_floor),
                **self._manifest_extras(m),
            )

        try:
            self._vs.commit(edit, lambda m: self._vs.install(m, drop_imm=mem))
        except DbFailedError as e:
            if e.published is not None:  # known unpublished; otherwise a manifest on disk may name them
                self._vs.discard_outputs(entries)
            raise
        except BaseException:
            self._vs.discard_outputs(entries)
            raise
        self.flush_bytes_written += sum(e.info.file_size for e in entries)
        self._delete_wal_below(mem.segment_id + 1)

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
        for sid, p in wal_files.list_segments(self._wal_dir):
            if sid < segment_id:
                unlink_quiet(p)

    # -- read path ---------------------------------------------------------------------------------
    @property
    def seq(self) -> int:
        """The last committed sequence number."""
        return self._seq

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"{self.path}: DB is closed")

    def _find(self, key: bytes, max_seq: int | None, st: State | None = None) -> tuple | None:
        """The newest version of `key` with seq <= max_seq, tombstones included."""
        if st is None:
            st = self._vs.state
        row = st.mem.get(key, max_seq)
        if row is not None:
            return row
        for m in st.imm:
            row = m.get(key, max_seq)
            if row is not None:
                return row
        for _e, r in st.l0:
            row = r.get(key, max_seq)
            if row is not None:
                return row
        for run in st.runs:
            i = bisect_left(run.last_keys, key)  # the one SST of the run whose range can hold the key
            if i < len(run.readers):
                row = run.readers[i].get(key, max_seq)
                if row is not None:
                    return row
        return None

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
        row = st.mem.get(key, max_seq)
        if row is None:
            row = self._find(key, max_seq, st)
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
        if prefix is not None:
            if type(prefix) is not bytes:
                raise TypeError(f"scan bounds must be bytes, not {type(prefix).__name__}")
            pend = prefix_end(prefix)
            start = prefix if start is None or (type(start) is bytes and start < prefix) else start
            if pend is not None and (end is None or (type(end) is bytes and end > pend)):
                end = pend
        if (type(end) is bytes and end <= SYSTEM_PREFIX) or (type(start) is bytes and start >= SYSTEM_END):
            return self._scan(start, end, reverse, None, max_seq, include_expired, now, entries)
        below = self._scan(start, SYSTEM_PREFIX, reverse, None, max_seq, include_expired, now, entries)
        above_start = SYSTEM_END if start is None or (type(start) is bytes and start < SYSTEM_END) else start
        above = self._scan(above_start, end, reverse, None, max_seq, include_expired, now, entries)
        return _concat(above, below) if reverse else _concat(below, above)

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
    ) -> Iterator:
        for k in (start, end, prefix):
            if k is not None and type(k) is not bytes:
                raise TypeError(f"scan bounds must be bytes, not {type(k).__name__}")
        if prefix is not None:
            pend = prefix_end(prefix)
            start = prefix if start is None or start < prefix else start
            if pend is not None and (end is None or end > pend):
                end = pend
        if now is None:
            now = self._clock.read()
        vs = self._vs
        with vs.lock:
            st = vs.state
            if max_seq is None:
                max_seq = self._seq  # read with the state, see _get_entry
            vs.iter_gens[st.gen] += 1
        it = self._scan_gen(st, start, end, reverse, max_seq, include_expired, now, entries)
        next(it)  # run it to its first yield, inside the try: dropped unread, it still unpins st.gen
        return it

    def _scan_gen(self, st: State, start, end, reverse, max_seq, include_expired, now, entries) -> Iterator:
        try:
            yield None  # consumed by _scan
            if start is not None and end is not None and start >= end:
                return
            sources = [st.mem.iter(start, end, reverse)]
            sources += [m.iter(start, end, reverse) for m in st.imm]
            sources += [r.iter(start, end, reverse) for _e, r in st.l0]
            sources += [run_iter(run.readers, run.last_keys, start, end, reverse) for run in st.runs]
            rows = visible_rows(merge_sources(sources, reverse), max_seq, now, include_expired)
            if entries:
                for r in rows:
                    yield Entry(r[0], r[4], r[1], r[2], r[3])
            else:
                for r in rows:
                    yield (r[0], r[4])
        finally:
            self._vs.unpin(st.gen)

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
                watermark = self._clock.last
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
        """Stop the threads and close every file this handle holds, whatever fails on the way."""
        failure: DbFailedError | None = None
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
                except OSError as e:
                    err = self._fail(e)
                    failure = err if self._bg_error is err else None
                finally:
                    self._wal.close()
                    self._wal = None
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

    # -- time --------------------------------------------------------------------------------------
    def timestamp_for_seq(self, seq: int, round: Round = Round.UP) -> int | None:
        """Approximate commit time (ms, whole seconds) of `seq` from the seq tracker.

        Without an exact entry, Round.UP takes the next tracked seq's time, Round.DOWN the previous
        one's; None when there is none in that direction."""
        self._check_open()
        return self._timeline.timestamp_for_seq(seq, round)

    def seq_tracker_entries(self) -> list[tuple[int, int]]:
        """The seq tracker's (seq, unix second) pairs, oldest first: what timestamp_for_seq and
        seq_for_timestamp interpolate between."""
        self._check_open()
        return self._timeline.tracker_entries()

    def seq_for_timestamp(self, ts_ms: int | str, round: Round = Round.DOWN) -> int | None:
        """The seq tracked at time `ts_ms` (ms or RFC 3339); otherwise the previous (DOWN) or next (UP)."""
        self._check_open()
        return self._timeline.seq_for_timestamp(parse_time(ts_ms), round)

    def _as_of_seq(self, ts_ms: int) -> int:
        """The seq whose state as-of reads at `ts_ms` see; RetentionError if history does not reach it."""
        now = self._clock.read()
        keep = self.options.history_retention
        if ts_ms >= self._last_commit_ts and ts_ms >= now - keep:
            # nothing committed since: the latest state, but only inside the window (compaction may
            # already have removed rows that expired between an older time and the window's start)
            return self._seq
        pair = self._timeline.floor_pair(ts_ms)
        tracked_at = pair[1] if pair is not None else None
        if tracked_at is None or tracked_at <= now - keep:
            raise RetentionError(
                f"{self.path}: cannot read as of {ts_ms} ms: the database keeps history back to "
                f"{now - keep} ms only (history_retention={keep} ms, seq tracked at or before that time: "
                f"{tracked_at})"
            )
        return pair[0]

    def snapshot_at(self, ts_ms: int | str) -> Snapshot:
        """A snapshot of the state as of `ts_ms` (ms or RFC 3339), through seq_for_timestamp(ts, DOWN).

        The seq tracker records a pair at most every 30 s, so the state is that of the last tracked
        commit at or before the time. Expiry is judged at `ts_ms`. The time must lie within
        DbOptions.history_retention of now (else RetentionError)."""
        self._check_open()
        t = parse_time(ts_ms)
        with self._state_lock:
            seq = self._as_of_seq(t)
            self._snapshots[seq] += 1
            snap = Snapshot(self, seq, read_ts=t, release=self._release_snapshot)
            self._as_of_snapshots.add(snap)
        return snap

    def changes(
        self, since: int | str | None = None, *, seq: int | None = None
    ) -> Iterator[tuple[int, bytes, bytes | None, int | None]]:
        """(seq, key, value or None, ts) for keys whose latest version is newer than a point, oldest
        change first, one per key (its newest version; None for a delete or an expired row).

        The point is `since` (ms or RFC 3339, mapped through the decaying time bins: it errs towards
        too many changes, never too few) or `seq=` directly. SSTs whose max_seq is not newer are skipped.
        """
        self._check_open()
        if (since is None) == (seq is None):
            raise ValueError("changes() needs exactly one of since= or seq=")
        if seq is None:
            seq = self._timeline.since_seq(parse_time(since))
            if seq is None:
                return iter(())
        now = self._clock.read()
        with self._state_lock:
            st = self._vs.state
            top = self._seq
            self._vs.iter_gens[st.gen] += 1
        try:
            sources = [st.mem.iter()] + [m.iter() for m in st.imm]
            sources += [r.iter() for _e, r in st.l0 if r.info.max_seq > seq]
            for run in st.runs:
                readers = [r for r in run.readers if r.info.max_seq > seq]
                sources += [r.iter() for r in readers]
            out = []
            last = None
            for row in merge_sources(sources):
                if row[0] == last or row[1] > top or (row[0] >= SYSTEM_PREFIX and is_system(row[0])):
                    continue
                last = row[0]
                if row[1] <= seq:
                    continue
                value = row[4]
                if value is not None and row[3] is not None and now > row[3]:
                    value = None
                out.append((row[1], row[0], value, row[2]))
        finally:
            self._vs.unpin(st.gen)
        out.sort(key=lambda c: (c[0], c[1]))
        return iter(out)

    def time_seq_histogram(self) -> list[tuple[str, int]]:
        """(RFC 3339 bin start, number of updates) oldest first, from the decaying time bins."""
        self._check_open()
        return self._timeline.histogram(self._seq)

    def reset_time_seq(self) -> None:
        """Forget the time bins (after a clock mishap); committed to the manifest at once."""
        self._check_writable()
        self._timeline.reset_bins()
        self._vs.commit(lambda m: m.replace(**self._manifest_extras(m)))

    # -- compaction --------------------------------------------------------------------------------
    def compact(self, full: bool = False, executor: str | None = None) -> CompactionStats:
        """Run what the scheduler picks until nothing is due; full=True merges everything into one run.

        executor: None (local, or Spark for jobs of at least DbOptions.spark_offload_min_bytes),
        "local" or "spark". Returns the jobs' CompactionStats (also accumulated in compaction_stats).
        A failing job (e.g. a filter that raises) leaves the database as it was and raises here."""
        self._check_writable()
        return self._compactor.compact(full=full, executor=executor)

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
    ) -> IngestStats:
        """Apply the records of `source` (lsm.sources.Source) beyond the durable frontier of remap `name`,
        exactly once: each batch of up to `batch_records` is one atomic commit of its rows and its binding.

        ttl_base "commit" counts record TTLs from the commit ts, "event" from the record's event_ts.
        `progress(stats)` runs after each batch; `should_stop()` is asked before each. Returns
        lsm.IngestStats(records, batches, frontier). See lsm.ingest for the rules.

        engine "local" (threads of this process) or "spark" (`spark=` session or `master=` URL) runs a bulk
        load instead: `tasks` slices written to SSTs in parallel, committed as ONE batch (lsm.bulk)."""
        if engine != "stream":
            if engine in ("local", "spark"):
                if max_records is not None:
                    raise ValueError("max_records applies to engine='stream' only: a bulk load takes everything")
                return bulk_mod.bulk_ingest(
                    self, source, name, engine=engine, spark=spark, master=master, tasks=tasks, ttl_base=ttl_base
                )
            raise ValueError(f"unknown ingest engine {engine!r}: use 'stream', 'local' or 'spark'")
        if tasks is not None:
            raise ValueError("tasks= applies to engine='local' or 'spark' only")
        if spark is not None or master is not None:
            raise ValueError("spark= and master= apply to engine='spark' only")
        return ingest_mod.ingest(
            self, source, name, max_records=max_records, batch_records=batch_records, ttl_base=ttl_base,
            sync=sync, progress=progress, should_stop=should_stop,
        )

    def reserve_seqs(self, n: int) -> tuple[int, int]:
        """Reserve `n` consecutive seqs for a bulk load (lsm.bulk); return (first seq, the load's ts).

        Freezes the memtable and waits for its flush, so every L0 file lies wholly below or above the
        range; later commits take seqs above it. The range is published (recovery never hands it out
        again) by the `commit_bulk` that uses it; an unused range is a gap in the seqs."""
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
            self._seq = base + n - 1
            self._last_commit_ts = ts
            if ts >= self._timeline.next_ms:
                self._timeline.on_commit(self._seq, ts)
        self._wait_flushed()
        return base, ts

    def bulk_output_spec(self) -> OutputSpec:
        """Where and how a bulk load writes its SSTs (tasks add attempt-unique suffixes to the prefix)."""
        self._check_writable()
        return self._vs.output_spec(f"{self._vs.alloc_ids():020d}-bulk", self.options.target_sst_bytes)

    def commit_bulk(self, entries: list[SstEntry], base: int, last: int, ts: int) -> None:
        """Commit a bulk load's SSTs (seqs in [base, last], from `reserve_seqs`; newest first) in ONE
        manifest edit, placed in L0 in seq order (lsm.bulk.place_bulk; BulkLoadConflictError if it cannot
        be). Pauses compaction for the edit, so none can commit across it."""
        self._check_writable()
        fsync_dir(self._sst_dir)
        with self._compactor.exclusive():

            def edit(m: Manifest) -> Manifest:
                return m.replace(
                    l0=bulk_mod.place_bulk(m, entries, base, last),
                    last_seq=max(m.last_seq, last),
                    clock_watermark=max(m.clock_watermark, ts),
                    **self._manifest_extras(m),
                )

            self._vs.commit(edit, self._vs.install)

    def remap(self, name: str) -> Remap:
        """The lsm.Remap of source `name` (its bindings, frontier, as-of lookups); UnknownSourceError if
        no ingest wrote it."""
        self._check_open()
        return load_remap(self, name)

    def sources(self) -> list[str]:
        """Names of the sources ingested into this database, ascending."""
        self._check_open()
        return list_sources(self)

    def snapshot_at_seq(self, seq: int, *, read_ts: int | None = None) -> Snapshot:
        """A snapshot of the state exactly as of `seq` (e.g. a remap binding's seq).

        Any seq up to the latest is readable while the commit after it lies within
        DbOptions.history_retention of now (judged from the seq tracker, conservatively); older ones
        raise RetentionError. Expiry is judged at `read_ts` (ms), default now; pass a binding's ts to see
        rows that have expired since."""
        self._check_open()
        if type(seq) is not int:
            raise TypeError(f"seq must be an int, not {type(seq).__name__}")
        if read_ts is not None and type(read_ts) is not int:
            raise TypeError(f"read_ts must be int ms, not {type(read_ts).__name__}")
        with self._state_lock:
            if not 0 <= seq <= self._seq:
                raise ValueError(f"{self.path}: seq {seq} is not in 0..{self._seq}")
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

    def now(self) -> int:
        """The DB clock's current time (ms; never goes backwards)."""
        return self._db._clock.read()

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

    def commit_rows(self, rows_at: Callable[[int, int], tuple[list[tuple], int]], sync: bool) -> tuple[int, int]:
        """Commit the (key, expire_ts, value) rows ``rows_at(ts, seq)`` builds under one seq and ts, system
        keys allowed; returns (seq, ts). See DB._commit_rows."""
        return self._db._commit_rows(rows_at, sync)

    def scan_raw(self, start: bytes, end: bytes, reverse: bool = False, max_seq: int | None = None) -> Iterator:
        """(key, value) rows in [start, end) as of `max_seq` (None: latest), system keys and expired rows
        included (for the engine's own rows, e.g. the remap)."""
        return self._db._scan(start, end, reverse, None, max_seq, True, None, False)

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


def _concat(first: Iterator, second: Iterator) -> Iterator:
    """`first` then `second`; closing the result closes both (scans unpin their state on close)."""
    try:
        yield from first
        yield from second
    finally:
        first.close()  # type: ignore[attr-defined]
        second.close()  # type: ignore[attr-defined]


def _prepare_dir(path: str, create: bool) -> None:
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



def _expiry_overflow(ts: int, ttl: int) -> None:
    raise ValueError(
        f"expiry {ts} + ttl {ttl} = {ts + ttl} ms does not fit a signed 64-bit integer; nothing was written"
    )

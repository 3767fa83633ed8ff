"""Reading a database's committed versions by sequence number, from its files, without opening it.

`lsm.sources.DatabaseLog` follows an upstream database that another process is writing: it must not
fence that writer (a writable `DB.open` would) and must see commits as soon as they are in the WAL. So
this module reads the files directly: the newest manifest, the SSTs it lists (mmapped, so a compaction
deleting them afterwards does not matter) and the WAL segments not yet flushed. A flush or compaction
committing in the middle is detected (the manifest id changed, or a file vanished) and the read retried.

What the store still holds of its history: every version of every key, except what a flush or
compaction dropped (a shadowed version no snapshot or retention window needed, a tombstone or expired
row at the bottom) or rewrote (a compaction filter, the TTL filter turning an expired row into a
tombstone). The merge records the largest seq it dropped or rewrote in `CompactionStats.history_floor`,
and the flush or compaction commits it in the manifest (`Manifest.history_floor`) together with its
output. So every version with seq > floor is stored exactly as committed, and reading history from a
start at or below the floor would silently miss or alter something: `HistoryView.floor` says where
exact history begins. SSTs whose rows do not carry a seq or a commit ts (format version 0, or rows
compacted from such files) raise the floor to their max_seq.

Which seqs are final: a bulk load (lsm.bulk) reserves a range of seqs, recorded in the manifest
(`seq_reservations`), and commits them at its end, while later plain commits are durable at once. So
the last durable seq is not a frontier: `stable_seq(m.seq_reservations, last)` is, the largest seq below which every seq
is committed or can never commit (docs/reliability.md). A committed load is ONE commit for readers of
history, at its last seq (`Manifest.bulk_loads`): `HistoryView.commits` gives its rows that seq, and a
view opened from a start inside a load reads the whole load.

Reading a range costs one pass over the SSTs whose seq range overlaps it, and memory for the versions
returned.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from formats.manifest import Manifest
from formats.row import RowFeature
from formats.sst import SstReader
from formats.wal import WalRecord, decode_segment
from lsm.checkpoints import sst_path
from lsm.errors import CorruptionError, LsmError, NotADatabaseError
from lsm.manifest import ManifestStore
from lsm.wal_replay import live_segments, read_segments, unflushed
from storage.paths import DbStore, open_store
from storage.ssts import open_sst

ATTEMPTS = 100  # of reading a consistent view while the upstream flushes and compacts


class HistoryView:
    """A consistent read-only view of a database's files at one manifest version, plus its WAL tail,
    holding the SSTs whose seqs overlap the range it was opened for (`open_view`).

    `last_seq`: the last durable seq (in an SST or a complete WAL record). `stable_seq`: the last seq
    below which every seq is final (see the module docstring). `floor`: versions with seq > floor are
    stored exactly as committed (0: nothing was ever dropped or rewritten).
    """

    def __init__(
        self,
        path: str,
        manifest_id: int,
        manifest: Manifest,
        readers: list[SstReader],
        wal: list[WalRecord],
        seqs: tuple[int, int | None] = (0, None),
    ) -> None:
        self.path = path
        self.manifest_id = manifest_id
        self.manifest = manifest
        self.readers = readers
        self.wal = wal
        self.seqs = seqs
        self.floor = history_floor(manifest)
        self.last_seq = max([manifest.last_seq] + [rec.seq for rec in wal])
        self.stable_seq = stable_seq(manifest.seq_reservations, self.last_seq)

    def versions(self, start: int, stop: int | None = None) -> list[tuple]:
        """Every stored version ``(key, seq, ts, expire_ts, value)`` with start <= seq < stop (stop None:
        no bound), ordered by (seq, key), within the range the view was opened for. Exact history only
        when start > floor."""
        lo, hi_open = self.seqs
        if start < lo or (hi_open is not None and (stop is None or stop > hi_open)):
            raise ValueError(f"seqs [{start}, {stop}) lie outside the view's range [{lo}, {hi_open})")
        hi = self.last_seq + 1 if stop is None else stop
        out: list[tuple] = []
        if start >= hi:
            return out
        for r in self.readers:
            info = r.info
            if info.max_seq < start or info.min_seq >= hi:
                continue
            out.extend(row for row in r if start <= row[1] < hi)
        for rec in self.wal:
            if start <= rec.seq < hi:
                out.extend(rec.rows)
        out.sort(key=_seq_key)
        return out

    def commits(self, start: int, stop: int | None = None) -> list[tuple[int, tuple]]:
        """``(commit seq, version)`` of every stored version of the commits with start <= commit seq <
        stop and <= `stable_seq` (never a commit that may still have a reserved seq below it), ordered
        by (commit seq, seq, key). A commit's seq is its version's seq, except for a committed bulk load:
        its last seq for all of its rows, so the load is taken whole or not at all. Exact history only
        when `load_start(start)` > floor."""
        hi = self.stable_seq + 1 if stop is None else min(stop, self.stable_seq + 1)
        loads = [r for r in self.manifest.bulk_loads if r[1] >= start and r[0] < hi]
        lo = load_start(self.manifest, start)
        out = []
        for row in self.versions(lo, hi):
            seq = row[1]
            commit = next((last for first, last in loads if first <= seq <= last), seq)
            if start <= commit < hi:
                out.append((commit, row))
        return out

    def close(self) -> None:
        """Close the SST readers (their mmaps). Idempotent."""
        for r in self.readers:
            r.close()
        self.readers = []

    def __enter__(self) -> HistoryView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def history_floor(m: Manifest) -> int:
    """Versions with seq above this are stored exactly as committed in the database of manifest `m`: its
    recorded floor, raised to the max_seq of any SST whose rows lack a seq or a commit ts."""
    floor = m.history_floor
    for e in m.all_ssts():
        info = e.info
        feats = info.row_features
        if info.format_version == 0 or RowFeature.Seq not in feats or RowFeature.Timestamp not in feats:
            floor = max(floor, info.max_seq)
    return floor


def stable_seq(held: Iterable[tuple[int, int]], last_seq: int) -> int:
    """The largest seq S (of a database whose last durable seq is `last_seq`, with the seq ranges `held`
    reserved by running bulk loads) such that every seq <= S is committed or can never commit: a
    reserved range holds it below the range."""
    return min([last_seq, *(first - 1 for first, _ in held)])


def load_start(m: Manifest, seq: int) -> int:
    """The first seq of the committed bulk load whose range holds `seq`, else `seq`: where a read of
    the commits from `seq` on must start."""
    return next((first for first, last in m.bulk_loads if first <= seq <= last), seq)


def latest_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The newest manifest of the database at `path` (NotADatabaseError if there is none)."""
    db = _require_db(os.fspath(path))
    return _latest(ManifestStore(db), db.root)[1]


def read_version(path: str | os.PathLike[str], manifest_id: int) -> Manifest:
    """Manifest version `manifest_id` of the database at `path`; LsmError if it is gone (pruned: nothing
    kept it, such as a checkpoint naming it)."""
    path = os.fspath(path)
    try:
        return ManifestStore(_require_db(path)).read(manifest_id)
    except FileNotFoundError:
        raise LsmError(f"{path}: manifest version {manifest_id} is gone (its checkpoint expired or was deleted)") from None


def _require_db(path: str) -> DbStore:
    """The store of `path`; NotADatabaseError unless it has a manifest directory (on an object store:
    manifest objects)."""
    db = open_store(path)
    if not db.storage.holds_directory(db.paths.manifest_dir):
        raise NotADatabaseError(f"{path}: not an lsm-sim database (no manifest directory)")
    return db


def _seq_key(row: tuple) -> tuple:
    return (row[1], row[0])


class _Changed(Exception):
    """A file of the view vanished or the manifest moved on while reading: read again."""


def _latest(store: ManifestStore, path: str) -> tuple[int, Manifest]:
    for _ in range(ATTEMPTS):
        try:
            mid, man = store.latest()
        except FileNotFoundError:  # pruned between listing and reading: list again
            continue
        if man is None:
            raise NotADatabaseError(f"{path}: no manifest: not an lsm-sim database")
        return mid, man
    raise LsmError(f"{path}: the manifest kept changing while being read")


def _wal_records(db: DbStore, man: Manifest) -> list[WalRecord]:
    try:
        return unflushed(list(read_segments(db, live_segments(db, man.wal_replay_from))), man)
    except FileNotFoundError:  # retired by a flush since the listing
        raise _Changed from None


def _open_readers(db: DbStore, man: Manifest, lo: int, stop: int | None) -> list[SstReader]:
    readers: list[SstReader] = []
    try:
        for e in man.all_ssts():
            if e.info.max_seq >= lo and (stop is None or e.info.min_seq < stop):
                p = sst_path(db.paths, man, e.name)  # a clone's SST may be its source's
                readers.append(open_sst(p, storage=db.storage if p.startswith(db.root) else None))
    except BaseException:
        for r in readers:
            r.close()
        raise
    return readers


def open_view(
    path: str | os.PathLike[str], start: int = 0, stop: int | None = None, at: int | None = None
) -> HistoryView:
    """A consistent `HistoryView` of the database at `path` (which another process may be writing), for
    reading the versions with start <= seq < stop: only the SSTs whose seqs overlap that range are
    opened (a follower reading the newest commits opens the newest SSTs, if any).

    `at`: the view of manifest version `at` alone (no WAL), which a checkpoint holds: what a bulk load's
    tasks read (`lsm.sources.database_hold`), so that the writer's gc cannot delete an SST they read."""
    path = os.fspath(path)
    db = _require_db(path)
    store = ManifestStore(db)
    if at is not None:
        man = read_version(path, at)
        lo = load_start(man, start)
        return HistoryView(path, at, man, _open_readers(db, man, lo, stop), [], (lo, stop))
    for _ in range(ATTEMPTS):
        mid, man = _latest(store, path)
        lo = load_start(man, start)  # a start inside a bulk load reads the whole load (one commit)
        readers: list[SstReader] = []
        try:
            readers = _open_readers(db, man, lo, stop)
            wal = _wal_records(db, man)
            # a flush commits its manifest before retiring the segments it flushed: if the manifest did
            # not move while we read the WAL, no segment we needed was gone
            if _latest(store, path)[0] != mid:
                raise _Changed
            return HistoryView(path, mid, man, readers, wal, (lo, stop))
        except (_Changed, FileNotFoundError):
            for r in readers:
                r.close()
    raise LsmError(f"{path}: the database kept changing while its history was being read")


class WalTail:
    """The last durable seq of a database, cheaply and repeatedly: the manifest's `last_seq` and the
    complete WAL records after it, read incrementally (each call reads only bytes appended since: a
    segment file grows, a WAL object is read once, `Storage.read_appended`)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._db = _require_db(self.path)
        self._store = ManifestStore(self._db)
        self._segments: dict[str, tuple[Any, int, int]] = {}  # path -> (identity, position read, max seq)

    def last_seq(self) -> int:
        """The last seq durable in the database: in an SST or in a complete WAL record."""
        return self._read()[0]

    def stable_seq(self) -> int:
        """The last seq below which every seq is committed or can never commit (`stable_seq`): what a
        reader may treat as final."""
        top, man = self._read()
        return stable_seq(man.seq_reservations, top)

    def _read(self) -> tuple[int, Manifest]:
        """(the last durable seq, the manifest it was read with)."""
        for _ in range(ATTEMPTS):
            mid, man = _latest(self._store, self.path)
            top = man.last_seq
            seen: dict[str, tuple[Any, int, int]] = {}
            for _sid, seg in live_segments(self._db, man.wal_replay_from):
                state = self._scan(seg)
                if state is not None:
                    seen[seg] = state
                    top = max(top, state[2])
            self._segments.update(seen)
            # a flush that committed meanwhile may have retired a segment before we read it, its rows
            # now in an SST our manifest does not show: only an unchanged manifest makes the sum whole
            if _latest(self._store, self.path)[0] == mid:
                self._segments = seen
                return top, man
        raise LsmError(f"{self.path}: the database kept changing while its WAL was being read")

    def _scan(self, seg: str) -> tuple[Any, int, int] | None:
        old = self._segments.get(seg)
        got = self._db.storage.read_appended(seg, None if old is None else old[0], 0 if old is None else old[1])
        if got is None:
            return None  # flushed and retired since the listing: the manifest we read covers it
        ident, start, buf = got
        top = old[2] if old is not None and start == old[1] else 0
        pos = start
        if buf:
            try:
                records, torn = decode_segment(buf, seg)
            except CorruptionError as e:  # offsets are relative to `start`: report the file's
                raise CorruptionError(seg, start + e.offset, e.detail) from None
            for r in records:
                top = max(top, r.seq)
            pos += len(buf) if torn is None else torn
        return ident, pos, top


__all__ = ["HistoryView", "WalTail", "history_floor", "latest_manifest", "load_start", "open_view", "read_version", "stable_seq"]

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

from formats.manifest import Manifest
from formats.row import RowFeature
from formats.sst import SstReader
from formats.wal import WalRecord, decode_segment
from lsm import wal as wal_files
from lsm.errors import CorruptionError, LsmError, NotADatabaseError
from lsm.manifest import ManifestStore

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
    path = os.fspath(path)
    if not os.path.isdir(os.path.join(path, "manifest")):
        raise NotADatabaseError(f"{path}: not an lsm-sim database (no manifest directory)")
    return _latest(ManifestStore(path), path)[1]


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


def _wal_records(path: str, man: Manifest) -> list[WalRecord]:
    out: list[WalRecord] = []
    for _sid, seg in wal_files.live_segments(os.path.join(path, "wal"), man.wal_replay_from):
        try:
            records, _torn = wal_files.read_segment(seg)
        except FileNotFoundError:
            raise _Changed from None
        out.extend(r for r in records if r.seq > man.last_seq)
    out.sort(key=lambda r: r.seq)
    return out


def open_view(path: str | os.PathLike[str], start: int = 0, stop: int | None = None) -> HistoryView:
    """A consistent `HistoryView` of the database at `path` (which another process may be writing), for
    reading the versions with start <= seq < stop: only the SSTs whose seqs overlap that range are
    opened (a follower reading the newest commits opens the newest SSTs, if any)."""
    path = os.fspath(path)
    if not os.path.isdir(os.path.join(path, "manifest")):
        raise NotADatabaseError(f"{path}: not an lsm-sim database (no manifest directory)")
    store = ManifestStore(path)
    for _ in range(ATTEMPTS):
        mid, man = _latest(store, path)
        lo = load_start(man, start)  # a start inside a bulk load reads the whole load (one commit)
        readers: list[SstReader] = []
        try:
            for e in man.all_ssts():
                if e.info.max_seq >= lo and (stop is None or e.info.min_seq < stop):
                    readers.append(SstReader(os.path.join(path, "sst", e.name)))
            wal = _wal_records(path, man)
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
    complete WAL records after it, read incrementally (each call reads only bytes appended since)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        if not os.path.isdir(os.path.join(self.path, "manifest")):
            raise NotADatabaseError(f"{self.path}: not an lsm-sim database (no manifest directory)")
        self._store = ManifestStore(self.path)
        self._segments: dict[str, tuple[tuple[int, int], int, int]] = {}  # path -> (ident, pos, max seq)

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
            seen: dict[str, tuple[tuple[int, int], int, int]] = {}
            for _sid, seg in wal_files.live_segments(os.path.join(self.path, "wal"), man.wal_replay_from):
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

    def _scan(self, seg: str) -> tuple[tuple[int, int], int, int] | None:
        try:
            fd = os.open(seg, os.O_RDONLY)
        except FileNotFoundError:
            return None  # flushed and retired since the listing: the manifest we read covers it
        try:
            st = os.fstat(fd)
            ident = (st.st_dev, st.st_ino)
            old = self._segments.get(seg)
            ident0, pos, top = (
                old if old is not None and old[0] == ident and old[1] <= st.st_size else (ident, 0, 0)
            )
            if st.st_size > pos:
                buf = os.pread(fd, st.st_size - pos, pos)
                try:
                    records, torn = decode_segment(buf, seg)
                except CorruptionError as e:  # offsets are relative to `pos`: report the file's
                    raise CorruptionError(seg, pos + e.offset, e.detail) from None
                for r in records:
                    top = max(top, r.seq)
                pos += len(buf) if torn is None else torn
            return ident0, pos, top
        finally:
            os.close(fd)


__all__ = ["HistoryView", "WalTail", "history_floor", "latest_manifest", "load_start", "open_view", "stable_seq"]

"""THE replay of a database's WAL: which segments (objects) hold records not yet in an SST, and those
records, read the same way by every reader (SlateDB's wal_replay.rs): a writable open (under the
exclusive flock of the fencing protocol, lsm.wal), a read-only open, the history reader
(lsm.history), and inspection (lsm.inspect, `lsm wal dump`).

What replay applies: the records of the segments from the manifest's ``wal_replay_from`` on, in
segment order, whose seq is above the manifest's ``last_seq`` (an object-store WAL object may also
hold the last records of a memtable already flushed: lsm.wal_object). A torn final record is dropped;
other damage is handled by the recovery mode (`DbOptions.wal_recovery_mode`, lsm.wal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from formats.errors import CorruptionError
from formats.manifest import Manifest
from formats.wal import WalRecord, decode_segment
from lsm.wal import ABSOLUTE_CONSISTENCY, POINT_IN_TIME, TOLERATE_CORRUPTED_TAIL, TOLERATE_TRUNCATED_TAIL
from storage.paths import DbStore, wal_ids


@dataclasses.dataclass
class SegmentRead:
    """One segment as replay read it: its records, the offset of a torn tail (None when intact), and
    whether replay stops after it (point_in_time found damage)."""

    id: int
    path: str
    records: list[WalRecord]
    torn: int | None = None
    stop: bool = False


def live_segments(store: DbStore, replay_from: int) -> list[tuple[int, str]]:
    """(id, path) of the segments (objects) not yet flushed: those with id >= `replay_from`, ascending.
    Older ones may still lie there until the flush that covered them deletes them; nothing reads them."""
    return [(i, p) for i, p in wal_ids(store.storage, store.paths) if i >= replay_from]


def decode(buf: bytes, path: str, mode: str) -> tuple[list[WalRecord], int | None, bool]:
    """The records of one segment's bytes under recovery `mode`: (records, torn tail offset, stop)."""
    try:
        records, torn = decode_segment(buf, path, mode == TOLERATE_CORRUPTED_TAIL)
    except CorruptionError as e:
        if mode != POINT_IN_TIME:
            raise
        records, _ = decode_segment(buf[: e.offset], path)
        return records, e.offset, True
    if torn is not None and mode == ABSOLUTE_CONSISTENCY:
        raise CorruptionError(path, torn, "incomplete WAL record (wal_recovery_mode='absolute_consistency')")
    return records, torn, torn is not None and mode == POINT_IN_TIME


def read_segments(
    store: DbStore,
    segments: list[tuple[int, str]],
    mode: str = TOLERATE_TRUNCATED_TAIL,
    exclusive: bool = False,
    missing_ok: bool = False,
) -> Iterator[SegmentRead]:
    """Each of `segments` decoded, in order, up to and including the first that stops replay.
    `exclusive` (a writable open) reads each under the fencing protocol's exclusive lock; `missing_ok`
    skips one deleted since the listing (a reader racing the writer's flush) instead of raising."""
    storage = store.storage
    for sid, path in segments:
        try:
            buf = storage.read_exclusive(path) if exclusive else storage.read(path)
        except FileNotFoundError:
            if missing_ok:
                continue
            raise
        records, torn, stop = decode(buf, path, mode)
        yield SegmentRead(sid, path, records, torn, stop)
        if stop:
            return


def unflushed(reads: list[SegmentRead] | Iterator[SegmentRead], manifest: Manifest) -> list[WalRecord]:
    """The records replay applies (seq above the manifest's ``last_seq``), in seq order."""
    out = [r for seg in reads for r in seg.records if r.seq > manifest.last_seq]
    out.sort(key=lambda r: r.seq)
    return out


__all__ = ["SegmentRead", "decode", "live_segments", "read_segments", "unflushed"]

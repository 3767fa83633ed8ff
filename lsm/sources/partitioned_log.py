"""A Kafka-like partitioned log on the file system: `PartitionedLog` (the source) and `LogWriter` (producer).

Given an object-store URL (``s3://bucket/prefix``) instead of a directory, both construct their
object-store counterparts (`lsm.sources.object_log`: immutable segment objects per partition, the same
records, offsets and checks); what follows is the local log.

A directory holds one append-only file per partition, ``<partition>.log`` (decimal, no leading zeros,
0..2**64-1: the ids a remap binding stores), in the format of `formats.log`; a record's offset is its
index in its file. Files appear atomically: the writer creates a file with its header under a temporary
name and links it into place, so a reader never sees a half-written header. Each append is one write(2),
so a reader sees either nothing of a record, a prefix of it (a torn tail, not yet a record) or all of it.

A partition file must be a regular file: a FIFO, a device or a directory under such a name is refused
with `SourceError` (opened without blocking and checked on the opened descriptor, so nothing waits on a
FIFO forever). The writer refuses a directory that is an lsm-sim database.

The reader keeps, per partition, the byte position of every complete record it has seen, so `end()` only
reads what was appended since the last call and `read(p, start)` seeks straight to `start`. A file that
got shorter or was replaced (a new inode) is indexed again from the start: its `end()` may then be below
what a consumer already read, which ingest reports as `SourceRegressedError`.

Each record is verified (both checksums) once: by the index pass. Reading verifies it again unless the
file had settled when indexed and still has the same inode, size, mtime and ctime after the read (see
`SETTLED_NS`, `_chunks` and docs/ingest.md). Reading decodes runs of about `CHUNK` bytes in one loop
(`formats.log.decode_run`); `read_runs` hands them to bulk consumers as tuples, `read` as `SourceRecord`s.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import re
import stat
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from formats import fileio
from formats.log import (
    FILE_HEADER,
    MARKER_VERSION,
    RECORD_HEADER,
    check_file_header,
    decode_fields,
    decode_run,
    encode_file_header,
    encode_marker,
    encode_record,
    file_version,
    scan_heads,
    scan_records,
)
from lsm.clock import I64_MAX, I64_MIN, check_i64_ms
from lsm.errors import LsmError, SourceError
from lsm.sources.protocol import MAX_PARTITION, SourceRecord, check_range, make_record
from lsm.syskeys import SYSTEM_PREFIX, is_system
from storage import LOCAL, PublishUnknownError, storage_for

_FILE_NAME = re.compile(r"(0|[1-9][0-9]*)\.log")
CHUNK = 1 << 20  # bytes read at a time while indexing or reading
# A file whose last change (ctime) is this much older than the moment we look at it cannot change again
# without its ctime changing too (timestamps are at worst a clock tick plus the file system's granularity,
# 2 s on FAT, behind the clock): then what the index verified can be trusted while the stamp holds.
SETTLED_NS = 3_000_000_000
_NOT_A_PARTITION = "not a partition file (partition files are regular files)"


def _check_storable(key: object, ttl: object, event_ts: object) -> None:
    """ValueError for a record field every ingest of it would refuse (a key in the store's reserved
    space, a ttl or event_ts beyond the i64 of the row format): refused when written, it cannot block
    the log's consumers at that offset for good."""
    if isinstance(key, bytes) and is_system(key):
        raise ValueError(f"key {key!r} lies in the store's reserved key space (it starts with {SYSTEM_PREFIX!r})")
    if type(ttl) is int and ttl > I64_MAX:
        raise ValueError(f"ttl {ttl} ms does not fit a signed 64-bit integer")
    if type(event_ts) is int:
        check_i64_ms(event_ts, "event_ts")


def partition_path(directory: str, partition: int) -> str:
    """The file that holds `partition` of the log in `directory`."""
    return os.path.join(directory, f"{partition}.log")


def open_partition_file(path: str, flags: int) -> int:
    """``os.open(path, flags)`` for a partition file, refusing anything but a regular file with
    `SourceError`: reading a FIFO would wait for a writer forever, and a device or a directory is no log.
    The open itself does not block (O_NONBLOCK, cleared again for a regular file) and the check is made on
    the opened descriptor, so a file swapped in after a check of the name cannot slip through.
    FileNotFoundError passes through."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except IsADirectoryError:  # (a directory opened for writing)
        raise SourceError(f"{path}: a directory, {_NOT_A_PARTITION}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a device"
            raise SourceError(f"{path}: {kind}, {_NOT_A_PARTITION}")
        os.set_blocking(fd, True)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _scan(fd: int, pos: int, path: str, payloads: bool = True) -> tuple[array, int]:
    """Verify the complete records of the file from byte `pos` on (with `payloads` False, their header
    checksums only: `formats.log.scan_records`); return (their positions, the byte after the last one).
    Stops at a torn tail; raises CorruptionError at a damaged record."""
    positions = array("q")
    append = positions.append

    def scan(buf: bytes, base: int) -> int:
        if payloads:
            return scan_records(buf, base, path, append)
        found, end = scan_heads(buf, base, path)  # in bulk: no int object per record (int64, native order)
        positions.frombytes(found.tobytes())
        return end

    while True:
        buf = os.pread(fd, CHUNK, pos)
        if not buf:
            return positions, pos
        i = scan(buf, pos)
        if i == 0:  # one record larger than the chunk, or a torn tail: read exactly what it needs
            if len(buf) < CHUNK or len(buf) < RECORD_HEADER.size:  # the file ends in this record: torn
                return positions, pos
            length = int.from_bytes(buf[0:4], "big")  # trusted: the header checksum was checked
            buf = os.pread(fd, RECORD_HEADER.size + length, pos)
            i = scan(buf, pos)
            if i == 0:
                return positions, pos
        pos += i


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What any write(2), truncate or replacement of a file changes (on a local file system)."""
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class _Index:
    __slots__ = ("checked", "ident", "marked", "markers", "positions", "scanned", "stamp", "trusted")

    def __init__(self, ident: tuple[int, int]) -> None:
        self.ident = ident  # (st_dev, st_ino): a replaced file is indexed again
        self.positions = array("q")  # byte position of record i
        self.scanned = FILE_HEADER.size  # byte after the last complete record
        self.stamp: tuple[int, ...] | None = None  # _stamp of the file when last looked at
        self.trusted = (0, 0)  # bytes verified and unchanged while the file keeps `stamp`
        self.checked = FILE_HEADER.size  # payload checksums verified up to here (<= scanned)
        self.markers: list[tuple[int, int]] = []  # (offset, ts) of the progress markers below `marked`
        self.marked = 0  # offsets searched for progress markers (`PartitionedLog.progress`)


class PartitionedLog:
    """A `Source` over the partition files of `directory` (written by `LogWriter`).

    Not thread-safe: give each consumer its own instance. `end(p)` costs O(bytes appended since the last
    call); `read(p, start, stop)` costs O(records read).
    """

    def __new__(cls, directory: str | os.PathLike[str] | None = None, *args: Any, **kwargs: Any) -> PartitionedLog:
        # a URL is a log of segment objects (lsm.sources.object_log): the same source on an object store
        if cls is PartitionedLog and directory is not None and not storage_for(os.fspath(directory)).appends:
            from lsm.sources.object_log import ObjectLog

            return super().__new__(ObjectLog)
        return super().__new__(cls)

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory)
        self.name = self.directory
        if not os.path.isdir(self.directory):
            raise SourceError(f"{self.directory}: not a directory (no partitioned log here)")
        self._index: dict[int, _Index] = {}

    def __repr__(self) -> str:
        return f"PartitionedLog({self.directory!r})"

    def partitions(self) -> list[int]:
        """Partition ids whose files exist now, ascending."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = sorted(int(m.group(1)) for n in names if (m := _FILE_NAME.fullmatch(n)))
        if found and found[-1] > MAX_PARTITION:  # (not written by LogWriter, which refuses such ids)
            raise SourceError(
                f"{partition_path(self.directory, found[-1])}: partition id beyond 2**64-1, the largest a "
                "remap binding stores: not a partition of this log (rename or remove it)"
            )
        return found

    def end(self, partition: int) -> int:
        """Number of complete records of `partition` (0 if its file does not exist)."""
        check_range(partition, 0, None)
        idx = self._refresh(partition)
        return 0 if idx is None else len(idx.positions)

    def plan_end(self, partition: int) -> int:
        """`end` for planning a bulk load (lsm.bulk): counts and locates the records, checking each
        header's checksum (what makes its length, so the next record's position, trustworthy) but not
        the payload's, which the task that reads the record verifies. A later `end` or `read` verifies
        the payloads this skipped. O(bytes appended since the last call)."""
        check_range(partition, 0, None)
        idx = self._refresh(partition, payloads=False)
        return 0 if idx is None else len(idx.positions)

    def slices(self, partition: int, start: int, stop: int, max_records: int) -> list[Any]:
        """`BatchSource.slices`: `lsm.sources.slices.LogSlice`s, byte ranges of the partition file from the
        index (a pass over the record headers, as `plan_end`; the tasks verify the payloads they read)."""
        from lsm.sources.slices import log_slices  # (it imports this module)

        check_range(partition, start, stop)
        if stop <= start:
            return []
        return log_slices(self, self._refresh(partition, payloads=False), partition, start, stop, max_records)

    def torn_bytes(self, partition: int) -> int:
        """Bytes after the last complete record of `partition`: a record a producer is still appending
        (or one that a producer killed mid-append left, until a `LogWriter` reopens the file)."""
        check_range(partition, 0, None)
        idx = self._refresh(partition)
        if idx is None:
            return 0
        try:
            return max(0, os.path.getsize(partition_path(self.directory, partition)) - idx.scanned)
        except FileNotFoundError:
            return 0

    def read(self, partition: int, start: int, stop: int | None = None) -> Iterator[SourceRecord]:
        """Complete records with start <= offset < stop, in offset order (see `Source.read`).

        The arguments are checked and the file indexed at the call (corruption raises here); the records
        are decoded lazily as the iterator is consumed.
        """
        span = self._span(partition, start, stop)
        return iter(()) if span is None else self._records(partition, *span)

    def _records(self, partition: int, idx: _Index, lo: int, hi: int) -> Iterator[SourceRecord]:
        path = partition_path(self.directory, partition)
        for buf, first, i, j, verify in self._chunks(path, idx, lo, hi):
            try:
                run, _ = decode_run(buf, first, path, partition, i, verify)
            except LsmError:
                # a damaged record: hand out the records before it, as a record-at-a-time reader would
                pos = 0
                for k in itertools.count(i):
                    f = decode_fields(buf, pos, first, path)  # raises at the damaged record
                    if f is None:
                        return
                    pos = f[0]
                    if f[1] is not None:  # (a progress marker is no record)
                        yield make_record(partition, k, *f[1:])
            for t in run:
                if t[2] is not None:  # a progress marker takes an offset but is no record
                    yield make_record(*t)
            if len(run) < j - i:  # the file shrank under us: stop at what is still there
                return

    def progress(self, partition: int, start: int = 0, stop: int | None = None) -> list[tuple[int, int]]:
        """The progress markers (`LogWriter.advance`) at offsets [start, stop) of `partition` as
        ``(offset, ts)`` in offset order: after the marker at `offset`, no record of the partition has
        event_ts < ts. Found once per file by looking at the first payload byte of each record (a marker
        is the only one-key map); O(records appended since the last call), then a bisect."""
        span = self._span(partition, start, stop)
        if span is None:
            return []
        idx, lo, hi = span
        if idx.marked < hi:
            self._find_markers(partition, idx, hi)
        found = idx.markers
        a = bisect_left(found, (lo, I64_MIN))
        b = bisect_left(found, (hi, I64_MIN), a)
        return found[a:b]

    def _find_markers(self, partition: int, idx: _Index, hi: int) -> None:
        import numpy as np

        path = partition_path(self.directory, partition)
        positions = idx.positions
        for buf, first, i, j, _verify in self._chunks(path, idx, idx.marked, hi):
            at = np.frombuffer(positions, np.int64, j - i, i * positions.itemsize) - first + RECORD_HEADER.size
            at = at[at < len(buf)]  # (an empty payload at the end: not a marker; the reader reports it)
            for k in np.flatnonzero(np.frombuffer(buf, np.uint8)[at] == 0x81).tolist():  # fixmap of 1 key
                f = decode_fields(buf, positions[i + k] - first, first, path)
                if f is not None and f[1] is None:
                    idx.markers.append((i + k, f[4]))
            idx.marked = j

    def read_runs(self, partition: int, start: int, stop: int | None = None) -> Iterator[tuple[list[tuple], bool]]:
        """`read` for bulk consumers (ingest): the same records, as runs of plain tuples with the fields
        of `SourceRecord` in order, ``(partition, offset, key, value, ttl, event_ts, tx, tx_end)``.

        Yields ``(tuples, has_tx)``, a run of about `CHUNK` bytes of consecutive offsets (one record per
        offset) and whether any of them belongs to a transaction. Same checks, errors and laziness as
        `read`. O(records read)."""
        span = self._span(partition, start, stop)
        return iter(()) if span is None else self._runs(partition, *span)

    def _span(self, partition: int, start: int, stop: int | None) -> tuple[_Index, int, int] | None:
        """The checked arguments of a read as (index, first, end offset), or None when nothing is in range.
        Indexes the file now, so corruption and bad arguments raise at the call, not at iteration."""
        check_range(partition, start, stop)
        idx = self._refresh(partition)
        if idx is None:
            return None
        n = len(idx.positions)
        hi = n if stop is None else min(stop, n)
        return None if start >= hi else (idx, start, hi)

    def _runs(self, partition: int, idx: _Index, lo: int, hi: int) -> Iterator[tuple[list[tuple], bool]]:
        path = partition_path(self.directory, partition)
        for buf, first, i, j, verify in self._chunks(path, idx, lo, hi):
            run = decode_run(buf, first, path, partition, i, verify)
            yield run
            if len(run[0]) < j - i:  # the file shrank under us: stop at what is still there
                return

    def _chunks(self, path: str, idx: _Index, lo: int, hi: int) -> Iterator[tuple[bytes, int, int, int, bool]]:
        """The bytes of records [lo, hi) in reads of about CHUNK bytes (at least one record each), as
        ``(bytes, file position of the first, its offset, the offset after the last, verify)``.

        `verify` is False only for bytes the index verified (both checksums) in a file that has not
        changed since: same inode, size, mtime and ctime after the read as when it was indexed, and
        settled then (see SETTLED_NS). Each checksum is then computed once per record, not twice."""
        positions = idx.positions
        n = len(positions)
        fd = open_partition_file(path, os.O_RDONLY)
        try:
            i = lo
            while i < hi:
                first = positions[i]
                j = bisect_left(positions, first + CHUNK, i + 1, hi) if hi - i > 1 else hi
                last = positions[j] if j < n else idx.scanned
                buf = os.pread(fd, last - first, first)
                t0, t1 = idx.trusted
                verify = not (t0 <= first and last <= t1 and _stamp(os.fstat(fd)) == idx.stamp)
                yield buf, first, i, j, verify
                i = j
        finally:
            os.close(fd)

    def _refresh(self, partition: int, payloads: bool = True) -> _Index | None:
        path = partition_path(self.directory, partition)
        try:
            fd = open_partition_file(path, os.O_RDONLY)
        except FileNotFoundError:
            self._index.pop(partition, None)
            return None
        try:
            now = time.time_ns()
            st = os.fstat(fd)
            ident = (st.st_dev, st.st_ino)
            idx = self._index.get(partition)
            if idx is None or idx.ident != ident or st.st_size < idx.scanned:
                check_file_header(os.pread(fd, FILE_HEADER.size, 0), path)
                idx = self._index[partition] = _Index(ident)
            stamp = _stamp(st)
            if stamp != idx.stamp:  # written to since we last looked: trust none of the old bytes
                idx.trusted = (0, 0)
                if st.st_size > idx.scanned:
                    start = idx.scanned
                    found, idx.scanned = _scan(fd, start, path, payloads)
                    idx.positions.extend(found)
                    if payloads and idx.checked == start:
                        idx.checked = idx.scanned
                        if st.st_ctime_ns <= now - SETTLED_NS:
                            idx.trusted = (start, idx.scanned)
                idx.stamp = stamp
            if payloads and idx.checked < idx.scanned:  # indexed by `plan_end`: verify the payloads now
                _scan(fd, idx.checked, path)
                idx.checked = idx.scanned
            return idx
        finally:
            os.close(fd)


class LogWriter:
    """Appends records to the partition files of `directory` (created if missing): the producer side.

    Each `append` is one write(2), visible to readers at once; with ``sync=True`` it is also fsynced
    (durable across a machine crash, not only a killed process). One writer per partition at a time:
    a partition file is locked (flock) while a writer has it open, and a second writer gets `SourceError`.
    Opening an existing partition cuts off a torn tail left by a producer that died mid-append (no reader
    ever consumed it), so appends continue at the next offset. Partition ids are 0..2**64-1 (ValueError
    beyond); a `directory` that is an lsm-sim database is refused (SourceError).
    """

    def __new__(cls, directory: str | os.PathLike[str] | None = None, *args: Any, **kwargs: Any) -> LogWriter:
        # a URL: the writer of a log of segment objects (lsm.sources.object_log)
        if cls is LogWriter and directory is not None and not storage_for(os.fspath(directory)).appends:
            from lsm.sources.object_log import ObjectLogWriter

            return super().__new__(ObjectLogWriter)
        return super().__new__(cls)

    def __init__(self, directory: str | os.PathLike[str], *, sync: bool = False) -> None:
        from lsm.inspect import is_database_dir

        self.directory = os.fspath(directory)
        self.sync = sync
        if is_database_dir(self.directory):  # its files would sit among the store's, unseen by both
            raise SourceError(f"{self.directory}: an lsm-sim database directory, not a partitioned log")
        os.makedirs(self.directory, exist_ok=True)
        self._files: dict[int, list[Any]] = {}  # partition -> [fd, next offset, file size, path]
        self._marked: set[int] = set()  # partitions whose header says MARKER_VERSION

    def __repr__(self) -> str:
        return f"LogWriter({self.directory!r})"

    def append(
        self,
        partition: int,
        key: bytes,
        value: bytes | None,
        ttl: int | None = None,
        event_ts: int | None = None,
        tx: int | str | None = None,
        tx_end: bool | dict[int, int] = False,
    ) -> int:
        """Append one record to `partition` (value None = delete); return its offset.

        `tx_end` True closes transaction `tx` in this partition; a dict {partition: records} closes it
        across partitions, counting its records in each (this one included, so its own partition counts
        at least 1). A record every ingest would refuse is refused here instead (ValueError, nothing
        appended): a key in the store's reserved space, a ttl or an event_ts beyond a signed 64-bit int."""
        check_range(partition, 0, None)
        _check_storable(key, ttl, event_ts)
        if isinstance(tx_end, dict) and tx_end.get(partition, 0) < 1:
            raise ValueError(
                f"tx_end counts the end marker itself: partition {partition} must count at least 1, got {tx_end!r:.80}"
            )
        return self._append(partition, encode_record(key, value, ttl, event_ts, tx, tx_end))

    def advance(self, ts_ms: int, partitions: list[int] | None = None) -> dict[int, int]:
        """Append a progress marker to each of `partitions` (None: every partition of the log): a promise
        that no record appended to that partition later has event_ts < `ts_ms`. A consumer ingesting with
        source times (``db.ingest(..., times="source")``) commits records below the least progress of all
        partitions at that time. The marker takes an offset but is no record; returns {partition: its
        offset}. The first marker of a file moves its header to format version 2 (formats.log). `ts_ms` is a
        store time: ms since 1970, >= 0 (ValueError otherwise, nothing appended)."""
        if type(ts_ms) is not int:
            raise TypeError(f"a progress time is int ms, not {type(ts_ms).__name__}")
        check_i64_ms(ts_ms, "progress time")
        if ts_ms < 0:  # a commit time of the store: ms since 1970 (the store never commits before it)
            raise ValueError(f"a progress time is ms since 1970, >= 0, got {ts_ms}")
        if self._files is None:
            raise SourceError(f"{self.directory}: LogWriter is closed")
        if partitions is None:
            partitions = sorted(set(PartitionedLog(self.directory).partitions()) | set(self._files))
            if not partitions:
                raise SourceError(f"{self.directory}: no partition to advance (name them: partitions=[0, ...])")
        for p in partitions:
            check_range(p, 0, None)
        marker = encode_marker(ts_ms)
        out = {}
        for p in sorted(set(partitions)):
            if p not in self._files:
                self._files[p] = self._open(p)
            if p not in self._marked:
                self._mark_version(p)
            out[p] = self._append(p, marker)
        return out

    def _mark_version(self, partition: int) -> None:
        """Make the header of `partition`'s file say `MARKER_VERSION` (durably) before its first marker."""
        path = partition_path(self.directory, partition)
        fd = open_partition_file(path, os.O_RDWR)  # not O_APPEND: that would append the header
        try:
            if file_version(os.pread(fd, FILE_HEADER.size, 0), path) != MARKER_VERSION:
                fileio.pwrite(fd, encode_file_header(MARKER_VERSION), 0, path)
                fileio.fsync(fd, path)
        finally:
            os.close(fd)
        self._marked.add(partition)

    def _append(self, partition: int, record: bytes) -> int:
        """Write one encoded entry to `partition` in one write(2); return its offset."""
        if self._files is None:
            raise SourceError(f"{self.directory}: LogWriter is closed")
        f = self._files.get(partition)
        if f is None:
            f = self._files[partition] = self._open(partition)
        fd, offset, size, path = f
        try:
            fileio.write(fd, record, path)
        except BaseException:
            # a failed append (disk full, an interrupt) may leave part of the record behind: cut it off,
            # or the next append would land after a torn record, which readers rightly call corruption
            del self._files[partition]
            try:
                os.ftruncate(fd, size)
            finally:
                os.close(fd)  # if even that failed, the next append reopens the file and cuts the tail
            raise
        f[1] = offset + 1
        f[2] = size + len(record)
        if self.sync:
            fileio.fdatasync(fd, path)
        return offset

    def end(self, partition: int) -> int:
        """The offset the next append to `partition` gets."""
        f = self._files.get(partition) if self._files is not None else None
        if f is not None:
            return f[1]
        idx = PartitionedLog(self.directory)._refresh(partition)
        return 0 if idx is None else len(idx.positions)

    def flush(self) -> None:
        """fsync every open partition file."""
        for f in (self._files or {}).values():
            fileio.fdatasync(f[0], f[3])

    def close(self) -> None:
        """fsync and close every partition file (releasing their locks). Idempotent."""
        if self._files is None:
            return
        try:
            self.flush()
        finally:
            for f in self._files.values():
                os.close(f[0])
            self._files = None

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self, partition: int) -> list[Any]:
        path = partition_path(self.directory, partition)
        if not os.path.exists(path):
            self._create(path)
        fd = open_partition_file(path, os.O_RDWR | os.O_APPEND)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise SourceError(f"{path}: another LogWriter is appending to this partition") from None
            check_file_header(os.pread(fd, FILE_HEADER.size, 0), path)
            positions, end = _scan(fd, FILE_HEADER.size, path)
            if os.fstat(fd).st_size > end:  # a torn tail: a producer died mid-append
                os.ftruncate(fd, end)
                fileio.fsync(fd, path)
            return [fd, len(positions), end, path]
        except BaseException:
            os.close(fd)
            raise

    def _create(self, path: str) -> None:
        """Create `path` holding just the file header, atomically: the storage seam's create-if-absent
        (a complete temporary file linked to its name). Another writer's file, created first, is used."""
        try:
            LOCAL.put_if_absent(path, encode_file_header())
        except PublishUnknownError as e:  # the link or the directory fsync failed: raised as it failed
            raise e.error from None


__all__ = ["CHUNK", "LogWriter", "PartitionedLog", "open_partition_file", "partition_path"]

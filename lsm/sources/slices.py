"""Slices of a source: picklable (partition, offset range) pieces that a bulk-load task reads on its own.

A bulk load (lsm.bulk) cuts what a source holds beyond the durable frontier into slices and hands each to
a task, in this process (the local engine) or on a Spark executor. A slice carries everything its task
needs to read it, so no record passes through the driver:

- `LogSlice`, for a `PartitionedLog`: the partition file's path and identity (device, inode) and the byte
  range of the slice's records, taken from the driver's index of the file. The task reads that range
  with one sequential pass, verifying each record's checksums as `PartitionedLog.read` does; a file that
  was replaced since (another inode) or got shorter raises `SourceRegressedError`.
- `SourceSlice`, for any other `Source` (which must then be picklable for Spark): the source itself and
  the offset range; the task calls ``source.read(partition, start, stop)``.

Both have ``records()``, the iterator of the slice's `SourceRecord` in offset order, and ``runs()``, the
same records as runs of plain tuples (what the bulk-load task reads: no object per record).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any, BinaryIO

from formats.log import decode_plain, decode_run_end
from lsm.errors import SourceRegressedError
from lsm.sources.partitioned_log import CHUNK, open_partition_file, partition_path
from lsm.sources.protocol import SourceRecord, make_record

RUN_RECORDS = 4096  # records per run of `SourceSlice.runs`


@dataclasses.dataclass(frozen=True)
class LogSlice:
    """Records [start, stop) of one partition file of a `PartitionedLog`, at bytes [byte_start, byte_end)."""

    name: str  # the source's name, for error messages
    path: str
    ident: tuple[int, int]  # (st_dev, st_ino) of the file the driver indexed
    partition: int
    start: int
    stop: int
    byte_start: int
    byte_end: int

    def _open_checked(self) -> BinaryIO:
        """The partition file, unbuffered, refused (SourceRegressedError) when it is no longer the file
        the plan indexed or is shorter than the slice."""
        f = os.fdopen(open_partition_file(self.path, os.O_RDONLY), "rb", buffering=0)  # (no FIFO wait)
        st = os.fstat(f.fileno())
        if (st.st_dev, st.st_ino) != self.ident or st.st_size < self.byte_end:
            f.close()
            raise SourceRegressedError(
                f"{self.name}: partition {self.partition} was replaced or truncated while a bulk load "
                f"read it (records {self.start}..{self.stop} at bytes {self.byte_start}..{self.byte_end})"
            )
        return f

    def records(self) -> Iterator[SourceRecord]:
        """The slice's records in offset order (CorruptionError at a damaged record): `runs`, one
        `SourceRecord` per tuple (one reader loop, so both see the same records, checks and errors)."""
        for run, _has_tx in self.runs():
            for t in run:
                if t[2] is not None:  # a progress marker takes an offset but is no record
                    yield make_record(*t)

    def plain(self) -> tuple[bytes, Any, Any, Any, Any] | None:
        """The slice as columns when every record of it is plain (a key and a value or a delete, no TTL,
        event time or transaction): ``(buf, kstarts, kends, vstarts, vends)``, the slice's bytes and, per
        record in offset order, the spans of its key and value in `buf` (`formats.log.decode_plain`).
        None when some record is not plain: read `runs` then. The same checks and errors as `runs` (both
        checksums of every record; a replaced or shortened file refused)."""
        if self.stop <= self.start:
            return None
        with self._open_checked() as f:
            size = self.byte_end - self.byte_start
            buf = os.pread(f.fileno(), size, self.byte_start)
        if len(buf) < size:
            raise SourceRegressedError(f"{self.name}: partition {self.partition} shrank under a bulk load")
        cols = decode_plain(buf, self.byte_start, self.path)
        if cols is None:  # some record is not plain (or the bytes end in a torn one: runs says which)
            return None
        if len(cols[0]) != self.stop - self.start:
            raise SourceRegressedError(
                f"{self.name}: partition {self.partition}: bytes {self.byte_start}..{self.byte_end} held "
                f"{len(cols[0])} records, the index said {self.stop - self.start}"
            )
        return (buf, *cols)

    def runs(self) -> Iterator[tuple[list[tuple], bool]]:
        """`records` for bulk consumers: the same records, checks and errors, as runs of plain tuples
        ``(partition, offset, key, value, ttl, event_ts, tx, tx_end)`` with whether any of the run has a
        tx (`formats.log.decode_run_end`: no object per record, no msgpack call for a plain record)."""
        if self.stop <= self.start:
            return
        with self._open_checked() as f:
            fd = f.fileno()
            offset = self.start
            pos = self.byte_start
            p = self.partition
            while pos < self.byte_end:
                buf = os.pread(fd, min(CHUNK, self.byte_end - pos), pos)
                run, has_tx, i = decode_run_end(buf, pos, self.path, p, offset)
                if not run:  # one record larger than CHUNK: read exactly it
                    length = int.from_bytes(os.pread(fd, 4, pos), "big")
                    buf = os.pread(fd, 16 + length, pos)
                    run, has_tx, i = decode_run_end(buf, pos, self.path, p, offset)
                    if not run:
                        raise SourceRegressedError(f"{self.name}: partition {p} shrank under a bulk load")
                offset += len(run)
                pos += i
                yield run, has_tx
        if offset != self.stop:
            raise SourceRegressedError(
                f"{self.name}: partition {p}: bytes {self.byte_start}..{self.byte_end} held {offset - self.start}"
                f" records, the index said {self.stop - self.start}"
            )


@dataclasses.dataclass(frozen=True)
class SourceSlice:
    """Records [start, stop) of one partition of any `Source` (read through ``source.read``)."""

    source: Any
    partition: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        """The source's name, for error messages."""
        return self.source.name

    def records(self) -> Iterator[SourceRecord]:
        """The slice's records in offset order; ValueError if the source's offsets do not increase."""
        last = -1
        for rec in self.source.read(self.partition, self.start, self.stop):
            if rec.offset < last or not self.start <= rec.offset < self.stop:
                raise ValueError(
                    f"{self.name}: partition {self.partition}: offset {rec.offset} after {last} (slice "
                    f"{self.start}..{self.stop}): offsets must increase"
                )
            last = rec.offset
            yield rec

    def runs(self) -> Iterator[tuple[list[tuple], bool]]:
        """`records` as runs of plain tuples with whether any has a tx (as `LogSlice.runs`)."""
        run: list[tuple] = []
        has_tx = False
        for rec in self.records():
            run.append((rec.partition, rec.offset, rec.key, rec.value, rec.ttl, rec.event_ts, rec.tx, rec.tx_end))
            has_tx = has_tx or rec.tx is not None
            if len(run) >= RUN_RECORDS:
                yield run, has_tx
                run, has_tx = [], False
        if run:
            yield run, has_tx


Slice = LogSlice | SourceSlice


def log_slices(log: Any, index: Any, partition: int, start: int, stop: int, max_records: int) -> list[LogSlice]:
    """`PartitionedLog.slices`: `LogSlice`s carrying byte ranges from `index`, the log's index of the
    partition's file as its header pass made it (positions, never records: the tasks verify what they
    read); None if the file is gone."""
    if stop <= start:
        return []
    bounds = list(range(start, stop, max(1, max_records))) + [stop]
    if index is None or len(index.positions) < stop:
        raise SourceRegressedError(f"{log.name}: partition {partition} shrank while a bulk load planned it")
    positions = index.positions
    path = partition_path(log.directory, partition)

    def at(i: int) -> int:
        return positions[i] if i < len(positions) else index.scanned

    return [
        LogSlice(log.name, path, index.ident, partition, a, b, at(a), at(b))
        for a, b in zip(bounds, bounds[1:], strict=False)
    ]


__all__ = ["LogSlice", "Slice", "SourceSlice", "log_slices"]

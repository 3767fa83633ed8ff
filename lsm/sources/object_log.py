"""A partitioned log on an object store: what ``PartitionedLog("s3://...")`` and ``LogWriter("s3://...")`` are.

A local partition is one file appended to in place; an object is written once and cannot be appended
to. So on an object store a partition is a chain of immutable segment objects (formats.log_segment), and
the log's URL holds::

    <url>/LOG                                  what makes the prefix a log (written by the first writer)
    <url>/<partition>/<first offset:020d>.seg  one segment per flush of a writer: records
                                               [first, first + entries) of the partition

Offsets are stable record positions, as in a local file: a segment is named by the offset of its first
record and published with create-if-absent (the conditional PUT that publishes a manifest version), so
the offsets [first, first + entries) belong to exactly one segment, forever. A writer starts at the end
of the chain it lists and publishes the next segment at that end; if another writer got there first its
PUT fails, it raises `SourceError` and keeps nothing of what it buffered (those offsets belong to the
other writer's records). Two writers therefore never give one offset two records, and a reader that
resumes at an offset (exactly-once ingest: the remap's frontier) reads the same records from there on
every time.

Readers list a partition's segments (one LIST), learn its end from the last segment's header (one
ranged GET, once per segment), and read a segment whole (one GET), checking that its name, header and
records agree (CorruptionError otherwise). A record becomes visible when its segment is published: at
`LogWriter.flush` or `close`, once `segment_bytes` are buffered for the partition, or at every append
with ``sync=True``. There is no torn tail: a segment is all there or not there.

The slices of a bulk load (`SegmentSlice`) carry segment URLs and offset ranges: a Spark task reads its
segments from the object store itself, so a cluster bulk load needs no path shared with the driver.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from typing import Any

from formats.errors import CorruptionError
from formats.log import decode_plain, decode_run_end, scan_heads
from formats.log_segment import HEADER, decode_header, encode_header, parse_name, segment_name
from lsm.errors import SourceError
from lsm.sources.partitioned_log import LogWriter, PartitionedLog
from lsm.sources.protocol import MAX_PARTITION, SourceRecord, check_range, make_record
from storage import PublishUnknownError, Storage, storage_for

MARKER = "LOG"  # the object that makes a prefix a partitioned log
MARKER_BYTES = json.dumps({"lsm-sim": "partitioned log", "layout": "segments", "version": 1}).encode() + b"\n"
SEGMENT_BYTES = 4 << 20  # a writer publishes a partition's buffered records once they reach this size
Segment = tuple[int, int, str]  # (first offset, entries, URL)


def partition_dir(url: str, partition: int) -> str:
    """The prefix under which the segments of `partition` of the log at `url` lie."""
    return os.path.join(url, str(partition))


def decode_segment(
    data: bytes, path: str, partition: int, first: int, entries: int | None
) -> tuple[list[tuple], bool]:
    """The records of the segment object `data` at `path` as run tuples (`formats.log.decode_run_end`) and
    whether any is transactional or a progress marker. CorruptionError unless its header says `first`
    (its name's offset) and, when given, `entries` (what the next segment's name implies), and its
    records are exactly that many, whole, both checksums verified."""
    f, n = decode_header(data, path)
    _check_header(path, f, n, first, entries)
    body = data[HEADER.size :]
    run, has_tx, end = decode_run_end(body, HEADER.size, path, partition, first)
    if end != len(body) or len(run) != n:
        raise CorruptionError(
            path,
            HEADER.size + end,
            f"partition log segment holds {len(run)} whole records, its header says {n}",
        )
    return run, has_tx


def _check_header(path: str, f: int, n: int, first: int, entries: int | None) -> None:
    if f != first:
        raise CorruptionError(
            path, 0, f"partition log segment header says first offset {f}, its name {first}"
        )
    if entries is not None and n != entries:
        raise CorruptionError(
            path,
            0,
            f"partition log segment holds {n} records, but the next segment starts {entries} offsets after it",
        )


def _has_special(run: list[tuple]) -> bool:
    return any(t[6] is not None or t[2] is None for t in run)


class _Chain:
    """The segments of the partitions of one log, as far as this process has listed them; headers read
    once per segment (segments never change)."""

    def __init__(self, url: str, storage: Storage) -> None:
        self.url = url
        self.storage = storage
        self.entries: dict[str, int] = {}  # segment URL -> entries, from its header

    def partitions(self) -> list[int]:
        found = sorted(
            int(n) for n in self.storage.list_entries(self.url) if n.isdigit() and (n == "0" or n[0] != "0")
        )
        if found and found[-1] > MAX_PARTITION:
            raise SourceError(
                f"{partition_dir(self.url, found[-1])}: partition id beyond 2**64-1, the largest a remap binding stores"
            )
        return found

    def segments(self, partition: int) -> list[Segment]:
        """(first offset, entries, URL) of every segment of `partition`, in offset order (one LIST, and one
        ranged GET of the last segment's header if it is new). CorruptionError when the chain does not
        start at offset 0."""
        d = partition_dir(self.url, partition)
        named = sorted(
            (f, os.path.join(d, n)) for n in self.storage.list_names(d) if (f := parse_name(n)) is not None
        )
        if named and named[0][0] != 0:
            raise CorruptionError(
                named[0][1], 0, f"partition {partition} of {self.url} starts at offset {named[0][0]}, not 0"
            )
        out = [(f, named[i + 1][0] - f, p) for i, (f, p) in enumerate(named[:-1])]
        if named:
            f, p = named[-1]
            n = self.entries.get(p)
            if n is None:
                got, n = decode_header(self.storage.read_range(p, 0, HEADER.size), p)
                _check_header(p, got, n, f, None)
                self.entries[p] = n
            out.append((f, n, p))
        return out


class ObjectLog(PartitionedLog):
    """A `Source` over the segments of the log at URL `url` (written by `LogWriter(url)`): the same records,
    offsets, checks and errors as a local `PartitionedLog` (module docstring for the layout).

    Not thread-safe: give each consumer its own instance. `end(p)` costs one LIST (and one small GET per
    new segment); `read(p, start, stop)` one GET per segment it touches."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.fspath(directory).rstrip("/")
        self.name = self.directory
        storage = storage_for(self.directory)
        if not storage.exists(os.path.join(self.directory, MARKER)):
            raise SourceError(
                f"{self.directory}: no partitioned log here (no {MARKER} object: LogWriter or lsm log write makes one)"
            )
        self._chain = _Chain(self.directory, storage)
        self._markers: dict[str, list[tuple[int, int]]] = {}  # segment URL -> its progress markers

    def partitions(self) -> list[int]:
        """Partition ids that have segments now, ascending (one LIST)."""
        return self._chain.partitions()

    def end(self, partition: int) -> int:
        """Number of records (offsets) of `partition` published so far (0 if it has none)."""
        check_range(partition, 0, None)
        segs = self._chain.segments(partition)
        return segs[-1][0] + segs[-1][1] if segs else 0

    def plan_end(self, partition: int) -> int:
        """`end` (a segment's header already tells its size: nothing to skip)."""
        return self.end(partition)

    def torn_bytes(self, partition: int) -> int:
        """0: a segment is published whole or not at all."""
        check_range(partition, 0, None)
        return 0

    def _span(self, partition: int, start: int, stop: int | None) -> tuple[list[Segment], int, int] | None:  # type: ignore[override]
        check_range(partition, start, stop)
        segs = self._chain.segments(partition)
        n = segs[-1][0] + segs[-1][1] if segs else 0
        hi = n if stop is None else min(stop, n)
        if start >= hi:
            return None
        return [s for s in segs if s[0] < hi and s[0] + s[1] > start], start, hi

    def _segment_runs(
        self, partition: int, segs: list[Segment], lo: int, hi: int
    ) -> Iterator[tuple[list[tuple], bool]]:
        for first, n, path in segs:
            run, special = decode_segment(self._chain.storage.read(path), path, partition, first, n)
            if path not in self._markers:
                self._markers[path] = [(t[1], t[5]) for t in run if t[2] is None]
            a, b = max(lo, first) - first, min(hi, first + n) - first
            if (a, b) != (0, n):
                run = run[a:b]
                special = special and _has_special(run)
            yield run, special

    def read(self, partition: int, start: int, stop: int | None = None) -> Iterator[SourceRecord]:
        """Complete records with start <= offset < stop, in offset order (`Source.read`). The arguments are
        checked and the partition listed at the call; segments are read as the iterator is consumed."""
        span = self._span(partition, start, stop)
        if span is None:
            return iter(())
        return (
            make_record(*t)
            for run, _ in self._segment_runs(partition, *span)
            for t in run
            if t[2] is not None
        )

    def read_runs(
        self, partition: int, start: int, stop: int | None = None
    ) -> Iterator[tuple[list[tuple], bool]]:
        """`read` as runs of plain tuples, one run per segment (`PartitionedLog.read_runs`)."""
        span = self._span(partition, start, stop)
        return iter(()) if span is None else self._segment_runs(partition, *span)

    def progress(self, partition: int, start: int = 0, stop: int | None = None) -> list[tuple[int, int]]:
        """The progress markers (`LogWriter.advance`) at offsets [start, stop) of `partition` as (offset, ts),
        in offset order. A segment is read once for them (kept: segments never change)."""
        span = self._span(partition, start, stop)
        if span is None:
            return []
        segs, lo, hi = span
        todo = [s for s in segs if s[2] not in self._markers]
        for _ in self._segment_runs(partition, todo, 0, 2**64):
            pass
        return [(o, ts) for s in segs for o, ts in self._markers[s[2]] if lo <= o < hi]

    def slices(self, partition: int, start: int, stop: int, max_records: int) -> list[Any]:
        """`BatchSource.slices`: `SegmentSlice`s of at most `max_records` offsets, each naming the segments
        (URLs) its records lie in; the tasks read and verify them."""
        check_range(partition, start, stop)
        if stop <= start:
            return []
        segs = self._chain.segments(partition)
        bounds = list(range(start, stop, max(1, max_records))) + [stop]
        out = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            mine = tuple(s for s in segs if s[0] < b and s[0] + s[1] > a)
            if not mine or mine[-1][0] + mine[-1][1] < b:
                raise SourceError(
                    f"{self.name}: partition {partition} ends before offset {b}: a bulk load cannot plan it"
                )
            out.append(SegmentSlice(self.name, partition, a, b, mine))
        return out


@dataclasses.dataclass(frozen=True)
class SegmentSlice:
    """Records [start, stop) of one partition of an `ObjectLog`, in `segments` ((first, entries, URL) each):
    what a bulk-load task reads by itself, on a Spark executor or in a thread (as `LogSlice` for a file)."""

    name: str
    partition: int
    start: int
    stop: int
    segments: tuple[Segment, ...]

    def _bodies(self) -> Iterator[tuple[Segment, bytes]]:
        for seg in self.segments:
            first, n, path = seg
            data = storage_for(path).read(path)
            f, got = decode_header(data, path)
            _check_header(path, f, got, first, n)
            yield seg, data

    def runs(self) -> Iterator[tuple[list[tuple], bool]]:
        """The slice's records as runs of plain tuples with whether any has a tx (as `LogSlice.runs`)."""
        for (first, n, path), data in self._bodies():
            run, special = decode_segment(data, path, self.partition, first, n)
            a, b = max(self.start, first) - first, min(self.stop, first + n) - first
            run = run[a:b]
            yield run, special and _has_special(run)

    def records(self) -> Iterator[SourceRecord]:
        """The slice's records in offset order (progress markers skipped)."""
        for run, _ in self.runs():
            for t in run:
                if t[2] is not None:
                    yield make_record(*t)

    def plain(self) -> tuple[bytes, Any, Any, Any, Any] | None:
        """The slice as columns when every record is plain (`LogSlice.plain`): the bytes of its records,
        segment after segment, and the spans of each key and value in them; None when some is not plain."""
        import numpy as np

        pieces: list[bytes] = []
        cols: list[tuple] = []
        at = 0
        for (first, n, path), data in self._bodies():
            body = data[HEADER.size :]
            positions, end = scan_heads(body, HEADER.size, path)
            if end != len(body) or len(positions) != n:
                raise CorruptionError(
                    path,
                    HEADER.size + end,
                    f"partition log segment holds {len(positions)} whole records, its header says {n}",
                )
            a, b = max(self.start, first) - first, min(self.stop, first + n) - first
            lo = int(positions[a]) - HEADER.size
            hi = int(positions[b]) - HEADER.size if b < n else len(body)
            piece = body[lo:hi]
            c = decode_plain(piece, HEADER.size + lo, path)
            if c is None:
                return None
            ks, ke, vs, ve = c
            cols.append((ks + at, ke + at, np.where(vs < 0, vs, vs + at), np.where(ve < 0, ve, ve + at)))
            pieces.append(piece)
            at += len(piece)
        if not cols:
            return None
        kstarts, kends, vstarts, vends = (np.concatenate([c[i] for c in cols]) for i in range(4))
        return b"".join(pieces), kstarts, kends, vstarts, vends


class ObjectLogWriter(LogWriter):
    """Appends records to the log at URL `directory` (module docstring): the producer side of an `ObjectLog`.

    `append` and `advance` buffer the record for its partition and return its offset; the records become
    visible, and their offsets final, when the partition's segment is published: by `flush`, `close`, once
    `segment_bytes` are buffered for the partition, or at every append with ``sync=True``. A partition that
    another writer extended meanwhile cannot be published: `SourceError`, and the records this writer
    buffered for it are dropped (their offsets are the other writer's); the next append to the partition
    lists it again and continues after the other writer's records."""

    def __init__(
        self, directory: str | os.PathLike[str], *, sync: bool = False, segment_bytes: int = SEGMENT_BYTES
    ) -> None:
        from lsm.inspect import is_database_dir

        self.directory = os.fspath(directory).rstrip("/")
        self.sync = sync
        if type(segment_bytes) is not int or segment_bytes < 1:
            raise ValueError(f"segment_bytes must be an int >= 1, got {segment_bytes!r}")
        self.segment_bytes = segment_bytes
        storage = storage_for(self.directory)
        if is_database_dir(self.directory):
            raise SourceError(f"{self.directory}: an lsm-sim database, not a partitioned log")
        marker = os.path.join(self.directory, MARKER)
        if not storage.exists(marker):
            if storage.list_entries(self.directory):
                raise SourceError(
                    f"{self.directory}: holds objects but no partitioned log (no {MARKER} object)"
                )
            try:
                storage.put_if_absent(marker, MARKER_BYTES)  # False: another writer made it first
            except PublishUnknownError as e:
                raise e.error from None
        self._chain = _Chain(self.directory, storage)
        self._files: dict[int, list[Any]] = {}  # partition -> [next durable offset, buffered records, bytes]
        self._marked: set[int] = set()

    def _open(self, partition: int) -> list[Any]:
        segs = self._chain.segments(partition)
        return [segs[-1][0] + segs[-1][1] if segs else 0, [], 0]

    def _mark_version(self, partition: int) -> None:
        """Nothing to do: a segment's own format holds progress markers."""
        self._marked.add(partition)

    def _append(self, partition: int, record: bytes) -> int:
        if self._files is None:
            raise SourceError(f"{self.directory}: LogWriter is closed")
        f = self._files.get(partition)
        if f is None:
            f = self._files[partition] = self._open(partition)
        f[1].append(record)
        f[2] += len(record)
        offset = f[0] + len(f[1]) - 1
        if self.sync or f[2] >= self.segment_bytes:
            self._publish(partition)
        return offset

    def _publish(self, partition: int) -> None:
        """Write the buffered records of `partition` as its next segment (create-if-absent)."""
        assert self._files is not None
        f = self._files[partition]
        base, records = f[0], f[1]
        if not records:
            return
        path = os.path.join(partition_dir(self.directory, partition), segment_name(base))
        data = encode_header(base, len(records)) + b"".join(records)
        storage = self._chain.storage
        try:
            created = storage.put_if_absent(path, data)
        except PublishUnknownError as e:  # kept buffered: the next flush learns whether it landed
            raise e.error from None
        if not created and storage.read(path) != data:  # (equal: an earlier attempt of ours had landed)
            del self._files[partition]
            raise SourceError(
                f"{path}: another writer published offset {base} of partition {partition} first; the "
                f"{len(records)} record(s) buffered here for offsets {base}..{base + len(records) - 1} were "
                "not written (the next append continues after the other writer's records)"
            )
        self._chain.entries[path] = len(records)
        f[0], f[1], f[2] = base + len(records), [], 0

    def end(self, partition: int) -> int:
        """The offset the next append to `partition` gets."""
        f = self._files.get(partition) if self._files is not None else None
        if f is not None:
            return f[0] + len(f[1])
        segs = self._chain.segments(partition)
        return segs[-1][0] + segs[-1][1] if segs else 0

    def flush(self) -> None:
        """Publish every partition's buffered records as a segment."""
        for p in list(self._files or {}):
            self._publish(p)

    def close(self) -> None:
        """Publish what is buffered and close. Idempotent; after an error the writer is closed all the same."""
        if self._files is None:
            return
        try:
            self.flush()
        finally:
            self._files = None


__all__ = [
    "MARKER",
    "SEGMENT_BYTES",
    "ObjectLog",
    "ObjectLogWriter",
    "SegmentSlice",
    "decode_segment",
    "partition_dir",
]

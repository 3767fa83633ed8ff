"""`verify_source`: check that an object keeps the `Source` protocol, before trusting ingest to it.

Meant for people writing an adapter (a Kafka topic, a file format): run it against a test instance of the
source. It reads every partition up to its end (so keep the test data small) and reports what a reader
of the protocol would trip on; an empty list means none of the checks found a problem. It cannot prove
the one promise that matters most — that the records below `end()` never change — but it reads them
twice and in pieces, which catches the usual ways of breaking it. Errors the source raises (a
`CorruptionError`, a `HistoryUnavailableError`) propagate.

>>> import tempfile
>>> from lsm.sources import LogWriter, PartitionedLog
>>> d = tempfile.mkdtemp()
>>> with LogWriter(d) as w:
...     _ = w.append(0, b"k", b"v")
>>> verify_source(PartitionedLog(d))
[]
"""

from __future__ import annotations

from lsm.sources.protocol import ProgressSource, Source, SourceRecord


def _record_problems(r: object, p: int, start: int, stop: int) -> list[str]:
    if not isinstance(r, SourceRecord):
        return [f"partition {p}: read() yielded {type(r).__name__}, not a SourceRecord"]
    out = []
    where = f"partition {p} offset {r.offset}"
    if r.partition != p:
        out.append(f"{where}: the record says partition {r.partition}")
    if type(r.offset) is not int or not start <= r.offset < stop:
        out.append(f"{where}: offset outside the range read [{start}, {stop})")
    if type(r.key) is not bytes or not r.key:
        out.append(f"{where}: key must be non-empty bytes")
    if r.value is not None and type(r.value) is not bytes:
        out.append(f"{where}: value must be bytes or None")
    if r.ttl is not None and (type(r.ttl) is not int or r.ttl < 0):
        out.append(f"{where}: ttl must be an int >= 0 or None")
    if r.event_ts is not None and type(r.event_ts) is not int:
        out.append(f"{where}: event_ts must be int ms or None")
    if r.tx_end and r.tx is None:
        out.append(f"{where}: tx_end without a tx")
    return out


def _progress_problems(source: ProgressSource, p: int, end: int, records: list) -> list[str]:
    """A `ProgressSource`'s markers of partition `p`: (offset, ts) int pairs in offset order below `end`,
    at offsets no record has, each kept by the records after it (no event_ts below it)."""
    marks = source.progress(p, 0, end)
    if not isinstance(marks, list) or any(
        not isinstance(m, tuple) or len(m) != 2 or type(m[0]) is not int or type(m[1]) is not int for m in marks
    ):
        return [f"partition {p}: progress() must be a list of (offset, ts) int pairs, got {marks!r:.80}"]
    out = []
    offsets = [o for o, _ in marks]
    if offsets != sorted(set(offsets)) or any(not 0 <= o < end for o in offsets):
        out.append(f"partition {p}: progress() offsets must ascend, without repeats, within [0, {end})")
    taken = {r.offset for r in records if isinstance(r, SourceRecord)}
    if taken & set(offsets):
        out.append(f"partition {p}: progress markers at record offsets {sorted(taken & set(offsets))[:5]}")
    floor, i = None, 0
    for r in sorted((r for r in records if isinstance(r, SourceRecord)), key=lambda r: r.offset):
        while i < len(marks) and marks[i][0] < r.offset:
            floor = marks[i][1] if floor is None else max(floor, marks[i][1])
            i += 1
        if floor is not None and type(r.event_ts) is int and r.event_ts < floor:
            out.append(f"partition {p} offset {r.offset}: event_ts {r.event_ts} below the progress {floor} before it")
    return out


def verify_source(source: Source) -> list[str]:
    """Problems found in `source` (empty: none): names, partitions, ends, record fields, offset order, and
    that reading a partition whole, again, and in two pieces gives the same records; for a
    `ProgressSource`, its markers (`_progress_problems`)."""
    problems: list[str] = []
    if not isinstance(getattr(source, "name", None), str):
        problems.append("source.name must be a str")
    parts = source.partitions()
    if not isinstance(parts, list) or any(type(p) is not int or p < 0 for p in parts):
        return [*problems, f"partitions() must be a list of ints >= 0, got {parts!r}"]
    if parts != sorted(set(parts)):
        problems.append(f"partitions() must be ascending without repeats, got {parts}")
    for p in parts:
        end = source.end(p)
        if type(end) is not int or end < 0:
            problems.append(f"partition {p}: end() must be an int >= 0, got {end!r}")
            continue
        records = list(source.read(p, 0, end))
        for r in records:
            problems += _record_problems(r, p, 0, end)
        offsets = [r.offset for r in records if isinstance(r, SourceRecord)]
        if offsets != sorted(offsets):
            problems.append(f"partition {p}: read() must return records in offset order")
        if list(source.read(p, 0, end)) != records:
            problems.append(f"partition {p}: reading [0, {end}) twice gave different records")
        if offsets:
            mid = offsets[len(offsets) // 2]
            pieces = list(source.read(p, 0, mid)) + list(source.read(p, mid, end))
            if pieces != records:
                problems.append(f"partition {p}: [0, {mid}) + [{mid}, {end}) differs from [0, {end})")
        if isinstance(source, ProgressSource):
            problems += _progress_problems(source, p, end, records)
        later = source.end(p)
        if type(later) is int and later < end:
            problems.append(f"partition {p}: end() went back from {end} to {later}")
        if type(later) is int and list(source.read(p, 0, None))[: len(records)] != records:
            problems.append(f"partition {p}: read(p, 0, None) does not start with the records below end()")
    return problems


__all__ = ["verify_source"]

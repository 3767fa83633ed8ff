"""verify_source (lsm/sources/conformance.py): the shipped sources pass, broken ones are caught."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import lsm
from lsm.sources import DatabaseLog, LogWriter, PartitionedLog, SourceRecord, verify_source


def test_the_shipped_sources_keep_the_protocol(tmp_path: Path, db_root: str, open_db) -> None:
    """A log in a local directory; the database a DatabaseLog reads, on every backend."""
    with LogWriter(tmp_path / "log") as w:
        for i in range(20):
            w.append(i % 3, b"k%d" % i, None if i % 7 == 0 else b"v", ttl=i, tx="t" if i == 5 else None)
    assert verify_source(PartitionedLog(tmp_path / "log")) == []
    with open_db(history_retention=10**12) as db:
        for i in range(10):
            db.write(lsm.WriteBatch().put(b"a%d" % i, b"1").put(b"b", b"%d" % i))
        db.flush()
        # synced, so that the log ends in the WAL on an object store too (unsynced, it would wait in a buffer)
        db.delete(b"b", options=lsm.WriteOptions(sync=True))
        log = DatabaseLog(db_root)
        assert log.end(0) == 12 and verify_source(log) == []


class ListSource:
    """A source over lists, with ways to break the protocol."""

    name = "list"

    def __init__(self, records: dict[int, list[SourceRecord]], flaky: bool = False, ends=None) -> None:
        self.records = records
        self.flaky = flaky
        self.reads = 0
        self.ends = ends

    def partitions(self) -> list[int]:
        return list(self.records)

    def end(self, partition: int) -> int:
        if self.ends is not None:
            return self.ends.pop(0)
        rs = self.records.get(partition, [])
        return rs[-1].offset + 1 if rs else 0

    def read(self, partition: int, start: int, stop: int | None = None):
        self.reads += 1
        rs = [
            r
            for r in self.records.get(partition, [])
            if r.offset >= start and (stop is None or r.offset < stop)
        ]
        if self.flaky and self.reads == 2:
            rs = [dataclasses.replace(r, value=b"changed") for r in rs]
        return iter(rs)


def recs(p: int, *offsets: int) -> list[SourceRecord]:
    return [SourceRecord(p, o, b"k%d" % o, b"v") for o in offsets]


def test_a_list_source_that_keeps_the_rules_passes() -> None:
    assert verify_source(ListSource({0: recs(0, 0, 1, 1, 5), 2: recs(2, 3)})) == []


def test_broken_sources_are_reported() -> None:
    assert "ascending" in " ".join(verify_source(ListSource({2: recs(2, 0), 0: recs(0, 0)})))
    assert "offset order" in " ".join(verify_source(ListSource({0: recs(0, 3, 1)}, ends=[4, 4])))
    assert "says partition 1" in " ".join(verify_source(ListSource({0: recs(1, 0)})))
    assert "twice gave different records" in " ".join(
        verify_source(ListSource({0: recs(0, 0, 1)}, flaky=True))
    )
    bad = [SourceRecord(0, 0, b"", b"v"), SourceRecord(0, 1, b"k", b"v", ttl=-1, tx_end=True)]
    found = " ".join(verify_source(ListSource({0: bad})))
    assert "non-empty bytes" in found and "ttl must be" in found and "tx_end without a tx" in found
    assert "went back from 2 to 1" in " ".join(verify_source(ListSource({0: recs(0, 0, 1)}, ends=[2, 1])))

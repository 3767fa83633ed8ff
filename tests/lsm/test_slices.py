"""`lsm.sources.slices`: a slice's ``runs()`` (what a bulk-load task reads) gives exactly the records of
``records()``, as tuples of the `SourceRecord` fields, with the same checks and errors."""

from __future__ import annotations

import pytest

from formats.errors import CorruptionError
from lsm.bulk import cut_slices
from lsm.sources import LogWriter, PartitionedLog
from lsm.sources.partitioned_log import CHUNK
from lsm.sources.slices import SourceSlice
from storage import storage_for

FIELDS = ("partition", "offset", "key", "value", "ttl", "event_ts", "tx", "tx_end")


def _as_tuples(records):
    return [tuple(getattr(r, f) for f in FIELDS) for r in records]


def _flat(runs):
    out, flags = [], []
    for run, has_tx in runs:
        assert run
        out += run
        flags.append((has_tx, any(r[6] is not None for r in run)))
    return out, flags


def _write(log_dir: str, **kw) -> None:
    with LogWriter(log_dir, **kw) as w:
        for i in range(3000):
            p = i % 2
            if i % 97 == 5:
                w.append(p, b"tx%05d" % i, b"v" * 50, tx=i // 97, tx_end=i % 2 == 1)
            elif i % 31 == 0:
                w.append(p, b"k%05d" % i, None)  # a delete
            elif i % 17 == 0:
                w.append(p, b"k%05d" % i, b"t" * 300, ttl=5_000, event_ts=i)  # msgpack's general path
            elif i == 1234:
                w.append(p, b"big", b"B" * (CHUNK + 10))  # larger than one read
            else:
                w.append(p, b"k%05d" % (i % 700), b"x" * (i % 200))


# a log on a local directory (file slices) and on memory:// (segment slices, a few per partition: a slice of one
# record reads its whole segment); not S3, where that is a GET per slice
@pytest.mark.parametrize("backend", ["local", "memory"])
def test_runs_give_the_records_of_every_slice(backend, new_root) -> None:
    d = new_root("log")
    _write(d, **({} if backend == "local" else {"segment_bytes": 16_384}))
    log = PartitionedLog(d)
    for p in (0, 1):
        for max_records in (1, 77, 10_000):
            # one-record slices of an object-store log over its first segments only (each lists the
            # partition and reads a segment: seconds for the whole log)
            stop = 300 if max_records == 1 and backend != "local" else log.end(p)
            for sl in cut_slices(log, p, 3, stop, max_records):
                recs = _as_tuples(sl.records())
                got, flags = _flat(sl.runs())
                assert got == recs
                assert all(a == b for a, b in flags)
                generic = SourceSlice(log, p, sl.start, sl.stop)
                assert _flat(generic.runs())[0] == recs


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_runs_raise_on_a_damaged_record(backend, new_root) -> None:
    """A byte of a record damaged in the partition file of a local log, or in a segment object of a log on
    memory:// (replaced whole: objects are immutable), after the slice was planned."""
    d = new_root("log")
    _write(d)
    log = PartitionedLog(d)
    (sl,) = cut_slices(log, 0, 0, log.end(0), 10_000)
    if backend == "local":
        path, at = sl.path, sl.byte_start + 6000
    else:
        path, at = sl.segments[0][2], 6000
    storage = storage_for(path)
    data = bytearray(storage.read(path))
    data[at] ^= 0xFF
    storage.write_file(path, [bytes(data)])
    with pytest.raises(CorruptionError):
        list(sl.records())
    with pytest.raises(CorruptionError):
        list(sl.runs())
    assert storage.exists(path)


def test_any_batch_source_gets_its_fast_paths_used(tmp_path, open_db, new_root) -> None:
    """The fast paths are a protocol (lsm.sources.BatchSource), not a PartitionedLog special case: a
    wrapper implementing it is read through read_runs by streaming ingest and planned through its own
    slices and plan_end by a bulk load; a plain Source is not a BatchSource. The stores on every backend,
    the log a local directory."""
    from lsm.sources import BatchSource, DatabaseLog

    class Wrapped:
        def __init__(self, log):
            self.log, self.name, self.calls = log, log.name, []

        def partitions(self):
            return self.log.partitions()

        def end(self, p):
            return self.log.end(p)

        def read(self, p, start, stop=None):
            self.calls.append("read")
            return self.log.read(p, start, stop)

        def read_runs(self, p, start, stop=None):
            self.calls.append("read_runs")
            return self.log.read_runs(p, start, stop)

        def plan_end(self, p):
            self.calls.append("plan_end")
            return self.log.plan_end(p)

        def slices(self, p, start, stop, max_records):
            self.calls.append("slices")
            return self.log.slices(p, start, stop, max_records)

    d = str(tmp_path / "log")
    with LogWriter(d) as w:
        for i in range(20):
            w.append(i % 2, b"k%02d" % i, b"v")
    src = Wrapped(PartitionedLog(d))
    assert isinstance(src, BatchSource) and not isinstance(DatabaseLog.__new__(DatabaseLog), BatchSource)
    with open_db(path=new_root("a")) as db:
        assert db.ingest(src, "s").records == 20
    assert "read_runs" in src.calls and "read" not in src.calls
    src.calls.clear()
    with open_db(path=new_root("b")) as db:
        assert db.ingest(src, "s", engine="local", tasks=2).records == 20
        assert db.get(b"k19") == b"v"
    assert "plan_end" in src.calls and "slices" in src.calls

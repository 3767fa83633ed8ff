"""A partitioned log on an object store (lsm.sources.object_log): ``PartitionedLog(url)`` and
``LogWriter(url)`` keep the local log's records, offsets, progress markers, checks and exactly-once
ingest, as chains of immutable segment objects. The tests run on both object stores, ``memory://`` (the
same object-store code, in process) and the S3 server; the fault test on the S3 server only; the
exactly-once ingest writes to stores on every backend."""

from __future__ import annotations

import itertools
import os
import uuid

import pytest

import lsm
from formats.errors import CorruptionError
from formats.log_segment import HEADER, decode_header, encode_header, segment_name
from lsm.sources import LogWriter, PartitionedLog, verify_source
from lsm.sources.object_log import MARKER, ObjectLog, ObjectLogWriter, SegmentSlice, partition_dir
from storage import storage_for
from tests.lsm._bulk_util import contents, write_log


def mem_url() -> str:
    return f"memory://objlog-{uuid.uuid4().hex[:8]}/log"


# a log of segment objects is a log on an object store: memory:// and S3, no local directory
OBJECT_STORES = pytest.mark.parametrize("backend", ["memory", pytest.param("s3", marks=pytest.mark.s3)])


@pytest.fixture
def log_url(new_root) -> str:
    """Where a fresh log goes on the test's object store."""
    return new_root("log")


def same_source(a: PartitionedLog, b: PartitionedLog) -> None:
    """`a` and `b` hold the same records, offsets, ends, progress markers and runs, partition by partition."""
    assert a.partitions() == b.partitions()
    for p in a.partitions():
        assert a.end(p) == b.end(p) and a.plan_end(p) == b.plan_end(p)
        n = a.end(p)
        assert list(a.read(p, 0)) == list(b.read(p, 0))
        for start, stop in ((0, n), (1, n - 1), (n // 3, n // 2), (n - 1, None), (n, None), (n + 5, None)):
            assert list(a.read(p, start, stop)) == list(b.read(p, start, stop)), (p, start, stop)
            assert a.progress(p, start, stop) == b.progress(p, start, stop)
            flat_a = [t for run, _ in a.read_runs(p, start, stop) for t in run]
            flat_b = [t for run, _ in b.read_runs(p, start, stop) for t in run]
            assert flat_a == flat_b


# the log on each object store (a local directory is the reference); on S3 fewer records and partitions
# in larger segments, still a few per partition: every read of a segment is a GET there
@pytest.mark.parametrize(
    ("backend", "n", "partitions", "segment_bytes", "min_segments"),
    [("memory", 1500, 3, 2000, 6), pytest.param("s3", 400, 2, 4000, 2, marks=pytest.mark.s3)],
)
def test_the_same_log_on_an_object_store_and_on_disk(
    tmp_path, new_root, n, partitions, segment_bytes, min_segments
) -> None:
    url = new_root("log")
    write_log(str(tmp_path / "log"), seed=3, n=n, partitions=partitions)
    write_log(url, seed=3, n=n, partitions=partitions, segment_bytes=segment_bytes)  # segments per partition
    local, remote = PartitionedLog(str(tmp_path / "log")), PartitionedLog(url)
    assert isinstance(remote, ObjectLog) and isinstance(remote, PartitionedLog)
    same_source(local, remote)
    assert verify_source(remote) == []
    segs = storage_for(url).list_names(partition_dir(url, 0))
    assert len(segs) >= min_segments and segs == sorted(segs)
    assert all(len(n) == 24 and n.endswith(".seg") for n in segs)
    assert storage_for(url).exists(os.path.join(url, MARKER))
    # a fresh log read only in part (a reader that stops early) gives the same first records
    assert list(itertools.islice(PartitionedLog(url).read(1, 0), 3)) == list(itertools.islice(local.read(1, 0), 3))


@OBJECT_STORES
def test_progress_markers_and_transactions(tmp_path, log_url) -> None:
    url = log_url
    for where in (str(tmp_path / "log"), url):
        with LogWriter(where) as w:
            w.append(0, b"a", b"1", event_ts=5)
            assert w.advance(10) == {0: 1}
            w.append(1, b"b", b"2", tx="T")
            w.append(0, b"c", b"3", tx="T", tx_end={0: 1, 1: 1})
            assert w.advance(20, partitions=[1]) == {1: 1}
    same_source(PartitionedLog(str(tmp_path / "log")), PartitionedLog(url))
    assert PartitionedLog(url).progress(0) == [(1, 10)]


@OBJECT_STORES
def test_slices_read_what_the_log_holds(log_url) -> None:
    url = log_url
    with LogWriter(url, segment_bytes=1500) as w:  # plain records (a key, a value or a delete): columns
        for i in range(600):
            w.append(i % 2, b"k%03d" % (i * 7 % 200), None if i % 9 == 0 else b"v%d" % i * (i % 4))
    log = PartitionedLog(url)
    for p in log.partitions():
        n = log.end(p)
        slices = log.slices(p, 7, n, 50)
        assert [(s.start, s.stop) for s in slices][0] == (7, 57) and slices[-1].stop == n
        assert all(isinstance(s, SegmentSlice) and len(s.segments) >= 1 for s in slices)
        got = [r for s in slices for r in s.records()]
        assert got == list(log.read(p, 7))
        for s in slices:  # the columns of plain records: the same keys and values as the records
            cols = s.plain()
            assert cols is not None
            buf, ks, ke, vs, ve = cols
            recs = list(s.records())
            assert [buf[a:b] for a, b in zip(ks.tolist(), ke.tolist(), strict=True)] == [r.key for r in recs]
            values = [None if a < 0 else buf[a:b] for a, b in zip(vs.tolist(), ve.tolist(), strict=True)]
            assert values == [r.value for r in recs]


@OBJECT_STORES
def test_a_writer_continues_at_the_end_and_offsets_stay(log_url) -> None:
    url = log_url
    with LogWriter(url) as w:
        assert [w.append(0, b"k%d" % i, b"v") for i in range(3)] == [0, 1, 2]
    before = list(PartitionedLog(url).read(0, 0))
    with LogWriter(url) as w:
        assert w.end(0) == 3 and w.append(0, b"k3", b"v") == 3
    after = list(PartitionedLog(url).read(0, 0))
    assert after[:3] == before and [r.offset for r in after] == [0, 1, 2, 3]


@OBJECT_STORES
def test_records_are_visible_once_published(log_url) -> None:
    url = log_url
    w = LogWriter(url)
    w.append(0, b"a", b"1")
    log = PartitionedLog(url)
    assert log.end(0) == 0 and log.partitions() == []  # buffered: not yet a record
    w.flush()
    assert log.end(0) == 1
    w.close()
    s = LogWriter(url, sync=True)
    s.append(0, b"b", b"2")
    assert log.end(0) == 2 and [r.key for r in log.read(0, 1)] == [b"b"]  # sync: published at once
    s.close()
    assert len(storage_for(url).list_names(partition_dir(url, 0))) == 2


@OBJECT_STORES
def test_two_writers_never_give_one_offset_two_records(log_url) -> None:
    url = log_url
    a, b = LogWriter(url), LogWriter(url)
    a.append(0, b"from-a", b"1")
    b.append(0, b"from-b", b"2")  # both think the next offset is 0
    a.flush()
    with pytest.raises(lsm.SourceError, match="another writer published offset 0 of partition 0 first"):
        b.flush()
    assert b.append(0, b"again-b", b"4") == 1  # b lists the partition again: after a's record
    b.close()  # what b buffered before the refusal was dropped
    a.close()
    assert [(r.offset, r.key) for r in PartitionedLog(url).read(0, 0)] == [(0, b"from-a"), (1, b"again-b")]
    with LogWriter(url) as c:  # a writer opened afterwards appends after them
        assert c.append(0, b"from-c", b"3") == 2


@OBJECT_STORES
def test_what_is_not_a_log_is_refused(new_root) -> None:
    url = new_root("log")
    with pytest.raises(lsm.SourceError, match="no partitioned log here"):
        PartitionedLog(url)
    st = storage_for(url)
    st.write_file(os.path.join(url, "other"), [b"x"])
    with pytest.raises(lsm.SourceError, match="holds objects but no partitioned log"):
        LogWriter(url)
    # (a database's prefix: test_sources_log_bad_input.py, on every backend)
    with pytest.raises(ValueError, match="segment_bytes"):
        LogWriter(new_root("other"), segment_bytes=0)


def _one_segment_log(url: str, records: int = 4) -> tuple[str, str]:
    with LogWriter(url) as w:
        for i in range(records):
            w.append(0, b"k%d" % i, b"v%d" % i)
    return url, os.path.join(partition_dir(url, 0), segment_name(0))


@OBJECT_STORES
def test_damaged_segments_are_refused(new_root) -> None:
    url, seg = _one_segment_log(new_root("log1"))
    st = storage_for(seg)
    data = bytearray(st.read(seg))
    data[-1] ^= 0xFF  # the last record's payload
    st.write_file(seg, [bytes(data)])
    with pytest.raises(CorruptionError, match="checksum mismatch") as e:
        list(PartitionedLog(url).read(0, 0))
    assert seg in str(e.value)

    url, seg = _one_segment_log(new_root("log2"))  # a header that lies about its first offset
    st = storage_for(seg)
    st.write_file(seg, [encode_header(7, 4) + st.read(seg)[HEADER.size :]])
    with pytest.raises(CorruptionError, match="header says first offset 7, its name 0"):
        PartitionedLog(url).end(0)

    url, seg = _one_segment_log(new_root("log3"))  # a segment cut short: fewer whole records than its header says
    st = storage_for(seg)
    st.write_file(seg, [st.read(seg)[:-3]])
    with pytest.raises(CorruptionError, match="holds 3 whole records, its header says 4"):
        list(PartitionedLog(url).read(0, 0))


@OBJECT_STORES
def test_a_gap_in_the_chain_is_refused(log_url) -> None:
    url = log_url
    w = LogWriter(url, sync=True)
    for i in range(3):
        w.append(0, b"k%d" % i, b"v")
    w.close()
    st = storage_for(url)
    st.delete(os.path.join(partition_dir(url, 0), segment_name(1)))  # offsets 0 and 2 left, 1 gone
    log = PartitionedLog(url)
    assert log.end(0) == 3  # the last segment still says where the partition ends
    with pytest.raises(
        CorruptionError, match="holds 1 records, but the next segment starts 2 offsets after it"
    ):
        list(log.read(0, 0))
    st.delete(os.path.join(partition_dir(url, 0), segment_name(0)))
    with pytest.raises(CorruptionError, match="starts at offset 2, not 0"):
        PartitionedLog(url).end(0)


def test_ingest_from_an_object_log_is_exactly_once(tmp_path, open_db, new_root) -> None:
    """Streaming ingest resumes at the durable frontier and a bulk load takes the rest: the store holds
    what ingesting the same records from a local log holds, each record once. The stores on every
    backend, the object log on memory://."""
    url = mem_url()
    local_log = str(tmp_path / "log")
    for where, kw in ((local_log, {}), (url, {"segment_bytes": 3000})):
        write_log(where, seed=11, n=900, partitions=3, **kw)
    stores = {}
    for name, src in (("local", local_log), ("object", url)):
        db = open_db(path=new_root(name))
        try:
            first = db.ingest(PartitionedLog(src), name="events", max_records=400, batch_records=100)
            assert 300 <= first.records <= 500
            with LogWriter(src) as w:  # more records arrive after the first pass
                for i in range(50):
                    w.append(i % 3, b"late%d" % i, b"v")
            db.ingest(PartitionedLog(src), name="events", engine="local", tasks=3)
            assert db.ingest(PartitionedLog(src), name="events").records == 0  # nothing twice
            stores[name] = contents(db)
        finally:
            db.close()
    assert stores["object"] == stores["local"]
    assert stores["object"]["bindings"][-1][1] == {p: PartitionedLog(url).end(p) for p in (0, 1, 2)}


def test_on_s3_with_a_failing_publish_nothing_is_lost(s3_server, s3_proxy) -> None:
    """A segment PUT that fails keeps the records buffered with their offsets; the next flush publishes
    them. Through the fault proxy in front of the S3 server."""
    import storage

    url = s3_server.new_url("log")
    storage.register(
        url, dict(s3_server.options(endpoint=s3_proxy.endpoint), max_retries=1, retry_timeout_ms=500)
    )
    w = LogWriter(url)
    assert isinstance(w, ObjectLogWriter)
    offsets = [w.append(0, b"k%d" % i, b"v") for i in range(3)]
    s3_proxy.fail("500", method="PUT", key="/0/", count=None)
    with pytest.raises(OSError):
        w.flush()
    s3_proxy.heal()
    w.append(0, b"k3", b"v")
    w.close()
    log = PartitionedLog(url)
    assert [(r.offset, r.key) for r in log.read(0, 0)] == [(o, b"k%d" % o) for o in [*offsets, 3]]
    (name,) = storage_for(url).list_names(partition_dir(url, 0))
    assert decode_header(storage_for(url).read(os.path.join(partition_dir(url, 0), name)), name) == (0, 4)


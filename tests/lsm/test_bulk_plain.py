"""The bulk load's column path (`LogSlice.plain`, `lsm.bulk_task._plain_columns`): slices of plain records (a key
and a value or a delete, no TTL, event time or transaction) resolved with numpy and `dict`, against the
general record path and streaming ingest; and the driver's plan from the record headers alone
(`PartitionedLog.plan_end`), with damaged payloads still caught by the task that reads them. The stores
are on every backend; the logs they load are local directories, but for the column path of one slice,
checked on a local log and on a log of segments on memory://."""

from __future__ import annotations

import os
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from formats.log import encode_record
from lsm import bulk_task
from lsm.bulk import cut_slices
from lsm.sources import LogWriter, PartitionedLog
from tests.lsm._bulk_util import Stores, contents

key_sets = {
    "fixed": lambda r: b"%08d" % r.randrange(300),
    # one length over two 64-bit words of the sort, the second padded, differing in the first word too
    "wide": lambda r: b"%011d" % (r.randrange(30) * 10**9 + r.randrange(10)),
    # one length, with NULs at the end and everywhere (numpy's fixed-width strings must not drop them)
    "nul": lambda r: bytes(r.choice(b"\x00\x00\x01\xfe") for _ in range(3)),
    "mixed": lambda r: bytes(r.choice(b"\x00\x01k") for _ in range(r.randrange(1, 6))),
}


def write_plain(log: str, seed: int, n: int, keys: str, partitions: int = 3) -> None:
    r = random.Random(seed)
    with LogWriter(log) as w:
        for i in range(n):
            value = None if r.random() < 0.15 else b"v%d" % i * r.choice([1, 1, 40, 400])
            w.append(r.randrange(partitions), key_sets[keys](r), value)


@pytest.fixture
def stores(open_db, new_root) -> Stores:
    return Stores(open_db, new_root)


GRID = [(keys, ttl) for keys in sorted(key_sets) for ttl in (None, 60_000)]


# the grid varies the keys' columns, not the store: S3 runs one point of it (four loads, 3 s of requests)
@pytest.mark.parametrize(
    ("backend", "keys", "default_ttl"),
    [(b, k, ttl) for b in ("local", "memory") for k, ttl in GRID]
    + [pytest.param("s3", "mixed", 60_000, marks=pytest.mark.s3)],
)
def test_plain_slices_load_like_streaming_and_like_the_record_path(
    tmp_path, monkeypatch, stores, keys, default_ttl
) -> None:
    log = str(tmp_path / "log")
    write_plain(log, seed=len(keys), n=2500, keys=keys)
    want = stores.load("stream", log, "stream")
    calls: list[object] = []
    real = bulk_task._plain_columns

    def spy(task):
        out = real(task)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(bulk_task, "_plain_columns", spy)
    kw = {"default_ttl": default_ttl}
    if default_ttl is not None:
        want = stores.load("stream-ttl", log, "stream", **kw)
    got = stores.load("plain", log, "local", tasks=4, **kw)
    assert calls and all(calls)  # every slice went the column way
    monkeypatch.setattr(bulk_task, "_plain_columns", lambda task: None)
    general = stores.load("general", log, "local", tasks=4, **kw)
    assert got == general == want
    assert len(want["rows"]) > 20


# the column path of a slice of a local log (LogSlice) and of a log on memory:// (SegmentSlice)
@pytest.mark.parametrize("backend", ["local", "memory"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(st.binary(min_size=1, max_size=4), st.one_of(st.none(), st.binary(max_size=3))),
        min_size=1,
        max_size=60,
    )
)
def test_column_rows_equal_the_record_path_rows(new_root, recs) -> None:
    log = new_root(f"log-{uuid.uuid4().hex[:8]}")  # a fresh log for each example
    with LogWriter(log) as w:
        for k, v in recs:
            w.append(0, k, v)
    source = PartitionedLog(log)
    (sl,) = cut_slices(source, 0, 0, len(recs), len(recs))
    task = bulk_task.BulkTask(0, sl, 7, 1000, "commit", None, False, None)
    (keys, exps, values), count, nbytes = bulk_task._plain_columns(task)
    if exps is None or isinstance(exps, int):
        exps = [exps] * len(keys)
    if not isinstance(values, list):  # values of one length: a numpy array of V<length> items
        values = values.tolist()
    rows = [(k, 7, 1000, e, v) for k, e, v in zip(keys, exps, values, strict=True)]
    resolved, want_bytes = bulk_task.resolve_tuples(sl, (t for r, _ in sl.runs() for t in r), 1000, "commit", None, False)
    assert rows == [(k, 7, 1000, e, v) for k, (_k, e, v) in sorted(resolved.items())]
    assert (count, nbytes) == (len(recs), want_bytes)


@pytest.mark.parametrize("backend", ["local", "memory"])
def test_a_slice_with_any_other_record_takes_the_record_path(new_root) -> None:
    log = new_root("log")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1")
        w.append(0, b"b", b"2", ttl=5)
    (sl,) = cut_slices(PartitionedLog(log), 0, 0, 2, 2)
    assert sl.plain() is None
    assert bulk_task._plain_columns(bulk_task.BulkTask(0, sl, 1, 1, "commit", None, False, None)) is None


def test_a_reserved_key_is_refused_as_by_streaming(tmp_path, open_db) -> None:
    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1")
    # LogWriter refuses such a record; another producer of the format could still write one
    with open(os.path.join(log, "0.log"), "ab") as f:
        f.write(encode_record(b"\xff\xff\xff\xfflsm\x00x", b"2"))
    db = open_db()
    try:
        with pytest.raises(ValueError, match="reserved key space"):
            db.ingest(PartitionedLog(log), name="events", engine="local")
        assert contents(db)["rows"] == {}
    finally:
        db.close()


def flip_payload_byte(log: str, partition: int, record: int) -> None:
    source = PartitionedLog(log)
    source.end(partition)
    idx = source._index[partition]
    path = os.path.join(log, f"{partition}.log")
    at = idx.positions[record] + 16 + 2  # inside the payload: only its checksum can tell
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x20]))


def test_the_plan_reads_headers_and_the_task_catches_a_damaged_payload(tmp_path, open_db) -> None:
    log = str(tmp_path / "log")
    write_plain(log, seed=3, n=600, keys="fixed")
    flip_payload_byte(log, 1, 150)
    source = PartitionedLog(log)
    assert source.plan_end(1) > 150  # the plan counts past it: only the payload is damaged
    with pytest.raises(lsm.CorruptionError, match="checksum mismatch"):
        source.end(1)  # end() still verifies every payload, also those plan_end skipped
    db = open_db()
    try:
        for kw in ({"engine": "local", "tasks": 3}, {}):
            with pytest.raises(lsm.CorruptionError, match="checksum mismatch"):
                db.ingest(PartitionedLog(log), name="events", **kw)
            assert contents(db)["rows"] == {} and contents(db)["bindings"] == []
    finally:
        db.close()

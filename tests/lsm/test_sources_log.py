"""PartitionedLog and LogWriter (lsm/sources/partitioned_log.py) on real files, with a real second process.

What is about offsets, ordering, reading and refusals runs on a local directory and on an object store
(`log_dir`: the same API over segment objects, lsm/sources/object_log.py); what is about a partition
file's bytes (torn tails, damage in place, truncation, file locks, read chunks, the index's stamps, another
process appending) is local."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formats import fileio
from lsm import CorruptionError, FormatVersionError, SourceError
from lsm.sources import LogWriter, PartitionedLog, Source, SourceRecord
from lsm.sources import partitioned_log as plog
from lsm.sources.partitioned_log import partition_path
from lsm.syskeys import is_system
from storage import storage_for

PRODUCER = str(Path(__file__).with_name("_log_producer.py"))


def producer(*args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, PRODUCER, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


@pytest.fixture
def log_dir(new_root) -> str:
    """Where a fresh log goes on the test's backend: a local directory (LogWriter makes it) or a URL."""
    return new_root("log")


def fresh_log(new_root) -> str:
    """Another fresh log on the test's backend, for each example of a property test."""
    return new_root(f"log-{uuid.uuid4().hex[:8]}")


# the property tests read after every few appends: local and memory, not one S3 request per read
MEMORY_SPEED = pytest.mark.parametrize("backend", ["local", "memory"])
# each example of a property test takes a fresh log from the function-scoped `new_root`
def examples(n: int) -> settings:
    return settings(max_examples=n, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def test_append_and_read(log_dir: str) -> None:
    d = log_dir
    with LogWriter(d) as w:
        assert w.append(0, b"a", b"1") == 0
        assert w.append(0, b"b", None, ttl=10, event_ts=5) == 1
        assert w.append(2, b"c", b"3", tx="t1") == 0
        assert w.append(2, b"d", b"4", tx="t1", tx_end=True) == 1
        assert w.end(0) == 2 and w.end(1) == 0
    log = PartitionedLog(d)
    assert isinstance(log, Source) and log.name == str(d)
    assert log.partitions() == [0, 2]
    assert (log.end(0), log.end(1), log.end(2)) == (2, 0, 2)
    assert list(log.read(0, 0)) == [
        SourceRecord(0, 0, b"a", b"1"),
        SourceRecord(0, 1, b"b", None, ttl=10, event_ts=5),
    ]
    assert list(log.read(2, 1)) == [SourceRecord(2, 1, b"d", b"4", tx="t1", tx_end=True)]
    assert list(log.read(0, 1, 1)) == [] and list(log.read(0, 5)) == [] and list(log.read(7, 0)) == []


def _keys(max_size: int) -> st.SearchStrategy[bytes]:
    """Any key a record may have: not one in the store's reserved space, which `LogWriter.append` refuses."""
    return st.binary(min_size=1, max_size=max_size).filter(lambda k: not is_system(k))


@MEMORY_SPEED
@examples(30)
@given(st.lists(st.tuples(st.integers(0, 3), _keys(8)), max_size=60), st.data())
def test_read_ranges_match_a_model(new_root, ops: list, data: st.DataObject) -> None:
    d = fresh_log(new_root)
    model: dict[int, list[bytes]] = {}
    with LogWriter(d) as w:
        log = PartitionedLog(d)  # (an object-store log exists once a writer has made its marker)
        for i, (p, key) in enumerate(ops):
            assert w.append(p, key, b"%d" % i) == len(model.setdefault(p, []))
            model[p].append(key)
            if data.draw(st.booleans()):  # read while the producer is still appending
                w.flush()  # an object-store writer publishes its buffered records as a segment here
                q = data.draw(st.sampled_from(sorted(model)))
                start = data.draw(st.integers(0, len(model[q]) + 1))
                stop = data.draw(st.none() | st.integers(0, len(model[q]) + 1))
                got = [(r.offset, r.key) for r in log.read(q, start, stop)]
                hi = len(model[q]) if stop is None else min(stop, len(model[q]))
                assert got == [(o, model[q][o]) for o in range(start, hi)]
    assert log.partitions() == sorted(model)
    for p, keys in model.items():
        assert log.end(p) == len(keys)
        assert [r.key for r in PartitionedLog(d).read(p, 0)] == keys


def test_records_larger_than_the_read_chunk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A local file is read in CHUNK pieces (an object-store segment is read whole)."""
    monkeypatch.setattr(plog, "CHUNK", 64)
    values = [bytes([i]) * n for i, n in enumerate((10, 500, 3, 64, 65, 1000, 1))]
    with LogWriter(tmp_path) as w:
        for v in values:
            w.append(0, b"k", v)
    log = PartitionedLog(tmp_path)
    assert log.end(0) == len(values)
    assert [r.value for r in log.read(0, 0)] == values
    assert [r.value for r in log.read(0, 4, 6)] == values[4:6]


def test_a_torn_tail_is_never_consumed_and_is_read_once_complete(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        w.append(0, b"first", b"1")
    log = PartitionedLog(tmp_path)
    assert log.end(0) == 1
    p = producer("torn", tmp_path, 0)
    try:
        assert p.stdout.readline().strip() == "half"
        size = os.path.getsize(partition_path(str(tmp_path), 0))
        for _ in range(3):  # polling a half-written record: never a record, never an error
            assert log.end(0) == 1
            assert [r.key for r in log.read(0, 0)] == [b"first"]
            assert list(log.read(0, 1)) == []
        assert os.path.getsize(partition_path(str(tmp_path), 0)) == size
        p.stdin.write("go\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "done"
        assert p.wait(30) == 0
    finally:
        p.kill()
    assert log.end(0) == 2
    rec = list(log.read(0, 1))
    assert [(r.offset, r.key, len(r.value)) for r in rec] == [(1, b"torn", 4096)]


def test_a_reader_racing_a_producer_process_sees_only_complete_prefixes(tmp_path: Path) -> None:
    """A second process appends 3 partitions of ~9 KiB records; the reader polls as it goes."""
    count, size = 600, 9000
    p = producer("append", tmp_path, 3, count, size)
    log = PartitionedLog(tmp_path)
    seen = {0: 0, 1: 0, 2: 0}
    try:
        while True:
            done = p.poll() is not None
            for part in log.partitions():
                end = log.end(part)
                assert end >= seen[part]
                for r in log.read(part, seen[part], end):
                    i = int(r.key)
                    assert i % 3 == part and r.offset == i // 3 and r.offset == seen[part]
                    assert r.value.startswith(b"%d:" % i) and len(r.value) == size
                    seen[part] += 1
                assert seen[part] == end
            if done:
                break
        assert p.returncode == 0, p.stderr.read()
    finally:
        p.kill()
    assert sum(seen.values()) == count


def test_partitions_may_appear_at_any_time(backend: str, log_dir: str) -> None:
    with LogWriter(log_dir) as w:
        log = PartitionedLog(log_dir)
        assert log.partitions() == [] and log.end(0) == 0
        w.append(1, b"a", b"1")
        w.flush()  # (an object-store writer publishes here; a local append is visible at once)
        assert log.partitions() == [1]
        w.append(10, b"b", b"2")
        w.append(0, b"c", b"3")
        w.flush()
        assert log.partitions() == [0, 1, 10]
    storage = storage_for(log_dir)
    # names that are no partition: a leading zero, a local writer's temporary file, anything else
    junk = ("01.log", ".3.log.99.tmp", "notes.txt") if backend == "local" else ("01/0.seg", "notes.txt")
    for name in junk:
        storage.write_file(f"{log_dir}/{name}", [b""])
    assert log.partitions() == [0, 1, 10]


def test_a_corrupt_record_mid_file_raises_with_file_and_offset(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        for i in range(5):
            w.append(0, b"k%d" % i, b"v" * 20)
    path = partition_path(str(tmp_path), 0)
    rec_len = (os.path.getsize(path) - 6) // 5
    third = 6 + 2 * rec_len
    with open(path, "r+b") as f:
        f.seek(third + 20)
        b = f.read(1)
        f.seek(third + 20)
        f.write(bytes([b[0] ^ 0xFF]))
    log = PartitionedLog(tmp_path)
    for call in (lambda: log.end(0), lambda: list(log.read(0, 0)), lambda: list(log.read(0, 3))):
        with pytest.raises(CorruptionError) as ei:
            call()
        assert (ei.value.path, ei.value.offset) == (path, third)
    with pytest.raises(CorruptionError):  # a writer refuses to append after corruption too
        LogWriter(tmp_path).append(0, b"x", b"y")


def test_corruption_after_indexing_is_found_by_read(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        for i in range(3):
            w.append(0, b"k%d" % i, b"value")
    log = PartitionedLog(tmp_path)
    assert log.end(0) == 3
    path = partition_path(str(tmp_path), 0)
    with open(path, "r+b") as f:  # damage record 1 in place (same inode, same size)
        f.seek(6 + (os.path.getsize(path) - 6) // 3 + 18)
        f.write(b"Z")
    it = log.read(0, 0)
    assert next(it).key == b"k0"
    with pytest.raises(CorruptionError) as ei:
        next(it)
    assert ei.value.offset == 6 + (os.path.getsize(path) - 6) // 3


def test_truncation_is_visible_through_end(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        for i in range(10):
            w.append(0, b"k%d" % i, b"v")
    log = PartitionedLog(tmp_path)
    assert log.end(0) == 10
    path = partition_path(str(tmp_path), 0)
    rec_len = (os.path.getsize(path) - 6) // 10
    os.truncate(path, 6 + 4 * rec_len)
    assert log.end(0) == 4
    assert [r.key for r in log.read(0, 0)] == [b"k%d" % i for i in range(4)]
    os.unlink(path)  # a deleted partition ends at 0 (ingest reports it as a regression)
    assert log.end(0) == 0 and list(log.read(0, 0)) == []


def test_a_replaced_file_is_indexed_again(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        for i in range(3):
            w.append(0, b"old%d" % i, b"v")
    log = PartitionedLog(tmp_path)
    assert log.end(0) == 3
    other = tmp_path / "other"
    with LogWriter(other) as w:
        for i in range(5):
            w.append(0, b"new%d" % i, b"v")
    os.replace(partition_path(str(other), 0), partition_path(str(tmp_path), 0))
    assert log.end(0) == 5
    assert [r.key for r in log.read(0, 0)] == [b"new%d" % i for i in range(5)]


def test_a_writer_reopening_cuts_a_torn_tail_and_continues(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        w.append(0, b"a", b"1")
        w.append(0, b"b", b"2")
    path = partition_path(str(tmp_path), 0)
    os.truncate(path, os.path.getsize(path) - 3)  # what a producer killed mid-append leaves
    log = PartitionedLog(tmp_path)
    assert log.end(0) == 1
    with LogWriter(tmp_path) as w:
        assert w.end(0) == 1
        assert w.append(0, b"c", b"3") == 1
    assert [(r.offset, r.key) for r in log.read(0, 0)] == [(0, b"a"), (1, b"c")]


def test_one_writer_per_partition(tmp_path: Path) -> None:
    w1 = LogWriter(tmp_path)
    w1.append(0, b"a", b"1")
    w2 = LogWriter(tmp_path)
    with pytest.raises(SourceError, match="another LogWriter"):
        w2.append(0, b"b", b"2")
    assert w2.append(1, b"b", b"2") == 0  # other partitions are free
    w1.close()
    assert w2.append(0, b"c", b"3") == 1
    w2.close()
    w2.close()  # idempotent
    with pytest.raises(SourceError, match="closed"):
        w2.append(0, b"d", b"4")


def test_bad_arguments(log_dir: str) -> None:
    with LogWriter(log_dir) as w:
        with pytest.raises(ValueError):
            w.append(-1, b"k", b"v")
        with pytest.raises(TypeError):
            w.append(0, "k", b"v")
        with pytest.raises(ValueError):
            w.append(0, b"k", b"v", tx_end=True)
        assert w.append(0, b"k", b"v") == 0  # nothing was written by the refused appends
    log = PartitionedLog(log_dir)
    for args, exc in (
        ((-1, 0), ValueError),
        ((0, -1), ValueError),
        (("0", 0), TypeError),
        ((True, 0), TypeError),
    ):
        with pytest.raises(exc):
            log.read(*args)
    with pytest.raises(ValueError):
        log.read(0, 0, -2)
    assert [(r.offset, r.key) for r in log.read(0, 0)] == [(0, b"k")]


def test_a_missing_directory_and_bad_partition_files_are_refused(tmp_path: Path) -> None:
    """A local log's directory and the header of its partition files."""
    with pytest.raises(SourceError, match="not a directory"):
        PartitionedLog(tmp_path / "missing")
    log = PartitionedLog(tmp_path)
    (tmp_path / "5.log").write_bytes(b"LSMP\x00\x09")
    with pytest.raises(FormatVersionError):
        log.end(5)
    (tmp_path / "6.log").write_bytes(b"garbage!")
    with pytest.raises(CorruptionError):
        log.end(6)


def test_torn_bytes(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        w.append(0, b"a", b"1")
    log = PartitionedLog(tmp_path)
    assert log.torn_bytes(0) == 0 and log.torn_bytes(3) == 0
    with open(partition_path(str(tmp_path), 0), "ab") as f:
        f.write(b"\x00\x00\x00")
    assert log.torn_bytes(0) == 3 and log.end(0) == 1


def test_make_record_builds_the_same_frozen_record() -> None:
    import dataclasses

    from lsm.sources.protocol import make_record

    args = (3, 9, b"k", None, 5, 7, "t", True)
    r = make_record(*args)
    assert r == SourceRecord(*args) and hash(r) == hash(SourceRecord(*args)) and type(r) is SourceRecord
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.offset = 10  # type: ignore[misc]


def test_a_failed_append_leaves_no_torn_record_behind(tmp_path: Path) -> None:
    w = LogWriter(tmp_path)
    w.append(0, b"a", b"1")
    # half the record reaches the file, then the disk is full (fileio's "short" fault)
    with fileio.faults("short", 1, ops={"write"}, path="0.log") as plan:
        with pytest.raises(fileio.FileOpError, match="No space"):
            w.append(0, b"b", b"2" * 100)
    assert plan.fired == 1
    log = PartitionedLog(tmp_path)
    assert log.torn_bytes(0) == 0 and log.end(0) == 1
    assert w.append(0, b"c", b"3") == 1  # continues right after the last complete record
    w.close()
    assert [(r.offset, r.key) for r in log.read(0, 0)] == [(0, b"a"), (1, b"c")]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.binary(max_size=200), min_size=1, max_size=12),
    st.data(),
    st.sampled_from([16, 64, 1 << 20]),
)
def test_a_file_growing_by_arbitrary_pieces_is_indexed_exactly(
    tmp_path_factory: pytest.TempPathFactory, values: list[bytes], data: st.DataObject, chunk: int
) -> None:
    """Whatever prefix of its appends a reader sees (cut anywhere, read in chunks of any size), end() is
    the number of complete records, and the same reader catches up as the rest arrives."""
    from formats.log import encode_file_header, encode_record

    d = tmp_path_factory.mktemp("log")
    body = encode_file_header() + b"".join(encode_record(b"k%d" % i, v) for i, v in enumerate(values))
    bounds = [len(encode_file_header())]
    for i, v in enumerate(values):
        bounds.append(bounds[-1] + len(encode_record(b"k%d" % i, v)))
    cuts = sorted(data.draw(st.lists(st.integers(bounds[0], len(body)), max_size=4)))
    path = partition_path(str(d), 0)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plog, "CHUNK", chunk)
        log = PartitionedLog(d)
        with open(path, "wb") as f:
            f.write(body[: bounds[0]])
        written = bounds[0]
        for cut in [*cuts, len(body)]:
            with open(path, "ab") as f:
                f.write(body[written:cut])
            written = max(written, cut)
            complete = sum(1 for b in bounds[1:] if b <= written)
            assert log.end(0) == complete
            assert log.torn_bytes(0) == written - bounds[complete]
        assert [r.value for r in log.read(0, 0)] == values


def _flip(path: str, at: int) -> None:
    with open(path, "r+b") as f:  # in place: same inode, same size
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x20]))


def test_a_settled_file_is_verified_once_and_damage_in_place_is_still_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records the index verified in a settled file are not hashed again while its stamp holds; a write
    in place after indexing changes the stamp (ctime), so read verifies again and finds the damage."""
    import time

    import formats.log as flog

    with LogWriter(tmp_path) as w:
        for i in range(6):
            w.append(0, b"k%d" % i, b"value%d" % i)
    path = partition_path(str(tmp_path), 0)
    monkeypatch.setattr(plog, "SETTLED_NS", 20_000_000)
    time.sleep(0.1)  # settled: older than SETTLED_NS (and a clock tick) when indexed
    log = PartitionedLog(tmp_path)
    assert log.end(0) == 6
    hashed = []
    real = flog._xxh3
    monkeypatch.setattr(flog, "_xxh3", lambda b: hashed.append(len(b)) or real(b))
    assert [r.key for r in log.read(0, 0)] == [b"k%d" % i for i in range(6)]
    assert hashed == []  # trusted: verified by the index, file unchanged
    rec_len = (os.path.getsize(path) - 6) // 6
    _flip(path, 6 + 3 * rec_len + 20)
    with pytest.raises(CorruptionError) as ei:
        list(log.read(0, 0))
    assert (ei.value.path, ei.value.offset) == (path, 6 + 3 * rec_len)
    assert hashed  # the file changed: read verified again


def test_a_file_appended_to_is_verified_again_by_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setattr(plog, "SETTLED_NS", 20_000_000)
    w = LogWriter(tmp_path)
    for i in range(3):
        w.append(0, b"k%d" % i, b"v")
    time.sleep(0.1)
    log = PartitionedLog(tmp_path)
    assert log.end(0) == 3
    path = partition_path(str(tmp_path), 0)
    _flip(path, 6 + 20)  # damage record 0 in place, then append (both change the stamp)
    w.append(0, b"k3", b"v")
    w.close()
    assert log.end(0) == 4  # only the appended bytes are indexed
    for call in (lambda: list(log.read(0, 0)), lambda: list(log.read_runs(0, 0))):
        with pytest.raises(CorruptionError) as ei:
            call()
        assert ei.value.offset == 6


@MEMORY_SPEED
@examples(30)
@given(
    st.lists(st.tuples(_keys(300), st.none() | st.binary(max_size=300)), max_size=30),
    st.lists(st.booleans(), max_size=30),
    st.integers(0, 35),
    st.none() | st.integers(0, 35),
)
def test_read_runs_are_the_records_of_read(
    backend: str, new_root, kvs: list, txs: list, start: int, stop: int | None
) -> None:
    d = fresh_log(new_root)
    # several runs: a local file read in 256-byte chunks (below), an object-store log in small segments
    with LogWriter(d) if backend == "local" else LogWriter(d, segment_bytes=256) as w:
        for i, (k, v) in enumerate(kvs):
            tx = i if i < len(txs) and txs[i] else None
            w.append(0, k, v, tx=tx, tx_end=tx is not None)
    log = PartitionedLog(d)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plog, "CHUNK", 256)  # several runs
        runs = list(log.read_runs(0, start, stop))
        want = [tuple(getattr(r, f) for f in SourceRecord.__slots__) for r in log.read(0, start, stop)]
    assert [t for run, _ in runs for t in run] == want
    assert [has_tx for _, has_tx in runs] == [any(t[6] is not None for t in run) for run, _ in runs]

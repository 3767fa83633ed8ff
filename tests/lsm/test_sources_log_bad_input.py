"""Partition files and ids the partitioned log must refuse (not hang on, not overflow on): FIFOs and other
non-regular files under a partition's name, partition ids a remap cannot store, a database directory.
The logs are local directories (their files are the point) but for the bound on partition ids, which holds
on every backend, as do the stores the ingests write to."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import lsm
from lsm import SourceError
from lsm.sources import LogWriter, PartitionedLog
from lsm.sources.object_log import MARKER
from lsm.sources.partitioned_log import partition_path
from storage import storage_for

MAX_PARTITION = 2**64 - 1  # the largest partition id a remap binding stores (msgpack uint64)


def _in_thread(fn, timeout: float = 10.0):
    """Run `fn` in a daemon thread; fail (instead of hanging the suite) if it has not returned by `timeout`.
    Returns its result, or re-raises what it raised."""
    out: dict = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"{fn} still blocked after {timeout} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_fifo_partition_is_refused_by_reader_and_writer(tmp_path: Path) -> None:
    os.mkfifo(partition_path(str(tmp_path), 0))
    log = PartitionedLog(tmp_path)
    assert log.partitions() == [0]
    for call in (
        lambda: log.end(0),
        lambda: log.plan_end(0),
        lambda: list(log.read(0, 0)),
        lambda: log.torn_bytes(0),
    ):
        with pytest.raises(SourceError, match="0.log: a FIFO, not a partition file"):
            _in_thread(call)
    with LogWriter(tmp_path) as w, pytest.raises(SourceError, match="a FIFO"):
        _in_thread(lambda: w.append(0, b"k", b"v"))


def test_a_directory_or_device_partition_is_refused(tmp_path: Path) -> None:
    os.mkdir(partition_path(str(tmp_path), 1))
    os.symlink("/dev/null", partition_path(str(tmp_path), 2))
    log = PartitionedLog(tmp_path)
    with pytest.raises(SourceError, match="1.log: a directory"):
        log.end(1)
    with pytest.raises(SourceError, match="2.log: a device"):
        log.end(2)
    with LogWriter(tmp_path) as w:
        with pytest.raises(SourceError, match="a directory"):
            w.append(1, b"k", b"v")
        with pytest.raises(SourceError, match="a device"):
            w.append(2, b"k", b"v")


def test_a_regular_file_swapped_for_a_fifo_after_indexing_is_refused_by_read(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        w.append(0, b"k", b"v")
    log = PartitionedLog(tmp_path)
    span = log._span(0, 0, None)  # indexed while it was a regular file
    path = partition_path(str(tmp_path), 0)
    os.unlink(path)
    os.mkfifo(path)
    with pytest.raises(SourceError, match="a FIFO"):
        _in_thread(lambda: list(log._records(0, *span)))


def test_partition_ids_are_bounded_by_what_a_remap_stores(backend: str, new_root) -> None:
    """On a local directory and an object store (a log of segment objects under one prefix per partition)."""
    where = new_root("log")
    with LogWriter(where) as w:
        with pytest.raises(ValueError, match="at most 2\\*\\*64-1"):
            w.append(MAX_PARTITION + 1, b"k", b"v")
        assert w.append(MAX_PARTITION, b"k", b"v") == 0
    # nothing written for the refused id: one partition file, or one partition prefix beside the marker
    listed = sorted(n for n in storage_for(where).list_entries(where) if not n.startswith("."))
    assert listed == ([f"{MAX_PARTITION}.log"] if backend == "local" else sorted([str(MAX_PARTITION), MARKER]))
    log = PartitionedLog(where)
    assert log.partitions() == [MAX_PARTITION] and log.end(MAX_PARTITION) == 1
    with pytest.raises(ValueError, match="at most 2\\*\\*64-1"):
        log.end(MAX_PARTITION + 1)


def test_a_stray_file_with_a_too_large_id_is_a_clear_error_for_ingest(tmp_path: Path, open_db) -> None:
    log_dir = tmp_path / "log"
    with LogWriter(log_dir) as w:
        w.append(0, b"k", b"v")
    (log_dir / f"{MAX_PARTITION + 1}.log").write_bytes((log_dir / "0.log").read_bytes())
    with pytest.raises(SourceError, match="18446744073709551616.log: partition id beyond 2\\*\\*64-1"):
        PartitionedLog(log_dir).partitions()
    with open_db() as db:
        with pytest.raises(SourceError, match="partition id beyond"):
            db.ingest(PartitionedLog(log_dir), name="s")
        assert list(db.scan()) == []


def test_a_log_writer_refuses_a_database(db_root: str) -> None:
    """A database's directory, or its prefix on an object store: its files would sit among the store's."""
    with lsm.DB.open(db_root) as db:
        db.put(b"a", b"1")
    listed = lambda: sorted(storage_for(db_root).list_entries(db_root))  # noqa: E731
    before = listed()
    with pytest.raises(SourceError, match="an lsm-sim database( directory)?, not a partitioned log"):
        LogWriter(db_root)
    assert listed() == before


def test_a_bulk_load_slice_of_a_file_swapped_for_a_fifo_is_refused(tmp_path: Path) -> None:
    from lsm.sources.slices import LogSlice

    path = partition_path(str(tmp_path), 0)
    os.mkfifo(path)
    piece = LogSlice("log", path, (0, 0), 0, 0, 1, 6, 40)  # as planned from the regular file it replaced
    with pytest.raises(SourceError, match="a FIFO"):
        _in_thread(lambda: list(piece.records()))
    with pytest.raises(SourceError, match="a FIFO"):
        _in_thread(piece.plain)


def test_records_every_ingest_would_refuse_are_refused_when_written(tmp_path: Path, open_db) -> None:
    """Issue 32 defect 10: a record with a key in the store's reserved space was appended, and every
    ingest of the log then failed at its offset for good; a negative progress time was accepted."""
    from lsm.syskeys import SYSTEM_PREFIX

    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        w.append(0, b"ok", b"1")
        bad = [
            dict(key=SYSTEM_PREFIX + b"remap", value=b"x"),
            dict(key=SYSTEM_PREFIX, value=None),
            dict(key=b"k", value=b"v", ttl=2**63),
            dict(key=b"k", value=b"v", event_ts=2**63),
            dict(key=b"k", value=b"v", event_ts=-(2**63) - 1),
        ]
        for kw in bad:
            with pytest.raises(ValueError, match="reserved key space|does not fit a signed 64-bit"):
                w.append(0, **kw)
        for ts in (-5, -1):
            with pytest.raises(ValueError, match="ms since 1970, >= 0"):
                w.advance(ts)
        w.append(0, b"k", b"v", ttl=2**63 - 1, event_ts=-(2**63))  # the limits themselves are stored
        w.advance(0)
    assert [r.key for r in PartitionedLog(log).read(0, 0)] == [b"ok", b"k"]  # nothing else appended
    with open_db() as db:
        assert db.ingest(PartitionedLog(log), "s", ttl_base="event").records == 2

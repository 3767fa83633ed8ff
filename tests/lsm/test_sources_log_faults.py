"""LogWriter's file calls go through formats.fileio, so its fault injection reaches them.

Each case arms one fault (EIO, or a short write) on one call the writer makes (creating a partition
file: create, write, fsync, link of the temporary file; appending with sync=True: fdatasync; flush and
close: fdatasync; the first progress marker: pwrite and fsync of the header; cutting a torn tail: fsync)
and sees it raised as `FileOpError` naming that call. A failed creation leaves neither the partition file
nor its temporary file behind, and the writer works again once the fault is gone.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from formats import fileio
from formats.log import FILE_HEADER, MARKER_VERSION, file_version
from lsm.sources import LogWriter, PartitionedLog
from lsm.sources.partitioned_log import partition_path


def _create(d: Path) -> None:
    LogWriter(d).append(0, b"k", b"v")  # (never reached past the failing creation)


def _sync_append(d: Path) -> None:
    with LogWriter(d, sync=True) as w:
        w.append(0, b"k", b"v")
        with fileio.faults("eio", 1, ops={"fdatasync"}, path="0.log"):
            w.append(0, b"k2", b"v2")


def _flush(d: Path) -> None:
    w = LogWriter(d)
    w.append(0, b"k", b"v")
    try:
        with fileio.faults("eio", 1, ops={"fdatasync"}, path="0.log"):
            w.flush()
    finally:
        w.close()


def _close(d: Path) -> None:
    w = LogWriter(d)
    w.append(0, b"k", b"v")
    with fileio.faults("eio", 1, ops={"fdatasync"}, path="0.log"):
        w.close()


def _marker(op: str):
    def run(d: Path) -> None:
        with LogWriter(d) as w:
            w.append(0, b"k", b"v")
            with fileio.faults("eio", 1, ops={op}, path="0.log"):
                w.advance(5, [0])

    return run


def _torn_tail(d: Path) -> None:
    with LogWriter(d) as w:
        w.append(0, b"k", b"v")
    with open(partition_path(str(d), 0), "ab") as f:
        f.write(b"\x01\x02\x03")  # a producer died mid-append
    with fileio.faults("eio", 1, ops={"fsync"}, path="0.log"):
        LogWriter(d).append(0, b"k2", b"v2")


@pytest.mark.parametrize(
    "op, run, armed",
    [
        ("create", _create, True),
        ("write", _create, True),
        ("fsync", _create, True),
        ("link", _create, True),
        ("fdatasync", _sync_append, False),
        ("fdatasync", _flush, False),
        ("fdatasync", _close, False),
        ("pwrite", _marker("pwrite"), False),
        ("fsync", _marker("fsync"), False),
        ("fsync", _torn_tail, False),
    ],
    ids=["create", "header-write", "header-fsync", "link", "sync-append", "flush", "close", "marker-pwrite",
         "marker-fsync", "torn-tail-fsync"],
)
def test_a_fault_in_a_log_writer_call_is_raised_as_file_op_error(tmp_path: Path, op, run, armed) -> None:
    d = tmp_path / "log"
    if armed:  # the fault is armed around the whole run (the first matching call fails)
        with fileio.faults("eio", 1, ops={op}, path="0.log") as plan, pytest.raises(fileio.FileOpError) as e:
            run(d)
        assert plan.fired == 1
    else:
        with pytest.raises(fileio.FileOpError) as e:
            run(d)
    assert e.value.op == op
    assert "0.log" in e.value.filename


@pytest.mark.parametrize("op", ["create", "write", "fsync", "link"])
def test_a_failed_creation_leaves_no_file_and_the_writer_recovers(tmp_path: Path, op: str) -> None:
    with LogWriter(tmp_path) as w:
        with fileio.faults("eio", 1, ops={op}, path="0.log"), pytest.raises(fileio.FileOpError):
            w.append(0, b"a", b"1")
        assert sorted(os.listdir(tmp_path)) == []  # neither 0.log nor its temporary file
        assert w.append(0, b"a", b"1") == 0
    assert [(r.offset, r.key, r.value) for r in PartitionedLog(tmp_path).read(0, 0)] == [(0, b"a", b"1")]


def test_a_failed_marker_header_write_leaves_the_header_readable(tmp_path: Path) -> None:
    with LogWriter(tmp_path) as w:
        w.append(0, b"a", b"1")
        with fileio.faults("eio", 1, ops={"pwrite"}, path="0.log"), pytest.raises(fileio.FileOpError):
            w.advance(5, [0])
        w.advance(5, [0])  # the next marker marks the header again
    with open(partition_path(str(tmp_path), 0), "rb") as f:
        assert file_version(f.read(FILE_HEADER.size), "0.log") == MARKER_VERSION

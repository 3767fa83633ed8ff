"""`lsm.sources.slices`: a slice's ``runs()`` (what a bulk-load task reads) gives exactly the records of
``records()``, as tuples of the `SourceRecord` fields, with the same checks and errors."""

from __future__ import annotations

import os

import pytest

from formats.errors import CorruptionError
from lsm.bulk import cut_slices
from lsm.sources import LogWriter, PartitionedLog
from lsm.sources.partitioned_log import CHUNK
from lsm.sources.slices import SourceSlice

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


def _write(log_dir: str) -> None:
    with LogWriter(log_dir) as w:
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


def test_runs_give_the_records_of_every_slice(tmp_path) -> None:
    d = str(tmp_path / "log")
    _write(d)
    log = PartitionedLog(d)
    for p in (0, 1):
        for max_records in (1, 77, 10_000):
            for sl in cut_slices(log, p, 3, log.end(p), max_records):
                recs = _as_tuples(sl.records())
                got, flags = _flat(sl.runs())
                assert got == recs
                assert all(a == b for a, b in flags)
                generic = SourceSlice(log, p, sl.start, sl.stop)
                assert _flat(generic.runs())[0] == recs


def test_runs_raise_on_a_damaged_record(tmp_path) -> None:
    d = str(tmp_path / "log")
    _write(d)
    log = PartitionedLog(d)
    (sl,) = cut_slices(log, 0, 0, log.end(0), 10_000)
    path = sl.path
    at = sl.byte_start + 6000
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(CorruptionError):
        list(sl.records())
    with pytest.raises(CorruptionError):
        list(sl.runs())
    assert os.path.exists(path)

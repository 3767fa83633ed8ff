"""WAL recovery modes (DbOptions.wal_recovery_mode, after RocksDB's WALRecoveryMode; issue 12 item 7).

A torn (incomplete) last record is what a killed append or a full disk leaves: every mode but
absolute_consistency drops it. A COMPLETE last record with a bad checksum is damage: by default opening
raises CorruptionError(file, offset); tolerate_corrupted_tail drops it; `lsm check` reports it either way.
"""

from __future__ import annotations

import os

import pytest

import lsm
from formats.wal import HEADER
from lsm.inspect import CheckError, check_database
from tests.tools._cli import one_line_error, run_lsm

T0 = 1_700_000_000_000


def opts(**kw) -> lsm.DbOptions:
    return lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False, **kw)


def crashed_store(path) -> str:
    """A store whose last WAL segment holds put a, put b, delete a; returns that segment's path."""
    db = lsm.DB.open(path, opts())
    db.put(b"a", b"1")
    db.put(b"b", b"2")
    db.delete(b"a")
    seg = db.engine.wal.writer.path
    db.engine.crash()  # no final sync, no flush: like kill -9
    return seg


def last_record_offset(seg: str) -> int:
    buf = open(seg, "rb").read()
    pos = last = 0
    while pos < len(buf):
        last = pos
        pos += HEADER.size + HEADER.unpack_from(buf, pos)[0]
    return last


def test_complete_last_record_with_bad_checksum_is_corruption_by_default(tmp_path):
    path = tmp_path / "db"
    seg = crashed_store(path)
    at = last_record_offset(seg)
    with open(seg, "r+b") as f:  # flip the last byte: the record stays complete, its checksum fails
        f.seek(-1, os.SEEK_END)
        b = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([b[0] ^ 0x40]))
    with pytest.raises(lsm.CorruptionError) as ei:
        lsm.DB.open(path, opts())
    assert (ei.value.path, ei.value.offset) == (seg, at)
    with pytest.raises(lsm.CorruptionError):
        lsm.DB.open(path, opts(), read_only=True)
    with pytest.raises(CheckError, match=f"offset {at}"):
        check_database(str(path))
    assert "corruption at offset" in one_line_error(run_lsm("check", path), 1)
    # the caller may choose to drop it: the delete is lost, knowingly
    with lsm.DB.open(path, opts(wal_recovery_mode="tolerate_corrupted_tail")) as db:
        assert db.get(b"a") == b"1" and db.get(b"b") == b"2" and db.seq == 2


def test_torn_last_record_is_dropped_except_in_absolute_consistency(tmp_path):
    path = tmp_path / "db"
    seg = crashed_store(path)
    size = os.path.getsize(seg)
    os.truncate(seg, size - 3)
    with pytest.raises(lsm.CorruptionError, match="absolute_consistency"):
        lsm.DB.open(path, opts(wal_recovery_mode="absolute_consistency"))
    r = run_lsm("check", path)  # a torn tail is a note, not a problem
    assert r.code == 0 and "torn tail" in r.out, r
    with lsm.DB.open(path, opts()) as db:
        assert db.get(b"a") == b"1" and db.seq == 2


def test_point_in_time_stops_at_the_first_damage(tmp_path):
    path = tmp_path / "db"
    seg = crashed_store(path)
    buf = bytearray(open(seg, "rb").read())
    second = HEADER.size + HEADER.unpack_from(buf, 0)[0]
    buf[second + HEADER.size + 2] ^= 0xFF  # damage the middle record
    open(seg, "wb").write(bytes(buf))
    for mode in ("tolerate_truncated_tail", "tolerate_corrupted_tail"):
        with pytest.raises(lsm.CorruptionError):
            lsm.DB.open(path, opts(wal_recovery_mode=mode))
    with lsm.DB.open(path, opts(wal_recovery_mode="point_in_time")) as db:
        assert dict(db.scan()) == {b"a": b"1"} and db.seq == 1


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="wal_recovery_mode"):
        lsm.DbOptions(wal_recovery_mode="skip_everything")

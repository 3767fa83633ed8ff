"""WAL recovery (DbOptions.wal_recovery_mode, after RocksDB's WALRecoveryMode; issue 12 item 7), on every
backend: one replay (lsm.wal_replay) reads a local segment file and an object store's WAL objects alike.

A torn (incomplete) last record is what a killed append or a full disk leaves: every mode but
absolute_consistency drops it. A COMPLETE last record with a bad checksum is damage: by default opening
raises CorruptionError(file, offset); tolerate_corrupted_tail drops it; `lsm check` reports it either way.
Replay reads only the segments (objects) from the manifest's replay point.
"""

from __future__ import annotations

import os

import pytest

import lsm
from formats.wal import HEADER
from lsm.inspect import CheckError, check_database
from storage.paths import open_store
from tests import _store
from tests.lsm import _wal
from tests.tools._cli import Result, one_line_error, run_lsm

SYNC = lsm.WriteOptions(sync=True)


def crashed_store(open_db, root: str) -> str:
    """A store whose last WAL segment (object) holds put a, put b, delete a; returns its name."""
    # no group commit timer: the three records reach the store together, at flush_wal, as one object
    db = open_db(wal_flush_interval_ms=None)
    db.put(b"a", b"1")
    db.put(b"b", b"2")
    db.delete(b"a")
    db.flush_wal()  # a local segment had them at each write(2); an object store writes its buffer now
    db.engine.crash()  # no final sync, no flush: like kill -9
    return os.path.basename(_wal.segments(root)[-1][1])


def last_record_offset(buf: bytes) -> int:
    pos = last = 0
    while pos < len(buf):
        last = pos
        pos += HEADER.size + HEADER.unpack_from(buf, pos)[0]
    return last


def check_command(root: str, backend: str) -> Result | None:
    """`lsm check` in a subprocess on the directory: what the command prints of what `check_database` (run
    on every backend) found; the same command on a URL costs a second of start-up for nothing new."""
    return run_lsm("check", root) if backend == "local" else None


def test_complete_last_record_with_bad_checksum_is_corruption_by_default(db_root, open_db, backend):
    seg = crashed_store(open_db, db_root)
    buf = bytearray(_store.read(db_root, "wal", seg))
    at = last_record_offset(bytes(buf))
    buf[-1] ^= 0x40  # the record stays complete, its checksum fails
    _store.write(db_root, "wal", seg, bytes(buf))
    with pytest.raises(lsm.CorruptionError) as ei:
        open_db()
    assert (ei.value.path, ei.value.offset) == (_store.path(db_root, "wal", seg), at)
    with pytest.raises(lsm.CorruptionError):
        open_db(read_only=True)
    with pytest.raises(CheckError, match=f"offset {at}"):
        check_database(db_root)
    if (r := check_command(db_root, backend)) is not None:
        assert "corruption at offset" in one_line_error(r, 1)
    # the caller may choose to drop it: the delete is lost, knowingly
    db = open_db(wal_recovery_mode="tolerate_corrupted_tail")
    assert db.get(b"a") == b"1" and db.get(b"b") == b"2" and db.seq == 2


def test_torn_last_record_is_dropped_except_in_absolute_consistency(db_root, open_db, backend):
    seg = crashed_store(open_db, db_root)
    _store.write(db_root, "wal", seg, _store.read(db_root, "wal", seg)[:-3])
    with pytest.raises(lsm.CorruptionError, match="absolute_consistency"):
        open_db(wal_recovery_mode="absolute_consistency")
    assert any("torn tail" in n for n in check_database(db_root).notes)  # a note, not a problem
    if (r := check_command(db_root, backend)) is not None:
        assert r.code == 0 and "torn tail" in r.out, r
    db = open_db()
    assert db.get(b"a") == b"1" and db.seq == 2


def test_point_in_time_stops_at_the_first_damage(db_root, open_db):
    seg = crashed_store(open_db, db_root)
    buf = bytearray(_store.read(db_root, "wal", seg))
    second = HEADER.size + HEADER.unpack_from(buf, 0)[0]
    buf[second + HEADER.size + 2] ^= 0xFF  # damage the middle record
    _store.write(db_root, "wal", seg, bytes(buf))
    for mode in ("tolerate_truncated_tail", "tolerate_corrupted_tail"):
        with pytest.raises(lsm.CorruptionError):
            open_db(wal_recovery_mode=mode)
    db = open_db(wal_recovery_mode="point_in_time")
    assert dict(db.scan()) == {b"a": b"1"} and db.seq == 1


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="wal_recovery_mode"):
        lsm.DbOptions(wal_recovery_mode="skip_everything")


def test_recovery_replays_the_segments_from_the_replay_point_only(db_root, open_db):
    db = open_db(wal_flush_interval_ms=None)
    db.put(b"flushed", b"1", options=SYNC)
    db.flush()
    first_live = db.manifest.wal_replay_from
    db.put(b"after", b"2", options=SYNC)
    db.put(b"after2", b"3", options=SYNC)
    live = [i for i, _ in _wal.segments(db_root) if i >= first_live]
    # a memtable's WAL: one segment file appended in place, or one object per sync write
    assert len(live) == (1 if open_store(db_root).storage.appends else 2)
    # below the replay point: a segment no recovery may read (it would not decode)
    _store.write(db_root, "wal", os.path.basename(_wal.segment_path(db_root, first_live - 1)), b"junk")
    # a read-only open recovers as a writable one does, in memory: the SST, then the live segments
    with open_db(read_only=True) as ro:
        assert dict(ro.scan()) == {b"flushed": b"1", b"after": b"2", b"after2": b"3"}

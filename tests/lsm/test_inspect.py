"""`lsm.inspect` from Python: check_database and space_usage on real databases, typed results."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import lsm
from lsm.inspect import (
    CATEGORIES,
    CheckError,
    CheckReport,
    LevelUsage,
    SpaceReport,
    check_database,
    latest_manifest,
    space_usage,
)
from tests import _store

T0 = 1_700_000_000_000


def build(open_db) -> None:
    """Two flushed L0 SSTs compacted into one run, then two L0 SSTs above it (close() flushes the last).

    Keys: a live (its older version dropped by the compaction), b expiring at T0 + 5_000, c and e
    deleted by tombstones in L0, d live in the newest L0 SST."""
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        db.put(b"a", b"a1")
        db.put(b"b", b"b1", ttl=5_000)
        db.put(b"c", b"c1")
        db.put(b"e", b"e1")
        db.flush()
        clock.advance(10)
        db.put(b"a", b"a2")
        db.flush()
        db.compact(full=True)
        clock.advance(10)
        db.delete(b"c")
        db.flush()
        clock.advance(10)
        db.put(b"d", b"d1")
        db.delete(b"e")
    with open_db(clock) as db:
        shape = db.lsm_shape()
        assert len(shape["l0"]) == 2 and len(shape["runs"]) == 1 and shape["memtable_rows"] == 0


def test_check_database_reports_what_it_covered(db_root: str, open_db) -> None:
    build(open_db)
    rep = check_database(db_root)
    assert isinstance(rep, CheckReport)
    assert (rep.ssts, rep.l0, rep.runs) == (3, 2, 1)
    assert rep.rows == 4 + 1 + 2  # the run: a (newest only: no snapshot), b, c, e; L0: c deleted; d, e deleted
    assert rep.manifest_versions >= 1 and rep.manifest_id >= rep.manifest_versions
    assert rep.notes == []
    assert rep.to_dict() == dataclasses.asdict(rep) and rep.to_dict()["ssts"] == 3


def test_check_database_names_the_damaged_file(db_root: str, open_db) -> None:
    build(open_db)
    name = _store.names(db_root, "sst")[0]
    data = bytearray(_store.read(db_root, "sst", name))
    data[5] ^= 0xFF
    _store.write(db_root, "sst", name, bytes(data))
    sst = re.escape(_store.path(db_root, "sst", name))
    with pytest.raises(CheckError, match=f"{sst}: corruption at offset 0: block checksum mismatch") as e:
        check_database(db_root)
    assert isinstance(e.value, lsm.LsmError)


def test_check_database_refuses_what_is_not_a_database(tmp_path: Path) -> None:
    """A directory that exists but holds no database, and one that does not exist: a local distinction
    (an object store's empty prefix is both)."""
    with pytest.raises(lsm.NotADatabaseError, match="no manifest/ directory"):
        check_database(str(tmp_path))
    with pytest.raises(lsm.NotADatabaseError, match="no such file or directory"):
        space_usage(str(tmp_path / "missing"))


def test_space_usage_classifies_every_row_by_level(db_root: str, open_db) -> None:
    build(open_db)
    rep = space_usage(db_root, now=T0 + 4_000)
    assert isinstance(rep, SpaceReport) and rep.at == T0 + 4_000
    assert [x.level for x in rep.levels][:2] == ["wal", "L0"] and rep.levels[2].level.startswith("run ")
    by = {x.level: x for x in rep.levels}
    run = rep.levels[2]

    def rows(x: LevelUsage) -> tuple[int, ...]:
        return tuple(getattr(x, f"{c}_rows") for c in CATEGORIES)

    assert rows(by["wal"]) == (0, 0, 0, 0)  # close() flushed everything
    assert rows(by["L0"]) == (1, 0, 2, 0)  # d live; c and e deleted
    assert rows(run) == (2, 0, 0, 2)  # a and b live; c and e shadowed by the newer deletes
    later = space_usage(db_root, now=T0 + 6_000)
    assert rows(later.levels[2]) == (1, 1, 0, 2)  # b has expired
    total = rep.total
    assert total.level == "total"
    for f in dataclasses.fields(LevelUsage):
        if f.name != "level":
            assert getattr(total, f.name) == sum(getattr(x, f.name) for x in rep.levels)
    _mid, m = latest_manifest(db_root)
    (only,) = m.runs[0].ssts
    assert run.files == 1 and run.size == _store.size(db_root, "sst", only.name)
    fields = [f"{c}_{u}" for c in CATEGORIES for u in ("bytes", "rows")]
    assert list(run.to_dict()) == ["level", "files", "size", *fields]
    assert run.live_bytes > 0 and run.shadowed_bytes > 0 and by["L0"].tombstone_bytes > 0

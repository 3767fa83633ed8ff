"""TTL, tombstones and snapshots through compaction, end to end on a ManualClock.

What is stored is checked by reading every SST file in the database's sst/ directory with
formats.sst.SstReader; what is visible, through get/scan/snapshots. Every test runs on each backend (the
`open_db` fixture).
"""

from __future__ import annotations

import pytest

import lsm
from formats.row import RowFeature
from storage.ssts import open_sst
from tests import _store
from tests.conftest import T0


@pytest.fixture
def clock():
    return lsm.ManualClock(T0)


def files(db):
    """{file name: [rows]} of every SST file on disk."""
    out = {}
    for name in _store.names(db.path, "sst"):
        with open_sst(db.sst_path(name)) as r:
            out[name] = list(r)
    return out


def rows_of(db, key):
    return sorted((r for rows in files(db).values() for r in rows if r[0] == key), key=lambda r: -r[1])


def build_oldest_run(db, n=400):
    """A big oldest run without TTL rows, so size-tiered jobs over L0 leave it out (not last run)."""
    for i in range(n):
        db.put(b"base%04d" % i, b"b" * 50)
    db.flush()
    db.compact(full=True)
    assert len(db.manifest.runs) == 1


def two_l0_ssts(db, writes):
    """Apply `writes` then flush, and flush one more small SST: L0 reaches a threshold of 2."""
    for w in writes:
        w()
    db.flush()
    db.put(b"zz-filler", b"f")
    db.flush()
    assert len(db.manifest.l0) == 2


# -- TTL ------------------------------------------------------------------------------------------------


def test_expired_rows_invisible_at_once_and_gone_from_disk_after_compaction_into_oldest_run(open_db, clock):
    with open_db(clock) as db:
        for i in range(50):
            db.put(b"s%02d" % i, b"session", ttl=30_000)
            db.put(b"p%02d" % i, b"permanent")
        db.flush()
        clock.advance(30_000)  # now == expire_ts: still visible
        assert db.get(b"s07") == b"session"
        db.compact(full=True)
        assert len(rows_of(db, b"s07")) == 1  # not expired at the tick: kept
        clock.advance(1)
        # invisible to every read path right away, though still on disk
        assert db.get(b"s07") is None
        assert db.get_entry(b"s07") is None
        assert [k for k, _ in db.scan(prefix=b"s")] == []
        assert len(list(db.scan())) == 50
        assert len([r for rows in files(db).values() for r in rows if r[0].startswith(b"s")]) == 50
        entry = db.get_entry(b"s07", lsm.ReadOptions(include_expired=True))
        assert entry.value == b"session" and entry.expire_ts == T0 + 30_000
        stats = db.compact(full=True)
        on_disk = [r for rows in files(db).values() for r in rows]
        assert not [r for r in on_disk if r[0].startswith(b"s")]
        assert len(on_disk) == 50
        assert stats.filters["ttl"].removed == 50
        assert stats.tombstones_dropped == 50  # TTL tombstones into the oldest run are dropped too
        assert db.get_entry(b"s07", lsm.ReadOptions(include_expired=True)) is None
    with open_db(clock) as db:
        assert db.get(b"s07") is None and db.get(b"p07") == b"permanent"


def test_scheduled_l0_job_with_nothing_beneath_purges_expired_rows(open_db, clock):
    with open_db(clock, l0_compaction_threshold=2, default_ttl=1_000) as db:
        db.put(b"a", b"1")
        db.flush()
        db.put(b"b", b"2", ttl=lsm.NO_TTL)
        db.flush()
        clock.advance(1_001)
        db.compact()
        assert db.manifest.l0 == () and len(db.manifest.runs) == 1
        assert [r[0] for rows in files(db).values() for r in rows] == [b"b"]


def test_expired_row_becomes_tombstone_keeping_ts_when_not_into_oldest_run(open_db, clock):
    with open_db(clock, l0_compaction_threshold=2) as db:
        build_oldest_run(db)
        db.put(b"base0007", b"old value without ttl")  # an older version below would resurface
        db.flush()
        db.compact(full=True)
        clock.advance(100)
        written = clock.now()
        seq = db.put(b"base0007", b"short-lived", ttl=500)
        two_l0_ssts(db, [])
        clock.advance(501)
        assert db.get(b"base0007") is None
        stats = db.compact()
        assert stats.jobs == 1 and len(db.manifest.runs) == 2  # L0 became a new run above the old one
        new_run = db.manifest.runs[0]
        rows = []
        for e in new_run.ssts:
            with open_sst(db.sst_path(e.name)) as r:
                rows += [row for row in r if row[0] == b"base0007"]
                if rows:
                    assert r.info.num_tombstones >= 1
        # (key, seq, ts, expire_ts, value): same seq, ts and expire_ts (kept for the purge lag), no value
        assert rows == [(b"base0007", seq, written, written + 500, None)]
        assert db.get(b"base0007") is None  # the tombstone hides the old value in the oldest run
        assert db.get(b"base0007", lsm.ReadOptions(include_expired=True)) is None
        db.compact(full=True)
        assert rows_of(db, b"base0007") == []


def test_ttl_tombstone_output_sst_metadata(open_db, clock):
    """An output whose only expiring row became a tombstone counts it as a tombstone that still carries
    its expire_ts (kept so the purge lag is measured from the expiry), and no live TTL row."""
    with open_db(clock, l0_compaction_threshold=2) as db:
        build_oldest_run(db)
        written = clock.now()
        two_l0_ssts(db, [lambda: db.put(b"t", b"x", ttl=10)])
        clock.advance(11)
        db.compact()
        info = db.manifest.runs[0].ssts[0].info
        assert info.num_expiring == 1 and info.num_tombstones == 1
        assert info.min_expire_ts == info.max_expire_ts == written + 10
        assert RowFeature.Timestamp in info.row_features


def test_overwrite_without_ttl_survives_the_old_expiry(open_db, clock):
    with open_db(clock, default_ttl=1_000) as db:
        db.put(b"k", b"temporary")
        db.flush()
        db.put(b"k", b"forever", ttl=lsm.NO_TTL)
        db.flush()
        clock.advance(5_000)
        db.compact(full=True)
        assert db.get(b"k") == b"forever"
        assert rows_of(db, b"k")[0][3] is None


def test_history_retention_keeps_rows_that_expired_inside_the_window(open_db, clock):
    with open_db(clock, history_retention=10_000) as db:
        db.put(b"k", b"v", ttl=100)
        db.flush()
        clock.advance(200)
        assert db.get(b"k") is None
        db.compact(full=True)
        assert len(rows_of(db, b"k")) == 1  # expired after the cutoff: as-of reads still need it
        clock.advance(10_000)
        db.compact(full=True)
        assert rows_of(db, b"k") == []


# -- tombstones ------------------------------------------------------------------------------------------


def test_tombstones_survive_compactions_above_the_oldest_run_and_go_in_one_into_it(open_db, clock):
    with open_db(clock, l0_compaction_threshold=2) as db:
        build_oldest_run(db)
        seqs = {}
        two_l0_ssts(db, [lambda k=k: seqs.setdefault(k, db.delete(k)) for k in (b"base0001", b"base0002")])
        assert db.get(b"base0001") is None
        stats = db.compact()
        assert len(db.manifest.runs) == 2 and db.manifest.l0 == ()
        assert stats.tombstones_dropped == 0
        for k in (b"base0001", b"base0002"):
            rows = rows_of(db, k)
            assert [(r[1], r[4]) for r in rows][0] == (seqs[k], None)  # the tombstone, in the new run
            assert rows[1][4] == b"b" * 50  # the value it shadows, in the oldest run
            assert db.get(k) is None
        assert len(list(db.scan(prefix=b"base"))) == 398
        stats = db.compact(full=True)
        assert stats.tombstones_dropped == 2
        assert rows_of(db, b"base0001") == [] and rows_of(db, b"base0002") == []
        assert len(db.manifest.runs) == 1
        assert all(r[4] is not None for rows in files(db).values() for r in rows)
        assert len(list(db.scan(prefix=b"base"))) == 398


# -- snapshots --------------------------------------------------------------------------------------------


def test_snapshot_keeps_old_versions_until_released(open_db, clock):
    with open_db(clock, l0_compaction_threshold=2) as db:
        db.put(b"k", b"v1")
        db.put(b"gone", b"here")
        db.flush()
        snap = db.snapshot()
        db.put(b"k", b"v2")
        db.delete(b"gone")
        db.flush()
        for full in (False, True, True):  # scheduled and full compactions, repeatedly
            db.compact(full=full)
            assert [r[4] for r in rows_of(db, b"k")] == [b"v2", b"v1"]
            assert [r[4] for r in rows_of(db, b"gone")] == [None, b"here"]
            assert snap.get(b"k") == b"v1" and snap.get(b"gone") == b"here"
            assert dict(snap.scan()) == {b"k": b"v1", b"gone": b"here"}
            assert db.get(b"k") == b"v2" and db.get(b"gone") is None
        snap.close()
        db.compact(full=True)
        assert [r[4] for r in rows_of(db, b"k")] == [b"v2"]
        assert rows_of(db, b"gone") == []
        assert dict(db.scan()) == {b"k": b"v2"}


def test_snapshot_reads_stay_correct_across_many_compactions(open_db, clock):
    with open_db(clock, l0_compaction_threshold=2) as db:
        model = {}
        snaps = []
        for round_ in range(6):
            for i in range(round_, 40, 3):
                k = b"k%02d" % i
                if (i + round_) % 4 == 0:
                    db.delete(k)
                    model.pop(k, None)
                else:
                    v = b"r%d" % round_
                    db.put(k, v)
                    model[k] = v
            snaps.append((db.snapshot(), dict(model)))
            db.flush()
            db.compact(full=round_ % 3 == 2)
            for s, expect in snaps:
                assert dict(s.scan()) == expect
                assert all(s.get(k) == expect.get(k) for k in (b"k%02d" % i for i in range(40)))
            assert dict(db.scan()) == model
        for s, _ in snaps:
            s.close()
        db.compact(full=True)
        assert dict(db.scan()) == model
        assert len([r for rows in files(db).values() for r in rows]) == len(model)


def test_expired_version_pinned_by_no_one_is_dropped_despite_a_snapshot(open_db, clock):
    """9:b 5:E [7] into the oldest run -> 9:b: an expired row is invisible to the snapshot too."""
    with open_db(clock) as db:
        db.put(b"k", b"short", ttl=10)
        snap = db.snapshot()
        db.put(b"k", b"b")
        db.flush()
        clock.advance(11)
        assert snap.get(b"k") is None
        db.compact(full=True)
        assert [r[4] for r in rows_of(db, b"k")] == [b"b"]
        assert snap.get(b"k") is None and db.get(b"k") == b"b"
        snap.close()

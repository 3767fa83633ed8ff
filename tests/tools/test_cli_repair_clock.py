"""`lsm repair-clock PATH [--to TIME]` through the real entry point: a store bricked by a far-future
watermark writes again afterwards, and bad input is one line with exit 2 (issue 24 defect 5)."""

from __future__ import annotations

import time

import lsm
from lsm.inspect import check_database
from tests.lsm.test_clock import FixedClock
from tests.tools._cli import one_line_error, run_lsm

YEAR_10000 = 253_402_300_800_000


def _bricked(path) -> int:
    """A store with a row stamped in year 10000 (written with the skew guard off); returns 'now'."""
    now = time.time_ns() // 1_000_000
    clock = FixedClock(now)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, max_clock_skew_ms=None, background_compaction=False)) as db:
        db.put(b"a", b"1")
        clock.ms = YEAR_10000
        db.put(b"far", b"2")
    return now


def test_repair_clock_unbricks_a_store(tmp_path):
    path = tmp_path / "db"
    now = _bricked(path)
    with lsm.DB.open(path) as db:
        try:
            db.put(b"x", b"y")
            raise AssertionError("the store was not bricked")
        except lsm.ClockError:
            pass
    to = now + 5
    r = run_lsm("repair-clock", path, "--to", str(to), "--json")
    assert r.code == 0, r.err
    out = r.json()
    after = out.pop("watermark_after")
    assert out == {"path": str(path), "repaired": True, "watermark_before": YEAR_10000, "rows_moved": 1,
                   "rows_forced": 0}
    assert to <= after <= time.time_ns() // 1_000_000  # the repair time, or the clock's now if later
    with lsm.DB.open(path) as db:
        assert db.get_entry(b"far").ts == to and db.get(b"a") == b"1"
        db.put(b"x", b"y")  # writes again
    check_database(str(path))
    again = run_lsm("repair-clock", path)
    assert again.code == 0 and "nothing to repair" in again.out


def test_repair_clock_bad_input(tmp_path):
    assert "no" in one_line_error(run_lsm("repair-clock", tmp_path / "missing"), 2)
    _bricked(tmp_path / "db")
    assert "--to" in one_line_error(run_lsm("repair-clock", tmp_path / "db", "--to", "2024-01-01T00:00:00"), 2)
    with lsm.DB.open(tmp_path / "db", read_only=True) as db:
        assert db.manifest.clock_watermark == YEAR_10000  # nothing changed


def _bricked_with_a_legit_row(path) -> int:
    """`_bricked`, with the row committed now given two days of TTL; returns 'now'."""
    now = time.time_ns() // 1_000_000
    clock = FixedClock(now)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, max_clock_skew_ms=None, background_compaction=False)) as db:
        db.put(b"a", b"1", ttl=2 * 86_400_000)
        clock.ms = YEAR_10000
        db.put(b"far", b"2")
    return now


def test_repair_clock_refuses_a_time_before_a_legitimate_row_and_fences_nobody(tmp_path):
    """Issue 32 defect 7: --to 0 gave the row committed now (two days of TTL left) an expiry in 1970 and
    the repair's compaction dropped it; --to -1 stamped rows in 1969. Both are refused, from a read-only
    look: a writer that had the store open goes on writing."""
    path = tmp_path / "db"
    now = _bricked_with_a_legit_row(path)
    writer = lsm.DB.open(path, lsm.DbOptions(clock=FixedClock(YEAR_10000 + 5), max_clock_skew_ms=None,
                                             background_compaction=False))
    try:
        line = one_line_error(run_lsm("repair-clock", path, "--to", "0"), 2)
        assert "1 row(s) committed within the skew guard" in line and "would expire at once" in line
        assert f"give a time at or after {now} ms" in line and "--force" in line
        for bad in (("--to", "-1"), ("--to", "-1", "--force")):
            assert "before 1970" in one_line_error(run_lsm("repair-clock", path, *bad), 2)
        writer.put(b"w", b"3")  # not fenced
    finally:
        writer.close()
    with lsm.DB.open(path, read_only=True) as db:
        assert db.manifest.clock_watermark == YEAR_10000 + 5
        every = lsm.ReadOptions(include_expired=True)
        assert db.get_entry(b"a", every).expire_ts == now + 2 * 86_400_000
    # forced: the row moves, and the output says so
    r = run_lsm("repair-clock", path, "--to", str(now - 1000), "--force")
    assert r.code == 0 and "(1 of them committed within the skew guard, moved by --force)" in r.out, r.out
    with lsm.DB.open(path, read_only=True) as db:
        assert db.get_entry(b"a").expire_ts == now - 1000 + 2 * 86_400_000


def test_repair_clock_with_nothing_to_repair_fences_nobody(tmp_path):
    path = tmp_path / "db"
    writer = lsm.DB.open(path, lsm.DbOptions(background_compaction=False))
    try:
        writer.put(b"a", b"1")
        r = run_lsm("repair-clock", path, "--json")
        assert r.code == 0 and r.json()["repaired"] is False and r.json()["rows_moved"] == 0
        assert "nothing to repair" in run_lsm("repair-clock", path).out
        writer.put(b"b", b"2")  # the look was read-only: not fenced
    finally:
        writer.close()

"""`lsm put` and `lsm delete`: one commit through the engine, writable (fencing), never creating a
database at a mistyped path unless --create."""

from __future__ import annotations

from pathlib import Path

import pytest

import lsm
from tests.tools._cli import T0, one_line_error, run_lsm


def _entries(path: Path) -> dict[bytes, lsm.Entry]:
    with lsm.DB.open(path, read_only=True) as db:
        return {e.key: e for e in db.scan_entries(options=lsm.ReadOptions(include_expired=True))}


def test_put_and_delete_write_through_the_engine(tmp_path: Path) -> None:
    db = tmp_path / "db"
    r = run_lsm("put", "--create", db, "user:1", "alice")
    assert r.code == 0 and r.err == "", r.err
    assert r.out.startswith("put user:1 at seq 1 (ts ") and "expires" not in r.out
    r = run_lsm("put", "--json", db, "s", "tok", "--ttl", 60_000)
    d = r.json()
    assert (d["op"], d["key"], d["value"], d["seq"]) == ("put", "s", "tok", 2)
    assert d["expire_ts"] == d["ts"] + 60_000
    r = run_lsm("put", "--hex", "--json", db, "0x00ff", "0a0d00")  # NUL, 0xFF, CR, LF: any bytes in hex
    assert r.json()["key"] == "00ff" and r.json()["key_hex"] is True
    rows = _entries(db)
    assert rows[b"user:1"].value == b"alice" and rows[b"\x00\xff"].value == b"\n\r\x00"
    assert rows[b"s"].expire_ts == d["expire_ts"]
    r = run_lsm("delete", db, "user:1")
    assert r.out == "deleted user:1 at seq 4 (it had a visible value)\n"
    r = run_lsm("delete", "--json", db, "nobody")
    assert r.json() == {"op": "delete", "key": "nobody", "seq": 5, "had_value": False}
    assert b"user:1" not in _entries(db)
    assert run_lsm("get", db, "user:1").code == 1


def test_put_fences_a_running_writer(tmp_path: Path) -> None:
    path = tmp_path / "db"
    writer = lsm.DB.open(path, lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False))
    writer.put(b"a", b"1")
    try:
        assert run_lsm("put", path, "b", "2").code == 0
        with pytest.raises(lsm.FencedError):
            writer.put(b"c", b"3")
    finally:
        writer.close()
    rows = _entries(path)
    assert rows[b"a"].value == b"1" and rows[b"b"].value == b"2" and b"c" not in rows


@pytest.mark.parametrize("cmd", [("put", "{p}", "k", "v"), ("delete", "{p}", "k")])
def test_no_database_is_created_without_create(tmp_path: Path, cmd) -> None:
    missing = tmp_path / "typo"
    line = one_line_error(run_lsm(*(a.format(p=missing) for a in cmd)), 2)
    assert (
        line == f"lsm: error: {missing}: no such file or directory (give --create to create a database there)"
    )
    assert not missing.exists()
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "README").write_text("hello")
    assert "not an lsm-sim database" in one_line_error(run_lsm(*(a.format(p=stray) for a in cmd)), 2)
    assert "holds no lsm-sim database" in one_line_error(
        run_lsm(*(a.format(p=stray) for a in cmd), "--create"), 2
    )
    assert sorted(p.name for p in stray.iterdir()) == ["README"]


def test_bad_keys_and_values_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    db = tmp_path / "db"
    assert run_lsm("put", "--create", db, "k", "v").code == 0
    cases = [
        (("put", "--hex", db, "zz", "00"), "KEY 'zz' is not hex"),
        (("put", "--hex", db, "00", "0x0g"), "VALUE '0x0g' is not hex"),
        (("delete", "--hex", db, "abc"), "KEY 'abc' is not hex"),
        (("put", db, "", "v"), "key must be 1..65535 bytes long"),
        (("put", db, "k", "v", "--ttl", "-5"), "argument --ttl: '-5' is negative"),
    ]
    for args, message in cases:
        assert message in one_line_error(run_lsm(*args), 2), args
    assert list(_entries(db)) == [b"k"]
    with lsm.DB.open(db, read_only=True) as d:
        assert d.seq == 1


def test_help_says_the_commands_write(tmp_path: Path) -> None:
    for cmd in ("put", "delete"):
        text = " ".join(run_lsm(cmd, "--help").out.split())
        assert "WRITABLE" in text and "fenced" in text and "--create" in text

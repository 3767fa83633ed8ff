"""`lsm scan --all-versions` (RocksDB's `ldb idump`): every stored version, from `lsm.inspect.stored_versions`."""

from __future__ import annotations

from pathlib import Path

import lsm
from lsm.history import open_view
from lsm.inspect import stored_versions
from tests.tools._cli import T0, build_runs_db, one_line_error, run_lsm

# build_runs_db: the WAL (z deleted at seq 22), L0 (sst 4), run 2 (ssts 2, 3), run 1 (sst 1)
EXPECTED = [
    ("a", 5, "run 2"),
    ("a", 1, "run 1"),
    ("b", 20, "L0"),
    ("b", 2, "run 1"),
    ("c", 6, "run 2"),
    ("c", 3, "run 1"),
    ("d", 21, "L0"),
    ("d", 11, "run 2"),
    ("e", 12, "run 2"),
    ("f", 13, "run 2"),
    ("z", 22, "wal"),
    ("z", 4, "run 1"),
]


def test_every_version_of_every_level_newest_first(tmp_path: Path) -> None:
    db = tmp_path / "db"
    build_runs_db(db)
    r = run_lsm("scan", "--all-versions", "--json", db)
    assert r.code == 0, r.err
    rows = r.json()
    assert [(x["key"], x["seq"], x["level"]) for x in rows] == EXPECTED
    by = {(x["key"], x["seq"]): x for x in rows}
    assert by[("c", 6)] == {
        "key": "c",
        "seq": 6,
        "ts": T0 + 6,
        "expire_ts": None,
        "flags": 1,
        "value": None,
        "level": "run 2",
    }
    assert (
        by[("c", 3)]["flags"] == 2 and by[("c", 3)]["expire_ts"] == T0 + 100 and by[("c", 3)]["value"] == "c1"
    )
    assert by[("z", 22)]["flags"] == 1 and by[("z", 22)]["ts"] == T0 + 40
    # the table: flags by name, the level of each version
    lines = run_lsm("scan", "--all-versions", db, "--from", "c", "--to", "d").out.splitlines()
    assert lines[0].split() == ["level", "key", "seq", "ts", "expire_ts", "flags", "value"]
    assert lines[1].split() == ["run", "2", "c", "6", "2023-11-14T22:13:20.006Z", "-", "TOMBSTONE", "-"]
    assert lines[2].split() == [
        "run",
        "1",
        "c",
        "3",
        "2023-11-14T22:13:20.003Z",
        "2023-11-14T22:13:20.100Z",
        "HAS_EXPIRE_TS",
        "c1",
    ]
    r = run_lsm("scan", "--all-versions", "--json", "--prefix", "7a", "--hex", db)
    assert [(x["key"], x["seq"]) for x in r.json()] == [("7a", 22), ("7a", 4)]
    r = run_lsm("scan", "--all-versions", "--json", "--limit", "3", db)
    assert [(x["key"], x["seq"]) for x in r.json()] == [("a", 5), ("a", 1), ("b", 20)]


def test_the_same_versions_the_history_view_holds(tmp_path: Path) -> None:
    """Through the engine: an overwritten key, a delete and a TTL, in SSTs and in the unflushed WAL."""
    path = tmp_path / "db"
    clock = lsm.ManualClock(T0)
    db = lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False))
    db.put(b"k", b"1")
    db.put(b"\x00\xff", b"bin", ttl=5)
    db.flush()
    db.put(b"k", b"2")
    db.delete(b"\x00\xff")  # left in the WAL: the handle is not closed
    got = list(stored_versions(str(path)))
    with open_view(path) as view:
        want = sorted(view.versions(0), key=lambda row: (row[0], -row[1]))
    assert [row[:5] for row in got] == want
    assert [row[5] for row in got] == ["wal", "L0", "wal", "L0"]
    assert list(stored_versions(str(path), b"k")) == [got[2], got[3]]
    db.close()  # only now: until here the rows stayed in the WAL, as after a crash


def test_all_versions_takes_no_read_options(tmp_path: Path) -> None:
    db = tmp_path / "db"
    build_runs_db(db)
    for opt in (
        ["--as-of", str(T0)],
        ["--seq", "3"],
        ["--reverse"],
        ["--include-expired"],
        ["--expiry-at", "0"],
    ):
        line = one_line_error(run_lsm("scan", "--all-versions", db, *opt), 2)
        assert line == f"lsm: error: --all-versions shows every stored version as it is; it takes no {opt[0]}"
    line = one_line_error(run_lsm("scan", "--all-versions", tmp_path / "nope"), 2)
    assert line == f"lsm: error: {tmp_path / 'nope'}: no such file or directory"

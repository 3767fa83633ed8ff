"""`lsm get|scan|check|du` on whole databases: read-only reads, the checks, space accounting."""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import lsm
from lsm.manifest import ManifestStore
from tests.tools._cli import T0, build_db, build_runs_db, one_line_error, run_lsm, write_manifest


# -- get / scan -------------------------------------------------------------------------------------------
def test_scan_json_reads_through_the_engine(small_db: Path) -> None:
    r = run_lsm("scan", "--json", "--expiry-at", T0 + 5_000, small_db)
    assert r.code == 0, r.err
    assert r.json() == [
        {"key": "k1", "value": "v1-new", "seq": 8, "ts": T0 + 2_000, "expire_ts": None},  # from the WAL
        {"key": "k2", "value": "v2-new", "seq": 5, "ts": T0 + 1_000, "expire_ts": None},
        {"key": "k3", "value": "v3", "seq": 3, "ts": T0, "expire_ts": T0 + 10_000},
        {"key": "k5", "value": "v5", "seq": 7, "ts": T0 + 2_000, "expire_ts": None},
    ]  # k4 is deleted
    # without --at the database clock (system time, years after T0) has expired k3
    assert [x["key"] for x in run_lsm("scan", "--json", small_db).json()] == ["k1", "k2", "k5"]
    r = run_lsm("scan", "--json", "--include-expired", "--reverse", "--limit", "2", "--from", "k2", small_db)
    assert [x["key"] for x in r.json()] == ["k5", "k3"]
    r = run_lsm("scan", "--json", "--prefix", "k1", small_db)
    assert [x["key"] for x in r.json()] == ["k1"]
    assert run_lsm("scan", "--json", "--from", "k3", "--to", "k3", small_db).json() == []


def test_scan_and_get_tables(small_db: Path) -> None:
    r = run_lsm("scan", "--expiry-at", "2023-11-14T22:13:25Z", small_db)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["key", "seq", "ts", "expire_ts", "value"]
    assert lines[1].split() == ["k1", "8", "2023-11-14T22:13:22.000Z", "-", "v1-new"]
    assert lines[3].split() == ["k3", "3", "2023-11-14T22:13:20.000Z", "2023-11-14T22:13:30.000Z", "v3"]
    r = run_lsm("get", small_db, "k2")
    assert r.code == 0, r.err
    assert r.out.splitlines() == [
        "key        k2",
        "value      v2-new",
        "seq        5",
        "ts         2023-11-14T22:13:21.000Z (1700000001000)",
        "expire_ts  -",
    ]


def test_get_json_expiry_and_not_found(small_db: Path) -> None:
    r = run_lsm("get", "--json", "--expiry-at", T0 + 10_000, small_db, "k3")  # visible at now == expire_ts
    assert r.code == 0 and r.json() == {
        "key": "k3",
        "value": "v3",
        "seq": 3,
        "ts": T0,
        "expire_ts": T0 + 10_000,
    }
    r = run_lsm("get", "--json", "--expiry-at", T0 + 10_001, small_db, "k3")
    assert one_line_error(r, 1) == "lsm: error: key k3 not found (absent, deleted or expired)"
    assert r.out == "null\n"
    assert run_lsm("get", "--include-expired", small_db, "k3").code == 0
    assert one_line_error(run_lsm("get", small_db, "k4"), 1).endswith(
        "key k4 not found (absent, deleted or expired)"
    )
    r = run_lsm("get", "--json", "--hex", small_db, "6b31")  # --hex: the key argument is hex too
    assert r.json()["key"] == "6b31" and r.json()["key_hex"] is True and r.json()["value"] == "76312d6e6577"


def test_read_only_commands_do_not_fence_a_running_writer(tmp_path: Path) -> None:
    clock = lsm.ManualClock(T0)
    path = tmp_path / "db"
    db = build_db(path, clock)
    try:
        store = ManifestStore(str(path))
        ids_before = store.ids()
        epoch_before = (path / "manifest" / "WRITER_EPOCH").read_bytes()
        assert run_lsm("get", path, "k5").code == 0
        assert [x["key"] for x in run_lsm("scan", "--json", path).json()] == ["k1", "k2", "k5"]
        assert run_lsm("check", path).code == 0
        # the CLI published no manifest version and did not bump the writer epoch ...
        assert store.ids() == ids_before
        assert (path / "manifest" / "WRITER_EPOCH").read_bytes() == epoch_before
        # ... so the writer goes on writing and flushing, and a new reader sees it
        db.put(b"after", b"still writing")
        db.flush()
        db.put(b"after2", b"and again")
    finally:
        db.close()
    r = run_lsm("get", "--json", path, "after2")
    assert r.code == 0 and r.json()["value"] == "and again"


# -- check ------------------------------------------------------------------------------------------------
def test_check_ok_table_and_json(small_db: Path, tmp_path: Path) -> None:
    r = run_lsm("check", small_db)
    assert r.code == 0, r.err
    assert r.out.splitlines()[-1] == "OK"
    assert r.out.splitlines()[1].startswith("ssts      2 verified (6 rows")
    db = tmp_path / "runs"
    build_runs_db(db)
    r = run_lsm("check", "--json", db)
    assert r.code == 0, r.err
    d = r.json()
    assert d["ok"] is True
    assert (d["ssts"], d["rows"], d["l0"], d["runs"], d["wal_records"], d["notes"]) == (4, 11, 1, 2, 1, [])


def test_check_finds_problems(tmp_path: Path) -> None:
    db = tmp_path / "db"
    entries = build_runs_db(db)
    names = sorted(entries)
    m = ManifestStore(str(db)).read(1)
    run2, run1 = m.runs

    # runs read in the wrong order: the older run would hide the newer one's values
    write_manifest(db, runs=(run1, run2))
    line = one_line_error(run_lsm("check", db), 1)
    assert (
        "run 1 (seq 1-4) is read before run 2 (seq 5-13)" in line and "does not hold only newer seqs" in line
    )

    # a run whose SSTs are out of key order
    write_manifest(db, runs=(dataclasses.replace(run2, ssts=run2.ssts[::-1]), run1))
    line = one_line_error(run_lsm("check", db), 1)
    assert f"run 2: {names[2]} and {names[1]} overlap or are out of key order" in line

    # the manifest's SsTableInfo disagrees with the file
    bad = dataclasses.replace(m.l0[0], info=dataclasses.replace(m.l0[0].info, num_rows=3))
    write_manifest(db, l0=(bad,), runs=m.runs)
    line = one_line_error(run_lsm("check", db), 1)
    assert line.endswith(f"{names[3]}: SsTableInfo in manifest 4 disagrees with the file: num_rows 3 != 2")

    # a referenced SST is missing
    write_manifest(db, l0=m.l0)
    (db / "sst" / names[0]).unlink()
    line = one_line_error(run_lsm("check", db), 1)
    assert line == f"lsm: error: {db / 'sst' / names[0]}: missing, but manifest 5 lists it in run 1"


def test_check_corrupt_sst_and_torn_wal(small_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "db"
    shutil.copytree(small_db, db)
    seg = sorted((db / "wal").iterdir())[-1]
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x01\x00torn")  # a record header promising more bytes than follow
    r = run_lsm("check", "--json", db)
    assert r.code == 0, r.err
    assert r.json()["notes"] == [f"{seg}: torn tail at offset {seg.stat().st_size - 8} (replay stops there)"]
    sst = sorted((db / "sst").iterdir())[0]
    data = bytearray(sst.read_bytes())
    data[5] ^= 0xFF
    sst.write_bytes(bytes(data))
    line = one_line_error(run_lsm("check", db), 1)
    assert line == f"lsm: error: {sst}: corruption at offset 0: block checksum mismatch"


# -- du ---------------------------------------------------------------------------------------------------
def _by_level(d: dict) -> dict:
    return {x["level"]: x for x in d["levels"]}


def test_du_classifies_rows_by_the_read_path(tmp_path: Path) -> None:
    db = tmp_path / "db"
    build_runs_db(db)
    r = run_lsm("du", "--json", "--expiry-at", T0 + 1_000, db)
    assert r.code == 0, r.err
    d = r.json()
    assert d["at"] == T0 + 1_000 and d["at_rfc3339"] == "2023-11-14T22:13:21.000Z"
    lv = _by_level(d)
    assert list(lv) == ["wal", "L0", "run 2", "run 1"]

    def rows(level: str) -> tuple:
        x = lv[level]
        return (x["live_rows"], x["expired_rows"], x["tombstone_rows"], x["shadowed_rows"])

    assert rows("wal") == (0, 0, 1, 0)  # the delete of z
    assert rows("L0") == (2, 0, 0, 0)  # b@20, d@21
    assert rows("run 2") == (2, 1, 1, 1)  # a, e live; f expired; c tombstone; d@11 shadowed by L0
    assert rows("run 1") == (0, 0, 0, 4)  # every row has a newer version above it
    # an L0 row (flags, ts, seq, value_len + key + value + its u32 offset in the block) is 30 bytes
    assert lv["L0"]["live_bytes"] == 2 * (2 + 1 + 1 + 8 + 8 + 4 + 2 + 4)
    assert lv["L0"]["files"] == 1 and lv["run 2"]["files"] == 2
    assert d["total"]["size"] == sum(x["size"] for x in d["levels"])
    # earlier, f has not expired yet
    early = _by_level(run_lsm("du", "--json", "--expiry-at", "2023-11-14T22:13:20.400Z", db).json())
    assert early["run 2"]["live_rows"] == 3 and early["run 2"]["expired_rows"] == 0


def test_du_table(small_db: Path) -> None:
    r = run_lsm("du", "--expiry-at", T0, small_db)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == f"expiry judged at 2023-11-14T22:13:20.000Z ({T0})"
    assert lines[1].split() == [
        "level",
        "files",
        "size",
        "live",
        "(rows)",
        "expired",
        "(rows)",
        "tombstone",
        "(rows)",
        "shadowed",
        "(rows)",
    ]
    assert [ln.split()[0] for ln in lines[2:-1]] == ["wal", "L0", "total"]
    assert lines[-1] == "purge lag: nothing purged yet"
    counts = [[int(n) for n in re.findall(r"\((\d+)\)", ln)] for ln in lines[2:-1]]
    # wal: k1@8, k5 live. L0: k2@5, k3 live; k4@6 tombstone; k1@1 (under the WAL), k2@2, k4@4 shadowed
    assert counts == [[2, 0, 0, 0], [2, 0, 1, 3], [4, 0, 1, 3]]
    assert one_line_error(run_lsm("du", "--expiry-at", "yesterday", small_db), 2).startswith(
        "lsm: error: du: argument --expiry-at"
    )


# -- bad input --------------------------------------------------------------------------------------------
def test_bad_database_paths(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    for cmd in (["check"], ["wal", "dump"]):
        assert (
            one_line_error(run_lsm(*cmd, missing), 2) == f"lsm: error: {missing}: no such file or directory"
        )
    assert (
        one_line_error(run_lsm("get", missing, "k"), 2) == f"lsm: error: {missing}: no such file or directory"
    )
    line = one_line_error(run_lsm("check", tmp_path), 2)
    assert line == f"lsm: error: {tmp_path}: not an lsm-sim database (no manifest/ directory)"
    f = tmp_path / "file"
    f.write_text("x")
    assert one_line_error(run_lsm("scan", f), 2) == f"lsm: error: {f}: is a file, not a database directory"
    (tmp_path / "empty" / "manifest").mkdir(parents=True)
    assert "not an lsm-sim database" in one_line_error(run_lsm("scan", tmp_path / "empty"), 2)


def test_bad_numbers_and_times_are_usage_errors(small_db: Path) -> None:
    """--limit is checked by its argparse type; a time without an offset is refused, not taken as UTC."""
    for cmd in (("scan", small_db), ("sst", "scan", sorted((small_db / "sst").iterdir())[0])):
        r = run_lsm(*cmd, "--limit", "-1")
        assert r.code == 2 and "argument --limit: '-1' is negative" in r.err, r.err
    r = run_lsm("du", "--expiry-at", "2023-11-14T22:13:20", small_db)
    assert r.code == 2 and "needs a zone: add Z (UTC) or an offset" in r.err, r.err
    assert run_lsm("du", "--json", "--expiry-at", "2023-11-14T23:13:20+01:00", small_db).json()["at"] == T0


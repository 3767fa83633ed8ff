"""`lsm manifest show|list` and `lsm wal dump`; the `bench` forwarding; the top-level parser."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.tools._cli import T0, build_runs_db, one_line_error, run_lsm


def test_manifest_show_json_and_table(tmp_path: Path) -> None:
    db = tmp_path / "db"
    entries = build_runs_db(db)
    r = run_lsm("manifest", "show", "--json", db)
    assert r.code == 0, r.err
    d = r.json()
    assert (d["id"], d["last_seq"], d["wal_replay_from"], d["next_sst_id"]) == (1, 21, 1, 5)
    assert d["clock_watermark"] == T0 + 30 and d["clock_watermark_rfc3339"] == "2023-11-14T22:13:20.030Z"
    assert [e["name"] for e in d["l0"]] == ["00000000000000000004-0000.sst"]
    assert [(r["id"], [e["name"] for e in r["ssts"]]) for r in d["runs"]] == [
        (2, ["00000000000000000002-0000.sst", "00000000000000000003-0000.sst"]),
        (1, ["00000000000000000001-0000.sst"]),
    ]
    info = d["runs"][0]["ssts"][1]["info"]
    assert (info["first_key"], info["last_key"], info["min_seq"], info["max_seq"]) == ("d", "f", 11, 13)
    assert info["file_size"] == entries["00000000000000000003-0000.sst"].info.file_size
    assert d["seq_tracker_size"] == 0 and "seq_tracker" not in d

    lines = run_lsm("manifest", "show", db).out.splitlines()
    assert lines[0] == f"manifest         {db / 'manifest' / ('0' * 19 + '1.manifest')} (id 1)"
    assert "clock_watermark  2023-11-14T22:13:20.030Z (1700000000030)" in lines
    summary = lines[lines.index("") + 1 :]
    assert summary[0].split() == ["level", "ssts", "size", "rows", "first_key", "last_key", "seq"]
    assert summary[1].split()[:2] == ["L0", "1"] and summary[1].split()[-3:] == ["b", "d", "20-21"]
    assert summary[2].split()[:3] == ["run", "2", "2"] and summary[2].split()[-3:] == ["a", "f", "5-13"]
    assert summary[3].split()[:3] == ["run", "1", "1"]
    sst_lines = [ln for ln in lines if ln.startswith(("L0 ", "run "))]
    assert "00000000000000000004-0000.sst" in sst_lines[-4]  # the SST table lists every SST, L0 first


def test_manifest_list_history_and_versions(small_db: Path) -> None:
    r = run_lsm("manifest", "list", "--json", small_db)
    assert r.code == 0, r.err
    versions = r.json()
    ids = [v["id"] for v in versions]
    assert ids == sorted(ids) and len(ids) >= 3
    assert [v["l0"] for v in versions][-1] == 2 and versions[-1]["last_seq"] == 6
    assert versions[0]["l0"] == 0
    table = run_lsm("manifest", "list", small_db).out.splitlines()
    assert table[0].split()[:4] == ["id", "written", "writer_epoch", "last_seq"]
    assert len(table) == 1 + len(versions)
    # an older version by --id
    older = ids[-2]
    d = run_lsm("manifest", "show", "--json", "--id", older, small_db).json()
    assert d["id"] == older and len(d["l0"]) == 1
    assert "no manifest version 999" in one_line_error(run_lsm("manifest", "show", "--id", 999, small_db), 2)


def test_manifest_corrupt_version(small_db: Path, tmp_path: Path) -> None:
    db = tmp_path / "db"
    shutil.copytree(small_db, db)
    first = sorted((db / "manifest").glob("*.manifest"))[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0x01
    first.write_bytes(bytes(data))
    r = run_lsm("manifest", "list", db)
    line = one_line_error(r, 1)
    assert (
        line.startswith(f"lsm: error: {first}: corruption at offset ")
        and "manifest checksum mismatch" in line
    )
    assert "CORRUPT" in r.out
    assert one_line_error(run_lsm("check", db), 1) == line
    assert run_lsm("scan", db).code == 0  # the newest version is intact: reads still work


def test_wal_dump_json_table_and_torn_tail(small_db: Path, tmp_path: Path) -> None:
    r = run_lsm("wal", "dump", "--json", small_db)
    assert r.code == 0, r.err
    (seg,) = r.json()
    assert seg["torn_offset"] is None
    assert [(x["seq"], x["ts"], x["ops"]) for x in seg["records"]] == [
        (7, T0 + 2_000, [{"op": "put", "key": "k5", "expire_ts": None, "value": "v5"}]),
        (8, T0 + 2_000, [{"op": "put", "key": "k1", "expire_ts": None, "value": "v1-new"}]),
    ]
    assert seg["records"][0]["offset"] == 0 and seg["records"][1]["offset"] > 0

    db = tmp_path / "db"
    shutil.copytree(small_db, db)
    path = Path(seg["path"].replace(str(small_db), str(db)))
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00\x40" + b"\x00" * 10)  # a record cut short
    r = run_lsm("wal", "dump", db)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].split() == ["segment", "offset", "seq", "ts", "op", "key", "expire_ts", "value"]
    assert lines[1].split()[2:] == ["7", "2023-11-14T22:13:22.000Z", "put", "k5", "-", "v5"]
    assert lines[3] == "1 segment, 2 records"
    assert lines[4] == (
        f"segment {seg['segment']}: torn tail at offset {size} (14 bytes): an append cut short; replay stops before it"
    )
    # a single segment file works too, and its JSON reports the torn offset
    (one,) = run_lsm("wal", "dump", "--json", path).json()
    assert one["torn_offset"] == size and len(one["records"]) == 2


def test_top_level_parser_and_bench_forwarding() -> None:
    r = run_lsm("--help")
    assert r.code == 0
    for cmd in ("sst", "manifest", "wal", "get", "scan", "check", "du", "bench"):
        assert cmd in r.out
    # the docs it names exist on this installation, on one line (ci/wheel_check.py: in a wheel's too)
    docs = next(line.removeprefix("Docs: ") for line in r.out.splitlines() if line.startswith("Docs: "))
    assert Path(docs).is_absolute() and Path(docs).name == "cli.md" and Path(docs).is_file(), docs
    assert (
        one_line_error(run_lsm(), 2)
        == "lsm: error: the following arguments are required: COMMAND (see 'lsm --help')"
    )
    # everything after `bench` (even --help) goes to tools.bench.main
    r = run_lsm("bench", "--help")
    assert r.code == 0 and r.out.startswith("usage:"), r.err


def test_manifest_show_and_du_report_the_purge_lag(tmp_path: Path) -> None:
    import lsm

    db_path = tmp_path / "db"
    clock = lsm.ManualClock(T0)
    with lsm.DB.open(db_path, lsm.DbOptions(clock=clock, background_compaction=False)) as db:
        for i in range(3):
            db.put(b"e%d" % i, b"v", ttl=31_000)  # expire_ts = T0 + 31 s
        db.delete(b"d")  # a tombstone at T0
        db.put(b"keep", b"v")
        db.flush()
        clock.set(T0 + 61_000)
        db.compact(full=True)  # lags: 30 s for the expired rows, 61 s for the tombstone
    d = run_lsm("manifest", "show", "--json", db_path).json()
    lag = d["purge_lag"]
    # p50 is the upper edge of 30 s's bucket (28672..32767 ms); max is exact
    assert (lag["count"], lag["p50"], lag["max"]) == (4, 32_767, 61_000) and sum(lag["buckets"].values()) == 4
    lines = run_lsm("manifest", "show", db_path).out.splitlines()
    assert "purge_lag        4 rows purged; p50 32.8 s, p99 61.0 s, max 61.0 s after expiry or delete" in lines
    du = run_lsm("du", "--json", db_path).json()
    assert du["purge_lag"] == lag
    assert run_lsm("du", db_path).out.splitlines()[-1].startswith("purge lag: 4 rows purged; p50 32.8 s")


def test_manifest_without_purges_shows_none(tmp_path: Path) -> None:
    db = tmp_path / "db"
    build_runs_db(db)
    assert run_lsm("manifest", "show", "--json", db).json()["purge_lag"] is None
    assert "purge_lag        nothing purged yet" in run_lsm("manifest", "show", db).out.splitlines()
    assert run_lsm("du", "--json", db).json()["purge_lag"] is None


def test_wal_dump_shows_what_recovery_replays_on_each_backend(shared_root: str) -> None:
    """Issue 32 defect 8: after a flush, the WAL object of an S3 store still holds the flushed records
    (replay skips them by seq); `lsm wal dump` listed them as "1 segment, 10 records" to replay while a
    local store showed 0. Both now show what a reopen replays, and count the rest apart. (`lsm` runs in
    another process, which a memory:// store does not reach.)"""
    db_root = shared_root
    import lsm

    s3 = db_root.startswith("s3://")
    db = lsm.DB.open(db_root, lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False))
    try:
        for i in range(10):
            db.put(b"k%d" % i, b"v")
        db.flush()
        r = run_lsm("wal", "dump", db_root)
        assert r.code == 0, r.err
        tail = r.out.splitlines()[-1]
        assert tail == ("1 segment, 0 records to replay (10 more already in SSTs, which replay skips: --all "
                        "shows them)" if s3 else "1 segment, 0 records")
        segs = run_lsm("wal", "dump", "--json", db_root).json()
        assert [s["records"] for s in segs] == [[]] and [s["flushed_records"] for s in segs] == [10 if s3 else 0]
        assert run_lsm("check", "--json", db_root).json()["wal_records"] == 0
        if s3:
            every = run_lsm("wal", "dump", "--all", "--json", db_root).json()
            assert sorted(r["seq"] for s in every for r in s["records"]) == list(range(1, 11))
        db.put(b"a", b"1", options=lsm.WriteOptions(sync=True))
        db.put(b"b", b"2", options=lsm.WriteOptions(sync=True))
        segs = run_lsm("wal", "dump", "--json", db_root).json()
        assert [r["seq"] for s in segs for r in s["records"]] == [11, 12]
        assert run_lsm("check", "--json", db_root).json()["wal_records"] == 2
        with lsm.DB.open(db_root, read_only=True) as ro:  # what a reopen replays: exactly those two
            assert ro.manifest.last_seq == 10 and ro.seq == 12 and ro.get(b"b") == b"2"
    finally:
        db.close()

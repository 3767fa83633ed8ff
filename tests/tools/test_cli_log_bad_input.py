"""Hostile input to ``lsm log``, ``lsm ingest`` and ``lsm check``: one error line and exit 2 (or a warning),
never a hang, an internal error, a fenced writer or a database directory left behind."""

from __future__ import annotations

import os

import lsm
from lsm.sources import LogWriter
from tests.tools._cli import one_line_error, run_lsm
from tests.tools.test_cli_log import lsm_in

MAX_PARTITION = 2**64 - 1  # the largest partition id a remap binding stores (msgpack uint64)


def _good_log(path) -> None:
    with LogWriter(path) as w:
        w.append(0, b"k", b"v")


def test_a_fifo_partition_fails_show_and_ingest_at_once_and_creates_no_database(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    log.mkdir()
    os.mkfifo(log / "0.log")  # (before the fix both commands blocked here until run_lsm's timeout)
    assert "0.log: a FIFO, not a partition file" in one_line_error(run_lsm("log", "show", log), 2)
    assert "a FIFO" in one_line_error(run_lsm("ingest", db, log, "--name", "s"), 2)
    assert "a FIFO" in one_line_error(run_lsm("ingest", db, log, "--name", "s", "--engine", "local"), 2)
    assert not db.exists()


def test_partition_ids_beyond_64_bits_are_refused_by_write_and_by_ingest(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    big = MAX_PARTITION + 1
    msg = one_line_error(
        lsm_in(f'{{"partition": {big}, "key": "a", "value": "b"}}\n', "log", "write", log), 2
    )
    assert "stdin line 1" in msg and "at most 2**64-1" in msg
    assert not (log / f"{big}.log").exists()
    one_line_error(run_lsm("log", "write", log, "--partition", big), 2)  # (stdin empty: refused anyway)
    _good_log(log)
    (log / f"{big}.log").write_bytes((log / "0.log").read_bytes())  # a stray file under such a name
    assert "partition id beyond 2**64-1" in one_line_error(run_lsm("ingest", db, log, "--name", "s"), 2)
    assert not db.exists()
    assert "partition id beyond" in one_line_error(run_lsm("log", "show", log), 2)


def test_ingest_validates_before_it_opens_the_store(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    _good_log(log)
    (log / "1.log").write_bytes(b"garbage!")  # an unreadable partition
    with lsm.DB.open(db) as writer:  # a live writer: a refused ingest must not fence it
        writer.put(b"a", b"1")
        one_line_error(run_lsm("ingest", db, log, "--name", "s"), 2)
        one_line_error(run_lsm("ingest", db, log, "--name", ""), 2)  # a name the remap cannot store
        writer.put(b"b", b"2")  # still the owner
    assert list(lsm.DB.open(db, read_only=True).scan()) == [(b"a", b"1"), (b"b", b"2")]
    fresh = tmp_path / "fresh"
    one_line_error(run_lsm("ingest", fresh, log, "--name", "s"), 2)
    assert not fresh.exists()


def test_follow_interval_is_bounded(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    _good_log(log)
    for interval in ("100000000000000000000", "3600001"):
        msg = one_line_error(run_lsm("ingest", db, log, "--name", "s", "--follow", "--interval", interval), 2)
        assert "--interval" in msg and "above 3600000" in msg
    assert not db.exists()


def test_a_deeply_nested_json_line_is_one_error_line(tmp_path) -> None:
    line = "[" * 100_000 + "]" * 100_000
    msg = one_line_error(lsm_in(line + "\n", "log", "write", tmp_path / "log"), 2)
    assert "stdin line 1" in msg and "nested too deeply" in msg


def test_log_write_refuses_a_database_and_check_warns_about_foreign_files(tmp_path) -> None:
    db = tmp_path / "db"
    with lsm.DB.open(db) as d:
        d.put(b"a", b"1")
    msg = one_line_error(lsm_in('{"key": "a", "value": "b"}\n', "log", "write", db), 2)
    assert "an lsm-sim database directory, not a partitioned log" in msg
    assert sorted(os.listdir(db)) == ["manifest", "sst", "wal"]
    ok = run_lsm("check", db)
    assert ok.code == 0 and ok.out.endswith("OK\n") and "warning" not in ok.out
    (db / "0.log").write_bytes(b"left here by someone else")
    r = run_lsm("check", db)
    assert r.code == 0 and "warning   1 unexpected entry" in r.out and "0.log" in r.out
    assert r.out.endswith("OK, with 1 warning\n")
    j = run_lsm("check", db, "--json").json()
    assert j["ok"] and len(j["warnings"]) == 1 and "0.log" in j["warnings"][0]


def test_an_ingest_that_fails_before_its_first_commit_leaves_no_new_store(tmp_path) -> None:
    log = tmp_path / "log"
    with LogWriter(log) as w:  # a record the log holds but the store cannot: its expiry overflows
        w.append(0, b"k", b"v", ttl=2**63 - 1)
    for engine in ("stream", "local"):
        db = tmp_path / f"new-{engine}"
        assert "does not fit" in one_line_error(
            run_lsm("ingest", db, log, "--name", "s", "--engine", engine), 2
        )
        assert not db.exists()
    old = tmp_path / "old"  # a store that existed before the run is never removed, even if empty
    lsm.DB.open(old).close()
    one_line_error(run_lsm("ingest", old, log, "--name", "s"), 2)
    assert sorted(os.listdir(old)) == ["manifest", "sst", "wal"]


def test_an_ingest_that_fails_after_committing_keeps_what_it_committed(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    with LogWriter(log) as w:
        for i in range(10):
            w.append(0, b"k%d" % i, b"v")
        w.append(0, b"bad", b"v", ttl=2**63 - 1)
    r = run_lsm("ingest", db, log, "--name", "s", "--batch-records", "5")
    assert r.code == 2 and r.err.splitlines()[-1].startswith("lsm: error: ")  # (after progress lines)
    with lsm.DB.open(db, read_only=True) as d:
        assert len(list(d.scan())) == 10 and d.remap("s").frontier == {0: 10}


def test_log_write_refuses_what_every_ingest_would_refuse(tmp_path) -> None:
    """Issue 32 defect 10: `lsm log write` appended a record with a reserved key (every later ingest then
    failed at its offset) and accepted {"advance": -5}; a nested advance line was an internal error."""
    log = tmp_path / "log"
    _good_log(log)
    deep = "[" * 100_000 + "]" * 100_000
    cases = [
        ('{"key": "ffffffff6c736d0001", "key_hex": true, "value": "x"}', "reserved key space"),
        ('{"key": "k", "value": "v", "ttl": 9223372036854775808}', "does not fit a signed 64-bit"),
        ('{"key": "k", "value": "v", "event_ts": 9223372036854775808}', "does not fit a signed 64-bit"),
        ('{"advance": -5}', "ms since 1970, >= 0"),
        (f'{{"advance": {deep}}}', "nested too deeply"),
    ]
    for line, message in cases:
        err = one_line_error(lsm_in(line + "\n", "log", "write", log), 2)
        assert "stdin line 1" in err and message in err, (line[:60], err)
    assert run_lsm("log", "show", "--json", log).json() == [
        {"partition": 0, "offset": 0, "key": "k", "value": "v", "ttl": None, "event_ts": None, "tx": None,
         "tx_end": False}
    ]  # nothing appended
    assert run_lsm("ingest", tmp_path / "db", log, "--name", "s").code == 0


def test_remap_refuses_the_partition_ids_log_show_refuses(tmp_path) -> None:
    """Issue 32 defect 10: `lsm remap DB ev --partition 2**64` exited 0 where `lsm log show` refuses it."""
    log, db = tmp_path / "log", tmp_path / "db"
    _good_log(log)
    assert run_lsm("ingest", db, log, "--name", "ev").code == 0
    big = str(MAX_PARTITION + 1)
    shown = one_line_error(run_lsm("log", "show", log, "--partition", big), 2)
    remap = one_line_error(run_lsm("remap", db, "ev", "--partition", big), 2)
    assert shown.split("argument --partition: ")[1].split(" (see")[0] == remap.split(
        "argument --partition: ")[1].split(" (see")[0] == f"'{big}' is above {MAX_PARTITION}"
    assert f"partition {big} is above" in one_line_error(run_lsm("remap", db, "ev", "--offset", f"{big}:0"), 2)
    assert run_lsm("remap", db, "ev", "--partition", str(MAX_PARTITION)).code == 0

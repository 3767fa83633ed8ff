"""CLI edges of issue 12 (items 8): huge times, FIFOs and other non-regular files, text files given as
WAL segments, and write commands pointed at a directory that is not a database."""

from __future__ import annotations

import os

import pytest

import lsm
from formats.wal import encode_record
from tests.tools._cli import T0, one_line_error, run_lsm


@pytest.mark.parametrize(
    "args",
    [
        ("ts-to-seq", "{db}", "99999999999999999999999"),
        ("ts-to-seq", "{db}", str(2**63 - 1)),
        ("ts-to-seq", "{db}", str(-(2**70))),
        ("get", "{db}", "k", "--at", str(2**63)),
        ("scan", "{db}", "--at", "99999999999999999999"),
        ("changes", "{db}", "--since", str(2**64)),
    ],
)
def test_huge_times_are_one_line_errors(small_db, args):
    line = one_line_error(run_lsm(*(a.format(db=small_db) for a in args)), 2)
    assert "time" in line and "internal error" not in line


@pytest.mark.parametrize("cmd", [("sst", "show"), ("sst", "scan"), ("sst", "verify"), ("sst", "layout")])
def test_sst_commands_on_a_fifo_fail_without_hanging(tmp_path, cmd):
    fifo = tmp_path / "x.sst"
    os.mkfifo(fifo)
    line = one_line_error(run_lsm(*cmd, fifo), 2)  # run_lsm's 60 s timeout turns a hang into a failure
    assert "not a regular file" in line


def test_sst_show_on_a_device_fails(tmp_path):
    assert "not a regular file" in one_line_error(run_lsm("sst", "show", os.devnull), 2)


def test_wal_dump_on_a_text_file_or_fifo_is_an_error(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("this is not a write-ahead log\n")
    assert "not a WAL segment" in one_line_error(run_lsm("wal", "dump", text), 2)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "not a regular file" in one_line_error(run_lsm("wal", "dump", fifo), 2)
    good = tmp_path / "00000000000000000001.wal"
    good.write_bytes(encode_record(1, T0, [(b"k", None, b"v")]))
    r = run_lsm("wal", "dump", good)
    assert r.code == 0 and "1 record" in r.out, r


@pytest.mark.parametrize("layout", ["empty", "empty manifest dir", "stray file"])
@pytest.mark.parametrize("cmd", [("gc",), ("time-seq", "--reset")])
def test_write_commands_never_create_a_database(tmp_path, layout, cmd):
    d = tmp_path / "notadb"
    d.mkdir()
    if layout == "empty manifest dir":
        (d / "manifest").mkdir()
    elif layout == "stray file":
        (d / "README").write_text("hello")
    before = sorted(p.relative_to(d) for p in d.rglob("*"))
    line = one_line_error(run_lsm(*cmd[:1], d, *cmd[1:]), 2)
    assert "not an lsm-sim database" in line
    assert sorted(p.relative_to(d) for p in d.rglob("*")) == before


def test_gc_and_reset_still_work_on_a_database(tmp_path):
    with lsm.DB.open(tmp_path / "db", lsm.DbOptions(clock=lsm.ManualClock(T0))) as db:
        db.put(b"k", b"v")
    assert run_lsm("gc", tmp_path / "db").code == 0
    assert run_lsm("time-seq", tmp_path / "db", "--reset").code == 0


def test_control_characters_in_an_error_are_escaped(tmp_path) -> None:
    """An error line quotes what it was given (a path, a name from a file): whitespace in it is folded
    into spaces, and an ESC or a BEL, which would reach the terminal as control sequences, is shown as
    an escape."""
    bad = tmp_path / "db\x1b[31m\x07red"
    line = one_line_error(run_lsm("check", bad), 2)
    assert "\x1b" not in line and "\x07" not in line
    assert line == f"lsm: error: {tmp_path}/db\\x1b[31m\\x07red: no such file or directory"

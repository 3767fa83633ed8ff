"""`lsm ingest` and `lsm remap`, run as real subprocesses (and a real SIGINT for --follow)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import lsm
from lsm.sources import LogWriter
from lsm.timeline import parse_time
from tests.tools._cli import LSM_CMD, ROOT, T0, one_line_error, run_lsm
from tests.tools.test_cli_log import lsm_in


def write_log(path, n: int, parts: int = 2, start: int = 0) -> None:
    with LogWriter(path) as w:
        for i in range(start, start + n):
            w.append(i % parts, b"k%04d" % i, b"v%d" % i)


def test_ingest_then_remap(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    write_log(log, 25)
    r = run_lsm("ingest", db, log, "--name", "ev", "--batch-records", "10", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert out["records"] == 25 and out["batches"] == 3 and out["frontier"] == {"0": 13, "1": 12}
    assert not out["interrupted"]
    progress = [json.loads(line) for line in r.err.splitlines()]
    assert progress and all(p["progress"] == "ev" for p in progress)
    again = run_lsm("ingest", db, log, "--name", "ev")
    assert again.code == 0 and "records     0" in again.out and "end of log" in again.out

    r = run_lsm("remap", db, "ev", "--json")
    assert r.code == 0
    rel = r.json()
    assert rel["frontier"] == {"0": 13, "1": 12} and rel["since"] is None
    batches = {1: [(0, 10)], 2: [(0, 10), (1, 10)], 3: [(0, 13), (1, 12)]}  # seq -> its binding's rows
    # batches committed in one millisecond are one binding (the later one): the remap shows the batches
    # whose successor came at a later ms, and always the last
    seqs = sorted({x["seq"] for x in rel["rows"]})
    assert seqs[-1] == 3 and rel["bindings"] == len(seqs)
    assert [(x["seq"], x["partition"], x["next_offset"]) for x in rel["rows"]] == [
        (q, p, o) for q in seqs for p, o in batches[q]
    ]
    times = [next(x["ts"] for x in rel["rows"] if x["seq"] == q) for q in seqs]
    assert times == sorted(set(times))  # one binding per time
    assert all(x["ts_rfc3339"].endswith("Z") for x in rel["rows"])
    table = run_lsm("remap", db, "ev")
    assert table.code == 0 and "frontier  0:13 1:12" in table.out and "partition" in table.out

    b = run_lsm("remap", db, "ev", "--offset", "1:11", "--json").json()
    assert b["binding"]["seq"] == 3 and b["binding"]["frontier"] == {"0": 13, "1": 12}
    last_ts = rel["rows"][-1]["ts"]
    b = run_lsm("remap", db, "ev", "--as-of", str(last_ts)).out
    assert "seq       3" in b and f"({last_ts})" in b
    with lsm.DB.open(db, read_only=True) as d:  # what ingest wrote is the log, once
        assert dict(d.scan()) == {b"k%04d" % i: b"v%d" % i for i in range(25)}
    du = run_lsm("du", db, "--json").json()  # the 3 binding rows are the engine's, not counted
    assert du["total"]["live_rows"] == 25
    scan = run_lsm("scan", db, "--json").json()
    assert len(scan) == 25 and all(not row["key"].startswith("0xffffffff") for row in scan)


def test_remap_lookups_without_an_answer_and_bad_input(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    write_log(log, 4)
    assert run_lsm("ingest", db, log, "--name", "ev").code == 0
    msg = one_line_error(run_lsm("remap", db, "ev", "--offset", "0:99"), 1)
    assert "0:99" in msg and "0:2 1:2" in msg
    r = run_lsm("remap", db, "ev", "--as-of", "2001-01-01T00:00:00Z", "--json")
    assert r.code == 1 and r.json()["binding"] is None
    assert "no ingested source named 'nope'" in one_line_error(run_lsm("remap", db, "nope"), 2)
    assert "PARTITION:OFFSET" in one_line_error(run_lsm("remap", db, "ev", "--offset", "3"), 2)
    assert "no such log directory" in one_line_error(
        run_lsm("ingest", db, tmp_path / "none", "--name", "x"), 2
    )
    one_line_error(run_lsm("ingest", db, log), 2)  # --name is required
    one_line_error(run_lsm("remap", tmp_path / "nodb", "ev"), 2)


def test_follow_tails_until_sigint_and_stops_cleanly(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    write_log(log, 10)
    env = {k: v for k, v in os.environ.items() if k != "LSM_TRACEBACK"}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.Popen(
        [*LSM_CMD, "ingest", str(db), str(log), "--name", "ev", "--follow", "--interval", "20", "--json"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        write_log(log, 30, start=10)  # appended while it follows
        deadline = time.monotonic() + 60
        frontier = {}
        while time.monotonic() < deadline and frontier != {0: 20, 1: 20}:
            time.sleep(0.1)
            try:
                with lsm.DB.open(db, read_only=True) as d:
                    frontier = d.remap("ev").frontier
            except lsm.LsmError:
                pass
        assert frontier == {0: 20, 1: 20}
        assert p.poll() is None  # still following
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["interrupted"] and summary["records"] == 40 and summary["frontier"] == {"0": 20, "1": 20}
    with lsm.DB.open(db, lsm.DbOptions(clock=lsm.ManualClock(T0 * 2))) as d:  # closed cleanly: reopens
        assert len(list(d.scan())) == 40 and d.remap("ev").frontier == {0: 20, 1: 20}


def test_bulk_ingest_with_the_local_engine(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    write_log(log, 40, parts=3)
    r = run_lsm("ingest", db, log, "--name", "ev", "--engine", "local", "--tasks", "5", "--json")
    assert r.code == 0, r.err
    out = r.json()
    assert (out["engine"], out["records"], out["batches"]) == ("local", 40, 1)
    assert out["frontier"] == {"0": 14, "1": 13, "2": 13}
    with lsm.DB.open(db, read_only=True) as d:
        assert dict(d.scan()) == {b"k%04d" % i: b"v%d" % i for i in range(40)}
        assert [b.frontier for b in d.remap("ev").bindings()] == [{0: 14, 1: 13, 2: 13}]
    write_log(log, 5, parts=3, start=40)
    r = run_lsm("ingest", db, log, "--name", "ev", "--engine", "local")
    assert r.code == 0 and "records   5" in r.out and "batches   1" in r.out, r.out
    for bad in (
        ("--engine", "local", "--follow"),
        ("--engine", "local", "--max-records", "3"),
        ("--engine", "local", "--master", "local[2]"),
        ("--tasks", "2"),
        ("--engine", "local", "--tasks", "0"),
    ):
        one_line_error(run_lsm("ingest", db, log, "--name", "ev", *bad), 2)


def test_progress_shows_where_each_pass_ends_in_words_that_agree(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    write_log(log, 25)
    r = run_lsm("ingest", db, log, "--name", "ev", "--batch-records", "10")
    assert r.code == 0, r.err
    lines = r.err.splitlines()
    # the first batch at once, then (however fast the rest) the end of the pass: 3 batches, 25 records
    assert lines[0].startswith("ingest ev: 10 records, 1 batch, ") and lines[0].endswith("frontier 0:10")
    assert lines[-1].startswith("ingest ev: 25 records, 3 batches, ") and lines[-1].endswith(
        "frontier 0:13 1:12"
    )
    r = run_lsm("ingest", tmp_path / "db2", log, "--name", "ev", "--batch-records", "100", "--json")
    assert r.code == 0, r.err
    # one batch took everything: its line once, not again as the end of the pass
    assert [json.loads(x) for x in r.err.splitlines()] == [
        {"progress": "ev", "records": 25, "batches": 1, "frontier": {"0": 13, "1": 12}}
    ]


def test_progress_on_a_terminal_is_one_line_redrawn_per_batch(tmp_path) -> None:
    from tests.tools._pty import run_lsm_tty

    log, db = tmp_path / "log", tmp_path / "db"
    write_log(log, 40)  # 20 commits of one record per partition
    # tqdm takes its defaults from TQDM_* variables: a redraw on every update instead of at most every
    # 0.1 s, so what the terminal shows depends on the batches alone, not on how busy the machine is
    fast = {"TQDM_MININTERVAL": "0", "TQDM_MINITERS": "1"}
    r = run_lsm_tty("ingest", db, log, "--name", "ev", "--batch-records", "2", env=fast)
    assert r.code == 0, r.err
    assert "batches     20" in r.out  # stdout: the summary alone
    draws = [d.strip() for d in r.err.split("\r") if d.strip()]
    assert draws and all(d.startswith("ingest ev: ") for d in draws), draws[:3]
    assert "\n" not in r.err.strip()  # redrawn in place, never a new line per batch
    shown = {}  # batches -> (records, the frontier's offsets) of the draws that name them
    for d in draws[1:]:  # after tqdm's initial draw, each one names the totals of a batch
        m = re.fullmatch(
            r"ingest ev: (\d+) rec \[.* rec/s, (\d+) batch(?:es)?, frontier 0:(\d+)(?: 1:(\d+))?\]", d
        )
        assert m, d
        shown[int(m[2])] = (int(m[1]), int(m[3]) + int(m[4] or 0))
    assert shown == {k: (2 * k, 2 * k) for k in range(1, 21)}  # every batch redrew the line


def test_remap_shows_what_waits_in_temp_and_tx_order_commit(tmp_path) -> None:
    log, db = tmp_path / "log", tmp_path / "db"
    with LogWriter(log) as w:
        w.append(0, b"a0", b"v", tx="A", tx_end={0: 1, 1: 1})  # A waits for its record in partition 1
        w.append(1, b"b0", b"v", tx="B", tx_end=True)  # B is complete, but its marker comes after A's
    r = run_lsm("ingest", db, log, "--name", "ev", "--tx-order", "commit", "--json")
    assert r.code == 0, r.err
    rel = run_lsm("remap", db, "ev", "--json").json()
    assert rel["pending"] == {"records": 2, "transactions": 2}
    assert "pending   2 records in 2 transactions" in run_lsm("remap", db, "ev").out
    with LogWriter(log) as w:
        w.append(1, b"a1", b"v", tx="A")
    assert run_lsm("ingest", db, log, "--name", "ev", "--tx-order", "commit").code == 0
    assert run_lsm("remap", db, "ev", "--json").json()["pending"] == {"records": 0, "transactions": 0}
    assert "pending   none" in run_lsm("remap", db, "ev").out
    bad = run_lsm("ingest", db, log, "--name", "ev", "--tx-order", "later")
    assert "--tx-order" in one_line_error(bad, 2)
def test_ingest_times_source_commits_at_the_logs_progress(tmp_path) -> None:
    log, db = str(tmp_path / "log"), str(tmp_path / "db")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1", event_ts=T0 - 5000)
        w.append(1, b"b", b"2", event_ts=T0 - 4000)
        w.advance(T0 - 1000)
        w.append(0, b"c", b"3", event_ts=T0)  # at or above the progress: waits
    r = run_lsm("ingest", db, log, "--name", "cdc", "--times", "source", "--json")
    assert r.code == 0, r.err
    assert r.json()["records"] == 2 and r.json()["frontier"] == {"0": 2, "1": 2}
    with lsm.DB.open(db, read_only=True) as d:
        assert d.remap("cdc").rows() == [(T0 - 1001, 0, 2), (T0 - 1001, 1, 2)]
    bad = run_lsm("ingest", db, log, "--name", "cdc", "--times", "source", "--engine", "local")
    assert "applies to --engine stream only" in one_line_error(bad, 2)


def test_log_write_advance_lines_drive_ingest_times_source(tmp_path) -> None:
    log, db = str(tmp_path / "log"), str(tmp_path / "db")
    lines = (
        '{"partition": 0, "key": "a", "value": "1", "event_ts": "2024-03-04T10:00:00Z"}\n'
        '{"partition": 1, "key": "b", "value": "2", "event_ts": "2024-03-04T10:30:00Z"}\n'
        '{"advance": "2024-03-04T11:00:00Z"}\n'
        '{"partition": 0, "key": "c", "value": "3", "event_ts": "2024-03-04T11:10:00Z"}\n'
        '{"advance": "2024-03-04T12:00:00Z", "partition": 0}\n'
    )
    r = lsm_in(lines, "log", "write", log, "--json")
    assert r.code == 0 and r.json()["records"] == 3 and r.json()["markers"] == 2, r.err
    r = run_lsm("ingest", db, log, "--name", "cdc", "--times", "source", "--json")
    assert r.code == 0 and r.json()["records"] == 2, r.err  # partition 1 holds the source at 11:00
    with lsm.DB.open(db, read_only=True) as d:
        assert [b.ts for b in d.remap("cdc").bindings()] == [parse_time("2024-03-04T10:59:59.999Z")]
    bad = lsm_in('{"advance": 5, "key": "x"}\n', "log", "write", log)
    assert "stdin line 1" in one_line_error(bad, 2)

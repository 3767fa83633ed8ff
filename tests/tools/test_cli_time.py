"""`lsm seq-to-ts | ts-to-seq | time-seq | changes` through the real entry point (``python -m tools.cli``),
on databases built here with a ManualClock (after DbOptions' default time_seq_min_time, which the
command line uses too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import lsm
from lsm.seq_tracker import Round
from tools.render import rfc3339

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T0 = 1_760_000_000_000  # 2025-10-09T08:53:20Z
HOUR = 3_600_000


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("LSM_TRACEBACK", None)
    return env


def run_all(*commands: tuple) -> list[subprocess.CompletedProcess]:
    """Run independent command lines at once (each CLI start costs ~0.4 s of imports)."""
    procs = [
        (
            args,
            subprocess.Popen(
                [sys.executable, "-m", "tools.cli", *map(str, args)],
                cwd=ROOT,
                env=_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for args in commands
    ]
    out = []
    for args, p in procs:
        stdout, stderr = p.communicate(timeout=120)
        out.append(subprocess.CompletedProcess(args, p.returncode, stdout, stderr))
    return out


def lsm_cli(*args: object) -> subprocess.CompletedProcess:
    return run_all(args)[0]


def ok(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 0 and p.stderr == "", (p.args, p.returncode, p.stderr)
    return p.stdout


def fails(status: int, p: subprocess.CompletedProcess) -> str:
    """Check that a command failed with `status`; return its one-line error (without the prefix)."""
    assert p.returncode == status, (p.args, p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lsm: error: "), p.stderr
    return lines[0].removeprefix("lsm: error: ")


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    """Seqs 1..10 every 40 s from T0, then (4 h later) a delete of k1 (11) and a put of a binary key (12)."""
    path = tmp_path_factory.mktemp("cli") / "db"
    clock = lsm.ManualClock(T0)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False)) as db:
        for i in range(10):
            db.put(b"k%d" % i, b"v%d" % i)
            clock.advance(40_000)
        db.flush()
        clock.advance(4 * HOUR)
        db.delete(b"k1")
        db.put(b"\xff\x00", b"bin")
    return path


def test_seq_to_ts(db_path):
    text, down, missing, bad_round = run_all(
        ("seq-to-ts", db_path, 3),
        ("seq-to-ts", db_path, 12, "--round", "down", "--json"),
        ("seq-to-ts", db_path, 13, "--json"),
        ("seq-to-ts", db_path, 3, "--round", "sideways"),
    )
    assert ok(text).splitlines() == [
        "seq    3",
        "round  up",
        f"ts     {rfc3339(T0 + 80_000)} ({T0 + 80_000})",
    ]
    last = T0 + 400_000 + 4 * HOUR
    assert json.loads(ok(down)) == {"seq": 12, "round": "down", "ts": last, "ts_rfc3339": rfc3339(last)}
    err = fails(1, missing)
    assert "no seq recorded at or after seq 13" in err and "seqs 1..11" in err
    assert json.loads(missing.stdout)["ts"] is None
    assert "invalid choice: 'sideways'" in fails(2, bad_round)


def test_ts_to_seq(db_path):
    js, text, missing = run_all(
        ("ts-to-seq", db_path, T0 + 100_000, "--json"),
        ("ts-to-seq", db_path, "2025-10-09T10:55:00+02:00", "--round", "up"),  # T0 + 100 s
        ("ts-to-seq", db_path, "2020-01-01T00:00:00Z"),
    )
    assert json.loads(ok(js)) == {
        "time": T0 + 100_000,
        "time_rfc3339": rfc3339(T0 + 100_000),
        "round": "down",
        "seq": 3,
        "seq_ts": T0 + 80_000,
        "seq_ts_rfc3339": rfc3339(T0 + 80_000),
    }
    assert ok(text).splitlines() == [
        f"time    {rfc3339(T0 + 100_000)} ({T0 + 100_000})",
        "round   up",
        "seq     4",
        f"seq_ts  {rfc3339(T0 + 120_000)} ({T0 + 120_000})",
    ]
    assert fails(1, missing).startswith(
        "no seq recorded at or before 2020-01-01T00:00:00.000Z (1577836800000)"
    )
    assert missing.stdout == ""


def test_time_seq_histogram(db_path):
    with lsm.DB.open(db_path, read_only=True) as db:
        hist = db.time_seq_histogram()
    assert [n for _t, n in hist] == [10, 2]
    text, js = run_all(("time-seq", db_path), ("time-seq", db_path, "--json"))
    out = ok(text).splitlines()
    assert out[0].split() == ["bin_start", "updates"]
    assert [line.split() for line in out[1:]] == [[t, str(n)] for t, n in hist]
    d = json.loads(ok(js))
    assert d["seq"] == 12
    assert [(b["start"], b["updates"]) for b in d["bins"]] == hist
    assert all(rfc3339(b["start_ms"])[:19] == b["start"][:19] for b in d["bins"])


def test_changes(db_path):
    newest = T0 + 400_000 + 4 * HOUR
    table, since_bin, since_zero, limited = run_all(
        ("changes", db_path, "--seq", 8),
        ("changes", db_path, "--since", rfc3339(newest - newest % (3 * HOUR)), "--json", "--key-encoding", "hex"),
        ("changes", db_path, "--since", 0, "--json", "--key-encoding", "hex"),
        ("changes", db_path, "--since", T0 + 100 * HOUR, "--seq", 0, "--limit", 2, "--json"),
    )
    lines = ok(table).splitlines()
    assert lines[0].split() == ["seq", "ts", "op", "key", "expire_ts", "value"]
    assert [line.split()[::2] for line in lines[1:]] == [
        ["9", "put", "-"],
        ["10", "put", "-"],
        ["11", "delete", "-"],
        ["12", "put", "-"],
    ]
    assert [line.split()[-1] for line in lines[1:]] == ["v8", "v9", "-", "bin"]
    assert lines[1].split()[1] == rfc3339(T0 + 320_000) and lines[4].split()[3] == "0xff00"
    assert json.loads(ok(since_bin)) == [
        {"seq": 11, "ts": newest, "op": "delete", "key": "6b31", "key_hex": True, "value": None, "expire_ts": None},
        {"seq": 12, "ts": newest, "op": "put", "key": "ff00", "key_hex": True, "value": "bin", "expire_ts": None},
    ]
    # k1's put (seq 2) was replaced by its delete
    assert [c["seq"] for c in json.loads(ok(since_zero))] == [1, *range(3, 13)]
    assert "argument --seq: not allowed with argument --since" in fails(2, limited)
    limited, future = run_all(
        ("changes", db_path, "--seq", 0, "--limit", 2, "--json", "--key-encoding", "base64"),
        ("changes", db_path, "--since", rfc3339(T0 + 100 * HOUR)),
    )
    assert [c["seq"] for c in json.loads(ok(limited))] == [1, 3]
    assert ok(future).split() == ["seq", "ts", "op", "key", "expire_ts", "value"]  # nothing since


def test_errors_are_one_line(tmp_path, db_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x").write_text("x")
    missing, a_file, other, neg, bad_time, no_point = run_all(
        ("time-seq", tmp_path / "missing"),
        ("changes", tmp_path / "file", "--seq", 0),
        ("seq-to-ts", tmp_path / "other", 1),
        ("seq-to-ts", db_path, -1),
        ("ts-to-seq", db_path, "yesterday"),
        ("changes", db_path),
    )
    assert "no such file or directory" in fails(2, missing)
    assert "is a file" in fails(2, a_file)
    assert "not an lsm-sim database" in fails(2, other)
    assert not (tmp_path / "other" / "manifest").exists()  # read-only: nothing created
    assert "'-1' is negative" in fails(2, neg)
    assert "cannot read 'yesterday' as a time" in fails(2, bad_time)
    assert "one of the arguments --since --seq is required" in fails(2, no_point)


def test_read_only_commands_do_not_fence_and_reset_does(tmp_path):
    path = tmp_path / "db"
    clock = lsm.ManualClock(T0)
    db = lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False))
    try:
        db.put(b"a", b"1")
        clock.advance(31_000)
        db.put(b"b", b"2")  # in the WAL only: the read-only commands replay it
        changes, t2s, bins, help_ = run_all(
            ("changes", path, "--seq", 0, "--json"),
            ("ts-to-seq", path, T0 + 31_000, "--json"),
            ("time-seq", path, "--json"),
            ("time-seq", "--help"),
        )
        assert [c["key"] for c in json.loads(ok(changes))] == ["a", "b"]
        assert json.loads(ok(t2s))["seq"] == 2
        assert json.loads(ok(bins))["bins"][0]["updates"] == 2
        assert "--reset" in ok(help_) and "fenced" in help_.stdout and "WRITABLE" in help_.stdout
        db.put(b"c", b"3")  # still the writer
        d = json.loads(ok(lsm_cli("time-seq", path, "--reset", "--json")))
        assert d["reset"] is True and d["seq"] == 3
        with pytest.raises(lsm.FencedError):
            db.put(b"d", b"4")
    finally:
        db.close()
    with lsm.DB.open(path, read_only=True) as db2:
        assert db2.time_seq_histogram() == []
        assert dict(db2.scan()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
        assert db2.timestamp_for_seq(2, Round.DOWN) == T0 + 31_000  # the tracker is not reset


def test_bench_time_reports_its_figures():
    """`lsm bench time` runs (no timing is asserted: only the shape and the size figures)."""
    r = json.loads(ok(lsm_cli("bench", "time", "--runs", "1", "--json")))
    assert r["codec"]["entries"] == 8192 and r["codec"]["encode_ms_median"] > 0
    regular = r["bits_per_entry"][0]
    assert regular["seq_bits"] < 1.01 and regular["ts_bits"] < 1.01  # delta-of-delta 0: one bit each
    assert all(row["entries"] == 8192 for row in r["bits_per_entry"])
    m = r["manifest"]
    assert m["time_seq_bins"] == 60
    assert m["manifest_bytes_with_maps"] >= m["manifest_bytes_without_maps"] + m["seq_tracker_bytes"]

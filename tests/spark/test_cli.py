"""``lsm compact`` and ``lsm gc`` through the real entry point, and tools/spark_compact.py in-process.

Only one test starts a JVM of its own (``--engine spark`` in a subprocess); the spark-submit script
runs on the shared session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import lsm
from tests.spark._util import manifest_files, sst_files, task_marks
from tools import spark_compact

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def lsm_cli_popen(*args: str, **env_extra: str) -> subprocess.Popen:
    """`lsm ARGS` through the real entry point (`python -m tools.cli`), started and not waited for."""
    env = {**os.environ, "PYTHONPATH": ROOT, "PYSPARK_PYTHON": sys.executable, **env_extra}
    return subprocess.Popen(
        [sys.executable, "-m", "tools.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lsm_cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    p = lsm_cli_popen(*args)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def make_db(path, n: int = 600, **options) -> dict[bytes, bytes]:
    """A closed database with several L0 SSTs, overwrites, deletes and rows that expire at once."""
    clock = lsm.ManualClock(time.time_ns() // 1_000_000)  # `lsm compact` runs on the system clock
    expect = {}
    opts = lsm.DbOptions(
        clock=clock, background_compaction=False, block_bytes=256, l0_compaction_threshold=100, **options
    )
    with lsm.DB.open(path, opts) as db:
        for i in range(n):
            k = b"key%04d" % (i % 250)
            if i % 11 == 0:
                db.delete(k)
                expect.pop(k, None)
            elif i % 7 == 0:
                db.put(k, b"short-lived", ttl=1)
                expect.pop(k, None)
            else:
                db.put(k, b"v%d" % i)
                expect[k] = b"v%d" % i
            if i % 150 == 149:
                db.flush()
        clock.advance(10)
    return expect


def read_back(path) -> tuple[dict[bytes, bytes], lsm.DB]:
    db = lsm.DB.open(path, lsm.DbOptions(background_compaction=False))
    return dict(db.scan()), db


def test_compact_local_prints_stats_and_json(tmp_path):
    path = str(tmp_path / "db")
    expect = make_db(path)
    p = lsm_cli("compact", path)
    assert p.returncode == 0, p.stderr
    for label in (
        "rows in",
        "rows out",
        "bytes in",
        "bytes out",
        "tombstones dropped",
        "read seconds",
        "write seconds",
    ):
        assert label in p.stdout
    assert "ttl" in p.stdout  # the filter table

    make_db(path)  # more L0 SSTs on top of the run
    p = lsm_cli("compact", path, "--json")
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["engine"] == "local" and r["jobs"] == 1
    assert r["rows_in"] > r["rows_out"] > 0 and r["tombstones_dropped"] > 0
    assert r["filters"]["ttl"]["removed"] > 0
    assert {"bytes_in", "bytes_out", "seconds", "read_seconds", "write_seconds", "expired_dropped"} <= set(r)

    got, db = read_back(path)
    try:
        assert got == expect
        assert not db.manifest.l0 and len(db.manifest.runs) == 1
    finally:
        db.close()


def test_compact_keeps_the_format_and_compression_of_the_database(tmp_path):
    path = str(tmp_path / "db")
    expect = make_db(path, n=300, compression="zlib")
    p = lsm_cli("compact", path)
    assert p.returncode == 0, p.stderr
    got, db = read_back(path)
    try:
        assert got == expect
        (run,) = db.manifest.runs
        assert {(e.info.compression, e.info.format_version) for e in run.ssts} == {("zlib", 1)}
    finally:
        db.close()


def test_compact_and_gc_errors_are_one_line(tmp_path):
    p = lsm_cli("compact", str(tmp_path / "missing"))
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("lsm: error:") and "missing" in p.stderr
    assert not (tmp_path / "missing").exists()  # never creates a database
    p = lsm_cli("compact", str(tmp_path), "--engine", "mapreduce")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "invalid choice" in p.stderr
    p = lsm_cli("compact", str(tmp_path), "--tasks", "0")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    p = lsm_cli("gc", str(tmp_path / "missing"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1


def test_gc_prints_removed_files(tmp_path):
    path = str(tmp_path / "db")
    expect = make_db(path, n=200)
    junk = ["000123-e1-t0000-deadbeef-0000.sst", "000123-e1-t0001-cafef00d-0000.sst"]
    for name in junk:
        with open(os.path.join(path, "sst", name), "wb") as f:
            f.write(b"half-written")
    os.utime(os.path.join(path, "sst", junk[0]), (1, 1))  # old enough for the default grace period

    p = lsm_cli("gc", path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [junk[0], "removed 1 file"]
    p = lsm_cli("gc", path, "--grace-ms", "0", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["removed"] == [junk[1]]
    got, db = read_back(path)
    try:
        assert got == expect and sst_files(db) == manifest_files(db)
    finally:
        db.close()


def test_compact_engine_spark_subprocess(spark_cli_run):
    """The one test that starts its own JVM: `lsm compact --engine spark --master local[2] --conf
    spark.default.parallelism=3` (the task count follows the session's parallelism, so the --conf reached it).

    conftest.py starts it when collection ends, so its JVM start-up overlaps the other tests."""
    p = spark_cli_run.wait()
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == ""  # the JVM's chatter goes to a log file, removed after a successful run
    assert os.listdir(spark_cli_run.tmp) == []
    r = json.loads(p.stdout)
    assert (r["engine"], r["master"], r["tasks"], r["jobs"]) == ("spark", "local[2]", 3, 1)
    assert r["rows_out"] > 0 and r["tombstones_dropped"] > 0 and r["spark_startup_seconds"] > 0
    got, db = read_back(spark_cli_run.path)
    try:
        assert got == spark_cli_run.expect
        assert task_marks(manifest_files(db)) == {0, 1, 2}
    finally:
        db.close()


def test_spark_submit_script_on_the_given_session(spark, tmp_path, capsys):
    path = str(tmp_path / "db")
    expect = make_db(path)
    assert spark_compact.main([path, "--tasks", "3", "--json"], session=spark) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["engine"], r["tasks"], r["jobs"]) == ("spark", 3, 1)
    assert not spark.sparkContext._jsc.sc().isStopped()  # the provided session is left running
    got, db = read_back(path)
    try:
        assert got == expect
        assert task_marks(manifest_files(db)) == {0, 1, 2}
    finally:
        db.close()
    assert spark_compact.main([str(tmp_path / "missing")], session=spark) == 2
    assert capsys.readouterr().err.startswith("lsm: error:")

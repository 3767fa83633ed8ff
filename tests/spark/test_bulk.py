"""Bulk load as a Spark batch (lsm.bulk, engine="spark") on the shared session: equivalence with streaming
ingest and with the local engine, a retried task, a failed job, a driver killed with SIGKILL mid-job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from compaction.spark import SparkJobError
from lsm.sources import LogWriter, PartitionedLog
from tests.lsm._bulk_util import FailFirstAttempt, FailsOn, contents, load, open_db, write_log

UTIL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lsm", "_bulk_util.py")


def sst_files(path: str) -> set[str]:
    return {n for n in os.listdir(os.path.join(path, "sst")) if n.endswith(".sst")}


def test_spark_equals_streaming_and_local(spark, tmp_path) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=21, n=4000, partitions=5)
    want = load(str(tmp_path / "stream"), log, "stream", ttl_base="event")
    got = load(str(tmp_path / "spark"), log, "spark", spark=spark, tasks=4, ttl_base="event")
    assert got == want and len(want["rows"]) > 100
    assert load(str(tmp_path / "local"), log, "local", tasks=4, ttl_base="event") == want
    db = open_db(str(tmp_path / "spark"))
    try:  # no record went through a second writer: every file is a live, sorted SST of the load
        assert sst_files(db.path) == {e.name for e in db.manifest.all_ssts()}
        assert len(db.manifest.l0) >= 6
    finally:
        db.close()


def test_a_task_failing_its_first_attempt_is_retried_with_the_same_rows(spark, tmp_path) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=22, n=2000, partitions=2, tx=False)
    want = load(str(tmp_path / "stream"), log, "stream")
    path = str(tmp_path / "spark")
    got = load(path, log, "spark", spark=spark, tasks=2, source=FailFirstAttempt(log))
    assert got == want
    failed = sorted(p.name for p in tmp_path.glob("failed-*"))  # every task failed once, then succeeded
    assert len(failed) >= 2 and set(failed) == {f"failed-{i}" for i in range(len(failed))}
    db = open_db(path)
    try:
        live = {e.name for e in db.manifest.all_ssts()}
        db.gc(grace_ms=0)  # a killed attempt may have left nothing (it dies before writing): none may stay
        assert sst_files(path) == live and contents(db) == want
    finally:
        db.close()


def test_a_failing_job_changes_nothing_visible(spark, tmp_path) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=23, n=1500, partitions=3)
    path = str(tmp_path / "db")
    db = open_db(path, spark_session=spark)
    try:
        db.ingest(PartitionedLog(log), name="events", max_records=100)
        db.flush()  # the reservation would flush the memtable (already committed rows) itself
        before, manifest = contents(db), db.manifest
        with pytest.raises(SparkJobError, match="exploded on purpose"):
            db.ingest(FailsOn(log, bad=1), name="events", engine="spark", tasks=1)  # DbOptions.spark_session
        assert contents(db) == before
        assert (db.manifest.l0, db.manifest.runs) == (manifest.l0, manifest.runs)
        # the failed load gave its reserved seqs up: last_seq moves over them, nothing waits for them
        assert db.manifest.seq_reservations == () and db.manifest.last_seq == db.seq > manifest.last_seq
        db.gc(grace_ms=0)
        assert sst_files(path) == {e.name for e in db.manifest.all_ssts()}
    finally:
        db.close()


def test_a_driver_killed_mid_job_leaves_the_old_frontier(spark, tmp_path) -> None:
    log = str(tmp_path / "log")
    write_log(log, seed=24, n=1200, partitions=3)
    path = str(tmp_path / "db")
    db = open_db(path)
    db.ingest(PartitionedLog(log), name="events", max_records=150)
    before = contents(db)
    db.close()
    with LogWriter(log) as w:
        w.append(2, b"late", b"l")
    reading = tmp_path / "reading"
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, UTIL, "load", path, log, "spark", "local[2]"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its JVM and Python workers form one process group we can reap
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not (
            reading.exists() and any("-t0000-" in n for n in sst_files(path))
        ):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        assert reading.exists(), "the Spark job did not start in time"
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its JVM and workers notice and exit
        proc.wait()
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    db = open_db(path)
    try:
        assert contents(db) == before
        leftovers = sst_files(path) - {e.name for e in db.manifest.all_ssts()}
        assert leftovers and all("-bulk-" in n for n in leftovers)
        assert set(db.gc(grace_ms=0)) == leftovers
        stats = db.ingest(PartitionedLog(log), name="events", engine="spark", spark=spark, tasks=3)
        assert stats.frontier == {p: PartitionedLog(log).end(p) for p in range(3)}
        assert db.ingest(PartitionedLog(log), name="events", engine="spark", spark=spark).records == 0
        got = contents(db)
    finally:
        db.close()
    ref = open_db(str(tmp_path / "stream"))
    try:
        ref.ingest(PartitionedLog(log), name="events", max_records=150)
        ref.ingest(PartitionedLog(log), name="events", batch_records=10**9)
        assert got == contents(ref)
    finally:
        ref.close()

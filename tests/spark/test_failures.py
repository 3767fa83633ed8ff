"""Failures of a Spark compaction: a retried task, a failed job, a filter Spark cannot ship."""

from __future__ import annotations

import os
import threading

import pytest

import lsm
from compaction.filter import CompactionFilter, CompactionFilterFactory
from compaction.spark import SparkJobError
from tests.spark._util import (
    AlwaysFailsFactory,
    FailFirstAttemptFactory,
    build_db,
    latest_manifest,
    manifest_files,
    sst_files,
    stored_runs,
    task_marks,
    visible,
)

SEED = 11


def test_failed_attempts_are_retried_and_leave_nothing_referenced(spark, tmp_path):
    # small output files, so each failed attempt has written (and, when killed, left) some of them
    opts = dict(compaction_filters=[FailFirstAttemptFactory(after=40)], target_sst_bytes=1024)
    local, _, lsnaps = build_db(tmp_path / "local", SEED, **opts)
    remote, _, rsnaps = build_db(tmp_path / "spark", SEED, spark_session=spark, spark_tasks=2, **opts)
    for s in lsnaps + rsnaps:  # no snapshot: the output holds one version per key
        s.close()
    try:
        local.compact(full=True, executor="local")
        before = sst_files(remote)
        remote.compact(full=True, executor="spark")  # every task fails once, then succeeds

        assert stored_runs(remote) == stored_runs(local)
        assert visible(remote, []) == visible(local, [])
        (run,) = stored_runs(remote)
        keys = [row[0] for row in run]
        assert keys == sorted(set(keys)), "a key is referenced twice"
        live = manifest_files(remote)
        assert task_marks(live) == {0, 1}
        # task 1's first attempt was killed mid-write: its files are on disk, under names nobody references
        leftovers = sst_files(remote) - live - before
        assert leftovers and task_marks(leftovers) == {1}
        assert not leftovers & live

        removed = remote.gc(grace_ms=0)
        assert set(removed) >= leftovers
        assert sst_files(remote) == manifest_files(remote)
        assert stored_runs(remote) == stored_runs(local)
    finally:
        local.close()
        remote.close()


def test_failed_job_commits_nothing(spark, tmp_path):
    db, _, snaps = build_db(tmp_path / "db", SEED)
    try:
        db.close()  # reopen with a filter that always raises
        db = lsm.DB.open(
            tmp_path / "db",
            lsm.DbOptions(
                clock=lsm.ManualClock(10**13),
                background_compaction=False,
                compaction_filters=[AlwaysFailsFactory()],
                spark_session=spark,
                spark_tasks=1,  # each of the 4 attempts restarts a Python worker: one task is enough
                block_bytes=256,
            ),
        )
        mid, m = latest_manifest(db)
        rows, reads = stored_runs(db), visible(db, [])
        with pytest.raises(SparkJobError) as info:
            db.compact(full=True, executor="spark")
        assert isinstance(info.value, lsm.LsmError)
        assert "RuntimeError: filter exploded on purpose" in str(info.value)  # the error, not source code
        assert latest_manifest(db) == (mid, m)
        assert db.manifest == m
        assert stored_runs(db) == rows and visible(db, []) == reads

        db.gc(grace_ms=0)
        assert sst_files(db) == manifest_files(db)
        assert stored_runs(db) == rows
    finally:
        for s in snaps:
            s.close()
        db.close()


class _Locked(CompactionFilter):
    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock


class LockedFactory(CompactionFilterFactory):
    """Holds a lock: fine for the local executor, impossible to ship to Spark executors."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def create(self, ctx):
        return _Locked(self.lock)


def test_unpicklable_filter_fails_before_any_task(spark, tmp_path, monkeypatch):
    from pyspark import SparkContext

    def no_job(*args, **kwargs):
        raise AssertionError("a Spark job was started")

    db, _, snaps = build_db(
        tmp_path / "db", SEED, compaction_filters=[LockedFactory()], spark_session=spark, spark_tasks=2
    )
    try:
        mid, m = latest_manifest(db)
        monkeypatch.setattr(SparkContext, "parallelize", no_job)
        monkeypatch.setattr(SparkContext, "runJob", no_job)
        with pytest.raises(SparkJobError, match="picklable") as info:
            db.compact(full=True, executor="spark")
        assert "LockedFactory" in str(info.value)
        assert latest_manifest(db) == (mid, m)
        assert sst_files(db) == manifest_files(db)
        monkeypatch.undo()
        db.compact(full=True, executor="local")  # the same filter is fine in-process
        assert len(db.manifest.runs) == 1 and not db.manifest.l0
    finally:
        for s in snaps:
            s.close()
        db.close()


def test_gc_keeps_recent_files_within_the_grace_period(tmp_path):
    with lsm.DB.open(tmp_path / "db", lsm.DbOptions(background_compaction=False)) as db:
        db.put(b"a", b"1")
        db.flush()
        old, new = db.sst_path("old-t0000-00000000-0000.sst"), db.sst_path("new-t0000-00000000-0000.sst")
        for p in (old, new):
            with open(p, "wb") as f:
                f.write(b"leftover")
        os.utime(old, (1, 1))
        assert db.gc(grace_ms=60_000) == [os.path.basename(old)]
        assert db.gc(grace_ms=0) == [os.path.basename(new)]
        assert sst_files(db) == manifest_files(db)
        assert db.get(b"a") == b"1"

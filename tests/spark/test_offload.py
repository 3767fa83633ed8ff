"""Scheduled jobs go to Spark when their input reaches DbOptions.spark_offload_min_bytes."""

from __future__ import annotations

import lsm
from tests.spark._util import T0, task_marks

OFFLOAD_BYTES = 40_000


def _write(db: lsm.DB, clock: lsm.ManualClock, n: int, tag: bytes) -> dict[bytes, bytes]:
    """Two flushed L0 SSTs of n rows each: the scheduler (l0_compaction_threshold=2) then picks a job."""
    expect = {}
    for flush in range(2):
        for i in range(n):
            k, v = b"k%05d" % (i * 2 + flush), tag + b"%d" % i * 10
            db.put(k, v)
            expect[k] = v
            clock.advance(1)
        db.flush()
    return expect


def test_big_scheduled_jobs_run_on_spark_small_ones_locally(spark, tmp_path):
    clock = lsm.ManualClock(T0)
    opts = lsm.DbOptions(
        clock=clock,
        background_compaction=False,
        l0_compaction_threshold=2,
        block_bytes=512,
        spark_offload_min_bytes=OFFLOAD_BYTES,
        spark_session=spark,
        spark_tasks=2,
    )
    with lsm.DB.open(tmp_path / "db", opts) as db:
        expect = _write(db, clock, 20, b"small")
        small_input = sum(e.info.file_size for e in db.manifest.l0)
        assert small_input < OFFLOAD_BYTES
        db.compact()  # the scheduler's job: below the threshold, so the local executor
        (run,) = db.manifest.runs
        assert not task_marks(e.name for e in run.ssts)
        assert not any("-t0" in e.name for e in run.ssts)

        expect |= _write(db, clock, 400, b"big")
        big_input = sum(e.info.file_size for e in db.manifest.l0) + sum(r.size for r in db.manifest.runs)
        assert big_input >= OFFLOAD_BYTES
        stats = db.compact()  # L0 (and the small run beneath it) reach the threshold: Spark
        assert stats.jobs == 1 and (stats.rows_in, stats.rows_out) == (840, 800)
        (run,) = db.manifest.runs
        assert task_marks(e.name for e in run.ssts) == {0, 1}
        assert dict(db.scan()) == expect

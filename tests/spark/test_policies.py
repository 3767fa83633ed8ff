"""Spark runs every policy's jobs: a leveled push (SSTs lifted from a level into part of the level below)
and a fifo store's periodic job leave exactly what the local executor leaves.

One Spark task per job: with more, the outputs are cut at the tasks' key ranges as well, so the next
leveled job would pick other SSTs and the two stores would diverge in shape (not in content)."""

from __future__ import annotations

import random

import pytest

import lsm
from lsm.inspect import check_database
from tests.spark._util import stored_runs


def _db(path, spark, policy: str) -> lsm.DB:
    return lsm.DB.open(
        str(path),
        lsm.DbOptions(
            clock=lsm.ManualClock(1_000), background_compaction=False, compaction_policy=policy,
            memtable_bytes=8 << 10, target_sst_bytes=4 << 10, max_bytes_for_level_base=4 << 10,
            max_bytes_for_level_multiplier=4, l0_compaction_threshold=2, trivial_move_min_bytes=None,
            periodic_compaction_interval=10_000, spark_session=spark, spark_tasks=1, background_flush=False,
        ),
    )


@pytest.mark.parametrize("policy", ["leveled", "fifo"])
def test_policy_jobs_on_spark_equal_local(spark, tmp_path, policy):
    dbs = {ex: _db(tmp_path / ex, spark, policy) for ex in ("local", "spark")}
    pushes = []
    if policy == "leveled":
        policy_obj = dbs["spark"].engine.compactor.policy
        pick_level = policy_obj.pick_level

        def counted(m):
            plan = pick_level(m)
            if plan is not None:
                pushes.append(plan)
            return plan

        policy_obj.pick_level = counted
    try:
        for step in range(3):
            for ex, db in dbs.items():
                rng = random.Random(step)
                for i in range(900):
                    db.put(b"k%05d" % rng.randrange(2_000), b"v%d" % i * 3, ttl=5_000 if i % 3 else None)
                db.flush()
                db.options.clock.advance(6_000)  # TTL rows expire; after two steps the SSTs are due
                db.compact(executor=ex)
        local, remote = dbs["local"], dbs["spark"]
        assert local.compaction_stats.bytes_out > 0  # the policies' jobs ran (merges, not only drops)
        assert stored_runs(local) == stored_runs(remote)
        assert dict(local.scan()) == dict(remote.scan())
        if policy == "leveled":
            assert len(local.manifest.runs) >= 2
            assert any(p.lifted is not None and p.partial[1] for p in pushes)  # pushes merged on Spark
        for db in dbs.values():
            check_database(db.path)
    finally:
        for db in dbs.values():
            db.close()

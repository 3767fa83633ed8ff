"""The property users rely on: a Spark compaction leaves exactly what the local executor leaves."""

from __future__ import annotations

import pytest

from storage.ssts import open_sst
from tests.spark._util import (
    RewriteFactory,
    build_db,
    comparable_stats,
    stored_runs,
    task_marks,
    visible,
)

TASKS = 3


# Three seeded random workloads (Spark jobs cost ~0.3 s each once the workers are warm); one of them also
# keeps history for as-of reads, so the retention rule is exercised on both executors.
@pytest.mark.parametrize("seed,retention", [(1, 0), (2, 0), (3, 60)])
def test_spark_compaction_equals_local(spark, tmp_path, seed, retention):
    opts = dict(compaction_filters=[RewriteFactory()], history_retention=retention)
    local, _, local_snaps = build_db(tmp_path / "local", seed, **opts)
    remote, _, remote_snaps = build_db(
        tmp_path / "spark", seed, spark_session=spark, spark_tasks=TASKS, **opts
    )
    try:
        assert stored_runs(local) == stored_runs(remote)  # identical inputs
        assert len(local.manifest.l0) >= 1 and len(local.manifest.runs) >= 1
        before = visible(local, local_snaps)

        s_local = local.compact(full=True, executor="local")
        s_spark = remote.compact(full=True, executor="spark")

        # the one output run holds the same versions, byte for byte, however it is split into files
        local_rows, spark_rows = stored_runs(local), stored_runs(remote)
        assert len(spark_rows) == len(local_rows) == 1
        assert spark_rows == local_rows
        assert local_rows[0], "the workload should leave rows"
        # ... and the read path shows the same: scans with expired rows, point reads, snapshot reads
        after = visible(local, local_snaps)
        assert visible(remote, remote_snaps) == after
        # what the open snapshot reads is untouched (filters only see versions no snapshot can see)
        assert [s[1:] for s in after["snapshots"]] != []
        assert [s[1] for s in after["snapshots"]] == [s[1] for s in before["snapshots"]]
        assert comparable_stats(s_spark) == comparable_stats(s_local)
        assert s_local.tombstones_dropped + s_local.expired_dropped + s_local.versions_dropped > 0

        # the work was split into DbOptions.spark_tasks key ranges, one output name space per task
        names = [e.name for e in remote.manifest.runs[0].ssts]
        assert task_marks(names) == set(range(TASKS))
        tick = local.manifest.runs[0].ssts[0].info.creation_timestamp
        for e in remote.manifest.runs[0].ssts:
            assert e.info.creation_timestamp == tick
            with open_sst(remote.sst_path(e.name)) as r:
                r.verify()
                assert r.info == e.info
    finally:
        for s in local_snaps + remote_snaps:
            s.close()
        local.close()
        remote.close()

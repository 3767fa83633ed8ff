"""The Spark executor reports the same purge-lag histogram as the local one: each task counts the rows
it drops, the driver merges the tasks' histograms, and the DB commits the sum to the manifest."""

from __future__ import annotations

from tests.lsm.test_events import Recorder
from tests.spark._util import build_db


def test_spark_purge_lag_equals_local(spark, tmp_path):
    local, _, local_snaps = build_db(tmp_path / "local", 4)
    rec = Recorder()
    remote, _, remote_snaps = build_db(
        tmp_path / "spark", 4, spark_session=spark, spark_tasks=3, event_listeners=[rec]
    )
    try:
        for s in local_snaps + remote_snaps:
            s.close()  # nothing held back: every expired row and tombstone goes in the full compaction
        s_local = local.compact(full=True, executor="local")
        rec.events.clear()
        s_spark = remote.compact(full=True, executor="spark")
        # the job is reported like any other: executor "spark", its stats with the merged histogram
        assert [n for n, _ in rec.events] == ["compaction_begin", "compaction_end"]
        end = rec.events[-1][1]
        assert (end.executor, end.reason, end.error) == ("spark", "manual", None)
        assert end.stats == s_spark and end.outputs == tuple(e.name for e in remote.manifest.runs[0].ssts)
        assert s_spark.execute_seconds > 0 and s_spark.commit_seconds > 0
        assert s_local.purge_lag.count == s_local.tombstones_dropped + s_local.expired_dropped > 0
        assert s_spark.purge_lag == s_local.purge_lag
        assert s_spark.purge_lag.to_dict() == s_local.purge_lag.to_dict()
        assert remote.manifest.purge_lag == local.manifest.purge_lag is not None
        assert remote.purge_lag == local.purge_lag
    finally:
        local.close()
        remote.close()

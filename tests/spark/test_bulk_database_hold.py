"""A Spark bulk load of a `DatabaseLog` on S3 (moto's server) reads the upstream through the checkpoint
its driver holds (lsm.sources.database_hold): the executors get the held log, pickled with the version
it names, and read that version while the upstream has already compacted its files away and collected
with no grace."""

from __future__ import annotations

import random

from lsm.bulk import BulkLoad
from lsm.sources import DatabaseLog
from storage import storage_for
from tests.lsm._bulk_util import open_db
from tests.lsm.test_bulk_database_hold import FAR, fill, sst_names
from tests.spark.test_object_store import secret_options


def test_spark_load_of_an_s3_database_reads_the_planned_version_after_the_upstream_collected(
    spark, s3_server, tmp_path
) -> None:
    up_url = s3_server.new_url("up")
    options, _secret = secret_options(s3_server)
    up = open_db(up_url, history_retention=FAR, object_store_options=options)
    db = open_db(str(tmp_path / "replica"))
    try:
        fill(up, random.Random(11))
        want, planned = dict(up.scan()), up.manifest.last_seq
        job = BulkLoad(db, DatabaseLog(up_url), "primary", engine="spark", spark=spark, tasks=3)
        run, kept = job.runner, []

        def after_the_upstream_collected(tasks: list) -> list[dict]:
            # planned, reserved; the tasks have not read yet: the upstream replaces every SST and collects
            before = sst_names(up)
            up.put(b"after-plan", b"not in this load")
            up.compact(full=True)
            up.gc(grace_ms=0)
            assert not before & sst_names(up)
            st = storage_for(up_url)
            kept.extend(n for n in before if st.exists(f"{up_url}/sst/{n}"))
            assert set(kept) == before  # the checkpoint keeps the planned version's files
            assert {t.slice.source.at for t in tasks} == {up.checkpoints()[0].manifest_id}
            return run(tasks)

        job.runner = after_the_upstream_collected
        stats = job.execute()
        assert dict(db.scan()) == want
        assert stats.frontier == {0: planned + 1}
        up.flush()  # the writer's next commit reads the manifest the hold's release edited
        assert up.checkpoints() == []
    finally:
        db.close()
        up.close()

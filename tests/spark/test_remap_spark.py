"""The remap of an ingested source survives a Spark compaction, and user filters there never see it."""

from __future__ import annotations

import lsm
from compaction.filter import CompactionFilter, CompactionFilterFactory, Decision
from lsm.sources import LogWriter, PartitionedLog


class _Everything(CompactionFilter):
    """Rewrites every value it is shown (module level: Spark workers unpickle it by reference)."""

    name = "everything"

    def filter(self, entry):
        return Decision.change_value(b"rewritten")


class EverythingFactory(CompactionFilterFactory):
    def create(self, ctx):
        return _Everything()


def test_remap_survives_spark_compaction_untouched_by_filters(spark, tmp_path) -> None:
    clock = lsm.ManualClock(1_000)
    with LogWriter(tmp_path / "log") as w:
        for i in range(300):
            w.append(i % 3, b"k%04d" % i, b"v%d" % i)
    opts = lsm.DbOptions(
        clock=clock,
        background_compaction=False,
        history_retention=10**12,
        compaction_filters=[EverythingFactory()],
        spark_session=spark,
        spark_tasks=3,
    )
    with lsm.DB.open(tmp_path / "db", opts) as db:
        for _ in range(3):
            clock.advance(1000)
            db.ingest(  # each batch in a millisecond of its own: one binding per batch (no merge)
                PartitionedLog(tmp_path / "log"), name="ev", batch_records=40, max_records=100,
                progress=lambda _stats: clock.advance(1),
            )
            db.flush()
        before = db.remap("ev").bindings()
        assert len(before) == 9 and before[-1].frontier == {0: 100, 1: 100, 2: 100}
        db.compact(full=True, executor="spark")
        assert db.remap("ev").bindings() == before  # binding rows were not rewritten by the filter
        assert {v for _k, v in db.scan()} == {b"rewritten"}  # while every user row was
    with lsm.DB.open(tmp_path / "db", opts) as db:
        assert db.remap("ev").bindings() == before and db.sources() == ["ev"]

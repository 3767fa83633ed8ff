"""Event listeners (lsm/events.py): flush and compaction begin/end with the right inputs, outputs, stats
and errors, in every mode; a listener that raises is logged and ignored, never breaking the engine."""

from __future__ import annotations

import logging
import os
import threading

import pytest

import lsm
from compaction.filter import CompactionFilter, CompactionFilterFactory
from lsm.events import CompactionInfo, EventListener, FlushInfo

T0 = 1_700_000_000_000


class Recorder(EventListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, FlushInfo | CompactionInfo]] = []
        self.got = threading.Condition()

    def _add(self, name, info) -> None:
        with self.got:
            self.events.append((name, info))
            self.got.notify_all()

    def on_flush_begin(self, info):
        self._add("flush_begin", info)

    def on_flush_end(self, info):
        self._add("flush_end", info)

    def on_compaction_begin(self, info):
        self._add("compaction_begin", info)

    def on_compaction_end(self, info):
        self._add("compaction_end", info)

    def names(self) -> list[str]:
        return [n for n, _ in self.events]

    def wait_for(self, name: str, timeout: float = 30) -> None:
        with self.got:
            assert self.got.wait_for(lambda: name in self.names(), timeout), self.names()


class Raiser(EventListener):
    def on_flush_begin(self, info):
        raise RuntimeError("listener bug in flush_begin")

    def on_flush_end(self, info):
        raise RuntimeError("listener bug in flush_end")

    def on_compaction_begin(self, info):
        raise RuntimeError("listener bug in compaction_begin")

    def on_compaction_end(self, info):
        raise RuntimeError("listener bug in compaction_end")


class Boom(CompactionFilter):
    def filter(self, entry):
        raise KeyError("boom")


class BoomFactory(CompactionFilterFactory):
    def create(self, ctx):
        return Boom()


def open_at(path, *listeners, **kw) -> lsm.DB:
    """A database on a local directory (the failing flush needs one), listeners first."""
    kw.setdefault("background_compaction", False)
    kw.setdefault("clock", lsm.ManualClock(T0))
    return lsm.DB.open(path, lsm.DbOptions(event_listeners=listeners, **kw))


@pytest.mark.parametrize("background_flush", [True, False])
def test_flush_begin_and_end_report_the_memtable_and_its_l0_sst(open_db, background_flush):
    rec = Recorder()
    with open_db(event_listeners=(rec,), background_flush=background_flush) as db:
        for i in range(10):
            db.put(b"k%d" % i, b"v" * 10)
        db.flush()
        assert rec.names() == ["flush_begin", "flush_end"]
        begin, end = rec.events[0][1], rec.events[1][1]
        assert (begin.rows, begin.outputs, begin.seconds, begin.error) == (10, (), 0.0, None)
        assert begin.bytes > 10 * 12 and end.bytes == begin.bytes and end.rows == 10
        assert end.outputs == tuple(e.name for e in db.manifest.l0) and len(end.outputs) == 1
        assert end.seconds > 0 and end.error is None
        db.flush()  # an empty memtable: nothing to flush, no event
        assert len(rec.events) == 2


def test_compaction_events_name_reason_executor_inputs_outputs_and_stats(open_db):
    rec = Recorder()
    with open_db(event_listeners=(rec,), l0_compaction_threshold=2) as db:
        for n in range(2):
            db.put(b"a%d" % n, b"x")
            db.flush()
        l0 = tuple(e.name for e in db.manifest.l0)
        stats = db.compact()
        names = [n for n in rec.names() if n.startswith("compaction")]
        assert names == ["compaction_begin", "compaction_end"]
        begin = next(i for n, i in rec.events if n == "compaction_begin")
        end = next(i for n, i in rec.events if n == "compaction_end")
        assert (begin.reason, begin.executor, begin.outputs, begin.stats) == ("size_tiered", "local", (), None)
        assert sorted(begin.inputs) == sorted(l0) and end.inputs == begin.inputs
        assert end.outputs == tuple(e.name for r in db.manifest.runs for e in r.ssts) and end.error is None
        assert end.stats is not None and end.stats.jobs == 1 and end.stats.rows_out == 2
        # the phases: each measured, all of them in the job's stats and in the handle's totals
        assert stats.plan_seconds > 0 and stats.execute_seconds > 0 and stats.commit_seconds > 0
        assert end.stats.commit_seconds == stats.commit_seconds == db.compaction_stats.commit_seconds
        assert db.compaction_stats.execute_seconds == stats.execute_seconds
        db.put(b"z", b"1")
        rec.events.clear()
        db.compact(full=True)
        assert [i.reason for n, i in rec.events if n == "compaction_begin"] == ["manual"]


def test_background_jobs_run_in_the_worker_and_are_reported(open_db, backend):
    rec = Recorder()
    with open_db(event_listeners=(rec,), l0_compaction_threshold=2, background_compaction=True) as db:
        for n in range(2):
            db.put(b"a%d" % n, b"x")
            db.flush()
        rec.wait_for("compaction_end")
        end = next(i for n, i in rec.events if n == "compaction_end")
        # a memory:// store lives in this process only: its background jobs run here, not in the worker
        assert end.executor == ("local" if backend == "memory" else "worker")
        assert end.reason == "size_tiered" and end.error is None
        assert len(end.inputs) == 2 and end.stats.jobs == 1


def test_failed_compaction_ends_with_its_error_and_no_outputs(open_db):
    rec = Recorder()
    with open_db(event_listeners=(rec,), compaction_filters=[BoomFactory()]) as db:
        db.put(b"a", b"1")
        db.flush()
        l0 = tuple(e.name for e in db.manifest.l0)
        with pytest.raises(KeyError, match="boom"):
            db.compact(full=True)
        names = [n for n in rec.names() if n.startswith("compaction")]
        assert names == ["compaction_begin", "compaction_end"]
        end = rec.events[-1][1]
        assert isinstance(end.error, KeyError) and end.outputs == () and end.stats is None
        assert end.inputs == l0 and tuple(e.name for e in db.manifest.l0) == l0  # nothing committed


def test_failed_flush_ends_with_its_error(tmp_path):
    """On a directory: its SST directory removed is a real I/O fault (an object store's faults are
    injected by the S3 fault proxy in tests of their own)."""
    rec = Recorder()
    path = tmp_path / "db"
    db = open_at(path, rec, background_flush=False)
    try:
        db.put(b"a", b"1")
        os.rmdir(path / "sst")  # a real fault: the L0 SST cannot be created
        with pytest.raises(lsm.DbFailedError) as failed:  # an I/O error puts the store in the failed state
            db.flush()
        assert isinstance(failed.value.__cause__, OSError)
        assert rec.names() == ["flush_begin", "flush_end"]
        assert rec.events[1][1].error is failed.value and rec.events[1][1].outputs == ()
    finally:
        os.mkdir(path / "sst")
        db.close()
    with open_at(path) as db:
        assert db.get(b"a") == b"1"  # the WAL still held it


def test_a_raising_listener_is_logged_and_ignored(open_db, caplog):
    rec = Recorder()
    with caplog.at_level(logging.ERROR, logger="lsm.events"):
        with open_db(event_listeners=(Raiser(), rec), l0_compaction_threshold=2, background_flush=False) as db:
            for n in range(2):
                db.put(b"a%d" % n, b"x")
                db.flush()
            stats = db.compact()
            assert stats.jobs == 1 and len(db.manifest.runs) == 1
            assert db.get(b"a0") == b"x"
    # the listener after the raising one saw everything, and each raise was logged with its method
    assert rec.names() == ["flush_begin", "flush_end"] * 2 + ["compaction_begin", "compaction_end"]
    logged = [r.getMessage() for r in caplog.records if r.name == "lsm.events"]
    assert len(logged) == 6 and all("raised" in m for m in logged)
    assert any("on_compaction_end" in m for m in logged) and caplog.records[0].exc_info is not None
    with open_db() as db:
        assert db.get(b"a1") == b"x"


def test_event_listeners_must_be_event_listeners():
    with pytest.raises(TypeError, match="EventListener"):
        lsm.DbOptions(event_listeners=[object()])
    assert lsm.DbOptions(event_listeners=[Recorder()]).event_listeners[0].events == []

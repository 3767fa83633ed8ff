"""db.ingest(..., times="source"): commit times from the source's own progress markers (LogWriter.advance)."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from lsm.sources import DatabaseLog, LogWriter, PartitionedLog, verify_source
from lsm.timeline import parse_time

FAR = 10**12
HOUR = 3_600_000
WEEK0 = parse_time("2024-03-04T00:00:00Z")  # a replayed week of history, long before the wall clock


@pytest.fixture
def db_defaults():
    return {"history_retention": FAR}


@pytest.fixture
def open_src(open_db, new_root):
    """open_src(name=None, clock=None, **kw): a store on the test's backend (`db_root`, or a fresh root
    called `name`) on a SystemClock unless `clock` is given: the source's times drive these stores, the
    clock plays no part (a ManualClock's reading at close would become the watermark)."""
    return lambda name=None, clock=None, **kw: open_db(
        clock or lsm.SystemClock(), path=None if name is None else new_root(name), **kw
    )


def _small_log(d: str) -> None:
    with LogWriter(d) as w:
        w.append(0, b"a", b"1", event_ts=5)
        w.append(1, b"b", b"2", event_ts=7)
        w.advance(10)
        w.append(0, b"c", b"3", event_ts=12)
        w.append(1, b"d", b"4", event_ts=25)  # not below the source's progress (20): waits
        w.advance(20)
        w.append(0, b"e", b"5", event_ts=21)  # after the last marker: waits


def test_batches_commit_at_the_source_progress_and_records_at_or_above_it_wait(tmp_path, open_src) -> None:
    log = str(tmp_path / "log")
    _small_log(log)
    with open_src() as db:  # a SystemClock: its time plays no part
        st = db.ingest(PartitionedLog(log), "s", times="source")
        assert st.frontier == {0: 4, 1: 2}  # markers take offsets: 0:[a M c M e], 1:[b M d M]
        assert db.remap("s").rows() == [(9, 0, 2), (9, 1, 2), (19, 0, 4), (19, 1, 2)]
        assert db.get(b"c") == b"3" and db.get(b"d") is None and db.get(b"e") is None
        assert db.snapshot_at(9).get(b"a") == b"1" and db.snapshot_at(9).get(b"c") is None
        with LogWriter(log) as w:
            w.advance(30)
        st = db.ingest(PartitionedLog(log), "s", times="source")
        assert st.records == 2 and db.get(b"d") == b"4" and db.get(b"e") == b"5"
        last = db.remap("s").bindings()[-1]
        assert (last.ts, last.frontier) == (29, {0: 6, 1: 5})
        with pytest.raises(lsm.NotYetCompleteError):  # the source's time is the store's: 29 is not complete
            db.remap("s").as_of(29)


def test_a_partition_without_progress_holds_every_other_back(tmp_path, open_src) -> None:
    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1", event_ts=5)
        w.advance(10, [0])
        w.append(1, b"b", b"2", event_ts=5)  # partition 1 has no marker: the source's progress is unknown
    with open_src() as db:
        assert db.ingest(PartitionedLog(log), "s", times="source").records == 0
        with LogWriter(log) as w:
            w.advance(10, [1])
        assert db.ingest(PartitionedLog(log), "s", times="source").records == 2


def test_other_writers_are_refused_while_the_source_drives_the_clock(tmp_path, open_src) -> None:
    log = str(tmp_path / "log")
    _small_log(log)
    with open_src() as db:
        db.ingest(PartitionedLog(log), "s", times="source")
        seq = db.seq
        with pytest.raises(lsm.ClockError, match="driven by source 's'"):
            db.put(b"x", b"y")
        with pytest.raises(lsm.ClockError, match="driven by source 's'"):
            db.delete(b"a")
        assert db.seq == seq and db.get(b"x") is None


def test_a_source_time_below_the_watermark_is_a_clock_error_naming_both(tmp_path, open_src) -> None:
    log = str(tmp_path / "log")
    _small_log(log)
    clock = lsm.ManualClock(FAR)
    with open_src(clock=clock) as db:
        db.put(b"k", b"v")  # a commit at FAR ms
        with pytest.raises(lsm.ClockError, match=rf"time 9 ms is below the store's watermark {FAR} ms"):
            db.ingest(PartitionedLog(log), "s", times="source")
        assert db.get(b"a") is None
        with pytest.raises(lsm.UnknownSourceError):
            db.remap("s")


def test_a_source_in_another_time_domain_than_its_bindings_is_refused(tmp_path, open_src) -> None:
    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1", event_ts=5)
    clock = lsm.ManualClock(FAR)
    with open_src(clock=clock) as db:
        db.ingest(PartitionedLog(log), "s")  # store times: a binding at FAR
        with LogWriter(log) as w:
            w.append(0, b"b", b"2", event_ts=6)
            w.advance(10)
        with pytest.raises(lsm.ClockError, match=f"below the time {FAR} ms of the newest binding"):
            db.ingest(PartitionedLog(log), "s", times="source")
        assert db.get(b"b") is None


def test_broken_promises_and_missing_event_times_are_refused(tmp_path, open_src) -> None:
    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1", event_ts=5)
        w.advance(10)
        w.append(0, b"b", b"2", event_ts=7)  # below the marker before it
        w.advance(20)
    with open_src() as db, pytest.raises(lsm.SourceError, match="event_ts 7 lies below"):
        db.ingest(PartitionedLog(log), "s", times="source")
    log2 = str(tmp_path / "log2")
    with LogWriter(log2) as w:
        w.append(0, b"a", b"1")
        w.advance(10)
    with open_src("db2") as db, pytest.raises(ValueError, match="needs an int event_ts"):
        db.ingest(PartitionedLog(log2), "s", times="source")


def test_a_source_without_progress_and_bulk_loads_are_refused(tmp_path, open_src) -> None:
    with open_src("up") as u:
        u.put(b"k", b"v")
        up = u.path
    with open_src() as db:
        with pytest.raises(ValueError, match="needs a source that reports its progress"):
            db.ingest(DatabaseLog(up), "u", times="source")
        db.put(b"x", b"y")  # refused before any commit: the clock is not driven by the source
        log = str(tmp_path / "log")
        _small_log(log)
        with pytest.raises(ValueError, match="engine='stream' only"):
            db.ingest(PartitionedLog(log), "s", times="source", engine="local")
        with pytest.raises(ValueError, match="times must be one of"):
            db.ingest(PartitionedLog(log), "s", times="event")


def test_markers_are_no_records_and_the_log_still_passes_verify_source(tmp_path, open_src) -> None:
    log = str(tmp_path / "log")
    _small_log(log)
    src = PartitionedLog(log)
    assert verify_source(src) == []
    assert [(r.offset, r.key) for r in src.read(0, 0)] == [(0, b"a"), (2, b"c"), (4, b"e")]
    assert src.progress(0) == [(1, 10), (3, 20)] and src.progress(1, 2) == [(3, 20)]
    with open(f"{log}/0.log", "rb") as f:
        assert f.read(6) == b"LSMP\x00\x02"  # a file holding a marker is format version 2
    # a store-times ingest and a bulk load skip markers as well
    with open_src() as db:
        assert db.ingest(src, "s").records == 5
    with open_src("db2") as db:
        assert db.ingest(PartitionedLog(log), "s", engine="local").frontier == {0: 5, 1: 4}
        assert db.get(b"e") == b"5"


def test_a_replayed_week_of_cdc_history_lands_in_the_source_time(tmp_path, open_src) -> None:
    """A week of hourly-marked history from two partitions, ingested in several calls as a producer
    writes it: the store's time maps, as-of reads and remap bindings are in the source's time."""
    rng = random.Random(7)
    log = str(tmp_path / "log")
    events: list[tuple[int, bytes, bytes]] = []  # (event_ts, key, value)
    db = open_src()  # a SystemClock (2026+): irrelevant, the times are the source's
    with LogWriter(log) as w:
        src = PartitionedLog(log)
        for h in range(7 * 24):
            for p in (0, 1):
                ts = sorted(
                    rng.randrange(WEEK0 + h * HOUR, WEEK0 + (h + 1) * HOUR) for _ in range(rng.randrange(3))
                )
                for t in ts:
                    key, value = f"{p}:k{rng.randrange(20)}".encode(), f"{t}".encode()  # keys per partition
                    w.append(p, key, value, event_ts=t)
                    events.append((t, key, value))
            w.advance(WEEK0 + (h + 1) * HOUR)
            if h % 24 == 23:
                db.ingest(src, "cdc", times="source", batch_records=rng.randrange(1, 50))
    try:
        commits = [WEEK0 + (h + 1) * HOUR - 1 for h in range(7 * 24)]
        bindings = db.remap("cdc").bindings()
        assert {b.ts for b in bindings} <= set(commits) and bindings[-1].ts == commits[-1]
        with pytest.raises(lsm.ClockError):
            db.put(b"x", b"y")
        for t in [commits[0], *rng.sample(commits, 12)] + [c + 600_000 for c in rng.sample(commits, 6)]:
            model: dict[bytes, bytes] = {}
            for ets, key, value in sorted(events, key=lambda e: e[0]):
                if (ets - WEEK0) // HOUR * HOUR + WEEK0 + HOUR - 1 <= t:  # its hour's commit
                    model[key] = value
            snap = db.snapshot_at(t)
            try:
                assert dict(snap.scan()) == model, t
            finally:
                snap.close()
            b = db.remap("cdc").as_of(t)  # the time maps (whole seconds) are in the source's time too
            assert b.ts <= t and db.timestamp_for_seq(db.seq_for_timestamp(b.ts)) == b.ts // 1000 * 1000
    finally:
        db.close()


def test_verify_source_checks_the_progress_markers(new_root) -> None:
    """A log in a local directory and one of segment objects on an object store (markers in each)."""
    log = new_root("log")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1", event_ts=5)
        w.advance(10)
        w.append(0, b"b", b"2", event_ts=7)  # breaks the promise of the marker before it
    assert verify_source(PartitionedLog(log)) == [
        "partition 0 offset 2: event_ts 7 below the progress 10 before it"
    ]

    class Liar(type(PartitionedLog(log))):  # a local log's class or an object-store log's
        def progress(self, partition, start=0, stop=None):
            return [(0, 1), (0, 2)]  # a repeated offset, and a record's

    problems = verify_source(Liar(log))
    assert any("must ascend" in p for p in problems) and any("at record offsets [0]" in p for p in problems)


# new_root is function-scoped, but each example opens a root of its own with it
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("rec"), st.integers(0, 2), st.integers(0, 30), st.integers(0, 5)),
            st.tuples(st.just("adv"), st.integers(1, 20), st.sets(st.integers(0, 2), max_size=3)),
            st.tuples(st.just("ingest"), st.integers(1, 4)),
        ),
        max_size=40,
    )
)
def test_source_time_bindings_hold_exactly_the_records_below_their_time(
    tmp_path_factory, open_src, ops
) -> None:
    """Random logs of three partitions (records out of order above their partition's progress, markers
    on some partitions), ingested at random points with random batch sizes: every binding at ts holds
    exactly the records below its frontier, each with event_ts <= ts; a call leaves every partition at
    its end or at a record at or above the step it last committed; the store is their last-wins state."""
    tmp = tmp_path_factory.mktemp("m")
    log = str(tmp / "log")
    progress = {0: 0, 1: 0, 2: 0}  # each partition's greatest marker so far
    clock = 0  # marker times only grow
    entries: dict[int, list[tuple]] = {0: [], 1: [], 2: []}  # per partition: ("r", key, ets) | ("m", ts)
    n = 0
    with LogWriter(log) as w, open_src(tmp.name) as db:
        src = PartitionedLog(log)
        for op in ops:
            if op[0] == "rec":
                _, p, dt, k = op
                ets = progress[p] + dt  # never below the partition's promise
                w.append(p, f"{p}:{k}".encode(), str(n).encode(), event_ts=ets)
                entries[p].append(("r", f"{p}:{k}".encode(), str(n).encode(), ets))
                n += 1
            elif op[0] == "adv" and op[2]:
                clock += op[1]
                w.advance(clock, sorted(op[2]))
                for p in op[2]:
                    progress[p] = clock
                    entries[p].append(("m", clock))
            elif op[0] == "ingest":
                st_ = db.ingest(src, "s", times="source", batch_records=op[1])
                if not st_.batches:
                    continue
                last_ts = db.remap("s").bindings()[-1].ts
                for p, off in st_.frontier.items():  # maximal: what waits is at or above the last step
                    nxt = next((e for e in entries[p][off:] if e[0] == "r"), None)
                    assert nxt is None or nxt[3] > last_ts, (p, off, nxt, last_ts)
        if not any(e[0] == "r" for es in entries.values() for e in es):
            return
        try:
            bindings = db.remap("s").bindings()
        except lsm.UnknownSourceError:
            return
        assert [b.ts for b in bindings] == sorted(b.ts for b in bindings)
        for b in bindings:
            model = {}
            for p, off in b.frontier.items():
                for e in entries[p][:off]:
                    if e[0] == "r":
                        assert e[3] <= b.ts, (b, e)
                        model[e[1]] = e[2]
            snap = db.snapshot_at_seq(b.seq)
            try:
                assert dict(snap.scan()) == model, b
            finally:
                snap.close()


def test_a_source_time_in_the_far_future_is_refused(tmp_path, open_src) -> None:
    """Issue 32 defect 6: a progress marker at 9999-12-31 made the ingest commit there, and the store's
    watermark with it: after a reopen every put raised ClockError. Source times obey the skew guard as
    clock readings do (whatever the user clock: a ManualClock's exemption is for the clock moved on
    purpose, not for a source's times); the records before the bad time still commit."""
    log = str(tmp_path / "log")
    with LogWriter(log) as w:
        w.append(0, b"a", b"1", event_ts=WEEK0)
        w.advance(WEEK0 + HOUR)
        w.append(0, b"far", b"2", event_ts=WEEK0 + HOUR)
        w.advance(253402300799000)  # 9999-12-31T23:59:59Z
    for name, clock in (("system", lsm.SystemClock()), ("manual", lsm.ManualClock(WEEK0))):
        with open_src(name, clock) as db:
            path = db.path
            with pytest.raises(lsm.ClockError, match="max_clock_skew_ms=86400000"):
                db.ingest(PartitionedLog(log), "s", times="source")
            # the batch at the far time wrote nothing; the one before it committed
            assert db.get(b"a") == b"1" and db.get(b"far") is None and db.seq == 1
            assert db.remap("s").frontier == {0: 2}
        with lsm.DB.open(path) as db:  # a later writer is not held back by the refused time
            assert db.manifest.clock_watermark == WEEK0 + HOUR - 1
            db.put(b"b", b"3")
    with open_src("off", max_clock_skew_ms=None) as db:  # the guard off: the time is taken
        db.ingest(PartitionedLog(log), "s", times="source")
        assert db.get(b"far") == b"2" and db.get_entry(b"far").ts == 253402300799000 - 1

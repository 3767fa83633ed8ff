"""The remap's upper, exact as-of reads of an ingested store, one binding per time, and remap compaction
driven by the store's compaction.

* An answer as of a time, from the remap or the store, is either refused (`NotYetCompleteError`) or final:
  random ingests, clock moves and questions, every answer asked again after every later step.
* `snapshot_at(t)` shows exactly the records below `remap.as_of(t).frontier`, also for commits closer
  together than the seq tracker's 30 s (the issue's scenario: ingests at T0 and T0 + 10 s, read at
  T0 + 15 s).
* Bindings committed in the same millisecond are one binding, in `rows()` and in the store.
* A compaction that advances the history floor compacts the remap (no 256-batch wait).

The stores are on every backend; the logs they ingest are local directories.
"""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from lsm.remap import Binding, Remap
from lsm.remap_store import host, source_prefix
from lsm.sources import LogWriter, PartitionedLog

T0 = 1_700_000_000_000
FAR = 10**12  # a history window that keeps everything


@pytest.fixture
def db_defaults() -> dict:
    return {"history_retention": FAR}


def records_below(frontier: dict[int, int] | None) -> set[bytes]:
    """The keys of the records below `frontier` (key p<partition>-<offset>, one per record)."""
    return {b"p%d-%d" % (p, o) for p, end in (frontier or {}).items() for o in range(end)}


def stored_binding_rows(db: lsm.DB, name: str) -> int:
    pre = source_prefix(name)
    return sum(1 for _ in host(db).scan_raw(pre + b"\x00" * 7 + b"\x01", pre[:-1] + b"\x01"))


# -- upper ------------------------------------------------------------------------------------------------
def test_a_remap_answers_only_below_its_upper() -> None:
    r = Remap("e", [Binding(1000, 1, {0: 3}), Binding(2000, 2, {0: 5})], upper=2000)
    assert r.as_of(1999).frontier == {0: 3} and r.rows(as_of=1999) == [(1000, 0, 3)]
    for t in (2000, 5000):
        with pytest.raises(lsm.NotYetCompleteError, match="complete for times before 2000 ms"):
            r.as_of(t)
        with pytest.raises(lsm.NotYetCompleteError):
            r.rows(as_of=t)
    assert r.compact(1500).upper == 2000  # compaction keeps what is complete
    assert Remap("e", r.bindings()).as_of(5000).frontier == {0: 5}  # plain data: no upper


def test_the_issue_example_upper_of_the_store(tmp_path, open_db) -> None:
    """`as_of(5000)` at clock 5000 was answered, and a later ingest at 5000 changed the answer."""
    clock = lsm.ManualClock(1000)
    with LogWriter(tmp_path / "log") as w, open_db(clock) as db:
        log = PartitionedLog(tmp_path / "log")
        w.append(0, b"p0-0", b"v")
        db.ingest(log, name="e")
        clock.set(5000)
        r = db.remap("e")
        assert r.upper == 5000
        with pytest.raises(lsm.NotYetCompleteError):
            r.as_of(5000)
        with pytest.raises(lsm.NotYetCompleteError):
            db.snapshot_at(5000)
        assert r.as_of(4999).frontier == {0: 1}
        w.append(0, b"p0-1", b"v")
        db.ingest(log, name="e")  # lands at 5000: the refused question would have had another answer
        clock.advance(1)
        assert db.remap("e").as_of(5000).frontier == {0: 2} and db.remap("e").as_of(4999).frontier == {0: 1}


def test_a_read_only_handle_is_complete_up_to_the_watermark_recorded_at_close(tmp_path, open_db) -> None:
    clock = lsm.ManualClock(1000)
    with LogWriter(tmp_path / "log") as w:
        w.append(0, b"p0-0", b"v")
    with open_db(clock) as db:
        db.ingest(PartitionedLog(tmp_path / "log"), name="e")
        clock.set(1500)  # the writer's clock moved on; closing records it
    with open_db(lsm.ManualClock(9000), read_only=True) as ro:  # the reader's clock is ahead
        r = ro.remap("e")
        assert r.upper == 1500 and r.as_of(1499).frontier == {0: 1}
        with pytest.raises(lsm.NotYetCompleteError):
            ro.snapshot_at(1500)
        with ro.snapshot_at(1499) as snap:
            assert dict(snap.scan()) == {b"p0-0": b"v"}


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("ingest"), st.lists(st.integers(0, 2), min_size=1, max_size=6), st.integers(1, 4)),
        st.tuples(st.just("adv"), st.sampled_from([0, 1, 1, 2, 7, 12_000, 31_000])),
        st.tuples(st.just("ask"), st.integers(-40_000, 3)),
        st.tuples(st.just("compact")),
    ),
    min_size=1,
    max_size=30,
)


# Not on S3: 30 examples of up to 30 ingests and compactions are a minute of requests there, through the
# code memory:// runs.
@pytest.mark.parametrize("backend", ["local", "memory"])
# new_root is function-scoped, but each example opens a root of its own with it
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_an_answer_is_refused_or_final_and_the_store_agrees_with_the_remap(open_db, new_root, backend, ops) -> None:
    clock = lsm.ManualClock(T0)
    answers: dict[int, tuple] = {}  # t -> (remap's frontier or None, keys of snapshot_at(t))
    refused = 0
    with tempfile.TemporaryDirectory() as d, LogWriter(f"{d}/log") as w, open_db(
        clock, path=f"{d}/db" if backend == "local" else new_root(os.path.basename(d))
    ) as db:
        log = PartitionedLog(f"{d}/log")

        def ask(t: int) -> None:
            nonlocal refused
            try:
                b = db.remap("e").as_of(t)
            except lsm.NotYetCompleteError:
                with pytest.raises(lsm.NotYetCompleteError):
                    db.snapshot_at(t)
                assert t not in answers, t  # once answered, never refused again (upper never goes back)
                refused += 1
                return
            with db.snapshot_at(t) as snap:
                keys = set(dict(snap.scan()))
            frontier = None if b is None else b.frontier
            assert keys == records_below(frontier), t  # the store as of t holds what the remap says
            got = (frontier, keys)
            assert answers.setdefault(t, got) == got, t  # and the answer never changes

        for op in ops + [("adv", 1), ("ask", -1)]:
            if op[0] == "ingest":
                for p in op[1]:
                    w.append(p, b"p%d-%d" % (p, w.end(p)), b"v")
                if db.sources() or w.end(0) + w.end(1) + w.end(2):
                    db.ingest(log, name="e", batch_records=op[2])
            elif op[0] == "adv":
                clock.advance(op[1])
            elif op[0] == "compact":
                db.flush()
                db.compact(full=True)
            elif db.sources():
                ask(clock.now() + op[1])
            for t in list(answers):
                ask(t)


def test_the_issue_scenario_store_and_remap_agree_inside_30_seconds(tmp_path, open_db) -> None:
    """Ingests at T0, T0 + 10 s and T0 + 20 s, read at T0 + 15 s: the remap said offsets up to 4, the
    snapshot (through the 30 s seq tracker, which recorded only T0) showed up to 2."""
    clock = lsm.ManualClock(T0)
    with LogWriter(tmp_path / "log") as w, open_db(clock) as db:
        log = PartitionedLog(tmp_path / "log")
        for i in range(3):
            w.append(0, b"p0-%d" % i, b"v")
        db.ingest(log, name="e")
        clock.advance(10_000)
        for i in range(3, 5):
            w.append(0, b"p0-%d" % i, b"v")
        db.ingest(log, name="e")
        clock.advance(10_000)
        w.append(0, b"p0-5", b"v")
        db.ingest(log, name="e")  # at T0 + 20 s: T0 + 15 s is no longer "after the last commit"
        clock.advance(1)
        t = T0 + 15_000
        assert db.remap("e").as_of(t).frontier == {0: 5}
        with db.snapshot_at(t) as snap:
            assert set(dict(snap.scan())) == records_below({0: 5})
        with db.snapshot_at(T0 + 9_999) as snap:
            assert set(dict(snap.scan())) == records_below({0: 3})
        assert dict(db.scan(as_of=t)) == dict.fromkeys(sorted(records_below({0: 5})), b"v")


# -- one binding per time ---------------------------------------------------------------------------------
def test_bindings_of_one_millisecond_merge_in_rows_and_in_the_store(tmp_path, open_db) -> None:
    """The issue's example: rows() was [(3000,0,4),(3000,1,1),(3000,0,6),(3000,1,1)]."""
    r = Remap("e", [Binding(3000, 1, {0: 4, 1: 1}), Binding(3000, 2, {0: 6, 1: 1})])
    assert r.rows() == [(3000, 0, 6), (3000, 1, 1)] and r.bindings() == [Binding(3000, 2, {0: 6, 1: 1})]
    clock = lsm.ManualClock(3000)
    with LogWriter(tmp_path / "log") as w, open_db(clock) as db:
        for i in range(6):
            w.append(0, b"p0-%d" % i, b"v")
        w.append(1, b"p1-0", b"v")
        stats = db.ingest(PartitionedLog(tmp_path / "log"), name="e", batch_records=4)
        assert stats.batches == 2  # two commits in the same millisecond
        clock.advance(1)
        r = db.remap("e")
        assert r.rows() == [(3000, 0, 6), (3000, 1, 1)]
        assert len(r) == 1 and stored_binding_rows(db, "e") == 1  # the store keeps one binding per time
        with db.snapshot_at(3000) as snap:
            assert set(dict(snap.scan())) == records_below(r.as_of(3000).frontier)


# -- remap compaction with the store's --------------------------------------------------------------------
def test_a_compaction_that_advances_the_history_floor_compacts_the_remap(tmp_path, open_db) -> None:
    clock = lsm.ManualClock(T0)
    with LogWriter(tmp_path / "log") as w, open_db(clock, history_retention=5_000) as db:
        for i in range(20):
            w.append(0, b"k%d" % (i % 4), b"v%d" % i)  # overwrites: compaction drops the shadowed versions
        db.ingest(PartitionedLog(tmp_path / "log"), name="e", batch_records=2, progress=lambda _s: clock.advance(1))
        db.flush()  # inside the window: drops nothing
        clock.advance(60_000)
        assert len(db.remap("e")) == 10 and db.remap("e").since is None
        floor = db.manifest.history_floor
        db.compact(full=True)
        assert db.manifest.history_floor > floor  # the compaction dropped history ...
        r = db.remap("e")
        assert r.since == clock.now() - 5_000  # ... and the remap followed, without 256 batches
        assert r.bindings() == [Binding(r.since, r.bindings()[0].seq, {0: 20})]
        assert stored_binding_rows(db, "e") == 1
        with pytest.raises(lsm.RetentionError):
            r.as_of(T0 + 5_000)


def test_remap_compaction_deletes_every_stored_binding_of_one_time(open_db) -> None:
    """Rows of two bindings at one ts (as a bulk load or an older store leaves them): the remap shows the
    newest, and compacting it deletes both rows, so none is left before `since`."""
    from lsm import ingest as ingest_mod
    from lsm.remap_store import binding_key, encode_binding

    clock = lsm.ManualClock(1000)
    with open_db(clock) as db:
        for frontier in ({0: 2}, {0: 4}):
            host(db).commit_rows(
                lambda ts, seq, f=frontier: ([(binding_key("e", seq), None, encode_binding(ts, f))], 0), True
            )
        clock.advance(10)
        assert stored_binding_rows(db, "e") == 2 and db.remap("e").rows() == [(1000, 0, 4)]
        assert ingest_mod.compact_remap(db, "e", 1005) is not None
        r = db.remap("e")  # reading it again: no row of the old pair lies before since
        assert r.since == 1005 and r.bindings() == [Binding(1005, 2, {0: 4})]
        assert stored_binding_rows(db, "e") == 1

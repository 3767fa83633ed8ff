"""Transactions across partitions (lsm.ingest_tx): a model test over random multi-partition logs with
interleaved transactions (some never complete), random batch sizes, ingests cut short and reopens (a
resume from the durable state), streaming and bulk; and the rules one at a time."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from lsm.ingest_tx import TxState, load_pending, temp_prefix
from lsm.remap import Pending
from lsm.sources import LogWriter, PartitionedLog, SourceRecord
from tests.compaction._util import fast_tmp
from tests.lsm.test_ingest import ListSource

PARTS = 3


@st.composite
def logs(draw):
    """(events, txs): events in append order, each (partition, key, tx id or None, tx_end); txs maps a
    tx id to whether it can complete. Keys are unique per record."""
    txs: dict[str, bool] = {}
    items: list[tuple[str | None, int]] = []  # (tx id or None, partition) in a random order
    for t in range(draw(st.integers(0, 5))):
        name = f"T{t}"
        parts = draw(st.lists(st.integers(0, PARTS - 1), min_size=1, max_size=5))
        items += [(name, p) for p in parts]
        txs[name] = True
    items += [(None, p) for p in draw(st.lists(st.integers(0, PARTS - 1), max_size=12))]
    items = draw(st.permutations(items))
    counts: dict[str, dict[int, int]] = {}
    for name, p in items:
        if name is not None:
            counts.setdefault(name, {}).setdefault(p, 0)
            counts[name][p] += 1
    events = []
    seen: dict[str, dict[int, int]] = {}
    ends: dict[str, object] = {}
    for name, c in counts.items():
        end_p = draw(st.sampled_from(sorted(c)))
        how = draw(st.sampled_from(["dict", "true", "no marker", "short"] if len(c) == 1 else ["dict", "no marker", "short"]))
        if how == "no marker":
            txs[name] = False
            ends[name] = None
        elif how == "true":
            ends[name] = (end_p, True)
        else:
            want = dict(c)
            if how == "short":  # the marker counts a record that never comes
                txs[name] = False
                want[draw(st.sampled_from(sorted(c)))] += 1
            ends[name] = (end_p, want)
    for i, (name, p) in enumerate(items):
        key = b"k%03d" % i
        if name is None:
            events.append((p, key, None, False))
            continue
        seen.setdefault(name, {}).setdefault(p, 0)
        seen[name][p] += 1
        end = False
        if ends[name] is not None and ends[name][0] == p and seen[name][p] == counts[name][p]:
            end = ends[name][1]  # the last record of the transaction in its end partition
        events.append((p, key, name, end))
    return events, txs


def model(events, bindings, tx_order: str):
    """For each binding: (visible {key: value}, Pending) as the rules say, and the order transactions
    became visible in."""
    offsets: list[tuple[int, int]] = []
    per: dict[int, int] = {}
    for p, *_ in events:
        offsets.append((p, per.get(p, 0)))
        per[p] = per.get(p, 0) + 1
    marker_at: dict[str, tuple] = {}  # tx -> (binding index where read, partition, offset)
    out = []
    visible_tx: list[str] = []
    for j, b in enumerate(bindings):
        below = [(e, o) for e, o in zip(events, offsets, strict=True) if o[1] < b.frontier.get(o[0], 0)]
        for (p, _k, tx, end), (_, off) in below:
            if end and tx not in marker_at:
                marker_at[tx] = (j, p, off)
        recs_below: dict[str, int] = {}
        for (_p, _k, tx, _e), _o in below:
            if tx is not None:
                recs_below[tx] = recs_below.get(tx, 0) + 1
        total = {tx: sum(1 for e in events if e[2] == tx) for tx in recs_below}
        complete = {
            tx for tx in marker_at if recs_below.get(tx) == total[tx] and _count_ok(events, tx)
        }
        if tx_order == "arrival":
            vis = complete
        else:
            vis = set()
            for tx in sorted(marker_at, key=marker_at.get):
                if tx not in complete:
                    break
                vis.add(tx)
        for tx in sorted(vis - set(visible_tx), key=marker_at.get):
            visible_tx.append(tx)
        state = {k: k for (_p, k, tx, _e), _o in below if tx is None or tx in vis}
        pending = Pending(sum(n for tx, n in recs_below.items() if tx not in vis), len(set(recs_below) - vis))
        waiting = {k for (_p, k, tx, _e), _o in below if tx is not None and tx not in vis}
        out.append((state, pending, waiting))
    return out, visible_tx, marker_at


def _count_ok(events, tx) -> bool:
    """The marker's counts equal the records the log holds (a "short" transaction never completes)."""
    end = next(e[3] for e in events if e[2] == tx and e[3])
    if end is True:
        return True
    have: dict[int, int] = {}
    for p, _k, t, _e in events:
        if t == tx:
            have[p] = have.get(p, 0) + 1
    return have == end


class _TickClock:
    """A clock at least one millisecond later at every reading (and never behind the host clock, so a
    reopened store's next reading is not below its watermark): every batch commits in a millisecond of
    its own (batches of one millisecond merge into one binding, and these tests count bindings)."""

    last = 0  # shared by every instance: readings increase across handles

    def now(self) -> int:
        _TickClock.last = max(_TickClock.last + 1, time.time_ns() // 1_000_000)
        return _TickClock.last


@pytest.fixture
def db_defaults():
    return {"history_retention": 10**12}


@pytest.fixture
def open_tick(open_db):
    """open_tick(path=None, clock=None): the store at `path` (default: db_root), on a `_TickClock` unless
    `clock` is given."""
    return lambda path=None, clock=None: open_db(clock or _TickClock(), path=path)


# Not on S3: 120 examples of up to 9 ingests and reopens are over a minute of requests there, and test no
# code memory:// does not run. A local store lives in /dev/shm with the log (fast_tmp): fsyncs on a disk
# make the examples five times slower.
@pytest.mark.parametrize("backend", ["local", "memory"])
@pytest.mark.parametrize("tx_order", ["arrival", "commit"])
# new_root is function-scoped, but each example opens a root of its own with it
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    log=logs(),
    steps=st.lists(
        st.tuples(
            st.integers(0, 12),  # events appended before this step
            st.integers(1, 4),  # batch_records
            st.one_of(st.none(), st.integers(0, 6)),  # max_records (an ingest cut short, as by a kill)
            st.sampled_from(["stream", "stream", "stream", "local"]),
            st.booleans(),  # close and reopen after (a resume from the durable state only)
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_every_binding_shows_complete_transactions_only_and_temp_holds_the_rest(
    open_tick, new_root, backend, tx_order, log, steps
) -> None:
    events, _txs = log
    d = fast_tmp("lsm-ingest-tx-")  # the log, local on every backend
    root = d + "/db" if backend == "local" else new_root(os.path.basename(d))
    # Every batch commits in a millisecond of its own: batches of one millisecond merge into one binding
    # (lsm.remap), and the model checks the state at each batch's binding, with the end-marker order the
    # batches read the markers in.
    clock = lsm.ManualClock(1_700_000_000_000)

    def tick(_stats: object) -> None:
        clock.advance(1)

    db = None
    try:
        db = open_tick(root, clock)
        w = LogWriter(d + "/log")
        written = 0
        for n, batch, limit, engine, reopen in [*steps, (len(events), 3, None, "stream", True)]:
            for p, key, tx, end in events[written : written + n]:
                w.append(p, key, key, tx=tx, tx_end=end)
            written = min(len(events), written + n)
            w.flush()
            src = PartitionedLog(d + "/log")
            if engine == "local":
                db.ingest(src, name="s", engine="local", tasks=2, tx_order=tx_order)
                clock.advance(1)
            else:
                db.ingest(src, name="s", batch_records=batch, max_records=limit, tx_order=tx_order, progress=tick)
            if reopen:
                db.close()
                db = open_tick(root, clock)
        w.close()
        try:
            bindings = db.remap("s").bindings()
        except lsm.UnknownSourceError:
            assert not events
            return
        want, order, marker_at = model(events, bindings, tx_order)
        seen: list[str] = []
        for b, (state, pending, waiting) in zip(bindings, want, strict=True):
            snap = db.snapshot_at_seq(b.seq)
            got = dict(snap.scan())
            assert got == state, (b, got, state)
            assert load_pending(db, "s", b.seq) == pending
            assert {r[2] for r in TxState.load(db, "s", b.seq).records.values()} == waiting  # TEMP itself
            for tx in order:  # the order transactions became visible in
                if tx not in seen and all(e[1] in got for e in events if e[2] == tx):
                    seen.append(tx)
        assert seen == order
        if tx_order == "commit":  # visibility follows end-marker order
            assert order == sorted(order, key=marker_at.get)
        assert db.remap("s").pending == want[-1][1]
    finally:
        if db is not None:
            db.close()  # also after the early return: a DB left open keeps its threads and files
        shutil.rmtree(d, ignore_errors=True)


def test_the_issue_example_is_visible_in_one_binding(tmp_path, open_tick) -> None:
    """`t0` and `t1` of one transaction in two partitions: no binding shows one without the other."""
    with LogWriter(tmp_path / "log") as w:
        w.append(0, b"t0", b"v", tx="T")
        w.append(1, b"t1", b"v", tx="T", tx_end={0: 1, 1: 1})
    db = open_tick()
    try:
        db.ingest(PartitionedLog(tmp_path / "log"), name="s", batch_records=1)
        views = [dict(db.snapshot_at_seq(b.seq).scan()) for b in db.remap("s").bindings()]
        assert len(views) == 2 and views == [{}, {b"t0": b"v", b"t1": b"v"}]
        assert db.remap("s").pending == Pending(0, 0)
    finally:
        db.close()


def test_commit_order_holds_a_complete_transaction_behind_an_earlier_open_one(
    tmp_path, open_tick, new_root
) -> None:
    with LogWriter(tmp_path / "log") as w:
        w.append(0, b"a0", b"v", tx="A", tx_end={0: 1, 1: 1})  # A's marker first, A's other record later
        w.append(1, b"b0", b"v", tx="B", tx_end=True)
    roots = {order: new_root(order) for order in ("arrival", "commit")}
    for order, visible in (("arrival", {b"b0": b"v"}), ("commit", {})):
        db = open_tick(roots[order])
        try:
            db.ingest(PartitionedLog(tmp_path / "log"), name="s", tx_order=order)
            assert dict(db.scan()) == visible
            assert db.remap("s").pending == (Pending(1, 1) if order == "arrival" else Pending(2, 2))
        finally:
            db.close()
    with LogWriter(tmp_path / "log") as w:
        w.append(1, b"a1", b"v", tx="A")
    db = open_tick(roots["commit"])
    try:
        db.ingest(PartitionedLog(tmp_path / "log"), name="s", tx_order="commit")
        assert set(dict(db.scan())) == {b"a0", b"a1", b"b0"} and db.remap("s").pending == Pending(0, 0)
        assert len(db.remap("s").bindings()) == 2  # A and then B, both in the second binding
    finally:
        db.close()


def test_temp_rows_are_system_rows_and_survive_flush_and_compaction(tmp_path, open_tick) -> None:
    with LogWriter(tmp_path / "log") as w:
        w.append(0, b"x", b"1", tx=7)
        w.append(2, b"y", b"2", tx=7, tx_end={0: 1, 1: 1, 2: 1})
    db = open_tick()
    try:
        db.ingest(PartitionedLog(tmp_path / "log"), name="s")
        db.flush()
        db.compact(full=True)
        assert list(db.scan()) == [] and db.remap("s").pending == Pending(2, 1)
        pre = temp_prefix("s")
        assert len(list(db.engine.scan_raw(pre, pre[:-1] + b"\x01"))) == 3  # two records, one marker
    finally:
        db.close()
    with LogWriter(tmp_path / "log") as w:
        w.append(1, b"z", b"3", tx=7)
    db = open_tick()
    try:
        db.ingest(PartitionedLog(tmp_path / "log"), name="s")
        assert dict(db.scan()) == {b"x": b"1", b"y": b"2", b"z": b"3"}
        assert list(db.engine.scan_raw(pre, pre[:-1] + b"\x01")) == []
    finally:
        db.close()


def test_records_sharing_an_offset_and_a_generic_source(open_tick) -> None:
    recs = [
        SourceRecord(0, 0, b"a", b"1", tx="T"),
        SourceRecord(0, 0, b"b", b"2", tx="T"),
        SourceRecord(1, 0, b"c", b"3", tx="T", tx_end={0: 2, 1: 1}),
    ]
    db = open_tick()
    try:
        db.ingest(ListSource(recs[:2]), name="s")
        assert db.remap("s").pending == Pending(2, 1)
        db.close()
        db = open_tick()
        db.ingest(ListSource(recs), name="s")
        assert dict(db.scan()) == {b"a": b"1", b"b": b"2", b"c": b"3"}
    finally:
        db.close()


def test_a_bad_transactional_record_fails_the_batch_that_reads_it(open_tick) -> None:
    db = open_tick()
    try:
        with pytest.raises(ValueError, match="tx_end counts"):
            db.ingest(ListSource([SourceRecord(0, 0, b"a", b"1", tx="T", tx_end={0: -1})]), name="s")
        with pytest.raises(ValueError, match="reserved key space"):
            db.ingest(ListSource([SourceRecord(0, 0, b"\xff\xff\xff\xfflsm\x00x", b"1", tx="T")]), name="s")
        with pytest.raises(ValueError, match="tx_order"):
            db.ingest(ListSource([]), name="s", tx_order="eventually")
        assert db.sources() == []
    finally:
        db.close()


def test_replaying_temp_gives_the_claims_the_incremental_path_gave() -> None:
    """A marker claims the first records it counts; records after its count wait for a later one."""
    s = TxState("s")
    out = s.apply(
        [
            (0, 0, b"a", b"1", None, None, "T", False),
            (0, 1, b"b", b"1", None, None, "T", False),
            (1, 0, b"m", b"1", None, None, "T", {0: 1, 1: 1}),
        ],
        "arrival",
    )
    assert [[r[2] for r in recs] for recs in out.emitted] == [[b"a", b"m"]]
    assert s.pending == Pending(1, 1)  # b waits, for a marker still to come

"""As-of reads and the seq<->time maps, through the DB.

* ``db.scan(as_of=T)`` and ``db.snapshot_at(T)`` against a model that remembers every state: random
  puts (some with a TTL) and deletes at ManualClock times that advance by random steps (some longer than
  30 s, so the seq tracker records pairs; many commits inside 30 s, so it cannot name them), with flushes
  and full compactions in between. For T inside the history window and before now (the store's upper)
  the read is exactly the model's state after the commits with ts <= T, expiry judged at T. The tracker
  itself is modelled independently: the first commit, then the first commit at least 30 s (whole
  seconds) after the last recorded one.
* A time older than the window raises RetentionError with a message naming the window; a time at or
  after now raises NotYetCompleteError (a commit may still come at that time).
* Compaction keeps every version whose successor is newer than ``tick - history_retention`` (checked
  in the SST files) and drops, in a full compaction, those whose successor is older.
* seq_for_timestamp / timestamp_for_seq round-trips and rounding at the edges.
* The tracker and the time bins survive close/reopen, and a SIGKILL: the maps merged into the manifest
  at the last flush are on disk, and WAL replay re-feeds the commits made after it.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from lsm.manifest import ManifestStore
from lsm.seq_tracker import Round, SeqTracker
from lsm.time_seq import TimeSeq
from storage.ssts import open_sst
from tests.lsm._lsm_proc import Served
from tools.render import rfc3339

T0 = 1_700_000_000_000  # ms, a whole second
RETENTION = 180_000  # 3 min
KEYS = [b"k%d" % i for i in range(5)]
INTERVAL_S = 30


@pytest.fixture
def db_defaults():
    return {"time_seq_min_time": 0}


class Model:
    """Every commit ever made, and the seq tracker's pairs as the SlateDB seq-tracker RFC defines them."""

    def __init__(self) -> None:
        self.commits: list[tuple[int, int, bytes, bytes | None, int | None]] = []  # seq, ts, key, value, exp
        self.tracked: list[tuple[int, int]] = []  # (seq, ts_s)

    def commit(self, seq: int, ts: int, key: bytes, value: bytes | None, exp: int | None) -> None:
        assert seq == len(self.commits) + 1, "one seq per single-key commit"
        self.commits.append((seq, ts, key, value, exp))
        ts_s = ts // 1000
        if not self.tracked or ts_s >= self.tracked[-1][1] + INTERVAL_S:
            self.tracked.append((seq, ts_s))

    @property
    def last_ts(self) -> int | None:
        return self.commits[-1][1] if self.commits else None

    def state(self, seq: int, at: int) -> dict[bytes, bytes]:
        """The visible key -> value after commit `seq`, expiry judged at time `at`."""
        cur: dict[bytes, tuple[bytes | None, int | None]] = {}
        for _s, _ts, key, value, exp in self.commits[:seq]:
            cur[key] = (value, exp)
        return {k: v for k, (v, e) in sorted(cur.items()) if v is not None and (e is None or at <= e)}

    def seq_down(self, t_ms: int) -> int | None:
        """seq_for_timestamp(t, DOWN): the last recorded pair at or before t's whole second."""
        best = None
        for seq, ts_s in self.tracked:
            if ts_s <= t_ms // 1000:
                best = seq
        return best

    def tracked_ms(self, seq: int) -> int:
        return dict(self.tracked)[seq] * 1000


INCOMPLETE = "incomplete"


def expected_as_of(model: Model, t: int, now: int, retention: int) -> int | str | None:
    """The seq an as-of read at `t` must show: INCOMPLETE when it must raise NotYetCompleteError (t at or
    after now: a commit may still come at t), None when it must raise RetentionError (older than the
    window), else the number of commits with ts <= t (seqs are 1, 2, ... in commit order)."""
    if t >= now:
        return INCOMPLETE
    if t < now - retention:
        return None
    return sum(1 for c in model.commits if c[1] <= t)


def sample_times(model: Model, now: int, rng: random.Random) -> list[int]:
    lo = now - RETENTION
    times = {lo, lo - 1, now, now + 5_000}
    times.update(rng.randrange(lo, now + 1) for _ in range(6))
    for _seq, ts, *_ in model.commits[-4:]:
        times.update((ts - 1, ts, ts + 1))
    for _seq, ts_s in model.tracked[-3:]:
        times.update((ts_s * 1000 - 1, ts_s * 1000, ts_s * 1000 + 999))
    return sorted(t for t in times if t >= 0)


def check_as_of(db: lsm.DB, model: Model, now: int, times: list[int]) -> tuple[int, int]:
    """Compare as-of reads at `times` with the model; return (reads compared, RetentionErrors)."""
    compared = refused = 0
    for t in times:
        assert db.seq_for_timestamp(t, Round.DOWN) == model.seq_down(t), t
        want_seq = expected_as_of(model, t, now, RETENTION)
        if want_seq == INCOMPLETE:
            with pytest.raises(lsm.NotYetCompleteError, match="cannot read as of"):
                db.scan(as_of=t)
            with pytest.raises(lsm.NotYetCompleteError):
                db.snapshot_at(t)
            refused += 1
            continue
        if want_seq is None:
            with pytest.raises(lsm.RetentionError, match="cannot read as of"):
                db.scan(as_of=t)
            with pytest.raises(lsm.RetentionError):
                db.snapshot_at(t)
            refused += 1
            continue
        want = model.state(want_seq, t)
        assert dict(db.scan(as_of=t)) == want, (t, want_seq)
        assert [k for k, _ in db.scan(as_of=t, reverse=True)] == sorted(want, reverse=True)
        with db.snapshot_at(t) as snap:
            # the last commit at or before t, or a later one that changed nothing visible and whose rows
            # compaction removed (a delete of an absent key: its tombstone is dropped at the bottom)
            assert snap.seq == want_seq or (snap.seq > want_seq and model.state(snap.seq, t) == want), t
            assert dict(snap.scan()) == want
            for k in KEYS:
                assert snap.get(k) == want.get(k), (t, k)
        compared += 1
    return compared, refused


# -- the model test ----------------------------------------------------------------------------------
EXAMPLES = itertools.count()  # names a fresh root for each example
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("put"), st.sampled_from(KEYS), st.sampled_from([None, None, None, 2_000, 40_000, 400_000])
        ),
        st.tuples(st.just("del"), st.sampled_from(KEYS)),
        st.tuples(st.just("adv"), st.integers(0, 4_000)),
        st.tuples(st.just("adv"), st.integers(30_000, 100_000)),
        st.tuples(st.just("flush")),
        st.tuples(st.just("compact")),
        st.tuples(st.just("check")),
    ),
    min_size=1,
    max_size=45,
)


# hundreds of operations an example: on the directory and the memory store (the object store's code
# paths); S3 would add only its HTTP time, and the fixed history below runs there too
@pytest.mark.parametrize("backend", ["local", "memory"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, rng=st.randoms(use_true_random=False))
def test_as_of_reads_match_a_model_of_every_state(new_root, open_db, ops, rng):
    clock = lsm.ManualClock(T0)
    model = Model()
    db = open_db(clock, path=new_root(f"db{next(EXAMPLES)}"), history_retention=RETENTION)
    try:
        n = 0
        for op in ops + [("check",)]:
            kind = op[0]
            if kind == "put":
                n += 1
                value = b"v%d" % n
                seq = db.put(op[1], value, ttl=op[2])
                ts = clock.now()
                model.commit(seq, ts, op[1], value, None if op[2] is None else ts + op[2])
            elif kind == "del":
                seq = db.delete(op[1])
                model.commit(seq, clock.now(), op[1], None, None)
            elif kind == "adv":
                clock.advance(op[1])
            elif kind == "flush":
                db.flush()
            elif kind == "compact":
                db.flush()
                db.compact(full=True)
            else:
                now = clock.now()
                check_as_of(db, model, now, sample_times(model, now, rng))
    finally:
        db.close()


def test_as_of_reads_inside_the_window_survive_flushes_and_full_compactions(open_db):
    """A fixed history that every code path of the model test goes through, with the counts checked."""
    clock = lsm.ManualClock(T0)
    model = Model()
    rng = random.Random(7)
    db = open_db(clock, history_retention=RETENTION)
    compared = refused = 0
    try:
        for i in range(120):
            key = rng.choice(KEYS)
            if rng.random() < 0.2:
                model.commit(db.delete(key), clock.now(), key, None, None)
            else:
                ttl = rng.choice([None, None, 5_000, 60_000])
                seq = db.put(key, b"v%d" % i, ttl=ttl)
                model.commit(seq, clock.now(), key, b"v%d" % i, None if ttl is None else clock.now() + ttl)
            clock.advance(rng.choice([300, 1_500, 9_000, 31_000, 47_000]))
            if i % 17 == 16:
                db.flush()
            if i % 40 == 39:
                db.compact(full=True)
                now = clock.now()
                c, r = check_as_of(db, model, now, sample_times(model, now, rng))
                compared, refused = compared + c, refused + r
        now = clock.now()
        c, r = check_as_of(db, model, now, sample_times(model, now, rng))
        compared, refused = compared + c, refused + r
    finally:
        db.close()
    assert compared > 30 and refused > 3


def test_expiry_is_judged_at_the_as_of_time(open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock, history_retention=RETENTION) as db:
        db.put(b"a", b"1", ttl=10_000)  # expires at T0 + 10 s
        clock.advance(40_000)
        db.put(b"b", b"2")
        db.flush()
        db.compact(full=True)
        clock.advance(1)  # times up to the last commit's are complete once the clock has moved past it
        assert dict(db.scan()) == {b"b": b"2"}
        assert dict(db.scan(as_of=T0 + 10_000)) == {b"a": b"1"}  # visible at expire_ts
        assert dict(db.scan(as_of=T0 + 10_001)) == {}  # gone a millisecond later
        with db.snapshot_at(T0 + 5_000) as snap:
            assert snap.get(b"a") == b"1" and snap.get(b"b") is None
        assert dict(db.scan(as_of=T0 + 40_000)) == {b"b": b"2"}
        assert dict(db.scan(as_of=rfc3339(T0 + 9_999))) == {b"a": b"1"}


# -- retention errors -------------------------------------------------------------------------------------
def test_a_time_older_than_the_window_raises_a_clear_retention_error(open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock, history_retention=60_000) as db:
        db.put(b"k", b"v", ttl=10_000)
        clock.advance(5_001)
        assert dict(db.scan(as_of=T0 + 5_000)) == {b"k": b"v"}
        clock.advance(300_000)
        db.flush()
        db.compact(full=True)  # the expired row is physically gone
        now = clock.now()
        for t in (T0 + 5_000, now - 60_001, rfc3339(T0 + 5_000)):
            with pytest.raises(lsm.RetentionError) as e:
                db.scan(as_of=t)
            msg = str(e.value)
            assert "cannot read as of" in msg and "history_retention=60000 ms" in msg
            assert f"back to {now - 60_000} ms only" in msg
            with pytest.raises(lsm.RetentionError, match="history_retention=60000 ms"):
                db.snapshot_at(t)
        # inside the window and after the last write: the latest state; now itself is not complete yet
        assert dict(db.scan(as_of=now - 60_000)) == {}
        assert dict(db.scan(as_of=now - 1)) == {}
        with pytest.raises(lsm.NotYetCompleteError):
            db.scan(as_of=now)


def test_without_history_retention_no_time_can_be_read_as_of(open_db):
    """The present is not complete yet (a commit may still come at now) and the past is not kept."""
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        db.put(b"k", b"1")
        clock.advance(60_000)
        db.put(b"k", b"2")
        for t in (clock.now(), clock.now() + 1_000):
            with pytest.raises(lsm.NotYetCompleteError, match="complete for times before"):
                db.scan(as_of=t)
        with pytest.raises(lsm.RetentionError, match="history_retention=0 ms"):
            db.scan(as_of=T0 + 1_000)
        clock.advance(1)
        with pytest.raises(lsm.RetentionError):
            db.snapshot_at(clock.now() - 1)


def test_bad_as_of_times_are_rejected(open_db):
    with open_db() as db:
        with pytest.raises(ValueError, match="RFC 3339"):
            db.scan(as_of="yesterday")
        with pytest.raises(ValueError, match="needs a zone"):
            db.snapshot_at("2023-11-14T22:13:20")
        with pytest.raises(TypeError):
            db.scan(as_of=1.5)


# -- compaction keeps the history window ------------------------------------------------------------------
def sst_rows(db: lsm.DB) -> set[tuple[bytes, int]]:
    rows = set()
    for e in db.manifest.all_ssts():
        with open_sst(db.sst_path(e.name)) as r:
            rows.update((row[0], row[1]) for row in r)
    return rows


def test_compaction_keeps_versions_whose_successor_is_inside_the_window(open_db):
    clock = lsm.ManualClock(T0)
    rng = random.Random(11)
    retention = 120_000
    versions: dict[bytes, list[tuple[int, int, bytes | None, int | None]]] = {k: [] for k in KEYS}
    db = open_db(clock, history_retention=retention)
    try:
        for i in range(150):
            key = rng.choice(KEYS)
            if rng.random() < 0.15:
                seq, value, exp = db.delete(key), None, None
            else:
                ttl = rng.choice([None, None, None, 20_000])
                value = b"v%d" % i
                seq = db.put(key, value, ttl=ttl)
                exp = None if ttl is None else clock.now() + ttl
            versions[key].insert(0, (seq, clock.now(), value, exp))  # newest first
            clock.advance(rng.randrange(500, 8_000))
            if i % 25 == 24:
                db.flush()
        db.flush()
        tick = clock.now()
        db.compact(full=True)
        cutoff = tick - retention
        rows = sst_rows(db)
        kept_in_window = gone = 0
        for key, vs in versions.items():
            for newer, v in zip(vs, vs[1:], strict=False):
                seq, _ts, value, exp = v
                if newer[1] > cutoff:
                    # readable at some time inside the window: must be on disk
                    if value is not None and (exp is None or exp >= cutoff):
                        assert (key, seq) in rows, (key, v, newer, cutoff)
                        kept_in_window += 1
                else:
                    assert (key, seq) not in rows, (key, v, newer, cutoff)
                    gone += 1
        assert kept_in_window > 10 and gone > 50
        # and those versions are what as-of reads inside the window see
        commits = sorted(v[:2] for vs in versions.values() for v in vs)  # (seq, ts)
        for t in range(cutoff, tick, 7_000):  # tick itself is not complete yet
            s = max((seq for seq, ts in commits if ts <= t), default=0)  # exactly the commits up to t
            want = {}
            for key, vs in versions.items():
                v = next((v for v in vs if v[0] <= s), None)
                if v is not None and v[2] is not None and (v[3] is None or t <= v[3]):
                    want[key] = v[2]
            assert dict(db.scan(as_of=t)) == dict(sorted(want.items()))
    finally:
        db.close()


def test_an_open_as_of_snapshot_keeps_its_view_after_the_window_moves_on(open_db):
    """Compaction keeps what an open snapshot_at() reads, expiry included (judged at its time)."""
    clock = lsm.ManualClock(T0)
    with open_db(clock, history_retention=60_000) as db:
        db.write(lsm.WriteBatch().put(b"a", b"1", ttl=10_000).put(b"b", b"1"))  # seq 1 at T0
        clock.advance(31_000)
        db.put(b"b", b"2")  # seq 2
        snap = db.snapshot_at(T0 + 5_000)
        assert snap.seq == 1 and dict(snap.scan()) == {b"a": b"1", b"b": b"1"}
        clock.advance(300_000)  # T0 + 5 s is far outside the window now
        db.flush()
        db.compact(full=True)
        assert dict(snap.scan()) == {b"a": b"1", b"b": b"1"} and snap.get(b"a") == b"1"
        assert sst_rows(db) == {(b"a", 1), (b"b", 1), (b"b", 2)}
        snap.close()
        db.compact(full=True)
        assert sst_rows(db) == {(b"b", 2)}


def test_without_a_window_a_full_compaction_keeps_one_version_per_key(open_db):
    clock = lsm.ManualClock(T0)
    with open_db(clock) as db:
        for i in range(10):
            db.put(b"k", b"%d" % i)
            clock.advance(31_000)
        db.flush()
        db.compact(full=True)
        assert sst_rows(db) == {(b"k", 10)}


# -- seq <-> time lookups through the DB --------------------------------------------------------------------
def test_lookups_round_and_round_trip_at_the_edges(open_db):
    clock = lsm.ManualClock(T0)
    commits = [250, 10_000, 29_999, 30_000, 45_000, 100_500]  # ms after T0; seqs 1..6
    with open_db(clock) as db:
        assert db.timestamp_for_seq(1) is None and db.seq_for_timestamp(T0) is None
        for off in commits:
            clock.set(T0 + off)
            db.put(b"k", b"%d" % off)
        # recorded: seq 1 at T0 (whole seconds, rounded down), seq 4 at T0 + 30 s, seq 6 at T0 + 100 s
        tracked = {1: T0, 4: T0 + 30_000, 6: T0 + 100_000}
        for seq, ts in tracked.items():
            for r in Round:
                assert db.timestamp_for_seq(seq, r) == ts
                assert db.seq_for_timestamp(ts, r) == seq
                assert db.seq_for_timestamp(db.timestamp_for_seq(seq, r), r) == seq
        assert db.timestamp_for_seq(2) == T0 + 30_000  # default Round.UP: the next recorded pair
        assert db.timestamp_for_seq(2, Round.DOWN) == T0
        assert db.timestamp_for_seq(5, Round.UP) == T0 + 100_000
        assert db.timestamp_for_seq(0, Round.DOWN) is None
        assert db.timestamp_for_seq(0, Round.UP) == T0
        assert db.timestamp_for_seq(7, Round.UP) is None
        assert db.timestamp_for_seq(7, Round.DOWN) == T0 + 100_000
        assert db.seq_for_timestamp(T0 + 29_999) == 1  # default Round.DOWN
        assert db.seq_for_timestamp(T0 + 29_999, Round.UP) == 4
        assert db.seq_for_timestamp(T0 + 30_001, Round.DOWN) == 4
        assert db.seq_for_timestamp(T0 + 30_001, Round.UP) == 6  # whole seconds: 30.001 s rounds up to 31 s
        assert db.seq_for_timestamp(T0 + 30_999, Round.DOWN) == 4
        assert db.seq_for_timestamp(T0 - 1, Round.DOWN) is None
        assert db.seq_for_timestamp(T0 - 1, Round.UP) == 1
        assert db.seq_for_timestamp(T0 + 100_999, Round.DOWN) == 6
        assert db.seq_for_timestamp(T0 + 100_001, Round.UP) is None
        assert db.seq_for_timestamp(rfc3339(T0 + 30_000)) == 4
        assert db.seq_for_timestamp("2023-11-14T23:13:50+01:00") == 4  # T0 + 30 s with an offset
        assert db.seq_for_timestamp(str(T0 + 30_000)) == 4
        # bounds: DOWN never after, UP never before the commit (to the whole second)
        for seq, off in enumerate(commits, start=1):
            assert (
                db.timestamp_for_seq(seq, Round.DOWN) <= T0 + off < db.timestamp_for_seq(seq, Round.UP) + 1000
            )
        for t in range(T0 - 2_000, T0 + 103_000, 499):
            lo, hi = db.seq_for_timestamp(t, Round.DOWN), db.seq_for_timestamp(t, Round.UP)
            if lo is not None:
                assert db.timestamp_for_seq(lo) <= t
            if hi is not None:
                assert db.timestamp_for_seq(hi) > t - 1000
            if lo is not None and hi is not None:
                assert lo <= hi
        with pytest.raises(ValueError):
            db.seq_for_timestamp("noon")


# -- persistence --------------------------------------------------------------------------------------------
def expected_maps(commits: list[tuple[int, int]], min_time: int) -> tuple[SeqTracker, TimeSeq]:
    """The maps after `commits` ((seq, ts_ms), in order): tracker pairs, and bins fed the seq before each."""
    tracker, bins = SeqTracker(), TimeSeq(min_time=min_time)
    for seq, ts in commits:
        tracker.insert(seq, ts // 1000)
        bins.update(ts // 1000, seq - 1)
    return tracker, bins


def manifest_maps(path, min_time: int) -> tuple[SeqTracker, TimeSeq]:
    _mid, m = ManifestStore(path).latest()
    return SeqTracker.from_bytes(m.seq_tracker), TimeSeq.from_bytes(m.time_seq, min_time=min_time)


def lookups(db: lsm.DB, commits: list[tuple[int, int]]) -> list:
    out = [db.time_seq_histogram()]
    for seq, ts in commits:
        out.append((db.timestamp_for_seq(seq, Round.UP), db.timestamp_for_seq(seq, Round.DOWN)))
        out.append((db.seq_for_timestamp(ts, Round.UP), db.seq_for_timestamp(ts, Round.DOWN)))
    return out


HOUR = 3_600_000


def test_maps_survive_close_and_reopen(db_root, open_db):
    path = db_root
    clock = lsm.ManualClock(T0)
    rng = random.Random(3)
    commits = []
    db = open_db(clock)
    for i in range(200):
        commits.append((db.put(b"k%d" % (i % 7), b"v"), clock.now()))
        clock.advance(rng.choice([200, 5_000, 31_000, 2 * HOUR, 5 * HOUR]))
        if i == 120:
            db.flush()
    before = lookups(db, commits)
    db.close()
    tracker, bins = expected_maps(commits, 0)
    assert manifest_maps(path, 0) == (tracker, bins)
    assert len(bins) > 40 and len(tracker) > 100
    for read_only in (True, False):
        db = lsm.DB.open(path, lsm.DbOptions(clock=clock, time_seq_min_time=0), read_only=read_only)
        try:
            assert lookups(db, commits) == before
            assert db.time_seq_histogram() == bins.histogram(len(commits))
        finally:
            db.close()


def test_maps_survive_a_killed_writer(shared_root):
    """SIGKILL after writes: the manifest holds the maps as of the last flush; WAL replay adds the rest."""
    path = shared_root
    start = 1_760_000_000_000  # after DbOptions' default time_seq_min_time, which the child uses
    min_time = lsm.DbOptions().time_seq_min_time
    steps = [0, 1_000, 31_000, 40_000, 4 * HOUR, 20_000, 35_000, 3 * HOUR, 31_000, 500]
    child = Served(path, start)
    commits: list[tuple[int, int]] = []
    t = start
    try:
        for i, step in enumerate(steps):
            t += step
            assert child.call(f"clock {t}") == "ok"
            assert child.call(f"put k{i} v{i}") == "ok"
            commits.append((i + 1, t))
            if i == 5:
                assert child.call("flush") == "ok"
                at_flush = list(commits)
    finally:
        child.kill()
    assert manifest_maps(path, min_time) == expected_maps(at_flush, min_time)
    tracker, bins = expected_maps(commits, min_time)
    assert len(tracker) > len(expected_maps(at_flush, min_time)[0])  # replay has something to add
    clock = lsm.ManualClock(t)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock), read_only=True) as db:
        assert db.seq == len(commits)
        assert db.seq_tracker_entries() == tracker.entries()
        assert db.time_seq_histogram() == bins.histogram(len(commits))
        ro = lookups(db, commits)
    with lsm.DB.open(path, lsm.DbOptions(clock=clock, background_compaction=False)) as db:
        assert lookups(db, commits) == ro
        for seq, ts in tracker.entries():
            assert db.timestamp_for_seq(seq) == ts * 1000
    # the recovery flush and the close committed the replayed pairs
    assert manifest_maps(path, min_time) == (tracker, bins)

"""Model-based test: random operation sequences against the DB and a dict, on a ManualClock.

The model holds, per key, the newest row ``(value, seq, ts, expire_ts)`` (a delete removes the key) and
the seq of the last commit. Each snapshot keeps a copy of the model as of its seq; expiry is always
judged at the current time, for snapshots too. Options vary per run (default_ttl, memtable size: small,
so memtables flush by themselves).

Adding operations (e.g. compaction): write a ``@rule`` that calls the DB, then update the model. A rule
that may physically remove expired rows (a compaction) must call `self.note_physical_expiry()`:
``ReadOptions(include_expired=True)`` may then miss those rows, and the checks accept that. Nothing
else changes: compaction must be invisible to every other read, snapshots included. Options for new
behaviour go into `_options`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from typing import NamedTuple

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

import lsm

T0 = 1_700_000_000_000
KEYS = [b"a", b"a\x00", b"ab", b"abc", b"b", b"ba", b"\xff", b"\xff\xff"]
BOUNDS = [b"", b"a", b"a\x00", b"aa", b"ab", b"b", b"c", b"\xff", b"\xff\xff", b"\xff\xff\x00"]
PREFIXES = [b"a", b"ab", b"b", b"\xff", b"z"]
TTLS = st.one_of(st.none(), st.sampled_from([0, 1, 5, 50, 200]), st.just(lsm.NO_TTL))
STEPS = [0, 1, 2, 4, 5, 6, 49, 50, 51, 199, 200, 201, 1_000]

keys = st.sampled_from(KEYS)
value_sizes = st.sampled_from([0, 3, 40, 150])
bounds = st.one_of(st.none(), st.sampled_from(BOUNDS))


class Row(NamedTuple):
    value: bytes
    seq: int
    ts: int
    expire_ts: int | None


class SnapRef:
    """A snapshot and the model state it must show; `live` turns False when its DB handle closes."""

    def __init__(self, snap: lsm.Snapshot, state: dict[bytes, Row]) -> None:
        self.snap = snap
        self.state = state
        self.live = True

    def __repr__(self) -> str:
        return f"SnapRef(seq={self.snap.seq}, live={self.live})"


def put_op():
    return st.tuples(st.just("put"), value_sizes, TTLS)


def delete_op():
    return st.tuples(st.just("delete"), st.none(), st.none())


class DbModel(RuleBasedStateMachine):
    snapshots = Bundle("snapshots")

    def __init__(self) -> None:
        super().__init__()
        self.dir = self.new_root()
        self.clock = lsm.ManualClock(T0)
        self.db: lsm.DB | None = None
        self.model: dict[bytes, Row] = {}
        self.seq = 0
        self.refs: list[SnapRef] = []
        self.maybe_gone: set[bytes] = set()  # keys whose expired row compaction may have removed
        self.counter = 0

    # -- setup -------------------------------------------------------------------------------------
    def new_root(self) -> str:
        """Where this run's database lives: a fresh directory (MemoryDbModel: a memory store)."""
        return tempfile.mkdtemp(prefix="lsm-model-")

    def drop_root(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _options(self) -> lsm.DbOptions:
        return lsm.DbOptions(
            clock=self.clock,
            default_ttl=self.default_ttl,
            memtable_bytes=self.memtable_bytes,
            background_compaction=False,
        )

    @initialize(
        default_ttl=st.sampled_from([None, None, 30, 500]), memtable_bytes=st.sampled_from([1024, 2048, 4096])
    )
    def open_db(self, default_ttl, memtable_bytes):
        self.default_ttl = default_ttl
        self.memtable_bytes = memtable_bytes
        self.db = lsm.DB.open(self.dir, self._options())

    def teardown(self) -> None:
        try:
            if self.db is not None:
                self.db.close()
        finally:
            self.drop_root()

    # -- model helpers -----------------------------------------------------------------------------
    @property
    def now(self) -> int:
        return self.clock.now()

    def _value(self, size: int) -> bytes:
        self.counter += 1
        if size == 0:
            return b""
        return (b"%d|" % self.counter + b"v" * size)[:size]

    def _expire(self, ts: int, ttl) -> int | None:
        if ttl is None:
            ttl = self.default_ttl
        if ttl is None or ttl is lsm.NO_TTL:
            return None
        return ts + ttl

    def _visible(self, row: Row | None) -> bool:
        return row is not None and (row.expire_ts is None or self.now <= row.expire_ts)

    def _expected_scan(self, state, start, end, prefix, reverse, include_expired=False):
        out = [
            (k, r.value)
            for k, r in sorted(state.items())
            if (include_expired or self._visible(r))
            and (start is None or k >= start)
            and (end is None or k < end)
            and (prefix is None or k.startswith(prefix))
        ]
        return out[::-1] if reverse else out

    def note_physical_expiry(self) -> None:
        """Call after an operation that may drop expired rows from disk (a compaction)."""
        self.maybe_gone |= {k for k, r in self.model.items() if not self._visible(r)}

    def _apply(self, key: bytes, row: Row | None) -> None:
        if row is None:
            self.model.pop(key, None)
        else:
            self.model[key] = row
        self.maybe_gone.discard(key)

    # -- writes ------------------------------------------------------------------------------------
    @rule(key=keys, size=value_sizes, ttl=TTLS)
    def put(self, key, size, ttl):
        value = self._value(size)
        ts = self.now
        seq = self.db.put(key, value, ttl=ttl)
        assert seq == self.seq + 1
        self.seq = seq
        self._apply(key, Row(value, seq, ts, self._expire(ts, ttl)))

    @rule(key=keys)
    def delete(self, key):
        seq = self.db.delete(key)
        assert seq == self.seq + 1
        self.seq = seq
        self._apply(key, None)

    @rule(
        ops=st.lists(st.tuples(keys, st.one_of(put_op(), delete_op())), min_size=1, max_size=6),
        repeat=st.one_of(put_op(), delete_op()),
    )
    def batch(self, ops, repeat):
        ops = ops + [(ops[0][0], repeat)]  # the same key twice at least: the last operation wins
        batch = lsm.WriteBatch()
        planned = []
        for key, (kind, size, ttl) in ops:
            if kind == "put":
                value = self._value(size)
                batch.put(key, value, ttl=ttl)
                planned.append((key, value, ttl))
            else:
                batch.delete(key)
                planned.append((key, None, None))
        ts = self.now
        seq = self.db.write(batch)
        assert seq == self.seq + 1  # one seq for the whole batch
        self.seq = seq
        for key, value, ttl in planned:
            self._apply(key, None if value is None else Row(value, seq, ts, self._expire(ts, ttl)))

    @rule()
    def flush(self):
        self.db.flush()

    @rule()
    def reopen(self):
        self.db.close()
        for ref in self.refs:
            ref.live = False
        self.refs = []
        self.db = lsm.DB.open(self.dir, self._options())
        assert self.db.seq == self.seq

    # -- time --------------------------------------------------------------------------------------
    @rule(ms=st.sampled_from(STEPS))
    def advance(self, ms):
        self.clock.advance(ms)

    def _pending_expiries(self) -> list[int]:
        rows = list(self.model.values()) + [r for ref in self.refs for r in ref.state.values()]
        return sorted({r.expire_ts for r in rows if r.expire_ts is not None and r.expire_ts >= self.now})

    @precondition(lambda self: self._pending_expiries())
    @rule(data=st.data(), past=st.booleans())
    def advance_to_an_expiry(self, data, past):
        """Land exactly on an expire_ts (still visible) or one ms past it (gone)."""
        e = data.draw(st.sampled_from(self._pending_expiries()))
        self.clock.set(e + 1 if past else e)

    # -- reads -------------------------------------------------------------------------------------
    @rule(key=keys)
    def get(self, key):
        row = self.model.get(key)
        assert self.db.get(key) == (row.value if self._visible(row) else None)

    @rule(key=keys)
    def get_entry(self, key):
        row = self.model.get(key)
        want = lsm.Entry(key, *row) if self._visible(row) else None
        assert self.db.get_entry(key) == want

    @rule(key=keys)
    def get_including_expired(self, key):
        row = self.model.get(key)
        got = self.db.get_entry(key, lsm.ReadOptions(include_expired=True))
        want = None if row is None else lsm.Entry(key, *row)
        if got is None and want is not None and key in self.maybe_gone and not self._visible(row):
            return  # an expired row that compaction removed
        assert got == want

    @rule(
        start=bounds,
        end=bounds,
        reverse=st.booleans(),
        prefix=st.one_of(st.none(), st.sampled_from(PREFIXES)),
    )
    def scan(self, start, end, reverse, prefix):
        got = list(self.db.scan(start, end, reverse, prefix=prefix))
        assert got == self._expected_scan(self.model, start, end, prefix, reverse)

    @rule(reverse=st.booleans())
    def scan_entries_including_expired(self, reverse):
        got = {
            e.key: e
            for e in self.db.scan_entries(reverse=reverse, options=lsm.ReadOptions(include_expired=True))
        }
        want = {k: lsm.Entry(k, *r) for k, r in self.model.items()}
        for k in set(want) - set(got):
            assert k in self.maybe_gone and not self._visible(self.model[k]), k
            del want[k]
        assert got == want

    # -- snapshots ---------------------------------------------------------------------------------
    @rule(target=snapshots)
    def take_snapshot(self):
        ref = SnapRef(self.db.snapshot(), dict(self.model))
        assert ref.snap.seq == self.seq
        self.refs.append(ref)
        return ref

    @rule(ref=snapshots, key=keys)
    def snapshot_get(self, ref, key):
        if not ref.live:
            return self._assert_closed(ref)
        row = ref.state.get(key)
        want = lsm.Entry(key, *row) if self._visible(row) else None
        assert ref.snap.get_entry(key) == want
        assert ref.snap.get(key) == (None if want is None else want.value)

    @rule(
        ref=snapshots,
        start=bounds,
        end=bounds,
        reverse=st.booleans(),
        prefix=st.one_of(st.none(), st.sampled_from(PREFIXES)),
    )
    def snapshot_scan(self, ref, start, end, reverse, prefix):
        if not ref.live:
            return self._assert_closed(ref)
        got = list(ref.snap.scan(start, end, reverse, prefix=prefix))
        assert got == self._expected_scan(ref.state, start, end, prefix, reverse)

    @rule(ref=consumes(snapshots))
    def release_snapshot(self, ref):
        ref.snap.close()
        if ref.live:
            self.refs.remove(ref)
            ref.live = False
        self._assert_closed(ref)

    def _assert_closed(self, ref: SnapRef) -> None:
        try:
            ref.snap.get(b"a")
        except lsm.ClosedError:
            return
        raise AssertionError(f"{ref} still readable after release or close")

    # -- invariants --------------------------------------------------------------------------------
    @invariant()
    def seq_and_contents_match(self):
        if self.db is None:
            return
        assert self.db.seq == self.seq
        assert list(self.db.scan()) == self._expected_scan(self.model, None, None, None, False)
        assert self.db.snapshot_seqs() == tuple(sorted({r.snap.seq for r in self.refs}))


class MemoryDbModel(DbModel):
    """The same rules on the memory store: the object store's code paths (WAL objects, SSTs read by
    ranges, manifest versions as objects) at memory speed; S3 would add only its HTTP time to hundreds
    of operations a run."""

    def new_root(self) -> str:
        self.store = f"model-{uuid.uuid4().hex[:12]}"
        return f"memory://{self.store}/db"

    def drop_root(self) -> None:
        from storage.objstore import drop_memory_store
        from storage.registry import detach

        detach(self.dir)
        drop_memory_store(self.store)


MODEL_SETTINGS = settings(
    max_examples=int(os.environ.get("LSM_MODEL_EXAMPLES", "40")),  # raise it for a longer hunt
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
DbModel.TestCase.settings = MODEL_SETTINGS
MemoryDbModel.TestCase.settings = MODEL_SETTINGS
test_db_model = DbModel.TestCase
test_db_model_memory = MemoryDbModel.TestCase

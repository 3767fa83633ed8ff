"""A stateful model test of the whole write side (issue 24): random sequences of puts, write batches,
deletes, flushes, compactions (in this thread and in the worker process), streaming ingest of a
`PartitionedLog`, bulk loads (``engine="local"``), a `DatabaseLog` follower that polls at random moments,
reopens, and an injected fault at a random I/O call of any of those operations.

The model is the list of acknowledged upstream commits, ``(seq, {key: value or None})`` in seq order. A
plain write adds its commit with the seq it returned; an ingest or a bulk load adds, for each new binding
of its source (read back from the store), one commit at the binding's seq holding the log records between
the previous frontier and the binding's (partition by partition, offsets ascending), so a store whose rows
disagree with its bindings fails the check. After every step:

* the upstream equals the model's latest state (every scan and every get);
* the follower equals the upstream's state at its binding (the model's state at frontier - 1), or its
  last poll raised `HistoryUnavailableError` because the upstream's history floor had passed its frontier;
* `lsm.inspect.check_database` finds nothing wrong with either store.

A fault (`formats.fileio`, docs/reliability.md) fails one I/O call of one operation. The handle then is
failed (or the operation raised): it is dropped as a killed process would drop it and the store reopened,
and the model accepts either outcome of the write whose publication was unknown (a plain write there
whole with the next seq, or absent; an ingest batch or a bulk load there with its binding, or absent)
and nothing else. Everything runs in the test's thread (``background_flush=False``) on a `ManualClock`,
so an example replays exactly.

Examples: 40 in ``make test`` (about 10 s); ``LSM_MODEL_EXAMPLES=500`` runs more (docs/reliability.md).

On a directory: its faults are a directory's file calls. An object store's faults and interleavings are
the simulation's (tests/lsm/test_dst.py) and test_object_faults.py's.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import lsm
from formats import fileio
from lsm.inspect import check_database
from lsm.sources import DatabaseLog, LogWriter, PartitionedLog
from tests.compaction._util import fast_tmp
from tests.lsm.test_fault_injection import crash

T0 = 1_700_000_000_000
# plain writes share two keys with the logs, so their order against ingested rows (by seq) is tested too
PLAIN_KEYS = [b"a", b"b", b"c", b"log-0-1", b"bulk-1-0"]
SOURCES = ("log", "bulk")  # streamed with db.ingest(...) / bulk-loaded with engine="local"
PARTITIONS = 3
LOG_KEYS = 3  # keys per partition: "<source>-<partition>-<k>"
OPS = ("put", "batch", "delete", "flush", "compact", "compact_worker", "ingest", "bulk", "reopen")

Changes = dict[bytes, bytes | None]

def fold(commits: list[tuple[int, Changes]], upto: int | None = None) -> dict[bytes, bytes]:
    """The visible state after the commits with seq <= `upto` (None: all)."""
    state: dict[bytes, bytes | None] = {}
    for seq, changes in commits:
        if upto is not None and seq > upto:
            break
        state.update(changes)
    return {k: v for k, v in state.items() if v is not None}


class WriteSide(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = fast_tmp("lsm-write-model-")
        self.up_path = os.path.join(self.dir, "up")
        self.clock = lsm.ManualClock(T0)
        self.writers = {s: LogWriter(os.path.join(self.dir, s)) for s in SOURCES}
        self.logs: dict[str, dict[int, list[tuple[bytes, bytes | None]]]] = {s: {} for s in SOURCES}
        self.frontiers: dict[str, dict[int, int]] = {s: {} for s in SOURCES}
        self.bound: dict[str, int] = {s: 0 for s in SOURCES}  # seq of the last binding the model knows
        self.commits: list[tuple[int, Changes]] = []  # acknowledged upstream commits, seq ascending
        self.loads: list[tuple[int, int]] = []  # (first, last) seqs of each committed bulk load
        self.counter = 0
        self._writing: Changes | None = None
        self.db: lsm.DB | None = None
        self.follower: lsm.DB | None = None
        self.follower_lost_history = False
        self.faults = 0

    # -- set-up ------------------------------------------------------------------------------------
    @initialize(retention=st.sampled_from([0, 10**12]), memtable=st.sampled_from([1024, 4096]))
    def open_stores(self, retention: int, memtable: int) -> None:
        self.options = lsm.DbOptions(
            clock=self.clock,
            history_retention=retention,  # 0: flushes and compactions drop history a lagging follower needs
            memtable_bytes=memtable,
            target_sst_bytes=1024,
            l0_compaction_threshold=2,
            background_compaction=False,
            background_flush=False,  # flushes run in the writing thread: one order, replayable
            compaction_process=True,  # compactor.step() sends its job to the worker process
        )
        self.db = lsm.DB.open(self.up_path, self.options)

    def teardown(self) -> None:
        fileio.clear()
        for h in (self.db, self.follower):
            if h is not None:
                h.close()
        for w in self.writers.values():
            w.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- model helpers ---------------------------------------------------------------------------------
    def _value(self) -> bytes:
        self.counter += 1
        return b"v%d" % self.counter

    def _commit(self, seq: int, changes: Changes) -> None:
        assert not self.commits or seq > self.commits[-1][0], f"seq {seq} after {self.commits[-1][0]}"
        self.commits.append((seq, changes))

    def _sync_source(self, source: str) -> None:
        """Add a commit for every binding of `source` newer than the model knows: the log records between
        the previous frontier and the binding's."""
        try:
            bindings = self.db.remap(source).bindings()
        except lsm.UnknownSourceError:
            return
        for b in bindings:
            if b.seq <= self.bound[source]:
                continue
            prev, changes = self.frontiers[source], {}
            for p in sorted(b.frontier):
                assert b.frontier[p] >= prev.get(p, 0), f"{source}: frontier went back: {b}"
                for key, value in self.logs[source][p][prev.get(p, 0) : b.frontier[p]]:
                    changes[key] = value
            self._commit(b.seq, changes)
            self.frontiers[source], self.bound[source] = dict(b.frontier), b.seq

    def _open(self) -> None:
        self.db = lsm.DB.open(self.up_path, self.options)

    # -- the operations ------------------------------------------------------------------------------
    # a plain write notes its changes in `_writing` first: if it raises, they are the unknown outcome
    def _put(self, key: bytes) -> None:
        v = self._value()
        self._writing = {key: v}
        self._commit(self.db.put(key, v), self._writing)

    def _delete(self, key: bytes) -> None:
        self._writing = {key: None}
        self._commit(self.db.delete(key), self._writing)

    def _batch(self, ops: list[tuple[bytes, bool]]) -> None:
        b, changes = lsm.WriteBatch(), {}
        for key, delete in ops:
            if delete:
                b.delete(key)
                changes[key] = None
            else:
                v = changes[key] = self._value()
                b.put(key, v)
        self._writing = changes
        self._commit(self.db.write(b), changes)

    def _ingest(self, batch_records: int, max_records: int | None) -> None:
        try:
            self.db.ingest(
                PartitionedLog(os.path.join(self.dir, "log")), "log", batch_records=batch_records,
                max_records=max_records,
            )
        finally:
            self._sync_source("log")  # batches committed before a failure are acknowledged

    def _bulk(self, tasks: int) -> None:
        before = self.db.seq
        try:
            self.db.ingest(PartitionedLog(os.path.join(self.dir, "bulk")), "bulk", engine="local", tasks=tasks)
        finally:
            last = self.bound["bulk"]
            self._sync_source("bulk")
            if self.bound["bulk"] != last:
                self.loads.append((before + 1, self.bound["bulk"]))

    def _run(self, op: str, data: st.DataObject) -> Callable[[], object]:
        """Draw the arguments of `op` and return a call that runs it."""
        keys = st.sampled_from(PLAIN_KEYS)
        if op == "put":
            key = data.draw(keys)
            return lambda: self._put(key)
        if op == "delete":
            key = data.draw(keys)
            return lambda: self._delete(key)
        if op == "batch":
            ops = data.draw(st.lists(st.tuples(keys, st.booleans()), min_size=1, max_size=4))
            return lambda: self._batch(ops)
        if op == "flush":
            return self.db.flush
        if op == "compact":
            full = data.draw(st.booleans())
            return lambda: self.db.compact(full=full) and None
        if op == "compact_worker":  # what the background thread runs: the job goes to the worker process
            return lambda: self.db.engine.compactor.step() and None
        if op == "ingest":
            batch = data.draw(st.sampled_from([1, 2, 5, 10_000]))
            limit = data.draw(st.one_of(st.none(), st.integers(1, 6)))
            return lambda: self._ingest(batch, limit)
        if op == "bulk":
            tasks = data.draw(st.integers(1, 3))
            return lambda: self._bulk(tasks)
        assert op == "reopen"

        def reopen() -> None:
            self.db.close()
            self._open()

        return reopen

    # -- rules -------------------------------------------------------------------------------------
    @rule(data=st.data(), op=st.sampled_from([o for o in OPS if o != "reopen"]), dt=st.sampled_from([0, 0, 1, 1000]))
    def operation(self, data: st.DataObject, op: str, dt: int) -> None:
        self.clock.advance(dt)
        self._run(op, data)()

    @rule()
    def reopen(self) -> None:
        self.db.close()
        self._open()

    @rule(
        source=st.sampled_from(SOURCES),
        p=st.integers(0, PARTITIONS - 1),
        k=st.integers(0, LOG_KEYS - 1),
        delete=st.booleans(),
        n=st.integers(1, 4),
    )
    def append(self, source: str, p: int, k: int, delete: bool, n: int) -> None:
        for i in range(n):
            key = b"%s-%d-%d" % (source.encode(), p, (k + i) % LOG_KEYS)
            value = None if delete and i == 0 else self._value()
            self.writers[source].append(p, key, value)
            self.logs[source].setdefault(p, []).append((key, value))

    @rule(batch=st.sampled_from([1, 3, 10_000]))
    def follower_poll(self, batch: int) -> None:
        if self.follower is None:
            fopts = lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False, background_flush=False)
            self.follower = lsm.DB.open(os.path.join(self.dir, "follower"), fopts)
        try:
            self.follower.ingest(DatabaseLog(self.up_path), "up", batch_records=batch)
            self.follower_lost_history = False
        except lsm.HistoryUnavailableError:
            floor = DatabaseLog(self.up_path).floor()
            assert floor >= self._follower_frontier(), f"history from {self._follower_frontier()} is there"
            self.follower_lost_history = True

    @rule(
        data=st.data(),
        op=st.sampled_from(OPS),
        kind=st.sampled_from(["eio", "enospc", "short"]),
        nth=st.one_of(st.integers(1, 4), st.integers(5, 60)),
    )
    def fault(self, data: st.DataObject, op: str, kind: str, nth: int) -> None:
        """One failing I/O call in `op`; a failed handle is dropped (a crash) and the store reopened."""
        call = self._run(op, data)
        before, self._writing = self.db.seq, None
        ops = fileio.WRITE_OPS if kind == "short" else None
        plan = fileio.inject(kind, nth, ops=ops)
        error: BaseException | None = None
        try:
            call()
        except lsm.DbFailedError as e:
            assert isinstance(e.__cause__, OSError), repr(e)
            error = e
        except OSError as e:
            # Opening a store (the second half of "reopen") is not the write path: its I/O errors are raw.
            assert op == "reopen", f"{op}: a raw {e!r} instead of DbFailedError"
            error = e
        finally:
            fileio.clear()
        if not plan.fired:
            assert error is None, f"nothing was injected, yet {error!r}"
            return
        self.faults += 1
        if error is None and self.db.failure is None and not self.db.closed:
            failed = plan.log[nth - 1]
            assert failed[0] == "unlink", f"{failed} failed, nobody noticed"
            return  # deleting a file nothing references: garbage for gc, never a wrong answer
        crash(self.db)
        self._open()
        for source in SOURCES:  # ingest and bulk load: their bindings say what was committed
            last = self.bound[source]
            self._sync_source(source)
            if source == "bulk" and self.bound[source] != last:
                self.loads.append((before + 1, self.bound[source]))
        if error is not None and self._writing is not None:  # a plain write: its WAL record may be there
            if self.db.seq > before:
                self._commit(before + 1, self._writing)  # there, whole, with the next seq (checked below)
            else:
                assert self.db.seq == before, f"seq went back from {before} to {self.db.seq}"

    # -- invariants ------------------------------------------------------------------------------------
    def _follower_frontier(self) -> int:
        try:
            return self.follower.remap("up").frontier.get(0, 0)
        except lsm.UnknownSourceError:
            return 0

    @invariant()
    def upstream_is_the_model(self) -> None:
        if self.db is None:
            return
        want = fold(self.commits)
        assert dict(self.db.scan()) == want
        for key in PLAIN_KEYS:
            assert self.db.get(key) == want.get(key)
        assert self.db.seq >= (self.commits[-1][0] if self.commits else 0)

    @invariant()
    def follower_is_the_upstream_at_its_binding(self) -> None:
        if self.follower is None:
            return
        frontier = self._follower_frontier()
        assert dict(self.follower.scan()) == fold(self.commits, frontier - 1), f"follower at {frontier}"

    @invariant()
    def stores_check_clean(self) -> None:
        if self.db is None:
            return
        check_database(self.up_path)
        if self.follower is not None:
            check_database(self.follower.path)


TestWriteSideModel = WriteSide.TestCase
TestWriteSideModel.settings = settings(
    max_examples=int(os.environ.get("LSM_MODEL_EXAMPLES", "40")),
    stateful_step_count=int(os.environ.get("LSM_MODEL_STEPS", "50")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_an_open_whose_fencing_manifest_may_not_be_published_raises_the_io_error(tmp_path):
    """Found by the model: a writable open publishes the manifest again with bumped epochs; when that
    link or directory fsync failed, `DB.open` leaked `lsm.manifest.PublishUnknownError` (an internal signal,
    neither an `lsm.LsmError` nor an `OSError`). It raises the `FileOpError` naming the call, as every other
    I/O error of an open does, and the next open works."""
    path = tmp_path / "db"
    opts = lsm.DbOptions(clock=lsm.ManualClock(T0), background_compaction=False)
    with lsm.DB.open(path, opts) as db:
        db.put(b"k", b"v")
    for op in ("link", "fsync_dir"):
        with fileio.faults("eio", 1, ops={op}, path="/manifest"):
            with pytest.raises(fileio.FileOpError, match=f"^{op} of .*manifest"):
                lsm.DB.open(path, opts)
        with lsm.DB.open(path, opts) as db:
            assert db.get(b"k") == b"v"
            db.put(b"k2", b"v2")
        check_database(str(path))

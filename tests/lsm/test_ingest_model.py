"""A stateful model test of ingest: random appends (transactions included), ingests of random sizes,
reopens, flushes, compactions and remap compactions; after every step the store holds exactly the log's
records below the durable frontier, each transaction's at its end marker and only once that is read, the
TEMP collection holds the rest, and the stored remap equals the model's bindings compacted at its
since."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import lsm
from lsm import ingest as ingest_mod
from lsm.remap import Binding, Pending, Remap
from lsm.sources import LogWriter, PartitionedLog
from tests.compaction._util import fast_tmp


class IngestMachine(RuleBasedStateMachine):
    """The store on the test's backend (a fresh root per run, from `new_root`); the log a local directory."""

    new_root: Callable[[str], str] | None  # None: the store beside the log, in /dev/shm

    def __init__(self) -> None:
        super().__init__()
        self.dir = fast_tmp("lsm-ingest-model-")
        self.root = self.dir + "/db" if self.new_root is None else self.new_root(os.path.basename(self.dir))
        self.clock = lsm.ManualClock(1_000)
        self.writer = LogWriter(self.dir + "/log")
        self.log: dict[int, list[tuple[bytes, bytes | None, object, bool]]] = {}
        self.open_tx: dict[int, str] = {}
        self.tx_ids = 0
        self.db = self._open()
        self.model: list[Binding] = []  # every binding ever committed, oldest first
        self.since: int | None = None

    def _open(self) -> lsm.DB:
        opts = lsm.DbOptions(clock=self.clock, background_compaction=False, history_retention=10**12)
        return lsm.DB.open(self.root, opts)

    def teardown(self) -> None:
        self.db.close()
        self.writer.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        p=st.integers(0, 2),
        key=st.integers(0, 6),
        delete=st.booleans(),
        tx=st.sampled_from(["no", "open", "close"]),
    )
    def append(self, p: int, key: int, delete: bool, tx: str) -> None:
        tx_id, tx_end = None, False
        if p in self.open_tx:
            tx_id = self.open_tx[p]
            if tx == "close":
                tx_end = True
                del self.open_tx[p]
        elif tx == "open":
            self.tx_ids += 1
            tx_id = self.open_tx[p] = f"t{self.tx_ids}"
        off = len(self.log.setdefault(p, []))
        value = None if delete else b"%d:%d" % (p, off)
        k = b"%d-%d" % (p, key)
        self.writer.append(p, k, value, tx=tx_id, tx_end=tx_end)
        self.log[p].append((k, value, tx_id, tx_end))

    @rule(batch=st.integers(1, 5), limit=st.one_of(st.none(), st.integers(0, 8)), dt=st.integers(0, 50))
    def ingest(self, batch: int, limit: int | None, dt: int) -> None:
        self.clock.advance(dt)
        before = self.db.seq
        self.db.ingest(PartitionedLog(self.dir + "/log"), name="s", batch_records=batch, max_records=limit)
        if self.db.seq != before:
            r = self.db.remap("s")
            self.model += [b for b in r.bindings() if b.seq > before]

    @rule()
    def reopen(self) -> None:
        self.db.close()
        self.db = self._open()

    @rule(full=st.booleans())
    def flush_and_compact(self, full: bool) -> None:
        self.db.flush()
        if full:
            self.db.compact(full=True)

    @precondition(lambda self: len(self.model) >= 2)
    @rule(data=st.data())
    def compact_remap(self, data) -> None:
        lo = self.model[0].ts - 5
        since = data.draw(st.integers(lo, self.model[-1].ts + 5))
        if since > self.clock.now():  # a later binding would be committed before it: refused, nothing written
            with pytest.raises(ValueError, match="after the store's time now"):
                ingest_mod.compact_remap(self.db, "s", since)
            return
        if ingest_mod.compact_remap(self.db, "s", since) is not None:
            self.since = since if self.since is None else max(self.since, since)

    def expected_remap(self) -> Remap:
        r = Remap("s", self.model)
        return r if self.since is None else r.compact(self.since)

    @invariant()
    def store_is_the_log_below_the_frontier(self) -> None:
        try:
            remap = self.db.remap("s")
        except lsm.UnknownSourceError:
            assert not self.model and list(self.db.scan()) == []
            return
        state: dict[bytes, bytes | None] = {}
        prev: dict[int, int] = {}
        for b in self.model:  # per binding: its records outside transactions, then the transactions
            ended = []  # whose end marker it read, whole (keys are per partition: no other order matters)
            for p, recs in self.log.items():
                for i in range(prev.get(p, 0), b.frontier.get(p, 0)):
                    k, v, tx, end = recs[i]
                    if tx is None:
                        state[k] = v
                    elif end:
                        ended += [(k2, v2) for k2, v2, tx2, _ in recs[: i + 1] if tx2 == tx]
            state.update(ended)
            prev = b.frontier
        exp = self.expected_remap()
        assert remap.bindings() == exp.bindings() and remap.since == exp.since
        for b in self.model:  # every question at or after since answers as the model compacted at since
            t = b.ts if exp.since is None else max(b.ts, exp.since)
            if t >= remap.upper:  # the clock has not moved past it: another batch may still land at t
                with pytest.raises(lsm.NotYetCompleteError):
                    remap.as_of(t)
                continue
            assert remap.as_of(t) == exp.as_of(t)

    @invariant()
    def temp_holds_the_open_transactions(self) -> None:
        try:
            remap = self.db.remap("s")
        except lsm.UnknownSourceError:
            return
        records = 0
        open_tx: set = set()
        for p, recs in self.log.items():
            below = recs[: remap.frontier.get(p, 0)]
            closed = {tx for _k, _v, tx, end in below if end}
            for _k, _v, tx, _end in below:
                if tx is not None and tx not in closed:
                    records += 1
                    open_tx.add(tx)
        assert remap.pending == Pending(records, len(open_tx))


# Not on S3: 30 runs of 25 steps (reopens, flushes, compactions) are a minute of requests there, and test
# no code memory:// does not run. A local store lives in /dev/shm (fast_tmp): fsyncs on a disk make the
# runs five times slower.
@pytest.mark.parametrize("backend", ["local", "memory"])
def test_ingest_model(backend, new_root) -> None:
    roots = None if backend == "local" else staticmethod(new_root)
    machine = type("IngestOnBackend", (IngestMachine,), {"new_root": roots})
    # at most what the profile allows (the quick run's bound: a test's own settings outrank the profile)
    examples = min(30, settings().max_examples)
    run_state_machine_as_test(
        machine, settings=settings(max_examples=examples, stateful_step_count=25, deadline=None)
    )

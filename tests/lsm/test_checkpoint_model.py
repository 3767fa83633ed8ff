"""Checkpoints and clones against a model: hypothesis's stateful testing (RuleBasedStateMachine) drives a
source store and its clones through writes, deletes, TTLs on a ManualClock, flushes, compactions,
`gc(grace_ms=0)`, reopens, checkpoints taken, deleted and expired, and clones taken from checkpoints, from
the source now and from clones; after every step each live checkpoint must read exactly the state it was
taken with (expiry judged now, and at its own time with `ReadOptions(now=cp.ts)`), each dead one must
refuse to open, and every store must read its own model. On the local directory (hard-linked clones), the
memory store (clones that reference the source's objects) and moto's S3 server (a few examples).

``LSM_MODEL_EXAMPLES=N`` runs N examples per backend instead of the default.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from typing import NamedTuple

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

import lsm
from tests.conftest import backend_root

T0 = 1_700_000_000_000
KEYS = [b"a", b"ab", b"b", b"c", b"k1", b"k2", b"z"]
TTLS = st.sampled_from([None, None, None, 5, 50, 500])
LIFETIMES = st.sampled_from([None, None, 20, 200, 2_000])
STEPS = st.sampled_from([1, 10, 60, 300, 1_000])
PICK = st.integers(0, 1_000)  # an index into what exists, taken modulo its length

keys = st.sampled_from(KEYS)


class Row(NamedTuple):
    value: bytes
    expire_ts: int | None


@dataclasses.dataclass
class Cp:
    cp: lsm.Checkpoint
    state: dict[bytes, Row]
    deleted: bool = False


@dataclasses.dataclass
class Store:
    """The source or a clone: where it lives, its open handle and its model."""

    root: str
    db: lsm.DB
    model: dict[bytes, Row]


class CheckpointModel(RuleBasedStateMachine):
    def __init__(self, new_root) -> None:
        super().__init__()
        self.new_root = new_root
        self.clock = lsm.ManualClock(T0)
        self.stores: list[Store] = []
        self.cps: list[Cp] = []
        self.counter = 0

    def options(self) -> lsm.DbOptions:
        return lsm.DbOptions(clock=self.clock, memtable_bytes=self.memtable_bytes, background_compaction=False,
                             l0_compaction_threshold=2, manifest_history=2)

    @initialize(memtable_bytes=st.sampled_from([1024, 8192]))
    def open_source(self, memtable_bytes):
        self.memtable_bytes = memtable_bytes
        root = self.new_root()
        self.stores.append(Store(root, lsm.DB.open(root, self.options()), {}))

    def teardown(self) -> None:
        for s in self.stores:
            if not s.db.closed:
                s.db.close()

    # -- helpers -----------------------------------------------------------------------------------------
    @property
    def now(self) -> int:
        return self.clock.now()

    def visible(self, state: dict[bytes, Row], now: int) -> list[tuple[bytes, bytes]]:
        return [(k, r.value) for k, r in sorted(state.items()) if r.expire_ts is None or now <= r.expire_ts]

    def store(self, i: int) -> Store:
        return self.stores[i % len(self.stores)]

    def live(self, c: Cp) -> bool:
        return not c.deleted and (c.cp.expires_at is None or self.now < c.cp.expires_at)

    # -- writes and the passing of time ------------------------------------------------------------------
    @rule(i=PICK, key=keys, ttl=TTLS)
    def put(self, i, key, ttl):
        s = self.store(i)
        self.counter += 1
        value = b"v%d" % self.counter
        s.db.put(key, value, ttl=ttl)
        s.model[key] = Row(value, None if ttl is None else self.now + ttl)

    @rule(i=PICK, key=keys)
    def delete(self, i, key):
        s = self.store(i)
        s.db.delete(key)
        s.model.pop(key, None)

    @rule(ms=STEPS)
    def advance(self, ms):
        self.clock.advance(ms)

    # -- what must not disturb a checkpoint or a clone ---------------------------------------------------
    @rule(i=PICK)
    def flush(self, i):
        self.store(i).db.flush()

    @rule(i=PICK, full=st.booleans())
    def compact(self, i, full):
        self.store(i).db.compact(full=full)

    @rule(i=PICK)
    def gc(self, i):
        self.store(i).db.gc(grace_ms=0)

    @rule(i=PICK)
    def reopen(self, i):
        s = self.store(i)
        s.db.close()
        s.db = lsm.DB.open(s.root, self.options())

    # -- checkpoints and clones --------------------------------------------------------------------------
    @rule(lifetime=LIFETIMES)
    def checkpoint(self, lifetime):
        src = self.stores[0]
        cp = src.db.checkpoint(lifetime_ms=lifetime)
        assert cp.ts == self.now and cp.seq == src.db.seq
        self.cps.append(Cp(cp, dict(src.model)))

    @rule(i=PICK)
    def delete_checkpoint(self, i):
        if not self.cps:
            return
        c = self.cps[i % len(self.cps)]
        if self.live(c):
            self.stores[0].db.delete_checkpoint(c.cp.id)
            c.deleted = True
        else:
            with pytest.raises(lsm.UnknownCheckpointError):
                self.stores[0].db.delete_checkpoint(c.cp.id)

    @rule(i=PICK)
    def clone_a_checkpoint(self, i):
        live = [c for c in self.cps if self.live(c)]
        if not live or len(self.stores) >= 4:
            return
        c = live[i % len(live)]
        root = self.new_root()
        db = lsm.DB.clone(self.stores[0].db, root, checkpoint=c.cp.id, options=self.options())
        self.stores.append(Store(root, db, dict(c.state)))

    @rule(i=PICK)
    def clone_now(self, i):
        if len(self.stores) >= 4:
            return
        s = self.store(i)  # the source or a clone: a clone can be cloned
        root = self.new_root()
        db = lsm.DB.clone(s.db, root, options=self.options())
        self.stores.append(Store(root, db, dict(s.model)))

    # -- the checks --------------------------------------------------------------------------------------
    @invariant()
    def every_store_reads_its_model(self):
        for s in self.stores:
            assert list(s.db.scan()) == self.visible(s.model, self.now), s.root

    @invariant()
    def every_checkpoint_reads_its_state_or_is_gone(self):
        src = self.stores[0]
        listed = {c.id for c in src.db.checkpoints()}
        for c in self.cps:
            if not self.live(c):
                assert c.cp.id not in listed
                with pytest.raises(lsm.UnknownCheckpointError):
                    lsm.DB.open(src.root, self.options(), read_only=True, checkpoint=c.cp.id)
                continue
            assert c.cp.id in listed
            with lsm.DB.open(src.root, self.options(), read_only=True, checkpoint=c.cp.id) as r:
                assert r.seq == c.cp.seq
                assert list(r.scan()) == self.visible(c.state, self.now)
                assert list(r.scan(options=lsm.ReadOptions(now=c.cp.ts))) == self.visible(c.state, c.cp.ts)


def settings_for(backend: str) -> settings:
    few = backend == "s3"  # every request an HTTP round trip to moto's server
    return settings(
        max_examples=int(os.environ.get("LSM_MODEL_EXAMPLES", "3" if few else "20")),
        stateful_step_count=15 if few else 30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


def test_checkpoints_and_clones_against_a_model(backend, request, tmp_path):
    def new_root() -> str:
        return backend_root(backend, request, tmp_path, f"db-{uuid.uuid4().hex[:8]}")

    run_state_machine_as_test(lambda: CheckpointModel(new_root), settings=settings_for(backend))

"""The forward scan's batched resolution (lsm.readpath) against a model and against the reverse scan.

A forward `scan` merges its sources in batches of whole keys and resolves a batch without a Python step
per row when every row is visible and unexpired; the reverse scan still goes row by row through the heap
merge. Here both run over databases spread across a memtable, L0 SSTs and sorted runs, with overwrites,
deletes, TTLs and a snapshot, with the merge's batch size cut to a few rows so a scan takes many rounds
(and both resolution paths), and must give exactly the model's rows.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lsm
from compaction import stream

T0 = 1_700_000_000_000
KEYS = [b"k%02d" % i for i in range(24)]
EXAMPLES = itertools.count()  # names a fresh root for each example

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(KEYS), st.one_of(st.none(), st.sampled_from([5, 40]))),
        st.tuples(st.just("delete"), st.sampled_from(KEYS), st.none()),
        st.tuples(st.just("flush"), st.none(), st.none()),
        st.tuples(st.just("compact"), st.none(), st.none()),
        st.tuples(st.just("tick"), st.none(), st.none()),
    ),
    min_size=1,
    max_size=80,
)


def visible(model: dict[bytes, tuple[bytes | None, int | None]], now: int) -> list[tuple[bytes, bytes]]:
    """The (key, value) pairs a reader at time `now` sees in `model` (key -> (value, expire_ts))."""
    return [
        (k, v) for k, (v, exp) in sorted(model.items()) if v is not None and (exp is None or now <= exp)
    ]


# up to 80 operations with flushes and compactions an example: on the directory and the memory store
# (the object store's reads); S3 would add only its HTTP time
@pytest.mark.parametrize("backend", ["local", "memory"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops, batch_rows=st.sampled_from([1, 2, 3, 7]), snap_at=st.integers(0, 80))
def test_forward_scan_matches_the_model_and_the_reverse_scan(new_root, open_db, monkeypatch, ops, batch_rows, snap_at):
    monkeypatch.setattr(stream, "_BATCH_ROWS", batch_rows)
    clock = lsm.ManualClock(T0)
    model: dict[bytes, tuple[bytes | None, int | None]] = {}
    snap = snap_model = None
    with open_db(clock, path=new_root(f"db{next(EXAMPLES)}"), memtable_bytes=1024, block_bytes=64) as db:
        for i, (op, key, ttl) in enumerate(ops):
            if i == snap_at:
                snap, snap_model = db.snapshot(), dict(model)
            if op == "put":
                value = b"v%d" % i
                db.put(key, value, ttl=ttl if ttl is not None else lsm.NO_TTL)
                model[key] = (value, None if ttl is None else clock.now() + ttl)
            elif op == "delete":
                db.delete(key)
                model[key] = (None, None)
            elif op == "flush":
                db.flush()
            elif op == "compact":
                db.compact()
            else:
                clock.advance(20)
        now = clock.now()
        want = visible(model, now)
        assert list(db.scan()) == want
        assert list(db.scan(reverse=True))[::-1] == want
        assert list(db.scan(b"k05", b"k17")) == [kv for kv in want if b"k05" <= kv[0] < b"k17"]
        if snap is not None:
            with snap:
                assert list(snap.scan()) == visible(snap_model, now)

"""The remap against a model: random bindings, as-of questions, compaction at random `since`."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lsm
from lsm.remap import Binding, Remap


def model_as_of(bindings: list[Binding], t: int) -> Binding | None:
    best = None
    for b in bindings:
        if b.ts <= t:
            best = b
    return best


def model_binding_for(bindings: list[Binding], p: int, o: int) -> Binding | None:
    for b in bindings:
        if b.frontier.get(p, 0) > o:
            return b
    return None


def model_merge(bindings: list[Binding]) -> list[Binding]:
    """One binding per time: of bindings sharing a time only the newest (the last) stays."""
    return [b for i, b in enumerate(bindings) if i + 1 == len(bindings) or bindings[i + 1].ts != b.ts]


def advance(bindings: list[Binding], b: Binding | None, since: int) -> Binding | None:
    """A binding as compaction at `since` leaves it: at or before since it becomes the consolidated one
    (time since, the newest binding at or before since), after since it is unchanged."""
    if b is None or b.ts > since:
        return b
    newest = model_as_of(bindings, since)
    return Binding(since, newest.seq, newest.frontier)


@st.composite
def remaps(draw) -> list[Binding]:
    n = draw(st.integers(0, 12))
    ts, seq = draw(st.integers(0, 50)), 0
    frontier: dict[int, int] = {}
    out = []
    for _ in range(n):
        ts += draw(st.integers(0, 30))  # equal times are allowed: the clock never goes back
        seq += draw(st.integers(1, 5))
        frontier = dict(frontier)
        for p in draw(st.lists(st.integers(0, 4), max_size=3)):  # partitions may appear later
            frontier[p] = frontier.get(p, 0) + draw(st.integers(0, 20))
        out.append(Binding(ts, seq, frontier))
    return out


times = st.integers(-10, 500)


def test_design_worked_example() -> None:
    """docs/remap.md's worked example: offsets 0-2 at 1000, 3-4 at 2000, 5-6 at 3000."""
    r = Remap("events", [Binding(1000, 1, {0: 3}), Binding(2000, 2, {0: 5}), Binding(3000, 3, {0: 7})])
    assert r.frontier == {0: 7}
    assert r.as_of(3000).frontier == {0: 7}
    assert r.as_of(2999).frontier == {0: 5}
    assert r.as_of(999) is None
    assert (
        r.binding_for(0, 2).ts == 1000 and r.binding_for(0, 3).ts == 2000 and r.binding_for(0, 6).ts == 3000
    )
    assert r.binding_for(0, 7) is None and r.binding_for(1, 0) is None
    assert r.rows() == [(1000, 0, 3), (2000, 0, 5), (3000, 0, 7)]
    assert r.rows(as_of=2500) == [(1000, 0, 3), (2000, 0, 5)]
    assert r.as_of("1970-01-01T00:00:02.999Z") == r.as_of(2999)  # RFC 3339 works too
    c = r.compact(2500)
    assert c.since == 2500
    assert c.bindings() == [Binding(2500, 2, {0: 5}), Binding(3000, 3, {0: 7})]
    assert c.as_of(2600) == Binding(2500, 2, {0: 5})
    assert c.binding_for(0, 0) == Binding(2500, 2, {0: 5})  # visible at or before since
    with pytest.raises(lsm.RetentionError):
        c.as_of(2000)
    with pytest.raises(lsm.RetentionError):
        c.rows(as_of=2499)


def test_implementation_doc_example() -> None:
    """The two-partition Kafka example of the reclocking implementation document: partition 1 offsets
    0-42 and partition 2 offsets 0-40 at t1; 43-45 and 41-44 at t2 (stored as next offsets)."""
    t1, t2 = 1649686076392, 1649686079487
    r = Remap("kafka", [Binding(t1, 10, {1: 43, 2: 41}), Binding(t2, 11, {1: 46, 2: 45})])
    assert r.rows() == [(t1, 1, 43), (t1, 2, 41), (t2, 1, 46), (t2, 2, 45)]
    assert r.binding_for(1, 42).ts == t1 and r.binding_for(1, 43).ts == t2
    assert r.binding_for(2, 44).ts == t2 and r.binding_for(2, 45) is None
    assert r.as_of(t2 - 1).frontier == {1: 43, 2: 41}
    assert r.compact(t2).bindings() == [Binding(t2, 11, {1: 46, 2: 45})]


def test_bindings_must_be_monotone() -> None:
    with pytest.raises(ValueError, match="went back"):
        Remap("x", [Binding(1, 1, {0: 5}), Binding(2, 2, {0: 4})])
    with pytest.raises(ValueError, match="went back"):
        Remap("x", [Binding(1, 1, {0: 5}), Binding(2, 2, {1: 4})])  # a partition left the frontier
    with pytest.raises(ValueError, match="increase"):
        Remap("x", [Binding(2, 1, {0: 5}), Binding(1, 2, {0: 6})])


@settings(max_examples=300, deadline=None)
@given(remaps(), times, st.lists(times, min_size=1, max_size=6))
def test_queries_match_the_model(bs: list[Binding], _since: int, ts: list[int]) -> None:
    r = Remap("s", bs)
    bs = model_merge(bs)
    assert r.bindings() == bs
    assert r.frontier == (bs[-1].frontier if bs else {})
    for t in ts:
        assert r.as_of(t) == model_as_of(bs, t)
        assert r.rows(as_of=t) == [
            (b.ts, p, o) for b in bs if b.ts <= t for p, o in sorted(b.frontier.items())
        ]
    for p in range(5):
        for o in range(0, 100, 7):
            assert r.binding_for(p, o) == model_binding_for(bs, p, o)


@settings(max_examples=300, deadline=None)
@given(remaps(), times, st.lists(times, min_size=1, max_size=6))
def test_compaction_commutes_with_every_question_at_or_after_since(
    bs: list[Binding], since: int, ts: list[int]
) -> None:
    r = Remap("s", bs)
    c = r.compact(since)
    assert c.since == since
    assert len(c) <= len(r)
    assert all(b.ts >= since for b in c.bindings())
    assert c.frontier == r.frontier  # the latest state never changes
    for t in ts:
        if t < since:
            with pytest.raises(lsm.RetentionError):
                c.as_of(t)
            with pytest.raises(lsm.RetentionError):
                c.rows(as_of=t)
            continue
        assert c.as_of(t) == advance(bs, r.as_of(t), since)
        # rows advanced to since consolidate: one row per partition at since, the newest offset
        expected = []
        merged: dict[int, int] = {}
        for b in r.bindings():
            if b.ts > t:
                break
            if b.ts <= since:
                merged.update(b.frontier)
            else:
                if merged:
                    expected += [(since, p, o) for p, o in sorted(merged.items())]
                    merged = {}
                expected += [(b.ts, p, o) for p, o in sorted(b.frontier.items())]
        expected += [(since, p, o) for p, o in sorted(merged.items())]
        assert c.rows(as_of=t) == expected
    for p in range(5):
        for o in range(0, 100, 7):
            assert c.binding_for(p, o) == advance(bs, r.binding_for(p, o), since)


@settings(max_examples=200, deadline=None)
@given(remaps(), times, times)
def test_compaction_composes_and_never_goes_back(bs: list[Binding], s1: int, s2: int) -> None:
    r = Remap("s", bs)
    twice = r.compact(s1).compact(s2)
    once = r.compact(max(s1, s2))
    assert twice.bindings() == once.bindings() and twice.since == once.since == max(s1, s2)

"""CompactionStats.history_floor: the largest seq of a version a merge dropped or rewrote.

`lsm.sources.DatabaseLog` reads a database's history by seq and trusts every version above the floor;
these tests pin down that every way the merge (compaction/merge.py) loses or changes a version raises it,
and that keeping versions does not.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.filter import CompactionFilter, Decision, TtlFilter
from compaction.merge import CompactionStats, Resolver

TICK = 1_000
K = b"k"


def val(seq: int, value: bytes = b"v", exp: int | None = None) -> tuple:
    return (K, seq, seq * 10, exp, value)


def tomb(seq: int, exp: int | None = None) -> tuple:
    return (K, seq, seq * 10, exp, None)


def floor_after(versions, *, snapshots=(), last=False, cutoff=None, filters=None) -> tuple[list, int]:
    stats = CompactionStats()
    r = Resolver(
        tick=TICK,
        is_last_run=last,
        snapshots=snapshots,
        retention_cutoff=cutoff,
        filters=[TtlFilter(TICK if cutoff is None else min(TICK, cutoff))] if filters is None else filters,
        stats=stats,
    )
    return r.resolve(list(versions)), stats.history_floor


class _Upper(CompactionFilter):
    name = "upper"

    def filter(self, entry):
        return Decision.change_value(entry.value.upper())


def test_kept_versions_leave_the_floor_alone() -> None:
    assert floor_after([val(9), val(5)], snapshots=[7]) == ([val(9), val(5)], 0)
    assert floor_after([val(9), val(5)], cutoff=50) == ([val(9), val(5)], 0)  # 9 written after the cutoff
    assert floor_after([tomb(9), val(5)]) == ([tomb(9)], 5)


def test_each_way_of_losing_a_version_raises_the_floor() -> None:
    assert floor_after([val(9), val(5), val(3)])[1] == 5  # shadowed
    assert floor_after([tomb(9), val(5)], last=True) == ([], 9)  # the bottom tombstone goes too
    # TTL filter: rewritten as a tombstone (which keeps expire_ts, for the purge lag)
    assert floor_after([val(9, exp=95)]) == ([tomb(9, exp=95)], 9)
    assert floor_after([val(9, exp=95)], last=True) == ([], 9)
    assert floor_after([val(9, b"a")], filters=[_Upper()]) == ([val(9, b"A")], 9)  # a filter changed it


def test_add_takes_the_maximum() -> None:
    a, b = CompactionStats(history_floor=7), CompactionStats(history_floor=3, versions_dropped=2)
    a.add(b)
    assert a.history_floor == 7 and a.versions_dropped == 2
    assert CompactionStats().add(a).history_floor == 7


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.none() | st.integers(0, 2000)), min_size=1, max_size=6),
    st.lists(st.integers(1, 30), max_size=3),
    st.booleans(),
    st.none() | st.integers(0, 400),
)
def test_every_version_above_the_floor_survives_unchanged(shape, snapshots, last, cutoff) -> None:
    seqs = sorted(range(1, 31), reverse=True)[: len(shape)]
    versions = [
        tomb(s) if is_tomb else val(s, b"v%d" % s, exp) for s, (is_tomb, exp) in zip(seqs, shape, strict=True)
    ]
    kept, floor = floor_after(versions, snapshots=sorted(set(snapshots)), last=last, cutoff=cutoff)
    assert [v for v in versions if v[1] > floor] == [v for v in kept if v[1] > floor]

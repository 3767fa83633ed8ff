"""PurgeLag: the mergeable purge-lag histogram (compaction/purge_lag.py).

Properties: merging is associative and commutative and equals recording everything into one histogram;
count/max/total are exact; every quantile lies in the same bucket as the exact nearest-rank quantile and
never below it; to_dict/from_dict round-trips (also through JSON and msgpack, as the manifest stores it).
"""

from __future__ import annotations

import json
import math
import pickle

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.purge_lag import PurgeLag, bucket_lower, bucket_upper

lags = st.lists(st.integers(min_value=0, max_value=1 << 42), max_size=60)
SETTINGS = settings(max_examples=150, deadline=None)


def hist(values) -> PurgeLag:
    h = PurgeLag()
    for v in values:
        h.record(v)
    return h


def test_bucket_edges_small_values_are_exact_and_widths_grow_by_quarters():
    assert [bucket_lower(v) for v in range(9)] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    assert bucket_lower(9) == 8 and bucket_upper(8) == 9  # from 8 on, buckets are 2 wide, then 4, ...
    assert (bucket_lower(1000), bucket_upper(bucket_lower(1000))) == (896, 1023)
    assert (bucket_lower(1024), bucket_upper(1024)) == (1024, 1279)
    day = 86_400_000
    lo = bucket_lower(day)
    assert lo <= day <= bucket_upper(lo) and (bucket_upper(lo) - lo + 1) <= lo / 4


@SETTINGS
@given(st.integers(min_value=0, max_value=1 << 50))
def test_every_value_lies_in_its_bucket_and_buckets_tile_the_line(v):
    lo = bucket_lower(v)
    hi = bucket_upper(lo)
    assert lo <= v <= hi
    assert bucket_lower(hi) == lo and bucket_lower(hi + 1) == hi + 1  # the next bucket starts right after
    assert hi - lo <= max(0, lo // 4)


@SETTINGS
@given(lags, lags, lags)
def test_merge_is_associative_and_commutative_and_equals_one_histogram(a, b, c):
    ha, hb, hc = hist(a), hist(b), hist(c)
    left = ha.copy().merge(hb).merge(hc)
    right = ha.copy().merge(hb.copy().merge(hc))
    swapped = hc.copy().merge(ha).merge(hb)
    assert left == right == swapped == hist(a + b + c)
    assert left.to_dict() == swapped.to_dict()


def test_merge_is_in_place_and_returns_self():
    a, b = hist([5]), hist([7000])
    assert a.merge(b) is a
    assert (a.count, a.max) == (2, 7000) and (b.count, b.max) == (1, 7000)


@SETTINGS
@given(st.lists(st.integers(min_value=0, max_value=1 << 40), min_size=1, max_size=80), st.floats(0, 1))
def test_quantile_within_one_bucket_of_exact(values, q):
    h = hist(values)
    assert h.count == len(values) and h.max == max(values) and h.total == sum(values)
    exact = sorted(values)[max(1, math.ceil(q * len(values))) - 1]  # nearest rank
    got = h.quantile(q)
    assert exact <= got <= bucket_upper(bucket_lower(exact))
    assert bucket_lower(got) == bucket_lower(exact)
    assert h.quantile(1.0) == max(values)  # the top quantile is the exact max, not a bucket edge


def test_quantiles_of_known_values_and_empty():
    h = PurgeLag()
    assert h.quantile(0.5) is None and h.count == 0 and not h
    h.record(3, n=98)
    h.record(60_000, n=2)
    assert h.quantile(0.5) == 3 and h.quantile(0.98) == 3
    assert h.quantile(0.99) == 60_000 and h.max == 60_000  # upper edge 61439, clamped to the max
    assert h.to_dict()["p50"] == 3 and h.to_dict()["buckets"] == {"3": 98, str(bucket_lower(60_000)): 2}


@SETTINGS
@given(lags)
def test_to_dict_round_trips_through_json_msgpack_and_pickle(values):
    h = hist(values)
    d = h.to_dict()
    assert set(d) >= {"count", "p50", "p99", "max", "buckets"}
    assert PurgeLag.from_dict(d) == h
    assert PurgeLag.from_dict(json.loads(json.dumps(d))) == h
    assert PurgeLag.from_dict(msgpack.unpackb(msgpack.packb(d), raw=False)) == h
    assert pickle.loads(pickle.dumps(h)) == h


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"count": 1, "max": 5},
        {"count": 2, "max": 5, "buckets": {"5": 1}},  # count does not match
        {"count": 1, "max": 500, "buckets": {"5": 1}},  # max outside the top bucket
        {"count": 1, "max": 9, "buckets": {"9": 1}},  # 9 is not a bucket edge (8..9 is)
        {"count": 1, "max": 5, "buckets": {"x": 1}},
        {"count": 1, "max": 5, "buckets": {"5": 0}},
        {"count": -1, "max": 5, "buckets": {}},
    ],
)
def test_from_dict_rejects_inconsistent_maps(bad):
    with pytest.raises(ValueError):
        PurgeLag.from_dict(bad)


def test_record_rejects_negative_lag_and_count():
    h = PurgeLag()
    with pytest.raises(ValueError):
        h.record(-1)
    with pytest.raises(ValueError):
        h.record(5, n=-2)
    h.record(5, n=0)
    assert h.count == 0

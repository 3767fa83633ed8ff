"""Tests for lsm/time_seq.py.

The worked examples come from CouchDB pull request #5603 ("Time-based since parameter for `_changes`",
apache/couchdb; see docs/sources.md): its description's 1M-hour listing, the example in the module
comment of couch_time_seq.erl, and its unit tests (couch_time_seq_tests.erl). A literal transcription of
couch_time_seq's Erlang roll-up serves as a model for differential property tests.
"""

from __future__ import annotations

import calendar
import datetime
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsm.time_seq import (
    DEFAULT_MIN_TIME,
    INTERVALS,
    MAX_BINS,
    NOW,
    RESOLUTION_S,
    TimeSeq,
    TimeSeqFormatError,
    format_rfc3339,
)

TEST_TIME = calendar.timegm((3000, 1, 1, 0, 0, 0))  # far future, as upstream's tests use
U64_MAX = 2**64 - 1


def hx(*parts: str) -> bytes:
    """Bytes from hex pieces, kept apart in the source so each field can be read on its own."""
    return bytes.fromhex("".join(parts))


def hours(n: int) -> int:
    return n * 3600


def years(n: int) -> int:
    return hours(1) * 24 * 356 * n  # sic: upstream's helper uses 356-day "years"


def update_cnt(n: int, time_inc: int) -> TimeSeq:
    """Upstream's update_cnt/2: n updates from TEST_TIME, seq 0, 1, 2, ... every time_inc seconds."""
    ts = TimeSeq()
    for i in range(n):
        ts.update(TEST_TIME + i * time_inc, i)
    return ts


def fill_bins() -> TimeSeq:
    """Upstream's fill_bins/0: hourly updates from TEST_TIME with seq 1, 2, ... until 60 bins exist."""
    ts = TimeSeq()
    t, seq = TEST_TIME, 1
    while len(ts.bins) != MAX_BINS:
        ts.update(t, seq)
        t, seq = t + hours(1), seq + 1
    return ts


# -- a literal model of couch_time_seq's Erlang ----------------------------------------------------


def model_update(bins: list[tuple[int, int]], time: int, seq: int, min_time: int) -> list[tuple[int, int]]:
    """update/3 + update_bins/3 of couch_time_seq.erl, on newest-first lists of (time, seq)."""
    if time < min_time:
        return bins
    rt = (time // INTERVALS[0]) * INTERVALS[0]
    if not bins:
        return [(rt, seq)]
    top_t, top_s = bins[0]
    if rt > top_t and seq > top_s:
        return [(rt, seq)] + model_rollup(rt, bins)
    return bins


def model_rollup(now: int, bins: list[tuple[int, int]]) -> list[tuple[int, int]]:
    if len(bins) < MAX_BINS:
        return bins
    acc = [(bins[0][0], now - bins[0][0], bins[0][1])]  # add_durations/2
    for t, s in bins[1:]:
        acc.insert(0, (t, acc[0][0] - t, s))
    rolled = model_do_rollup(acc, now, list(INTERVALS))
    return [(t, s) for t, _, s in reversed(rolled)]


def model_do_rollup(
    bins: list[tuple[int, int, int]], now: int, intervals: list[int]
) -> list[tuple[int, int, int]]:
    while len(intervals) > 1:
        interval, nxt = intervals[0], intervals[1]
        thresh = now - nxt
        k = 0
        while k < len(bins) and bins[k][0] <= thresh:  # lists:splitwith
            k += 1
        before, after = bins[:k], bins[k:]
        merged = model_merge(before, interval)
        if merged != before:
            return merged + after
        intervals = intervals[1:]
    half = len(bins) // 2  # the fallback clause
    before, after = bins[:half], bins[half:]
    return model_merge(before, max(d for _, d, _ in before)) + after


def model_merge(bins: list[tuple[int, int, int]], interval: int) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    rest = list(bins)
    while rest:
        if len(rest) == 1:
            out.append(rest.pop())
        elif rest[0][1] <= interval and rest[1][1] <= interval:
            (t1, d1, s1), (_, d2, _) = rest[0], rest[1]
            out.append((t1, d1 + d2, s1))
            rest = rest[2:]
        else:
            out.append(rest[0])
            rest = rest[1:]
    return out


# -- upstream unit tests ----------------------------------------------------------------------------


def test_default_min_time_is_couch_time_seqs() -> None:
    assert DEFAULT_MIN_TIME == 1754006400 == calendar.timegm((2025, 8, 1, 0, 0, 0))
    assert TimeSeq().min_time == DEFAULT_MIN_TIME


def test_min_time_limit() -> None:
    ts = TimeSeq()
    assert not ts.update(1, 42)
    assert ts == TimeSeq() and ts.bins == []
    assert not ts.update(DEFAULT_MIN_TIME - 1, 43)
    assert ts.update(DEFAULT_MIN_TIME, 44)


def test_update_first() -> None:
    ts = TimeSeq()
    ts.update(TEST_TIME, 1)
    assert ts != TimeSeq()
    assert len(ts.bins) == 1


def test_update_same_hour() -> None:
    ts = TimeSeq()
    ts.update(TEST_TIME, 1)
    ts.update(TEST_TIME, 2)
    assert ts.bins == [(TEST_TIME, 1)]  # a bin keeps the first seq seen in it
    ts.update(TEST_TIME, 1)
    assert ts.bins == [(TEST_TIME, 1)]


def test_stale_update() -> None:
    ts = TimeSeq()
    ts.update(TEST_TIME + hours(3), 42)
    before = ts.bins
    ts.update(TEST_TIME, 43)
    assert ts.bins == before


def test_update_new_hour() -> None:
    ts = TimeSeq()
    ts.update(TEST_TIME + hours(3), 42)
    ts.update(TEST_TIME + hours(6), 43)
    assert [s for _, s in ts.bins] == [43, 42]


def test_update_large_gap() -> None:
    ts = TimeSeq()
    ts.update(TEST_TIME + hours(1), 42)
    ts.update(TEST_TIME + years(30), 43)
    assert [s for _, s in ts.bins] == [43, 42]


def test_update_when_bins_are_full() -> None:
    ts = fill_bins()
    assert len(ts.bins) == 60
    top_t, top_s = ts.bins[0]
    ts.update(top_t + hours(1), top_s + 1)
    assert len(ts.bins) <= 60
    ts.update(top_t + hours(2), top_s + 2)
    assert len(ts.bins) <= 60
    ts.update(top_t + years(1), top_s + 3)
    assert len(ts.bins) <= 60
    ts._check()


def test_update_large_gap_when_bins_are_full() -> None:
    ts = fill_bins()
    top_t, top_s = ts.bins[0]
    ts.update(top_t + years(999), top_s + 1)
    assert ts.bins[-1][0] == TEST_TIME
    assert ts.bins[0][0] > TEST_TIME + years(999)
    ts._check()


def test_update_3_hours_8_times() -> None:
    ts = update_cnt(8, hours(3))
    assert len(ts.bins) == 8
    assert ts.bins[-1][0] == TEST_TIME
    assert ts.bins[0][0] == TEST_TIME + hours(21)
    assert [n for _, n in ts.histogram(8)] == [1] * 8


def test_update_twice_an_hour_for_a_day() -> None:
    ts = update_cnt(2 * 24, hours(1) // 2)
    assert len(ts.bins) == 8
    assert ts.bins[-1][0] == TEST_TIME
    assert ts.bins[0][0] == TEST_TIME + hours(21)
    assert [n for _, n in ts.histogram(2 * 24)] == [6] * 8


def test_update_once_an_hour_for_180_hours() -> None:
    ts = update_cnt(180, hours(1))
    assert len(ts.bins) == 60
    assert ts.bins[-1][0] == TEST_TIME
    assert ts.bins[0][0] == TEST_TIME + hours(177)
    assert [n for _, n in ts.histogram(180)] == [3] * 60


def test_update_once_an_hour_for_183_hours() -> None:
    ts = update_cnt(183, hours(1))
    assert len(ts.bins) == 32  # the first roll-up merged most of the 3 hour bins
    assert ts.bins[-1][0] == TEST_TIME
    assert ts.bins[0][0] == TEST_TIME + hours(180)
    counts = [n for _, n in ts.histogram(183)]
    assert all(3 <= n <= 6 for n in counts)
    assert counts[0] == 6 and counts[-1] == 3


def test_update_once_an_hour_for_100_000_hours() -> None:
    ts = update_cnt(100_000, 3600)
    assert sum(n for _, n in ts.histogram(100_000)) == 100_000
    assert ts.bins[-1][0] == TEST_TIME
    ts._check()


def test_update_10_000_with_large_interval() -> None:
    ts = update_cnt(10_000, 3600 * 24 * 30)
    assert sum(n for _, n in ts.histogram(10_000)) == 10_000
    assert ts.bins[-1][0] == TEST_TIME
    ts._check()


def test_since() -> None:
    t, t3, t9, t15 = TEST_TIME, TEST_TIME + hours(3), TEST_TIME + hours(9), TEST_TIME + hours(15)
    ts = TimeSeq()
    for time_s, seq in ((t, 0), (t3, 42), (t9, 43), (t15, 44)):
        ts.update(time_s, seq)
    assert ts.bins == [(t15, 44), (t9, 43), (t3, 42), (t, 0)]
    assert ts.since(0) == 0
    assert [ts.since(x) for x in (t - 1, t, t + 1)] == [0, 0, 0]
    assert [ts.since(x) for x in (t3 - 1, t3, t3 + 1)] == [0, 42, 42]
    assert [ts.since(x) for x in (t9 - 1, t9, t9 + 1)] == [42, 43, 43]
    assert [ts.since(x) for x in (t15 - 1, t15, t15 + 1)] == [43, 44, 44]
    assert ts.since(t + hours(999)) == NOW


def test_histogram() -> None:
    ts = TimeSeq()
    assert ts.histogram(0) == [] and ts.histogram(1) == []
    # Start at seq 42 as if upgrading a db created before time-seq: those 42 updates land in 1970.
    ts.update(TEST_TIME, 42)
    assert ts.histogram(43) == [("1970-01-01T00:00:00Z", 42), ("3000-01-01T00:00:00Z", 1)]
    ts.update(TEST_TIME + hours(3), 43)
    # 1 is the jump from 42 to 43, then 3 from 43 to the current 46
    assert ts.histogram(46) == [
        ("1970-01-01T00:00:00Z", 42),
        ("3000-01-01T00:00:00Z", 1),
        ("3000-01-01T03:00:00Z", 3),
    ]


# -- the pull request's worked examples --------------------------------------------------------------

MILLION_HOURS_LISTING = """
3000-01-01T00:00:00Z 82176
3009-05-18T00:00:00Z 83712
3018-12-05T00:00:00Z 85584
3028-09-09T00:00:00Z 82416
3038-02-03T00:00:00Z 85488
3047-11-05T00:00:00Z 82704
3057-04-12T00:00:00Z 82944
3066-09-28T00:00:00Z 85872
3076-07-15T00:00:00Z 83520
3086-01-24T00:00:00Z 41472
3090-10-18T00:00:00Z 41472
3095-07-12T00:00:00Z 41760
3100-04-17T00:00:00Z 41472
3105-01-09T00:00:00Z 20736
3107-05-23T00:00:00Z 20736
3109-10-03T00:00:00Z 10368
3110-12-09T00:00:00Z 10368
3112-02-14T00:00:00Z 5184
3112-09-17T00:00:00Z 3456
3113-02-08T00:00:00Z 864
3113-03-16T00:00:00Z 864
3113-04-21T00:00:00Z 864
3113-05-27T00:00:00Z 864
3113-07-02T00:00:00Z 864
3113-08-07T00:00:00Z 288
3113-08-19T00:00:00Z 288
3113-08-31T00:00:00Z 288
3113-09-12T00:00:00Z 288
3113-09-24T00:00:00Z 288
3113-10-06T00:00:00Z 288
3113-10-18T00:00:00Z 288
3113-10-30T00:00:00Z 288
3113-11-11T00:00:00Z 288
3113-11-23T00:00:00Z 288
3113-12-05T00:00:00Z 288
3113-12-17T00:00:00Z 288
3113-12-29T00:00:00Z 96
3114-01-02T00:00:00Z 48
3114-01-04T00:00:00Z 48
3114-01-06T00:00:00Z 48
3114-01-08T00:00:00Z 48
3114-01-10T00:00:00Z 48
3114-01-12T00:00:00Z 48
3114-01-14T00:00:00Z 48
3114-01-16T00:00:00Z 48
3114-01-18T00:00:00Z 48
3114-01-20T00:00:00Z 24
3114-01-21T00:00:00Z 24
3114-01-22T00:00:00Z 24
3114-01-23T00:00:00Z 24
3114-01-24T00:00:00Z 24
3114-01-25T00:00:00Z 24
3114-01-26T00:00:00Z 24
3114-01-27T00:00:00Z 24
3114-01-28T00:00:00Z 24
3114-01-29T00:00:00Z 24
3114-01-30T00:00:00Z 6
3114-01-30T06:00:00Z 6
3114-01-30T12:00:00Z 3
3114-01-30T15:00:00Z 1
"""


def test_one_million_hourly_updates_give_the_pull_requests_listing() -> None:
    ts = update_cnt(1_000_000, hours(1))
    expected = [
        (when, int(n)) for when, n in (line.split() for line in MILLION_HOURS_LISTING.split("\n") if line)
    ]
    assert ts.histogram(1_000_000) == expected
    assert len(ts.bins) == 60
    ts._check()
    raw = ts.to_bytes()
    assert len(raw) < 500
    assert TimeSeq.from_bytes(raw) == ts


def test_module_comment_example() -> None:
    # Bins starting at t=42, 40 and 37 (in units of 3 hours here) with seqs 986, 891 and 19.
    unit = RESOLUTION_S
    ts = TimeSeq()
    ts.bins = [(42 * unit, 986), (40 * unit, 891), (37 * unit, 19)]
    ts._check()
    assert ts.since(41 * unit) == 891  # "looking for sequences starting before t=41, we'd pick 891"
    assert ts.since(37 * unit - 1) == 0  # before the oldest bin: since=0
    assert ts.since(37 * unit) == 19
    assert ts.since(42 * unit + unit) == 986
    assert ts.since(42 * unit + unit + 1) == NOW


# -- since / histogram / reset edges ----------------------------------------------------------------


def test_since_on_empty_is_zero() -> None:
    assert TimeSeq().since(0) == 0
    assert TimeSeq().since(2**62) == 0


def test_since_now_is_exactly_more_than_three_hours_past_the_newest_bin() -> None:
    ts = TimeSeq(min_time=0)
    ts.update(TEST_TIME + 100, 7)  # rounds down to TEST_TIME
    assert ts.since(TEST_TIME + RESOLUTION_S) == 7
    assert ts.since(TEST_TIME + RESOLUTION_S + 1) == NOW
    assert NOW == "now"


def test_since_with_widely_spaced_bins_is_not_now() -> None:
    # A time far after an older bin but before the newest bin picks the older bin, not NOW.
    ts = TimeSeq()
    ts.update(TEST_TIME, 10)
    ts.update(TEST_TIME + years(5), 20)
    assert ts.since(TEST_TIME + years(2)) == 10


def test_histogram_counts_never_go_negative_and_skip_1970_for_seq_zero() -> None:
    ts = TimeSeq()
    ts.update(TEST_TIME, 0)
    ts.update(TEST_TIME + hours(3), 10)
    assert ts.histogram(5) == [("3000-01-01T00:00:00Z", 10), ("3000-01-01T03:00:00Z", 0)]


def test_reset() -> None:
    ts = update_cnt(500, hours(1))
    assert len(ts) == len(ts.bins) > 0
    ts.reset()
    assert ts.bins == [] and len(ts) == 0 and ts == TimeSeq()
    assert ts.since(TEST_TIME) == 0 and ts.histogram(10) == []
    ts.update(TEST_TIME, 5)  # starts fresh, even at an earlier time
    assert ts.bins == [(TEST_TIME, 5)]
    ts._check()


def test_bins_is_a_newest_first_copy() -> None:
    ts = update_cnt(10, hours(3))
    bins = ts.bins
    bins.append((0, 0))
    assert ts.bins != bins
    assert ts.bins == sorted(ts.bins, reverse=True)


def test_update_validates_its_arguments() -> None:
    ts = TimeSeq()
    with pytest.raises(ValueError):
        ts.update(TEST_TIME, -1)
    with pytest.raises(ValueError):
        ts.update(TEST_TIME, 2**64)
    with pytest.raises(ValueError):
        ts.update(2**63, 1)
    with pytest.raises(ValueError):
        TimeSeq(min_time=-1)


# -- byte format ------------------------------------------------------------------------------------


def test_bytes_by_hand() -> None:
    assert TimeSeq().to_bytes() == bytes.fromhex("0100")  # version 1, no bins
    ts = TimeSeq(min_time=0)
    ts.update(3 * 3600, 42)
    ts.update(6 * 3600, 300)
    # version 01, count 02; oldest bin: 1 unit of 3 h -> 01, seq 42 -> 2a;
    # next bin: time step 1 -> 01, seq step 258 -> LEB128 0x82 0x02
    assert ts.to_bytes() == hx("0102", "012a", "018202")
    assert TimeSeq.from_bytes(hx("0102", "012a", "018202")) == ts


def test_full_time_seq_with_realistic_values_is_under_500_bytes() -> None:
    # 60 bins, the oldest at year 3114 minus a lifetime, seqs spread up to 2**40.
    ts = TimeSeq()
    t, seq = DEFAULT_MIN_TIME, 0
    step_t = (calendar.timegm((3114, 1, 1, 0, 0, 0)) - t) // 60
    for _ in range(60):
        ts.update(t, seq)
        t, seq = t + step_t, seq + 2**40 // 60
    assert len(ts.bins) == 60
    raw = ts.to_bytes()
    assert len(raw) < 500
    assert TimeSeq.from_bytes(raw) == ts


def test_worst_case_size_for_times_to_3114_and_seqs_to_2_40() -> None:
    # Every varint as long as the bounds allow: a first bin at 2**21 units of 3 h (4 bytes) with seq 2**35
    # (6 bytes), then 59 steps of 2**14 units (3 bytes) and 2**28 seqs (5 bytes).
    times = [(2**21 + i * 2**14) * RESOLUTION_S for i in range(60)]
    seqs = [2**35 + i * 2**28 for i in range(60)]
    assert times[-1] < calendar.timegm((3114, 1, 1, 0, 0, 0)) and seqs[-1] < 2**40
    ts = TimeSeq()
    ts.bins = list(zip(reversed(times), reversed(seqs), strict=True))
    ts._check()
    raw = ts.to_bytes()
    assert len(raw) == 2 + 4 + 6 + 59 * (3 + 5) == 484
    assert TimeSeq.from_bytes(raw) == ts


@st.composite
def cumulative_updates(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Updates moving mostly forward in time and seq, often long enough to roll up many times.

    Long runs are generated from a drawn seed (hypothesis cannot draw thousands of values cheaply);
    short ones step by step so that they shrink well.
    """
    t, seq = TEST_TIME, draw(st.integers(0, 10))
    out = []
    if draw(st.integers(0, 3)) == 0:
        hour_steps = st.one_of(
            st.integers(-24, 24), st.integers(-24, 24 * 400), st.sampled_from([3, 24, 720])
        )
        for dh, dseq in draw(st.lists(st.tuples(hour_steps, st.integers(-2, 1000)), max_size=100)):
            t, seq = t + hours(dh), max(0, seq + dseq)
            out.append((t, seq))
        return out
    rng = random.Random(draw(st.integers(0, 2**32)))
    n = rng.randint(100, 3000)
    scale = rng.choice([1, 3, 24, 24 * 30, 24 * 365])  # typical gap, in hours
    for _ in range(n):
        t += hours(rng.choice([-1, 0, 1, 1, 2, 3, 5, 10, 100]) * rng.randint(0, scale))
        seq = max(0, seq + rng.randint(-1, 50))
        out.append((t, seq))
    return out


# Upstream's generator: absolute hours in [-24, 10 years] around TEST_TIME, any non-negative seq.
absolute_updates = st.lists(
    st.tuples(st.integers(-24, 24 * 365 * 10), st.integers(0, U64_MAX)), max_size=80
).map(lambda ups: [(TEST_TIME + hours(h), s) for h, s in ups])


@settings(max_examples=60, deadline=None)
@given(st.one_of(cumulative_updates(), absolute_updates))
def test_properties_and_agreement_with_the_model(updates: list[tuple[int, int]]) -> None:
    ts = TimeSeq()
    model: list[tuple[int, int]] = []
    for time_s, seq in updates:
        ts.update(time_s, seq)
        model = model_update(model, time_s, seq, DEFAULT_MIN_TIME)
    assert ts.bins == model
    ts._check()
    bins = ts.bins
    times = [t for t, _ in bins]
    seqs = [s for _, s in bins]
    assert times == sorted(set(times), reverse=True)  # strictly descending
    assert seqs == sorted(seqs, reverse=True)  # non-increasing
    assert len(bins) <= MAX_BINS
    assert 0 not in seqs[:-1]  # only the oldest bin may hold seq 0
    # since() is monotone in time, NOW counting as the largest
    probes = sorted(
        {TEST_TIME - 1, *times, *(t + 1 for t in times), *(t + RESOLUTION_S + 1 for t in times[:1])}
    )
    answers = [ts.since(p) for p in probes]
    ranked = [float("inf") if a == NOW else a for a in answers]
    assert ranked == sorted(ranked)
    assert TimeSeq.from_bytes(ts.to_bytes()) == ts


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from([3 * 3600, 9 * 365 * 86400, 17 * 365 * 86400, 100 * 365 * 86400]), max_size=250)
)
def test_the_fallback_roll_up_agrees_with_the_model(time_steps: list[int]) -> None:
    # Gaps wider than 8 years leave nothing for the interval schedule to merge: the fallback runs.
    ts, model = TimeSeq(min_time=0), []
    t = 0
    for seq, step in enumerate(time_steps, start=1):
        t += step
        ts.update(t, seq)
        model = model_update(model, t, seq, 0)
    assert ts.bins == model
    ts._check()


@settings(max_examples=60, deadline=None)
@given(cumulative_updates())
def test_byte_round_trip_and_every_prefix_rejected(updates: list[tuple[int, int]]) -> None:
    ts = TimeSeq()
    for time_s, seq in updates:
        ts.update(time_s, seq)
    raw = ts.to_bytes()
    assert TimeSeq.from_bytes(raw) == ts
    assert len(raw) <= 2 + len(ts.bins) * 20
    for cut in range(len(raw)):
        with pytest.raises(TimeSeqFormatError):
            TimeSeq.from_bytes(raw[:cut])
    with pytest.raises(TimeSeqFormatError, match="trailing"):
        TimeSeq.from_bytes(raw + b"\x00")


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"", "truncated"),
        (b"\x01", "truncated"),
        (bytes.fromhex("0200"), "version"),
        (bytes.fromhex("0000"), "version"),
        (bytes([1, 61]) + bytes(122), "at most 60"),
        (hx("0101", "8100", "01"), "overlong"),  # 1 written in two bytes
        (hx("0101", "01", "ffffffffffffffffff7f"), "64 bits"),
        (hx("0101", "01", "8080808080808080808001"), "longer than"),
        (hx("0102", "0101", "0001"), "does not advance"),  # time step 0
        (hx("0102", "0101", "0100"), "does not advance"),  # seq step 0
        (hx("0101", "0101", "00"), "trailing"),
        (hx("0102", "0101", "01"), "truncated"),
    ],
)
def test_corrupt_bytes_are_rejected(raw: bytes, match: str) -> None:
    with pytest.raises(TimeSeqFormatError, match=match):
        TimeSeq.from_bytes(raw)


def test_format_error_is_a_value_error() -> None:
    assert issubclass(TimeSeqFormatError, ValueError)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, calendar.timegm((9999, 12, 31, 23, 59, 59))))
def test_format_rfc3339_matches_datetime(t: int) -> None:
    expected = datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert format_rfc3339(t) == expected


def test_format_rfc3339_beyond_year_9999() -> None:
    assert format_rfc3339(0) == "1970-01-01T00:00:00Z"
    assert format_rfc3339(calendar.timegm((9999, 12, 31, 23, 59, 59)) + 1) == "10000-01-01T00:00:00Z"

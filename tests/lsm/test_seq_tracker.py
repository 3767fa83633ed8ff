"""Tests for lsm/seq_tracker.py: gating, downsampling, rounded lookups, merge, and the byte format."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from formats import gorilla
from lsm.seq_tracker import FORMAT_NARROW, FORMAT_WIDE, Round, SeqTracker, SeqTrackerFormatError

U64_MAX = 2**64 - 1
I64_MIN, I64_MAX = -(2**63), 2**63 - 1


def hx(*parts: str) -> bytes:
    """Bytes from hex pieces, kept apart in the source so each field can be read on its own."""
    return bytes.fromhex("".join(parts))


def tracker(pairs: list[tuple[int, int]], capacity: int = 8192, interval_s: int = 30) -> SeqTracker:
    t = SeqTracker(capacity=capacity, interval_s=interval_s)
    t.extend(pairs)
    return t


# -- inserting --------------------------------------------------------------------------------------


def test_interval_gating() -> None:
    t = SeqTracker(interval_s=30)
    assert t.insert(1, 1000)
    assert not t.insert(2, 1010)
    assert not t.insert(3, 1029)
    assert t.insert(4, 1030)  # exactly interval_s later
    assert not t.insert(5, 1059)
    assert t.insert(6, 1075)
    assert t.entries() == [(1, 1000), (4, 1030), (6, 1075)]


def test_same_seq_later_is_ignored() -> None:
    # The seq did not move: its first timestamp stays, and seqs stay strictly increasing.
    t = tracker([(10, 1000)])
    assert not t.insert(10, 5000)
    assert t.entries() == [(10, 1000)]
    assert t.insert(11, 5000)


def test_backwards_input_raises_and_changes_nothing() -> None:
    t = tracker([(10, 1000), (20, 1030)])
    before = t.entries()
    with pytest.raises(ValueError, match="backwards"):
        t.insert(19, 2000)
    with pytest.raises(ValueError, match="backwards"):
        t.insert(30, 1029)
    # Going backwards is an error even inside the gating interval.
    with pytest.raises(ValueError):
        t.insert(19, 1031)
    assert t.entries() == before


def test_value_ranges_and_configuration_are_checked() -> None:
    t = SeqTracker()
    with pytest.raises(ValueError):
        t.insert(-1, 0)
    with pytest.raises(ValueError):
        t.insert(2**64, 0)
    with pytest.raises(ValueError):
        t.insert(0, 2**63)
    with pytest.raises(ValueError):
        SeqTracker(capacity=0)
    with pytest.raises(ValueError):
        SeqTracker(interval_s=0)
    t.insert(U64_MAX, I64_MIN)
    assert t.entries() == [(U64_MAX, I64_MIN)]


def test_downsampling_keeps_even_indices() -> None:
    t = SeqTracker(capacity=8, interval_s=1)
    for i in range(8):
        t.insert(i * 10, i)
    assert len(t) == 8
    t.insert(80, 8)  # 9 > 8: keep indices 0, 2, 4, 6, 8
    assert t.entries() == [(0, 0), (20, 2), (40, 4), (60, 6), (80, 8)]
    for i in range(9, 13):
        t.insert(i * 10, i)
    # 90, 100, 110 bring it back to 8; 120 overflows: [0, 20, 40, 60, 80, 90, 100, 110, 120][::2]
    assert len(t) == 5
    t._check()
    assert t.entries() == [(0, 0), (40, 4), (80, 8), (100, 10), (120, 12)]


def test_downsampling_with_odd_capacity_drops_the_newest() -> None:
    # Documented consequence of "keep 0, 2, 4, ...": with an odd capacity the overflowing entry has an
    # odd index.
    t = SeqTracker(capacity=3, interval_s=1)
    t.extend([(1, 1), (2, 2), (3, 3), (4, 4)])
    assert t.entries() == [(1, 1), (3, 3)]


def test_capacity_one_keeps_the_first_pair() -> None:
    t = SeqTracker(capacity=1, interval_s=1)
    t.extend([(1, 1), (2, 2), (3, 3)])
    assert t.entries() == [(1, 1)]


def test_rfc_example_window() -> None:
    # 1024 mappings at one per 30 s first cover 512 minutes; after downsampling the same span is held by
    # the first 512 entries, and the tracker keeps going.
    t = SeqTracker(capacity=1024)
    for i in range(1024):
        t.insert(i, i * 30)
    assert len(t) == 1024 and t.timestamps[-1] - t.timestamps[0] == 1023 * 30
    t.insert(1024, 1024 * 30)
    assert len(t) == 513
    assert t.timestamps[:512] == [i * 60 for i in range(512)]


# -- lookups ----------------------------------------------------------------------------------------


def test_empty_tracker_returns_none() -> None:
    t = SeqTracker()
    for r in Round:
        assert t.find_ts(5, r) is None
        assert t.find_seq(5, r) is None


def test_find_ts_rounding() -> None:
    t = tracker([(100, 1000), (200, 1030), (300, 1060)])
    # exact matches win in both directions
    for r in Round:
        assert t.find_ts(100, r) == 1000
        assert t.find_ts(200, r) == 1030
        assert t.find_ts(300, r) == 1060
    # between entries
    assert t.find_ts(150, Round.UP) == 1030
    assert t.find_ts(150, Round.DOWN) == 1000
    # below the first entry
    assert t.find_ts(99, Round.UP) == 1000
    assert t.find_ts(99, Round.DOWN) is None
    assert t.find_ts(0, Round.UP) == 1000
    # above the last entry
    assert t.find_ts(301, Round.UP) is None
    assert t.find_ts(301, Round.DOWN) == 1060
    assert t.find_ts(U64_MAX, Round.DOWN) == 1060


def test_find_seq_rounding() -> None:
    t = tracker([(100, 1000), (200, 1030), (300, 1060)])
    for r in Round:
        assert t.find_seq(1030, r) == 200
    assert t.find_seq(1031, Round.UP) == 300
    assert t.find_seq(1031, Round.DOWN) == 200
    assert t.find_seq(999, Round.UP) == 100
    assert t.find_seq(999, Round.DOWN) is None
    assert t.find_seq(1061, Round.UP) is None
    assert t.find_seq(1061, Round.DOWN) == 300


def test_round_must_be_a_round() -> None:
    t = tracker([(100, 1000), (200, 1030)])
    with pytest.raises(TypeError):
        t.find_ts(150, "up")  # type: ignore[arg-type]


def test_single_entry() -> None:
    t = tracker([(5, 50)])
    assert t.find_ts(5, Round.DOWN) == 50
    assert t.find_ts(4, Round.UP) == 50 and t.find_ts(4, Round.DOWN) is None
    assert t.find_ts(6, Round.DOWN) == 50 and t.find_ts(6, Round.UP) is None


# -- merge ------------------------------------------------------------------------------------------


def test_merge_appends_only_newer_pairs() -> None:
    manifest = tracker([(10, 1000), (20, 1030)])
    commits = tracker([(5, 900), (20, 1030), (25, 1040), (30, 1060), (40, 1090)], interval_s=1)
    manifest.merge(commits)
    # (25, 1040) is newer but inside the 30 s gate; (30, 1060) and (40, 1090) are recorded.
    assert manifest.entries() == [(10, 1000), (20, 1030), (30, 1060), (40, 1090)]
    manifest.merge(commits)  # idempotent
    assert manifest.entries() == [(10, 1000), (20, 1030), (30, 1060), (40, 1090)]


def test_merge_into_empty_and_from_empty() -> None:
    a = SeqTracker()
    b = tracker([(1, 100), (2, 200)])
    a.merge(SeqTracker())
    assert len(a) == 0
    a.merge(b)
    assert a == b


def test_merge_of_a_contradicting_history_raises_and_changes_nothing() -> None:
    a = tracker([(10, 1000), (50, 1030)])
    b = tracker([(10, 1000), (40, 1100), (60, 1200)])
    with pytest.raises(ValueError, match="cannot merge"):
        a.merge(b)
    assert a.entries() == [(10, 1000), (50, 1030)]


# -- byte format ------------------------------------------------------------------------------------


def test_two_entry_tracker_by_hand() -> None:
    t = tracker([(100, 1_000_000_000), (150, 1_000_000_030)])
    expected = hx(
        "01",  # version 1 (narrow)
        "02000000",  # count 2, u32 little-endian
        # seqs: count 00000002, first 100 = 0x64, then d = 50 -> '10' + 0110010 = 100110010,
        # padded: 10011001 00000000 -> 99 00
        "00000002",
        "0000000000000064",
        "9900",
        # timestamps: count 00000002, first 1_000_000_000 = 0x3b9aca00, then d = 30 ->
        # '10' + 0011110 = 100011110, padded: 10001111 00000000 -> 8f 00
        "00000002",
        "000000003b9aca00",
        "8f00",
    )
    assert t.to_bytes() == expected
    assert SeqTracker.from_bytes(expected) == t


def test_empty_tracker_bytes() -> None:
    b = SeqTracker().to_bytes()
    assert b == hx("01", "00000000", "00000000", "00000000")
    assert len(SeqTracker.from_bytes(b)) == 0


def test_version_two_only_when_needed() -> None:
    fits = tracker([(0, 0), (2**31 - 1, 30)])  # d = 2**31 - 1 still fits 32 bits
    assert fits.to_bytes()[0] == FORMAT_NARROW
    big = tracker([(0, 0), (2**40, 30), (2**40 + 1, 60)])  # d = 2**40 does not
    raw = big.to_bytes()
    assert raw[0] == FORMAT_WIDE
    assert SeqTracker.from_bytes(raw) == big
    # From one extreme to the other is a step of -1 modulo 2**64: narrow suffices.
    extremes = tracker([(0, I64_MIN), (U64_MAX, I64_MAX)])
    raw = extremes.to_bytes()
    assert raw[0] == FORMAT_NARROW
    assert SeqTracker.from_bytes(raw).entries() == [(0, I64_MIN), (U64_MAX, I64_MAX)]
    half = tracker([(0, I64_MIN), (2**63, 0), (U64_MAX, I64_MAX)])
    raw = half.to_bytes()
    assert raw[0] == FORMAT_WIDE
    assert SeqTracker.from_bytes(raw) == half


@pytest.mark.parametrize("version", [0, 3, 255])
def test_unknown_versions_are_rejected(version: int) -> None:
    raw = bytearray(tracker([(1, 100), (2, 200)]).to_bytes())
    raw[0] = version
    with pytest.raises(SeqTrackerFormatError, match="version"):
        SeqTracker.from_bytes(bytes(raw))


def test_version_two_bytes_read_as_version_one_are_not_accepted_silently() -> None:
    raw = bytearray(tracker([(0, 0), (2**40, 30), (2**40 + 1, 60)]).to_bytes())
    raw[0] = FORMAT_NARROW
    with pytest.raises(SeqTrackerFormatError):
        SeqTracker.from_bytes(bytes(raw))


def test_count_must_agree_with_the_streams() -> None:
    raw = bytearray(tracker([(1, 100), (2, 200)]).to_bytes())
    struct.pack_into("<I", raw, 1, 3)
    with pytest.raises(SeqTrackerFormatError, match="count"):
        SeqTracker.from_bytes(bytes(raw))
    uneven = struct.pack("<BI", 1, 2) + gorilla.encode([1, 2]) + gorilla.encode([100, 200, 300], signed=True)
    with pytest.raises(SeqTrackerFormatError, match="count"):
        SeqTracker.from_bytes(uneven)


@pytest.mark.parametrize(
    ("seqs", "timestamps"),
    [([2, 1], [100, 200]), ([1, 1], [100, 200]), ([1, 2], [200, 100]), ([1, 2], [100, 100])],
)
def test_unsorted_content_is_rejected(seqs: list[int], timestamps: list[int]) -> None:
    raw = struct.pack("<BI", 1, 2) + gorilla.encode(seqs) + gorilla.encode(timestamps, signed=True)
    with pytest.raises(SeqTrackerFormatError, match="strictly increasing"):
        SeqTracker.from_bytes(raw)


def test_trailing_bytes_are_rejected() -> None:
    raw = tracker([(1, 100), (2, 200)]).to_bytes()
    with pytest.raises(SeqTrackerFormatError, match="trailing"):
        SeqTracker.from_bytes(raw + b"\x00")


def test_from_bytes_with_a_smaller_capacity_downsamples() -> None:
    t = tracker([(i, i * 30) for i in range(10)])
    small = SeqTracker.from_bytes(t.to_bytes(), capacity=4)
    assert small.entries() == [(0, 0), (4, 120), (8, 240)]
    small._check()


def test_format_error_is_a_value_error() -> None:
    assert issubclass(SeqTrackerFormatError, ValueError)


# -- properties -------------------------------------------------------------------------------------


seq_steps = st.one_of(st.integers(0, 3), st.integers(0, 2000), st.integers(0, 2**62))
ts_steps = st.one_of(st.integers(0, 40), st.just(30), st.integers(0, 2**62))


@st.composite
def monotonic_pairs(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Non-decreasing (seq, ts) pairs, sometimes starting at or running into the extremes."""
    seq = draw(st.one_of(st.just(0), st.integers(0, U64_MAX), st.just(U64_MAX)))
    ts = draw(st.one_of(st.just(I64_MIN), st.integers(I64_MIN, I64_MAX), st.integers(0, 2**34)))
    steps = draw(
        st.one_of(
            st.lists(st.tuples(seq_steps, ts_steps), max_size=60),
            # one kind of step repeated: long regular runs, as a real tracker sees
            st.tuples(st.tuples(seq_steps, ts_steps), st.integers(0, 60)).map(lambda p: [p[0]] * p[1]),
        )
    )
    pairs = [(seq, ts)]
    for seq_step, ts_step in steps:
        seq = min(U64_MAX, seq + seq_step)
        ts = min(I64_MAX, ts + ts_step)
        pairs.append((seq, ts))
    return pairs


@settings(max_examples=400, deadline=None)
@given(monotonic_pairs(), st.integers(1, 40), st.integers(1, 60))
def test_round_trip_and_invariants(pairs: list[tuple[int, int]], capacity: int, interval_s: int) -> None:
    t = tracker(pairs, capacity=capacity, interval_s=interval_s)
    t._check()
    raw = t.to_bytes()
    narrow = gorilla.fits_narrow(t.seqs) and gorilla.fits_narrow(t.timestamps)
    assert raw[0] == (FORMAT_NARROW if narrow else FORMAT_WIDE)
    back = SeqTracker.from_bytes(raw, capacity=capacity, interval_s=interval_s)
    assert back == t
    assert back.entries() == t.entries()
    back._check()


@settings(max_examples=150, deadline=None)
@given(monotonic_pairs())
def test_every_prefix_of_a_valid_encoding_is_rejected(pairs: list[tuple[int, int]]) -> None:
    raw = tracker(pairs, capacity=16, interval_s=1).to_bytes()
    for cut in range(len(raw)):
        with pytest.raises(SeqTrackerFormatError):
            SeqTracker.from_bytes(raw[:cut])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-50, 1000), st.integers(-100, 100)), max_size=300),
    st.integers(1, 33),
    st.integers(1, 90),
)
def test_any_insert_sequence_stays_sorted_bounded_and_monotonic(
    steps: list[tuple[int, int]], capacity: int, interval_s: int
) -> None:
    t = SeqTracker(capacity=capacity, interval_s=interval_s)
    seq, ts = 10**6, 10**6
    for dseq, dts in steps:
        seq, ts = max(0, seq + dseq), ts + dts
        last = t.entries()[-1:] or None
        try:
            t.insert(seq, ts)
        except ValueError:
            assert last is not None and (seq < last[0][0] or ts < last[0][1])
            assert t.entries()[-1:] == last
        t._check()
        assert len(t) <= capacity
        if len(t) > 0:
            assert t.find_ts(t.seqs[0], Round.DOWN) == t.timestamps[0]
            # lookups are monotone: a larger seq never maps to an earlier time
            probe = t.seqs[len(t) // 2]
            lo, hi = t.find_ts(probe - 1, Round.UP), t.find_ts(probe + 1, Round.DOWN)
            assert lo is not None and hi is not None and lo <= hi


def test_steady_commits_cost_about_ten_bits_per_entry() -> None:
    # Seqs advance ~1000 per 30 s with +-20 jitter (d within +-40 -> 9-bit code); timestamps exactly
    # every 30 s (d = 0 -> 1 bit). A regression bound, not an exact size.
    t = SeqTracker()
    seq = 0
    for i in range(8192):
        seq += 1000 + (i * 7919) % 41 - 20
        t.insert(seq, 1_754_006_400 + 30 * i)
    assert len(t) == 8192
    bits_per_entry = (len(t.to_bytes()) - 5 - 24) * 8 / len(t)
    assert bits_per_entry < 11


def test_round_is_part_of_the_public_api(open_db) -> None:
    """`lsm.Round` (as the README writes it) is the tracker's Round and steers the DB's lookups."""
    import lsm

    assert lsm.Round is Round and "Round" in lsm.__all__
    clock = lsm.ManualClock(1_754_006_400_000)
    with open_db(clock) as db:
        db.put(b"k", b"v")
        clock.advance(60_000)
        db.put(b"k", b"w")
        between = 1_754_006_400_000 + 30_000
        assert db.seq_for_timestamp(between, lsm.Round.DOWN) == 1
        assert db.seq_for_timestamp(between, lsm.Round.UP) == 2

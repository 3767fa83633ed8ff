"""Lossy, bounded map between sequence numbers and wall-clock seconds (SlateDB RFC 0012 "Tracking
Timestamps for Sequence Numbers", slatedb/slatedb rfcs/0012-sequence-tracker.md; see docs/sources.md).

Serialized form (stored in the manifest as an opaque byte string)::

    +---------+-------------------+---------------------------+---------------------------------+
    | version | count             | seqs                      | timestamps                      |
    | u8      | u32 little-endian | gorilla stream, unsigned  | gorilla stream, signed (i64)    |
    +---------+-------------------+---------------------------+---------------------------------+

    version 1   both streams in narrow mode ('1111' code carries 32 bits)
    version 2   both streams in wide mode ('1111' code carries 64 bits); written only when some
                delta-of-delta of either array does not fit 32 bits
    count       number of (seq, ts) pairs; each gorilla stream repeats it and must agree

The gorilla grammar is in `formats/gorilla.py`. Nothing follows the timestamp stream: trailing bytes are
an error, as are unknown versions, disagreeing counts, truncation and pairs that are not strictly
increasing. Every such error is a `SeqTrackerFormatError` (a `ValueError`).

In memory the tracker is two parallel sorted lists, `seqs` and `timestamps`. Both are strictly
increasing: a pair is recorded only when its timestamp is at least `interval_s` after the last recorded
one and its seq is larger than the last recorded seq. When the lists grow past `capacity`, every other
entry is dropped (indices 0, 2, 4, ... are kept), so older history is downsampled exponentially.
"""

from __future__ import annotations

import enum
import struct
from bisect import bisect_left
from collections.abc import Iterable
from operator import lt

from formats import gorilla
from formats.errors import LsmError

__all__ = ["Round", "SeqTracker", "SeqTrackerFormatError", "FORMAT_NARROW", "FORMAT_WIDE"]

# DO NOT CHANGE: stored on disk (first byte of the serialized tracker).
FORMAT_NARROW = 1
FORMAT_WIDE = 2

_HEADER = struct.Struct("<BI")  # version u8, count u32 little-endian

_U64_MAX = (1 << 64) - 1
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1


class SeqTrackerFormatError(LsmError, ValueError):
    """Serialized tracker bytes are truncated, corrupt, or of an unknown version."""


class Round(enum.Enum):
    """What a lookup returns when there is no exact match."""

    UP = "up"  # the next entry (the smallest key greater than the one asked for)
    DOWN = "down"  # the previous entry (the largest key smaller than the one asked for)


def _lookup(keys: list[int], values: list[int], key: int, round: Round) -> int | None:
    """Shared bisection for both directions. O(log n)."""
    i = bisect_left(keys, key)
    if i < len(keys) and keys[i] == key:
        return values[i]
    if round is Round.UP:
        return values[i] if i < len(keys) else None
    if round is Round.DOWN:
        return values[i - 1] if i > 0 else None
    raise TypeError(f"round must be a Round, got {round!r}")


class SeqTracker:
    """Bounded, downsampling map between sequence numbers and timestamps in seconds.

    `capacity` is the most pairs held (>= 1); `interval_s` the least number of seconds between two
    recorded pairs (>= 1). Sequence numbers are u64, timestamps i64 seconds.

    >>> t = SeqTracker(capacity=4, interval_s=30)
    >>> t.insert(10, 1000), t.insert(11, 1010), t.insert(20, 1030)
    (True, False, True)
    >>> t.find_ts(15, Round.UP), t.find_ts(15, Round.DOWN), t.find_seq(1030, Round.DOWN)
    (1030, 1000, 20)
    """

    __slots__ = ("capacity", "interval_s", "seqs", "timestamps")
    __hash__ = None  # type: ignore[assignment]  # mutable

    def __init__(self, capacity: int = 8192, interval_s: int = 30) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if interval_s < 1:
            raise ValueError(f"interval_s must be at least 1 second, got {interval_s}")
        self.capacity = capacity
        self.interval_s = interval_s
        self.seqs: list[int] = []
        self.timestamps: list[int] = []

    # -- updates ---------------------------------------------------------------------------------

    def insert(self, seq: int, ts_s: int) -> bool:
        """Record that `seq` was committed at `ts_s`; return whether the pair was recorded.

        The pair is recorded when the tracker is empty, or when `ts_s` is at least `interval_s` after
        the last recorded timestamp and `seq` is larger than the last recorded seq. A pair with the same
        seq as the last one is ignored whatever its time: the seq did not move, so the first time it was
        seen stays the best answer for it (and both lists stay strictly increasing). Input that goes
        backwards (`seq` or `ts_s` below the last recorded one) raises ValueError and changes nothing.
        Amortized O(1); a downsampling step is O(capacity) and happens once per capacity/2 records.
        """
        if not 0 <= seq <= _U64_MAX:
            raise ValueError(f"seq must be a u64, got {seq}")
        if not _I64_MIN <= ts_s <= _I64_MAX:
            raise ValueError(f"timestamp must be an i64 number of seconds, got {ts_s}")
        seqs, timestamps = self.seqs, self.timestamps
        if seqs:
            last_seq, last_ts = seqs[-1], timestamps[-1]
            if seq < last_seq or ts_s < last_ts:
                raise ValueError(
                    f"seq tracker input went backwards: ({seq}, {ts_s}) after ({last_seq}, {last_ts})"
                )
            if seq == last_seq or ts_s < last_ts + self.interval_s:
                return False
        seqs.append(seq)
        timestamps.append(ts_s)
        if len(seqs) > self.capacity:
            self._downsample()
        return True

    def _downsample(self) -> None:
        """Keep the entries at even indices 0, 2, 4, ... O(n)."""
        self.seqs = self.seqs[::2]
        self.timestamps = self.timestamps[::2]

    def merge(self, other: SeqTracker) -> None:
        """Append, through `insert`, the pairs of `other` whose timestamp is after the last one held.

        Used to fold commit-time pairs into the manifest's copy. The interval gate and the downsampling
        apply as for any insert. If the first such pair has a seq below the last one held, the two
        trackers disagree about history: ValueError, and nothing is changed. O(len(other)).
        """
        if not other.seqs:
            return
        if self.seqs:
            start = bisect_left(other.timestamps, self.timestamps[-1] + 1)
        else:
            start = 0
        if start == len(other.seqs):
            return
        if self.seqs and other.seqs[start] < self.seqs[-1]:
            raise ValueError(
                f"cannot merge: pair ({other.seqs[start]}, {other.timestamps[start]}) is newer than "
                f"({self.seqs[-1]}, {self.timestamps[-1]}) but has a smaller seq"
            )
        for seq, ts_s in zip(other.seqs[start:], other.timestamps[start:], strict=True):
            self.insert(seq, ts_s)

    def extend(self, pairs: Iterable[tuple[int, int]]) -> None:
        """Insert each (seq, ts_s) pair in order. O(len(pairs))."""
        for seq, ts_s in pairs:
            self.insert(seq, ts_s)

    # -- lookups ---------------------------------------------------------------------------------

    def find_ts(self, seq: int, round: Round) -> int | None:
        """Timestamp recorded for `seq`; without an exact match, that of the next (UP) or previous
        (DOWN) recorded seq, or None when there is none in that direction. O(log n)."""
        return _lookup(self.seqs, self.timestamps, seq, round)

    def find_seq(self, ts_s: int, round: Round) -> int | None:
        """Seq recorded at `ts_s`; without an exact match, that of the next (UP) or previous (DOWN)
        recorded timestamp, or None when there is none in that direction. O(log n)."""
        return _lookup(self.timestamps, self.seqs, ts_s, round)

    def entries(self) -> list[tuple[int, int]]:
        """All recorded (seq, ts_s) pairs, oldest first. O(n)."""
        return list(zip(self.seqs, self.timestamps, strict=True))

    def __len__(self) -> int:
        return len(self.seqs)

    def __eq__(self, other: object) -> bool:
        """Trackers are equal when they hold the same pairs (what `to_bytes` stores). Capacity and
        interval are configuration, not state, and are not compared."""
        if not isinstance(other, SeqTracker):
            return NotImplemented
        return self.seqs == other.seqs and self.timestamps == other.timestamps

    def __repr__(self) -> str:
        return (
            f"SeqTracker(capacity={self.capacity}, interval_s={self.interval_s}, "
            f"len={len(self)}, first={self.entries()[:1]}, last={self.entries()[-1:]})"
        )

    def _check(self) -> None:
        """Assert the invariants (for tests). O(n)."""
        assert len(self.seqs) == len(self.timestamps)
        assert len(self.seqs) <= self.capacity
        assert all(map(lt, self.seqs, self.seqs[1:]))
        assert all(map(lt, self.timestamps, self.timestamps[1:]))

    # -- serialization ---------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Serialize (see the module docstring). Version 1 unless a delta-of-delta needs 64 bits. O(n)."""
        try:
            body = gorilla.encode(self.seqs) + gorilla.encode(self.timestamps, signed=True)
            version = FORMAT_NARROW
        except ValueError:
            body = gorilla.encode(self.seqs, wide=True) + gorilla.encode(
                self.timestamps, wide=True, signed=True
            )
            version = FORMAT_WIDE
        return _HEADER.pack(version, len(self.seqs)) + body

    @classmethod
    def from_bytes(cls, b: bytes, capacity: int = 8192, interval_s: int = 30) -> SeqTracker:
        """Parse bytes written by `to_bytes`. Raises SeqTrackerFormatError on any defect. O(n).

        The interval is not re-checked on the stored pairs (the tracker may have been written with
        another `interval_s`). When more pairs are stored than `capacity` allows, the tracker is
        downsampled (every other pair dropped) until it fits, as further inserts would have done.
        """
        tracker = cls(capacity=capacity, interval_s=interval_s)
        view = memoryview(b)
        if len(view) < _HEADER.size:
            raise SeqTrackerFormatError(
                f"seq tracker truncated: {len(view)} bytes, the header alone is {_HEADER.size}"
            )
        version, count = _HEADER.unpack_from(view, 0)
        if version not in (FORMAT_NARROW, FORMAT_WIDE):
            raise SeqTrackerFormatError(f"unknown seq tracker format version {version}")
        wide = version == FORMAT_WIDE
        try:
            seqs, pos = gorilla.decode(view, _HEADER.size, wide)
            timestamps, pos = gorilla.decode(view, pos, wide, signed=True)
        except gorilla.GorillaError as e:
            raise SeqTrackerFormatError(f"corrupt seq tracker: {e}") from e
        if len(seqs) != count or len(timestamps) != count:
            raise SeqTrackerFormatError(
                f"seq tracker count {count} disagrees with its streams ({len(seqs)} seqs, "
                f"{len(timestamps)} timestamps)"
            )
        if pos != len(view):
            raise SeqTrackerFormatError(f"seq tracker has {len(view) - pos} trailing bytes")
        for name, values in (("seqs", seqs), ("timestamps", timestamps)):
            if not all(map(lt, values, values[1:])):
                raise SeqTrackerFormatError(f"seq tracker {name} are not strictly increasing")
        tracker.seqs = seqs
        tracker.timestamps = timestamps
        while len(tracker.seqs) > capacity:
            tracker._downsample()
        return tracker

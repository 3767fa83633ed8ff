"""Fixed-size, exponentially decaying map from wall-clock time to sequence numbers ("time-seq").

This is the algorithm of CouchDB's `couch_time_seq` (apache/couchdb pull request #5603, "Time-based
since parameter for `_changes`"; see docs/sources.md), kept step for step so that the pull request's
worked examples reproduce exactly.

State: at most 60 bins ``(time_s, seq)``, newest first, in `TimeSeq.bins`. ``time_s`` is the start of the
bin, rounded down to a multiple of 3 hours; ``seq`` is the first sequence number seen in the bin. Going
from the newest bin to the oldest, times strictly decrease and so do seqs (so only the oldest bin can
hold seq 0). The width of a bin is the distance to the next newer bin's start (for the newest bin: to
the time of the update being applied).

Update ``update(time_s, seq)``:

- times below `min_time` are ignored (broken clocks that boot in 1970); the time is rounded down to
  3 hours;
- an empty structure takes the pair as its first bin;
- otherwise a new bin is made only when both the rounded time and the seq are greater than the newest
  bin's; every other update is ignored (a bin keeps the first seq seen in it; time and seq never go
  backwards, the structure catches up later);
- before a new bin is added to 60 full bins, the bins are rolled up to make room.

Roll-up (``now`` is the rounded time of the update that needs room)::

    list the bins oldest first, each with its width
    for each interval I in [3h, 6h, 12h, 1d, 10d, 30d, 180d, 1y, 2y, 4y, 8y] with N the next one:
        take the leading run of bins that start at or before now - N
        walk it in pairs: when two adjacent bins are both at most I wide, merge them into one bin
            (the older bin's start and seq, the summed width), and continue after the pair;
            otherwise keep the first and continue from the second
        if anything merged, stop
    fallback (nothing merged up to 8y): merge, the same way, the oldest half of the bins using the
        widest width in that half as I, which always merges at least one pair

Months are 30 days and years 365 days. The 16y interval only ever serves as the last N.

Queries: ``since(t)`` is the seq of the newest bin starting at or before ``t``, 0 when ``t`` is before
every bin, and `NOW` when ``t`` is more than 3 hours after the newest bin's start (nothing tracked
happened after ``t`` yet). ``histogram(update_seq)`` lists, oldest first, each bin's RFC 3339 start and
the number of updates in it: the difference to the next newer bin's seq, and for the newest bin to
``update_seq``; when the oldest bin's seq is above 0, a 1970-01-01T00:00:00Z bin holds the updates made
before tracking began.

Serialized form (version 1), varints are unsigned LEB128, minimal, at most 10 bytes, values < 2**64::

    +---------+-------+----------------------------------------------------------------+
    | version | count | count bins, oldest first                                       |
    | u8 = 1  | u8    | first:  varint(time_s / 10800)  varint(seq)                    |
    |         | <= 60 | others: varint(time step / 10800 >= 1)  varint(seq step >= 1)  |
    +---------+-------+----------------------------------------------------------------+

Times are stored in 3-hour units, each bin as its step from the previous (older) one, so 60 bins of
realistic history take 200-480 bytes, and at most 484 with times up to year 3114 and seqs up to 2**40.
Bad versions, counts, truncation, overlong varints, zero steps and trailing bytes raise
`TimeSeqFormatError` (a `ValueError`). `min_time` is configuration and is not stored.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from typing import Final, Literal

from formats.errors import LsmError

__all__ = [
    "NOW",
    "DEFAULT_MIN_TIME",
    "MAX_BINS",
    "INTERVALS",
    "RESOLUTION_S",
    "TimeSeq",
    "TimeSeqFormatError",
    "format_rfc3339",
]

NOW: Final = "now"
"""Returned by `TimeSeq.since` for a time after everything tracked; a plain string so it can be
emitted as JSON like CouchDB's ``now``. Compare with ``== NOW``."""

DEFAULT_MIN_TIME: Final = 1754006400
"""2025-08-01T00:00:00Z, couch_time_seq's default: earlier times are taken for a broken clock."""

MAX_BINS: Final = 60

_H = 3600
_D = 24 * _H
_M = 30 * _D
_Y = 365 * _D
INTERVALS: Final = (3 * _H, 6 * _H, 12 * _H, _D, 10 * _D, _M, 6 * _M, _Y, 2 * _Y, 4 * _Y, 8 * _Y, 16 * _Y)
RESOLUTION_S: Final = INTERVALS[0]
"""Bin starts are multiples of this many seconds (3 hours)."""

# DO NOT CHANGE: stored on disk.
FORMAT_VERSION: Final = 1

_HEADER = struct.Struct("<BB")  # version, count
_U64_MAX = (1 << 64) - 1
_I64_MAX = (1 << 63) - 1
_VARINT_MAX_BYTES = 10


class TimeSeqFormatError(LsmError, ValueError):
    """Serialized time-seq bytes are truncated, corrupt or of an unknown version."""


def format_rfc3339(time_s: int) -> str:
    """Seconds since the epoch (>= 0) as ``YYYY-MM-DDTHH:MM:SSZ``, for any year. O(1)."""
    days, rem = divmod(time_s, 86400)
    # Howard Hinnant's civil_from_days: proleptic Gregorian calendar, exact for every day count.
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    hh, rem = divmod(rem, 3600)
    mm, ss = divmod(rem, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hh:02d}:{mm:02d}:{ss:02d}Z"


def _width_class(width: int) -> int:
    """Index of the shortest interval at least `width` long (len(INTERVALS) when none is).

    `width <= INTERVALS[j]` exactly when `_width_class(width) <= j`, so one byte per bin answers the
    roll-up's "both at most I wide" for every I.
    """
    return bisect_left(INTERVALS, width)


# _AT_MOST[j] maps a width class to 1 when that width is <= INTERVALS[j], else to 0 (bytes.translate).
_AT_MOST: Final = tuple(bytes(1 if c <= j else 0 for c in range(256)) for j in range(len(INTERVALS)))
_PAIR: Final = b"\x01\x01"


def _rollup(times: list[int], seqs: list[int], classes: bytearray, now: int) -> None:
    """Roll up the bins to make room for a new bin starting at `now`; changes the lists in place.

    `times` and `seqs` are oldest first; `classes[i]` is the width class of bin i, for every bin but the
    newest, whose width (up to `now`) is computed here. Merging two adjacent bins keeps the older one's
    start and seq and sums their widths, which is exactly what deleting the newer bin does, as widths are
    distances between starts. couch_time_seq's greedy walk runs on the widths before any merge: pair
    (i, i+1) merges when both are at most the interval wide, and the walk resumes at i + 2.
    O(MAX_BINS) with small constants: each interval is tried with a slice, a translate and a find.
    """
    n = len(times)
    flags_all = classes + bytes((_width_class(now - times[-1]),))
    drop: list[int] = []
    for j, next_interval in enumerate(INTERVALS[1:]):
        # Keep more precision near the present: only bins starting at or before now - next interval.
        k = bisect_right(times, now - next_interval)
        if k < 2:
            continue
        flags = flags_all[:k].translate(_AT_MOST[j])
        i = flags.find(_PAIR)
        while i >= 0:
            drop.append(i + 1)
            i = flags.find(_PAIR, i + 2)
        if drop:
            break
    else:
        # Fallback: merge the oldest half using its widest bin as the interval. Every width in that half
        # is at most its widest, so the walk merges every pair: (0, 1), (2, 3), ...
        half = n // 2
        drop = list(range(1, half, 2))
    for d in reversed(drop):
        del times[d]
        del seqs[d]
        if d == len(times):  # the newest bin went; bin d - 1 is the newest now and has no class
            del classes[d - 1]
        else:
            del classes[d]
            classes[d - 1] = _width_class(times[d] - times[d - 1])


class TimeSeq:
    """At most 60 decaying time bins mapping wall-clock seconds to sequence numbers.

    >>> ts = TimeSeq(min_time=0)
    >>> ts.update(10800, 42), ts.update(10800 + 3600, 43), ts.update(21600, 50)
    (True, False, True)
    >>> ts.bins
    [(21600, 50), (10800, 42)]
    >>> ts.since(10799), ts.since(20000), ts.since(21600 + 10800), ts.since(21600 + 10801)
    (0, 42, 50, 'now')
    >>> ts.histogram(55)
    [('1970-01-01T00:00:00Z', 42), ('1970-01-01T03:00:00Z', 8), ('1970-01-01T06:00:00Z', 5)]
    """

    __slots__ = ("min_time", "_times", "_seqs", "_classes")
    __hash__ = None  # type: ignore[assignment]  # mutable

    def __init__(self, min_time: int = DEFAULT_MIN_TIME) -> None:
        if min_time < 0:
            raise ValueError(f"min_time must be >= 0, got {min_time}")
        self.min_time = min_time
        # Oldest first, parallel: appends (the common update) and the roll-up's deletions stay cheap.
        self._times: list[int] = []
        self._seqs: list[int] = []
        # Width class (see _width_class) of every bin but the newest, kept in step for the roll-up.
        self._classes = bytearray()

    @property
    def bins(self) -> list[tuple[int, int]]:
        """The bins as (time_s, seq) pairs, newest first. A fresh list: mutating it changes nothing. O(n).

        Assigning a newest-first list replaces the whole state (for restoring and tests); it is not
        validated, `_check()` does that.
        """
        return list(zip(reversed(self._times), reversed(self._seqs), strict=True))

    @bins.setter
    def bins(self, bins: list[tuple[int, int]]) -> None:
        self._set_state([t for t, _ in reversed(bins)], [s for _, s in reversed(bins)])

    def _set_state(self, times: list[int], seqs: list[int]) -> None:
        """Adopt oldest-first lists and derive the width classes. O(n)."""
        self._times = times
        self._seqs = seqs
        self._classes = bytearray(_width_class(b - a) for a, b in zip(times, times[1:], strict=False))

    def update(self, time_s: int, seq: int) -> bool:
        """Record that the database had reached `seq` at `time_s`; return whether a new bin was made.

        Ignored (returns False): `time_s` below `min_time`, and any update whose rounded time or seq is
        not greater than the newest bin's. A seq outside u64 or a time beyond i64 raises ValueError.
        O(1), plus O(MAX_BINS) when a roll-up is needed.
        """
        if not 0 <= seq <= _U64_MAX:
            raise ValueError(f"seq must be a u64, got {seq}")
        if time_s > _I64_MAX:
            raise ValueError(f"time must fit an i64 number of seconds, got {time_s}")
        if time_s < self.min_time:
            return False
        t = time_s - time_s % RESOLUTION_S
        times = self._times
        if times:
            if t <= times[-1] or seq <= self._seqs[-1]:
                return False
            if len(times) >= MAX_BINS:
                _rollup(times, self._seqs, self._classes, t)
            self._classes.append(_width_class(t - times[-1]))
        times.append(t)
        self._seqs.append(seq)
        return True

    def since(self, time_s: int) -> int | Literal["now"]:
        """Seq to read changes from to see everything since `time_s` (errs toward too many).

        The seq of the newest bin starting at or before `time_s`; 0 when `time_s` is before every bin
        (or there are none); `NOW` when `time_s` is more than 3 hours after the newest bin's start.
        Non-decreasing in `time_s` when `NOW` is taken as infinity. O(log n).
        """
        times = self._times
        if times and time_s > times[-1] + RESOLUTION_S:
            return NOW
        i = bisect_right(times, time_s)
        return self._seqs[i - 1] if i else 0

    def histogram(self, update_seq: int) -> list[tuple[str, int]]:
        """(RFC 3339 bin start, number of updates in the bin) pairs, oldest first.

        A bin's count is the next newer bin's seq minus its own, and `update_seq` minus its own for the
        newest bin (never below 0). When the oldest bin's seq is above 0, a first
        ``1970-01-01T00:00:00Z`` entry counts the updates made before tracking began. Empty when there
        are no bins. O(n).
        """
        times, seqs = self._times, self._seqs
        if not times:
            return []
        out: list[tuple[str, int]] = []
        if seqs[0] > 0:
            out.append((format_rfc3339(0), seqs[0]))
        nexts = seqs[1:] + [update_seq]
        for t, s, nxt in zip(times, seqs, nexts, strict=True):
            out.append((format_rfc3339(t), max(0, nxt - s)))
        return out

    def reset(self) -> None:
        """Forget every bin (an escape hatch after a clock mishap). O(1)."""
        self._set_state([], [])

    def __len__(self) -> int:
        return len(self._times)

    def __eq__(self, other: object) -> bool:
        """Equal when the bins are equal; `min_time` is configuration, not state."""
        if not isinstance(other, TimeSeq):
            return NotImplemented
        return self._times == other._times and self._seqs == other._seqs

    def __repr__(self) -> str:
        return f"TimeSeq(min_time={self.min_time}, bins={self.bins!r})"

    def _check(self) -> None:
        """Assert the invariants (for tests). O(len(bins)).

        At most 60 bins; times are multiples of 3 hours, >= 0 and strictly descending; seqs strictly
        descending (stronger than couch_time_seq's non-increasing, and it implies that only the oldest
        bin may hold seq 0).
        """
        assert len(self._times) == len(self._seqs)
        times = self._times
        assert self._classes == bytearray(
            _width_class(b - a) for a, b in zip(times, times[1:], strict=False)
        ), "width classes out of step"
        bins = self.bins
        assert len(bins) <= MAX_BINS, len(bins)
        for t, s in bins:
            assert t >= 0 and t % RESOLUTION_S == 0, t
            assert 0 <= s <= _U64_MAX, s
        for (t1, s1), (t2, s2) in zip(bins, bins[1:], strict=False):
            assert t1 > t2, (t1, t2)
            assert s1 > s2, (s1, s2)
        assert all(s != 0 for _, s in bins[:-1])

    # -- serialization ---------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """Serialize (see the module docstring). O(len(bins))."""
        out = bytearray(_HEADER.pack(FORMAT_VERSION, len(self._times)))
        prev_units, prev_seq = 0, 0
        for t, s in zip(self._times, self._seqs, strict=True):
            units = t // RESOLUTION_S
            _put_varint(out, units - prev_units)
            _put_varint(out, s - prev_seq)
            prev_units, prev_seq = units, s
        return bytes(out)

    @classmethod
    def from_bytes(cls, b: bytes, min_time: int = DEFAULT_MIN_TIME) -> TimeSeq:
        """Parse bytes written by `to_bytes`. Raises TimeSeqFormatError on any defect. O(len(b))."""
        view = memoryview(b)
        if len(view) < _HEADER.size:
            raise TimeSeqFormatError(f"time-seq truncated: {len(view)} bytes, the header is {_HEADER.size}")
        version, count = _HEADER.unpack_from(view, 0)
        if version != FORMAT_VERSION:
            raise TimeSeqFormatError(f"unknown time-seq format version {version}")
        if count > MAX_BINS:
            raise TimeSeqFormatError(f"time-seq holds {count} bins, at most {MAX_BINS} are allowed")
        pos = _HEADER.size
        times: list[int] = []
        seqs: list[int] = []
        units = seq = 0
        for i in range(count):
            dt, pos = _get_varint(view, pos)
            ds, pos = _get_varint(view, pos)
            if i > 0 and (dt == 0 or ds == 0):
                raise TimeSeqFormatError(
                    f"time-seq bin {i} does not advance (time step {dt}, seq step {ds}): bins must be strictly "
                    "increasing"
                )
            units += dt
            seq += ds
            if units * RESOLUTION_S > _I64_MAX or seq > _U64_MAX:
                raise TimeSeqFormatError(f"time-seq bin {i} is out of range")
            times.append(units * RESOLUTION_S)
            seqs.append(seq)
        if pos != len(view):
            raise TimeSeqFormatError(f"time-seq has {len(view) - pos} trailing bytes")
        ts = cls(min_time=min_time)
        ts._set_state(times, seqs)
        return ts


def _put_varint(out: bytearray, value: int) -> None:
    """Append unsigned LEB128."""
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(view: memoryview, pos: int) -> tuple[int, int]:
    """Read a minimal unsigned LEB128 of at most 10 bytes and below 2**64; return (value, next pos)."""
    value = shift = 0
    for n in range(_VARINT_MAX_BYTES):
        if pos + n >= len(view):
            raise TimeSeqFormatError(f"time-seq truncated inside a varint at offset {pos}")
        byte = view[pos + n]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            if byte == 0 and n > 0:
                raise TimeSeqFormatError(f"time-seq has an overlong varint at offset {pos}")
            if value > _U64_MAX:
                raise TimeSeqFormatError(f"time-seq varint at offset {pos} exceeds 64 bits")
            return value, pos + n + 1
    raise TimeSeqFormatError(f"time-seq varint at offset {pos} is longer than {_VARINT_MAX_BYTES} bytes")

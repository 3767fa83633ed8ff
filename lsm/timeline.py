"""The DB's two maps between sequence numbers and wall-clock time.

Both are what Materialize's reclocking design documents call a remap (docs/sources.md): sidecar
metadata that translates one gauge of
progress (seq) into another (time), durable with the data (in every manifest the writer commits),
monotonic (neither map ever goes back), and compactable (each stays within a fixed size by decimating
old history).

- `SeqTracker` (SlateDB seq-tracker RFC, rfcs/0012-sequence-tracker.md): a (seq, second) pair at most every 30 s, halved when full. Answers
  `seq_for_timestamp` / `timestamp_for_seq` in both directions with explicit rounding.
- `TimeSeq` (CouchDB's couch_time_seq, apache/couchdb#5603): 60 exponentially decaying 3-hour-rounded bins. Answers
  "changes since <time>" and the histogram of updates over time.

The write path calls `on_commit` only when the commit's time passes `next_ms`, the earliest time at
which either map could change, so a commit normally pays one integer comparison.
"""

from __future__ import annotations

import bisect
import datetime
import threading

from lsm.clock import check_i64_ms
from lsm.seq_tracker import Round, SeqTracker
from lsm.time_seq import NOW, RESOLUTION_S, TimeSeq


class Timeline:
    """The DB's seq<->time maps in memory (seq tracker and time bins), guarded by one lock:
    the write path records commits, flushes serialize the maps into the manifest, lookups read them."""

    def __init__(self, tracker_bytes: bytes, bins_bytes: bytes, min_time_s: int) -> None:
        self.tracker = SeqTracker.from_bytes(tracker_bytes) if tracker_bytes else SeqTracker()
        self.bins = TimeSeq.from_bytes(bins_bytes, min_time=min_time_s) if bins_bytes else TimeSeq(min_time_s)
        self.next_ms = 0  # on_commit is due at or after this time (ms)
        self.dirty = False
        self._lock = threading.Lock()  # commits mutate the maps while flushes serialize them

    def on_commit(self, seq: int, ts_ms: int) -> None:
        """A commit of `seq` at `ts_ms`: record it in the tracker; the bins get the previous seq (the
        database's update seq before this commit, as couch_time_seq does)."""
        with self._lock:
            self._on_commit(seq, ts_ms)

    def _on_commit(self, seq: int, ts_ms: int) -> None:
        ts_s = ts_ms // 1000
        t = self.tracker
        if t.seqs and (seq < t.seqs[-1] or ts_s < t.timestamps[-1]):
            return  # cannot happen with a monotonic clock; never let the maps go back
        if t.insert(seq, ts_s):
            self.dirty = True
        if self.bins.update(ts_s, seq - 1):
            self.dirty = True
        next_track = (t.timestamps[-1] + t.interval_s) * 1000 if t.timestamps else 0
        next_bin = (ts_s - ts_s % RESOLUTION_S + RESOLUTION_S) * 1000
        if ts_s < self.bins.min_time:
            next_bin = self.bins.min_time * 1000
        self.next_ms = min(next_track, next_bin)

    def tracker_entries(self) -> list[tuple[int, int]]:
        """The seq tracker's (seq, unix second) pairs, oldest first (a copy)."""
        with self._lock:
            return self.tracker.entries()

    def to_manifest(self) -> dict[str, bytes]:
        """The maps' encoded bytes, as the manifest fields ``seq_tracker`` and ``time_seq``."""
        with self._lock:
            return {"seq_tracker": self.tracker.to_bytes(), "time_seq": self.bins.to_bytes()}

    def clamp(self, to_s: int) -> None:
        """After a clock repair to second `to_s`: the seq tracker forgets its pairs after it
        (lsm.clock_repair.clamp_tracker) and every time bin goes."""
        from lsm.clock_repair import clamp_tracker  # it builds on this module's neighbours

        with self._lock:
            self.tracker = clamp_tracker(self.tracker, to_s)
            self.bins.reset()
            self.next_ms = 0

    def reload(self, tracker_bytes: bytes, bins_bytes: bytes, min_time_s: int) -> None:
        """Replace both maps by a manifest's (a following reader moving to a newer version)."""
        tracker = SeqTracker.from_bytes(tracker_bytes) if tracker_bytes else SeqTracker()
        bins = TimeSeq.from_bytes(bins_bytes, min_time=min_time_s) if bins_bytes else TimeSeq(min_time_s)
        with self._lock:
            self.tracker, self.bins, self.next_ms = tracker, bins, 0

    def reset_bins(self) -> None:
        """Forget every time bin (after a clock mishap); the seq tracker is kept."""
        with self._lock:
            self.bins.reset()
            self.next_ms = 0

    def histogram(self, update_seq: int) -> list[tuple[str, int]]:
        """(RFC 3339 bin start, updates in the bin) pairs, oldest first (see `TimeSeq.histogram`)."""
        with self._lock:
            return self.bins.histogram(update_seq)

    # -- lookups -----------------------------------------------------------------------------------
    def timestamp_for_seq(self, seq: int, round: Round = Round.UP) -> int | None:
        """The time (ms, a whole second) recorded for `seq`, rounded per `round`; None if the
        tracker cannot answer in that direction."""
        with self._lock:
            ts = self.tracker.find_ts(seq, round)
        return None if ts is None else ts * 1000

    def seq_for_timestamp(self, ts_ms: int, round: Round = Round.DOWN) -> int | None:
        # the tracker holds whole seconds: DOWN rounds the time down, UP rounds it up
        """The seq recorded at time `ts_ms`, rounded per `round` (DOWN: the last seq at or before
        it; UP: the first at or after it); None if there is none."""
        ts_s = ts_ms // 1000 if round is Round.DOWN else -(-ts_ms // 1000)
        with self._lock:
            return self.tracker.find_seq(ts_s, round)

    def floor_pair(self, ts_ms: int) -> tuple[int, int] | None:
        """The recorded (seq, ts_ms) pair at or before `ts_ms`, or None."""
        with self._lock:
            seq = self.tracker.find_seq(ts_ms // 1000, Round.DOWN)
            if seq is None:
                return None
            return seq, self.tracker.find_ts(seq, Round.DOWN) * 1000

    def seq_bounds(self, ts_ms: int) -> tuple[int, int | None]:
        """(lo, hi) from the tracker: seq `lo` was committed at or before `ts_ms` (0 when none is known)
        and seq `hi` after it (None when none is known), so the last commit at or before `ts_ms` lies in
        [lo, hi - 1]. A recorded second s covers commit times s*1000 .. s*1000 + 999."""
        with self._lock:
            seqs, secs = self.tracker.seqs, self.tracker.timestamps
            i = bisect.bisect_right(secs, (ts_ms + 1) // 1000 - 1)  # seconds ending at or before ts_ms
            j = bisect.bisect_right(secs, ts_ms // 1000)  # the first second starting after ts_ms
            return (seqs[i - 1] if i else 0), (seqs[j] if j < len(seqs) else None)

    def since_seq(self, ts_ms: int) -> int | None:
        """The seq to read changes from for everything since `ts_ms`; None when nothing happened since."""
        with self._lock:
            s = self.bins.since(ts_ms // 1000)
        return None if s == NOW else s


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def parse_time(value: int | str) -> int:
    """A time given as epoch milliseconds (an int, or a string of digits) or an RFC 3339 string, as epoch
    milliseconds. The one time parser: the DB's ``as_of=``/``since=`` arguments and every ``lsm`` command
    (`tools.render.parse_time`) use it.

    An RFC 3339 time must carry its offset (``Z`` or ``+01:00``): one without (``2026-01-01T00:00:00``)
    raises ValueError instead of being guessed as UTC or as local time, because RFC 3339 requires the
    offset and a wrong guess would silently move the time by hours. ValueError for text that is neither
    and for a time outside the formats' i64 milliseconds, TypeError for other types."""
    if type(value) is int:
        return check_i64_ms(value, "time")
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return check_i64_ms(int(text), "time")
        try:
            dt = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"cannot read {value!r} as a time: give RFC 3339 with an offset (2024-01-31T12:00:00Z) "
                "or epoch milliseconds"
            ) from None
        if dt.tzinfo is None:
            raise ValueError(
                f"RFC 3339 time needs a zone: add Z (UTC) or an offset such as +01:00 to {value!r}"
            )
        # integer arithmetic: float seconds * 1000 loses a millisecond for about 1 time in 150
        return (dt - _EPOCH) // datetime.timedelta(milliseconds=1)
    raise TypeError(f"a time is int milliseconds or an RFC 3339 string, not {type(value).__name__}")


__all__ = ["Timeline", "Round", "parse_time"]

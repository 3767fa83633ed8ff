"""Mending a store whose clock watermark lies in the future (`DB.repair_clock`; docs/time.md).

A store that once accepted a far-future clock reading (before `DbOptions.max_clock_skew_ms`, with the guard
off, or on a `ManualClock`) holds rows stamped in the future, and its watermark, the floor of every later
write, is there too: every write raises ``ClockError: clock went back`` until the clock catches up.

Lowering the watermark alone would hand out timestamps below rows already stored, so a row's ts would no
longer grow with its seq: as-of reads, the seq<->time maps, history retention and the remap's bindings (whose
times must not go back) all rest on that order. The repair keeps it by moving the future back instead:

* every stored row with ts > T (the repair time, default the host's wall clock now) is rewritten with
  ts = T, and its expire_ts moved back by the same amount (its TTL, counted from its commit, is kept);
  keys, values, seqs and tombstones are unchanged, so no version changes places with another;
* the remap's binding and since rows (lsm.remap_store) get the same clamp on the times they hold;
* the seq tracker forgets the pairs after T (the first of them is kept at T), the time bins are reset;
* the watermark becomes max(T, the handle's clock): every later write is stamped at or after T again.

The rewrite is a full compaction (so what any full compaction drops, e.g. overwritten versions outside
`history_retention` and expired rows, goes too), committed like any compaction, and the watermark commit
comes after it: interrupted at any point, the store is either as before or repaired, or repaired but with
the old watermark, and running the repair again finishes it.

What may move: only what the skew guard would have refused. A row stamped at most
`DbOptions.max_clock_skew_ms` (one day when the guard is off) ahead of the host's wall clock now was
committed legitimately (the guard let it pass, at the latest now), and moving it back would shift its
TTL too: a row with two days left, moved back to 1970, expires at once and the repair's compaction drops
it. So a repair time below the newest such row is refused (`ClockRepairError`, nothing changed) unless
forced; the default time is the host's clock now or, if later, that newest legitimate row's time. A time
before 1970 (negative) is always refused. `survey` counts what a repair time would move, on a read-only
handle too (``lsm repair-clock`` checks before it opens the store writable).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import TYPE_CHECKING

import msgpack

from lsm.errors import ClockRepairError
from lsm.remap_store import REMAP_PREFIX
from lsm.seq_tracker import SeqTracker

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

DEFAULT_SKEW_MS = 86_400_000  # what counts as "within the guard" when DbOptions.max_clock_skew_ms is None


@dataclasses.dataclass(frozen=True)
class ClockRepair:
    """What `DB.repair_clock` did: the watermark before and after, and the rows it moved back."""

    watermark_before: int
    watermark_after: int
    rows_moved: int  # rows (user and remap rows) whose ts was after the repair time
    rows_forced: int = 0  # of those, rows committed within the skew guard (moved with force=True only)

    @property
    def repaired(self) -> bool:
        """Whether there was anything in the future to repair."""
        return self.watermark_after < self.watermark_before


@dataclasses.dataclass(frozen=True)
class RepairSurvey:
    """What a repair to `to` would move (`survey`). Rows stamped at or before `limit` (the host's wall clock
    plus the skew guard, when surveyed) were committed within the guard: "legitimate"."""

    to: int
    limit: int
    watermark: int  # the store's clock watermark: the repair has work only if it lies after `to`
    rows_moved: int  # rows with ts > to
    legit_moved: int  # of those, rows with ts <= limit
    legit_first: int | None  # the oldest and newest ts of those rows (None: no such row)
    legit_last: int | None
    newest_legit: int | None  # the newest ts <= limit of any row (None: no row)
    expire_at_once: int  # of the legitimate rows moved, those whose TTL runs now and would be over once moved

    def refusal(self) -> str | None:
        """Why a repair to `to` needs force=True (rows committed within the guard would move), or None."""
        if not self.legit_moved:
            return None
        return (
            f"repair time {_time(self.to)} is before {self.legit_moved} row(s) committed within the skew guard "
            f"(stamped {_time(self.legit_first)} to {_time(self.legit_last)}; the guard passes times up to "
            f"{_time(self.limit)}): they would move back, their expiries with them"
            + (f", and {self.expire_at_once} would expire at once and be dropped" if self.expire_at_once else "")
            + f"; give a time at or after {_time(self.legit_last)}, or force the repair; nothing was changed"
        )


def _time(ms: int | None) -> str:
    """`ms` as epoch ms and RFC 3339 UTC, for messages."""
    try:
        iso = (datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms or 0))
        return f"{ms} ms ({iso.strftime('%Y-%m-%dT%H:%M:%S.')}{iso.microsecond // 1000:03d}Z)"
    except OverflowError:
        return f"{ms} ms"


class RowSource:
    """One set of rows a survey reads: its ts bounds and count if known (an SST's info), and its rows."""

    __slots__ = ("lo", "hi", "n", "rows")

    def __init__(self, lo: int | None, hi: int | None, n: int, rows: Callable[[], Iterator[tuple]]) -> None:
        self.lo, self.hi, self.n, self.rows = lo, hi, n, rows


def check_repair_time(to: object) -> int:
    """`to` (int ms), or the error for one no repair may use: not an int (TypeError), outside the i64
    range (ValueError), before 1970 (ClockRepairError: rows would be stamped before the epoch)."""
    from lsm.clock import check_i64_ms

    if type(to) is not int:
        raise TypeError(f"to_ms must be int milliseconds, not {type(to).__name__}")
    check_i64_ms(to, "to_ms")
    if to < 0:
        raise ClockRepairError(
            f"repair time {to} ms is before 1970-01-01T00:00:00Z: rows would be stamped before the epoch; "
            "nothing was changed"
        )
    return to


def survey(sources: Iterable[RowSource], to: int, limit: int, judge: int, watermark: int) -> RepairSurvey:
    """Count what a repair to `to` would move in `sources`; `limit`: the newest legitimate ts; `judge`: the
    time expiry is judged at after the repair (for `expire_at_once`). A source whose bounds decide it
    (wholly legitimate and not moving, or wholly beyond the guard and moving) is not read."""
    moved = legit = at_once = 0
    first = last = newest = None
    for src in sources:
        lo, hi = src.lo, src.hi
        if lo is not None and hi is not None:
            if hi <= to and hi <= limit:
                newest = hi if newest is None else max(newest, hi)
                continue
            if lo > to and lo > limit:
                moved += src.n
                continue
        for row in src.rows():
            ts = row[2]
            if ts is None:
                continue
            if ts <= limit and (newest is None or ts > newest):
                newest = ts
            if ts <= to:
                continue
            moved += 1
            if ts <= limit:
                legit += 1
                first = ts if first is None or ts < first else first
                last = ts if last is None or ts > last else last
                exp = row[3]
                if exp is not None and exp >= judge and exp - (ts - to) < judge:
                    at_once += 1
    return RepairSurvey(to, limit, watermark, moved, legit, first, last, newest, at_once)


@dataclasses.dataclass(frozen=True)
class ClampTs:
    """The row map of the repair's compaction (`compaction.merge.CompactionJob.row_map`): rows with
    ts > `to` get ts = `to` and their expire_ts moved back as much; remap rows' times are clamped too.
    Counts nothing itself (it may run in another process); the caller counts before."""

    to: int

    def __call__(self, rows: list[tuple]) -> list[tuple]:
        to = self.to
        out = rows
        for i, row in enumerate(rows):
            key, seq, ts, exp, value = row
            if ts is not None and ts > to:
                if out is rows:
                    out = list(rows)
                if exp is not None:
                    exp -= ts - to
                if value is not None and key.startswith(REMAP_PREFIX):
                    value = _clamp_remap_value(value, to)
                out[i] = (key, seq, to, exp, value)
        return out


def _clamp_remap_value(value: bytes, to: int) -> bytes:
    """A binding ([ts, partitions, offsets]) or since ([since]) value with its time at most `to`."""
    fields = msgpack.unpackb(value)
    if fields and type(fields[0]) is int and fields[0] > to:
        fields[0] = to
        return msgpack.packb(fields)
    return value


def clamp_tracker(tracker: SeqTracker, to_s: int) -> SeqTracker:
    """`tracker` without its pairs after second `to_s`; the first of them is kept at `to_s` when that is
    after the last pair kept (so the first commit stamped in the future maps to the repair time)."""
    out = SeqTracker(tracker.capacity, tracker.interval_s)
    pairs = tracker.entries()
    kept = [(s, t) for s, t in pairs if t <= to_s]
    out.seqs, out.timestamps = [s for s, _ in kept], [t for _, t in kept]
    future = [(s, t) for s, t in pairs if t > to_s]
    if future and (not kept or to_s > kept[-1][1]) and (not kept or future[0][0] > kept[-1][0]):
        out.seqs.append(future[0][0])
        out.timestamps.append(to_s)
    return out

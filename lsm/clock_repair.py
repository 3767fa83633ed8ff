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
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import msgpack

from lsm.remap_store import REMAP_PREFIX
from lsm.seq_tracker import SeqTracker

if TYPE_CHECKING:
    from formats.manifest import SstEntry
    from lsm.versions import VersionSet


@dataclasses.dataclass(frozen=True)
class ClockRepair:
    """What `DB.repair_clock` did: the watermark before and after, and the rows it moved back."""

    watermark_before: int
    watermark_after: int
    rows_moved: int  # rows (user and remap rows) whose ts was after the repair time

    @property
    def repaired(self) -> bool:
        """Whether there was anything in the future to repair."""
        return self.watermark_after < self.watermark_before


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


def rows_after(vs: VersionSet, entry: SstEntry, to: int) -> int:
    """How many rows of SST `entry` have ts > `to` (0 without reading it when its max_ts is not)."""
    if entry.info.max_ts is None or entry.info.max_ts <= to:
        return 0
    return sum(1 for row in vs.reader(entry.name).iter() if row[2] is not None and row[2] > to)

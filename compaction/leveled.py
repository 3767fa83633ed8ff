"""The leveled policy (``compaction_policy="leveled"``), after RocksDB's default level compaction.

Levels are the manifest's sorted runs: the oldest run is the last level, each run above it the level
above, L0 stays L0. So a level needs no new manifest field, an empty level is simply not there, and a
store from another policy is a valid leveled store as it is (its runs are levels). Targets are
RocksDB's dynamic level sizes (``level_compaction_dynamic_level_bytes``, its default since 8.4),
computed from the bottom: the last level's target is its size, each level above targets 1 /
``max_bytes_for_level_multiplier`` of the one below, but never less than ``max_bytes_for_level_base``
(as RocksDB floors every level's target at it), and there are as many levels as it takes for the top
one's target to come down to ``max_bytes_for_level_base`` or below. Without that floor a young tree's
top level, whose target is a tenth of a small bottom, was pushed down whole after every L0 job, so
each L0 job's data was merged into the last level at once: fillrandom 1M wrote 2.9 bytes in pushes per
byte flushed, RocksDB 1.3.

Jobs, checked in this order:

1. **L0.** When L0 holds ``l0_compaction_threshold`` SSTs or more, all of L0 is merged with the SSTs of
   the top level it overlaps, into the top level. While there are fewer levels than the bottom's size
   needs (or none), L0 becomes a new top level instead (nothing below is read).
2. **Level n -> n+1.** Among the levels above the last whose size exceeds their target, the one with
   the highest size / target: one of its SSTs, the one whose overlap with the level below is smallest
   for its size (RocksDB's ``kMinOverlappingRatio``), is merged with the SSTs of the level below it
   overlaps, into that level. When it overlaps nothing, the job is a trivial move
   (compaction/trivial_move.py): the SST is listed one level down, unchanged.
3. **Periodic** (`compaction.scheduler.pick_periodic`), when configured: a due SST's job reaches down
   to the last level as under size-tiering. It merges the levels it reaches into one (the new last
   level); the levels are rebuilt above it as data arrives.

Each job keeps, for every key, the newer versions above the older ones (an SST's keys move down only
together with the overlapping SSTs below, and a run's SSTs never overlap), which is the order the read
path relies on. A job whose output is the last level is a last-run job: it drops tombstones and
expired rows.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from compaction.filter import Reason
from compaction.policy import BasePolicy
from compaction.scheduler import Plan, pick_periodic
from formats.manifest import Manifest, SortedRun, SstEntry


def overlapping(run: SortedRun, first: bytes, last: bytes) -> tuple[SstEntry, ...]:
    """The SSTs of `run` whose key ranges meet [first, last] (a contiguous slice: the run is sorted)."""
    ssts = run.ssts
    lo = bisect.bisect_left([e.info.last_key for e in ssts], first)
    hi = bisect.bisect_right([e.info.first_key for e in ssts], last)
    return ssts[lo:hi] if lo < hi else ()


def levels_wanted(bottom_bytes: int, base: int, multiplier: float) -> int:
    """How many levels (runs) data of `bottom_bytes` in its last level needs: the top one's target,
    bottom / multiplier^(levels - 1), at or below `base`."""
    if bottom_bytes <= base:
        return 1
    return 1 + math.ceil(math.log(bottom_bytes / base, multiplier) - 1e-9)


def targets(runs: Sequence[SortedRun], multiplier: float, floor: float = 0.0) -> list[float]:
    """Each run's target size, newest (top) first: the last one's is its size, each above 1/multiplier
    of the one below but at least `floor` (the policy's ``max_bytes_for_level_base``)."""
    if not runs:
        return []
    n, bottom = len(runs), runs[-1].size
    return [max(bottom / multiplier ** (n - 1 - k), floor) for k in range(n - 1)] + [float(bottom)]


class LeveledPolicy(BasePolicy):
    """L0 into the top level, an SST of the most oversized level into the next, else periodic."""

    name = "leveled"

    def __init__(self, options: object) -> None:
        super().__init__(options)
        self.base: int = getattr(options, "max_bytes_for_level_base", 16 << 20)
        self.multiplier: float = getattr(options, "max_bytes_for_level_multiplier", 10.0)

    def pick(self, m: Manifest, tick: int, expired_before: int | None = None) -> Plan | None:
        """The L0 job, else the push of the most oversized level, else a periodic job, else None."""
        return self.pick_l0(m) or self.pick_level(m) or pick_periodic(m.l0, m.runs, tick, self.options)

    def pick_l0(self, m: Manifest) -> Plan | None:
        """All of L0 into the top level (or as a new top level), once L0 holds the threshold."""
        if len(m.l0) < self.options.l0_compaction_threshold:
            return None
        l0 = tuple(e.name for e in m.l0)
        runs = m.runs
        if not runs or len(runs) < levels_wanted(runs[-1].size, self.base, self.multiplier):
            return Plan(Reason.LEVELED, l0, is_last_run=not runs)
        first = min(e.info.first_key for e in m.l0)
        last = max(e.info.last_key for e in m.l0)
        below = overlapping(runs[0], first, last)
        return Plan(
            Reason.LEVELED, l0, partial=(runs[0].id, tuple(e.name for e in below)), is_last_run=len(runs) == 1
        )

    def pick_level(self, m: Manifest) -> Plan | None:
        """One SST of the level most over its target (above the last) into the level below it."""
        runs = m.runs
        best, best_score = None, 1.0
        for k, target in enumerate(targets(runs, self.multiplier, self.base)[:-1]):
            size = runs[k].size
            score = size / target if target > 0 else math.inf
            if size > target and score > best_score:
                best, best_score = k, score
        if best is None:
            return None
        upper, lower = runs[best], runs[best + 1]

        def cost(e: SstEntry) -> float:  # bytes rewritten below per byte pushed down
            return sum(x.size for x in overlapping(lower, e.info.first_key, e.info.last_key)) / max(1, e.size)

        pushed = min(upper.ssts, key=cost)  # the first in key order among equals
        below = overlapping(lower, pushed.info.first_key, pushed.info.last_key)
        return Plan(
            Reason.LEVELED,
            lifted=(upper.id, (pushed.name,)),
            partial=(lower.id, tuple(e.name for e in below)),
            is_last_run=best + 1 == len(runs) - 1,
        )


__all__ = ["LeveledPolicy", "levels_wanted", "overlapping", "targets"]

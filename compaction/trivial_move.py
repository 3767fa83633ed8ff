"""Trivial move: a size-tiered or leveled job whose inputs go to their new run unchanged, by a manifest edit.

RocksDB moves a file to the next level instead of rewriting it when nothing overlaps it there (its
"trivial move"). Here a job's output is a new sorted run built from the job's inputs alone, so the
question is whether merging the inputs would change any row. It would not, and the inputs' SSTs are
listed in the new run as they are (same names, same bytes), when all of these hold:

1. The plan is a size-tiered one (`Reason.SIZE_TIERED`) over whole L0 SSTs and whole runs, or a
   leveled one (`Reason.LEVELED`: L0 SSTs or SSTs lifted from a level, with the SSTs of the level
   below they overlap; moved when they overlap none, RocksDB's own case). A periodic
   job exists to rewrite an SST it is meant to purge (a moved SST keeps its creation_timestamp, so it
   would stay due and be picked again at once); a manual full compaction is an explicit request to
   rewrite.
2. The inputs' key ranges do not overlap one another (sorted by first key, each last key is below the
   next first key): they form a valid sorted run, and no key has versions in two inputs.
3. No input holds two versions of one key (checked once per SST by reading its keys, `DistinctKeys`):
   with one version per key there is no shadowed version to drop and no snapshot stripe to collapse,
   and history retention has nothing to keep or let go.
4. No compaction filter is configured (a user filter may change any row), and no row carrying an
   expire_ts is expired at the job's tick (``min_expire_ts >= tick``): the built-in TTL filter would
   act on none. With a history window "expired" is judged at the retention cutoff, which is not after
   the tick, so the check is conservative.
5. When the output is the oldest run, no input holds a tombstone (the merge would drop it there).
   Above the oldest run a tombstone passes through a merge unchanged, so it may be moved.
6. Each input is in the format (``format_version``) and compression the DB writes now: a rewrite would
   convert it, and compaction is how a DB migrates its files.
7. The inputs add up to at least ``min_bytes`` (``DbOptions.trivial_move_min_bytes``; None never
   moves): rewriting a little data costs little and keeps runs from filling up with tiny SSTs (a flush
   of a nearly empty memtable, an idle flush).

A moved SST keeps its creation_timestamp and min_ts, so the periodic scheduler judges its age exactly
as before the move: moving never restarts the clock of a TTL row or a tombstone.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence

from compaction.filter import Reason
from compaction.scheduler import Plan
from formats.manifest import SstEntry
from storage.ssts import open_sst

# the jobs that exist to reshape the LSM (a periodic job exists to rewrite, a manual one was asked to);
# a leveled plan's `partial` is the run its outputs go into, not an in-place rewrite
MOVABLE_REASONS = (Reason.SIZE_TIERED, Reason.LEVELED)


def _compression(c: str | None) -> str | None:
    return None if c in (None, "none") else c


def sst_has_distinct_keys(path: str) -> bool:
    """Does the SST at `path` hold at most one version of each key? Reads every data block (keys only:
    each row starts with ``u16 key_len | key`` in every format version). O(rows)."""
    with open_sst(path) as r:
        blocks = r.blocks
        for a, b in zip(blocks, blocks[1:], strict=False):  # a key's versions may straddle two blocks
            if a.last_key == b.first_key:
                return False
        for i in range(len(blocks)):
            data, offsets = r.block(i)
            keys = [data[o + 2 : o + 2 + ((data[o] << 8) | data[o + 1])] for o in offsets]
            if any(map(operator.eq, keys, keys[1:])):
                return False
    return True


class DistinctKeys:
    """Cache of `sst_has_distinct_keys` per SST name (SSTs are immutable, so each is read once)."""

    def __init__(self, check: Callable[[str], bool] = sst_has_distinct_keys) -> None:
        self._check = check
        self._known: dict[str, bool] = {}

    def __call__(self, name: str, path: str) -> bool:
        """Does SST `name` (at `path`) hold one version per key?"""
        v = self._known.get(name)
        if v is None:
            v = self._known[name] = self._check(path)
        return v

    def forget(self, names: Iterable[str]) -> None:
        """Drop what is known of SSTs that left the manifest."""
        for n in names:
            self._known.pop(n, None)


def movable(
    plan: Plan,
    sources: Sequence[Sequence[SstEntry]],
    tick: int,
    *,
    has_filters: bool,
    format_version: int,
    compression: str | None,
    min_bytes: int | None,
    distinct: Callable[[SstEntry], bool],
) -> tuple[SstEntry, ...] | None:
    """The plan's input SSTs in key order when the plan can be carried out as a trivial move (the rules
    in the module docstring), else None. `distinct(entry)` tells whether an SST holds one version per
    key; it is asked last, only when every cheaper rule passed."""
    if plan.reason not in MOVABLE_REASONS or has_filters or min_bytes is None:
        return None
    if plan.reason is Reason.SIZE_TIERED and plan.partial is not None:  # in place: moving changes nothing
        return None
    entries = sorted((e for s in sources for e in s), key=lambda e: e.info.first_key)
    if not entries or sum(e.info.file_size for e in entries) < min_bytes:
        return None
    want = _compression(compression)
    for e in entries:
        i = e.info
        if i.format_version != format_version or _compression(i.compression) != want:
            return None
        if i.num_expiring and (i.min_expire_ts is None or i.min_expire_ts < tick):
            return None
        if plan.is_last_run and i.num_tombstones:
            return None
    for a, b in zip(entries, entries[1:], strict=False):
        if not a.info.last_key < b.info.first_key:
            return None
    if not all(distinct(e) for e in entries):
        return None
    return tuple(entries)


__all__ = ["DistinctKeys", "movable", "sst_has_distinct_keys"]

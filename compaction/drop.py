"""Dropping whole SSTs by a manifest edit: which SSTs may go, and what the drop counts.

A policy that drops SSTs (compaction/fifo.py) plans ``Plan(drop=names)``; the compactor commits the
manifest without them and retires the files. Nothing is read or written, so a drop adds nothing to
write amplification.

An SST is **expired** when every row carries an expire_ts (``num_expiring == num_rows``; a delete's
tombstone carries none, the TTL filter's tombstone keeps its row's) and the largest one lies before the
time from which rows count as expired (``max_expire_ts < expired_before``: the compaction tick, or the
history-retention cutoff when that is earlier, as in the merge). Both come from the SST's metadata in
the manifest, so no file is opened to decide.

Dropping an expired SST changes no read only when nothing older can resurface: an expired row hides
the older versions of its key as a tombstone does. So an SST is dropped only when no SST beneath it
(read after it) that stays overlaps its key range, which is the merge's oldest-run rule at file
granularity; `droppable` walks the shape from the oldest SST up to apply it.
"""

from __future__ import annotations

from collections.abc import Iterable

from compaction.merge import CompactionStats
from formats.manifest import Manifest, SstEntry


def is_expired(e: SstEntry, expired_before: int) -> bool:
    """Does every row of `e` carry an expire_ts before `expired_before` (metadata only)?"""
    i = e.info
    return i.num_rows > 0 and i.num_expiring == i.num_rows and i.max_expire_ts is not None and (
        i.max_expire_ts < expired_before
    )


def oldest_first(m: Manifest) -> list[SstEntry]:
    """Every SST, read-last first: the oldest run's (oldest data first), each newer run's, then L0's
    from the oldest. An SST here never lies beneath one listed after it."""
    out: list[SstEntry] = []
    for r in reversed(m.runs):
        out += sorted(r.ssts, key=lambda e: (e.info.max_seq, e.name))
    out += reversed(m.l0)
    return out


def droppable(m: Manifest, expired_before: int, budget: int | None = None) -> list[SstEntry]:
    """The SSTs a drop may remove: the expired ones with no kept SST beneath them overlapping their key
    range and, with `budget` (bytes), the oldest SSTs while the kept ones add up to more than it."""
    order = oldest_first(m)
    total = sum(e.size for e in order)
    drop: list[SstEntry] = []
    kept: list[tuple[bytes, bytes]] = []
    for e in order:
        i = e.info
        over = budget is not None and total > budget and not kept  # the oldest data goes first
        free = is_expired(e, expired_before) and not any(
            i.first_key <= last and first <= i.last_key for first, last in kept
        )
        if over or free:
            drop.append(e)
            total -= e.size
        else:
            kept.append((i.first_key, i.last_key))
    return drop


def drop_stats(entries: Iterable[SstEntry], tick: int, expired_before: int) -> CompactionStats:
    """What dropping `entries` does, as a job's stats: every row leaves as an expired row or tombstone
    (expired SSTs; purge lag counted at the SST's largest, ``tick - min_expire_ts``, exact for the
    oldest row and an upper bound for the others) or as an evicted row (a size cap)."""
    entries = list(entries)
    stats = CompactionStats(
        jobs=1, dropped_files=len(entries), dropped_bytes=sum(e.size for e in entries)
    )
    for e in entries:
        i = e.info
        stats.rows_in += i.num_rows
        stats.history_floor = max(stats.history_floor, i.max_seq)
        if is_expired(e, expired_before):
            stats.tombstones_dropped += i.num_tombstones
            stats.expired_dropped += i.num_rows - i.num_tombstones
            stats.purge_lag.record(max(0, tick - (i.min_expire_ts or 0)), i.num_rows)
        else:
            stats.evicted_rows += i.num_rows
    return stats


__all__ = ["drop_stats", "droppable", "is_expired", "oldest_first"]

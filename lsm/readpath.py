"""The read path over one pinned `lsm.versions.State`: point lookups, scans and change feeds.

These functions hold no lock and know nothing of the DB object: `lsm.db` chooses the state and the read
seq (the state is read before the seq, see `DB._visible`), pins the state for scans
(`VersionSet.pin`/`unpin`), and passes the clock's time for expiry. Structures are searched newest
first — active memtable, frozen memtables, L0 SSTs, sorted runs — because their seq ranges are ordered
the same way, so the first version with seq <= the read's seq decides.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator

from compaction.filter import Entry
from compaction.merge import merge_sources
from lsm.iterators import run_iter, visible_rows
from lsm.syskeys import SYSTEM_END, SYSTEM_PREFIX, is_system
from lsm.versions import State


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with `prefix` (None if there is none)."""
    p = bytearray(prefix)
    while p and p[-1] == 0xFF:
        p.pop()
    if not p:
        return None
    p[-1] += 1
    return bytes(p)


def find_row(st: State, key: bytes, max_seq: int | None) -> tuple | None:
    """The newest version of `key` with seq <= max_seq in `st`, tombstones included."""
    row = st.mem.get(key, max_seq)
    if row is not None:
        return row
    for m in st.imm:
        row = m.get(key, max_seq)
        if row is not None:
            return row
    for _e, r in st.l0:
        row = r.get(key, max_seq)
        if row is not None:
            return row
    for run in st.runs:
        i = bisect_left(run.last_keys, key)  # the one SST of the run whose range can hold the key
        if i < len(run.readers):
            row = run.readers[i].get(key, max_seq)
            if row is not None:
                return row
    return None


def clip_to_prefix(start: bytes | None, end: bytes | None, prefix: bytes | None) -> tuple[bytes | None, bytes | None]:
    """[start, end) narrowed to the keys starting with `prefix` (unchanged when prefix is None)."""
    if prefix is None:
        return start, end
    if type(prefix) is not bytes:
        raise TypeError(f"scan bounds must be bytes, not {type(prefix).__name__}")
    pend = prefix_end(prefix)
    start = prefix if start is None or (type(start) is bytes and start < prefix) else start
    if pend is not None and (end is None or (type(end) is bytes and end > pend)):
        end = pend
    return start, end


def user_ranges(start: bytes | None, end: bytes | None) -> list[tuple[bytes | None, bytes | None]]:
    """[start, end) without the reserved key space [SYSTEM_PREFIX, SYSTEM_END), as one or two ranges in
    key order."""
    if (type(end) is bytes and end <= SYSTEM_PREFIX) or (type(start) is bytes and start >= SYSTEM_END):
        return [(start, end)]
    above_start = SYSTEM_END if start is None or (type(start) is bytes and start < SYSTEM_END) else start
    return [(start, SYSTEM_PREFIX), (above_start, end)]


def scan_state(
    st: State,
    unpin: Callable[[int], None],
    start: bytes | None,
    end: bytes | None,
    reverse: bool,
    max_seq: int,
    include_expired: bool,
    now: int,
    entries: bool,
) -> Iterator:
    """Rows of pinned state `st` in [start, end) as of `max_seq`, expiry judged at `now`: `Entry`s or
    (key, value) pairs. Call `next()` once before handing it out (it yields None first), so that even
    an iterator dropped unread runs its ``finally`` and calls `unpin(st.gen)`."""
    try:
        yield None
        if start is not None and end is not None and start >= end:
            return
        sources = [st.mem.iter(start, end, reverse)]
        sources += [m.iter(start, end, reverse) for m in st.imm]
        sources += [r.iter(start, end, reverse) for _e, r in st.l0]
        sources += [run_iter(run.readers, run.last_keys, start, end, reverse) for run in st.runs]
        rows = visible_rows(merge_sources(sources, reverse), max_seq, now, include_expired)
        if entries:
            for r in rows:
                yield Entry(r[0], r[4], r[1], r[2], r[3])
        else:
            for r in rows:
                yield (r[0], r[4])
    finally:
        unpin(st.gen)


def concat(first: Iterator, second: Iterator) -> Iterator:
    """`first` then `second`; closing the result closes both (scans unpin their state on close)."""
    try:
        yield from first
        yield from second
    finally:
        first.close()  # type: ignore[attr-defined]
        second.close()  # type: ignore[attr-defined]


def changed_rows(st: State, seq: int, top: int, now: int) -> list[tuple[int, bytes, bytes | None, int | None]]:
    """(seq, key, value or None, ts) for user keys whose newest version (seq <= top) is newer than `seq`,
    oldest change first; None for a delete or a row expired at `now`. Skips SSTs with nothing newer."""
    sources = [st.mem.iter()] + [m.iter() for m in st.imm]
    sources += [r.iter() for _e, r in st.l0 if r.info.max_seq > seq]
    for run in st.runs:
        sources += [r.iter() for r in run.readers if r.info.max_seq > seq]
    out = []
    last = None
    for row in merge_sources(sources):
        if row[0] == last or row[1] > top or (row[0] >= SYSTEM_PREFIX and is_system(row[0])):
            continue
        last = row[0]
        if row[1] <= seq:
            continue
        value = row[4]
        if value is not None and row[3] is not None and now > row[3]:
            value = None
        out.append((row[1], row[0], value, row[2]))
    out.sort(key=lambda c: (c[0], c[1]))
    return out


__all__ = ["changed_rows", "clip_to_prefix", "concat", "find_row", "prefix_end", "scan_state", "user_ranges"]

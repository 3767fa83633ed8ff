"""Which commit a time falls after, exactly: the largest seq whose commit ts is at or before a time.

Commits take seqs in order and their timestamps never go back (the clock is monotonic), so the commits
with ts <= t are a prefix of the seqs. Every stored row carries its commit seq and ts, so the prefix's
end is found from the rows themselves; the seq tracker (30 s granularity) only narrows the search:

1. From the tracker, `lo`: a seq known to be committed at or before t (its recorded second ends at or
   before t), and `hi`: a seq known to be committed after t (its recorded second starts after t), or
   none. The answer lies in [lo, hi - 1].
2. The smallest seq in (lo, hi) of a row with ts > t, from the memtables and the SSTs whose seq range
   overlaps (lo, hi): an SST whose max_ts <= t holds none, one whose min_ts > t gives its min_seq without
   being read, and only an SST whose ts range straddles t is read (a memtable likewise by its ts range).
   The answer is that seq - 1; without one, hi - 1 (or the top seq).

Why rows with ts > t are enough: compaction keeps every version whose successor is newer than the
history window's start, and expired rows until they expired before it, so for a time t inside the window
every row committed after t is still stored. Two exceptions, neither of which changes what a read
sees: a tombstone with nothing below it is dropped when the oldest run is written (a delete of an
absent key changes nothing visible, so the answer may then be that later commit), and a compaction
filter that drops rows hides them from this search as from every read.

Cost: no memory beyond the tracker (an exact seq -> ts map would cost a pair per commit of the history
window, millions for a busy day); a lookup reads at most the memtables and the one or two SSTs whose ts
ranges straddle t, and is O(1) when t lies after the last commit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lsm.versions import State


def first_seq_after(state: State, t: int, lo: int, hi: int) -> int | None:
    """The smallest seq S with lo < S < hi of a row of `state` committed after `t` (ms), or None."""
    best = hi
    for mem in (state.mem, *state.imm):
        if not mem.rows or mem.max_ts <= t:
            continue
        for versions in list(mem.data.values()):  # one C-level copy: writers may add keys meanwhile
            for row in versions if type(versions) is list else (versions,):
                seq = row[1]
                if lo < seq < best and row[2] > t:
                    best = seq
    ssts = [pair for pair in state.l0]
    for run in state.runs:
        ssts.extend(zip(run.record.ssts, run.readers, strict=True))
    for entry, reader in ssts:
        info = entry.info
        if info.max_seq <= lo or info.min_seq >= best or info.max_ts is None or info.max_ts <= t:
            continue
        if info.min_ts is not None and info.min_ts > t:  # every row of it came after t
            best = min(best, max(info.min_seq, lo + 1))
            continue
        for row in reader:
            seq = row[1]
            if lo < seq < best and row[2] is not None and row[2] > t:
                best = seq
    return best if best < hi else None


__all__ = ["first_seq_after"]

"""The read path's iterators.

Sources (memtables, L0 SSTs, sorted runs) each yield every version in their range, keys in scan order and
each key's versions newest first; `compaction.merge.merge_sources` interleaves them without suppressing
duplicates; `visible_rows` sits on top (LevelDB's DBIter) and resolves versions, deletes, snapshots and
expiry: for each key the newest version with seq <= the read's seq decides, and a tombstone or an expired
row hides the key (it does not fall through to older versions).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Sequence

from formats.row_array import RowArray
from formats.sst import SstReader


def run_blocks(
    readers: Sequence[SstReader],
    last_keys: Sequence[bytes],
    start: bytes | None,
    end: bytes | None,
    reverse: bool = False,
    batches: bool = False,
) -> Iterator[list[tuple] | RowArray]:
    """A sorted run's decoded blocks over [start, end): its SSTs (non-overlapping, in key order, or
    reversed) one after the other, each through `SstReader.iter_blocks` (`SstReader.iter_batches` with
    `batches`, forward only)."""
    lo = 0 if start is None else bisect.bisect_left(last_keys, start)
    hi = len(readers)
    if end is not None:
        hi = lo
        while hi < len(readers) and readers[hi].info.first_key < end:
            hi += 1
    chosen = readers[lo:hi]
    if reverse:
        chosen = chosen[::-1]
    for r in chosen:
        yield from r.iter_batches(start, end) if batches else r.iter_blocks(start, end, reverse)


def run_iter(
    readers: Sequence[SstReader],
    last_keys: Sequence[bytes],
    start: bytes | None,
    end: bytes | None,
    reverse: bool,
) -> Iterator[tuple]:
    """A sorted run's rows over [start, end): `run_blocks` concatenated."""
    return itertools.chain.from_iterable(run_blocks(readers, last_keys, start, end, reverse))


def visible_rows(
    rows: Iterable[tuple], max_seq: int | None, now: int | None, include_expired: bool = False
) -> Iterator[tuple]:
    """The row each key shows a reader at `max_seq` (None = latest) and time `now`."""
    last_key = None
    for row in rows:
        key = row[0]
        if key == last_key:
            continue
        if max_seq is not None and row[1] > max_seq:
            continue
        last_key = key
        if row[4] is None:
            continue
        if not include_expired and now is not None and row[3] is not None and now > row[3]:
            continue
        yield row

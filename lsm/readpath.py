"""The read path over one pinned `lsm.versions.State`: point lookups, scans and change feeds.

These functions hold no lock and know nothing of the DB object: `lsm.db` chooses the state and the read
seq (the state is read before the seq, see `DB._visible`), pins the state for scans
(`VersionSet.pin`/`unpin`), and passes the clock's time for expiry. Structures are searched newest
first — active memtable, frozen memtables, L0 SSTs, sorted runs — because their seq ranges are ordered
the same way, so the first version with seq <= the read's seq decides.
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator

from compaction.filter import Entry
from compaction.merge import merge_sources
from compaction.stream import merge_rounds, one_layout, round_array, round_rows, whole_key_batches
from formats.row_array import RowArray
from lsm.iterators import run_blocks, run_iter
from lsm.syskeys import SYSTEM_END, SYSTEM_PREFIX, is_system
from lsm.versions import State

_key = operator.itemgetter(0)
_seq = operator.itemgetter(1)
_exp = operator.itemgetter(3)
_value = operator.itemgetter(4)


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
    return find_row_below_mem(st, key, max_seq)


def find_row_below_mem(st: State, key: bytes, max_seq: int | None) -> tuple | None:
    """`find_row` without the active memtable (the caller looked there first).

    A memtable or L0 file is asked only when it can hold the key (its dict has it; the L0 index, once
    built, names the newest L0 file that has a version of it): a point read that misses them costs no
    Python call per structure."""
    for m in st.imm:
        if key in m.data:
            row = m.get(key, max_seq)
            if row is not None:
                return row
    if st.l0:
        index = st.l0_index
        keys = index.keys
        if keys is None:
            readers = index.readers
            if readers is None:
                readers = index.readers = tuple(r for _e, r in st.l0)
            keys = index.lookup(readers)
        if keys is None:
            first = 0
        else:
            readers = index.readers  # set before the index was built
            first = keys.get(key, -1)
        if first >= 0:
            for r in readers[first:] if first else readers:
                row = r.get(key, max_seq)
                if row is not None:
                    return row
    for run in st.runs:
        readers = run.readers
        i = bisect_left(run.last_keys, key)  # the one SST of the run whose range can hold the key
        if i < len(readers):
            row = readers[i].get(key, max_seq)
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
    ranges: list[tuple[bytes | None, bytes | None]] | None = None,
) -> Iterator:
    """Rows of pinned state `st` in [start, end) as of `max_seq`, expiry judged at `now`: `Entry`s or
    (key, value) pairs. With `ranges` (in key order), the rows of each range instead, under the one pin
    (a user scan skips the reserved key space this way). Call `next()` once before handing it out (it
    yields None first), so that even an iterator dropped unread runs its ``finally`` and calls
    `unpin(st.gen)`.

    Version resolution is `lsm.iterators.visible_rows` fused with the projection to the output shape,
    one Python loop per row; an empty memtable adds no source (rows committed after the read's seq is
    fixed are invisible to it anyway), and a single source is read directly, without a heap merge."""
    try:
        yield None
        if ranges is None:
            ranges = [(start, end)]
        if reverse:
            ranges = ranges[::-1]
        check_expiry = not include_expired
        for start, end in ranges:
            if start is not None and end is not None and start >= end:
                continue
            if not reverse and not entries:
                for pairs in _forward_pairs(st, start, end, max_seq, check_expiry, now):
                    yield from pairs
                continue
            sources = [st.mem.iter(start, end, reverse)] if st.mem.rows else []
            sources += [m.iter(start, end, reverse) for m in st.imm]
            sources += [r.iter(start, end, reverse) for _e, r in st.l0]
            sources += [run_iter(run.readers, run.last_keys, start, end, reverse) for run in st.runs]
            if not sources:
                continue
            rows = sources[0] if len(sources) == 1 else merge_sources(sources, reverse)
            last_key = None
            for row in rows:
                key = row[0]
                if key == last_key or row[1] > max_seq:
                    continue
                last_key = key
                value = row[4]
                if value is None:
                    continue
                if check_expiry and row[3] is not None and now > row[3]:
                    continue
                yield Entry(key, value, row[1], row[2], row[3]) if entries else (key, value)
    finally:
        unpin(st.gen)


def _forward_pairs(
    st: State, start: bytes | None, end: bytes | None, max_seq: int, check_expiry: bool, now: int
) -> Iterator[Iterable[tuple[bytes, bytes]]]:
    """The visible (key, value) pairs of `st` in [start, end), ascending, a batch at a time:
    `scan_state`'s forward scan.

    Every source is read in batches: an SST's groups of blocks (`SstReader.iter_batches`: a group whose
    rows are all alike as one `RowArray`, numpy columns over its bytes, any other as decoded rows), a
    memtable in whole-key row lists. `compaction.stream.merge_rounds` cuts them into rounds of whole keys
    (a key's versions in source order, i.e. newest first, as `find_row` searches).

    A round made only of `RowArray`s of one layout is resolved in numpy (`_array_pairs`, snapshots and
    expiry included). Any other round whose rows are all visible at `max_seq` and unexpired is resolved
    by a dict filled oldest source first (`_dict_pairs`), without a Python step per row. The rest (a
    snapshot older than some row, an expired row, among row lists) is sorted as rows
    (`compaction.stream.round_rows`) and takes the row-by-row loop of `lsm.iterators.visible_rows`."""
    sources: list[Iterable[list[tuple] | RowArray]] = []
    if st.mem.rows:
        sources.append(whole_key_batches(st.mem.iter(start, end)))
    sources += [whole_key_batches(m.iter(start, end)) for m in st.imm]
    sources += [r.iter_batches(start, end) for _e, r in st.l0]
    sources += [run_blocks(run.readers, run.last_keys, start, end, batches=True) for run in st.runs]
    if not sources:
        return
    expiry_at = now if check_expiry else None
    for pieces in merge_rounds(sources):
        if one_layout(pieces):
            yield _array_pairs(pieces, max_seq, expiry_at)
            continue
        if _round_visible(pieces, max_seq, expiry_at):
            yield _dict_pairs(pieces)
            continue
        out = []
        last_key = None
        for row in round_rows(pieces):
            key = row[0]
            if key == last_key or row[1] > max_seq:
                continue
            last_key = key
            value = row[4]
            if value is None or (check_expiry and row[3] is not None and now > row[3]):
                continue
            out.append((key, value))
        yield out


def _round_visible(pieces: list[list[tuple] | RowArray], max_seq: int, now: int | None) -> bool:
    """Whether every row of a round is visible at `max_seq` and, when `now` is given, unexpired at `now`
    (then a key's newest version is the one shown, or hides it if a tombstone)."""
    for p in pieces:
        if type(p) is list:
            if max(map(_seq, p)) > max_seq or (now is not None and _expires_by(p, now)):
                return False
        else:
            if p.max_seq() > max_seq:
                return False
            if now is not None:
                exp = p.min_expire_ts()
                if exp is not None and exp < now:
                    return False
    return True


def _array_pairs(pieces: list[RowArray], max_seq: int, now: int | None) -> Iterable[tuple[bytes, bytes]]:
    """The (key, value) pairs a reader at `max_seq` (and, when `now` is given, time `now`) sees in a
    round of `RowArray`s of one layout (newest source first), in key order: the loop of
    `lsm.iterators.visible_rows` in numpy. Rows newer than `max_seq` are dropped; a stable sort of the
    keys keeps each key's versions in source order, newest first, so the first of each run of equal keys
    is the version shown, unless it is expired (a `RowArray` holds no tombstone). Only the rows shown
    become Python objects."""
    import numpy as np  # here, not at the top: a process that only gets keys never imports numpy

    dtype = pieces[0].arr.dtype
    void = np.dtype((np.void, dtype.itemsize))  # whole records: gathers are one copy each, not per field
    a = round_array(pieces)
    seqs = a["seq"]
    if int(seqs.max()) > max_seq:  # a snapshot older than some rows: they do not exist for it
        a = a.view(void)[seqs <= max_seq].view(dtype)
        if not len(a):
            return ()
    skeys = a["skey"]  # one width: numpy's order and equality are the bytes'
    order = None
    if len(pieces) > 1:
        order = np.argsort(skeys, kind="stable")
        skeys = skeys[order]
    newest = np.empty(len(skeys), np.bool_)
    newest[0] = True
    np.not_equal(skeys[1:], skeys[:-1], out=newest[1:])
    sel = order[newest] if order is not None else None if newest.all() else newest
    if now is not None and "exp" in dtype.names:
        if sel is not None:
            a = a.view(void)[sel].view(dtype)
        sel = a["flags"] == 0  # a RowArray's only flag is "has expire_ts"
        sel |= a["exp"] >= now  # expired once now > expire_ts
        if sel.all():
            sel = None
    if sel is None:
        return zip(a["key"].tolist(), a["val"].tolist(), strict=True)
    return zip(a["key"][sel].tolist(), a["val"][sel].tolist(), strict=True)


def _dict_pairs(pieces: list[list[tuple] | RowArray]) -> Iterable[tuple[bytes, bytes]]:
    """The (key, value) pairs of a round whose rows are all visible and unexpired (`_round_visible`),
    made of any pieces (row lists, arrays of several layouts), in key order: a dict filled from the
    oldest source to the newest, each piece's versions oldest first, keeps every key's newest version
    (no Python step per row); its keys are then sorted (one C sort over a few sorted runs) and
    tombstones dropped."""
    d: dict[bytes, bytes | None] = {}
    tombstones = False
    for p in reversed(pieces):
        if type(p) is list:
            values = list(map(_value, p))
            tombstones = tombstones or None in values
            values.reverse()
            d.update(zip(map(_key, reversed(p)), values, strict=True))
        else:
            r = p.arr[::-1]
            d.update(zip(r["key"].tolist(), r["val"].tolist(), strict=True))
    keys = sorted(d)
    pairs = zip(keys, map(d.__getitem__, keys), strict=True)
    if tombstones:
        return [kv for kv in pairs if kv[1] is not None]
    return pairs


def _expires_by(batch: list[tuple], now: int) -> bool:
    """Whether some row of `batch` has an expire_ts before `now` (so is expired at `now`)."""
    exps = set(map(_exp, batch))
    exps.discard(None)
    return bool(exps) and min(exps) < now


def concat(first: Iterator, second: Iterator) -> Iterator:
    """`first` then `second`; closing the result closes both (scans unpin their state on close)."""
    try:
        yield from first
        yield from second
    finally:
        first.close()  # type: ignore[attr-defined]
        second.close()  # type: ignore[attr-defined]


def changed_rows(
    st: State, seq: int, top: int, now: int, include_expired: bool = False, with_expire_ts: bool = False
) -> list[tuple]:
    """(seq, key, value or None, ts) for user keys whose newest version (seq <= top) is newer than `seq`,
    oldest change first; None for a delete or (unless `include_expired`) a row expired at `now`. Skips
    SSTs with nothing newer. `with_expire_ts`: (seq, key, value or None, ts, expire_ts), so that an
    expired row (its expire_ts) is told from a delete (None)."""
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
        if value is not None and row[3] is not None and now > row[3] and not include_expired:
            value = None
        out.append((row[1], row[0], value, row[2], row[3]) if with_expire_ts else (row[1], row[0], value, row[2]))
    out.sort(key=lambda c: (c[0], c[1]))
    return out


__all__ = [
    "changed_rows",
    "clip_to_prefix",
    "concat",
    "find_row",
    "find_row_below_mem",
    "prefix_end",
    "scan_state",
    "user_ranges",
]

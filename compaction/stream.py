"""The compaction merge's streaming parts: sources read block by block and one SST at a time, merged in
batches of whole keys, with the cyclic garbage collector paused (used by `compaction.merge`).

Why batches: the merge handles millions of rows, and a Python generator resumed per row, a heap
comparison per row and a function call per row each cost about as much as decoding the row. Here a
source yields lists of decoded rows (a data block or more), `merge_batches` merges the sources a round at a
time with one stable C sort per round, and `compaction.merge.Resolver.run_batches` and
`compaction.merge.SstOutput.write_batches` take the lists whole.

Why one SST at a time: a sorted run's SSTs are read one after the other, so `SourceBlocks` opens (maps) a
file when the merge reaches it and closes it when the merge leaves it. A job then holds one input SST per
source, whatever the size of the runs: the peak RSS of a full compaction does not grow with the data.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import itertools
import operator
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from formats.row_array import RowArray
from formats.sst import SstReader
from storage.ssts import open_sst

key0 = operator.itemgetter(0)
exp3 = operator.itemgetter(3)


def _neg_seq(row: tuple) -> int:
    return -row[1]


def versions_of(rows: list[tuple]) -> list[tuple]:
    """One key's rows -> its versions newest first, a repeated seq collapsed to its first row (the order
    and choice of `merge_sources` + `group_versions`: the sort is stable, sources come newest first)."""
    seqs = [r[1] for r in rows]
    if any(a <= b for a, b in zip(seqs, seqs[1:], strict=False)):
        rows = sorted(rows, key=_neg_seq)
        out = [rows[0]]
        for r in rows[1:]:
            if r[1] != out[-1][1]:
                out.append(r)
        return out
    return rows


_BATCH_ROWS = 1024


def whole_key_batches(it: Iterator[tuple]) -> Iterator[list[tuple]]:
    """Cut a sorted row stream into lists of about `_BATCH_ROWS` rows, never splitting one key."""
    carry: list[tuple] = []
    while True:
        chunk = list(itertools.islice(it, _BATCH_ROWS))
        if not chunk:
            break
        if carry:
            chunk = carry + chunk
        yield from _split_last_key(chunk, carry := [])
    if carry:
        yield carry


def _split_last_key(rows: list[tuple], carry: list[tuple]) -> Iterator[list[tuple]]:
    """Yield `rows` without the versions of its last key, which go into `carry` (they may continue)."""
    last = rows[-1][0]
    j = len(rows) - 1
    while j > 0 and rows[j - 1][0] == last:
        j -= 1
    carry += rows[j:]
    if j:
        yield rows[:j] if j < len(rows) else rows


def _whole_key_blocks(blocks: Iterable[list[tuple] | RowArray]) -> Iterator[list[tuple] | RowArray]:
    """The same for a source's decoded blocks, joined into lists of at least `_BATCH_ROWS` rows (fewer,
    larger rounds for the merge); the last key of a list is carried into the next, since it may continue
    in the next block (this engine's writers never do that, but a batch must hold whole keys). A
    `RowArray` (a group of blocks a reader decoded into columns) passes as it is, unless a key continues
    across its edge: then it joins the lists as rows."""
    acc: list[tuple] = []
    held: RowArray | None = None  # passed on once the next batch is known not to continue its last key
    for b in blocks:
        if not len(b):  # a block trimmed to the range may be empty
            continue
        if held is not None:
            if _first_key(b) == held.last_key():
                acc = held.rows()  # acc is empty while an array is held
            else:
                yield held
            held = None
        if type(b) is not list:
            if not acc:
                held = b
                continue
            if acc[-1][0] != b.first_key():
                yield acc
                acc = []
                held = b
                continue
            b = b.rows()
        acc += b
        if len(acc) >= _BATCH_ROWS:
            carry: list[tuple] = []
            yield from _split_last_key(acc, carry)
            acc = carry
    if held is not None:
        yield held
    if acc:
        yield acc


def _first_key(b: list[tuple] | RowArray) -> bytes:
    return b[0][0] if type(b) is list else b.first_key()


def _last_key(b: list[tuple] | RowArray) -> bytes:
    return b[-1][0] if type(b) is list else b.last_key()


def _cut(b: list[tuple] | RowArray, bound: bytes, lo: int) -> int:
    """The index after the rows of `b` from `lo` with key <= bound."""
    if type(b) is list:
        return bisect.bisect_right(b, bound, lo=lo, key=key0)
    return b.bisect_right(bound, lo)


def merge_rounds(
    sources: Sequence[Iterable[list[tuple] | RowArray]],
) -> Iterator[list[list[tuple] | RowArray]]:
    """Merge sorted sources given as batches of whole keys (newest source first), a round at a time:
    each round is the list of the sources' pieces (row lists or `RowArray`s, newest source first, none
    empty) that hold every version of the round's keys, and the rounds' keys ascend.

    Each round takes, from every source, the rows up to the smallest last key among the sources' current
    batches. A single source passes straight through, one batch a round."""
    srcs = [_whole_key_blocks(s) for s in sources]
    if len(srcs) == 1:
        for b in srcs[0]:
            yield [b]
        return
    bufs: list = []
    pos: list[int] = []
    live: list[Iterator] = []
    for s in srcs:
        b = next(s, None)
        if b is not None:
            bufs.append(b)
            pos.append(0)
            live.append(s)
    while len(live) > 1:
        lasts = list(map(_last_key, bufs))
        bound = min(lasts)
        pieces: list = []
        for i in range(len(live)):
            b = bufs[i]
            p = pos[i]
            if lasts[i] == bound:
                pieces.append(b[p:] if p else b)
                pos[i] = len(b)
            else:
                q = _cut(b, bound, p)
                if q > p:
                    pieces.append(b[p:q])
                    pos[i] = q
        yield pieces
        i = 0
        while i < len(live):
            if pos[i] == len(bufs[i]):
                b = next(live[i], None)
                if b is None:
                    del bufs[i], pos[i], live[i]
                    continue
                bufs[i] = b
                pos[i] = 0
            i += 1
    if live:
        p = pos[0]
        if p < len(bufs[0]):
            yield [bufs[0][p:]]
        for b in live[0]:
            yield [b]


def merge_batches(sources: Sequence[Iterable[list[tuple] | RowArray]]) -> Iterator[list[tuple]]:
    """Merge sorted sources given as batches of whole keys (newest source first) into batches of whole
    keys sorted by key; a key's versions from several sources follow in source order (see `_versions`).

    The rounds of `merge_rounds`, each sorted with one stable C sort on the key: the same order as
    `merge_sources` (key, then source), without a Python comparison per row."""
    return map(round_rows, merge_rounds(sources))


def round_rows(pieces: list[list[tuple] | RowArray]) -> list[tuple]:
    """One round of `merge_rounds` as rows sorted by key (one stable C sort: a key's versions stay in
    source order)."""
    if len(pieces) == 1:
        b = pieces[0]
        return b if type(b) is list else b.rows()
    out: list[tuple] = []
    for b in pieces:
        out += b if type(b) is list else b.rows()
    out.sort(key=key0)
    return out


def one_layout(pieces: list[list[tuple] | RowArray]) -> bool:
    """Whether a round is made only of `RowArray`s of one layout (one numpy dtype): the rounds the scan
    (`lsm.readpath`) and the columnar merge (`compaction.columnar`) resolve in numpy."""
    first = pieces[0]
    if type(first) is list:
        return False
    dtype = first.arr.dtype
    return all(type(p) is not list and p.arr.dtype == dtype for p in pieces)


def round_array(pieces: list[RowArray]) -> Any:
    """A round of `RowArray`s of one layout (`one_layout`) as one structured array, in source order (the
    pieces' records joined whole: one copy, not one per field)."""
    if len(pieces) == 1:
        return pieces[0].arr
    import numpy as np

    dtype = pieces[0].arr.dtype
    void = np.dtype((np.void, dtype.itemsize))
    return records(np.concatenate([records(p.arr, void) for p in pieces]), dtype)


def records(a: Any, dtype: Any) -> Any:
    """A contiguous record array `a` seen as `dtype` (of the same item size): a structured array as whole
    records (``V<itemsize>``: one copy per gather, not one per field) and back. Through the buffer, not
    `ndarray.view`, whose safety check of a structured dtype with overlapping fields (a `RowArray`'s key
    and skey) costs tens of µs a call, in Python."""
    import numpy as np

    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return np.frombuffer(a, dtype) if len(a) else np.empty(0, dtype)


class SourceBlocks:
    """One sorted source's rows as decoded blocks, reading its SSTs one after the other: each file is
    opened when the merge reaches it and closed (its mapping released) when the merge leaves it, so the
    mapped input pages a compaction holds do not grow with the data (the peak RSS of a full compaction).

    `read_seconds` accumulates the time spent reading and decoding blocks (timed per block: negligible).
    No reference cycle is made (the cyclic collector is paused during a merge: a reader caught in a
    cycle would keep its index and filter alive until the job ends)."""

    def __init__(
        self, paths: Sequence[str], start: bytes | None, end: bytes | None, arrays: bool = False
    ) -> None:
        self.paths = paths
        self.start = start
        self.end = end
        self.arrays = arrays  # groups of blocks, alike ones as `RowArray`s (`SstReader.iter_batches`)
        self.read_seconds = 0.0
        self.reader: SstReader | None = None

    def __iter__(self) -> Iterator[list[tuple] | RowArray]:
        clock = time.perf_counter
        for path in self.paths:
            t0 = clock()
            r = self.reader = open_sst(path)
            try:
                if self.arrays:
                    blocks = r.iter_batches(self.start, self.end, tombstones=True)
                else:
                    blocks = r.iter_blocks(self.start, self.end)
                while True:
                    rows = next(blocks, None)
                    t1 = clock()
                    self.read_seconds += t1 - t0
                    if rows is None:
                        break
                    if rows:  # a block trimmed to the job's range may be empty
                        yield rows
                    t0 = clock()
            finally:
                self.reader = None
                r.close()

    def close(self) -> None:
        """Release the file the source was reading when the merge stopped early (an error)."""
        if self.reader is not None:
            self.reader.close()
            self.reader = None


_gc_lock = threading.Lock()
_gc_jobs = 0
_gc_was_enabled = False


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a merge runs (jobs may overlap in threads; it
    resumes when the last one ends, if it was on). A merge allocates a tuple per row and keeps an
    output's rows alive until the SST is written, so the collector's full passes, triggered by those
    allocations, walk the whole heap again and again: ~15% of a compaction's CPU. The merge makes no
    reference cycles; memory is still freed by reference counting meanwhile."""
    global _gc_jobs, _gc_was_enabled
    with _gc_lock:
        if _gc_jobs == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_jobs += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_jobs -= 1
            if _gc_jobs == 0 and _gc_was_enabled:
                gc.enable()

"""How a forward scan of an SST reads a group of consecutive blocks at once (`SstReader.iter_batches`):
as one `RowArray` when the group's rows are all alike, with no Python step per row, else as rows.

A compaction's reader (no block cache) takes the group's stored blocks in one slice and checks each
block's checksum and row offsets column-wise (`group_records`); a cached reader joins the blocks'
payloads (`group_batch`). Either way a fault is named by the block-by-block path, which decodes the
group again when anything is not as the index says.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from formats.row_array import RowArray
from formats.sst_layout import COMPRESSION_NONE, TRAILER, U32, _xxh3

if TYPE_CHECKING:
    from formats.sst_reader import SstReader

_CHECKSUM = struct.Struct(">Q")  # a block trailer's checksum, after its compression byte


def group_batch(r: SstReader, group: list[int], n: int, tombstones: bool = False) -> list[tuple] | RowArray:
    """The rows of blocks `group` (`n` rows by the index): a `RowArray` when they are all alike
    (with `tombstones`, alike but for tombstones), else their decoded rows (which name the block of
    any fault)."""
    if tombstones and r.cache is None:  # the compaction's reader: the group read at once
        arr = group_records(r, group, n)
        if arr is not None:
            return arr
    blks = list(map(r._load, group))
    data = blks[0].data if len(blks) == 1 else b"".join([b.data for b in blks])
    arr = r.codec.rows_array(data)
    if arr is not None and len(arr) == n:
        size = arr.arr.itemsize  # each block holds whole rows (the joined area might not say so)
        if all(len(b.data) == size * len(b.offsets) for b in blks):
            return arr
    elif tombstones and n and sum(len(b.offsets) for b in blks) == n:
        import numpy as np

        starts = np.empty(n, np.int64)
        nexts = np.empty(n, np.int64)
        at = base = 0
        for b in blks:
            k = len(b.offsets)
            starts[at : at + k] = b.offsets
            starts[at : at + k] += base
            nexts[at : at + k - 1] = starts[at + 1 : at + k]
            base += len(b.data)
            nexts[at + k - 1] = base
            at += k
        if all(b.offsets and b.offsets[0] == 0 for b in blks):
            ragged = r.codec.rows_array_ragged(data, starts, nexts)
            if ragged is not None:
                return ragged
    rows: list[tuple] = []
    for i in group:
        rows += r.block_rows(i)
    return rows

def group_records(r: SstReader, group: list[int], n: int) -> RowArray | None:
    """`group_batch` for a reader without a cache (the compaction's): the group's stored blocks (one
    after the other in the file) copied in one slice, each block's checksum checked on a view of it
    and its offset array read by numpy, and every row's record gathered from that slice at its
    offset (`RowCodec.rows_array_ragged`: the checks of `decode_block`, column-wise), instead of a
    payload, a trailer parse and two more copies per block. None when a block is compressed, its
    trailer is not as the index says, or the rows are not alike but for tombstones: the block by
    block path then decodes them, or names the fault."""
    import numpy as np

    handles = list(map(r.blocks.entry, group))  # (offset, size, rows) of each
    lo = handles[0][0]
    hi = handles[-1][0] + handles[-1][1]
    if hi > len(r._map):
        return None
    buf = r._map[lo:hi]
    view = memoryview(buf)
    verify = r.verify_checksums
    rels, tails, counts, offset_arrays = [], [], [], []
    for offset, size, num_rows in handles:
        rel = offset - lo
        code_at = rel + size - TRAILER.size  # the block's compression byte, then its checksum
        if size < TRAILER.size + 4 or buf[code_at] != COMPRESSION_NONE:
            return None
        if verify and _xxh3(view[rel : code_at + 1]) != _CHECKSUM.unpack_from(buf, code_at + 1)[0]:
            return None
        (k,) = U32.unpack_from(buf, code_at - 4)
        tail = code_at - 4 - 4 * k  # the row offsets, after the rows
        if k != num_rows or not k or tail < rel:
            return None
        rels.append(rel)
        tails.append(tail)
        counts.append(k)
        offset_arrays.append(view[tail : tail + 4 * k])
    if sum(counts) != n:
        return None
    ends = np.cumsum(counts)  # each block's rows end at this row number
    starts = np.frombuffer(b"".join(offset_arrays), ">u4").astype(np.int64)
    if starts[ends - counts].any():  # a block's first row starts its block
        return None
    starts += np.repeat(np.array(rels, np.int64), counts)
    nexts = np.empty(n, np.int64)
    nexts[:-1] = starts[1:]
    nexts[ends - 1] = tails  # a block's last row ends where its offsets begin
    arr = r.codec.rows_array_ragged(buf, starts, nexts)
    if arr is not None and not (arr.arr["flags"] & 1).any():
        arr.ragged = False  # no tombstone after all: an array as `rows_array` makes them
    return arr

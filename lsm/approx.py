"""How many bytes a key range holds, estimated from the SSTs' block indexes (RocksDB's
``DB::GetApproximateSizes``), plus the memtables' rows in it.

SSTs: for each SST of the read state whose key range meets [start, end), the data blocks that can hold
a key of the range are found in its block index (each entry gives a block's offset, stored size, row
count and first and last keys): from the first block whose last key is >= start to the last block whose
first key is < end. Their stored bytes (as written: compressed, with the 9-byte trailer) and their rows
are summed. No data block is read, so the cost is O(SSTs in the range + their blocks in it) on the
already-open readers. The estimate is block-grained: the first and last block may hold keys outside the
range (at most one block too many at each end per SST), and every version stored counts (shadowed
versions, tombstones and expired rows too), as in RocksDB. Index, filter and metadata bytes are not
counted.

Memtables (the active one and those waiting to be flushed): every version of a key in the range, at
what the memtable charges for it (key + value + `lsm.memtable.ROW_OVERHEAD`): roughly what a flush
would write before compression.

The engine's reserved key space (lsm.syskeys) is left out, as every user read leaves it out.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left
from typing import TYPE_CHECKING

from lsm.memtable import ROW_OVERHEAD
from lsm.readpath import user_ranges

if TYPE_CHECKING:
    from formats.sst import SstReader
    from lsm.versions import State


@dataclasses.dataclass(frozen=True)
class ApproximateSize:
    """`DB.approximate_size`'s answer for one key range.

    `sst_bytes`: stored bytes of the data blocks that can hold keys of the range, in `sst_files` SSTs;
    `sst_rows`: the rows of those blocks (every version). `memtable_bytes` and `memtable_rows`: the
    versions in the range not flushed yet (0 when not asked for)."""

    sst_bytes: int = 0
    sst_rows: int = 0
    sst_files: int = 0
    memtable_bytes: int = 0
    memtable_rows: int = 0

    @property
    def total_bytes(self) -> int:
        """SST and memtable bytes together."""
        return self.sst_bytes + self.memtable_bytes

    def to_dict(self) -> dict[str, int]:
        """The fields and `total_bytes`, for JSON."""
        return {**dataclasses.asdict(self), "total_bytes": self.total_bytes}


def block_span(r: SstReader, start: bytes | None, end: bytes | None) -> tuple[int, int]:
    """[i, j): the blocks of `r` that can hold a key in [start, end) (i == j: none)."""
    blocks = r.blocks
    i = 0 if start is None else blocks.find(start)
    j = len(blocks) if end is None else blocks.count_before(end)
    return i, max(i, j)


def sst_span_size(r: SstReader, spans: list[tuple[int, int]]) -> tuple[int, int]:
    """(stored bytes, rows) of the blocks of `r` in the union of `spans` (block index intervals)."""
    blocks = r.blocks
    covered: set[int] = set()
    for i, j in spans:
        covered.update(range(i, j))
    size = rows = 0
    for b in covered:
        _offset, stored, n = blocks.entry(b)
        size += stored
        rows += n
    return size, rows


def approximate_size(
    st: State, start: bytes | None = None, end: bytes | None = None, include_memtables: bool = True
) -> ApproximateSize:
    """The estimate for [start, end) (None: unbounded) over the pinned read state `st` (module docstring)."""
    ranges = user_ranges(start, end)
    readers = [r for _e, r in st.l0]
    for run in st.runs:  # a run's SSTs are disjoint and sorted: only those whose range can meet ours
        first = 0 if start is None else bisect_left(run.last_keys, start)
        for r in run.readers[first:]:
            if end is not None and r.info.first_key >= end:
                break
            readers.append(r)
    sst_bytes = sst_rows = files = 0
    for r in readers:
        spans = [s for s in (block_span(r, a, b) for a, b in ranges) if s[0] < s[1]]
        if not spans:
            continue
        size, rows = sst_span_size(r, spans)
        sst_bytes += size
        sst_rows += rows
        files += 1
    mem_bytes = mem_rows = 0
    if include_memtables:
        for m in (st.mem, *st.imm):
            for a, b in ranges:
                for key, _seq, _ts, _exp, value in m.iter(a, b):
                    mem_bytes += len(key) + ROW_OVERHEAD + (len(value) if value is not None else 0)
                    mem_rows += 1
    return ApproximateSize(sst_bytes, sst_rows, files, mem_bytes, mem_rows)


__all__ = ["ApproximateSize", "approximate_size", "block_span", "sst_span_size"]

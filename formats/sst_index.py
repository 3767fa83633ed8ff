"""The block index of an open SST (`BlockIndex`), kept flat: the stored index block's payload (one bytes
object, ``| u32 count | count x (u64 offset | u32 size | u32 rows | u16 len | first key | u16 len | last
key) |``, drawn in docs/format.md) and, for keys of varying length, an array of where each entry starts.
No Python object per entry: an SST's index costs its stored size (52 bytes a block for 16-byte keys)
plus about 18 bytes a block for `fence`, where a named tuple with its two keys and ints cost about 230.
Every open SST holds its index for the life of the reader, so this is most of what an open database's
memory grows by with its data; a `BlockHandle` is built only when a caller asks for one.

Finding the block of a key is one C-level binary search over `fence`, the last key of every `FENCE`-th
block (the only keys kept as objects), then a walk over the group that fence key ends, comparing the key
with each block's last key sliced from the payload until one is >= it (at most `FENCE` - 1 slices: the
group's last block is the fence's). A point read costs the same as with a fence of every second block
(measured: a cached `SstReader.get` 1.74 µs against 1.76, medians of 5), where a sparser fence searched
by a second binary search with a key function per probe measured twice as slow. For fixed-size keys
(every entry of one shape: the common case) the slices come from a list shared by every index of that
shape (`_shared_slices`)."""

from __future__ import annotations

import bisect
import functools
import operator
import struct
import threading
from array import array
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

from formats.sst_layout import INDEX_ENTRY, KLEN, BlockHandle

# Every FENCE-th block's last key is kept as a bytes object (about 72 bytes with its list slot, so 18
# bytes a block): the search then needs up to FENCE - 1 slices of the payload (`find`, `SstReader.get`).
FENCE_SHIFT = 2  # `find` and `SstReader.get` walk a group of FENCE blocks after the bisect
FENCE = 1 << FENCE_SHIFT

_HEAD = 4  # the u32 count before the entries
_KEYS_AT = INDEX_ENTRY.size  # an entry's first key length follows its (offset, size, rows)

_shared: dict[tuple[int, int, int], list[slice]] = {}
_shared_lock = threading.Lock()


def _shared_slices(stride: int, at: int, width: int, n: int) -> list[slice]:
    """At least `n` slices ``[_HEAD + i * stride + at, ... + width)``: where entry i's key of `width`
    bytes is in an index of fixed-size entries. One list per shape for every index: it grows to the
    largest SST's block count (its slices are about 110 bytes each), not with the number of SSTs."""
    key = (stride, at, width)
    got = _shared.get(key)
    if got is not None and len(got) >= n:
        return got
    with _shared_lock:
        got = _shared.get(key)
        if got is None or len(got) < n:
            size = -(-n // 1024) * 1024  # a few lists at most as SSTs of growing size open
            first = _HEAD + at
            got = [slice(p, p + width) for p in range(first, first + size * stride, stride)]
            _shared[key] = got  # a longer list replaces the old one; readers keep theirs
    return got


class BlockIndex(Sequence[BlockHandle]):
    """An SST's block index over its stored payload: a read-only sequence of `BlockHandle`s (each built
    when asked for), with `find` (the block a key would be in) and the accessors the reader's hot paths
    use without building a handle (`entry`, `first_key`, `last_key`). Build with `parse_fixed` or
    `parse_general`, which check the structure as the reader requires (docs/format.md, 2.3)."""

    __slots__ = ("buf", "n", "_stride", "_starts", "fence", "search", "last_at", "firsts", "first_at", "fixed")

    def __init__(self, buf: bytes, n: int, stride: int, starts: array | None) -> None:
        self.buf = buf
        self.n = n
        self._stride = stride  # of fixed-size entries; 0 with `starts`
        self._starts = starts  # entry i's position, for entries of varying size; None if fixed
        # with fixed-size entries `buf[search[i]]` is block i's last key (one subscript, no call)
        self.fixed = starts is None
        if starts is None and n:
            (fl,) = KLEN.unpack_from(buf, _HEAD + _KEYS_AT)
            (ll,) = KLEN.unpack_from(buf, _HEAD + _KEYS_AT + 2 + fl)
            at = _KEYS_AT + 2 + fl + 2
            # `search[i]` under `last_at` is block i's last key (the comparison of `find`), and
            # `firsts[i]` under `first_at` its first key
            self.search: Sequence[Any] = _shared_slices(stride, at, ll, n)
            self.last_at: Callable[[Any], bytes] = buf.__getitem__
            self.firsts: Sequence[Any] = _shared_slices(stride, _KEYS_AT + 2, fl, n)
            self.first_at: Callable[[Any], bytes] = buf.__getitem__
            first = _HEAD + at
            last = range(first + (FENCE - 1) * stride, first + n * stride, FENCE * stride)
            self.fence = [buf[p : p + ll] for p in last]
        else:
            # entries of varying size: `search` is where each starts; a partial, not a bound method,
            # so the index is in no reference cycle (a merge pauses the cyclic collector)
            self.search = self.firsts = starts if starts is not None else ()
            self.last_at = functools.partial(_last_key, buf)
            self.first_at = functools.partial(_first_key, buf)
            self.fence = [self.last_key(i) for i in range(FENCE - 1, n, FENCE)]
        if n % FENCE:
            self.fence.append(self.last_key(n - 1))  # the last group is short

    def _at(self, i: int) -> int:
        """Where entry `i` starts in the payload."""
        starts = self._starts
        return _HEAD + i * self._stride if starts is None else starts[i]

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, i: int) -> BlockHandle: ...

    @overload
    def __getitem__(self, i: slice) -> list[BlockHandle]: ...

    def __getitem__(self, i: int | slice) -> BlockHandle | list[BlockHandle]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        n = self.n
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("block index out of range")
        offset, size, rows = self.entry(i)
        return BlockHandle(offset, size, rows, self.first_key(i), self.last_key(i))

    def __iter__(self) -> Iterator[BlockHandle]:
        return map(self.__getitem__, range(self.n))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(other) == self.n and all(map(operator.eq, self, other))

    __hash__ = None  # type: ignore[assignment]  # equal to a list of the same handles, so unhashable

    def __repr__(self) -> str:
        return f"BlockIndex({self.n} blocks, {len(self.buf)} bytes)"

    def entry(self, i: int) -> tuple[int, int, int]:
        """Block `i`'s (offset, stored size, rows)."""
        starts = self._starts  # (`_at`, inline: a block read on a point read's path)
        return _unpack_entry(self.buf, _HEAD + i * self._stride if starts is None else starts[i])

    def first_key(self, i: int) -> bytes:
        """Block `i`'s first key."""
        return _first_key(self.buf, self._at(i))

    def last_key(self, i: int) -> bytes:
        """Block `i`'s last key."""
        return _last_key(self.buf, self._at(i))

    def find(self, key: bytes) -> int:
        """The first block whose last key is >= `key` (`len(self)` when there is none): the only block
        that can hold `key` unless the key's versions straddle it and the next one. ``bisect_left`` over
        the last keys, without a list of them (`SstReader.get` has these lines inline). The group of
        `FENCE` blocks the fence names ends with a block whose last key is >= `key`, so the first of the
        group whose last key is >= `key` is found by comparing at most its first `FENCE` - 1 blocks (a
        short last group ends with the last block, whose last key is the fence's)."""
        lo = _bisect_left(self.fence, key) << FENCE_SHIFT
        n = self.n
        if lo >= n:
            return n
        end = min(lo + FENCE, n) - 1
        last_at, search = self.last_at, self.search
        while lo < end and last_at(search[lo]) < key:
            lo += 1
        return lo

    def count_before(self, end: bytes) -> int:
        """How many blocks have a first key < `end` (``bisect_left`` over the first keys): every block
        before `find(end)`, and that one if it starts before `end` (a later block starts at or after its
        predecessor's last key, which is >= `end`)."""
        i = self.find(end)
        return i + 1 if i < self.n and self.first_key(i) < end else i


def _first_key(buf: bytes, at: int) -> bytes:
    """The first key of the index entry at `at` in payload `buf`."""
    p = at + _KEYS_AT
    return buf[p + 2 : p + 2 + KLEN.unpack_from(buf, p)[0]]


def _last_key(buf: bytes, at: int) -> bytes:
    """The last key of the index entry at `at` in payload `buf`."""
    p = at + _KEYS_AT
    p += 2 + KLEN.unpack_from(buf, p)[0]
    return buf[p + 2 : p + 2 + KLEN.unpack_from(buf, p)[0]]


def parse_fixed(idx: bytes, count: int, data_size: int) -> BlockIndex | None:
    """The `BlockIndex` of payload `idx` when its `count` entries all have first keys of one length and
    last keys of one length (fixed-size keys: the common case), checked on whole columns unpacked by one
    `struct.iter_unpack` (transient tuples). None when the entries are not of that shape, or are not
    contiguous blocks ending at `data_size` (`parse_general` then parses them, or names the fault)."""
    if count == 0 or len(idx) < _HEAD + _KEYS_AT + 2:
        return None
    pos = _HEAD + _KEYS_AT
    (fl,) = KLEN.unpack_from(idx, pos)
    if len(idx) < pos + 2 + fl + 2:
        return None
    (ll,) = KLEN.unpack_from(idx, pos + 2 + fl)
    entry = struct.Struct(f"{INDEX_ENTRY.format}H{fl}xH{ll}x")
    if _HEAD + count * entry.size != len(idx):
        return None
    rows = list(entry.iter_unpack(memoryview(idx)[_HEAD:]))
    if set(map(_KEY_LENS, rows)) != {(fl, ll)}:
        return None
    offsets = list(map(_OFFSET, rows))
    ends = list(map(operator.add, offsets, map(_SIZE, rows)))
    if offsets[0] != 0 or offsets[1:] != ends[:-1] or ends[-1] != data_size:
        return None
    return BlockIndex(idx, count, entry.size, None)


def parse_general(idx: bytes, count: int, data_size: int) -> BlockIndex:
    """The `BlockIndex` of payload `idx` (`count` entries of any shape), entry by entry. Raises
    ValueError (or struct.error) when the entries are not contiguous blocks from offset 0 ending at
    `data_size`, or do not fill the payload exactly."""
    pos = _HEAD
    starts = array("Q")
    expect = 0
    for _ in range(count):
        starts.append(pos)
        offset, size, _rows = INDEX_ENTRY.unpack_from(idx, pos)
        pos += INDEX_ENTRY.size
        (fl,) = KLEN.unpack_from(idx, pos)
        pos += 2 + fl
        (ll,) = KLEN.unpack_from(idx, pos)
        pos += 2 + ll
        if offset != expect or offset + size > data_size:
            raise ValueError("block offsets are not contiguous")
        expect = offset + size
    if pos != len(idx) or expect != data_size:
        raise ValueError("index size mismatch")
    return BlockIndex(idx, count, 0, starts)


_bisect_left = bisect.bisect_left
_unpack_entry = INDEX_ENTRY.unpack_from

# the columns of `parse_fixed`'s unpacked entries: (offset, size, rows, first_len, last_len)
_KEY_LENS = operator.itemgetter(3, 4)
_OFFSET = operator.itemgetter(0)
_SIZE = operator.itemgetter(1)

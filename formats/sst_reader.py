"""The SST reader (`SstReader`): open-time checks, point reads, block iteration and verification. The
file layout is drawn in `formats.sst`; this module's parts of it are the footer, metadata, index and
filter it checks at open and the data blocks it checks on first read."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import mmap
import operator
import os
import struct
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import msgpack
import xxhash

from formats import bloom, fileio
from formats.errors import CorruptionError, FormatVersionError
from formats.row import (
    SUPPORTED_FORMAT_VERSIONS,
    codec_for,
    normalize_features,
)
from formats.row_array import RowArray
from formats.sst_groups import group_batch
from formats.sst_index import FENCE, FENCE_SHIFT, BlockIndex, parse_fixed, parse_general
from formats.sst_layout import (
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    FOOTER,
    FOOTER_BODY,
    KLEN,
    MAGIC,
    TRAILER,
    U32,
    BlockCache,
    DecompressionError,
    SsTableInfo,
    UnknownCompressionError,
    _decompress,
    _xxh3,
)


class SstReader:
    """Reads one SST. Thread-safe for concurrent reads (blocks are immutable bytes).

    Open validates the footer, metadata, index and filter (O(index + filter)); data blocks are
    checked on first read. Point lookup: bloom, then binary search of the index, then of one block.
    The reader keeps the index and the filter as their stored payloads (`blocks` is a
    `formats.sst_index.BlockIndex`, the filter's bits one bytes object): no Python object per block.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cache: BlockCache | None = None,
        cache_id: Any = None,
        verify_checksums: bool = True,
        view: Any = None,
    ) -> None:
        self.path = os.fspath(path)
        self.cache = cache
        self.cache_id = cache_id if cache_id is not None else self.path
        self.verify_checksums = verify_checksums
        # `view`: the file's bytes as the storage seam gives them (`Storage.open_map`: ranged GETs of an
        # object), else an mmap of the local file at `path`; the reader owns it and closes it
        if view is None:
            try:
                view = fileio.map_file(self.path)
            except ValueError:
                raise ValueError(f"{self.path}: not a regular file, so not an SST") from None
        self._map = view
        # whether the file is memory-mapped, so a block read costs page faults at most; False for an
        # object's ranged reads, where each block outside the cached tail is a GET (or a disk-cache read)
        self.mapped = isinstance(view, (mmap.mmap, bytes))
        read_ahead = getattr(self._map, "read_ahead", None)
        if cache is None and read_ahead is not None:
            # no block cache: a compaction's input or a tool, read from end to end and then closed, so
            # an object's blocks come a MiB per GET (storage.objread.RangeFile)
            read_ahead()
        size = len(self._map)
        if size < FOOTER.size:
            if not isinstance(self._map, bytes):
                self._map.close()
            raise CorruptionError(self.path, 0, f"file of {size} bytes is too short to be an SST")
        try:
            self._open(size)
        except BaseException:
            self.close()
            raise

    def _open(self, size: int) -> None:
        path = self.path
        buf = self._map
        foot_at = size - FOOTER.size
        meta_offset, meta_size, version, magic, check = FOOTER.unpack(buf[foot_at : foot_at + FOOTER.size])
        if magic != MAGIC:
            raise CorruptionError(path, foot_at, "bad magic number: not an lsm-sim SST")
        if xxhash.xxh32_intdigest(buf[foot_at : foot_at + FOOTER_BODY.size]) != check:
            raise CorruptionError(path, foot_at, "footer checksum mismatch")
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise FormatVersionError(
                path, f"SST format version {version} is newer than this reader (knows 0 and 1)"
            )
        if meta_offset + meta_size > foot_at:
            raise CorruptionError(path, foot_at, "metadata block lies outside the file")
        try:
            d = msgpack.unpackb(self._block_payload(meta_offset, meta_size), raw=False)
            info = SsTableInfo.from_dict(d)
        except CorruptionError:
            raise
        except Exception as e:
            raise CorruptionError(path, meta_offset, f"undecodable metadata: {e}") from None
        if info.format_version != version:
            raise CorruptionError(path, meta_offset, "metadata and footer disagree on the format version")
        if info.compression not in COMPRESSION_NAMES.values():  # `in` a list: no hashing of odd values
            raise FormatVersionError(
                path, f"data blocks compressed with {info.compression!r}, a codec this reader does not know"
            )
        try:
            features = normalize_features(info.row_features)
        except FormatVersionError as e:
            raise FormatVersionError(path, e.detail) from None
        self.info = dataclasses.replace(info, file_size=size)
        self.codec = codec_for(version, features)
        self._decode_version = self.codec.decode_version
        self.default_seq = info.max_seq
        if info.index_offset + info.index_size > meta_offset:
            raise CorruptionError(path, meta_offset, "index block lies outside the file")
        prefetch = getattr(buf, "prefetch", None)  # an object: index and filter in one GET, kept
        if prefetch is not None:
            prefetch(min(info.index_offset, info.filter_offset))
        idx = self._block_payload(info.index_offset, info.index_size)
        self.blocks = self._parse_index(idx, info.index_offset)
        if len(self.blocks) != info.num_blocks:
            raise CorruptionError(path, info.index_offset, "index and metadata disagree on block count")
        # point reads: the key range as two attributes, and per block a weak reference to its cached
        # _Block (or `_absent`), so a read of a cached block skips the cache's lookup; the cache alone
        # keeps blocks alive, so its memory bound holds and an evicted block's reference dies with it
        n = len(self.blocks)
        self._lo = self.blocks.first_key(0) if n else b"\xff"
        self._hi = self.blocks.last_key(n - 1) if n else b""
        # (made at the first block a cache takes: a reader that never reads a block through the cache,
        # such as one the DB opened and a compaction replaces, holds no slot per block)
        self._slots: list[Callable[[], _Block | None]] = []
        # a local file's filter is read where it is mapped, not copied: the page cache holds it, as it
        # holds the data blocks (an open SST's filter is about 1.25 bytes a row, most of what an open
        # database's anonymous memory would grow by with its data), and the kernel may evict it under
        # memory pressure like any clean page; an object's filter is the bytes fetched at open
        payload = self._block_payload(info.filter_offset, info.filter_size, mapped=True)
        try:
            self.bloom = bloom.BloomFilter(payload)
        except ValueError as e:
            raise CorruptionError(path, info.filter_offset, f"bad filter block: {e}") from None
        finally:
            if type(payload) is memoryview:
                payload.release()  # the filter keeps its own view of the bits
        if hasattr(buf, "release"):  # an object: the tail fetched at open is parsed
            if self.cache is not None:
                buf.release()  # a DB's reader: its block cache keeps what is read again
            else:
                buf.release_after(info.data_size)  # read once to its end: keep the data blocks

    def _parse_index(self, idx: bytes, at: int) -> BlockIndex:
        try:
            (count,) = U32.unpack_from(idx, 0)
            fast = parse_fixed(idx, count, self.info.data_size)
            if fast is not None:
                return fast
            return parse_general(idx, count, self.info.data_size)
        except (struct.error, ValueError) as e:
            raise CorruptionError(self.path, at, f"bad index block: {e}") from None

    def _block_payload(self, offset: int, size: int, mapped: bool = False) -> bytes | memoryview:
        """Read one stored block, verify its checksum, return the (decompressed) payload; with `mapped`,
        an uncompressed block of a local file comes as a view of the mapping instead of a copy (the
        caller releases it, or `close` cannot unmap the file)."""
        if size < TRAILER.size or offset + size > len(self._map):
            raise CorruptionError(self.path, offset, "block lies outside the file")
        # a local file is read through a view of its mapping (the checksum over the view, the payload
        # copied once: not the block, then its body, then the payload, three copies of every index,
        # filter and data block read, and heap churn that stays in anonymous memory); an object's
        # block is the one slice of it that `RangeFile` returns
        m = self._map
        src, at = (m, offset) if type(m) is mmap.mmap else (m[offset : offset + size], 0)
        stored_end = at + size - TRAILER.size  # the stored bytes, then the compression code
        code, check = TRAILER.unpack_from(src, stored_end)
        if self.verify_checksums:
            with memoryview(src) as view:
                ok = _xxh3(view[at : stored_end + 1]) == check
            if not ok:
                raise CorruptionError(self.path, offset, "block checksum mismatch")
        if code == COMPRESSION_NONE:
            if mapped and src is m:
                return memoryview(m)[at:stored_end]
            return src[at:stored_end]
        stored = src[at:stored_end]
        try:
            return _decompress(stored, code)
        except DecompressionError as e:
            raise CorruptionError(self.path, offset, str(e)) from None
        except UnknownCompressionError as e:
            if self.verify_checksums:  # the checksum covers the code: a newer writer put it there
                raise FormatVersionError(self.path, f"block at offset {offset}: {e}") from None
            raise CorruptionError(self.path, offset, str(e)) from None

    def close(self) -> None:
        """Release the file mapping (and the filter's view of it)."""
        filt = getattr(self, "bloom", None)
        if filt is not None:
            filt.release()
        self._map.close()

    def __enter__(self) -> SstReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- blocks -----------------------------------------------------------------------------------
    def _load(self, i: int, indexed: bool = False) -> _Block:
        """Data block `i`, checked and split into rows, through the cache; `indexed` (a point read)
        also gives it its key index, charged to the block with it."""
        cache = self.cache
        if cache is not None:
            ck = (self.cache_id, i)
            b = cache.get(ck)
            if b is not None:
                self._slot_list()[i] = b.ref
                if indexed and b.index is None:
                    self._key_index(b, i)
                return b
        offset, size, num_rows = self.blocks.entry(i)
        payload = self._block_payload(offset, size)
        try:
            (n,) = U32.unpack_from(payload, len(payload) - 4)
            start = len(payload) - 4 - 4 * n
            if n != num_rows or start < 0:
                raise ValueError("row count mismatch")
            offsets = struct.unpack_from(f">{n}I", payload, start)
        except (struct.error, ValueError) as e:
            raise CorruptionError(self.path, offset, f"bad block trailer: {e}") from None
        b = _Block(payload[:start], offsets)
        charge = len(payload) + 8 * n
        if indexed:
            b.index = self._index_rows(b, i)
            charge += ROW_INDEX_BYTES * n
        if cache is not None:
            cache.put(ck, b, charge)
            self._slot_list()[i] = b.ref
        return b

    def _index_rows(self, blk: _Block, i: int) -> dict[bytes, int]:
        """Key -> where its newest version's row starts in `blk.data` (one dict probe per point read)."""
        data = blk.data
        unpack = KLEN.unpack_from
        index: dict[bytes, int] = {}
        setdefault = index.setdefault
        try:
            for o in blk.offsets:
                setdefault(data[o + 2 : o + 2 + unpack(data, o)[0]], o)
        except struct.error:
            raise CorruptionError(self.path, self.blocks[i].offset, "row runs past the end of the block") from None
        return index

    def _key_index(self, blk: _Block, i: int) -> dict[bytes, int]:
        """The key index of a block a scan cached without one: built and charged to the block."""
        index = blk.index = self._index_rows(blk, i)
        grow = getattr(self.cache, "grow", None)  # charge the index to the block where the cache can
        if grow is not None:
            grow((self.cache_id, i), ROW_INDEX_BYTES * len(blk.offsets))
        return index

    def all_cached(self) -> bool:
        """Whether every data block of this SST is in the block cache now (reading one costs no I/O)."""
        slots = self._slots
        return all(slot() is not None for slot in slots) if slots else not len(self.blocks)

    def _slot_list(self) -> list[Callable[[], _Block | None]]:
        """The per-block weak references, made when the first one is set (two threads making them at
        once lose one reference: that block's next read goes through the cache, as any read may)."""
        slots = self._slots
        if not slots:
            slots = self._slots = [_absent] * len(self.blocks)
        return slots

    def key_index(self, i: int) -> dict[bytes, int]:
        """Block `i`'s key index (key -> its newest row's offset), as a point read builds and caches it
        (`lsm.l0_index` takes its keys from here)."""
        index = self._load(i, True).index
        assert index is not None  # an indexed load always has one
        return index

    def block(self, i: int) -> tuple[bytes, tuple[int, ...]]:
        """Data block `i` as (payload, row offsets), through the cache."""
        b = self._load(i)
        return b.data, b.offsets

    def block_rows(self, i: int) -> list[tuple]:
        """All rows of data block `i`, decoded, in stored order."""
        b = self._load(i)
        offsets = b.offsets
        try:
            rows = self.codec.decode_block(b.data, self.path, self.default_seq)
        except CorruptionError as e:
            raise CorruptionError(self.path, self.blocks[i].offset, e.detail) from None
        except struct.error:
            raise CorruptionError(self.path, self.blocks[i].offset, "row runs past the end of the block") from None
        if len(rows) != len(offsets):
            raise CorruptionError(self.path, self.blocks[i].offset, "row count does not match the block")
        return rows

    # -- reads ------------------------------------------------------------------------------------
    def may_contain(self, key: bytes) -> bool:
        """The bloom filter's answer for `key`: False means the SST certainly does not hold it."""
        return self.bloom.may_contain(key)

    def get(self, key: bytes, max_seq: int | None = None, use_bloom: bool = True) -> tuple | None:
        """Newest version of `key` with seq <= max_seq (any version when None), or None.

        A point read that loads a block into a cache with room gives it its key index (key -> newest
        row, about as costly as decoding the block once; see `_index_on_load`), so every read of a
        cached block is one dict probe (faster than the filter, which is consulted only before a block
        read); then only the row found is decoded. A block read without its index is binary-searched.
        O(log blocks) plus O(versions of the key) row decodes."""
        if key < self._lo or key > self._hi:
            return None
        # `BlockIndex.find`, inline (the hot path of every point read): the last key of every FENCE-th
        # block, then a walk over that group (key <= _hi: the search never runs off the end)
        ix = self.blocks
        i = _bisect_left(ix.fence, key) << FENCE_SHIFT
        end = i + FENCE - 1
        if end >= ix.n:
            end = ix.n - 1
        search = ix.search
        if ix.fixed:
            buf = ix.buf
            while i < end and buf[search[i]] < key:
                i += 1
        else:
            last_at = ix.last_at
            while i < end and last_at(search[i]) < key:
                i += 1
        slots = self._slots
        blk = slots[i]() if slots else None
        if blk is None:
            if ix.first_at(ix.firsts[i]) > key or (use_bloom and not self.bloom.may_contain(key)):
                return None
            blk = self._load(i, self._index_on_load())
            index = blk.index
            if index is None:  # no cache, or one too full to keep a block read once: search it
                return self._search(blk, key, max_seq)
        else:
            blk.touched = True
            index = blk.index
            if index is None:  # cached without one (a scan, or a full cache): now it is read again
                index = self._key_index(blk, i)
        at = index.get(key)
        if at is None:
            return None
        try:
            row = self._decode_version(blk.data, at + 2 + len(key), key, self.default_seq)
        except (CorruptionError, struct.error):
            row = None  # the checked generic decoder below names the fault
        if row is not None and (max_seq is None or row[1] <= max_seq):
            return row
        return self._older(blk, bisect.bisect_left(blk.offsets, at), key, max_seq)

    def _index_on_load(self) -> bool:
        """Whether a point read that loads a block gives it its key index at once: when the cache (the
        engine's LRU, which says how full it is) is under 7/8 full, so the block is likely to stay for
        more reads; otherwise the index waits for the block's second read, as a block evicted after one
        read would waste it. Never without a cache."""
        cache = self.cache
        if cache is None:
            return False
        used = getattr(cache, "used", None)
        capacity = getattr(cache, "capacity", None)
        return used is not None and capacity is not None and used * 8 < capacity * 7

    def _search(self, blk: _Block, key: bytes, max_seq: int | None) -> tuple | None:
        """`get` in a block without its key index: a binary search for the key."""
        data, offsets = blk.data, blk.offsets
        key_at = self.codec.key_at
        lo, hi = 0, len(offsets)
        while lo < hi:
            mid = (lo + hi) >> 1
            if key_at(data, offsets[mid]) < key:
                lo = mid + 1
            else:
                hi = mid
        if lo == len(offsets) or key_at(data, offsets[lo]) != key:
            return None
        return self._older(blk, lo, key, max_seq)

    def _older(self, blk: _Block, lo: int, key: bytes, max_seq: int | None) -> tuple | None:
        """The first version of `key` with seq <= max_seq among the rows from `lo` on (checked decode)."""
        data, offsets = blk.data, blk.offsets
        decode = self.codec.decode_from
        n = len(offsets)
        while lo < n:
            row, _ = decode(data, offsets[lo], self.path, self.default_seq)
            if row[0] != key:
                return None
            if max_seq is None or row[1] <= max_seq:
                return row
            lo += 1
        return None

    def _block_range(self, start: bytes | None, end: bytes | None) -> range:
        lo = 0 if start is None else self.blocks.find(start)
        hi = len(self.blocks) if end is None else self.blocks.count_before(end)
        return range(lo, hi)

    def iter(
        self, start: bytes | None = None, end: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple]:
        """Every version with start <= key < end.

        Forward: key ascending, seq descending. Reverse: key descending, seq still descending within a
        key (newest first), so the same version resolution works in both directions. Lazy: a block is
        read when the iteration reaches it; rows come from the decoded block lists (see `iter_blocks`),
        so a row costs no Python code here.
        """
        return itertools.chain.from_iterable(self.iter_blocks(start, end, reverse))

    def iter_blocks(
        self, start: bytes | None = None, end: bytes | None = None, reverse: bool = False
    ) -> Iterator[list[tuple]]:
        """The rows of `iter`, one list per data block (lazy: a block is read when reached). Only the
        first and last block of the range are trimmed to the bounds; a block holds every version of
        its keys, so a key's versions never straddle two lists."""
        blocks = self._block_range(start, end)
        if not blocks:
            return iter(())
        first, last = blocks[0], blocks[-1]
        trim_start = start is not None and start > self.blocks.first_key(first)
        trim_end = end is not None and end <= self.blocks.last_key(last)
        block_rows = self.block_rows

        def rows_of(i: int) -> list[tuple]:
            rows = block_rows(i)
            if trim_start and i == first:
                rows = rows[bisect.bisect_left(rows, start, key=_row_key) :]
            if trim_end and i == last:
                rows = rows[: bisect.bisect_left(rows, end, key=_row_key)]
            return _reverse_keys(rows) if reverse else rows

        return map(rows_of, reversed(blocks) if reverse else blocks)

    def iter_batches(
        self, start: bytes | None = None, end: bytes | None = None, tombstones: bool = False
    ) -> Iterator[list[tuple] | RowArray]:
        """The rows of a forward `iter`, a group of consecutive blocks of at least `GROUP_ROWS` rows at a
        time (lazy): a group whose rows are all alike comes as one `RowArray` (its blocks' row areas
        joined and checked column-wise by `RowCodec.rows_array`, no Python step per row), any other as
        the row list of `iter_blocks`. Decoded columns are not cached: the cache keeps the payloads,
        from which a group's array costs one copy and a few vectorized checks, while cached columns
        would double what each block holds for that small saving. With `tombstones` (the compaction), a
        group alike but for its tombstones comes as a ragged `RowArray` too
        (`RowCodec.rows_array_ragged`)."""
        blocks = self._block_range(start, end)
        if not blocks:
            return
        first, last = blocks[0], blocks[-1]
        trim_start = start is not None and start > self.blocks.first_key(first)
        trim_end = end is not None and end <= self.blocks.last_key(last)
        entry = self.blocks.entry
        min_rows = GROUP_ROWS
        group: list[int] = []
        n = 0
        for i in blocks:
            group.append(i)
            n += entry(i)[2]
            if n < min_rows and i != last:
                continue
            batch = group_batch(self, group, n, tombstones)
            if trim_start and group[0] == first:
                batch = batch[bisect.bisect_left(_keys_of(batch), start) :]
            if trim_end and i == last:
                batch = batch[: bisect.bisect_left(_keys_of(batch), end)]
            yield batch
            group = []
            n = 0

    def __iter__(self) -> Iterator[tuple]:
        return itertools.chain.from_iterable(map(self.block_rows, range(len(self.blocks))))

    def verify(self) -> None:
        """Check every block checksum, the key order and the metadata against the content (formats.verify).

        Raises CorruptionError naming the offset of the first problem. O(file).
        """
        from formats.verify import check_blocks  # formats.verify reads through this reader

        check_blocks(self)



# Rows per batch of `SstReader.iter_batches` (at least; whole blocks): numpy's fixed cost per call is a few
# microseconds, so a forward scan's columns are built over many blocks at once (~2k rows, ~270 KiB).
GROUP_ROWS = 2048

# What a cached block's key index costs a row beyond the block (a dict slot and the key object, for
# short keys), charged to the block when the index is built (`BlockCache.grow`, where the cache has it).
ROW_INDEX_BYTES = 96


class _Block:
    """A checked data block in the cache: payload, row offsets, and (once a point read used it) its key
    index. `touched` marks a block a point read used since the cache last looked (the engine's LRU gives
    such a block a second chance instead of evicting it); `ref` is the weak reference readers keep."""

    __slots__ = ("data", "offsets", "index", "touched", "ref", "__weakref__")

    def __init__(self, data: bytes, offsets: tuple[int, ...]) -> None:
        self.data = data
        self.offsets = offsets
        self.index: dict[bytes, int] | None = None
        self.touched = False
        self.ref = weakref.ref(self)


def _absent() -> None:
    """The slot of a block with no cached copy (a dead weak reference answers the same)."""
    return None


_row_key = operator.itemgetter(0)
_bisect_left = bisect.bisect_left


def _keys_of(batch: list[tuple] | RowArray) -> list[bytes]:
    return list(map(_row_key, batch)) if type(batch) is list else batch.keys()


def _reverse_keys(rows: list[tuple]) -> list[tuple]:
    """Reverse the key order of a block's rows, keeping each key's versions newest first."""
    out: list[tuple] = []
    n = len(rows)
    j = n
    while j > 0:
        i = j - 1
        k = rows[i][0]
        while i > 0 and rows[i - 1][0] == k:
            i -= 1
        out.extend(rows[i:j])
        j = i
    return out

"""Reading one object by byte range (storage.objstore's `open_map`): `RangeFile`, what an SST reader slices
when its file is an object, with the object's tail fetched at open and sequential reads fetched ahead in
windows lent by `WINDOWS`."""

from __future__ import annotations

import concurrent.futures
import mmap
import threading
from typing import TYPE_CHECKING

from storage.base import file_buffer

if TYPE_CHECKING:
    from storage.objstore import ObjectStorage

# an SST's open reads its tail (footer, metadata, and usually its index and bloom filter) with one GET
TAIL_BYTES = 256 << 10
# a sequential reader of an SST (a compaction) fetches this much per GET (`RangeFile.read_ahead`)
READAHEAD_BYTES = 1 << 20
# the fetches ahead of sequential readers (`RangeFile`): obstore releases the GIL while it waits, so a
# compaction merges one window while the next is on its way
_FETCHERS = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="lsm-read-ahead")


class WindowPool:
    """The read-ahead windows of sequential readers (`RangeFile.read_ahead`), `READAHEAD_BYTES` each,
    lent and taken back, so a compaction that reads many SSTs refills a few windows instead of
    allocating a MiB per GET (allocations that size, made and freed over and over from the read-ahead
    threads, stay in glibc's per-thread arenas). A window is a `file_buffer`: what a compaction reads
    from an object store sits in the page cache, as a local compaction's mapped inputs do, not in the
    process's anonymous memory. At most `keep` idle windows are kept for the next reader."""

    def __init__(self, size: int, keep: int = 8) -> None:
        self.size = size
        self.keep = keep
        self._free: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def take(self) -> mmap.mmap:
        """A window to fill (one kept from an earlier reader, else a new one)."""
        with self._lock:
            if self._free:
                return self._free.pop()
        return file_buffer(self.size)

    def give(self, buf: mmap.mmap) -> None:
        """Take `buf` back (kept for the next reader unless `keep` are idle already)."""
        with self._lock:
            if len(self._free) < self.keep:
                self._free.append(buf)
                return
        buf.close()

    @property
    def idle(self) -> int:
        """How many windows wait for a reader."""
        return len(self._free)


WINDOWS = WindowPool(READAHEAD_BYTES)


class RangeFile:
    """A read-only view of one object that fetches byte ranges on demand (what `SstReader` slices).

    The first access fetches the object's tail (`TAIL_BYTES`: footer, metadata, and for most SSTs the
    index and bloom filter) with one GET; `prefetch(start)` widens the cached tail back to `start`, so
    opening an SST costs one or two GETs. A slice outside the cached tail is one ranged GET (the block
    cache above keeps what is read), or a read of the store's disk cache (`ObjectStorage.cache`) when
    it holds that range of this very object.

    After `read_ahead()` (an SST reader without a block cache: a compaction's input, a tool's scan),
    a slice that starts where the previous one ended fetches `READAHEAD_BYTES` at once and serves the
    following slices from them: reading a whole SST costs one GET per `READAHEAD_BYTES` instead of one
    per block. Two windows from `WINDOWS` are refilled in turn (the next is fetched while the current one
    is read); each slice is a copy, so a window may be refilled as soon as the reader moves past it. The
    windows go back to the pool at `close`."""

    def __init__(self, storage: ObjectStorage, path: str, readahead: int = 0) -> None:
        self.storage = storage
        self.path = path
        self.cache = storage.cache
        self._size, tail, self._ident = storage.read_tail(path, TAIL_BYTES)
        self._tail_at = self._size - len(tail)
        self._tail = tail
        self.readahead = 0
        # the window being read: (offset, bytes held, its buffer from WINDOWS; None before the first)
        self._window: tuple[int, int, mmap.mmap | None] = (0, 0, None)
        self._next = 0  # where the last slice ended: a slice starting there (or at 0) is sequential
        # the next window, being fetched: (offset, future of its length, its buffer)
        self._ahead: tuple[int, concurrent.futures.Future, mmap.mmap] | None = None

    def __len__(self) -> int:
        return self._size

    def read_ahead(self) -> None:
        """Fetch sequential slices `READAHEAD_BYTES` at a time from now on (see the class docstring); a
        store that fetches nothing ahead (a simulation's) goes on reading each slice as it is asked."""
        if self.storage.fetch_ahead:
            self.readahead = READAHEAD_BYTES

    def _range(self, start: int, end: int) -> bytes:
        """Bytes [start, end): from the disk cache, else one ranged GET (then kept in the cache)."""
        cache = self.cache
        if cache is None:
            return self.storage.read_range(self.path, start, end)
        data = cache.get(self._ident, start, end)
        if data is None:
            data = self.storage.read_range(self.path, start, end)
            cache.put(self._ident, start, end, data)
        return data

    def prefetch(self, start: int) -> None:
        """Cache the bytes from `start` to the end of the object (one GET for what is not cached yet)."""
        start = max(0, start)
        if start < self._tail_at:
            self._tail = self._range(start, self._tail_at) + self._tail
            self._tail_at = start

    def release_after(self, end: int) -> None:
        """Drop the cached tail's bytes from `end` on (an open SST's metadata, index and filter, parsed
        by now: only its data blocks are read again), keeping any data blocks the tail holds."""
        self._tail = self._tail[: max(0, end - self._tail_at)]

    def release(self) -> None:
        """Drop the whole cached tail (an open SST with a block cache: its metadata is parsed, and a
        data block the tail held is fetched again when read, then kept by the block cache, whose bound
        holds; kept here, the tails would grow with the number of SSTs open)."""
        self._tail = b""
        self._tail_at = self._size

    def __getitem__(self, item: slice) -> bytes:
        if not isinstance(item, slice) or item.step not in (None, 1):
            raise TypeError("RangeFile supports plain slices only")
        start, stop, _ = item.indices(self._size)
        if stop <= start:
            return b""
        if start >= self._tail_at:
            tail_end = self._tail_at + len(self._tail)  # the whole object's end, unless `release_after`
            if stop <= tail_end:
                return self._tail[start - self._tail_at : stop - self._tail_at]
            if start >= tail_end:
                return self._range(start, stop)
            return self._tail[start - self._tail_at :] + self._range(tail_end, stop)
        if not self.readahead:
            return self._range(start, stop)
        if stop > self._tail_at:  # a block that runs into the cached tail: the rest comes from there
            return self[start : self._tail_at] + self._tail[: stop - self._tail_at]
        if stop - start > self.readahead:  # more than a window: one GET of its own
            return self._range(start, stop)
        sequential, self._next = start == self._next, stop
        at, n, buf = self._window
        if buf is not None and at <= start and stop <= at + n:
            return bytes(memoryview(buf)[start - at : stop - at])
        if not sequential:  # one GET; the window stays (a reader may go back over its last blocks)
            return self._range(start, stop)
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            a_at, fut, a_buf = ahead
            try:
                a_n = fut.result()  # its error, if any, is this read's
            except BaseException:
                WINDOWS.give(a_buf)
                raise
            if buf is not None and a_at == at + n and at <= start and stop <= a_at + a_n:
                # the window fetched ahead follows the current one and holds the rest of this slice: it
                # becomes the window, and the one after it is fetched into the current one's buffer
                if start >= a_at:
                    out = bytes(memoryview(a_buf)[start - a_at : stop - a_at])
                else:  # a block straddling the two
                    out = b"".join((memoryview(buf)[start - at : n], memoryview(a_buf)[: stop - a_at]))
                self._window = (a_at, a_n, a_buf)
                self._fetch_ahead(a_at + a_n, buf)
                return out
            WINDOWS.give(a_buf)
        end = max(stop, min(start + self.readahead, self._tail_at))
        if buf is None:
            buf = WINDOWS.take()
        # not through the disk cache: a compaction's inputs are deleted once it commits
        try:
            n = self.storage.read_range_into(self.path, start, memoryview(buf)[: end - start])
        except BaseException:
            self._window = (0, 0, None)
            WINDOWS.give(buf)
            raise
        self._window = (start, n, buf)
        self._fetch_ahead(start + n, None)
        return bytes(memoryview(buf)[: stop - start])

    def _fetch_ahead(self, at: int, buf: mmap.mmap | None) -> None:
        """Start fetching the window at `at` into `buf` (or a window from the pool): double buffering,
        it comes while the current one is read. Nothing left to fetch: `buf` goes back to the pool."""
        if at >= self._tail_at:
            if buf is not None:
                WINDOWS.give(buf)
            return
        if buf is None:
            buf = WINDOWS.take()
        view = memoryview(buf)[: min(at + self.readahead, self._tail_at) - at]
        self._ahead = (at, _FETCHERS.submit(self.storage.read_range_into, self.path, at, view), buf)

    def close(self) -> None:
        """Drop the cached tail, and give the read-ahead windows back (waiting out a fetch ahead)."""
        self._tail = b""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            concurrent.futures.wait([ahead[1]])
            WINDOWS.give(ahead[2])
        buf, self._window = self._window[2], (0, 0, None)
        if buf is not None:
            WINDOWS.give(buf)


__all__ = ["READAHEAD_BYTES", "TAIL_BYTES", "WINDOWS", "RangeFile", "WindowPool"]

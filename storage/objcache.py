"""A bounded local disk cache of byte ranges of SST objects (``DbOptions.object_cache_dir``).

An SST object is read by byte range (`storage.objread.RangeFile`): its index and filter once at open,
then one data block per ranged GET. With a cache directory, every range fetched is also kept there as one
file, so a reopened store (or another process on the same machine) reads those ranges from the local
disk instead of paying a GET for each again. Nothing is written locally without a cache directory.

* **Keys.** A cached range is named by a hash of the object's URL, its identity as the store reported it
  when the SST was opened (size, ETag, last-modified time) and the range. An SST whose name is written
  again with other bytes (a crashed writer's leftover id, a database recreated at the same URL) has
  another identity, so a stale range is never served.
* **Files.** A header (magic, length, xxh64 of the bytes) then the bytes. A file is written under a
  temporary name and renamed into place, so two processes sharing the directory never see half of one.
  A file that is short, damaged or of another length than asked is deleted and reported as a miss: the
  caller fetches the range again.
* **Bound.** ``object_cache_bytes`` bounds the files' total size. A hit refreshes the file's mtime; once
  this process's running total passes the bound, or every sixteenth of it added, it lists the directory
  and deletes the least recently used files until the total is at most 15/16 of the bound. Several
  processes sharing a directory each keep it that way, so between two of one process's passes the
  others may add at most a sixteenth of the bound each.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
import uuid

import xxhash

MAGIC = b"LSMC"
HEADER = struct.Struct("<4sQQ")  # magic, length of the bytes, xxh64 of the bytes
SUFFIX = ".blk"
TMP_PREFIX = ".tmp-"
STALE_TMP_S = 600  # a temporary file this old is a crashed writer's: deleted by the next pass
LOW_WATER = 15 / 16  # an eviction pass leaves the cache at most this full


class ObjectCache:
    """Ranges of immutable objects as files in `directory`, at most `max_bytes` of them (module
    docstring). Thread-safe; several processes may share one directory."""

    def __init__(self, directory: str, max_bytes: int) -> None:
        self.directory = os.path.abspath(directory)
        self.max_bytes = max_bytes
        os.makedirs(self.directory, exist_ok=True)
        self._lock = threading.Lock()
        self._total = self._scan()[1]  # this process's estimate of the files' total size
        self._added = 0  # bytes added since the last pass over the directory
        self.hits = 0
        self.misses = 0

    def _path(self, ident: str, start: int, end: int) -> str:
        h = hashlib.blake2b(f"{ident}\0{start}\0{end}".encode(), digest_size=16).hexdigest()
        return os.path.join(self.directory, h + SUFFIX)

    def get(self, ident: str, start: int, end: int) -> bytes | None:
        """Bytes [start, end) of the object `ident`, if cached and intact; else None."""
        path = self._path(ident, start, end)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError:
            self.misses += 1
            return None
        data = _check(raw, end - start)
        if data is None:  # short or damaged: drop it, the caller fetches the range again
            _unlink(path)
            self.misses += 1
            return None
        try:
            os.utime(path)  # its last use, for the LRU order of every process sharing the directory
        except OSError:
            pass
        self.hits += 1
        return data

    def put(self, ident: str, start: int, end: int, data: bytes) -> None:
        """Keep bytes [start, end) of `ident` (a range larger than a sixteenth of the bound is not kept).
        A failure to write (a full disk) only means the range is not cached."""
        size = HEADER.size + len(data)
        if len(data) != end - start or size > self.max_bytes * (1 - LOW_WATER):
            return
        path = self._path(ident, start, end)
        tmp = os.path.join(self.directory, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                f.write(HEADER.pack(MAGIC, len(data), xxhash.xxh64_intdigest(data)))
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            _unlink(tmp)
            return
        with self._lock:
            self._total += size
            self._added += size
            due = self._total > self.max_bytes or self._added > self.max_bytes * (1 - LOW_WATER)
        if due:
            self.evict()

    def evict(self) -> None:
        """List the directory and delete the least recently used files until the total is at most
        15/16 of the bound; stale temporary files go too."""
        with self._lock:
            entries, total = self._scan()
            goal = self.max_bytes * LOW_WATER
            if total > goal:
                for _mtime, size, path in sorted(entries):
                    if total <= goal:
                        break
                    if _unlink(path):
                        total -= size
            self._total, self._added = total, 0

    def total_bytes(self) -> int:
        """The size of the cache's files now (a pass over the directory)."""
        return self._scan()[1]

    def _scan(self) -> tuple[list[tuple[float, int, str]], int]:
        """(mtime, size, path) of every cached file, and their total; stale temporary files deleted."""
        entries = []
        total = 0
        old = time.time() - STALE_TMP_S
        try:
            it = os.scandir(self.directory)
        except FileNotFoundError:
            return [], 0
        with it:
            for e in it:
                try:
                    st = e.stat()
                except FileNotFoundError:
                    continue
                if e.name.startswith(TMP_PREFIX):
                    if st.st_mtime < old:
                        _unlink(e.path)
                    continue
                if e.name.endswith(SUFFIX):
                    entries.append((st.st_mtime, st.st_size, e.path))
                    total += st.st_size
        return entries, total


def _check(raw: bytes, length: int) -> bytes | None:
    """The bytes of a cache file if it is whole and holds `length` bytes, else None."""
    if len(raw) != HEADER.size + length:
        return None
    magic, n, digest = HEADER.unpack_from(raw)
    data = raw[HEADER.size :]
    if magic != MAGIC or n != length or xxhash.xxh64_intdigest(data) != digest:
        return None
    return data


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
    except OSError:
        return False
    return True


_caches: dict[str, ObjectCache] = {}  # directory -> its cache: one running total per directory here
_caches_lock = threading.Lock()


def cache_for(directory: str, max_bytes: int) -> ObjectCache:
    """The process's cache of `directory`, bounded by `max_bytes` (the latest bound asked wins)."""
    d = os.path.abspath(directory)
    with _caches_lock:
        c = _caches.get(d)
        if c is None:
            c = _caches[d] = ObjectCache(d, max_bytes)
        c.max_bytes = max_bytes
        return c


__all__ = ["ObjectCache", "cache_for"]

"""A bounded LRU cache of decoded SST blocks, shared by every reader of one DB.

Point reads of a cached block go through the reader's weak reference to it (`formats.sst.SstReader.get`)
rather than `get`, so they cannot move the block to the recent end; they set the block's `touched` flag
instead, and eviction gives a touched block a second chance (CLOCK's approximation of LRU)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class LruCache:
    """Least-recently-used cache bounded by the sum of the entries' charges (bytes). O(1) get/put."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.hits = 0
        self.misses = 0
        self._d: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        """The cached value for `key` (and mark it most recently used), or None. O(1)."""
        e = self._d.get(key)
        if e is None:
            self.misses += 1
            return None
        self.hits += 1
        try:
            self._d.move_to_end(key)
        except KeyError:
            pass
        return e[0]

    def put(self, key: Any, value: Any, charge: int) -> None:
        """Cache `value` under `key`, charged `charge` bytes; evict least recently used entries to fit.

        A value larger than the whole capacity is not cached. O(1) amortized."""
        if charge > self.capacity:
            return
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._d[key] = (value, charge)
            self.used += charge
            self._evict()

    def grow(self, key: Any, extra: int) -> None:
        """Charge `extra` more bytes to the entry under `key` (a block that gained a key index), evicting
        to fit; nothing if `key` is no longer cached. O(1) amortized."""
        with self._lock:
            e = self._d.get(key)
            if e is not None:
                self._d[key] = (e[0], e[1] + extra)
                self.used += extra
                self._evict()

    def _evict(self) -> None:
        d = self._d
        while self.used > self.capacity:
            k, e = d.popitem(last=False)
            v = e[0]
            if getattr(v, "touched", False):  # read since it last reached the old end: keep it
                v.touched = False
                d[k] = e
                continue
            self.used -= e[1]

    def evict_prefix(self, file_id: Any) -> None:
        """Drop every block of one file (after the file is deleted)."""
        with self._lock:
            for k in [k for k in self._d if k[0] == file_id]:
                self.used -= self._d.pop(k)[1]

    def __len__(self) -> int:
        return len(self._d)

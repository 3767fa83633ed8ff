"""The live snapshots of a handle: which seqs reads still pin, and which as-of snapshots judge expiry at
a time of their own. Flushes and compactions ask it what they must keep (`seqs`, `retention_cutoff`).

Counts are guarded by the version set's state lock (lsm.versions), held for a few field updates only.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lsm.snapshot import Snapshot


class SnapshotList:
    """Seqs pinned by open snapshots, and the as-of snapshots among them (module docstring)."""

    def __init__(self, lock: threading.Lock, history_retention: int) -> None:
        self.lock = lock
        self.history_retention = history_retention
        self._counts: Counter[int] = Counter()
        self._as_of: weakref.WeakSet[Snapshot] = weakref.WeakSet()  # open snapshots with a read time

    def pin(self, seq: int, snapshot: Snapshot | None = None) -> None:
        """Count one more snapshot at `seq` (held under `lock` by the caller, with the seq it read);
        `snapshot` with a read time of its own is remembered for `retention_cutoff`."""
        self._counts[seq] += 1
        if snapshot is not None and snapshot.read_ts is not None:
            self._as_of.add(snapshot)

    def release(self, seq: int) -> None:
        """One snapshot at `seq` is closed."""
        with self.lock:
            self._counts[seq] -= 1
            if self._counts[seq] <= 0:
                del self._counts[seq]

    def seqs(self) -> tuple[int, ...]:
        """Seqs of live snapshots, ascending (what compaction must keep readable)."""
        with self.lock:
            return tuple(sorted(self._counts))

    def retention_cutoff(self, tick: int) -> int | None:
        """The expiry time before which a flush or compaction at `tick` may drop expired rows: the history
        retention window, and no later than the read time of an open as-of snapshot (it judges expiry at
        its own time, so it must still find what had not expired by then)."""
        r = self.history_retention
        cutoff = tick - r if r else None
        with self.lock:
            snaps = list(self._as_of)  # dropped outside the lock: a last reference runs close()
        held = [s.read_ts for s in snaps if not s.closed]
        if held:
            cutoff = min(held) if cutoff is None else min(cutoff, *held)
        return cutoff


__all__ = ["SnapshotList"]

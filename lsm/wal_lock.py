"""The WAL segment lock of the fencing protocol (see `lsm.wal` and docs/architecture.md, "Failure model").

A writer must hold a shared ``flock`` on its active segment from before its fence check until its
append returns; an opener publishes its epoch and then takes an exclusive ``flock`` on each segment
before reading it. Taking and dropping the lock around every write costs two system calls per put
(about 2 µs, a quarter of the write path), so the writer instead keeps the lock across writes and gives
it up only when it has to:

* when a write finds itself fenced (the opener that fenced it is waiting for the lock);
* when its WAL writer breaks (an I/O error: the store is failed, nothing more will be appended);
* when it rotates to a new segment (closing the old one drops its lock; the new one is locked by the
  next write);
* when it has been idle for a tick (`IdleReleaser`, a small thread per writable handle on a local
  directory), so an opener never waits more than about two ticks for a writer that has nothing to
  write. Once it has released the lock the thread sleeps until a write takes the lock again (`wake`):
  an idle handle costs no wake-ups (it cost 200 a second, each taking the GIL from the application).

Correctness is unchanged: every fence check still runs while the lock is held, and every append
completes before the lock is dropped, so an append the opener could miss is one whose check ran after
the publish, and that check fails.
"""

from __future__ import annotations

import threading
from typing import Protocol

TICK_S = 0.005


class WriterHost(Protocol):
    """The write path's side of the idle release (`lsm.db.Engine` implements it)."""

    def release_idle_lock(self, last_seq: int) -> int:
        """Drop the segment lock if the seq is still `last_seq` and the write lock is free (without
        waiting for it); return the current seq."""

    def segment_lock_held(self) -> bool:
        """Whether the writer holds its segment lock now."""


class IdleReleaser:
    """Drops the writer's segment lock once a tick passes without a commit, and sleeps while the writer
    does not hold it: the write that takes the lock calls `wake`."""

    def __init__(self, db: WriterHost, tick_s: float = TICK_S) -> None:
        self._db = db
        self._tick = tick_s
        self._stop = threading.Event()
        self._woken = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lsm-wal-lock", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """A write has just taken the segment lock (after setting the writer's `held`): tick again."""
        self._woken.set()

    def _loop(self) -> None:
        db = self._db
        last = -1
        while not self._stop.wait(self._tick):
            last = db.release_idle_lock(last)
            if db.segment_lock_held():
                continue
            # not held: sleep until a write takes it (or `stop`). Cleared before the second look, so a
            # write that takes the lock after that look has its `wake` seen, and one that took it before
            # is seen by the look itself: the lock is never held while this thread sleeps. `stop` sets
            # the stop flag before the wake-up, so a stop whose wake-up this clear erased is seen here.
            self._woken.clear()
            if not self._stop.is_set() and not db.segment_lock_held():
                self._woken.wait()

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        self._woken.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

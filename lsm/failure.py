"""The failed state of a handle: the first I/O error on the write path, which refuses every later write
until the store is reopened (docs/architecture.md, "Failure model"; RocksDB's background error).

One `Failure` per handle, shared by the parts that can enter it (the write path, the flusher, the
version set, the compactor) and asked by everything that writes. Entering it wakes whoever waits on the
flush hand-off (`cv`), so a writer blocked on a full memtable queue sees the error at once.
"""

from __future__ import annotations

import threading

from lsm.errors import ClosedError, DbFailedError


class Failure:
    """Why writes are refused (`error`), and the condition writers and the flusher wait on (`cv`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.error: BaseException | None = None  # the first failure: later ones are its consequences
        # the flush hand-off (frozen memtables, the flusher's stop flag, `error`): lsm.flusher waits on it
        self.cv = threading.Condition(threading.Lock())

    def fail(self, error: BaseException, published: bool | None = False) -> DbFailedError:
        """Enter the failed state for I/O error `error`; return the `DbFailedError` to raise (the first
        failure's error is what later writes raise). `published`: whether a manifest version the failed
        step wrote may be on disk (`DbFailedError.published`)."""
        err = DbFailedError(self.path, error, published)
        err.__cause__ = error
        self.keep(err)
        return err

    def keep(self, error: BaseException) -> None:
        """Make `error` the reason writes are refused, unless one already is (a flush error, a fence
        found after a commit)."""
        with self.cv:
            if self.error is None:
                self.error = error
            self.cv.notify_all()

    def raise_if_failed(self) -> None:
        """Raise the failed state's error, if any."""
        if self.error is not None:
            raise self.error


def closed_error(path: str) -> ClosedError:
    """The error of a call on a closed handle."""
    return ClosedError(f"{path}: DB is closed")


__all__ = ["Failure", "closed_error"]

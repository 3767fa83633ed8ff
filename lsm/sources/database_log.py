"""`DatabaseLog`: an upstream lsm-sim database as a source, read by its sequence numbers.

A replica follows a primary that another process is writing, the way a database replica follows a log
sequence number. There is one partition, 0, and a record's offset is the upstream seq of the commit that
wrote it (every row of one upstream commit shares it, so a commit is never split between two bindings).
`end(0)` is the upstream's stable seq + 1 (`lsm.history.stable_seq`): a commit counts once its WAL record
is complete and no seq below it is still reserved by a running bulk load, so a binding never claims a
seq that may still commit. A committed bulk load is one upstream commit: all of its rows carry its last
seq as their offset (its slices' own seqs lie below), so a follower takes the load whole.

Each record carries the upstream row: key, value (None for a delete), ``event_ts`` = the upstream
commit ts and ``ttl`` = expire_ts - commit ts, so ingesting with ``ttl_base="event"`` reproduces the
upstream's expiry times exactly. Rows in the engine's reserved key space (`lsm.syskeys`) are never
returned: the upstream's own remap rows stay the upstream's.

History: the upstream keeps every version until a flush or compaction drops or rewrites one, and records
the largest such seq (its history floor, see `lsm.history`). `read(0, start)` with start at or below the
floor raises `HistoryUnavailableError` instead of returning a history with holes: a replica must keep up
within what the upstream retains (`DbOptions.history_retention`, or snapshots, on the upstream).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from formats.manifest import Manifest
from lsm.errors import HistoryUnavailableError
from lsm.history import WalTail, history_floor, latest_manifest, open_view, read_version, stable_seq
from lsm.sources.protocol import SourceRecord, check_range, make_record
from lsm.syskeys import is_system


class DatabaseLog:
    """A `Source` over the committed history of the lsm-sim database at `path` (never opened for writing;
    its writer is not fenced). Not thread-safe: give each consumer its own instance."""

    def __init__(self, path: str | os.PathLike[str], at: int | None = None) -> None:
        """`at`: read only manifest version `at` of the upstream (its SSTs, no WAL), which a checkpoint
        holds: a bulk load's tasks read such a copy (`lsm.sources.database_hold`). None: the newest state."""
        self.path = os.fspath(path)
        self.name = self.path
        self.at = at
        self._pinned: Manifest | None = None
        self._tail: WalTail | None = WalTail(self.path)  # NotADatabaseError if there is no database at `path`

    def __repr__(self) -> str:
        return f"DatabaseLog({self.path!r})" if self.at is None else f"DatabaseLog({self.path!r}, at={self.at})"

    def __reduce__(self) -> tuple[Callable[[str, int | None], DatabaseLog], tuple[str, int | None]]:
        # a copy (a bulk task's own, a Spark task's unpickled one) opens its own tail, when first used:
        # the tail may hold an object-store client, which neither pickles nor copies, and a Spark
        # executor registers the job's stores only after it unpickled the task
        return _copy, (self.path, self.at)

    def _version(self) -> Manifest:
        """The manifest version `at` (read once: a version never changes)."""
        if self._pinned is None:
            self._pinned = read_version(self.path, self.at)
        return self._pinned

    def partitions(self) -> list[int]:
        """Always ``[0]``: a database's seqs are one sequence."""
        return [0]

    def end(self, partition: int) -> int:
        """Partition 0: the upstream's stable seq + 1 (every seq below it is final). Any other: 0."""
        check_range(partition, 0, None)
        if partition != 0:
            return 0
        if self.at is not None:  # what version `at` holds in SSTs
            m = self._version()
            return stable_seq(m.seq_reservations, m.last_seq) + 1
        if self._tail is None:
            self._tail = WalTail(self.path)
        return self._tail.stable_seq() + 1

    def floor(self) -> int:
        """The upstream's history floor: reads must start above it (0: the whole history is there)."""
        return history_floor(latest_manifest(self.path) if self.at is None else self._version())

    def read(self, partition: int, start: int, stop: int | None = None) -> Iterator[SourceRecord]:
        """Records of the upstream commits with start <= seq < stop (stop None: up to the stable seq), in
        seq order (rows of one commit by seq, then key; a bulk load's at its last seq). Raises
        `HistoryUnavailableError` if the upstream no longer holds that history exactly."""
        check_range(partition, start, stop)
        if partition != 0 or (stop is not None and stop <= start):
            return iter(())
        with open_view(self.path, start, stop, at=self.at) as view:
            lo = view.seqs[0]  # `start`, or the first seq of the bulk load holding it
            if view.floor > 0 and lo <= view.floor and start <= view.last_seq:
                raise HistoryUnavailableError(
                    f"{self.name}: cannot read history from seq {start}: the upstream dropped or rewrote "
                    f"versions up to seq {view.floor} in flushes or compactions (keep a longer "
                    "history_retention on the upstream so that a replica can lag behind it)"
                )
            rows = view.commits(start, stop)
        return iter(
            [
                make_record(0, commit, key, value, None if exp is None else exp - ts, ts, None, False)
                for commit, (key, _seq, ts, exp, value) in rows
                if not is_system(key)
            ]
        )


def _copy(path: str, at: int | None) -> DatabaseLog:
    """A `DatabaseLog` of `path` that touches the store only when used (its `__reduce__`)."""
    log = DatabaseLog.__new__(DatabaseLog)
    log.path = log.name = path
    log.at = at
    log._pinned = None
    log._tail = None
    return log


__all__ = ["DatabaseLog"]

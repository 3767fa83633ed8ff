"""lsm-sim: a miniature, time-aware LSM storage engine.

>>> import lsm, tempfile
>>> clock = lsm.ManualClock(1_000)
>>> with lsm.DB.open(tempfile.mkdtemp(), lsm.DbOptions(clock=clock)) as db:
...     _ = db.put(b"k", b"v", ttl=500)
...     _ = clock.advance(501)
...     db.get(b"k") is None
True
"""

from lsm.batch import WriteBatch
from lsm.clock import Clock, ManualClock, MonotonicClock, SystemClock
from lsm.db import DB, Entry, ReadOnlyError
from lsm.errors import (
    BulkLoadConflictError,
    ClockError,
    ClosedError,
    CompactionError,
    CorruptionError,
    DbFailedError,
    FencedError,
    FormatVersionError,
    HistoryUnavailableError,
    LsmError,
    NotADatabaseError,
    RetentionError,
    SourceError,
    SourceRegressedError,
    UnknownSourceError,
)
from lsm.options import NO_TTL, DbOptions, ReadOptions, WriteOptions
from lsm.remap import Binding, IngestStats, Remap
from lsm.seq_tracker import Round
from lsm.snapshot import Snapshot

__all__ = [
    "DB",
    "Binding",
    "IngestStats",
    "Remap",
    "UnknownSourceError",
    "NO_TTL",
    "Clock",
    "BulkLoadConflictError",
    "ClockError",
    "ClosedError",
    "CompactionError",
    "CorruptionError",
    "DbFailedError",
    "DbOptions",
    "Entry",
    "FencedError",
    "FormatVersionError",
    "HistoryUnavailableError",
    "LsmError",
    "ManualClock",
    "MonotonicClock",
    "NotADatabaseError",
    "ReadOnlyError",
    "ReadOptions",
    "RetentionError",
    "Round",
    "Snapshot",
    "SourceError",
    "SourceRegressedError",
    "SystemClock",
    "WriteBatch",
    "WriteOptions",
]

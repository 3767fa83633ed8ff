"""lsm-sim: a miniature, time-aware LSM storage engine.

>>> import lsm, tempfile
>>> clock = lsm.ManualClock(1_000)
>>> with lsm.DB.open(tempfile.mkdtemp(), lsm.DbOptions(clock=clock)) as db:
...     _ = db.put(b"k", b"v", ttl=500)
...     _ = clock.advance(501)
...     db.get(b"k") is None
True

`lsm.inspect` (read-only views of a database directory) is imported on first use of the attribute.
"""

from compaction.spark import SparkJobError
from formats.manifest import Checkpoint
from lsm.batch import WriteBatch
from lsm.clock import Clock, ManualClock, MonotonicClock, SystemClock
from lsm.db import DB, Entry, ReadOnlyError
from lsm.errors import (
    BulkLoadConflictError,
    CheckpointError,
    ClockError,
    ClockRepairError,
    CloneError,
    ClosedError,
    CompactionError,
    CorruptionError,
    DbFailedError,
    FencedError,
    FormatVersionError,
    HistoryUnavailableError,
    LsmError,
    NotADatabaseError,
    NotYetCompleteError,
    ObjectStoreConfigError,
    RetentionError,
    SourceError,
    SourceRegressedError,
    SparkMasterUnreachableError,
    SparkStoreError,
    SparkUnavailableError,
    UnknownCheckpointError,
    UnknownSourceError,
)
from lsm.options import NO_TTL, DbOptions, ReadOptions, WriteOptions
from lsm.remap import Binding, IngestStats, Pending, Remap
from lsm.seq_tracker import Round
from lsm.snapshot import Snapshot

__all__ = [
    "DB",
    "Binding",
    "IngestStats",
    "Pending",
    "Remap",
    "UnknownSourceError",
    "NO_TTL",
    "Clock",
    "BulkLoadConflictError",
    "Checkpoint",
    "CheckpointError",
    "CloneError",
    "UnknownCheckpointError",
    "ClockError",
    "ClockRepairError",
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
    "NotYetCompleteError",
    "ObjectStoreConfigError",
    "RetentionError",
    "Round",
    "Snapshot",
    "SourceError",
    "SourceRegressedError",
    "SparkJobError",
    "SparkMasterUnreachableError",
    "SparkStoreError",
    "SparkUnavailableError",
    "SystemClock",
    "WriteBatch",
    "WriteOptions",
]


def __getattr__(name: str) -> object:
    # `lsm.inspect` without importing it (and what it imports) with every `import lsm`
    if name == "inspect":
        import importlib

        return importlib.import_module("lsm.inspect")
    raise AttributeError(f"module 'lsm' has no attribute {name!r}")

"""Every error the engine raises on purpose is an `LsmError`.

The codec errors (`CorruptionError`, `FormatVersionError`), `CompactionError` (raised by
`compaction.scheduler.apply_plan`), `SparkUnavailableError` and `SparkStoreError` (raised by
`compaction.spark` before it starts a JVM or a job) and `ObjectStoreConfigError` (a malformed
object-store URL or endpoint, raised by `storage.objstore_config`) are defined in `formats.errors`, the lowest package, and
re-exported here so callers need one import.
"""

from __future__ import annotations

from formats.errors import (
    CompactionError,
    CorruptionError,
    FormatVersionError,
    LsmError,
    ObjectStoreConfigError,
    SparkMasterUnreachableError,
    SparkStoreError,
    SparkUnavailableError,
)

__all__ = [
    "BulkLoadConflictError",
    "CheckpointError",
    "UnknownCheckpointError",
    "CloneError",
    "LsmError",
    "CorruptionError",
    "FormatVersionError",
    "ClockError",
    "ClockRepairError",
    "FencedError",
    "ClosedError",
    "NotADatabaseError",
    "RetentionError",
    "NotYetCompleteError",
    "CompactionError",
    "SourceError",
    "SourceRegressedError",
    "HistoryUnavailableError",
    "UnknownSourceError",
    "DbFailedError",
    "ObjectStoreConfigError",
    "SparkMasterUnreachableError",
    "SparkStoreError",
    "SparkUnavailableError",
]


class ClockError(LsmError):
    """The clock returned a time below one the engine already used; nothing was written."""


class ClockRepairError(ClockError):
    """`DB.repair_clock` refused its repair time: before 1970, or before a row committed within the
    skew guard (without force=True). Nothing was changed."""


class FencedError(LsmError):
    """Another handle opened the database (or another compactor took over): this one may not write."""


class ClosedError(LsmError):
    """The DB (or snapshot) was closed."""


class NotADatabaseError(LsmError):
    """The path is a file, or a directory that holds something other than an lsm-sim database."""


class RetentionError(LsmError):
    """A read as of a time older than the history the database keeps."""


class NotYetCompleteError(LsmError):
    """A question as of a time the store (or a source's remap) is not complete for yet: a commit still
    to come may have a commit time at or before it, so an answer now could differ from one later."""


class SourceError(LsmError):
    """A source of ingested records (`lsm.sources`) cannot serve what was asked of it."""


class SourceRegressedError(SourceError):
    """A partition of a source went backwards: it now ends below the offset the store durably read.

    The file was truncated or replaced; ingest raises this before writing anything. The message names the
    source, the partition, the durable offset and the end found.
    """


class HistoryUnavailableError(SourceError):
    """The source can no longer serve exactly the records that follow the requested offset.

    For a `DatabaseLog` this means the upstream compacted away the history after the replica's frontier;
    reading on would silently diverge, so the read stops here instead.
    """


class UnknownSourceError(LsmError, KeyError):
    """`DB.remap(name)` of a name that no ingest ever wrote into this database."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown source"


class DbFailedError(LsmError):
    """An I/O error on the write path put the DB into the failed state (RocksDB's "background error").

    `op` ("write", "fdatasync", "link", ...) and `file` name the call that failed; the OSError is chained
    as ``__cause__``. From then on every write raises this error until the database is reopened; reads
    keep working and ``close()`` releases everything. `published` is False when the failed step is known
    not to have reached disk, None when it may have (a manifest link or directory fsync that failed):
    the next open decides from what is on disk.
    """

    def __init__(self, db_path: str, error: BaseException, published: bool | None = False) -> None:
        self.op = getattr(error, "op", None) or "I/O"
        self.file = getattr(error, "filename", None)
        self.published = published
        code = getattr(error, "errno", None)
        detail = f"[Errno {code}] {getattr(error, 'strerror', None) or error}" if code else str(error)
        where = f"{self.op} of {self.file}" if self.file else self.op
        super().__init__(
            f"{db_path}: the database is in the failed state: {where} failed ({detail}); writes are "
            "refused until it is reopened"
        )


class BulkLoadConflictError(LsmError):
    """A bulk load (`DB.ingest(engine="local"|"spark")`) could not take its place in the seq order: a
    compaction merged files from before and after its reserved seqs while it ran. Nothing was committed;
    running the load again resumes from the unchanged frontier."""


class CheckpointError(LsmError):
    """A checkpoint asked for in a way that cannot be served: ``DB.open(checkpoint=...)`` without
    ``read_only=True``, with ``follow=True``, a lifetime that is not a positive number of ms, a name that
    is not a string (lsm.checkpoints)."""


class UnknownCheckpointError(CheckpointError, KeyError):
    """A checkpoint id the store does not hold: never taken, deleted, or expired by the store's clock."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown checkpoint"


class CloneError(LsmError):
    """`DB.clone` refused: the destination already holds a database (or is the source), or the source
    cannot be cloned there (lsm.clone). Nothing was written to the destination."""

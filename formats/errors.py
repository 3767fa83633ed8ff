"""Exceptions raised by the codecs.

They live in the lowest package so that `formats` imports nothing of ours; `lsm.errors` re-exports them
next to the engine's own errors, and every one is an `LsmError`.
"""

from __future__ import annotations


class LsmError(Exception):
    """Base class of every error lsm-sim raises on purpose."""


class CorruptionError(LsmError):
    """Stored bytes do not match what was written: a checksum, magic number or structure is wrong.

    `path` names the file (or "<bytes>" for in-memory decoding) and `offset` the byte where the damaged
    unit starts, so an operator can find it with a hex dump.
    """

    def __init__(self, path: str, offset: int, detail: str) -> None:
        self.path = str(path)
        self.offset = offset
        self.detail = detail
        super().__init__(f"{self.path}: corruption at offset {offset}: {detail}")


class FormatVersionError(LsmError):
    """A file was written in a format version (or with a feature) this code does not know."""

    def __init__(self, path: str, detail: str) -> None:
        self.path = str(path)
        self.detail = detail
        super().__init__(f"{self.path}: {detail}")


class CompactionError(LsmError):
    """A compaction job failed; the database is unchanged."""


class SparkUnavailableError(LsmError):
    """Spark cannot start here: pyspark is not installed, or no Java 17+ for its driver JVM was found.

    Raised before any JVM is started (`compaction.spark_runtime`); the message says what to install."""


class SparkMasterUnreachableError(SparkUnavailableError):
    """The Spark master a session was asked for cannot be reached: its host name does not resolve, nothing
    listens on its port (connection refused), or it does not answer in time; or its URL is malformed.

    Raised before any JVM is started (`compaction.spark_runtime.check_master`), within seconds, where Spark
    itself would retry its registration for a minute; the message names the master URL and the cause."""


class SparkStoreError(LsmError):
    """Spark cannot run a job for this database: its store lives in the driver's process only (a
    ``memory://`` URL), and Spark's executors are other processes. Raised before any Spark work starts;
    nothing changed."""


class ObjectStoreConfigError(LsmError):
    """An object-store URL or the store's configuration is malformed: a URL without a bucket or a key, a
    scheme lsm-sim does not support, a local path that reads like a URL (``s3:/bucket``), an endpoint
    that is not ``http(s)://host[:port]``, a plain-HTTP endpoint without ``allow_http``. Raised before any
    request is sent and before anything is created; the message is one line and names no credential."""

"""Every error the engine raises on purpose is an `LsmError`.

The codec errors (`CorruptionError`, `FormatVersionError`) are defined in `formats.errors`, the lowest
package, and re-exported here so callers need one import.
"""

from __future__ import annotations

from formats.errors import CorruptionError, FormatVersionError, LsmError

__all__ = [
    "LsmError",
    "CorruptionError",
    "FormatVersionError",
    "ClockError",
    "FencedError",
    "ClosedError",
    "NotADatabaseError",
    "RetentionError",
    "CompactionError",
]


class ClockError(LsmError):
    """The clock returned a time below one the engine already used; nothing was written."""


class FencedError(LsmError):
    """Another handle opened the database (or another compactor took over): this one may not write."""


class ClosedError(LsmError):
    """The DB (or snapshot) was closed."""


class NotADatabaseError(LsmError):
    """The path is a file, or a directory that holds something other than an lsm-sim database."""


class RetentionError(LsmError):
    """A read as of a time older than the history the database keeps."""


class CompactionError(LsmError):
    """A compaction job failed; the database is unchanged."""

"""The engine's reserved key space: rows the engine writes for itself, never shown to users.

Keys that start with `SYSTEM_PREFIX` belong to the engine (for example the remap of an ingested source,
see docs/format.md). They sort after every user key that does not start with four 0xFF bytes, so a
user scan clamps its upper bound at `SYSTEM_PREFIX` instead of filtering row by row. User writes of such
keys are refused; reads, scans, `changes()`, space accounting and user compaction filters never see them.
"""

from __future__ import annotations

SYSTEM_PREFIX = b"\xff\xff\xff\xfflsm\x00"


def is_system(key: bytes) -> bool:
    """True if `key` lies in the engine's reserved key space."""
    return key[:8] == SYSTEM_PREFIX


__all__ = ["SYSTEM_PREFIX", "is_system"]

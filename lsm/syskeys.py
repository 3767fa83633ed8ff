"""The engine's reserved key space: rows the engine writes for itself, never shown to users.

Keys that start with `SYSTEM_PREFIX` belong to the engine (for example the remap of an ingested source,
see docs/format.md). They form one contiguous range [SYSTEM_PREFIX, SYSTEM_END) that sorts after every
user key not starting with four 0xFF bytes, so a user scan skips the range instead of filtering row by
row. User writes of such
keys are refused; reads, scans, `changes()`, space accounting and user compaction filters never see them.
"""

from __future__ import annotations

from formats.row import check_key

SYSTEM_PREFIX = b"\xff\xff\xff\xfflsm\x00"


def is_system(key: bytes) -> bool:
    """True if `key` lies in the engine's reserved key space."""
    return key[:8] == SYSTEM_PREFIX


SYSTEM_END = SYSTEM_PREFIX[:-1] + b"\x01"  # the first key after the reserved space


def check_user_key(key: object) -> None:
    """check_key, and a ValueError for a key in the reserved space (users may not write there)."""
    check_key(key)
    if is_system(key):  # type: ignore[arg-type]
        raise ValueError(f"key {key!r} lies in the engine's reserved key space (it starts with {SYSTEM_PREFIX!r})")


__all__ = ["SYSTEM_END", "SYSTEM_PREFIX", "check_user_key", "is_system"]

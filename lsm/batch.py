"""WriteBatch: several puts and deletes committed atomically under one sequence number."""

from __future__ import annotations

from formats.row import check_value
from lsm.options import check_ttl
from lsm.syskeys import check_user_key


class WriteBatch:
    """Collects operations; `DB.write` commits them all or none, under one seq and one ts.

    Later operations on the same key win inside a batch (the last one is what the batch leaves).

    >>> b = WriteBatch().put(b"a", b"1").delete(b"b"); len(b)
    2
    """

    __slots__ = ("ops",)

    def __init__(self) -> None:
        self.ops: list[tuple[bytes, object, bytes | None]] = []

    def put(self, key: bytes, value: bytes, ttl: int | None = None) -> WriteBatch:
        """Add a put of `key` = `value` (with its own `ttl` ms, or the default TTL when None); returns the batch."""
        check_user_key(key)
        check_value(value)
        check_ttl(ttl)
        self.ops.append((key, ttl, value))
        return self

    def delete(self, key: bytes) -> WriteBatch:
        """Add a delete of `key` (a tombstone); returns the batch."""
        check_user_key(key)
        self.ops.append((key, None, None))
        return self

    def __len__(self) -> int:
        return len(self.ops)

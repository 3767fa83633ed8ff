"""The compaction filter API and the built-in TTL filter.

A `CompactionFilterFactory` is configured once (``DbOptions.compaction_filters``); every compaction job
calls ``factory.create(ctx)`` for a fresh `CompactionFilter`, so a filter may keep state and need not be
thread-safe. ``filter(entry)`` sees the newest version of each key (never a tombstone, never a version a
live snapshot can still see) and returns a `Decision`:

* ``Decision.KEEP`` — leave the row as it is;
* ``Decision.REMOVE`` — replace it by a tombstone that keeps the row's ts and seq and clears expire_ts;
* ``Decision.change_value(v)`` — keep the row with value `v` (later filters see the new value);
* ``Decision.DROP`` — remove the row without a tombstone. An older version of the key in a sorted run
  that is not part of this compaction may then resurface; use REMOVE unless that is what you want.

The built-in TTL filter runs first, then the configured factories in order. A filter that raises aborts
the job: nothing is committed and the inputs stay as they were. Filters shipped to Spark executors must
be picklable (define them at module level).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any, NamedTuple


class Entry(NamedTuple):
    """A row with its metadata: what a filter sees, and what `DB.get_entry` / `scan_entries` return
    (as `lsm.Entry`). Rows read from v0 SSTs report ts None and their file's max_seq as seq."""

    key: bytes
    value: bytes
    seq: int
    ts: int | None
    expire_ts: int | None


class DecisionKind(enum.Enum):
    """The four outcomes of a filter (see the module docstring); a `Decision` carries one."""

    KEEP = "keep"
    REMOVE = "remove"
    CHANGE_VALUE = "change_value"
    DROP = "drop"


@dataclasses.dataclass(frozen=True)
class _Decision:
    kind: DecisionKind
    value: bytes | None = None


class Decision:
    """What a filter decided for one entry (``Decision.KEEP``, ``REMOVE``, ``DROP``, ``change_value``)."""

    KEEP = _Decision(DecisionKind.KEEP)
    REMOVE = _Decision(DecisionKind.REMOVE)
    DROP = _Decision(DecisionKind.DROP)

    @staticmethod
    def change_value(value: bytes) -> _Decision:
        """Keep the row with `value` instead (bytes; later filters see the new value)."""
        if type(value) is not bytes:
            raise TypeError(f"change_value needs bytes, not {type(value).__name__}")
        return _Decision(DecisionKind.CHANGE_VALUE, value)


class Reason(enum.StrEnum):
    """Why a compaction job runs, as its filters see it in `FilterContext.reason`."""

    SIZE_TIERED = "size_tiered"
    PERIODIC = "periodic"
    MANUAL = "manual"
    LEVELED = "leveled"  # a leveled policy's job (compaction/leveled.py)
    FIFO = "fifo"  # whole SSTs dropped by a manifest edit (compaction/fifo.py); no merge, no filter runs


@dataclasses.dataclass(frozen=True)
class FilterContext:
    """What a factory knows about the job it creates a filter for."""

    tick: int  # the compaction clock, ms
    is_last_run: bool  # the output is the oldest sorted run
    reason: Reason
    inputs: Sequence[Any]  # SsTableInfo of every input SST


class CompactionFilter:
    """Subclass and override `filter`. `name` labels the filter's counts in CompactionStats."""

    @property
    def name(self) -> str:
        """The name the job's per-filter counts are reported under (the class name by default)."""
        return type(self).__name__

    def filter(self, entry: Entry) -> _Decision:
        """The decision for `entry`, the newest version of its key; the default keeps every row."""
        return Decision.KEEP


class CompactionFilterFactory:
    """Subclass and override `create`."""

    def create(self, ctx: FilterContext) -> CompactionFilter:
        """A new filter for one job, given what the job is (`ctx`); must be overridden."""
        raise NotImplementedError("CompactionFilterFactory.create must be overridden")


class TtlFilter(CompactionFilter):
    """The SlateDB TTL RFC's rule: an entry with tick > expire_ts becomes a tombstone (ts kept).

    The merge inlines this filter and, unlike the RFC (which clears expire_ts), keeps expire_ts on the
    tombstone it makes, so the purge lag of the expired row is counted from its expiry when the tombstone
    is finally dropped."""

    name = "ttl"

    def __init__(self, tick: int) -> None:
        self.tick = tick

    def filter(self, entry: Entry) -> _Decision:
        """REMOVE a row whose expire_ts is before the job's tick (it becomes a tombstone), else KEEP."""
        e = entry.expire_ts
        if e is not None and self.tick > e:
            return Decision.REMOVE
        return Decision.KEEP

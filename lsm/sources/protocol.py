"""The source protocol: what `DB.ingest` reads from (a Kafka-like set of partitions with offsets).

A source is a set of partitions, each a sequence of records with offsets that strictly increase along
the partition (several records may share one offset: they happen at the same moment and always land in
the same binding of the remap). Reading is by offset range and only ever returns COMPLETE records: what
a producer is still appending is not yet a record. See docs/ingest.md for the protocol and an adapter
for a Kafka consumer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record of a source.

    `value` None is a delete. `ttl` (ms) counts from the commit ts, or from `event_ts` (ms) when the
    ingest is asked to. Records with the same `tx` form a transaction closed by the one with `tx_end`:
    True closes the records of `tx` in this partition, a dict {partition: records} closes a transaction
    spanning partitions (its records per partition, this one included). A transaction becomes visible
    whole, in one binding (docs/ingest.md, "Transactions").
    """

    partition: int
    offset: int
    key: bytes
    value: bytes | None
    ttl: int | None = None
    event_ts: int | None = None
    tx: int | str | None = None
    tx_end: bool | dict[int, int] = False


_SETTERS = tuple(SourceRecord.__dict__[f.name].__set__ for f in dataclasses.fields(SourceRecord))
_new = object.__new__


def make_record(
    partition: int,
    offset: int,
    key: bytes,
    value: bytes | None,
    ttl: int | None,
    event_ts: int | None,
    tx: int | str | None,
    tx_end: bool | dict[int, int],
) -> SourceRecord:
    """`SourceRecord(...)` for the readers' hot loops: the same object, built through the slot descriptors
    (a frozen dataclass's __init__ goes through object.__setattr__ per field, about twice the cost)."""
    r = _new(SourceRecord)
    sp, so, sk, sv, st, se, sx, sd = _SETTERS
    sp(r, partition)
    so(r, offset)
    sk(r, key)
    sv(r, value)
    st(r, ttl)
    se(r, event_ts)
    sx(r, tx)
    sd(r, tx_end)
    return r


@runtime_checkable
class Source(Protocol):
    """What `DB.ingest` needs of a source. Implementations: `PartitionedLog`, `DatabaseLog`."""

    name: str
    """A human-readable name, for error messages (a path, a topic)."""

    def partitions(self) -> list[int]:
        """The partition ids that exist now (0..2**64-1), ascending. New ones may appear later; none may
        vanish."""
        ...

    def end(self, partition: int) -> int:
        """The next offset after the last complete record of `partition` (0 if it has none or is unknown)."""
        ...

    def read(self, partition: int, start: int, stop: int | None = None) -> Iterator[SourceRecord]:
        """Complete records with start <= offset < stop (stop None: every complete one), in offset order.

        A torn last record is not yet a record; a corrupt record raises `CorruptionError(file, offset)`;
        a source that can no longer serve exactly the records after `start` raises
        `HistoryUnavailableError` rather than return a different history.
        """
        ...


@runtime_checkable
class BatchSource(Source, Protocol):
    """Optional fast paths of a `Source`, used when a source has all three (`PartitionedLog` does); any
    other source is read through `Source.read` and planned by offsets. Same records, checks and errors.
    """

    def read_runs(
        self, partition: int, start: int, stop: int | None = None
    ) -> Iterator[tuple[list[tuple], bool]]:
        """`read` for streaming ingest: runs ``(tuples, special)`` of the records as plain tuples of the
        `SourceRecord` fields in order; `special` False promises consecutive offsets, one record each, no
        transaction and no progress marker (then every boundary in the run is a cut). A progress marker
        may appear as a tuple with key None: it takes an offset and is no record."""
        ...

    def plan_end(self, partition: int) -> int:
        """`end` for planning a bulk load: may skip checks the slices' readers make anyway."""
        ...

    def slices(self, partition: int, start: int, stop: int, max_records: int) -> list[Any]:
        """Picklable slices covering offsets [start, stop) of `partition`, each at most `max_records`
        offsets, in order: objects with ``name``, ``partition``, ``start``, ``stop``, ``records()`` and
        ``runs()`` (as `lsm.sources.slices.SourceSlice`) that a bulk-load task reads on its own."""
        ...


@runtime_checkable
class ProgressSource(Source, Protocol):
    """A `Source` that reports its own progress in time: what ``db.ingest(..., times="source")`` needs
    (`PartitionedLog`: its `LogWriter.advance` markers). Records carry `event_ts`; a progress marker of a
    partition promises that no record after it in the partition has an `event_ts` below its time. The
    source's progress at a set of positions is the least, over its partitions, of each partition's
    greatest marker time below its position: every record still to come has event_ts >= it."""

    def progress(self, partition: int, start: int = 0, stop: int | None = None) -> list[tuple[int, int]]:
        """The progress markers of `partition` at offsets [start, stop) (stop None: up to `end`), as
        ``(offset, ts)`` in offset order. A marker takes an offset no record has; none of them changes once
        it lies below `end`."""
        ...


# A remap binding stores partition ids as msgpack unsigned integers (lsm/remap_store.py), which hold at
# most 64 bits: a larger id could be read but never recorded, so every source refuses it up front.
MAX_PARTITION = 2**64 - 1


def check_range(partition: object, start: object, stop: object) -> None:
    """Raise TypeError/ValueError unless the arguments of `Source.read` are well formed (partition ids
    0..`MAX_PARTITION`)."""
    for name, v in (("partition", partition), ("start", start)):
        if type(v) is not int:
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    if partition > MAX_PARTITION:  # type: ignore[operator]
        raise ValueError(f"partition must be at most 2**64-1 (what a remap binding stores), got {partition}")
    if stop is not None:
        if type(stop) is not int:
            raise TypeError(f"stop must be an int or None, not {type(stop).__name__}")
        if stop < 0:
            raise ValueError(f"stop must be >= 0, got {stop}")


__all__ = [
    "MAX_PARTITION",
    "BatchSource",
    "ProgressSource",
    "Source",
    "SourceRecord",
    "check_range",
    "make_record",
]

"""The remap of an ingested source: which source offsets each state of the store reflects.

Reclocking (Materialize's design documents "Reclocking", 20210714_reclocking.md, and "Reclocking
implementation", 20220411_reclocking_implementation.md, in github.com/MaterializeInc/materialize under
doc/developer/design/) translates a stream stamped with one gauge of progress (a partitioned log's
``(partition, offset)``) into another (the store's commit time). The translation is explicit sidecar data,
the *remap*: a list of bindings ``(ts, seq, {partition: next_offset})``, one per ingest batch, committed in
the same atomic write as the rows of that batch. The state of the store at a binding's ``seq`` holds
exactly the source records below the binding's frontier (offsets are "next offset to read", an upper
bound, as in the references).

Monotonicity: along the bindings ``ts`` never decreases, ``seq`` strictly increases, and each
partition's offset never decreases; a partition, once in a frontier, stays in every later one (a
partition missing from a frontier reads as offset 0: nothing of it was read yet).

Compaction (the design document's ``since``): `Remap.compact(since)` advances every binding time below
``since`` to ``since``; bindings that then share a time merge, the newest winning. Questions at or after
``since`` answer as before, with times advanced the same way: compacting then asking equals asking then
compacting. Questions before ``since`` raise `RetentionError`, never a silently different answer.

Completeness (the design's ``upper``): a remap read from the store carries `upper`, the time up to which
it is complete: no binding still to come can have a time below it. Questions as of a time at or after
``upper`` raise `NotYetCompleteError`, so every answer given is final (until compacted away).

One row per partition per time: bindings with the same time merge, the newest winning (two ingest
batches committed in the same millisecond are one state change at that time).

Worked example (docs/remap.md's)::

    ingest offsets 0-2 at 1000, 3-4 at 2000, 5-6 at 3000
    bindings   (1000, {0: 3}), (2000, {0: 5}), (3000, {0: 7})
    as_of(3000) -> {0: 7}    as_of(2999) -> {0: 5}    as_of(999) -> None
    binding_for(0, 4) -> the 2000 binding (offset 4 became visible there)
    compact(2500): (2500, {0: 5}), (3000, {0: 7}); as_of(2600) -> (2500, {0: 5}); as_of(2000) -> RetentionError
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable, Mapping

from lsm.errors import NotYetCompleteError, RetentionError
from lsm.timeline import parse_time


@dataclasses.dataclass(frozen=True, slots=True)
class Binding:
    """One binding of a remap: at commit time `ts` (ms), seq `seq`, the source was read up to `frontier`.

    `frontier` maps partition -> next offset to read; the store at `seq` holds exactly the records of
    every partition below its offset. Treat it as read-only.
    """

    ts: int
    seq: int
    frontier: dict[int, int]

    def offset(self, partition: int) -> int:
        """The next offset to read of `partition` in this binding (0 when it was not read yet)."""
        return self.frontier.get(partition, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class IngestStats:
    """What one `DB.ingest` call did: records applied, batches committed, and the frontier it left."""

    records: int
    batches: int
    frontier: dict[int, int]


@dataclasses.dataclass(frozen=True, slots=True)
class Pending:
    """What a source's TEMP collection holds: records of transactions not yet visible, and how many
    transactions they form (lsm.ingest_tx)."""

    records: int = 0
    transactions: int = 0


def check_monotone(prev: Binding | None, new: Binding) -> None:
    """Raise ValueError unless `new` may follow `prev` (ts, seq and every partition's offset monotone)."""
    if prev is None:
        return
    if new.ts < prev.ts or new.seq <= prev.seq:
        raise ValueError(f"binding {new} does not follow {prev}: ts and seq must increase")
    for p, off in prev.frontier.items():
        if new.frontier.get(p, -1) < off:
            raise ValueError(f"binding {new} does not follow {prev}: partition {p} went back")


def merge_same_time(bindings: Iterable[Binding]) -> list[Binding]:
    """`bindings` (monotone, oldest first) with the bindings of one time merged into the newest of them:
    one binding, and so one row per partition, per time."""
    out: list[Binding] = []
    prev = None
    for b in bindings:
        check_monotone(prev, b)
        prev = b
        if out and out[-1].ts == b.ts:
            out[-1] = b  # the newest frontier of that time wins
        else:
            out.append(b)
    return out


class Remap:
    """The remap of one source: its bindings, oldest first, `since` (None: never compacted) and `upper`
    (None: complete for every time, as for a remap built from plain data).

    Built by `DB.remap(name)` from the store; also usable on plain data (tests, tools). Bindings that
    share a time are merged (the newest wins). Queries cost O(log n) (as_of, binding_for) or O(n)
    (bindings, rows) in the number of bindings. `pending`: the records and transactions waiting in the
    source's TEMP collection (as `DB.remap` read them).
    """

    pending: Pending = Pending()

    def __init__(
        self, name: str, bindings: Iterable[Binding], since: int | None = None, upper: int | None = None
    ) -> None:
        self.name = name
        self._bindings = merge_same_time(bindings)
        if since is not None and self._bindings and self._bindings[0].ts < since:
            raise ValueError(f"remap {name!r}: a binding at {self._bindings[0].ts} lies before since={since}")
        self.since = since
        self.upper = upper
        self._ts = [b.ts for b in self._bindings]

    # -- the latest state --------------------------------------------------------------------------
    @property
    def frontier(self) -> dict[int, int]:
        """{partition: next_offset} of the latest binding ({} when there is none)."""
        return dict(self._bindings[-1].frontier) if self._bindings else {}

    @property
    def latest(self) -> Binding | None:
        """The newest binding, or None."""
        return self._bindings[-1] if self._bindings else None

    def bindings(self) -> list[Binding]:
        """Every binding, oldest first."""
        return list(self._bindings)

    def __len__(self) -> int:
        return len(self._bindings)

    # -- questions ---------------------------------------------------------------------------------
    def _check_time(self, ts_ms: int | str) -> int:
        ts_ms = parse_time(ts_ms)
        if self.since is not None and ts_ms < self.since:
            raise RetentionError(
                f"remap {self.name!r}: cannot answer as of {ts_ms} ms: bindings before {self.since} ms "
                "were consolidated (history retention)"
            )
        if self.upper is not None and ts_ms >= self.upper:
            raise NotYetCompleteError(
                f"remap {self.name!r}: cannot answer as of {ts_ms} ms yet: the remap is complete for times "
                f"before {self.upper} ms only (a binding still to come may have a time at or before {ts_ms})"
            )
        return ts_ms

    def as_of(self, ts_ms: int | str) -> Binding | None:
        """The newest binding with ts <= ts_ms (ms or RFC 3339); None before the first. RetentionError
        before `since`, NotYetCompleteError at or after `upper`."""
        ts_ms = self._check_time(ts_ms)
        i = bisect.bisect_right(self._ts, ts_ms)
        return self._bindings[i - 1] if i else None

    def binding_for(self, partition: int, offset: int) -> Binding | None:
        """The binding in which record (partition, offset) became visible, or None if not yet read.

        After compaction a record that became visible before `since` answers with the consolidated
        binding at `since` (its time advanced, as every time before `since`)."""
        bs = self._bindings
        lo, hi = 0, len(bs)
        while lo < hi:  # offsets of one partition never decrease along the bindings
            mid = (lo + hi) // 2
            if bs[mid].frontier.get(partition, 0) > offset:
                hi = mid
            else:
                lo = mid + 1
        return bs[lo] if lo < len(bs) else None

    def rows(self, as_of: int | str | None = None) -> list[tuple[int, int, int]]:
        """The progress relation: (ts, partition, next_offset), one row per partition per binding, oldest
        binding first and partitions ascending; with `as_of`, only bindings with ts <= as_of."""
        bs = self._bindings
        if as_of is not None:
            as_of = self._check_time(as_of)
            bs = bs[: bisect.bisect_right(self._ts, as_of)]
        return [(b.ts, p, off) for b in bs for p, off in sorted(b.frontier.items())]

    # -- compaction --------------------------------------------------------------------------------
    def compact(self, since: int) -> Remap:
        """A new Remap with every binding time below `since` advanced to it and merged (newest wins).

        `since` never goes back: compacting at an older time than the current `since` keeps it."""
        if type(since) is not int:
            raise TypeError(f"since is int milliseconds, not {type(since).__name__}")
        if self.since is not None and since <= self.since:
            return Remap(self.name, self._bindings, self.since, self.upper)
        i = bisect.bisect_right(self._ts, since)  # bindings [0, i) have ts <= since and merge
        out = self._bindings[i:]
        if i:
            b = self._bindings[i - 1]
            out = [Binding(since, b.seq, b.frontier), *out]
        return Remap(self.name, out, since, self.upper)

    def __repr__(self) -> str:
        return (
            f"Remap({self.name!r}, bindings={len(self._bindings)}, since={self.since}, upper={self.upper}, "
            f"frontier={self.frontier})"
        )


def frontier_covers(frontier: Mapping[int, int], other: Mapping[int, int]) -> bool:
    """True if `frontier` is at or past `other` in every partition (the antichain order)."""
    return all(frontier.get(p, 0) >= off for p, off in other.items())


__all__ = ["Binding", "IngestStats", "Pending", "Remap", "check_monotone", "frontier_covers", "merge_same_time"]

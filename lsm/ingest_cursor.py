"""Reading a source for one `lsm.ingest.ingest` call: a cursor per partition, and the steps of source times.

`Cursor` takes whole offsets of one partition into a batch (a simple run by slices, other records one at
a time; progress markers are passed over). With ``times="source"`` (`source_steps`) a call commits in
steps, one per progress-marker time every partition has reached: `Marks` tells a cursor which records
are late for the current step, and `step_bounds` gives a step's bound and commit time.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING

from lsm.clock import I64_MIN
from lsm.errors import ClockError, SourceError
from lsm.remap import Binding
from lsm.sources.protocol import BatchSource, ProgressSource

if TYPE_CHECKING:
    from lsm.sources import Source, SourceRecord


def _runs(source: Source, partition: int, start: int, stop: int) -> Iterator[tuple[list[tuple], bool]]:
    """The records [start, stop) of `partition` as runs ``(tuples, simple)``; a tuple holds the fields of
    `SourceRecord` in order. `simple` says the run has consecutive offsets, one record each, and no
    transaction: every boundary in it is a cut. A `BatchSource` (a `PartitionedLog`) decodes whole runs;
    any other source's records are converted. The source's read is called here, not lazily, so what it
    checks at the call (arguments, an index pass) raises before anything of this call is written."""
    if isinstance(source, BatchSource):
        return ((run, not has_tx) for run, has_tx in source.read_runs(partition, start, stop))
    return _converted(source.read(partition, start, stop))


def _converted(it: Iterator[SourceRecord]) -> Iterator[tuple[list[tuple], bool]]:
    while True:
        run = [(r.partition, r.offset, r.key, r.value, r.ttl, r.event_ts, r.tx, r.tx_end) for r in islice(it, 512)]
        if not run:
            return
        yield run, False


class Cursor:
    """One partition being read in this call: records [start, stop), read a run at a time."""

    __slots__ = ("partition", "pos", "stop", "_runs", "_run", "_i", "_simple", "has_tx", "held", "marks")

    def __init__(self, source: Source, partition: int, start: int, stop: int) -> None:
        self.partition = partition
        self.pos = start  # the partition's frontier so far (next offset to read)
        self.stop = stop
        self._runs: Iterator[tuple[list[tuple], bool]] | None = (
            _runs(source, partition, start, stop) if stop > start else None
        )
        self._run: list[tuple] = []  # the current run; self._run[self._i:] is not taken yet
        self._i = 0
        self._simple = False
        self.has_tx = False  # a record with a tx was taken (the batch then sets them apart)
        self.held = False  # times="source": a record at or above this step's time waits for the next
        self.marks: Marks | None = None  # times="source": the partition's progress markers

    @property
    def done(self) -> bool:
        """Every record of [start, stop) was taken (the partition has nothing more for this call)."""
        return self._runs is None and self._i >= len(self._run)

    def take(self, budget: int, out: list[tuple], below: int | None = None) -> None:
        """Append whole offsets to `out` until `budget` records are reached at a cut or the partition
        ends; advance `pos` to the last cut. The hot loop of ingest: a simple run is taken by slices,
        other records one at a time. A progress marker (key None) is passed over.

        `below` (times="source"): only records with event_ts < below; the first one at or above it is
        `held` with every record after it (at a cut; inside an offset the partition is `blocked` for the
        call instead, from its last cut)."""
        run, i, simple = self._run, self._i, self._simple
        cut = len(out)  # out[:cut] is committed to this batch
        limit = cut + budget
        pos = self.pos
        last = -1
        append = out.append
        while True:
            if i >= len(run):
                nxt = next(self._runs, None) if self._runs is not None else None
                if nxt is None:
                    self._runs = None
                    self._run, self._i = [], 0
                    self.pos = self.stop
                    return
                run, simple = nxt
                i = 0
                if not run:
                    continue
            if simple and below is None:
                # every boundary is a cut, starting with the one before run[i]; offsets are consecutive
                cut = len(out)
                if last >= 0:
                    pos = last + 1
                if cut >= limit:
                    break
                j = min(len(run), i + limit - cut)
                out.extend(run[i:j] if i or j < len(run) else run)
                last = run[j - 1][1]
                i = j
                continue
            rec = run[i]
            off = rec[1]
            at_cut = False
            if off != last:
                if off < last or off < pos:
                    raise ValueError(
                        f"partition {self.partition}: offset {off} after {max(last, pos)}: offsets must increase"
                    )
                at_cut = True  # a cut: between offsets
                cut = len(out)
                if last >= 0:
                    pos = last + 1
                if cut >= limit:
                    break
                last = off
            if rec[2] is None:  # a progress marker: it takes an offset, it is no record
                i += 1
                continue
            if below is not None and self.marks.late(rec, below):  # type: ignore[union-attr]
                if at_cut:  # it and every record after it wait for a later step
                    self.held = True
                    break
                del out[cut:]  # inside an offset: the partition waits from its last cut
                self._runs = None
                self._run, self._i = [], 0
                self.pos = pos
                return
            append(rec)
            if rec[6] is not None:
                self.has_tx = True
            i += 1
        self._run, self._i, self._simple = run, i, simple
        self.pos = pos


class Marks:
    """times="source": the progress markers of one partition at and after its frontier, and its progress
    (the greatest marker time) before the record being looked at."""

    __slots__ = ("name", "partition", "marks", "i", "progress")

    def __init__(self, name: str, partition: int, marks: list[tuple[int, int]], start: int) -> None:
        self.name, self.partition = name, partition
        self.marks = marks  # every marker of the partition below its end, in offset order
        self.i = 0
        self.progress: int | None = None
        self._pass(start)

    def _pass(self, offset: int) -> None:
        marks, i = self.marks, self.i
        while i < len(marks) and marks[i][0] < offset:
            ts = marks[i][1]
            if self.progress is None or ts > self.progress:
                self.progress = ts
            i += 1
        self.i = i

    def late(self, rec: tuple, below: int) -> bool:
        """Must record `rec` wait for a step after `below`? Raises for a record without event_ts and for
        one that breaks its partition's promise (an event_ts below a marker before it)."""
        ets = rec[5]
        if type(ets) is not int:
            raise ValueError(
                f"{self.name}: partition {rec[0]} offset {rec[1]}: times='source' needs an int event_ts on "
                f"every record, got {ets!r}"
            )
        self._pass(rec[1])
        if self.progress is not None and ets < self.progress:
            raise SourceError(
                f"{self.name}: partition {rec[0]} offset {rec[1]}: event_ts {ets} lies below the progress "
                f"{self.progress} an earlier marker of the partition promised (no later record below it)"
            )
        return ets >= below


def source_steps(
    source: Source, name: str, cursors: list[Cursor], frontier: dict[int, int], head: Binding | None
) -> list[int]:
    """times="source": the times at which this call may commit, ascending: each progress-marker time
    that every partition has reached by its end (the source's progress there is the least over the
    partitions of each one's greatest marker), and not below the newest binding's time + 1. A step at
    time T commits the records with event_ts < T at ts T - 1, the last complete millisecond. Gives each
    cursor its partition's markers."""
    if not isinstance(source, ProgressSource):
        raise ValueError(
            f"{source.name}: times='source' needs a source that reports its progress (a progress() method, "
            f"lsm.sources.ProgressSource); {type(source).__name__} has none"
        )
    reached: list[int] = []
    times: set[int] = set()
    for c in cursors:
        marks = source.progress(c.partition, 0, c.stop)
        c.marks = Marks(source.name, c.partition, marks, frontier.get(c.partition, 0))
        if not marks:
            return []  # a partition without progress holds every other back
        reached.append(max(ts for _, ts in marks))
        times.update(ts for _, ts in marks)
    if not cursors:
        return []
    upto = min(reached)
    if head is not None and upto - 1 < head.ts and any(c.stop > c.pos for c in cursors):
        raise ClockError(
            f"{source.name}: source time {upto - 1} ms (its progress {upto} - 1) is below the time "
            f"{head.ts} ms of the newest binding of {name!r}: an ingest in another time domain? nothing was "
            "written"
        )
    least = head.ts + 1 if head is not None else I64_MIN
    return sorted(t for t in times if least <= t <= upto)


def step_bounds(
    name: str, steps: list[int | None], k: int, cursors: list[Cursor]
) -> tuple[int | None, tuple[str, int] | None]:
    """(the bound of step `k`, the commit time its batches take: None for the store's clock); the
    records a cursor held for an earlier step are taken again."""
    for c in cursors:
        c.held = False
    below = steps[k] if k < len(steps) else None
    return below, None if below is None else (name, below - 1)


__all__ = ["Cursor", "Marks", "source_steps", "step_bounds"]

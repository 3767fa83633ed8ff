"""THE merge: input sorted sources -> resolved, filtered rows -> output SSTs.

Every writer of SSTs from other SSTs or memtables goes through here: the memtable flush, the local
executor and every Spark task. There is one version-resolution rule, one filter pipeline and one SST
writer.

Input
    Sorted sources, newest first: a memtable, an L0 SST, or a sorted run (its SSTs concatenated). Each
    yields rows ``(key, seq, ts, expire_ts, value)`` by key ascending, seq descending. `merge_sources`
    interleaves them into one stream in the same order; it does no duplicate suppression.

Per key, with the versions newest first ``v0, v1, ...`` and live snapshots ``s1 < s2 < ... < sn``:

1. Snapshot stripes (Pebble's term). The stripe of a version is the index of the smallest snapshot at or
   above its seq (``n`` — "the latest state" — when none). A version is visible to exactly one stripe;
   ``v0`` is always kept, and ``vi`` (i > 0) is kept when its stripe differs from ``v(i-1)``'s: some
   snapshot sits between them and reads ``vi``. Versions sharing a stripe with a newer version are
   shadowed everywhere and dropped.
2. History retention. With a cutoff time ``c = tick - history_retention``, ``vi`` is also kept when its
   successor ``v(i-1)`` has ``ts > c``: ``vi`` was still the current value at some time after ``c``, so
   as-of reads back to ``c`` need it.
3. Filters. When no snapshot can see ``v0`` (its stripe is ``n``) and it is not a tombstone, the
   built-in TTL filter and then the user filters decide on it (see `compaction.filter`): KEEP,
   REMOVE (tombstone with the same seq and ts, no expire_ts), CHANGE_VALUE, DROP (no row). The TTL
   filter's tombstone keeps the row's expire_ts (RowFlags bit 1 on a tombstone): readers treat it as
   any tombstone, and the oldest-run step below can count its purge lag from the expiry.
   Keys under the job's `protected_prefix` (the engine's reserved key space, e.g. the remap of an
   ingested source) skip this step: they carry no TTL and no user filter may change them.
4. Oldest run. When the output is the oldest sorted run nothing lies beneath it, so the oldest kept
   versions that are tombstones, or rows expired at the tick (``tick > expire_ts``), are removed —
   repeatedly, from the bottom up. A tombstone anywhere else is kept: it shadows older versions
   in runs that this job does not read. Each removal is counted in ``stats.purge_lag``
   (`compaction.purge_lag`): ``tick - expire_ts`` for an expired row or a TTL tombstone,
   ``tick - ts`` for a delete's tombstone (none for v0 rows, which carry no ts).

With a history window, "expired" in steps 3 and 4 means expired before the cutoff ``c`` rather than the
tick: a row that expired inside the window is still visible to an as-of read from before its expiry.

Worked examples (seq:value, T = tombstone, E = expired at the tick; snapshots in brackets)::

    versions       snapshots  oldest run?  output          why
    9:b 5:a        []         no           9:b             5:a shares stripe "latest" with 9:b
    9:b 5:a        [7]        no           9:b 5:a         snapshot 7 reads 5:a
    9:T 5:a        []         no           9:T             the tombstone must hide 5:a's older copies
    9:T 5:a        []         yes          (nothing)       5:a shadowed; 9:T is the oldest -> dropped
    9:T 5:a        [7]        yes          9:T 5:a         snapshot 7 still reads 5:a
    9:E            []         no           9:T(E)          TTL filter: tombstone, ts and expire_ts kept
    9:E            []         yes          (nothing)       TTL tombstone is the oldest -> dropped, lag from E
    9:b 5:E        [7]        yes          9:b             5:E expired: invisible to snapshot 7 too
    9:E            [10]       no           9:E             snapshot 10 sees 9:E: filters skip it

Output
    `compaction.output.SstOutput` writes the stream into SSTs of about ``target_bytes`` each, never
    splitting one key's versions across files (so a sorted run's SSTs never overlap), each with
    creation_timestamp = tick. (`SstOutput` and `OutputSpec` are importable from here too.)
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import operator
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from compaction.filter import (
    CompactionFilter,
    DecisionKind,
    Entry,
    FilterContext,
    Reason,
    TtlFilter,
)
from compaction.job import CompactionJob, CompactionStats, FilterCounts, MergeResult
from compaction.output import OutputSpec, SstOutput
from compaction.stream import (
    SourceBlocks,
    cyclic_gc_paused,
    exp3,
    key0,
    merge_batches,
    merge_rounds,
    one_layout,
    round_rows,
    versions_of,
    whole_key_batches,
)
from formats.sst import SsTableInfo


def merge_sources(sources: Sequence[Iterable[tuple]], reverse: bool = False) -> Iterator[tuple]:
    """One stream by key (ascending, or descending if reverse), newest version first within a key."""
    if len(sources) == 1:
        return iter(sources[0])
    if reverse:
        return heapq.merge(*sources, key=_rev_key, reverse=True)
    return heapq.merge(*sources, key=_fwd_key)


def _fwd_key(row: tuple) -> tuple:
    return (row[0], -row[1])


def _rev_key(row: tuple) -> tuple:
    return (row[0], row[1])


def group_versions(rows: Iterable[tuple]) -> Iterator[list[tuple]]:
    """Group a merged stream into each key's versions, newest first (duplicate seqs collapse)."""
    it = iter(rows)
    try:
        first = next(it)
    except StopIteration:
        return
    group = [first]
    key = first[0]
    for row in it:
        if row[0] == key:
            if row[1] != group[-1][1]:
                group.append(row)
        else:
            yield group
            group = [row]
            key = row[0]
    yield group


class Resolver:
    """Applies steps 1-4 of the module docstring to one key's versions at a time."""

    # ChangeReporter sets it: the batched path (`_resolve_batch`) notes in ``stats.changed_rows`` what it
    # dropped or rewrote, so reporting does not need the key-by-key path
    reports_changes = False

    def __init__(
        self,
        *,
        tick: int,
        is_last_run: bool,
        snapshots: Sequence[int] = (),
        retention_cutoff: int | None = None,
        filters: Sequence[CompactionFilter] = (),
        stats: CompactionStats | None = None,
        protected_prefix: bytes | None = None,
    ) -> None:
        self.tick = tick
        self.expired_before = tick if retention_cutoff is None else min(tick, retention_cutoff)
        self.is_last_run = is_last_run
        self.snapshots = sorted(snapshots)
        self.top_snapshot = self.snapshots[-1] if self.snapshots else -1
        self.cutoff = retention_cutoff
        self.filters = list(filters)
        self.protected = protected_prefix
        self.stats = stats if stats is not None else CompactionStats()
        for f in self.filters:
            self.stats.filters.setdefault(f.name, FilterCounts())

    def resolve(self, versions: list[tuple]) -> list[tuple]:
        """The versions of one key to keep, newest first (steps 1-4), counting what was dropped."""
        stats = self.stats
        if len(versions) == 1:
            kept = versions
        else:
            kept = self._retain(versions)
        newest = kept[0]
        if (
            self.filters
            and newest[4] is not None
            and newest[1] > self.top_snapshot
            and (self.protected is None or not newest[0].startswith(self.protected))
        ):
            filtered = self._filter(newest)
            if filtered is not newest and newest[1] > stats.history_floor:
                stats.history_floor = newest[1]
            if filtered is None:
                kept = kept[1:]
            elif filtered is not newest:
                kept = [filtered] + kept[1:]
        if self.is_last_run:
            tick = self.expired_before
            while kept:
                bottom = kept[-1]
                if bottom[4] is None:
                    stats.tombstones_dropped += 1
                    since = bottom[2] if bottom[3] is None else bottom[3]  # delete ts, or a TTL tombstone's expiry
                elif bottom[3] is not None and tick > bottom[3]:
                    stats.expired_dropped += 1
                    since = bottom[3]
                else:
                    break
                if since is not None:
                    lag = self.tick - since
                    stats.purge_lag.record(lag if lag > 0 else 0)
                if bottom[1] > stats.history_floor:
                    stats.history_floor = bottom[1]
                kept = kept[:-1]
        return kept

    def _retain(self, versions: list[tuple]) -> list[tuple]:
        snaps = self.snapshots
        cutoff = self.cutoff
        kept = [versions[0]]
        prev = versions[0]
        prev_stripe = bisect.bisect_left(snaps, prev[1]) if snaps else 0
        for v in versions[1:]:
            stripe = bisect.bisect_left(snaps, v[1]) if snaps else 0
            if stripe != prev_stripe or (cutoff is not None and prev[2] is not None and prev[2] > cutoff):
                kept.append(v)
            else:
                self.stats.versions_dropped += 1
                if v[1] > self.stats.history_floor:
                    self.stats.history_floor = v[1]
            prev = v
            prev_stripe = stripe
        return kept

    def _filter(self, row: tuple) -> tuple | None:
        key, seq, ts, exp, value = row
        filters = self.filters
        first = filters[0]
        if type(first) is TtlFilter:
            # the built-in filter, inlined: most rows have no expire_ts, and an Entry per row adds up
            if exp is not None and first.tick > exp:
                self.stats.filters[first.name].removed += 1
                return (key, seq, ts, exp, None)  # a tombstone that remembers its expiry (purge lag)
            filters = filters[1:]
        out = row
        for f in filters:
            d = f.filter(Entry(key, value, seq, ts, exp))
            kind = d.kind
            if kind is DecisionKind.KEEP:
                continue
            counts = self.stats.filters[f.name]
            if kind is DecisionKind.REMOVE:
                counts.removed += 1
                return (key, seq, ts, None, None)
            if kind is DecisionKind.DROP:
                counts.dropped += 1
                return None
            counts.changed += 1
            value = d.value
            out = (key, seq, ts, exp, value)
        return out

    def run(self, rows: Iterable[tuple]) -> Iterator[tuple]:
        """Resolve every key of `rows` (sorted by key, newest version first); yield the rows to keep."""
        return itertools.chain.from_iterable(self.run_batches(whole_key_batches(iter(rows))))

    def run_batches(self, batches: Iterable[list[tuple]]) -> Iterator[list[tuple]]:
        """Resolve batches of rows sorted by key, each holding all the versions of its keys (a key
        never spans two batches); a key's versions may come in any seq order (they are sorted here).
        Yields, per batch, the rows to keep (the same answers as `resolve`, key by key)."""
        filters = self.filters
        fast = not self.snapshots and self.cutoff is None and (
            not filters or (len(filters) == 1 and type(filters[0]) is TtlFilter)
        )
        if not fast:
            # key by key, as the rows come: a user filter sees a row only once the rows before it have
            # reached the output (a job that dies mid-way has written what it resolved)
            for batch in batches:
                yield from self._resolve_keys(batch)
            return
        resolve_batch = self._resolve_batch
        for batch in batches:
            if batch:
                yield resolve_batch(batch)

    def _resolve_keys(self, batch: list[tuple]) -> Iterator[list[tuple]]:
        """`resolve` on each key of a batch, one list of kept rows per key."""
        stats = self.stats
        resolve = self.resolve
        n = len(batch)
        j = 0
        while j < n:
            key = batch[j][0]
            k = j + 1
            while k < n and batch[k][0] == key:
                k += 1
            versions = versions_of(batch[j:k]) if k - j > 1 else batch[j:k]
            stats.rows_in += len(versions)
            yield resolve(versions)
            j = k

    def _resolve_batch(self, batch: list[tuple]) -> list[tuple]:
        """One batch with no snapshot, no history window and only the built-in TTL filter: steps 1-4
        inlined (only the newest version can stay: it goes through the TTL filter and, in the oldest
        run, the tombstone/expiry drop). `run_batches` sends every other case to `_resolve_keys`."""
        stats = self.stats
        out: list[tuple] = []
        append = out.append
        filters = self.filters
        changes = stats.changed_rows if self.reports_changes else None  # ChangeReporter: note drops/rewrites
        if not self.is_last_run:
            # a batch of distinct keys with no expire_ts (a flush of fresh keys): every row is kept as is
            keys = list(map(key0, batch))
            if not any(map(operator.eq, keys, keys[1:])) and list(map(exp3, batch)).count(None) == len(batch):
                stats.rows_in += len(batch)
                return batch
        ttl_tick = filters[0].tick if filters else None
        ttl_counts = stats.filters[filters[0].name] if ttl_tick is not None else None
        protected = self.protected
        last_run = self.is_last_run
        expired_before = self.expired_before
        n = len(batch)
        rows_in = 0
        j = 0
        while j < n:
            row = batch[j]
            key = row[0]
            k = j + 1
            if k < n and batch[k][0] == key:
                k += 1
                while k < n and batch[k][0] == key:
                    k += 1
                if k - j == 2 and row[1] > batch[j + 1][1]:
                    versions = None  # two versions in order: the common case, without a list
                    m = 2
                    older = batch[j + 1][1]
                else:
                    versions = versions_of(batch[j:k])
                    m = len(versions)
                    older = versions[1][1] if m > 1 else 0
                j = k
                rows_in += m
                if versions is not None:
                    row = versions[0]
                if m > 1:  # step 1 with no snapshot and no history window: only the newest stays
                    stats.versions_dropped += m - 1
                    if older > stats.history_floor:
                        stats.history_floor = older
            else:
                j = k
                rows_in += 1
            _, seq, ts, exp, value = row
            if exp is None:
                if value is not None or not last_run:
                    append(row)
                    continue
            elif (
                ttl_tick is not None
                and value is not None
                and ttl_tick > exp
                and (protected is None or not key.startswith(protected))
            ):
                ttl_counts.removed += 1  # the inlined TTL filter of `_filter`
                if seq > stats.history_floor:
                    stats.history_floor = seq
                if not last_run:
                    row = (key, seq, ts, exp, None)
                    append(row)
                    if changes is not None:
                        changes.append((key, seq, row))
                    continue
                value = None
            if last_run:  # step 4 for the only version
                if value is None:
                    stats.tombstones_dropped += 1
                    since = ts if exp is None else exp
                elif exp is not None and expired_before > exp:
                    stats.expired_dropped += 1
                    since = exp
                else:
                    append(row)
                    continue
                if since is not None:
                    lag = self.tick - since
                    stats.purge_lag.record(lag if lag > 0 else 0)
                if seq > stats.history_floor:
                    stats.history_floor = seq
                if changes is not None:
                    changes.append((key, seq, None))
                continue
            append(row)
        stats.rows_in += rows_in  # counted per key, not per row: this loop is the merge
        return out


class ChangeReporter(Resolver):
    """A `Resolver` that also appends to ``stats.changed_rows`` what became of each key's newest version
    when it does not come out unchanged: (key, seq, the row written in its place, or None if dropped).

    `run_batches` keeps the plain resolver's paths: the batched one (`_resolve_batch`, no snapshot, no
    history window, only the TTL filter) notes each drop and rewrite where it makes it; every other case
    goes key by key through `resolve` below, which compares what it kept with the newest version."""

    reports_changes = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.stats.changed_rows is None:
            self.stats.changed_rows = []

    def resolve(self, versions: list[tuple]) -> list[tuple]:
        """`Resolver.resolve`, noting a change of the newest version."""
        kept = Resolver.resolve(self, versions)
        v0 = versions[0]
        if not kept or (kept[0] is not v0 and kept[0] != v0):
            self.stats.changed_rows.append((v0[0], v0[1], kept[0] if kept and kept[0][1] == v0[1] else None))
        return kept


def make_filters(job: CompactionJob) -> list[CompactionFilter]:
    """The job's filter chain: the built-in TTL filter first, then one filter from each factory."""
    ctx = FilterContext(job.tick, job.is_last_run, job.reason, job.inputs)
    expired_before = job.tick if job.retention_cutoff is None else min(job.tick, job.retention_cutoff)
    filters: list[CompactionFilter] = [TtlFilter(expired_before)]
    for factory in job.filters:
        filters.append(factory.create(ctx))
    return filters


def run_job(
    job: CompactionJob, on_rows: Callable[[int], None] | None = None, columnar: bool = True
) -> MergeResult:
    """Merge the job's inputs into new SSTs. On any error the outputs written so far are removed.

    Streams: each source reads one SST at a time (`SourceBlocks`), rows go through in rounds of whole
    keys, and only the output SST being written is buffered, so memory does not grow with the job.
    Rounds of arrays of one layout are resolved column-wise (`compaction.columnar`) unless the job has
    a user filter or reports changed rows, or `columnar` is False (the row path alone: the same files)."""
    t0 = time.perf_counter()
    stats = CompactionStats(jobs=1)
    if job.report_changes:
        stats.changed_rows = []
    resolver = (ChangeReporter if job.report_changes else Resolver)(
        tick=job.tick,
        is_last_run=job.is_last_run,
        snapshots=job.snapshots,
        retention_cutoff=job.retention_cutoff,
        filters=make_filters(job),
        stats=stats,
        protected_prefix=job.protected_prefix,
    )
    # numpy's: imported by the first merge, not by `import lsm` (a CLI command that only reads)
    from compaction.columnar import columnar_resolver

    # a row_map (DB.repair_clock) rewrites row tuples: the row path
    columnar = columnar and job.row_map is None and columnar_resolver(resolver)
    sources = [SourceBlocks(paths, job.start, job.end, arrays=columnar) for paths in job.sources]
    try:
        with cyclic_gc_paused():
            out = SstOutput(job.output, job.tick)
            if columnar:
                outputs = out.write_stream(_column_chunks(merge_rounds(sources), resolver))
            else:
                batches = merge_batches(sources)
                if job.row_map is not None:
                    batches = map(job.row_map, batches)
                outputs = out.write_batches(resolver.run_batches(batches))
            stats.write_seconds = out.write_seconds
            stats.read_seconds = sum(s.read_seconds for s in sources)
    finally:
        for s in sources:
            s.close()
    stats.bytes_in = job.input_bytes
    stats.rows_out = sum(i.num_rows for _, i in outputs)
    stats.bytes_out = sum(i.file_size for _, i in outputs)
    stats.seconds = time.perf_counter() - t0
    return MergeResult(outputs, stats)


def _column_chunks(rounds: Iterable[list], resolver: Resolver) -> Iterator[list[tuple] | tuple]:
    """The kept rows of each round: a round of arrays of one layout resolved column-wise
    (`compaction.columnar.resolve_round`), any other as rows (`Resolver.run_batches`)."""
    from compaction.columnar import resolve_round

    for pieces in rounds:
        if one_layout(pieces):
            chunk = resolve_round(pieces, resolver)
            if chunk is not None:
                yield chunk
            continue
        rows = list(itertools.chain.from_iterable(resolver.run_batches((round_rows(pieces),))))
        if rows:
            yield rows


def flush_rows(
    rows: Iterable[tuple],
    spec: OutputSpec,
    *,
    tick: int,
    snapshots: Sequence[int] = (),
    retention_cutoff: int | None = None,
    stats: CompactionStats | None = None,
) -> list[tuple[str, SsTableInfo]]:
    """A memtable flush: the same resolution without filters and keeping tombstones (not the oldest run).

    `stats`, if given, receives the counts (and the history floor) of what the flush dropped."""
    resolver = Resolver(
        tick=tick, is_last_run=False, snapshots=snapshots, retention_cutoff=retention_cutoff, stats=stats
    )
    with cyclic_gc_paused():
        return SstOutput(spec, tick).write_batches(resolver.run_batches(whole_key_batches(iter(rows))))


__all__ = [
    "ChangeReporter",
    "CompactionJob",
    "CompactionStats",
    "MergeResult",
    "OutputSpec",
    "Reason",
    "Resolver",
    "SstOutput",
    "flush_rows",
    "group_versions",
    "merge_batches",
    "merge_sources",
    "run_job",
]

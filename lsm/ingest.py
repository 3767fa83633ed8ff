"""`DB.ingest`: exactly-once loading of a partitioned source, one atomic commit per batch.

Each batch is ONE commit (one WAL record, one seq, one ts) holding the batch's rows and the new binding
``(ts, seq, {partition: next_offset})`` of the source's remap (lsm.remap_store). A crash leaves the whole
batch with its binding or neither; the next ingest starts from the durable frontier, read from memory
(the latest binding, found once per handle by one reverse seek), so resume costs O(1) in history.

Rules, in the order they apply:

1. Before anything is written, every partition of the durable frontier must still reach its offset:
   ``source.end(p) >= frontier[p]``, else `SourceRegressedError` (the file was truncated or replaced).
2. The ends of all partitions are read once per call: the call ingests what was complete when it began.
3. A batch takes up to `batch_records` records, partitions in rotating order so none starves. A cut
   (a point where a partition's frontier may stop) lies between offsets (records sharing an offset land
   together). Records with a ``tx`` do not become rows when read: they belong to transactions
   (lsm.ingest_tx), which become visible whole, in the binding in which they complete (``tx_order=
   "arrival"``) or in which they and every transaction with an earlier end marker have
   (``"commit"``). Until then their records wait in the source's TEMP collection, rows in the reserved
   key space written in the same commit as the binding that read them, so the frontier moves on and a
   resume neither reads them again nor loses them. Within one binding the batch's records outside
   transactions apply first, then the transactions it emits in end-marker order, each in (partition,
   offset) order (so a bulk load, whose transactions carry its binding's seq, gives the same rows).
4. A partition enters the frontier in the first binding that reads it (from offset 0); no partition
   ever leaves it.
5. TTL counts from the commit ts (``ttl_base="commit"``) or from the record's ``event_ts``
   (``ttl_base="event"``; records without one count from the commit ts), so a row may expire on
   arrival. Records without a ttl get DbOptions.default_ttl, as `DB.put` does.
6. Within a batch the last record of a key wins (offset order within a partition).
7. The first compaction (or background compaction poll) after the store's history floor advanced, in a
   flush or a compaction, compacts every source's remap at ``since = now - history_retention``
   (`compact_remaps`; a running ingest does it after its next batch), and so does every `REMAP_COMPACT_EVERY`-th batch (for a store whose compactions drop
   nothing), each in its own commit of system rows, when at least two bindings lie at or before since.
   The count survives restarts: a handle starts it from the bindings stored since the remap's last
   compaction (`lsm.remap_store.bindings_since_compaction`), so an ingester that runs a few batches per
   process still compacts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from lsm.ingest_cursor import Cursor, source_steps, step_bounds
from lsm.ingest_job import TTL_BASES, IngestJob, Unit, check_frontier
from lsm.ingest_rows import emitted_records, resolve_records, resolve_tuples, split_tx
from lsm.ingest_state import durable_head
from lsm.ingest_state import source_state as _state
from lsm.remap import Binding, IngestStats, Remap
from lsm.remap_store import (
    SEQ,
    binding_key,
    bindings_since_compaction,
    check_name,
    consolidation_ops,
    decode_binding,
    decode_since,
    encode_binding,
    host,
    list_sources,
    source_prefix,
    superseded_row,
)

if TYPE_CHECKING:
    from lsm.db import DB
    from lsm.sources import Source

BATCH_RECORDS = 10_000
TIMES = ("store", "source")  # commit times from the store's clock, or from the source's progress
REMAP_COMPACT_EVERY = 256  # batches between two attempts at compacting a source's remap


class StreamIngest(IngestJob):
    """`DB.ingest(engine="stream")`: batches of up to `batch_records`, each one commit of its rows and its
    binding (module docstring); `ingest` with the same arguments runs one."""

    def __init__(self, db: DB, source: Source, name: str, *, max_records: int | None = None,
                 batch_records: int = BATCH_RECORDS, ttl_base: str = "commit", sync: bool = True,
                 progress: Callable[[IngestStats], None] | None = None,
                 should_stop: Callable[[], bool] | None = None, tx_order: str = "arrival",
                 times: str = "store") -> None:
        check_name(name)
        if type(batch_records) is not int or batch_records < 1:
            raise ValueError(f"batch_records must be an int >= 1, got {batch_records!r}")
        if max_records is not None and (type(max_records) is not int or max_records < 0):
            raise ValueError(f"max_records must be None or an int >= 0, got {max_records!r}")
        super().__init__(db, source, name, ttl_base=ttl_base, tx_order=tx_order)
        if times not in TIMES:
            raise ValueError(f"times must be one of {TIMES}, got {times!r}")
        self.max_records = max_records
        self.batch_records = batch_records
        self.sync = sync
        self.progress = progress
        self.should_stop = should_stop
        self.times = times

    def plan(self) -> Iterator[Unit]:
        """The batches, each taken when the previous one has committed (rules 2 to 4)."""
        source, name, st = self.source, self.name, self.state
        if st.batches is None:  # rule 7's count, as the stored remap has it (earlier handles' batches too)
            st.batches = bindings_since_compaction(self.db, name, REMAP_COMPACT_EVERY) if self.head else 0
        txs = self.transactions()
        parts = sorted(set(source.partitions()) | set(self.frontier))
        cursors = [Cursor(source, p, self.frontier.get(p, 0), source.end(p)) for p in parts]
        cursors_all = list(cursors)
        # times="store": one pass at the clock's times; "source": a pass per step, each at the step's time
        steps = [None] if self.times == "store" else source_steps(source, name, cursors, self.frontier, self.head)
        below, at = step_bounds(name, steps, 0, cursors)
        step = turn = 0
        max_records = self.max_records
        while cursors and steps:
            if max_records is not None and self.records >= max_records:
                return
            if self.should_stop is not None and self.should_stop():
                return
            budget = self.batch_records if max_records is None else min(self.batch_records, max_records - self.records)
            records: list[tuple] = []  # the fields of SourceRecord, in order
            n = len(cursors)
            for i in range(n):
                c = cursors[(turn + i) % n]
                if not c.done and not c.held:
                    c.take(budget - len(records), records, below)
                if len(records) >= budget:
                    break
            turn += 1
            frontier = self.frontier
            new_frontier = dict(frontier)
            for c in cursors:
                if c.pos > 0 or c.partition in frontier:
                    new_frontier[c.partition] = c.pos
            cursors = [c for c in cursors if not c.done]
            if new_frontier == frontier:  # every cursor ended (or waits) without a cut: nothing to commit
                step += 1
                if step >= len(steps):
                    return
                below, at = step_bounds(name, steps, step, cursors)
                continue
            has_tx = any(c.has_tx for c in cursors_all)
            for c in cursors_all:
                c.has_tx = False
            # a batch without transactional records only completes pending ones
            yield Unit(new_frontier, len(records), at, (records, has_tx or bool(txs.markers), has_tx))

    def run(self, unit: Unit) -> Callable[[int, int], tuple[list[tuple], int]]:
        """The batch's rows at its commit's (ts, seq): its records outside transactions, then what its
        transactions emit, the binding, TEMP's changes, and the replaced binding of the same ms."""
        records, tx_due, has_tx = unit.data
        temp_ops: list[tuple[bytes, bytes | None]] = []
        if tx_due:
            outcome = self.apply_transactions(self.split(records) if has_tx else [])
            records += emitted_records(outcome)
            temp_ops = outcome.temp_ops
        source, name, frontier, head = self.source, self.name, unit.frontier, self.state.head
        ttl_base, default_ttl, v0 = self.ttl_base, self.default_ttl, self.v0

        def rows_at(ts: int, seq: int) -> tuple[list[tuple], int]:
            rows, nbytes = resolve_tuples(source, records, ts, ttl_base, default_ttl, v0)
            out = list(rows.values())
            out.append((binding_key(name, seq), None, encode_binding(ts, frontier)))
            out.extend((key, None, value) for key, value in temp_ops)
            merged = superseded_row(name, head, ts)  # type: ignore[arg-type]  # one binding per ms
            if merged is not None:
                out.append(merged)
            return out, nbytes

        return rows_at

    def split(self, records: list[tuple]) -> list[tuple]:
        """The batch's records carrying a ``tx``, taken out of `records` (lsm.ingest_rows.split_tx)."""
        txs = [r for r in records if r[6] is not None]
        records[:] = [r for r in records if r[6] is None]
        return txs

    def commit(self, unit: Unit, work: Callable[[int, int], tuple[list[tuple], int]]) -> tuple[int, int]:
        """One commit of the batch's rows and binding (at the source's time with times="source")."""
        return host(self.db).commit_rows(work, self.sync, unit.at)

    def committed(self, unit: Unit) -> None:
        """Rule 7's cadence of remap compactions, then `progress`."""
        st = self.state
        st.batches = (st.batches or 0) + 1
        if st.batches >= REMAP_COMPACT_EVERY or st.compact_due:
            st.batches, st.compact_due = 0, False
            _compact_remap_locked(self.db, self.name, host(self.db).now() - self.db.options.history_retention, unit.at)
        if self.progress is not None:
            self.progress(IngestStats(self.records, self.batches, dict(self.frontier)))


def ingest(db: DB, source: Source, name: str, **kw: object) -> IngestStats:
    """Ingest what `source` holds beyond the durable frontier of `name` in batches (`StreamIngest`'s
    arguments); see the module docstring."""
    return StreamIngest(db, source, name, **kw).execute()  # type: ignore[arg-type]


def compact_remap(db: DB, name: str, since: int) -> Remap | None:
    """Compact the stored remap of `name` at `since` (lsm.remap) when two or more bindings lie at or
    before it; reads only those bindings. Returns the compacted prefix, or None when nothing changed.
    ValueError for a `since` after the store's time now, nothing written: the merged binding is
    rewritten at `since`, and the next ingest's binding, committed at a time before it, would break the
    remap's order (it could no longer be read)."""
    check_name(name)
    if type(since) is not int:
        raise TypeError(f"since is int milliseconds, not {type(since).__name__}")
    host(db).check_writable()
    with _state(db, name).lock:
        now = host(db).now()
        if since > now:
            raise ValueError(f"since {since} lies after the store's time now ({now}): a remap is compacted "
                             "at a time already passed")
        return _compact_remap_locked(db, name, since)


def compact_remaps(db: DB) -> None:
    """Compact every source's remap at ``since = now - history_retention``: what the store's compaction
    calls whenever the history floor has advanced, by a flush or a compaction (the remap is compactable whenever the data is). A
    source whose ingest is running is marked instead, and that ingest compacts after its next batch, so
    compaction never waits for an ingest call."""
    now = host(db).now()
    since = now - db.options.history_retention
    driver = db.engine.clock_driver()  # a source drives the clock: commit at its time, as its ingest does
    at = None if driver is None else (driver, now)
    for name in list_sources(db):
        st = _state(db, name)
        if not st.lock.acquire(blocking=False):
            st.compact_due = True
            continue
        try:
            _compact_remap_locked(db, name, since, at)
        finally:
            st.lock.release()


def _compact_remap_locked(db: DB, name: str, since: int, at: tuple[str, int] | None = None) -> Remap | None:
    pre = source_prefix(name)
    old_since = None
    prefix: list[Binding] = []
    for key, value in host(db).scan_raw(pre, pre[:-1] + b"\x01"):
        if key == pre + SEQ.pack(0):
            old_since = decode_since(key, value)
            continue
        b = decode_binding(key, value)
        if b.ts > since:
            break
        prefix.append(b)
    if len(prefix) < 2 or (old_since is not None and since <= old_since):
        return None
    remap = Remap(name, prefix, old_since)
    ops = consolidation_ops(remap, since, prefix)  # every stored row: same-ts bindings merge in `remap`

    def rows_at(ts: int, seq: int) -> tuple[list[tuple], int]:
        return list(ops), 0

    st = _state(db, name)
    host(db).commit_rows(rows_at, True, at)
    st.batches = 0  # what bindings_since_compaction counts from now on
    head = st.head
    if isinstance(head, Binding) and head.ts <= since:
        st.head = Binding(since, head.seq, head.frontier)
    return remap.compact(since)


__all__ = [
    "BATCH_RECORDS",
    "REMAP_COMPACT_EVERY",
    "StreamIngest",
    "emitted_records",
    "split_tx",
    "TTL_BASES",
    "check_frontier",
    "compact_remap",
    "compact_remaps",
    "durable_head",
    "ingest",
    "resolve_records",
    "resolve_tuples",
]

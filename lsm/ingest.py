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

from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING

from formats.row import MAX_KEY_LEN, MAX_VALUE_LEN
from lsm.clock import I64_MAX, I64_MIN
from lsm.errors import SourceRegressedError
from lsm.ingest_cursor import Cursor, source_steps, step_bounds
from lsm.ingest_state import SourceState, durable_head
from lsm.ingest_state import source_state as _state
from lsm.ingest_tx import TX_ORDERS, TxOutcome, TxState, check_tx_record
from lsm.options import NO_TTL, check_ttl
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
from lsm.syskeys import SYSTEM_PREFIX, is_system

if TYPE_CHECKING:
    from lsm.db import DB
    from lsm.sources import Source, SourceRecord

BATCH_RECORDS = 10_000
TTL_BASES = ("commit", "event")
TIMES = ("store", "source")  # commit times from the store's clock, or from the source's progress
REMAP_COMPACT_EVERY = 256  # batches between two attempts at compacting a source's remap


def tx_state(db: DB, name: str, st: SourceState) -> TxState:
    """The pending transactions of `name` (loaded from TEMP once per handle; `st.lock` held)."""
    if st.tx is None:
        st.tx = TxState.load(db, name)
    return st.tx


def check_frontier(
    source: Source, name: str, frontier: dict[int, int], end_of: Callable[[int], int] | None = None
) -> None:
    """Rule 1: `SourceRegressedError` unless every partition of `frontier` still reaches its offset
    (read with `end_of`, default ``source.end``)."""
    for p, off in sorted(frontier.items()):
        end = (end_of or source.end)(p)
        if end < off:
            raise SourceRegressedError(
                f"{source.name}: partition {p} went backwards: ingest {name!r} durably read it up to "
                f"offset {off}, the source now ends at {end} (truncated or replaced?)"
            )


def _check_record(source: Source, rec: tuple) -> None:
    """Raise for a record (a tuple of `SourceRecord`'s fields) the store cannot hold (the batch is not
    written)."""
    partition, offset, key, value, ttl, event_ts = rec[:6]
    where = f"{source.name}: partition {partition} offset {offset}"
    if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_LEN:
        raise ValueError(f"{where}: key must be 1..{MAX_KEY_LEN} bytes, got {key!r:.60}")
    if is_system(key):
        raise ValueError(f"{where}: key {key!r} lies in the engine's reserved key space")
    if value is not None and (type(value) is not bytes or len(value) > MAX_VALUE_LEN):
        raise ValueError(f"{where}: value must be bytes or None")
    if ttl is not None:
        check_ttl(ttl)
    if event_ts is not None and type(event_ts) is not int:
        raise ValueError(f"{where}: event_ts must be int ms, got {event_ts!r}")


_FIELDS = attrgetter("partition", "offset", "key", "value", "ttl", "event_ts", "tx", "tx_end")


def resolve_records(
    source: Source, records: Iterable[SourceRecord], ts: int, ttl_base: str, default_ttl: int | None, v0: bool
) -> tuple[dict[bytes, tuple], int]:
    """The rows of `records` committed at `ts`: {key: (key, expire_ts, value)} (the last record of a key
    wins; value None is a delete), and the user bytes they hold. Raises for a record the store cannot hold.

    Shared by streaming ingest and the bulk-load tasks (lsm.bulk_task): rules 5 and 6 above."""
    return resolve_tuples(source, map(_FIELDS, records), ts, ttl_base, default_ttl, v0)


def resolve_tuples(
    source: Source, records: Iterable[tuple], ts: int, ttl_base: str, default_ttl: int | None, v0: bool
) -> tuple[dict[bytes, tuple], int]:
    """`resolve_records` of records given as tuples of the `SourceRecord` fields in order (what
    `PartitionedLog.read_runs` yields): the loop streaming ingest runs, without an object per record."""
    event = ttl_base == "event"
    rows: dict[bytes, tuple] = {}
    nbytes = 0
    for rec in records:
        _, _, key, value, ttl, event_ts, _, _ = rec
        if type(key) is not bytes or not 0 < len(key) <= MAX_KEY_LEN or key >= SYSTEM_PREFIX:
            if key is None:  # a progress marker (a bulk-load slice's run holds them): no row
                continue
            _check_record(source, rec)  # raises unless the key is fine after all
        exp = None
        if value is not None:
            if type(value) is not bytes or len(value) > MAX_VALUE_LEN:
                _check_record(source, rec)
            if ttl is None:
                ttl = default_ttl
            elif type(ttl) is not int or ttl < 0:
                _check_record(source, rec)
            if ttl is not None and ttl is not NO_TTL:
                if v0:
                    raise ValueError("sst_format_version 0 cannot store TTLs")
                base = ts
                if event and event_ts is not None:
                    base = event_ts
                    if type(base) is not int:
                        _check_record(source, rec)
                exp = base + ttl
                if not I64_MIN <= exp <= I64_MAX:
                    raise ValueError(
                        f"{source.name}: partition {rec[0]} offset {rec[1]}: expiry {base} + ttl "
                        f"{ttl} does not fit the format's i64"
                    )
            nbytes += len(key) + len(value)
        else:
            nbytes += len(key)
        rows[key] = (key, exp, value)  # the last record of a key wins
    return rows, nbytes


def split_tx(source: Source, records: list[tuple], ttl_base: str, default_ttl: int | None, v0: bool) -> list[tuple]:
    """Take the transactional records out of `records` (in place) and return them in (partition, offset)
    order (`TxState.apply`'s input), each checked now: a record the store cannot hold must fail the
    binding that reads it, not wait in TEMP and fail the one that emits it."""
    txs = [r for r in records if r[6] is not None]
    records[:] = [r for r in records if r[6] is None]
    for r in txs:
        check_tx_record(source.name, r)
    resolve_tuples(source, txs, 0, ttl_base, default_ttl, v0)
    txs.sort(key=lambda r: (r[0], r[1]))  # stable: records sharing an offset keep their order
    return txs


def emitted_records(outcome: TxOutcome) -> list[tuple]:
    """The records of the transactions `outcome` emits, in the order they apply (after the binding's
    records outside transactions)."""
    return [r for recs in outcome.emitted for r in recs]


def _batch_rows(
    db: DB,
    source: Source,
    name: str,
    records: list[tuple],
    frontier: dict[int, int],
    ttl_base: str,
    temp_ops: list[tuple[bytes, bytes | None]],
    head: Binding | None = None,
) -> Callable[[int, int], tuple[list[tuple], int]]:
    default_ttl = db.options.default_ttl
    v0 = db.options.sst_format_version == 0

    def rows_at(ts: int, seq: int) -> tuple[list[tuple], int]:
        rows, nbytes = resolve_tuples(source, records, ts, ttl_base, default_ttl, v0)
        out = list(rows.values())
        out.append((binding_key(name, seq), None, encode_binding(ts, frontier)))
        out.extend((key, None, value) for key, value in temp_ops)
        merged = superseded_row(name, head, ts)  # a binding of the same ms is replaced: one per time
        if merged is not None:
            out.append(merged)
        return out, nbytes

    return rows_at


def ingest(
    db: DB,
    source: Source,
    name: str,
    *,
    max_records: int | None = None,
    batch_records: int = BATCH_RECORDS,
    ttl_base: str = "commit",
    sync: bool = True,
    progress: Callable[[IngestStats], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    tx_order: str = "arrival",
    times: str = "store",
) -> IngestStats:
    """Ingest what `source` holds beyond the durable frontier of `name`; see the module docstring."""
    check_name(name)
    if type(batch_records) is not int or batch_records < 1:
        raise ValueError(f"batch_records must be an int >= 1, got {batch_records!r}")
    if max_records is not None and (type(max_records) is not int or max_records < 0):
        raise ValueError(f"max_records must be None or an int >= 0, got {max_records!r}")
    if ttl_base not in TTL_BASES:
        raise ValueError(f"ttl_base must be one of {TTL_BASES}, got {ttl_base!r}")
    if tx_order not in TX_ORDERS:
        raise ValueError(f"tx_order must be one of {TX_ORDERS}, got {tx_order!r}")
    if times not in TIMES:
        raise ValueError(f"times must be one of {TIMES}, got {times!r}")
    host(db).check_writable()
    st = _state(db, name)
    with st.lock:
        head = durable_head(db, name)
        frontier = dict(head.frontier) if head is not None else {}
        check_frontier(source, name, frontier)  # rule 1: nothing is written past a regression
        if st.batches is None:  # rule 7's count, as the stored remap has it (earlier handles' batches too)
            st.batches = bindings_since_compaction(db, name, REMAP_COMPACT_EVERY) if head is not None else 0
        txs = tx_state(db, name, st)
        parts = sorted(set(source.partitions()) | set(frontier))
        cursors = [Cursor(source, p, frontier.get(p, 0), source.end(p)) for p in parts]
        cursors_all = list(cursors)
        # times="store": one pass at the clock's times; "source": a pass per step, each at the step's time
        steps = [None] if times == "store" else source_steps(source, name, cursors, frontier, head)
        below, at = step_bounds(name, steps, 0, cursors)
        step = 0
        records_total = batches = 0
        turn = 0
        while cursors and steps:
            if max_records is not None and records_total >= max_records:
                break
            if should_stop is not None and should_stop():
                break
            budget = batch_records if max_records is None else min(batch_records, max_records - records_total)
            records: list[tuple] = []  # the fields of SourceRecord, in order
            n = len(cursors)
            for i in range(n):
                c = cursors[(turn + i) % n]
                if not c.done and not c.held:
                    c.take(budget - len(records), records, below)
                if len(records) >= budget:
                    break
            turn += 1
            new_frontier = dict(frontier)
            for c in cursors:
                if c.pos > 0 or c.partition in frontier:
                    new_frontier[c.partition] = c.pos
            cursors = [c for c in cursors if not c.done]
            if new_frontier == frontier:  # every cursor ended (or waits) without a cut: nothing to commit
                step += 1
                if step >= len(steps):
                    break
                below, at = step_bounds(name, steps, step, cursors)
                continue
            n_read = len(records)
            temp_ops: list[tuple[bytes, bytes | None]] = []
            try:
                has_tx = any(c.has_tx for c in cursors_all)
                if has_tx or txs.markers:  # a batch without transactional records only completes pending ones
                    for c in cursors_all:
                        c.has_tx = False
                    o = db.options
                    v0 = o.sst_format_version == 0
                    tx_recs = split_tx(source, records, ttl_base, o.default_ttl, v0) if has_tx else []
                    outcome = txs.apply(tx_recs, tx_order)
                    records += emitted_records(outcome)
                    temp_ops = outcome.temp_ops
                rows_at = _batch_rows(
                    db, source, name, records, new_frontier, ttl_base, temp_ops, st.head  # type: ignore[arg-type]
                )
                seq, ts = host(db).commit_rows(rows_at, sync, at)
            except BaseException:
                st.tx = None  # it moved past a binding that did not commit: read TEMP again
                raise
            frontier = new_frontier
            st.head = Binding(ts, seq, frontier)
            records_total += n_read
            batches += 1
            st.batches += 1
            if st.batches >= REMAP_COMPACT_EVERY or st.compact_due:
                st.batches, st.compact_due = 0, False
                _compact_remap_locked(db, name, host(db).now() - db.options.history_retention, at)
            if progress is not None:
                progress(IngestStats(records_total, batches, dict(frontier)))
        return IngestStats(records_total, batches, dict(frontier))


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
    "emitted_records",
    "split_tx",
    "tx_state",
    "REMAP_COMPACT_EVERY",
    "TTL_BASES",
    "check_frontier",
    "compact_remap",
    "compact_remaps",
    "durable_head",
    "ingest",
    "resolve_records",
    "resolve_tuples",
]

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
   (a point where a partition's frontier may stop) lies only between offsets (records sharing an
   offset land together) and where no transaction of the partition is open. A transaction is the set
   of a partition's records with one ``tx`` id, closed by the record with ``tx_end``; transactions are
   scoped to their partition. A batch grows past `batch_records` rather than split a transaction, and
   an incomplete transaction at the end of a partition waits (its records, and every record after its
   first one, stay unread) until it is closed.
4. A partition enters the frontier in the first binding that reads it (from offset 0); no partition
   ever leaves it.
5. TTL counts from the commit ts (``ttl_base="commit"``) or from the record's ``event_ts``
   (``ttl_base="event"``; records without one count from the commit ts), so a row may expire on
   arrival. Records without a ttl get DbOptions.default_ttl, as `DB.put` does.
6. Within a batch the last record of a key wins (offset order within a partition).
7. Every compaction of the store that advances its history floor compacts every source's remap at
   ``since = now - history_retention`` (`compact_remaps`; a running ingest does it after its next
   batch), and so does every `REMAP_COMPACT_EVERY`-th batch (for a store whose compactions drop
   nothing), each in its own commit of system rows, when at least two bindings lie at or before since.
   The count survives restarts: a handle starts it from the bindings stored since the remap's last
   compaction (`lsm.remap_store.bindings_since_compaction`), so an ingester that runs a few batches per
   process still compacts.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from operator import attrgetter
from typing import TYPE_CHECKING

from formats.row import MAX_KEY_LEN, MAX_VALUE_LEN
from lsm.clock import I64_MAX, I64_MIN
from lsm.errors import SourceRegressedError
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
    load_head,
    source_prefix,
    superseded_row,
)
from lsm.syskeys import SYSTEM_PREFIX, is_system

if TYPE_CHECKING:
    from lsm.db import DB
    from lsm.sources import Source, SourceRecord

BATCH_RECORDS = 10_000
TTL_BASES = ("commit", "event")
REMAP_COMPACT_EVERY = 256  # batches between two attempts at compacting a source's remap
_NOT_READ = object()


@dataclasses.dataclass
class _SourceState:
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    head: Binding | None | object = _NOT_READ  # the latest binding, cached (the handle is the only writer)
    batches: int | None = None  # bindings since the last compaction attempt (None: not counted yet)
    compact_due: bool = False  # the store's compaction asked while an ingest held the lock (rule 7)


_STATES_LOCK = threading.Lock()


def _state(db: DB, name: str) -> _SourceState:
    with _STATES_LOCK:
        states = db.__dict__.setdefault("_ingest_states", {})
        st = states.get(name)
        if st is None:
            st = states[name] = _SourceState()
        return st


def durable_head(db: DB, name: str) -> Binding | None:
    """The latest binding of `name`, from memory after the first reverse seek of this handle."""
    st = _state(db, name)
    if st.head is _NOT_READ:
        st.head = load_head(db, name)
    return st.head  # type: ignore[return-value]


def _runs(source: Source, partition: int, start: int, stop: int) -> Iterator[tuple[list[tuple], bool]]:
    """The records [start, stop) of `partition` as runs ``(tuples, simple)``; a tuple holds the fields of
    `SourceRecord` in order. `simple` says the run has consecutive offsets, one record each, and no
    transaction: every boundary in it is a cut. A `PartitionedLog` decodes whole runs (its `read_runs`);
    any other source's records are converted. The source's read is called here, not lazily, so what it
    checks at the call (arguments, an index pass) raises before anything of this call is written."""
    read_runs = getattr(source, "read_runs", None)
    if read_runs is not None:
        return ((run, not has_tx) for run, has_tx in read_runs(partition, start, stop))
    return _converted(source.read(partition, start, stop))


def _converted(it: Iterator[SourceRecord]) -> Iterator[tuple[list[tuple], bool]]:
    while True:
        run = [(r.partition, r.offset, r.key, r.value, r.ttl, r.event_ts, r.tx, r.tx_end) for r in islice(it, 512)]
        if not run:
            return
        yield run, False


class _Cursor:
    """One partition being read in this call: records [start, stop), read a run at a time."""

    __slots__ = ("partition", "pos", "stop", "_runs", "_run", "_i", "_simple", "blocked")

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
        self.blocked = False  # an incomplete transaction ends the partition for this call

    @property
    def done(self) -> bool:
        return self.blocked or (self._runs is None and self._i >= len(self._run))

    def take(self, budget: int, out: list[tuple]) -> None:
        """Append whole offsets and whole transactions to `out` until `budget` records are reached at a
        cut or the partition ends; advance `pos` to the last cut. The hot loop of ingest: a simple run
        is taken by slices, other records one at a time."""
        run, i, simple = self._run, self._i, self._simple
        cut = len(out)  # out[:cut] is committed to this batch
        limit = cut + budget
        pos = self.pos
        last = -1
        open_tx: set = set()
        append = out.append
        while True:
            if i >= len(run):
                nxt = next(self._runs, None) if self._runs is not None else None
                if nxt is None:
                    self._runs = None
                    self._run, self._i = [], 0
                    if open_tx:  # the trailing transaction waits; its records are read again later
                        del out[cut:]
                        self.blocked = True
                        self.pos = pos
                    else:
                        self.pos = self.stop
                    return
                run, simple = nxt
                i = 0
                if not run:
                    continue
            if simple and not open_tx:
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
            if off != last:
                if off < last or off < pos:
                    raise ValueError(
                        f"partition {self.partition}: offset {off} after {max(last, pos)}: offsets must increase"
                    )
                if not open_tx:  # a cut: between offsets, no transaction open
                    cut = len(out)
                    if last >= 0:
                        pos = last + 1
                    if cut >= limit:
                        break
                last = off
            append(rec)
            tx = rec[6]
            if tx is not None:
                if rec[7]:
                    open_tx.discard(tx)
                else:
                    open_tx.add(tx)
            i += 1
        self._run, self._i, self._simple = run, i, simple
        self.pos = pos


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


def _batch_rows(
    db: DB,
    source: Source,
    name: str,
    records: list[tuple],
    frontier: dict[int, int],
    ttl_base: str,
    head: Binding | None = None,
) -> Callable[[int, int], tuple[list[tuple], int]]:
    default_ttl = db.options.default_ttl
    v0 = db.options.sst_format_version == 0

    def rows_at(ts: int, seq: int) -> tuple[list[tuple], int]:
        rows, nbytes = resolve_tuples(source, records, ts, ttl_base, default_ttl, v0)
        out = list(rows.values())
        out.append((binding_key(name, seq), None, encode_binding(ts, frontier)))
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
) -> IngestStats:
    """Ingest what `source` holds beyond the durable frontier of `name`; see the module docstring."""
    check_name(name)
    if type(batch_records) is not int or batch_records < 1:
        raise ValueError(f"batch_records must be an int >= 1, got {batch_records!r}")
    if max_records is not None and (type(max_records) is not int or max_records < 0):
        raise ValueError(f"max_records must be None or an int >= 0, got {max_records!r}")
    if ttl_base not in TTL_BASES:
        raise ValueError(f"ttl_base must be one of {TTL_BASES}, got {ttl_base!r}")
    host(db).check_writable()
    st = _state(db, name)
    with st.lock:
        head = durable_head(db, name)
        frontier = dict(head.frontier) if head is not None else {}
        check_frontier(source, name, frontier)  # rule 1: nothing is written past a regression
        if st.batches is None:  # rule 7's count, as the stored remap has it (earlier handles' batches too)
            st.batches = bindings_since_compaction(db, name, REMAP_COMPACT_EVERY) if head is not None else 0
        parts = sorted(set(source.partitions()) | set(frontier))
        cursors = [_Cursor(source, p, frontier.get(p, 0), source.end(p)) for p in parts]
        records_total = batches = 0
        turn = 0
        while cursors:
            if max_records is not None and records_total >= max_records:
                break
            if should_stop is not None and should_stop():
                break
            budget = batch_records if max_records is None else min(batch_records, max_records - records_total)
            records: list[tuple] = []  # the fields of SourceRecord, in order
            n = len(cursors)
            for i in range(n):
                c = cursors[(turn + i) % n]
                if not c.done:
                    c.take(budget - len(records), records)
                if len(records) >= budget:
                    break
            turn += 1
            new_frontier = dict(frontier)
            for c in cursors:
                if c.pos > 0 or c.partition in frontier:
                    new_frontier[c.partition] = c.pos
            cursors = [c for c in cursors if not c.done]
            if new_frontier == frontier:  # every cursor ended without a cut: nothing to commit
                break
            rows_at = _batch_rows(db, source, name, records, new_frontier, ttl_base, st.head)  # type: ignore[arg-type]
            seq, ts = host(db).commit_rows(rows_at, sync)
            frontier = new_frontier
            st.head = Binding(ts, seq, frontier)
            records_total += len(records)
            batches += 1
            st.batches += 1
            if st.batches >= REMAP_COMPACT_EVERY or st.compact_due:
                st.batches, st.compact_due = 0, False
                _compact_remap_locked(db, name, host(db).now() - db.options.history_retention)
            if progress is not None:
                progress(IngestStats(records_total, batches, dict(frontier)))
        return IngestStats(records_total, batches, dict(frontier))


def compact_remap(db: DB, name: str, since: int) -> Remap | None:
    """Compact the stored remap of `name` at `since` (lsm.remap) when two or more bindings lie at or
    before it; reads only those bindings. Returns the compacted prefix, or None when nothing changed."""
    check_name(name)
    if type(since) is not int:
        raise TypeError(f"since is int milliseconds, not {type(since).__name__}")
    host(db).check_writable()
    with _state(db, name).lock:
        return _compact_remap_locked(db, name, since)


def compact_remaps(db: DB) -> None:
    """Compact every source's remap at ``since = now - history_retention``: what the store's compaction
    calls whenever it advances the history floor (the remap is compactable whenever the data is). A
    source whose ingest is running is marked instead, and that ingest compacts after its next batch, so
    compaction never waits for an ingest call."""
    since = host(db).now() - db.options.history_retention
    for name in list_sources(db):
        st = _state(db, name)
        if not st.lock.acquire(blocking=False):
            st.compact_due = True
            continue
        try:
            _compact_remap_locked(db, name, since)
        finally:
            st.lock.release()


def _compact_remap_locked(db: DB, name: str, since: int) -> Remap | None:
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
    host(db).commit_rows(rows_at, True)
    st.batches = 0  # what bindings_since_compaction counts from now on
    head = st.head
    if isinstance(head, Binding) and head.ts <= since:
        st.head = Binding(since, head.seq, head.frontier)
    return remap.compact(since)


__all__ = [
    "BATCH_RECORDS",
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

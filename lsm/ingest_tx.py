"""Transactions of an ingested source and the TEMP collection that holds the incomplete ones.

A record with a ``tx`` id belongs to a transaction; the record whose ``tx_end`` is set is its end marker.
``tx_end=True`` closes the records of ``tx`` read so far in the marker's partition; ``tx_end={p: n}``
closes a transaction of ``n`` records in each partition ``p`` (the marker included). A transaction is
*complete* once its marker and all its records lie below the frontier; it is *emitted* (its records
become visible, all in one binding) when it is complete (``tx_order="arrival"``) or when it and every
transaction whose marker comes earlier are complete (``tx_order="commit"``).

Marker order: the order in which ingest reads end markers. Markers read by one binding come after those
of earlier bindings and, among themselves, in (partition, offset) order; each gets an ordinal, counted
per source, that records this order durably (a bulk load is one binding, so it orders them as one
streaming batch would).

Which records a marker claims (its records), given the pending records of its ``tx`` in offset order
per partition: in its own partition, the records read before it (all of them for ``True``, the first
``n - 1`` for a count ``n``); in another partition ``q``, the first ``counts[q]`` not claimed by an
older marker, as they arrive. Claims are not stored: `TxState.load` replays the stored markers in
ordinal order over the stored records, which gives the claims the incremental path gave (both are
greedy in ordinal order over offset-ordered records).

TEMP rows live in the engine's reserved key space, beside the remap (lsm.remap_store), and are written in
the same atomic commit as the binding whose frontier moved past them::

    record key  = SYSTEM_PREFIX | b"temp\\x00" | name | 0x00 | b"r" | u64 partition | u64 offset | u32 n
    record value = msgpack [tx, key, value, ttl, event_ts, end]   (end: false, true or {partition: n})
    marker key  = SYSTEM_PREFIX | b"temp\\x00" | name | 0x00 | b"m" | u64 ordinal
    marker value = msgpack [partition, offset, n]                   (the record row of the marker)

``n`` numbers the transactional records that share one offset (a source may put several records at one
offset). When a transaction is emitted, its record rows and its marker row are deleted and its records
written as ordinary rows, in the commit of the binding that emits it.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING, Any

import msgpack

from lsm.errors import CorruptionError
from lsm.remap import Pending
from lsm.remap_store import check_name, host
from lsm.syskeys import SYSTEM_PREFIX

if TYPE_CHECKING:
    from lsm.db import DB

TX_ORDERS = ("arrival", "commit")
TEMP_PREFIX = SYSTEM_PREFIX + b"temp\x00"
_POS = struct.Struct(">QQI")  # partition, offset, n
_ORD = struct.Struct(">Q")

Pos = tuple[int, int, int]  # (partition, offset, n)


def temp_prefix(name: str) -> bytes:
    """The first key of every TEMP row of source `name`."""
    return TEMP_PREFIX + check_name(name) + b"\x00"


def record_key(name: str, pos: Pos) -> bytes:
    """The key of the TEMP row of the transactional record at `pos` of source `name`."""
    return temp_prefix(name) + b"r" + _POS.pack(*pos)


def marker_key(name: str, ordinal: int) -> bytes:
    """The key of the TEMP row of the end marker with `ordinal` of source `name`."""
    return temp_prefix(name) + b"m" + _ORD.pack(ordinal)


def _encode_end(end: Any) -> Any:
    return [sorted(end.items())] if isinstance(end, dict) else end


def _decode_end(end: Any) -> Any:
    return dict(map(tuple, end[0])) if isinstance(end, list) else end


def check_tx_record(source_name: str, rec: tuple) -> None:
    """Raise ValueError for a transactional record (tuple of the `SourceRecord` fields) whose transaction
    fields cannot be held (a generic source may hand anything)."""
    tx, end = rec[6], rec[7]
    where = f"{source_name}: partition {rec[0]} offset {rec[1]}"
    if type(tx) not in (int, str):
        raise ValueError(f"{where}: tx must be an int or a str, got {tx!r:.60}")
    if isinstance(end, dict):
        if not end or not all(type(p) is int and p >= 0 and type(n) is int and n >= 0 for p, n in end.items()):
            raise ValueError(f"{where}: tx_end counts must map partitions to records >= 0, got {end!r:.80}")
    elif end is not True and end is not False:
        raise ValueError(f"{where}: tx_end must be a bool or a dict, got {end!r:.60}")


@dataclasses.dataclass
class _Marker:
    ordinal: int
    pos: Pos
    tx: Any
    need: dict[int, int]  # partition -> records still missing (the marker's own partition: never filled later)
    claimed: list[Pos]

    @property
    def complete(self) -> bool:
        return not any(self.need.values())


@dataclasses.dataclass
class TxOutcome:
    """What one binding does to the transactions: the transactions it emits, in emission order (each
    as its records in (partition, offset) order), and TEMP rows to put ``(key, value)`` or delete
    (value None)."""

    emitted: list[list[tuple]]
    temp_ops: list[tuple[bytes, bytes | None]]
    transactions: int  # how many were emitted


class TxState:
    """The pending transactions of one source: its TEMP collection, in memory (loaded once per handle).

    `apply` computes a binding's outcome and moves the state past it; a caller whose commit then fails
    must drop the state (load it again)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.records: dict[Pos, tuple] = {}  # every pending record: pos -> SourceRecord fields
        self.pools: dict[Any, dict[int, list[Pos]]] = {}  # tx -> partition -> unclaimed positions, in order
        self.markers: dict[int, _Marker] = {}  # ordinal -> marker, pending ones only
        self.waiting: dict[Any, list[_Marker]] = {}  # tx -> its incomplete markers, oldest first
        self.next_ordinal = 0

    # -- loading -----------------------------------------------------------------------------------
    @classmethod
    def load(cls, db: DB, name: str, max_seq: int | None = None) -> TxState:
        """The stored TEMP collection of `name` (as of `max_seq`), claims replayed (module docstring)."""
        state = cls(name)
        pre = temp_prefix(name)
        markers: list[tuple[int, Pos]] = []
        ends: set[Pos] = set()
        for key, value in host(db).scan_raw(pre, pre[:-1] + b"\x01", False, max_seq):
            kind, body = key[len(pre) : len(pre) + 1], key[len(pre) + 1 :]
            try:
                if kind == b"r":
                    pos = _POS.unpack(body)
                    tx, k, v, ttl, ets, end = msgpack.unpackb(value)
                    state.records[pos] = (pos[0], pos[1], k, v, ttl, ets, tx, _decode_end(end))
                elif kind == b"m":
                    (ordinal,) = _ORD.unpack(body)
                    p, off, n = msgpack.unpackb(value)
                    markers.append((ordinal, (p, off, n)))
                    ends.add((p, off, n))
                else:
                    raise ValueError(f"unknown row kind {kind!r}")
            except Exception as e:  # noqa: BLE001 - struct and msgpack raise several types
                raise CorruptionError(f"TEMP row {key!r} of source {name!r}: undecodable ({e})") from None
        for pos, rec in state.records.items():  # key order: partition, offset, n
            if pos not in ends:
                state._pool(rec[6], pos[0]).append(pos)
        for ordinal, pos in markers:
            if pos not in state.records:
                raise CorruptionError(f"TEMP of source {name!r}: marker {ordinal} names a missing record {pos}")
            state._marker(ordinal, pos)
        state.next_ordinal = markers[-1][0] + 1 if markers else 0
        return state

    # -- the claiming rules ------------------------------------------------------------------------
    def _pool(self, tx: Any, partition: int) -> list[Pos]:
        return self.pools.setdefault(tx, {}).setdefault(partition, [])

    def _take(self, tx: Any, partition: int, n: int, before: Pos | None) -> list[Pos]:
        """Claim up to `n` unclaimed records of `tx` in `partition` (only those before `before` if given)."""
        pool = self.pools.get(tx, {}).get(partition)
        if not pool or n <= 0:
            return []
        k = 0
        while k < len(pool) and k < n and (before is None or pool[k] < before):
            k += 1
        taken, pool[:] = pool[:k], pool[k:]
        if not pool:
            del self.pools[tx][partition]
            if not self.pools[tx]:
                del self.pools[tx]
        return taken

    def _marker(self, ordinal: int, pos: Pos) -> _Marker:
        rec = self.records[pos]
        tx, end, p = rec[6], rec[7], pos[0]
        if end is True:
            claimed = self._take(tx, p, len(self.records), pos)
            need: dict[int, int] = {}
        else:
            claimed = self._take(tx, p, end.get(p, 0) - 1, pos)
            need = {p: max(0, end.get(p, 0) - 1 - len(claimed))}  # never filled later: records after
            for q, n in sorted(end.items()):  # the marker are not its own
                if q != p:
                    got = self._take(tx, q, n, None)
                    claimed += got
                    need[q] = n - len(got)
        m = _Marker(ordinal, pos, tx, need, claimed + [pos])
        self.markers[ordinal] = m
        if not m.complete:
            self.waiting.setdefault(tx, []).append(m)
        return m

    def _offer(self, pos: Pos, tx: Any) -> _Marker | None:
        """Give a newly read record to the oldest incomplete marker of `tx` that still needs its partition."""
        for m in self.waiting.get(tx, ()):
            if m.pos[0] != pos[0] and m.need.get(pos[0], 0) > 0:
                m.need[pos[0]] -= 1
                m.claimed.append(pos)
                if m.complete:
                    self.waiting[tx].remove(m)
                    if not self.waiting[tx]:
                        del self.waiting[tx]
                return m
        return None

    # -- one binding -------------------------------------------------------------------------------
    def apply(self, records: list[tuple], tx_order: str) -> TxOutcome:
        """Read the transactional `records` (SourceRecord fields, in (partition, offset) order, all below
        the new frontier) and emit what becomes emittable: the binding's outcome."""
        self._new: set[Pos] = set()
        self._out: list[list[tuple]] = []
        self._gone: set[Pos] = set()
        self._ops: list[tuple[bytes, bytes | None]] = []
        last: tuple[int, int] | None = None
        n = 0
        self._emit(tx_order)  # complete ones left waiting by an earlier call in commit order
        for rec in records:
            p, off = rec[0], rec[1]
            n = n + 1 if last == (p, off) else 0
            last = (p, off)
            pos = (p, off, n)
            self.records[pos] = rec
            self._new.add(pos)
            if rec[7] is not False and rec[7] is not None:
                m = self._marker(self.next_ordinal, pos)
                self.next_ordinal += 1
                if m.complete:
                    self._emit(tx_order)
            else:
                m2 = self._offer(pos, rec[6])
                if m2 is None:
                    self._pool(rec[6], p).append(pos)
                elif m2.complete:
                    self._emit(tx_order)
        ops = self._ops
        for pos in sorted(self._new - self._gone):
            rec = self.records[pos]
            value = msgpack.packb([rec[6], rec[2], rec[3], rec[4], rec[5], _encode_end(rec[7])])
            ops.append((record_key(self.name, pos), value))
        for ordinal, m in self.markers.items():
            if m.pos in self._new:
                ops.append((marker_key(self.name, ordinal), msgpack.packb(list(m.pos))))
        return TxOutcome(self._out, ops, len(self._out))

    def _emit(self, tx_order: str) -> None:
        """Emit every transaction that may be: complete ones (arrival), or the complete ones at the head
        of the marker order (commit)."""
        ready = [o for o, m in self.markers.items() if m.complete]  # (ordinal order: insertion order)
        if tx_order == "commit":
            head = [o for o, m in self.markers.items() if not m.complete][:1]
            ready = [o for o in ready if not head or o < head[0]]
        for ordinal in ready:
            m = self.markers.pop(ordinal)
            if m.pos not in self._new:
                self._ops.append((marker_key(self.name, ordinal), None))
            recs = []
            for pos in sorted(m.claimed):
                recs.append(self.records.pop(pos))
                self._gone.add(pos)
                if pos not in self._new:
                    self._ops.append((record_key(self.name, pos), None))
            self._out.append(recs)

    # -- reporting ---------------------------------------------------------------------------------
    @property
    def pending(self) -> Pending:
        """Records held in TEMP, and the transactions they form: one per pending end marker, plus one
        per transaction id with records no marker claimed yet (its marker is still unread)."""
        return Pending(len(self.records), len(self.markers) + len(self.pools))


def load_pending(db: DB, name: str, max_seq: int | None = None) -> Pending:
    """`TxState.load(...).pending`: what the TEMP collection of `name` holds (as of `max_seq`)."""
    return TxState.load(db, name, max_seq).pending


__all__ = [
    "TEMP_PREFIX",
    "TX_ORDERS",
    "TxOutcome",
    "TxState",
    "check_tx_record",
    "load_pending",
    "marker_key",
    "record_key",
    "temp_prefix",
]

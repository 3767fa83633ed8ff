"""How the remap of an ingested source is stored: ordinary rows in the engine's reserved key space.

Each ingest batch adds one binding row to the SAME WriteBatch (one WAL record, one seq, one ts) as the
data rows it accounts for, so a binding is durable exactly when its rows are, and it survives flush,
compaction (local, worker process, Spark) and restart like any row. Keys sort by source, then by seq, so
the latest binding of a source is one reverse seek (O(log n)) and never a scan of the remap::

    binding key  = SYSTEM_PREFIX | b"remap\\x00" | name (UTF-8, no NUL) | 0x00 | u64 seq (big-endian, >= 1)
    since key    = SYSTEM_PREFIX | b"remap\\x00" | name (UTF-8, no NUL) | 0x00 | u64 0
    binding value = msgpack array [ts: int ms, partitions: array of int, offsets: array of int]
                    (partitions ascending; offsets[i] = next offset to read of partitions[i])
    since value   = msgpack array [since: int ms]

SYSTEM_PREFIX is lsm.syskeys.SYSTEM_PREFIX (``ff ff ff ff 'l' 's' 'm' 00``). The rows carry no TTL.
A binding committed at the same time (ms) as the one before it replaces it: its commit also holds a
tombstone for the earlier binding row, so the store keeps one binding per time (`superseded_row`).
Remap compaction is one more commit of system rows only: tombstones for the consolidated bindings, the
newest of them written again with ts = since, and the since row.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

import msgpack

from lsm.errors import CorruptionError, UnknownSourceError
from lsm.remap import Binding, Remap
from lsm.syskeys import SYSTEM_PREFIX

if TYPE_CHECKING:
    from lsm.db import DB


class SystemRowsHost(Protocol):
    """What the remap store and ingest need from the DB to read and commit the engine's own rows in the
    reserved key space (``db.engine``, `lsm.db.Engine`, implements it)."""

    def check_writable(self) -> None:
        """Raise if writes are refused (closed, read-only, failed state)."""

    def now(self) -> int:
        """The DB clock's time (ms)."""

    def commit_rows(
        self, rows_at: Callable[[int, int], tuple[list[tuple], int]], sync: bool, at: tuple[str, int] | None = None
    ) -> tuple[int, int]:
        """Commit the (key, expire_ts, value) rows ``rows_at(ts, seq)`` builds; return (seq, ts). `at` =
        (source, ts): commit at the source's own time ts (ClockError if the store's clock is past it)."""

    def scan_raw(
        self, start: bytes, end: bytes, reverse: bool = False, max_seq: int | None = None, entries: bool = False
    ) -> Iterator:
        """(key, value) rows in [start, end), system keys and expired rows included (`Entry` rows with their
        seq if `entries`)."""


def host(db: DB) -> SystemRowsHost:
    """The `SystemRowsHost` of `db`."""
    return db.engine

REMAP_PREFIX = SYSTEM_PREFIX + b"remap\x00"
SEQ = struct.Struct(">Q")
MAX_NAME_BYTES = 200


def check_name(name: object) -> bytes:
    """The UTF-8 bytes of a source name; TypeError/ValueError for a name that cannot be stored."""
    if not isinstance(name, str):
        raise TypeError(f"a source name is a str, not {type(name).__name__}")
    raw = name.encode("utf-8")
    if not raw or len(raw) > MAX_NAME_BYTES or b"\x00" in raw:
        raise ValueError(f"a source name must be 1-{MAX_NAME_BYTES} UTF-8 bytes without NUL, got {name!r}")
    return raw


def source_prefix(name: str) -> bytes:
    """The first key of every row of source `name` (bindings and since)."""
    return REMAP_PREFIX + check_name(name) + b"\x00"


def binding_key(name: str, seq: int) -> bytes:
    """The key of the binding committed at `seq` of source `name`."""
    return source_prefix(name) + SEQ.pack(seq)


def since_key(name: str) -> bytes:
    """The key of the since row of source `name` (sorts before its bindings)."""
    return source_prefix(name) + SEQ.pack(0)


def encode_binding(ts: int, frontier: dict[int, int]) -> bytes:
    """The value of a binding row: msgpack [ts, partitions ascending, their next offsets]."""
    parts = sorted(frontier)
    return msgpack.packb([ts, parts, [frontier[p] for p in parts]])


def superseded_row(name: str, head: Binding | None, ts: int) -> tuple[bytes, None, None] | None:
    """The tombstone that merges `head` into a new binding of `name` committed at `ts`, when both share
    the time (one binding per time, the newest wins), else None. It goes into the new binding's commit."""
    if head is None or head.ts != ts:
        return None
    return (binding_key(name, head.seq), None, None)


def encode_since(since: int) -> bytes:
    """The value of a since row: msgpack [since]."""
    return msgpack.packb([since])


def _split_key(key: bytes) -> tuple[str, int]:
    body = key[len(REMAP_PREFIX) :]
    if len(body) < 10 or body[-9] != 0:
        raise CorruptionError(f"remap row with a malformed key {key!r}")
    return body[:-9].decode("utf-8"), SEQ.unpack(body[-8:])[0]


def decode_binding(key: bytes, value: bytes) -> Binding:
    """The Binding a binding row holds (its seq from the key); CorruptionError if undecodable."""
    _name, seq = _split_key(key)
    try:
        ts, parts, offs = msgpack.unpackb(value)
        frontier = dict(zip(parts, offs, strict=True))
    except Exception as e:  # noqa: BLE001 - msgpack raises several unrelated types
        raise CorruptionError(f"remap row {key!r}: undecodable binding ({e})") from None
    return Binding(ts, seq, frontier)


def decode_since(key: bytes, value: bytes) -> int:
    """The since (ms) a since row holds; CorruptionError if undecodable."""
    try:
        (since,) = msgpack.unpackb(value)
    except Exception as e:  # noqa: BLE001
        raise CorruptionError(f"remap row {key!r}: undecodable since ({e})") from None
    return since


def _rows(
    db: DB, start: bytes, end: bytes, reverse: bool = False, max_seq: int | None = None
) -> Iterator[tuple]:
    return host(db).scan_raw(start, end, reverse, max_seq)


def load_head(db: DB, name: str) -> Binding | None:
    """The newest binding of `name` (one reverse seek), or None."""
    pre = source_prefix(name)
    for key, value in _rows(db, pre + SEQ.pack(1), pre[:-1] + b"\x01", reverse=True):
        return decode_binding(key, value)
    return None


def load_remap(db: DB, name: str, max_seq: int | None = None, upper: int | None = None) -> Remap:
    """Every binding of `name` (as of `max_seq`, default latest), with its since and the given `upper`.
    UnknownSourceError if none."""
    pre = source_prefix(name)
    since = None
    bindings = []
    for key, value in _rows(db, pre, pre[:-1] + b"\x01", max_seq=max_seq):
        if key == pre + SEQ.pack(0):
            since = decode_since(key, value)
        else:
            bindings.append(decode_binding(key, value))
    if not bindings:
        raise UnknownSourceError(
            f"{db.path}: no ingested source named {name!r} (sources: {list_sources(db)})"
        )
    remap = Remap(name, bindings, since, upper)
    from lsm.ingest_tx import load_pending  # (it builds on this module)

    remap.pending = load_pending(db, name, max_seq)
    return remap


def list_sources(db: DB) -> list[str]:
    """Names of the sources with a remap, ascending: one seek per source, never a scan of the remaps."""
    names = []
    start = REMAP_PREFIX
    end = REMAP_PREFIX[:-1] + b"\x01"
    while True:
        row = next(iter(_rows(db, start, end)), None)
        if row is None:
            return names
        name, _seq = _split_key(row[0])
        names.append(name)
        start = REMAP_PREFIX + name.encode("utf-8") + b"\x01"  # past every key of this source


def bindings_since_compaction(db: DB, name: str, limit: int) -> int:
    """How many bindings of `name` were stored after its remap was last compacted (all of them if it never
    was), counting to `limit` at most: the bindings whose seq is above the seq of the commit that wrote the
    since row. Reads the since row and at most `limit` bindings, so it survives restarts at a bounded cost."""
    since_seq = 0
    for e in host(db).scan_raw(since_key(name), binding_key(name, 1), entries=True):
        since_seq = e.seq
    n = 0
    for _row in _rows(db, binding_key(name, since_seq + 1), source_prefix(name)[:-1] + b"\x01"):
        n += 1
        if n >= limit:
            break
    return n


def consolidation_ops(
    remap: Remap, since: int, stored: list[Binding] | None = None
) -> list[tuple[bytes, int | None, bytes | None]]:
    """The system rows that compact the stored `remap` at `since` (empty when nothing changes).

    `stored`: the binding rows as stored, when they may hold several bindings of one ts (a bulk load's,
    or a store written before same-ts bindings were merged): `remap` shows only the newest of those, and
    the others must be deleted too, or they would lie before `since`."""
    if remap.since is not None and since <= remap.since:
        return []
    after = remap.compact(since)
    old = remap.bindings() if stored is None else stored
    ops: list[tuple[bytes, int | None, bytes | None]] = []
    kept_first = after.bindings()[0] if len(after) else None
    for b in old:
        if b.ts > since:
            break
        if kept_first is not None and b.seq == kept_first.seq:
            ops.append((binding_key(remap.name, b.seq), None, encode_binding(since, b.frontier)))
        else:
            ops.append((binding_key(remap.name, b.seq), None, None))
    ops.append((since_key(remap.name), None, encode_since(since)))
    return ops


__all__ = [
    "MAX_NAME_BYTES",
    "REMAP_PREFIX",
    "binding_key",
    "bindings_since_compaction",
    "check_name",
    "consolidation_ops",
    "decode_binding",
    "encode_binding",
    "list_sources",
    "load_head",
    "load_remap",
    "since_key",
    "source_prefix",
    "superseded_row",
]

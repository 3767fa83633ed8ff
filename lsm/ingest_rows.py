"""Source records to rows (rules 5 and 6 of lsm.ingest): a record's TTL counted from the commit or from its
event time, the last record of a key winning, and the checks that refuse a record the store cannot hold.
Shared by streaming ingest, the bulk-load tasks (lsm.bulk_task) and the transactions a batch emits."""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import TYPE_CHECKING

from formats.row import MAX_KEY_LEN, MAX_VALUE_LEN
from lsm.clock import I64_MAX, I64_MIN
from lsm.ingest_tx import TxOutcome, check_tx_record
from lsm.options import NO_TTL, check_ttl
from lsm.syskeys import SYSTEM_PREFIX, is_system

if TYPE_CHECKING:
    from lsm.sources import Source, SourceRecord


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

    Shared by streaming ingest and the bulk-load tasks (lsm.bulk_task): rules 5 and 6 of lsm.ingest."""
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


__all__ = ["emitted_records", "resolve_records", "resolve_tuples", "split_tx"]

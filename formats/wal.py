"""WAL record codec.

A WAL segment is a sequence of records, one per commit (a put, a delete or a whole write batch)::

    | u32 payload_len | u64 xxh3_64(payload) | payload |

    payload = | u64 seq | i64 ts | u32 count | count x row |

Rows use the v1 row layout of `formats.row` with the features RowFlags and TimeToLive
(``| u16 key_len | key | u8 flags | i64 expire_ts | u32 value_len | value |``); every row of a record
shares the record's seq and ts, which is what makes a batch atomic: it is replayed whole or not at all.

Torn tails: a record whose header or payload runs past the end of the segment is what a process killed
mid-append (or a disk that filled mid-record) leaves; `decode_segment` stops there and reports where. The
last record being COMPLETE but failing its checksum is not what an interrupted append leaves: it is
corruption (`CorruptionError`) unless the caller opts into dropping it (``drop_corrupted_tail=True``, the
engine's ``wal_recovery_mode="tolerate_corrupted_tail"``). A checksum failure with more records after it is
always corruption. So is a "torn" record followed
by a complete, checksum-valid record: a torn tail is a prefix of one append, so what looks torn there is a
damaged length field, and stopping would silently drop the commits after it. (A torn record whose own
payload embeds a whole valid record would be misreported as corruption: the price of not having a header
checksum.)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import xxhash

from formats.errors import CorruptionError
from formats.row import RowFeature, codec_for

HEADER = struct.Struct(">IQ")
COMMIT = struct.Struct(">QqI")
ROW_CODEC = codec_for(1, (RowFeature.RowFlags, RowFeature.TimeToLive))
_xxh3 = xxhash.xxh3_64_intdigest


class WalRecord(NamedTuple):
    """One decoded WAL record: its offset in the segment, its commit seq and ts, and its rows."""

    offset: int
    seq: int
    ts: int
    rows: list  # (key, seq, ts, expire_ts, value) tuples, value None = delete


def encode_record(seq: int, ts: int, ops: Sequence[tuple]) -> bytes:
    """Encode one commit; `ops` are ``(key, expire_ts, value)`` with value None for a delete."""
    parts: list = [COMMIT.pack(seq, ts, len(ops))]
    enc = ROW_CODEC.encode_parts
    for key, expire_ts, value in ops:
        enc((key, None, None, expire_ts, value), parts)
    payload = b"".join(parts)
    return HEADER.pack(len(payload), _xxh3(payload)) + payload


PUT_HEAD = struct.Struct(">QqIH")  # seq, ts, count = 1, key_len
PUT_ATTRS = struct.Struct(">BqI")  # RowFlags, expire_ts, value_len


def encode_put(seq: int, ts: int, key: bytes, expire_ts: int | None, value: bytes) -> bytes:
    """`encode_record(seq, ts, [(key, expire_ts, value)])` for one put, byte for byte, minus the
    generic row codec's overhead (the write path's hot spot)."""
    if expire_ts is None:
        attrs = PUT_ATTRS.pack(0, 0, len(value))
    else:
        attrs = PUT_ATTRS.pack(2, expire_ts, len(value))
    payload = b"".join((PUT_HEAD.pack(seq, ts, 1, len(key)), key, attrs, value))
    return HEADER.pack(len(payload), _xxh3(payload)) + payload


def decode_payload(payload: bytes, path: str, offset: int) -> tuple[int, int, list]:
    """(seq, ts, rows) of one record payload; CorruptionError naming `path` and `offset` if malformed."""
    try:
        seq, ts, count = COMMIT.unpack_from(payload, 0)
        pos = COMMIT.size
        rows = []
        dec = ROW_CODEC.decode_from
        for _ in range(count):
            (key, _s, _t, exp, value), pos = dec(payload, pos, path)
            rows.append((key, seq, ts, exp, value))
    except (struct.error, CorruptionError) as e:
        raise CorruptionError(path, offset, f"malformed WAL record: {e}") from None
    if pos != len(payload):
        raise CorruptionError(path, offset, "WAL record has trailing bytes")
    return seq, ts, rows


def decode_segment(
    buf: bytes, path: str = "<bytes>", drop_corrupted_tail: bool = False
) -> tuple[list[WalRecord], int | None]:
    """Decode a whole segment; return (records, torn_offset) where torn_offset is None if intact.

    drop_corrupted_tail=True also takes a complete last record with a bad checksum as a torn tail."""
    out: list[WalRecord] = []
    pos = 0
    end = len(buf)
    while pos < end:
        if pos + HEADER.size > end:
            return out, pos
        length, check = HEADER.unpack_from(buf, pos)
        body_at = pos + HEADER.size
        if body_at + length > end:
            _raise_if_records_follow(buf, pos, path)
            return out, pos
        payload = buf[body_at : body_at + length]
        if _xxh3(payload) != check:
            if body_at + length == end and drop_corrupted_tail:
                _raise_if_records_follow(buf, pos, path)
                return out, pos
            if body_at + length == end:
                raise CorruptionError(
                    path, pos, "WAL record checksum mismatch in the complete last record (damaged, not torn)"
                )
            raise CorruptionError(path, pos, "WAL record checksum mismatch")
        seq, ts, rows = decode_payload(payload, path, pos)
        out.append(WalRecord(pos, seq, ts, rows))
        pos = body_at + length
    return out, None


RECORD_PUT_HEAD = struct.Struct(">IQQqIH")  # HEADER then PUT_HEAD: the fixed start of a one-row record


def segment_rows(buf: bytes, path: str = "<bytes>") -> list[tuple]:
    """Every row of an intact segment, in commit order: ``[row for r in decode_segment(buf)[0] for
    row in r.rows]``, decoded faster (a memtable flush rebuilds its rows from its segment this way).

    One-row records (puts) are decoded inline, checksum included; anything else (a batch, a delete, a
    torn tail, a bad checksum) goes through the generic decoder, with its checks and errors."""
    rows = _uniform_put_rows(buf)
    if rows is not None:
        return rows
    rows = []
    append = rows.append
    head = RECORD_PUT_HEAD.unpack_from
    put_attrs = PUT_ATTRS.unpack_from
    xxh3 = _xxh3
    view = memoryview(buf)
    fixed = RECORD_PUT_HEAD.size
    min_len = PUT_HEAD.size + PUT_ATTRS.size
    pos = 0
    end = len(buf)
    while pos < end:
        if pos + fixed > end:
            break
        length, check, seq, ts, count, klen = head(buf, pos)
        body = pos + HEADER.size
        nxt = body + length
        if nxt > end or xxh3(view[body:nxt]) != check:
            break
        if count == 1 and length >= min_len:
            kat = pos + fixed
            kend = kat + klen
            if kend + PUT_ATTRS.size <= nxt:
                flags, exp, vlen = put_attrs(buf, kend)
                vat = kend + PUT_ATTRS.size
                if vat + vlen == nxt and not flags & ~2:
                    append((buf[kat:kend], seq, ts, exp if flags else None, buf[vat:nxt]))
                    pos = nxt
                    continue
        rows += decode_payload(buf[body:nxt], path, pos)[2]
        pos = nxt
    view.release()
    if pos == end:
        return rows
    # something the fast loop does not take: the generic decoder reports it (or drops a torn tail)
    records, _torn = decode_segment(buf, path)
    return [row for r in records for row in r.rows]


_UNIFORM_MIN_RECORDS = 64  # below this the loop is as fast, and no caller pays for importing numpy


def _uniform_put_rows(buf: bytes) -> list[tuple] | None:
    """`segment_rows` of a segment made only of intact puts of one key length and one value length
    (one record size: a writer of fixed-size rows), decoded as one numpy record array, checksums
    included; None for anything else (the loop in `segment_rows` takes it, with its checks)."""
    end = len(buf)
    if end < RECORD_PUT_HEAD.size * _UNIFORM_MIN_RECORDS:
        return None
    length, _check, _seq, _ts, count, klen = RECORD_PUT_HEAD.unpack_from(buf, 0)
    size = HEADER.size + length
    vlen = length - PUT_HEAD.size - klen - PUT_ATTRS.size
    if count != 1 or end % size or vlen < 0:
        return None
    import numpy as np

    fields = [("len", ">u4"), ("check", ">u8"), ("seq", ">u8"), ("ts", ">i8"), ("count", ">u4")]
    fields += [("klen", ">u2"), ("key", f"V{klen}"), ("flags", "u1"), ("exp", ">i8"), ("vlen", ">u4")]
    if vlen:
        fields.append(("value", f"V{vlen}"))
    recs = np.frombuffer(buf, np.dtype(fields))
    flags = recs["flags"]
    if not (
        (recs["len"] == length).all()
        and (recs["count"] == 1).all()
        and (recs["klen"] == klen).all()
        and (recs["vlen"] == vlen).all()
        and not (flags & ~np.uint8(2)).any()
    ):
        return None
    payloads = np.frombuffer(buf, np.dtype([("head", f"V{HEADER.size}"), ("payload", f"V{length}")]))
    if list(map(_xxh3, payloads["payload"].tolist())) != recs["check"].tolist():
        return None  # a damaged record: the loop finds it and says how
    n = len(recs)
    if flags.any():
        exps = [e if f else None for e, f in zip(recs["exp"].tolist(), flags.tolist(), strict=True)]
    else:
        exps = [None] * n
    values = recs["value"].tolist() if vlen else [b""] * n
    return list(zip(recs["key"].tolist(), recs["seq"].tolist(), recs["ts"].tolist(), exps, values, strict=True))


def _raise_if_records_follow(buf: bytes, pos: int, path: str) -> None:
    """Raise CorruptionError if a complete, checksum-valid record starts anywhere after `pos`.

    Called only when the record at `pos` looks torn: one header probe per byte of the tail, and a checksum
    only where the probed length fits. The bytes hashed are capped at a few times the tail, so a tail of
    pathological values cannot make recovery quadratic; past the cap the record is taken as torn.
    """
    end = len(buf)
    unpack = HEADER.unpack_from
    budget = 8 * (end - pos) + (1 << 20)
    for q in range(pos + 1, end - HEADER.size - COMMIT.size + 1):
        length, check = unpack(buf, q)
        body = q + HEADER.size
        if COMMIT.size <= length <= end - body:
            budget -= length
            if budget < 0:
                return
            if _xxh3(buf[body : body + length]) == check:
                raise CorruptionError(
                    path, pos, f"WAL record is damaged, not torn: a complete record follows at offset {q}"
                )

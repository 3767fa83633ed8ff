"""Partition log codec: the files of a `lsm.sources.PartitionedLog` (one append-only file per partition).

All integers are big-endian and fixed width. A partition file is a header followed by records::

    file   = | magic "LSMP" | u16 format_version = 1 | record* |
    record = | u32 payload_len | u64 xxh3_64(payload) | u32 head_check | payload |
             head_check = low 32 bits of xxh3_64(the 12 bytes before it)
    payload = msgpack map (str keys, bytes as msgpack bin):
        "k"   bin              key, 1..65535 bytes (required)
        "v"   bin | nil        value; nil = delete (required)
        "ttl" int >= 0         time to live, ms (omitted: none)
        "ets" int              event timestamp, ms (omitted: none)
        "tx"  int | str        transaction id (omitted: none)
        "end" true             this record closes its transaction (omitted: false; needs "tx")

A record's offset is its index in the file (0, 1, 2, ...); it is not stored. The header checksum makes the
length trustworthy on its own, so reading needs no guessing (unlike a WAL without one):

- fewer than 16 bytes left, or a payload that runs past the end of the file: a torn tail, what a producer
  mid-append leaves (a reader sees a prefix of one write(2)). It is not yet a record; reading stops there
  and reads it once the rest arrives;
- a complete header whose `head_check` fails, or a complete payload whose checksum fails, or a payload
  that is not a well-formed map: corruption, reported at the record's byte offset. Never skipped.

Deliberate simplifications: no per-record offsets or timestamps (the index is the offset, the store's
commit ts is the time), no compression, no segment rolling (one file per partition grows forever).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import msgpack
import xxhash

from formats.errors import CorruptionError, FormatVersionError
from formats.row import MAX_KEY_LEN, check_key, check_value

# DO NOT CHANGE: stored on disk.
MAGIC = b"LSMP"
FORMAT_VERSION = 1
FILE_HEADER = struct.Struct(">4sH")
RECORD_HEADER = struct.Struct(">IQI")  # payload_len, xxh3_64(payload), head_check
_LEN_AND_SUM = struct.Struct(">IQ")
MAX_PAYLOAD = 0x7FFFFFFF
_FIELDS = frozenset(("k", "v", "ttl", "ets", "tx", "end"))
_xxh3 = xxhash.xxh3_64_intdigest
_unpack_header = RECORD_HEADER.unpack_from
_unpackb = msgpack.unpackb


class LogEntry(NamedTuple):
    """One decoded record. `pos` is the byte offset of its header in the file, `end` the byte after it."""

    pos: int
    end: int
    key: bytes
    value: bytes | None
    ttl: int | None
    event_ts: int | None
    tx: int | str | None
    tx_end: bool


def encode_file_header() -> bytes:
    """The bytes every partition file starts with."""
    return FILE_HEADER.pack(MAGIC, FORMAT_VERSION)


def check_file_header(buf: bytes, path: str) -> None:
    """Raise unless `buf` (at least `FILE_HEADER.size` bytes) is a partition file header this code reads."""
    if len(buf) < FILE_HEADER.size:
        raise CorruptionError(path, 0, "partition log file header is truncated")
    magic, version = FILE_HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptionError(path, 0, f"not a partition log file (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise FormatVersionError(path, f"partition log format version {version} is not supported")


def encode_record(
    key: bytes,
    value: bytes | None,
    ttl: int | None = None,
    event_ts: int | None = None,
    tx: int | str | None = None,
    tx_end: bool = False,
) -> bytes:
    """Encode one record (header and payload); raise TypeError/ValueError on fields the format cannot hold."""
    check_key(key)
    if value is not None:
        check_value(value)
    d: dict = {"k": key, "v": value}
    if ttl is not None:
        if type(ttl) is not int:
            raise TypeError(f"ttl must be an int (ms) or None, not {ttl!r}")
        if ttl < 0:
            raise ValueError(f"ttl must be >= 0 ms, got {ttl}")
        d["ttl"] = ttl
    if event_ts is not None:
        if type(event_ts) is not int:
            raise TypeError(f"event_ts must be an int (ms) or None, not {event_ts!r}")
        d["ets"] = event_ts
    if tx is not None:
        if type(tx) not in (int, str):
            raise TypeError(f"tx must be an int, a str or None, not {type(tx).__name__}")
        d["tx"] = tx
    if tx_end:
        if tx is None:
            raise ValueError("tx_end needs a tx: only a transaction can be closed")
        d["end"] = True
    try:
        payload = msgpack.packb(d, use_bin_type=True)
    except (OverflowError, ValueError) as e:  # ints beyond 64 bits, strings too long
        raise ValueError(f"record cannot be encoded: {e}") from None
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    head = _LEN_AND_SUM.pack(len(payload), _xxh3(payload))
    return head + (_xxh3(head) & 0xFFFFFFFF).to_bytes(4, "big") + payload


def record_extent(buf: bytes, pos: int, base: int, path: str, verify: bool = True) -> int | None:
    """Return the end (index into `buf`) of the complete record whose header is at `buf[pos]`, or None if
    it is torn. File offsets are `base + pos`.

    Checks the header checksum and, with `verify`, the payload checksum (raising CorruptionError at the
    record's file offset); does not decode the payload.
    """
    if pos + 16 > len(buf):
        return None
    length, check, head_check = _unpack_header(buf, pos)
    if _xxh3(buf[pos : pos + 12]) & 0xFFFFFFFF != head_check:
        raise CorruptionError(path, base + pos, "partition log record header checksum mismatch")
    end = pos + 16 + length
    if end > len(buf):
        return None
    if verify and _xxh3(buf[pos + 16 : end]) != check:
        raise CorruptionError(path, base + pos, "partition log record checksum mismatch")
    return end


def decode_fields(buf: bytes, pos: int, base: int, path: str) -> tuple | None:
    """The record at `buf[pos]` as ``(end, key, value, ttl, event_ts, tx, tx_end)`` (`end` indexes `buf`),
    or None if it is torn (incomplete). File offsets are `base + pos`: the hot path of every reader.

    Raises CorruptionError(path, offset) for a damaged record and FormatVersionError for a field this
    code does not know.
    """
    if pos + 16 > len(buf):
        return None
    length, check, head_check = _unpack_header(buf, pos)
    if _xxh3(buf[pos : pos + 12]) & 0xFFFFFFFF != head_check:
        raise CorruptionError(path, base + pos, "partition log record header checksum mismatch")
    end = pos + 16 + length
    if end > len(buf):
        return None
    payload = buf[pos + 16 : end]
    if _xxh3(payload) != check:
        raise CorruptionError(path, base + pos, "partition log record checksum mismatch")
    try:
        d = _unpackb(payload, raw=False)
    except Exception as e:  # msgpack raises several unrelated types for malformed input
        raise CorruptionError(path, base + pos, f"malformed partition log record: {e}") from None
    if type(d) is not dict or "k" not in d or "v" not in d:
        raise CorruptionError(path, base + pos, "partition log record is not a map with 'k' and 'v'")
    if len(d) > 2 and not d.keys() <= _FIELDS:
        unknown = sorted(map(str, d.keys() - _FIELDS))
        raise FormatVersionError(path, f"record at offset {base + pos} has unknown fields {unknown}")
    key = d["k"]
    value = d["v"]
    if (
        type(key) is not bytes
        or not 0 < len(key) <= MAX_KEY_LEN
        or (value is not None and type(value) is not bytes)
    ):
        raise CorruptionError(path, base + pos, f"partition log record has a bad key or value: {d!r}")
    if len(d) == 2:
        return end, key, value, None, None, None, False
    ttl, ets, tx, tx_end = d.get("ttl"), d.get("ets"), d.get("tx"), d.get("end", False)
    if (
        not (ttl is None or (type(ttl) is int and ttl >= 0))
        or not (ets is None or type(ets) is int)
        or not (tx is None or type(tx) in (int, str))
        or tx_end is not True
        and tx_end is not False
        or (tx_end and tx is None)
    ):
        raise CorruptionError(path, base + pos, f"partition log record has fields of the wrong type: {d!r}")
    return end, key, value, ttl, ets, tx, tx_end


def decode_record(buf: bytes, pos: int, base: int, path: str) -> LogEntry | None:
    """Decode the record at `buf[pos]` into a `LogEntry`; None if it is torn (see `decode_fields`)."""
    f = decode_fields(buf, pos, base, path)
    if f is None:
        return None
    return LogEntry(base + pos, base + f[0], *f[1:])


def decode_records(buf: bytes, base: int = 0, path: str = "<bytes>") -> tuple[list[LogEntry], int]:
    """Decode every complete record of `buf` (the bytes of a file from offset `base`, after the file
    header); return (entries, index into `buf` where the torn tail, or the end, starts)."""
    out: list[LogEntry] = []
    pos = 0
    while pos < len(buf):
        e = decode_record(buf, pos, base, path)
        if e is None:
            break
        out.append(e)
        pos = e.end - base
    return out, pos


__all__ = [
    "FILE_HEADER",
    "FORMAT_VERSION",
    "MAGIC",
    "RECORD_HEADER",
    "LogEntry",
    "check_file_header",
    "decode_fields",
    "decode_record",
    "decode_records",
    "encode_file_header",
    "encode_record",
    "record_extent",
]

"""Segment codec: one immutable object of a partitioned log kept on an object store.

A local partition file is appended to in place (formats.log); an object is written once. On an object
store a partition is therefore a chain of segment objects, each holding the records of one flush of a
writer, named by the offset of its first record (``<partition>/<first offset, 20 digits>.seg``). All
integers are big-endian and fixed width::

    segment = | magic "LSMG" | u16 format_version (1) | u64 first_offset | u64 entries | u32 head_check |
              | record* |
              head_check = low 32 bits of xxh3_64(the 22 bytes before it)
    record  = exactly a record of formats.log (u32 payload_len | u64 xxh3_64(payload) | u32 head_check |
              payload), progress markers included

`entries` is the number of records (offsets) the segment holds, markers included: the segment holds
offsets [first_offset, first_offset + entries), so the next segment of the partition starts at
first_offset + entries. A reader learns where a partition ends from its last segment's header alone (one
ranged GET of `HEADER.size` bytes), and checks, when it reads a segment, that the object's name, its
header and its records agree: a segment is whole or refused (CorruptionError), never partly read.

Deliberate simplifications: no compression, no index inside a segment (a reader decodes it from the
start), no compaction or retention of old segments.
"""

from __future__ import annotations

import struct

import xxhash

from formats.errors import CorruptionError, FormatVersionError

# DO NOT CHANGE: stored in objects.
SEGMENT_MAGIC = b"LSMG"
SEGMENT_VERSION = 1
HEADER = struct.Struct(">4sHQQI")  # magic, format_version, first_offset, entries, head_check
_CHECKED = struct.Struct(">4sHQQ")  # the fields head_check covers
SUFFIX = ".seg"
NAME_DIGITS = 20  # 2**64 - 1 has 20 decimal digits: names sort as their offsets


def segment_name(first_offset: int) -> str:
    """The object name of the segment whose first record has offset `first_offset`."""
    return f"{first_offset:0{NAME_DIGITS}d}{SUFFIX}"


def parse_name(name: str) -> int | None:
    """The first offset a segment object's name gives, or None if `name` is not a segment name."""
    stem = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else ""
    if len(stem) != NAME_DIGITS or not stem.isdigit():
        return None
    return int(stem)


def encode_header(first_offset: int, entries: int) -> bytes:
    """The header of a segment holding `entries` records from offset `first_offset` on."""
    head = _CHECKED.pack(SEGMENT_MAGIC, SEGMENT_VERSION, first_offset, entries)
    return head + (xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF).to_bytes(4, "big")


def decode_header(buf: bytes, path: str) -> tuple[int, int]:
    """(first_offset, entries) of the segment whose first bytes are `buf`; CorruptionError for a header
    that is short, damaged or not a segment's, FormatVersionError for a version this code does not read."""
    if len(buf) < HEADER.size:
        raise CorruptionError(path, 0, "partition log segment header is truncated")
    magic, version, first, entries, check = HEADER.unpack_from(buf, 0)
    if magic != SEGMENT_MAGIC:
        raise CorruptionError(path, 0, f"not a partition log segment (magic {magic!r})")
    if version != SEGMENT_VERSION:  # (a later version may lay out what follows differently)
        raise FormatVersionError(path, f"partition log segment format version {version} is not supported")
    if xxhash.xxh3_64_intdigest(buf[: _CHECKED.size]) & 0xFFFFFFFF != check:
        raise CorruptionError(path, 0, "partition log segment header checksum mismatch")
    return first, entries


__all__ = [
    "HEADER",
    "NAME_DIGITS",
    "SEGMENT_MAGIC",
    "SEGMENT_VERSION",
    "SUFFIX",
    "decode_header",
    "encode_header",
    "parse_name",
    "segment_name",
]

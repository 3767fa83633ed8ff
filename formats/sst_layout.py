"""The SST file's layout: its constants, its metadata (`SsTableInfo`), index entries (`BlockHandle`), block
sealing, and the block-cache protocol; shared by the writer (`formats.sst`) and the reader
(`formats.sst_reader`). The layout itself is drawn in `formats.sst`'s docstring."""

from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import Any, NamedTuple, Protocol

import xxhash

from formats.row import (
    RowFeature,
)

MAGIC = 0x4C534D53494D5354  # b"LSMSIMST"
FOOTER = struct.Struct(">QIIQI")
FOOTER_BODY = struct.Struct(">QIIQ")
TRAILER = struct.Struct(">BQ")
U32 = struct.Struct(">I")
INDEX_ENTRY = struct.Struct(">QII")
KLEN = struct.Struct(">H")

# DO NOT CHANGE: stored on disk.
COMPRESSION_NONE = 0
COMPRESSION_ZLIB = 1
COMPRESSION_CODES = {None: COMPRESSION_NONE, "none": COMPRESSION_NONE, "zlib": COMPRESSION_ZLIB}
COMPRESSION_NAMES = {COMPRESSION_NONE: None, COMPRESSION_ZLIB: "zlib"}

_xxh3 = xxhash.xxh3_64_intdigest


@dataclasses.dataclass(frozen=True)
class SsTableInfo:
    """Metadata of one SST, stored in its metadata block (and copied into the manifest)."""

    format_version: int
    row_features: tuple[int, ...]
    creation_timestamp: int
    min_ts: int | None
    max_ts: int | None
    min_seq: int
    max_seq: int
    first_key: bytes
    last_key: bytes
    num_rows: int
    num_tombstones: int
    num_expiring: int  # rows with an expire_ts
    min_expire_ts: int | None
    max_expire_ts: int | None
    num_blocks: int
    data_size: int
    index_offset: int
    index_size: int
    filter_offset: int
    filter_size: int
    compression: str | None = None
    file_size: int = 0
    key_bytes: int = 0  # sum of key lengths over all rows
    value_bytes: int = 0  # sum of value lengths over all rows

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict (for msgpack and JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SsTableInfo:
        """The inverse of `to_dict`; fields added in later versions may be absent (ValueError if
        another field is missing)."""
        names = {f.name for f in dataclasses.fields(cls)}
        missing = names - set(d) - {"compression", "file_size", "key_bytes", "value_bytes"}
        if missing:
            raise ValueError(f"SsTableInfo lacks {sorted(missing)}")
        kw = {k: v for k, v in d.items() if k in names}
        kw["row_features"] = tuple(kw["row_features"])
        return cls(**kw)

    @property
    def has_ttl(self) -> bool:
        """True when the rows carry the TimeToLive feature."""
        return RowFeature.TimeToLive in self.row_features

    @property
    def has_timestamps(self) -> bool:
        """True when the rows carry the Timestamp feature."""
        return RowFeature.Timestamp in self.row_features


class BlockCache(Protocol):
    """What the reader needs from a block cache (the engine's LRU implements it)."""

    def get(self, key: Any) -> Any:
        """The cached block for `key`, or None."""

    def put(self, key: Any, value: Any, charge: int) -> None:
        """Cache `value` under `key`, charged `charge` bytes."""

    # Optional: ``grow(key, extra)`` charges `extra` more bytes to a cached entry (the engine's LRU has
    # it; the reader calls it when a cached block gains its key index, and does without it otherwise);
    # ``used`` and ``capacity`` (bytes) let a point read index a block as it loads it while the cache
    # has room (without them, a block's index waits for its second read).


def _compress(payload: bytes, code: int) -> bytes:
    if code == COMPRESSION_ZLIB:
        return zlib.compress(payload, 1)
    return payload


def _seal(payload: bytes, code: int = COMPRESSION_NONE) -> bytes:
    stored = _compress(payload, code)
    tail = bytes((code,))
    return b"".join((stored, tail, struct.pack(">Q", _xxh3(stored + tail))))


class BlockHandle(NamedTuple):
    """One entry of the block index (a named tuple: an SST's index holds thousands, built at every open)."""

    offset: int
    size: int
    num_rows: int
    first_key: bytes
    last_key: bytes

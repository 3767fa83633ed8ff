"""The SST file's layout: its constants, its metadata (`SsTableInfo`), index entries (`BlockHandle`), block
sealing, and the block-cache protocol; shared by the writer (`formats.sst`) and the reader
(`formats.sst_reader`). The layout itself is drawn in `formats.sst`'s docstring."""

from __future__ import annotations

import dataclasses
import struct
import threading
import zlib
from typing import Any, NamedTuple, Protocol

import lz4.block
import xxhash
import zstandard

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

# DO NOT CHANGE: stored on disk. A new codec takes the next free code; a reader refuses codes it lacks.
COMPRESSION_NONE = 0
COMPRESSION_ZLIB = 1
COMPRESSION_ZSTD = 2
COMPRESSION_LZ4 = 3
COMPRESSION_CODES = {
    None: COMPRESSION_NONE,
    "none": COMPRESSION_NONE,
    "zlib": COMPRESSION_ZLIB,
    "zstd": COMPRESSION_ZSTD,
    "lz4": COMPRESSION_LZ4,
}
COMPRESSION_NAMES = {
    COMPRESSION_NONE: None,
    COMPRESSION_ZLIB: "zlib",
    COMPRESSION_ZSTD: "zstd",
    COMPRESSION_LZ4: "lz4",
}
# the names DbOptions and SstWriter accept, for their error messages
KNOWN_COMPRESSIONS = "none (or None), zlib, zstd, lz4"
ZLIB_LEVEL = 1  # as it always was: zlib files written today are byte for byte those of older versions
# zstd's own default level; on the bench data (docs/benchmarks.md) level 1 stored 3% more and level 6
# saved another 0.6% for slower writes
ZSTD_LEVEL = 3

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


class _ZstdContexts(threading.local):
    """One zstd compressor and one decompressor per thread. Reusing them keeps their C contexts (the
    tables a fresh object allocates) from block to block: measured on a 4 KiB bench block, a fresh
    decompressor doubled the time of a decompression and a fresh compressor added 60% to a compression.
    But python-zstandard's objects must not be used by two threads at once (one decompressor shared by
    four threads scanning one SST crashed the process), and an SST is read by the caller's threads and
    the compactor's at the same time."""

    def __init__(self) -> None:
        self.compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)  # writes the content size: see below
        self.decompressor = zstandard.ZstdDecompressor()


_zstd = _ZstdContexts()


class UnknownCompressionError(ValueError):
    """A block's compression code is not one this version knows (a newer writer's, or damage)."""


class DecompressionError(ValueError):
    """A block's stored bytes do not decompress with the codec its code names."""


def _compress(payload: bytes, code: int) -> bytes:
    """The stored form of `payload` under compression `code` (a value of `COMPRESSION_CODES`).

    zstd writes frames with the content size in the header, so decompression allocates the output once;
    lz4 uses the raw block format with its 4-byte size prefix (``lz4.block``), not ``lz4.frame``: the
    block's trailer already carries a checksum and the index its size, so a frame's header, end mark and
    optional checksum would be ~11 more bytes per 4 KiB block for nothing, and the block functions are
    one C call each way with no context to keep."""
    if code == COMPRESSION_NONE:
        return payload
    if code == COMPRESSION_ZLIB:
        return zlib.compress(payload, ZLIB_LEVEL)
    if code == COMPRESSION_ZSTD:
        return _zstd.compressor.compress(payload)
    if code == COMPRESSION_LZ4:
        return lz4.block.compress(payload)
    raise UnknownCompressionError(f"unknown compression code {code}")


def _decompress(stored: bytes, code: int) -> bytes:
    """The payload a block stored under compression `code` holds: the inverse of `_compress`.

    Raises UnknownCompressionError for a code this version does not know, DecompressionError when
    `stored` does not decompress (the reader turns both into its own errors, naming the file)."""
    try:
        if code == COMPRESSION_NONE:
            return stored
        if code == COMPRESSION_ZLIB:
            return zlib.decompress(stored)
        if code == COMPRESSION_ZSTD:
            return _zstd.decompressor.decompress(stored)
        if code == COMPRESSION_LZ4:
            return lz4.block.decompress(stored)
    # lz4 also raises ValueError (a short size prefix); zstd MemoryError for a forged huge content size
    except (zlib.error, zstandard.ZstdError, lz4.block.LZ4BlockError, ValueError, MemoryError) as e:
        detail = str(e) or type(e).__name__
        raise DecompressionError(f"cannot decompress {COMPRESSION_NAMES[code]} block: {detail}") from None
    raise UnknownCompressionError(
        f"unknown compression code {code} (this version knows {', '.join(map(str, COMPRESSION_NAMES))})"
    )


def _seal(payload: bytes, code: int = COMPRESSION_NONE) -> bytes:
    stored = _compress(payload, code)
    tail = bytes((code,))
    return b"".join((stored, tail, struct.pack(">Q", _xxh3(stored + tail))))


class BlockHandle(NamedTuple):
    """One entry of the block index, as `SstReader.blocks[i]` builds it on demand (the open reader keeps
    the index flat: `formats.sst_index.BlockIndex`)."""

    offset: int
    size: int
    num_rows: int
    first_key: bytes
    last_key: bytes

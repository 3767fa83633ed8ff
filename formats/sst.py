"""SST (sorted string table) writer and reader.

File layout::

    +----------------+-----+--------------------+-------------+--------------+----------------+--------+
    | data block 0   | ... | data block n-1     | index block | filter block | metadata block | footer |
    +----------------+-----+--------------------+-------------+--------------+----------------+--------+

Every block is ``| payload | u8 compression | u64 checksum |``; the checksum is xxh3_64 of the stored
payload and the compression byte (0 = none, 1 = zlib). DO NOT CHANGE the codes: stored on disk.

Data block payload (before compression)::

    | row 0 | row 1 | ... | row n-1 | u32 offset[0] ... u32 offset[n-1] | u32 n |

Rows use the layout of `formats.row` for the file's (format_version, row_features), sorted by key
ascending and, within a key, by seq descending (newest first). All versions of one key sit in one block,
so a block boundary is always a key boundary (point reads look at one block; range planners may cut at
any block).

Index block payload::

    | u32 count | count x ( u64 offset | u32 size | u32 rows | u16 len | first_key | u16 len | last_key ) |

``offset``/``size`` locate the whole stored data block, trailer included.

Filter block payload: `formats.bloom` (``| u8 probes | u32 num_bits | bits |``).

Metadata block payload: a msgpack map of the `SsTableInfo` fields (see `SsTableInfo.to_dict`).

Footer, fixed 28 bytes::

    | u64 meta_offset | u32 meta_size | u32 format_version | u64 magic "LSMSIMST" | u32 xxh32(previous 24) |

Damage anywhere is caught by a checksum: `CorruptionError(path, offset)` at open (footer, metadata, index,
filter) or at the first read of a data block. The reader never returns a row that was not written.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import mmap
import operator
import os
import stat
import struct
import weakref
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

import msgpack
import xxhash

from formats import bloom, fileio
from formats.errors import CorruptionError, FormatVersionError
from formats.row import (
    FORMAT_V0,
    FORMAT_V1,
    MAX_KEY_LEN,
    MAX_VALUE_LEN,
    SUPPORTED_FORMAT_VERSIONS,
    RowCodec,
    RowFeature,
    check_key,
    check_value,
    codec_for,
    features_for,
    normalize_features,
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
# the row layouts this engine writes (flags, ts, [expire_ts,] seq): `SstWriter._encode_fast` packs them
_FAST_LAYOUTS = (features_for(False), features_for(True))


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
    # it; the reader calls it when a block gains its key index, and does without it otherwise).


def _compress(payload: bytes, code: int) -> bytes:
    if code == COMPRESSION_ZLIB:
        return zlib.compress(payload, 1)
    return payload


def _seal(payload: bytes, code: int = COMPRESSION_NONE) -> bytes:
    stored = _compress(payload, code)
    tail = bytes((code,))
    return b"".join((stored, tail, struct.pack(">Q", _xxh3(stored + tail))))


class SstWriter:
    """Collects rows in (key asc, seq desc) order and writes one SST at `finish()`.

    Rows are buffered until `finish` because the row features must follow the data (TimeToLive only when
    some row has an expire_ts) and are fixed before the first row is encoded; SSTs are bounded by the
    caller's target size, so the buffer is too. `finish` writes the file, fsyncs it and returns the
    `SsTableInfo`. O(n log n) for the bloom filter and O(n) otherwise.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format_version: int = FORMAT_V1,
        creation_timestamp: int = 0,
        block_bytes: int = 4096,
        bloom_bits_per_key: int = 10,
        compression: str | None = None,
        sync: bool = True,
    ) -> None:
        if format_version not in SUPPORTED_FORMAT_VERSIONS:
            raise FormatVersionError(str(path), f"cannot write SST format version {format_version}")
        if compression not in COMPRESSION_CODES:
            raise ValueError(f"unknown compression {compression!r}; known: none, zlib")
        if block_bytes < 64:
            raise ValueError("block_bytes must be at least 64")
        self.path = os.fspath(path)
        self.format_version = format_version
        self.creation_timestamp = creation_timestamp
        self.block_bytes = block_bytes
        self.bloom_bits_per_key = bloom_bits_per_key
        self.compression = COMPRESSION_CODES[compression]
        self.sync = sync
        self.rows: list[tuple] = []
        self.estimated_size = 0
        self._last_key: bytes | None = None
        self._last_seq: int | None = None

    def add(self, row: Sequence) -> None:
        """Add one row ``(key, seq, ts, expire_ts, value)``; raises ValueError when out of order."""
        key, seq, _ts, expire_ts, value = row
        last = self._last_key
        # the fast path: every check of the slow path below, in one expression of plain comparisons
        if (
            type(key) is bytes
            and (key > last if last is not None else 0 < len(key))
            and len(key) <= MAX_KEY_LEN
            and (value is None or (type(value) is bytes and len(value) <= MAX_VALUE_LEN))
            and (expire_ts is None or self.format_version != FORMAT_V0)
        ):
            self._last_key = key
            self._last_seq = seq
            self.rows.append(row if type(row) is tuple else tuple(row))
            self.estimated_size += len(key) + (len(value) if value is not None else 0) + 33
            return
        check_key(key)  # before comparing, so a bad key gets the error that names the limit
        if last is not None and key <= last:
            # only an older version of the same key may follow it
            older = key == last and seq is not None and self._last_seq is not None and seq < self._last_seq
            if not older:
                raise ValueError(
                    f"rows must be added in key order (and seq descending within a key): {key!r} after {last!r}"
                )
        if value is not None:
            check_value(value)
        if self.format_version == FORMAT_V0 and expire_ts is not None:
            raise ValueError("format version 0 cannot store expire_ts")
        self._last_key = key
        self._last_seq = seq
        self.rows.append(tuple(row))
        self.estimated_size += len(key) + (len(value) if value is not None else 0) + 33

    def extend(self, rows: list[tuple], limit: int | None = None) -> bool:
        """Add a list of row tuples, as `add` would one by one, checked column by column (C-speed
        passes instead of a Python call per row). With `limit`, adds nothing and returns False when
        `estimated_size` would reach `limit` (the caller then splits the list between keys).

        A list the column checks cannot pass at once (a key repeated, a bad key or value, rows that are
        not 5-tuples) goes through `add` row by row, with its errors. Returns True when added."""
        if not rows:
            return True
        n = len(rows)
        try:
            keys, seqs, _tss, exps, values = zip(*rows, strict=True)
        except (TypeError, ValueError):
            keys = ()
        ok = (
            len(keys) == n
            and set(map(type, rows)) == {tuple}
            and set(map(type, keys)) == {bytes}
            and 0 < min(map(len, keys))
            and max(map(len, keys)) <= MAX_KEY_LEN
            and (self._last_key is None or keys[0] > self._last_key)
            and all(map(bytes.__lt__, keys, keys[1:]))
        )
        if ok:
            kinds = set(map(type, values))
            ok = kinds <= {bytes, type(None)} and (self.format_version != FORMAT_V0 or exps.count(None) == n)
            if ok and bytes in kinds:
                ok = max(map(len, filter(None, values)), default=0) <= MAX_VALUE_LEN
        if not ok:
            if limit is not None:
                return False
            for row in rows:
                self.add(row)
            return True
        size = sum(map(len, keys)) + sum(map(len, filter(None, values))) + 33 * n
        if limit is not None and self.estimated_size + size >= limit:
            return False
        self.rows += rows
        self.estimated_size += size
        self._last_key = keys[-1]
        self._last_seq = seqs[-1]
        return True

    def __len__(self) -> int:
        return len(self.rows)

    def finish(self) -> SsTableInfo:
        """Encode, write and fsync the file; return its metadata. Raises ValueError when empty."""
        rows = self.rows
        if not rows:
            raise ValueError("an SST needs at least one row")
        n = len(rows)
        keys, seqs, tss, exps, values = zip(*rows, strict=True)  # columns: the statistics below run at C speed
        key_bytes = sum(map(len, keys))
        tombstones = values.count(None)
        value_bytes = sum(map(len, filter(None, values)))
        expiring = n - exps.count(None)
        has_ttl = expiring > 0
        min_exp = max_exp = None
        if has_ttl:
            present = [e for e in exps if e is not None]
            min_exp, max_exp = min(present), max(present)
        missing_ts = None in tss
        present = [t for t in tss if t is not None] if missing_ts else tss
        min_ts, max_ts = (min(present), max(present)) if present else (None, None)
        min_seq = max_seq = None
        if None in seqs:
            if self.format_version == FORMAT_V1:
                raise ValueError(f"row {keys[seqs.index(None)]!r} has no seq: format version 1 rows carry one")
            seqs = [s for s in seqs if s is not None]
        if seqs:
            min_seq, max_seq = min(seqs), max(seqs)
        if self.format_version == FORMAT_V1:
            features = features_for(has_ttl)
            if missing_ts:
                # row features follow the data: a ts column only when every row has a ts (rows
                # compacted from v0 files have none), so no row ever reports a made-up time
                features = tuple(f for f in features if f != RowFeature.Timestamp)
                min_ts = max_ts = None
        else:
            features = ()
        codec = codec_for(self.format_version, features)
        if codec.features in _FAST_LAYOUTS:
            columns = (keys, seqs, tss, exps, values)
            chunks, index_parts, offset = self._encode_fast(columns, codec, tombstones, expiring)
        else:
            chunks, index_parts, offset = self._encode(rows, codec)
        data_size = offset
        index = _seal(U32.pack(len(chunks)) + b"".join(index_parts))
        filt = _seal(bloom.build(_distinct_keys(keys), self.bloom_bits_per_key))
        info = SsTableInfo(
            format_version=self.format_version,
            row_features=tuple(int(f) for f in features),
            creation_timestamp=self.creation_timestamp,
            min_ts=min_ts,
            max_ts=max_ts,
            min_seq=min_seq or 0,
            max_seq=max_seq or 0,
            first_key=keys[0],
            last_key=keys[-1],
            num_rows=n,
            num_tombstones=tombstones,
            num_expiring=expiring,
            min_expire_ts=min_exp,
            max_expire_ts=max_exp,
            num_blocks=len(chunks),
            data_size=data_size,
            index_offset=data_size,
            index_size=len(index),
            filter_offset=data_size + len(index),
            filter_size=len(filt),
            compression=COMPRESSION_NAMES[self.compression],
            key_bytes=key_bytes,
            value_bytes=value_bytes,
        )
        meta_dict = info.to_dict()
        del meta_dict["file_size"]
        meta = _seal(msgpack.packb(meta_dict, use_bin_type=True))
        meta_offset = info.filter_offset + len(filt)
        body = FOOTER_BODY.pack(meta_offset, len(meta), self.format_version, MAGIC)
        footer = body + U32.pack(xxhash.xxh32_intdigest(body))
        chunks += (index, filt, meta, footer)
        file_size = meta_offset + len(meta) + len(footer)
        # through formats.fileio: every byte or an error naming the file, and tests can inject faults
        fd = fileio.create(self.path, os.O_WRONLY | os.O_TRUNC)
        try:
            try:
                fileio.write(fd, b"".join(chunks), self.path)
                if self.sync:
                    fileio.fsync(fd, self.path)
            finally:
                os.close(fd)
        except BaseException:
            try:  # a partial SST is never left behind under a name someone might read
                fileio.unlink(self.path)
            except OSError:
                pass
            raise
        self.rows = []
        return dataclasses.replace(info, file_size=file_size)

    def _encode(self, rows: list[tuple], codec: RowCodec) -> tuple[list[bytes], list[bytes], int]:
        """The data blocks through the generic `RowCodec.encode_parts`: (sealed blocks, index entries,
        data size)."""
        encode_parts = codec.encode_parts
        chunks: list[bytes] = []
        index_parts: list[bytes] = []
        offset = 0
        block_bytes = self.block_bytes
        n = len(rows)
        i = 0
        while i < n:
            parts: list = []
            offsets: list[int] = []
            size = 0
            first = rows[i][0]
            while i < n:
                row = rows[i]
                if size >= block_bytes and row[0] != rows[i - 1][0]:
                    break
                offsets.append(size)
                size += encode_parts(row, parts)
                i += 1
            offset = self._add_block(parts, offsets, first, rows[i - 1][0], chunks, index_parts, offset)
        return chunks, index_parts, offset

    def _encode_fast(
        self, columns: tuple[tuple, ...], codec: RowCodec, tombstones: int, expiring: int
    ) -> tuple[list[bytes], list[bytes], int]:
        """`_encode` for the two layouts this engine writes (flags, ts, [expire_ts,] seq), column by
        column: the key lengths, attributes and value lengths are packed by `map` over the columns (C
        loops, no Python bytecode per row), the pieces interleaved by slice assignment, the block cuts
        found by bisecting the running row offsets. The same bytes as `_encode` (a hypothesis test holds
        them to it)."""
        keys, seqs, tss, exps, values = columns
        n = len(keys)
        vals = [b"" if v is None else v for v in values] if tombstones else values
        klens = list(map(len, keys))
        vlens = list(map(len, vals))
        pack = codec.attrs.pack
        if RowFeature.TimeToLive in codec.features:
            flags = [(v is None) | ((e is not None) << 1) for v, e in zip(values, exps, strict=True)]
            slots = [0 if e is None else e for e in exps] if expiring < n else exps
            attrs = list(map(pack, flags, tss, slots, seqs, vlens))
        else:
            flags = [v is None for v in values] if tombstones else itertools.repeat(0, n)
            attrs = list(map(pack, flags, tss, seqs, vlens))
        parts: list = [None] * (4 * n)
        parts[0::4] = map(KLEN.pack, klens)
        parts[1::4] = keys
        parts[2::4] = attrs
        parts[3::4] = vals
        # offset of row i in the file's row stream; a row is 2 + key + attrs (value_len included) + value
        c = 2 + codec.attrs.size
        payload = itertools.accumulate(map(operator.add, klens, vlens), initial=0)
        starts = list(map(operator.add, payload, range(0, (n + 1) * c, c)))
        chunks: list[bytes] = []
        index_parts: list[bytes] = []
        offset = 0
        block_bytes = self.block_bytes
        i = 0
        while i < n:
            base = starts[i]
            # rows are added while the block is under block_bytes, then until the key changes
            j = bisect.bisect_left(starts, base + block_bytes, i + 1, n)
            while j < n and keys[j] == keys[j - 1]:
                j += 1
            offsets = [x - base for x in starts[i:j]]
            offset = self._add_block(parts[4 * i : 4 * j], offsets, keys[i], keys[j - 1], chunks, index_parts, offset)
            i = j
        return chunks, index_parts, offset

    def _add_block(
        self,
        parts: list,
        offsets: list[int],
        first: bytes,
        last: bytes,
        chunks: list[bytes],
        index_parts: list[bytes],
        offset: int,
    ) -> int:
        """Seal one data block (rows, then the offset array and count), append it and its index entry;
        return the offset after it."""
        parts.append(struct.pack(f">{len(offsets) + 1}I", *offsets, len(offsets)))
        block = _seal(b"".join(parts), self.compression)
        chunks.append(block)
        index_parts.append(INDEX_ENTRY.pack(offset, len(block), len(offsets)))
        index_parts += (KLEN.pack(len(first)), first, KLEN.pack(len(last)), last)
        return offset + len(block)


def _distinct_keys(keys: Sequence[bytes]) -> list[bytes]:
    """The distinct keys of a sorted key column (a key's versions are adjacent)."""
    out = [k for k, nxt in zip(keys, keys[1:], strict=False) if k != nxt]
    out.append(keys[-1])
    return out


def write_sst(path: str | os.PathLike[str], rows: Iterable[Sequence], **kwargs: Any) -> SsTableInfo:
    """Write `rows` (sorted) to a new SST at `path`; keyword arguments as for `SstWriter`."""
    w = SstWriter(path, **kwargs)
    for r in rows:
        w.add(r)
    return w.finish()


@dataclasses.dataclass(frozen=True)
class BlockHandle:
    """One entry of the block index."""

    offset: int
    size: int
    num_rows: int
    first_key: bytes
    last_key: bytes


class SstReader:
    """Reads one SST. Thread-safe for concurrent reads (blocks are immutable bytes).

    Open validates the footer, metadata, index and filter (O(index + filter)); data blocks are
    checked on first read. Point lookup: bloom, then binary search of the index, then of one block.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cache: BlockCache | None = None,
        cache_id: Any = None,
        verify_checksums: bool = True,
    ) -> None:
        self.path = os.fspath(path)
        self.cache = cache
        self.cache_id = cache_id if cache_id is not None else self.path
        self.verify_checksums = verify_checksums
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)  # NONBLOCK: a FIFO must not hang the open
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{self.path}: not a regular file, so not an SST")
            size = st.st_size
            if size < FOOTER.size:
                raise CorruptionError(self.path, 0, f"file of {size} bytes is too short to be an SST")
            self._map = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            self._open(size)
        except BaseException:
            self._map.close()
            raise

    def _open(self, size: int) -> None:
        path = self.path
        buf = self._map
        foot_at = size - FOOTER.size
        meta_offset, meta_size, version, magic, check = FOOTER.unpack_from(buf, foot_at)
        if magic != MAGIC:
            raise CorruptionError(path, foot_at, "bad magic number: not an lsm-sim SST")
        if xxhash.xxh32_intdigest(buf[foot_at : foot_at + FOOTER_BODY.size]) != check:
            raise CorruptionError(path, foot_at, "footer checksum mismatch")
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise FormatVersionError(
                path, f"SST format version {version} is newer than this reader (knows 0 and 1)"
            )
        if meta_offset + meta_size > foot_at:
            raise CorruptionError(path, foot_at, "metadata block lies outside the file")
        try:
            d = msgpack.unpackb(self._block_payload(meta_offset, meta_size), raw=False)
            info = SsTableInfo.from_dict(d)
        except CorruptionError:
            raise
        except Exception as e:
            raise CorruptionError(path, meta_offset, f"undecodable metadata: {e}") from None
        if info.format_version != version:
            raise CorruptionError(path, meta_offset, "metadata and footer disagree on the format version")
        try:
            features = normalize_features(info.row_features)
        except FormatVersionError as e:
            raise FormatVersionError(path, e.detail) from None
        self.info = dataclasses.replace(info, file_size=size)
        self.codec = codec_for(version, features)
        self._decode_version = self.codec.decode_version
        self.default_seq = info.max_seq
        if info.index_offset + info.index_size > meta_offset:
            raise CorruptionError(path, meta_offset, "index block lies outside the file")
        idx = self._block_payload(info.index_offset, info.index_size)
        self.blocks = self._parse_index(idx, info.index_offset)
        if len(self.blocks) != info.num_blocks:
            raise CorruptionError(path, info.index_offset, "index and metadata disagree on block count")
        self.first_keys = [b.first_key for b in self.blocks]
        self.last_keys = [b.last_key for b in self.blocks]
        # point reads: the key range as two attributes, and per block a weak reference to its cached
        # _Block (or `_absent`), so a read of a cached block skips the cache's lookup; the cache alone
        # keeps blocks alive, so its memory bound holds and an evicted block's reference dies with it
        self._lo = self.first_keys[0] if self.blocks else b"\xff"
        self._hi = self.last_keys[-1] if self.blocks else b""
        self._slots: list[Callable[[], _Block | None]] = [_absent] * len(self.blocks)
        try:
            self.bloom = bloom.BloomFilter(self._block_payload(info.filter_offset, info.filter_size))
        except ValueError as e:
            raise CorruptionError(path, info.filter_offset, f"bad filter block: {e}") from None

    def _parse_index(self, idx: bytes, at: int) -> list[BlockHandle]:
        try:
            (count,) = U32.unpack_from(idx, 0)
            pos = 4
            out = []
            end = self.info.data_size
            expect = 0
            for _ in range(count):
                offset, size, nrows = INDEX_ENTRY.unpack_from(idx, pos)
                pos += INDEX_ENTRY.size
                (fl,) = KLEN.unpack_from(idx, pos)
                first = idx[pos + 2 : pos + 2 + fl]
                pos += 2 + fl
                (ll,) = KLEN.unpack_from(idx, pos)
                last = idx[pos + 2 : pos + 2 + ll]
                pos += 2 + ll
                if offset != expect or offset + size > end:
                    raise ValueError("block offsets are not contiguous")
                expect = offset + size
                out.append(BlockHandle(offset, size, nrows, first, last))
            if pos != len(idx) or expect != end:
                raise ValueError("index size mismatch")
            return out
        except (struct.error, ValueError) as e:
            raise CorruptionError(self.path, at, f"bad index block: {e}") from None

    def _block_payload(self, offset: int, size: int) -> bytes:
        """Read one stored block, verify its checksum, return the (decompressed) payload."""
        if size < TRAILER.size or offset + size > len(self._map):
            raise CorruptionError(self.path, offset, "block lies outside the file")
        raw = self._map[offset : offset + size]
        body = raw[: -TRAILER.size + 1]
        code, check = TRAILER.unpack_from(raw, size - TRAILER.size)
        if self.verify_checksums and _xxh3(body) != check:
            raise CorruptionError(self.path, offset, "block checksum mismatch")
        stored = body[:-1]
        if code == COMPRESSION_NONE:
            return stored
        if code == COMPRESSION_ZLIB:
            try:
                return zlib.decompress(stored)
            except zlib.error as e:
                raise CorruptionError(self.path, offset, f"cannot decompress block: {e}") from None
        raise CorruptionError(self.path, offset, f"unknown compression code {code}")

    def close(self) -> None:
        """Release the file mapping."""
        self._map.close()

    def __enter__(self) -> SstReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- blocks -----------------------------------------------------------------------------------
    def _load(self, i: int) -> _Block:
        """Data block `i`, checked and split into rows, through the cache."""
        cache = self.cache
        if cache is not None:
            ck = (self.cache_id, i)
            b = cache.get(ck)
            if b is not None:
                self._slots[i] = b.ref
                return b
        h = self.blocks[i]
        payload = self._block_payload(h.offset, h.size)
        try:
            (n,) = U32.unpack_from(payload, len(payload) - 4)
            start = len(payload) - 4 - 4 * n
            if n != h.num_rows or start < 0:
                raise ValueError("row count mismatch")
            offsets = struct.unpack_from(f">{n}I", payload, start)
        except (struct.error, ValueError) as e:
            raise CorruptionError(self.path, h.offset, f"bad block trailer: {e}") from None
        b = _Block(payload[:start], offsets)
        if cache is not None:
            cache.put(ck, b, len(payload) + 8 * n)
            self._slots[i] = b.ref
        return b

    def _key_index(self, blk: _Block, i: int) -> dict[bytes, int]:
        """Key -> where its newest version's row starts in `blk.data`: built the second time a point
        read lands in a cached block, so later reads of it are one dict probe."""
        data = blk.data
        unpack = KLEN.unpack_from
        index: dict[bytes, int] = {}
        setdefault = index.setdefault
        try:
            for o in blk.offsets:
                setdefault(data[o + 2 : o + 2 + unpack(data, o)[0]], o)
        except struct.error:
            raise CorruptionError(self.path, self.blocks[i].offset, "row runs past the end of the block") from None
        blk.index = index
        grow = getattr(self.cache, "grow", None)  # charge the index to the block where the cache can
        if grow is not None:
            grow((self.cache_id, i), ROW_INDEX_BYTES * len(blk.offsets))
        return index

    def block(self, i: int) -> tuple[bytes, tuple[int, ...]]:
        """Data block `i` as (payload, row offsets), through the cache."""
        b = self._load(i)
        return b.data, b.offsets

    def block_rows(self, i: int) -> list[tuple]:
        """All rows of data block `i`, decoded, in stored order."""
        b = self._load(i)
        offsets = b.offsets
        try:
            rows = self.codec.decode_block(b.data, self.path, self.default_seq)
        except CorruptionError as e:
            raise CorruptionError(self.path, self.blocks[i].offset, e.detail) from None
        except struct.error:
            raise CorruptionError(self.path, self.blocks[i].offset, "row runs past the end of the block") from None
        if len(rows) != len(offsets):
            raise CorruptionError(self.path, self.blocks[i].offset, "row count does not match the block")
        return rows

    # -- reads ------------------------------------------------------------------------------------
    def may_contain(self, key: bytes) -> bool:
        """The bloom filter's answer for `key`: False means the SST certainly does not hold it."""
        return self.bloom.may_contain(key)

    def get(self, key: bytes, max_seq: int | None = None, use_bloom: bool = True) -> tuple | None:
        """Newest version of `key` with seq <= max_seq (any version when None), or None.

        A block already cached answers from its key index (one dict probe; a cached block answers
        faster than the filter, so the filter is consulted only before a block read), then only the
        row found is decoded. O(log blocks) plus O(versions of the key) row decodes."""
        if key < self._lo or key > self._hi:
            return None
        i = _bisect_left(self.last_keys, key)
        blk = self._slots[i]()
        if blk is None:
            if self.first_keys[i] > key or (use_bloom and not self.bloom.may_contain(key)):
                return None
            blk = self._load(i)
            data, offsets = blk.data, blk.offsets
            key_at = self.codec.key_at
            lo, hi = 0, len(offsets)
            while lo < hi:
                mid = (lo + hi) >> 1
                if key_at(data, offsets[mid]) < key:
                    lo = mid + 1
                else:
                    hi = mid
            if lo == len(offsets) or key_at(data, offsets[lo]) != key:
                return None
            at = offsets[lo]
        else:
            blk.touched = True
            index = blk.index
            if index is None:
                index = self._key_index(blk, i)
            at = index.get(key)
            if at is None:
                return None
            data = blk.data
            lo = -1
        try:
            row = self._decode_version(data, at + 2 + len(key), key, self.default_seq)
        except (CorruptionError, struct.error):
            row = None  # the checked generic decoder below names the fault
        if row is not None and (max_seq is None or row[1] <= max_seq):
            return row
        offsets = blk.offsets
        if lo < 0:  # older versions follow the newest: find its place among the rows
            lo = bisect.bisect_left(offsets, at)
        decode = self.codec.decode_from
        n = len(offsets)
        while lo < n:
            row, _ = decode(data, offsets[lo], self.path, self.default_seq)
            if row[0] != key:
                return None
            if max_seq is None or row[1] <= max_seq:
                return row
            lo += 1
        return None

    def _block_range(self, start: bytes | None, end: bytes | None) -> range:
        lo = 0 if start is None else bisect.bisect_left(self.last_keys, start)
        hi = len(self.blocks) if end is None else bisect.bisect_left(self.first_keys, end)
        return range(lo, hi)

    def iter(
        self, start: bytes | None = None, end: bytes | None = None, reverse: bool = False
    ) -> Iterator[tuple]:
        """Every version with start <= key < end.

        Forward: key ascending, seq descending. Reverse: key descending, seq still descending within a
        key (newest first), so the same version resolution works in both directions. Lazy: a block is
        read when the iteration reaches it; rows come from the decoded block lists (see `iter_blocks`),
        so a row costs no Python code here.
        """
        return itertools.chain.from_iterable(self.iter_blocks(start, end, reverse))

    def iter_blocks(
        self, start: bytes | None = None, end: bytes | None = None, reverse: bool = False
    ) -> Iterator[list[tuple]]:
        """The rows of `iter`, one list per data block (lazy: a block is read when reached). Only the
        first and last block of the range are trimmed to the bounds; a block holds every version of
        its keys, so a key's versions never straddle two lists."""
        blocks = self._block_range(start, end)
        if not blocks:
            return iter(())
        first, last = blocks[0], blocks[-1]
        trim_start = start is not None and start > self.first_keys[first]
        trim_end = end is not None and end <= self.last_keys[last]
        block_rows = self.block_rows

        def rows_of(i: int) -> list[tuple]:
            rows = block_rows(i)
            if trim_start and i == first:
                rows = rows[bisect.bisect_left(rows, start, key=_row_key) :]
            if trim_end and i == last:
                rows = rows[: bisect.bisect_left(rows, end, key=_row_key)]
            return _reverse_keys(rows) if reverse else rows

        return map(rows_of, reversed(blocks) if reverse else blocks)

    def __iter__(self) -> Iterator[tuple]:
        return itertools.chain.from_iterable(map(self.block_rows, range(len(self.blocks))))

    def verify(self) -> None:
        """Check every block checksum, the key order and the metadata against the content.

        Raises CorruptionError naming the offset of the first problem. O(file).
        """
        info = self.info
        prev: tuple | None = None
        count = tombstones = expiring = 0
        min_seq = max_seq = None
        for i, h in enumerate(self.blocks):
            rows = self.block_rows(i)
            if rows and (rows[0][0] != h.first_key or rows[-1][0] != h.last_key):
                raise CorruptionError(self.path, h.offset, "block keys disagree with the index")
            for row in rows:
                if prev is not None:
                    if row[0] < prev[0] or (
                        row[0] == prev[0] and info.format_version == FORMAT_V1 and row[1] >= prev[1]
                    ):
                        raise CorruptionError(self.path, h.offset, f"key {row[0]!r} is out of order")
                prev = row
                count += 1
                if row[4] is None:
                    tombstones += 1
                if row[3] is not None:
                    expiring += 1
                if info.format_version == FORMAT_V1:
                    s = row[1]
                    min_seq = s if min_seq is None or s < min_seq else min_seq
                    max_seq = s if max_seq is None or s > max_seq else max_seq
        problems = []
        if count != info.num_rows:
            problems.append(f"metadata says {info.num_rows} rows, found {count}")
        if tombstones != info.num_tombstones:
            problems.append(f"metadata says {info.num_tombstones} tombstones, found {tombstones}")
        if expiring != info.num_expiring:
            problems.append(f"metadata says {info.num_expiring} rows with expire_ts, found {expiring}")
        if RowFeature.Seq in self.codec.features and (min_seq, max_seq) != (info.min_seq, info.max_seq):
            problems.append("metadata seq range disagrees with the rows")
        if problems:
            raise CorruptionError(self.path, self.info.filter_offset + self.info.filter_size, "; ".join(problems))


# What a cached block's key index costs a row beyond the block (a dict slot and the key object, for
# short keys), charged to the block when the index is built (`BlockCache.grow`, where the cache has it).
ROW_INDEX_BYTES = 96


class _Block:
    """A checked data block in the cache: payload, row offsets, and (once point-read twice) its key
    index. `touched` marks a block a point read used since the cache last looked (the engine's LRU gives
    such a block a second chance instead of evicting it); `ref` is the weak reference readers keep."""

    __slots__ = ("data", "offsets", "index", "touched", "ref", "__weakref__")

    def __init__(self, data: bytes, offsets: tuple[int, ...]) -> None:
        self.data = data
        self.offsets = offsets
        self.index: dict[bytes, int] | None = None
        self.touched = False
        self.ref = weakref.ref(self)


def _absent() -> None:
    """The slot of a block with no cached copy (a dead weak reference answers the same)."""
    return None


_row_key = operator.itemgetter(0)
_bisect_left = bisect.bisect_left


def _reverse_keys(rows: list[tuple]) -> list[tuple]:
    """Reverse the key order of a block's rows, keeping each key's versions newest first."""
    out: list[tuple] = []
    n = len(rows)
    j = n
    while j > 0:
        i = j - 1
        k = rows[i][0]
        while i > 0 and rows[i - 1][0] == k:
            i -= 1
        out.extend(rows[i:j])
        j = i
    return out

"""SST (sorted string table) format and writer (`SstWriter`, `write_sst`); the reader is `formats.sst_reader`
and the shared constants `formats.sst_layout`, both re-exported here; the writer's data-block encoders
are `formats.sst_blocks`.

File layout::

    +----------------+-----+--------------------+-------------+--------------+----------------+--------+
    | data block 0   | ... | data block n-1     | index block | filter block | metadata block | footer |
    +----------------+-----+--------------------+-------------+--------------+----------------+--------+

Every block is ``| payload | u8 compression | u64 checksum |``; the checksum is xxh3_64 of the stored
payload and the compression byte (0 = none, 1 = zlib, 2 = zstd, 3 = lz4; the codecs are in
`formats.sst_layout`). DO NOT CHANGE the codes: stored on disk.

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

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import msgpack
import xxhash

from formats import bloom, fileio
from formats.errors import FormatVersionError
from formats.row import (
    FORMAT_V0,
    FORMAT_V1,
    MAX_KEY_LEN,
    MAX_VALUE_LEN,
    SUPPORTED_FORMAT_VERSIONS,
    RowFeature,
    check_key,
    check_value,
    codec_for,
    features_for,
)
from formats.row_array import record_rows
from formats.sst_blocks import BlockEncoder, is_value_array, value_list

# the reader and the layout live in their own modules; formats.sst stays the one import for callers
from formats.sst_layout import (
    COMPRESSION_CODES,
    COMPRESSION_LZ4,
    COMPRESSION_NAMES,
    COMPRESSION_NONE,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    FOOTER,
    FOOTER_BODY,
    INDEX_ENTRY,
    KLEN,
    KNOWN_COMPRESSIONS,
    MAGIC,
    TRAILER,
    U32,
    BlockCache,
    BlockHandle,
    SsTableInfo,
    _seal,
)
from formats.sst_reader import ROW_INDEX_BYTES, SstReader
from formats.sst_records import (
    Scratch,
    check_records,
    is_records,
    key_steps,
    key_words,
    record_figures,
    record_size,
    record_stream,
)
from formats.xxh3_numpy import key_hashes

# the row layouts this engine writes (flags, ts, [expire_ts,] seq): `BlockEncoder.encode_fast` packs them
_FAST_LAYOUTS = (features_for(False), features_for(True))
_NUMPY_MIN_ROWS = 512  # from this many rows of one key length, `BlockEncoder.encode_numpy` encodes them


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
        scratch: Scratch | None = None,
        put: Callable[[str, Sequence[Any]], None] | None = None,
    ) -> None:
        if format_version not in SUPPORTED_FORMAT_VERSIONS:
            raise FormatVersionError(str(path), f"cannot write SST format version {format_version}")
        if compression not in COMPRESSION_CODES:
            raise ValueError(f"unknown compression {compression!r}; known: {KNOWN_COMPRESSIONS}")
        if block_bytes < 64:
            raise ValueError("block_bytes must be at least 64")
        self.path = os.fspath(path)
        self.format_version = format_version
        self.creation_timestamp = creation_timestamp
        self.block_bytes = block_bytes
        self.bloom_bits_per_key = bloom_bits_per_key
        self.compression = COMPRESSION_CODES[compression]
        self.sync = sync
        self.scratch = scratch  # buffers lent by the caller for the encoding (`formats.sst_records.Scratch`)
        # `put(path, chunks)` writes the finished file (its parts, in order, to be joined before `put`
        # returns: they may be the scratch buffers) instead of `finish` (compaction.output hands an
        # object-store SST to a background upload); the caller then owns its durability and its errors
        self.put = put
        self.rows: list[tuple] = []
        # rows added by `extend_columns` stay columns (keys, seqs, tss, exps, values) until `finish`; rows
        # added by `add`/`extend` go to `rows`. Only one of the two holds rows at a time (a call of the
        # other kind converts them), so the order rows were added in is the order they are written in.
        self._cols: list[list] | None = None
        # rows added by `extend_records` stay numpy records (formats.sst_records) until `finish`, while
        # nothing else is held; a call of another kind turns them into row tuples first
        self._recs: list[Any] = []
        self._distinct = True  # no key was added twice (older versions go through `add`)
        self.estimated_size = 0
        self._last_key: bytes | None = None
        self._last_seq: int | None = None

    def add(self, row: Sequence) -> None:
        """Add one row ``(key, seq, ts, expire_ts, value)``; raises ValueError when out of order."""
        key, seq, _ts, expire_ts, value = row
        if self._recs:
            self._rows_from_records()
        if self._cols is not None:
            self._rows_from_columns()
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
            self._distinct = False
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
        if self._recs:
            self._rows_from_records()
        if self._cols is not None:
            self._rows_from_columns()
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

    def extend_columns(
        self,
        keys: Sequence[bytes],
        seqs: Sequence[int | None] | int | None,
        tss: Sequence[int | None] | int | None,
        exps: Sequence[int | None] | int | None,
        values: Sequence[bytes | None] | Any,
        limit: int | None = None,
    ) -> bool:
        """Add rows given as columns: row i is ``(keys[i], seqs[i], tss[i], exps[i], values[i])``; `seqs`,
        `tss` and `exps` may each be one value (an int or None) that every row carries. `values` may also
        be a 1-d numpy array of dtype ``V<w>`` (w > 0): every row's value is its w bytes, no tombstone (a
        bulk load gathers values of one length that way, without a bytes object per row). The column path
        of `extend`: no tuple is made per row, and `finish` encodes the columns as they are (the file is
        the one `add` makes from the same rows, byte for byte). With `limit`, adds nothing and returns
        False when `estimated_size` would reach `limit`.

        Keys must rise strictly (one version per key) for the columns to pass at once; columns that do not
        pass the checks (a key repeated or out of order, a bad key or value, columns of unequal length) go
        through `add` row by row, with its errors. Returns True when added."""
        n = len(keys)
        if n == 0:
            return True
        keys = keys if type(keys) is list else list(keys)
        seqs, tss, exps = (_column(c, n) for c in (seqs, tss, exps))
        if is_value_array(values):
            width = values.dtype.itemsize
            vbytes = width * n
        else:
            values = values if type(values) is list else list(values)
        if not len(values) == len(seqs) == len(tss) == len(exps) == n:
            raise ValueError("columns of unequal length")
        last = self._last_key
        ok = (
            set(map(type, keys)) == {bytes}
            and 0 < min(map(len, keys))
            and max(map(len, keys)) <= MAX_KEY_LEN
            and (last is None or keys[0] > last)
            and all(map(bytes.__lt__, keys, keys[1:]))
        )
        ok = ok and (self.format_version != FORMAT_V0 or exps.count(None) == n)
        if ok and type(values) is list:
            kinds = set(map(type, values))
            ok = kinds <= {bytes, type(None)}
            if ok and bytes in kinds:
                ok = max(map(len, filter(None, values)), default=0) <= MAX_VALUE_LEN
            vbytes = sum(map(len, filter(None, values)))
        if not ok:
            if limit is not None:
                return False
            for row in zip(keys, seqs, tss, exps, value_list(values), strict=True):
                self.add(row)
            return True
        size = sum(map(len, keys)) + vbytes + 33 * n
        if limit is not None and self.estimated_size + size >= limit:
            return False
        if self._recs:
            self._rows_from_records()
        if self.rows:  # rows added before stay before: they become columns too
            self._cols = [list(c) for c in zip(*self.rows, strict=True)]
            self.rows = []
        if self._cols is None:
            self._cols = [keys, seqs, tss, exps, values]  # the caller's lists, never changed here
        else:
            old = self._cols
            if is_value_array(values) and is_value_array(old[4]) and values.dtype == old[4].dtype:
                import numpy as np

                values = np.concatenate((old[4], values))
            elif is_value_array(values) or is_value_array(old[4]):
                values = value_list(old[4]) + value_list(values)
            else:
                values = old[4] + values
            self._cols = [c + more for c, more in zip(old[:4], (keys, seqs, tss, exps), strict=True)] + [values]
        self.estimated_size += size
        self._last_key = keys[-1]
        self._last_seq = seqs[-1]
        return True

    def extend_records(self, records: Any, limit: int | None = None) -> bool:
        """Add rows given as one numpy array of records (`formats.sst_records`: the layout of
        `formats.row_array.array_dtype`, flag bit 0 a tombstone, bit 1 an expire_ts), as the columnar
        merge holds them. Held as they are until `finish`, which takes the file's figures and row stream
        from them in numpy (the file is the one `add` makes from the same rows, byte for byte). With
        `limit`, adds nothing and returns False when `estimated_size` would reach `limit`.

        Records that cannot go as they are (out of order, a key of no or too many bytes, a format version
        0 file, rows added otherwise and still held) go on as row tuples through `extend`, with its errors
        (ValueError for flag bits the layout cannot hold). Returns True when added."""
        if not is_records(records):
            raise ValueError("records must be a 1-d numpy array of formats.row_array.array_dtype")
        n = len(records)
        if n == 0:
            return True
        ordered, distinct = check_records(records, self._last_key, self._last_seq)
        if not ordered or self.format_version == FORMAT_V0 or self.rows or self._cols is not None:
            return self.extend(record_rows(records), limit)
        size = int(record_size(records).sum())
        if limit is not None and self.estimated_size + size >= limit:
            return False
        self._recs.append(records)
        self._distinct = self._distinct and distinct
        self.estimated_size += size
        self._last_key = records["key"][-1].tobytes()
        self._last_seq = int(records["seq"][-1])
        return True

    def _rows_from_records(self) -> None:
        """Turn the rows held as records into row tuples (before rows of another kind are added)."""
        recs, self._recs = self._recs, []
        for r in recs:
            self.rows += record_rows(r)

    def _rows_from_columns(self) -> None:
        """Turn the rows held as columns into row tuples (before `add` or `extend` adds more)."""
        cols, self._cols = self._cols, None
        if cols is not None:
            self.rows += zip(*cols[:4], value_list(cols[4]), strict=True)

    def __len__(self) -> int:
        if self._recs:
            return sum(map(len, self._recs))
        return len(self._cols[0]) if self._cols is not None else len(self.rows)

    def _encode_rows(self) -> tuple[dict[str, Any], tuple, tuple, bytes]:
        """`finish`'s encoding of rows added by `add`, `extend` or `extend_columns`: (the figures of
        `SsTableInfo`, the row features, (sealed data blocks, index entries, data size), the bloom
        filter's payload)."""
        rows: list[tuple] | None = self.rows
        if self._cols is not None:  # added as columns: encoded as columns, no row tuples
            keys, seqs, tss, exps, values = self._cols
            rows = None
        elif rows:
            keys, seqs, tss, exps, values = zip(*rows, strict=True)  # columns: the statistics run at C speed
        else:
            raise ValueError("an SST needs at least one row")
        n = len(keys)
        key_bytes = sum(map(len, keys))
        if is_value_array(values):  # values of one length, no tombstone
            tombstones = 0
            value_bytes = values.dtype.itemsize * n
        else:
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
        enc = BlockEncoder(self.block_bytes, self.compression, self.scratch)
        if codec.features in _FAST_LAYOUTS:
            columns = (keys, seqs, tss, exps, values)
            encoded = None
            if n >= _NUMPY_MIN_ROWS and len(keys[0]) * n == key_bytes:  # keys of one length, perhaps
                ranges = (min_ts, max_ts, min_exp, max_exp, min_seq, max_seq)
                encoded = enc.encode_numpy(columns, codec, tombstones, expiring, ranges)
            if encoded is None:
                columns = (keys, seqs, tss, exps, value_list(values))
                encoded = enc.encode_fast(columns, codec, tombstones, expiring)
        else:
            if rows is None:
                rows = list(zip(keys, seqs, tss, exps, value_list(values), strict=True))
            encoded = enc.encode(rows, codec)
        figures = {
            "min_ts": min_ts,
            "max_ts": max_ts,
            "min_seq": min_seq or 0,
            "max_seq": max_seq or 0,
            "num_rows": n,
            "num_tombstones": tombstones,
            "num_expiring": expiring,
            "min_expire_ts": min_exp,
            "max_expire_ts": max_exp,
            "key_bytes": key_bytes,
            "value_bytes": value_bytes,
            "first_key": keys[0],
            "last_key": keys[-1],
            "num_blocks": enc.num_blocks,
        }
        filt = bloom.build(keys if self._distinct else _distinct_keys(keys), self.bloom_bits_per_key)
        return figures, features, encoded, filt

    def _encode_records(self) -> tuple[dict[str, Any], tuple, tuple, bytes]:
        """`finish`'s encoding of rows added by `extend_records`, as `_encode_rows` returns it, taken from
        the records in numpy (`formats.sst_records`): the figures, the row stream, the block cuts and the
        index; the bloom filter from the keys' hashes (`formats.xxh3_numpy`) when the keys have one width
        (of at most 128 bytes), without a bytes object per key."""
        recs = self._recs
        figures = record_figures(recs)
        features = features_for(figures["num_expiring"] > 0)
        stream, starts = record_stream(recs, RowFeature.TimeToLive in features, self.scratch)
        enc = BlockEncoder(self.block_bytes, self.compression, self.scratch)
        bits = self.bloom_bits_per_key
        width = recs[0].dtype["key"].itemsize
        if any(r.dtype["key"].itemsize != width for r in recs):
            keys: Any = list(itertools.chain.from_iterable(r["key"].tolist() for r in recs))
            filt = bloom.build(keys if self._distinct else _distinct_keys(keys), bits)
        else:
            import numpy as np

            keys = recs[0]["key"] if len(recs) == 1 else np.concatenate([r["key"] for r in recs])
            hashes = key_hashes(keys)
            if hashes is None:
                listed = keys.tolist()
                filt = bloom.build(listed if self._distinct else _distinct_keys(listed), bits)
            else:
                if not self._distinct:  # one hash per key: a key's versions are adjacent
                    hashes = hashes[np.concatenate(([True], ~key_steps(key_words(keys))[1]))]
                filt = bloom.build_hashed(hashes, bits)
        figures["first_key"] = bytes(keys[0])
        figures["last_key"] = bytes(keys[-1])
        blocks = enc.blocks_of_stream(memoryview(stream), starts, keys, distinct=self._distinct)
        figures["num_blocks"] = enc.num_blocks
        return figures, features, blocks, filt

    def finish(self) -> SsTableInfo:
        """Encode, write and fsync the file; return its metadata. Raises ValueError when empty."""
        figures, features, (chunks, index_parts, offset), filt = (
            self._encode_records() if self._recs else self._encode_rows()
        )
        data_size = offset
        index = _seal(U32.pack(figures["num_blocks"]) + b"".join(index_parts))
        filt = _seal(filt)
        info = SsTableInfo(
            format_version=self.format_version,
            row_features=tuple(int(f) for f in features),
            creation_timestamp=self.creation_timestamp,
            **figures,
            data_size=data_size,
            index_offset=data_size,
            index_size=len(index),
            filter_offset=data_size + len(index),
            filter_size=len(filt),
            compression=COMPRESSION_NAMES[self.compression],
        )
        meta_dict = info.to_dict()
        del meta_dict["file_size"]
        meta = _seal(msgpack.packb(meta_dict, use_bin_type=True))
        meta_offset = info.filter_offset + len(filt)
        body = FOOTER_BODY.pack(meta_offset, len(meta), self.format_version, MAGIC)
        footer = body + U32.pack(xxhash.xxh32_intdigest(body))
        chunks += (index, filt, meta, footer)
        file_size = meta_offset + len(meta) + len(footer)
        # `put` is the storage seam's write of the caller's (an object, or a file); without one, a local
        # file through formats.fileio: every byte or an error naming the file, tests can inject faults,
        # and a partial SST is never left behind
        if self.put is not None:
            self.put(self.path, chunks)
        else:
            fileio.write_file(self.path, (b"".join(chunks),), sync=self.sync)
        self.rows = []
        self._cols = None
        self._recs = []
        return dataclasses.replace(info, file_size=file_size)


def _column(col: Sequence | int | None, n: int) -> list:
    """A column as a list: `col` itself when it is a list, one value repeated when it is an int or None."""
    if col is None or isinstance(col, int):
        return [col] * n
    return col if type(col) is list else list(col)


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


# formats.sst is the one import for callers: the reader (formats.sst_reader) and the layout's constants
# (formats.sst_layout) are re-exported with the writer
__all__ = [
    "COMPRESSION_CODES",
    "COMPRESSION_LZ4",
    "COMPRESSION_NAMES",
    "COMPRESSION_NONE",
    "COMPRESSION_ZLIB",
    "COMPRESSION_ZSTD",
    "FOOTER",
    "FOOTER_BODY",
    "INDEX_ENTRY",
    "KLEN",
    "KNOWN_COMPRESSIONS",
    "MAGIC",
    "ROW_INDEX_BYTES",
    "TRAILER",
    "U32",
    "BlockCache",
    "BlockHandle",
    "SsTableInfo",
    "SstReader",
    "SstWriter",
    "write_sst",
]

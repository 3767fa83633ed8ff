"""An SST's data blocks from its rows: `BlockEncoder`, the encoding half of `formats.sst.SstWriter`.

Three encoders give the same bytes (hypothesis tests in tests/formats hold them to each other): `encode`
goes row by row through the generic `RowCodec.encode_parts` (any row layout); `encode_fast` packs the
two layouts this engine writes (flags, ts, [expire_ts,] seq) column by column with `map`; `encode_numpy`
packs them as records of one numpy structured array when every key has one length. Each returns
(sealed data blocks, index entries, data size), the blocks cut where `SstWriter` cuts them: rows are
added to a block while it is under `block_bytes`, then until the key changes, so a key's versions never
straddle two blocks."""

from __future__ import annotations

import bisect
import itertools
import operator
import struct
from collections.abc import Sequence
from typing import Any

from formats.row import MAX_VALUE_LEN, RowCodec, RowFeature
from formats.sst_layout import COMPRESSION_NONE, INDEX_ENTRY, KLEN, TRAILER, _compress, _seal, _xxh3
from formats.sst_records import Scratch, key_steps, key_words

I64_MIN, I64_MAX, U64_MAX = -(2**63), 2**63 - 1, 2**64 - 1


class BlockEncoder:
    """Cuts and seals the data blocks of one SST (`block_bytes` per block, `compression` a code of
    `formats.sst_layout.COMPRESSION_CODES`)."""

    def __init__(self, block_bytes: int, compression: int, scratch: Scratch | None = None) -> None:
        self.block_bytes = block_bytes
        self.compression = compression
        self.scratch = scratch  # where uncompressed blocks are sealed, when given (`formats.sst_records`)
        self.num_blocks = 0  # blocks sealed so far (the uncompressed blocks of a stream are one chunk)

    def encode(self, rows: list[tuple], codec: RowCodec) -> tuple[list[bytes], list[bytes], int]:
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

    def encode_fast(
        self, columns: tuple[tuple, ...], codec: RowCodec, tombstones: int, expiring: int
    ) -> tuple[list[bytes], list[bytes], int]:
        """`encode` for the two layouts this engine writes (flags, ts, [expire_ts,] seq), column by
        column: the key lengths, attributes and value lengths are packed by `map` over the columns (C
        loops, no Python bytecode per row), the pieces interleaved by slice assignment, the block cuts
        found by bisecting the running row offsets. The same bytes as `encode` (a hypothesis test holds
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

    def encode_numpy(
        self,
        columns: tuple[Sequence, ...],
        codec: RowCodec,
        tombstones: int,
        expiring: int,
        ranges: tuple[int | None, ...],
    ) -> tuple[list[bytes], list[bytes], int] | None:
        """`encode_fast` for keys of one length, with numpy: every row's ``key_len | key | attrs |
        value_len`` is one record of a packed structured array (filled a column at a time; a column of one
        value is filled by broadcasting), and when every value has one length too the value is a field of
        it, so the whole row stream is one buffer and a block is a slice of it. Otherwise the fixed parts
        come out as one bytes object per row (one C call), interleaved with the values. None when the
        columns do not fit (keys of several lengths, a number out of its field's range): the caller then
        takes `encode_fast`, which writes the same bytes or raises its error."""
        keys, seqs, tss, exps, values = columns
        n = len(keys)
        width = len(keys[0])
        klens = list(map(len, keys))
        min_ts, max_ts, min_exp, max_exp, min_seq, max_seq = ranges
        if (
            klens.count(width) != n
            or not (I64_MIN <= min_ts and max_ts <= I64_MAX)  # type: ignore[operator]
            or not (0 <= min_seq and max_seq <= U64_MAX)  # type: ignore[operator]
            or (expiring and not (I64_MIN <= min_exp and max_exp <= I64_MAX))  # type: ignore[operator]
        ):
            return None
        import numpy as np

        if is_value_array(values):
            vals: Any = values
            vwidth = values.dtype.itemsize
            vlens: Any = None
            fixed_values = True
        else:
            vals = [b"" if v is None else v for v in values] if tombstones else values
            vlens = list(map(len, vals))
            vwidth = vlens[0]
            fixed_values = vwidth > 0 and vlens.count(vwidth) == n
        ttl = RowFeature.TimeToLive in codec.features
        fields = [("kl", ">u2"), ("k", f"V{width}"), ("f", "u1"), ("ts", ">i8")]
        fields += [("e", ">i8")] if ttl else []
        fields += [("s", ">u8"), ("vl", ">u4")]
        fields += [("v", f"V{vwidth}")] if fixed_values else []
        rec = np.empty(n, np.dtype(fields))  # packed: no alignment padding
        rec["kl"] = width
        rec["k"] = np.frombuffer(b"".join(keys), f"V{width}")
        flags = np.zeros(n, np.uint8)
        if tombstones:
            flags |= np.fromiter(map(operator.is_, values, itertools.repeat(None)), np.bool_, n)
        if ttl:
            has_exp = np.fromiter(map(operator.is_not, exps, itertools.repeat(None)), np.bool_, n)
            flags |= has_exp.view(np.uint8) << 1
            rec["e"] = dense_column(exps, 0) if expiring < n else dense_column(exps)
        rec["f"] = flags
        rec["ts"] = dense_column(tss)
        rec["s"] = dense_column(seqs)
        rec["vl"] = vwidth if fixed_values else vlens
        head = 2 + width + codec.attrs.size  # a row's bytes before its value
        if fixed_values:
            starts_np = np.arange(0, (n + 1) * (head + vwidth), head + vwidth, dtype=np.int64)
            rec["v"] = vals if vlens is None else np.frombuffer(b"".join(vals), f"V{vwidth}")
            stream = rec.view(np.uint8)  # the row stream as it is: each block below copies its slice once
        else:
            starts_np = np.zeros(n + 1, np.int64)
            np.cumsum(np.array(vlens, np.int64) + head, out=starts_np[1:])
            row_parts: list = [None] * (2 * n)
            row_parts[0::2] = rec.view(f"V{rec.dtype.itemsize}").tolist()  # bytes, one per row
            row_parts[1::2] = vals
            stream = b"".join(row_parts)
            del row_parts
        return self.blocks_of_stream(memoryview(stream), starts_np, keys, key_width=width)

    def blocks_of_stream(
        self, stream: memoryview, starts_np: Any, keys: Sequence[bytes] | Any, *, distinct: bool = False, key_width: int = 0
    ) -> tuple[list, list, int]:
        """The data blocks of a row stream (`stream`: every row encoded, in order; row i at `starts_np[i]`,
        its end at `starts_np[n]`), cut as `encode` cuts them: (sealed blocks, index entries, data size).
        `keys` are the rows' keys, a list of bytes or a numpy ``V<w>`` array (keys of one width);
        `distinct` says no key repeats and `key_width` that every key of a list has that many bytes (0:
        unknown). The row offset arrays of all blocks are computed at once, so a block costs a few
        calls, not a call per row; uncompressed blocks are sealed in one buffer (each block a view of
        it), and the index entries of keys of one width are packed as one record array."""
        import numpy as np

        n = len(keys)
        key_array = hasattr(keys, "dtype")
        if key_array:
            key_width = keys.dtype.itemsize
        at = np.array(self._cuts(starts_np, keys, distinct), np.int64)
        counts = np.diff(at)
        rel = starts_np[:n] - np.repeat(starts_np[at[:-1]], counts)  # each row's offset in its block
        # each block's tail: its rows' offsets, then its row count
        tails = memoryview(np.insert(rel, at[1:], counts).astype(">u4").tobytes())
        if self.compression == COMPRESSION_NONE:
            chunks, sizes = self._stored_blocks(stream, starts_np, at, tails)  # one chunk: all of them
        else:
            chunks = []
            code_byte = bytes((self.compression,))
            pack_q = struct.Struct(">Q").pack
            starts = starts_np[at].tolist()
            cuts = at.tolist()
            for b in range(len(cuts) - 1):
                rows_tail = (stream[starts[b] : starts[b + 1]], tails[4 * (cuts[b] + b) : 4 * (cuts[b + 1] + b + 1)])
                stored = b"".join((_compress(b"".join(rows_tail), self.compression), code_byte))
                chunks.append(stored + pack_q(_xxh3(stored)))  # as `_seal` seals it
            sizes = np.fromiter(map(len, chunks), np.int64, len(chunks))
        self.num_blocks += len(sizes)
        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if key_array:
            firsts, lasts = keys[at[:-1]], keys[at[1:] - 1]
        else:
            firsts = [keys[i] for i in at[:-1].tolist()]
            lasts = [keys[j - 1] for j in at[1:].tolist()]
        if key_width:
            entries = np.empty(len(sizes), np.dtype(_index_fields(key_width)))
            entries["offset"] = offsets[:-1]
            entries["size"] = sizes
            entries["rows"] = counts
            entries["first_len"] = entries["last_len"] = key_width
            entries["first"] = firsts if key_array else np.frombuffer(b"".join(firsts), f"V{key_width}")
            entries["last"] = lasts if key_array else np.frombuffer(b"".join(lasts), f"V{key_width}")
            index_parts = [entries.tobytes()]
        else:
            entry, klen = INDEX_ENTRY.pack, KLEN.pack
            index_parts = []
            for off, size, rows, first, last in zip(offsets[:-1].tolist(), sizes.tolist(), counts.tolist(), firsts, lasts, strict=True):
                index_parts += (entry(off, size, rows), klen(len(first)), first, klen(len(last)), last)
        return chunks, index_parts, int(offsets[-1])

    def _cuts(self, starts_np: Any, keys: Sequence[bytes], distinct: bool) -> list[int]:
        """Where `blocks_of_stream` cuts the rows into blocks: [0, first row of block 1, ..., n]. Rows are
        added to a block while it is under block_bytes, then until the key changes; rows of one size with
        distinct keys fill every block with the same count."""
        import numpy as np

        n = len(keys)
        block_bytes = self.block_bytes
        size = int(starts_np[1] - starts_np[0])
        if distinct and int(starts_np[n]) == n * size and (np.diff(starts_np) == size).all():
            return [*range(0, n, -(-block_bytes // size)), n]
        repeats = None
        if hasattr(keys, "dtype"):  # a key array: its repeats found at once, compared as words
            repeats = [False, *key_steps(key_words(keys))[1].tolist()]
        starts = starts_np.tolist()
        cuts = [0]
        i = 0
        while i < n:
            j = bisect.bisect_left(starts, starts[i] + block_bytes, i + 1, n)
            while j < n and (repeats[j] if repeats is not None else keys[j] == keys[j - 1]):
                j += 1
            cuts.append(j)
            i = j
        return cuts

    def _stored_blocks(self, stream: memoryview, starts_np: Any, at: Any, tails: memoryview) -> tuple[list, Any]:
        """Uncompressed blocks (rows `at[b]` to `at[b + 1]` of `stream`, then their tail from `tails`),
        sealed as `_seal` seals them, into one buffer: ([the buffer], the blocks' sizes)."""
        import numpy as np

        counts = np.diff(at)
        row_bytes = starts_np[at[1:]] - starts_np[at[:-1]]
        tail_bytes = 4 * (counts + 1)
        sizes = row_bytes + tail_bytes + TRAILER.size
        offsets = np.zeros(len(sizes) + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        total = int(offsets[-1])
        # every byte is written below: rows, tails, codes, checksums
        out = np.empty(total, np.uint8) if self.scratch is None else self.scratch.get("blocks", total)
        view = memoryview(out)
        code = self.compression
        # the leading blocks of one size and row count (rows of one size cut alike: most files) are the
        # rows of one 2-d array, filled a column range at a time; only their checksums take a call each
        same = (sizes != sizes[0]) | (counts != counts[0])
        m = int(np.argmax(same)) if same.any() else len(sizes)
        size, r, tb = int(sizes[0]), int(row_bytes[0]), int(tail_bytes[0])
        grid = out[: m * size].reshape(m, size)
        base = int(starts_np[0])
        grid[:, :r] = np.frombuffer(stream, np.uint8, m * r, base).reshape(m, r)
        grid[:, r : r + tb] = np.frombuffer(tails, np.uint8, m * tb).reshape(m, tb)
        grid[:, r + tb] = code
        sums = [_xxh3(view[o : o + r + tb + 1]) for o in range(0, m * size, size)]
        grid[:, r + tb + 1 :] = np.array(sums, np.uint64).astype(">u8").view(np.uint8).reshape(m, 8)
        pack_q = struct.Struct(">Q").pack_into
        t = m * tb
        rows_at = starts_np[at[m:-1]].tolist()
        lengths = (offsets[m:-1].tolist(), row_bytes[m:].tolist(), tail_bytes[m:].tolist(), rows_at)
        for o, r, tb, s in zip(*lengths, strict=True):
            view[o : o + r] = stream[s : s + r]
            e = o + r + tb
            view[o + r : e] = tails[t : t + tb]
            t += tb
            out[e] = code
            pack_q(out, e + 1, _xxh3(view[o : e + 1]))  # the checksum of the stored payload and its code
        return [view], sizes

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
        tail = struct.pack(f">{len(offsets) + 1}I", *offsets, len(offsets))
        return self._seal_block(parts, tail, len(offsets), first, last, chunks, index_parts, offset)

    def _seal_block(
        self,
        parts: list,
        tail: bytes,
        num_rows: int,
        first: bytes,
        last: bytes,
        chunks: list[bytes],
        index_parts: list[bytes],
        offset: int,
    ) -> int:
        """Seal one data block from its rows' bytes (`parts`, bytes-like) and `tail` (the packed offset
        array and count); append it and its index entry; return the offset after it."""
        parts.append(tail)
        block = _seal(b"".join(parts), self.compression)
        chunks.append(block)
        self.num_blocks += 1
        index_parts.append(INDEX_ENTRY.pack(offset, len(block), num_rows))
        index_parts += (KLEN.pack(len(first)), first, KLEN.pack(len(last)), last)
        return offset + len(block)


def _index_fields(width: int) -> list[tuple[str, str]]:
    """One index entry (`formats.sst`'s index block) as numpy record fields, for keys of `width` bytes."""
    return [
        ("offset", ">u8"),
        ("size", ">u4"),
        ("rows", ">u4"),
        ("first_len", ">u2"),
        ("first", f"V{width}"),
        ("last_len", ">u2"),
        ("last", f"V{width}"),
    ]


def is_value_array(values: Any) -> bool:
    """True for a numpy array of fixed-width values (dtype ``V<w>``, w > 0), as `extend_columns` takes
    them (checked without importing numpy)."""
    dtype = getattr(values, "dtype", None)
    return (
        dtype is not None
        and getattr(values, "ndim", 0) == 1
        and dtype.kind == "V"
        and dtype.names is None
        and 0 < dtype.itemsize <= MAX_VALUE_LEN
    )


def value_list(values: Any) -> list:
    """A value column as a list of bytes/None (a fixed-width array's rows become bytes)."""
    if is_value_array(values):
        return values.tolist()
    return values if type(values) is list else list(values)


def dense_column(col: list, none: int | None = None) -> Any:
    """A numeric column for numpy: its one value when every row has the same (list.count is a C loop of
    identity checks for a column of one object), else the list, None replaced by `none` when given."""
    first = col[0]
    if col.count(first) == len(col) and (first is not None or none is not None):
        return none if first is None else first
    if none is not None:
        return [none if x is None else x for x in col]
    return col


__all__ = ["BlockEncoder", "dense_column", "is_value_array", "value_list"]

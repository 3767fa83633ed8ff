"""Row codec: the per-row byte layouts of the SlateDB TTL RFC ("SlateDB Timestamps & Time-To-Live",
slatedb/slatedb rfcs/0003-timestamps-and-ttl.md, section "Data Format"; summary in docs/sources.md).

All integers are big-endian and fixed width.

Format version 0 (legacy)::

    | u16 key_len | key | u32 value_len | value |
    a tombstone is value_len = 0xFFFFFFFF with no value bytes

Format version 1::

    | u16 key_len | key | attrs | u32 value_len | value |

    attrs = the SST's row_features, in enum order, each present only if the SST has the feature:
        RowFlags   (0)  u8   bit 0 = tombstone, bit 1 = has expire_ts (only in an SST with TimeToLive),
                             other bits reserved (must be 0)
        Timestamp  (1)  i64  ts, ms
        TimeToLive (2)  i64  expire_ts, ms; present in every row of an SST that has the feature,
                             meaningful only when RowFlags bit 1 is set (otherwise written as 0, ignored)
        Seq        (3)  u64  commit sequence number (this project's extension, for MVCC)
    a tombstone has value_len 0 and no value bytes; its RowFlags bit 0 says it is one.
    A tombstone needs RowFlags; an expire_ts needs RowFlags and TimeToLive (encoding refuses otherwise).

In memory a row is the plain tuple ``(key, seq, ts, expire_ts, value)`` — ``value is None`` for a
tombstone, ``ts``/``expire_ts``/``seq`` ``None`` when the layout does not carry them. Plain tuples,
not objects, because the merge and the scans handle millions of them (see `Row` for the names).

Deliberate simplifications: v0 rows carry no ts, expire_ts or seq (readers report ``None``; the SST reader
substitutes the file's max_seq, see `formats.sst`), so v0 cannot hold TTL rows.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from formats.errors import CorruptionError, FormatVersionError
from formats.row_array import RowArray, array_dtype

# DO NOT CHANGE: stored on disk.
FORMAT_V0 = 0
FORMAT_V1 = 1
SUPPORTED_FORMAT_VERSIONS = (FORMAT_V0, FORMAT_V1)
V0_TOMBSTONE_LEN = 0xFFFFFFFF
MAX_KEY_LEN = 0xFFFF
MAX_VALUE_LEN = 0xFFFFFFFE  # values must be shorter than 0xFFFFFFFF (the v0 tombstone marker)

KEY_LEN = struct.Struct(">H")
VALUE_LEN = struct.Struct(">I")


class RowFeature(enum.IntEnum):
    """Per-row attributes an SST may carry. DO NOT CHANGE: the values are stored on disk."""

    RowFlags = 0
    Timestamp = 1
    TimeToLive = 2
    Seq = 3


class RowFlags(enum.IntFlag):
    """Bits of the RowFlags attribute. DO NOT CHANGE: stored on disk."""

    TOMBSTONE = 1
    HAS_EXPIRE_TS = 2


KNOWN_FLAG_BITS = int(RowFlags.TOMBSTONE | RowFlags.HAS_EXPIRE_TS)
ALL_FEATURES: tuple[RowFeature, ...] = tuple(RowFeature)


class Row(NamedTuple):
    """Names of the fields of the in-memory row tuple (the codec returns plain tuples in this order)."""

    key: bytes
    seq: int | None
    ts: int | None
    expire_ts: int | None
    value: bytes | None  # None = tombstone

    @property
    def tombstone(self) -> bool:
        """True for a delete (no value)."""
        return self.value is None


def check_key(key: object) -> None:
    """Raise TypeError/ValueError unless `key` is bytes of 1..65535 bytes."""
    if type(key) is not bytes:
        raise TypeError(f"key must be bytes, not {type(key).__name__}")
    if not 0 < len(key) <= MAX_KEY_LEN:
        raise ValueError(f"key must be 1..{MAX_KEY_LEN} bytes long, got {len(key)}")


def check_value(value: object) -> None:
    """Raise TypeError/ValueError unless `value` is bytes shorter than 0xFFFFFFFF."""
    if type(value) is not bytes:
        raise TypeError(f"value must be bytes, not {type(value).__name__}")
    if len(value) > MAX_VALUE_LEN:
        raise ValueError(f"value must be shorter than 0xFFFFFFFF bytes, got {len(value)}")


def normalize_features(features: Iterable[int]) -> tuple[RowFeature, ...]:
    """Validate feature codes read from disk or given by a caller; return them in enum order."""
    out = set()
    for f in features:
        try:
            out.add(RowFeature(f))
        except ValueError:
            raise FormatVersionError("<row features>", f"unknown row feature {f!r}") from None
    return tuple(sorted(out))


class RowCodec:
    """Encoder/decoder for one (format_version, row_features) pair; get one with `codec_for`."""

    def __init__(self, version: int, features: Sequence[int] = ()) -> None:
        if version not in SUPPORTED_FORMAT_VERSIONS:
            raise FormatVersionError("<row codec>", f"unknown SST format version {version}")
        self.version = version
        self.features = normalize_features(features) if version == FORMAT_V1 else ()
        fs = set(self.features)
        self.has_flags = RowFeature.RowFlags in fs
        self.has_ts = RowFeature.Timestamp in fs
        self.has_ttl = RowFeature.TimeToLive in fs
        self.has_seq = RowFeature.Seq in fs
        fmt = ">"
        if self.has_flags:
            fmt += "B"
        if self.has_ts:
            fmt += "q"
        if self.has_ttl:
            fmt += "q"
        if self.has_seq:
            fmt += "Q"
        self.attrs = struct.Struct(fmt + "I")  # attrs followed by value_len
        self.attrs_size = self.attrs.size - 4
        self._row_structs: dict[int, struct.Struct] = {}
        # bit 1 promises an expire_ts: only meaningful when the layout has the slot for it
        self.bad_flag_bits = ~(KNOWN_FLAG_BITS if self.has_ttl else int(RowFlags.TOMBSTONE))
        if self.features == _FTS:
            self.decode_version = _fts_version(self.attrs.unpack_from)
        elif self.features == _FTTS:
            self.decode_version = _ftts_version(self.attrs.unpack_from)

    # -- encoding ---------------------------------------------------------------------------------
    def encode_parts(self, row: Sequence, out: list) -> int:
        """Append the encoded pieces of `row` to `out`; return the encoded length."""
        key, seq, ts, expire_ts, value = row
        if self.version == FORMAT_V0:
            if expire_ts is not None:
                raise ValueError("format version 0 cannot store expire_ts")
            if value is None:
                out += (KEY_LEN.pack(len(key)), key, VALUE_LEN.pack(V0_TOMBSTONE_LEN))
                return 6 + len(key)
            out += (KEY_LEN.pack(len(key)), key, VALUE_LEN.pack(len(value)), value)
            return 6 + len(key) + len(value)
        attrs = []
        if self.has_flags:
            flags = 0
            if value is None:
                flags = 1
            if expire_ts is not None:
                flags |= 2
            attrs.append(flags)
        elif value is None:
            raise ValueError("a tombstone needs the RowFlags feature")
        if self.has_ts:
            attrs.append(0 if ts is None else ts)
        if expire_ts is not None and not (self.has_ttl and self.has_flags):
            # without RowFlags bit 1 a reader ignores the expire_ts slot: the row would never expire
            raise ValueError("a row with expire_ts needs the RowFlags and TimeToLive features")
        if self.has_ttl:
            attrs.append(0 if expire_ts is None else expire_ts)
        if self.has_seq:
            attrs.append(0 if seq is None else seq)
        if value is None:
            value = b""
        attrs.append(len(value))
        out += (KEY_LEN.pack(len(key)), key, self.attrs.pack(*attrs), value)
        return 2 + len(key) + self.attrs.size + len(value)

    def encode(self, row: Sequence) -> bytes:
        """Encode one row (validating key and value)."""
        check_key(row[0])
        if row[4] is not None:
            check_value(row[4])
        parts: list = []
        self.encode_parts(row, parts)
        return b"".join(parts)

    # -- decoding ---------------------------------------------------------------------------------
    def decode_from(self, buf: bytes, pos: int, path: str = "<bytes>", default_seq: int | None = None):
        """Decode the row at `pos`; return ``(row_tuple, next_pos)``.

        Raises CorruptionError when the row runs past the buffer or has unknown flag bits.
        """
        end = len(buf)
        start = pos
        if pos + 2 > end:
            raise CorruptionError(path, start, "row header runs past the end of the block")
        (klen,) = KEY_LEN.unpack_from(buf, pos)
        pos += 2
        key = buf[pos : pos + klen]
        pos += klen
        if self.version == FORMAT_V0:
            if pos + 4 > end:
                raise CorruptionError(path, start, "row runs past the end of the block")
            (vlen,) = VALUE_LEN.unpack_from(buf, pos)
            pos += 4
            if vlen == V0_TOMBSTONE_LEN:
                return (key, default_seq, None, None, None), pos
            if pos + vlen > end:
                raise CorruptionError(path, start, "value runs past the end of the block")
            return (key, default_seq, None, None, buf[pos : pos + vlen]), pos + vlen
        if pos + self.attrs.size > end:
            raise CorruptionError(path, start, "row attributes run past the end of the block")
        vals = self.attrs.unpack_from(buf, pos)
        pos += self.attrs.size
        vlen = vals[-1]
        i = 0
        flags = 0
        if self.has_flags:
            flags = vals[0]
            i = 1
            if flags & self.bad_flag_bits:
                if flags & ~KNOWN_FLAG_BITS:
                    raise CorruptionError(path, start, f"unknown row flag bits {flags:#04x}")
                raise CorruptionError(path, start, "row flags say expire_ts but the SST has no TimeToLive")
        ts = None
        if self.has_ts:
            ts = vals[i]
            i += 1
        expire_ts = None
        if self.has_ttl:
            if flags & 2:
                expire_ts = vals[i]
            i += 1
        seq = default_seq
        if self.has_seq:
            seq = vals[i]
        if flags & 1:
            if vlen:
                raise CorruptionError(path, start, "tombstone with a non-empty value")
            return (key, seq, ts, expire_ts, None), pos
        if pos + vlen > end:
            raise CorruptionError(path, start, "value runs past the end of the block")
        return (key, seq, ts, expire_ts, buf[pos : pos + vlen]), pos + vlen

    def decode_block(self, buf: bytes, path: str = "<bytes>", default_seq: int | None = None) -> list[tuple]:
        """Decode every row of a buffer of back-to-back rows (a data block's row area).

        The two layouts this engine writes get a loop with everything hoisted; others go row by row
        through `decode_from`. Same results and errors either way. O(rows)."""
        feats = self.features
        if feats == _FTS:
            return self._decode_fts(buf, path)
        if feats == _FTTS:
            return self._decode_ftts(buf, path)
        rows = []
        pos = 0
        end = len(buf)
        decode = self.decode_from
        while pos < end:
            row, pos = decode(buf, pos, path, default_seq)
            rows.append(row)
        return rows

    def _row_struct(self, klen: int) -> struct.Struct:
        """``u16 key_len | key | attrs | u32 value_len`` for keys of `klen` bytes: one unpack per row
        when a block's keys share a length (fixed-size keys are the common case)."""
        st = self._row_structs.get(klen)
        if st is None:
            st = struct.Struct(f">H{klen}s{self.attrs.format[1:]}")
            if len(self._row_structs) < 64:
                self._row_structs[klen] = st
        return st

    def _decode_fts(self, buf: bytes, path: str) -> list[tuple]:
        rows: list[tuple] = []
        append = rows.append
        unpack_a = self.attrs.unpack_from
        asz = self.attrs.size
        pos = 0
        end = len(buf)
        try:
            klen = KEY_LEN.unpack_from(buf, 0)[0] if end >= 2 else 0
            whole = self._row_struct(klen)
            unpack_w = whole.unpack_from
            wsz = whole.size
            while pos < end:
                try:
                    kl, key, flags, ts, seq, vlen = unpack_w(buf, pos)
                except struct.error:
                    kl = -1
                if kl == klen:
                    p = pos + wsz
                else:  # a key of another length (or a row shorter than the guess): field by field
                    p = pos + 2 + KEY_LEN.unpack_from(buf, pos)[0]
                    key = buf[pos + 2 : p]
                    flags, ts, seq, vlen = unpack_a(buf, p)
                    p += asz
                if flags:
                    if flags != 1 or vlen:
                        raise CorruptionError(path, pos, f"bad row flags {flags:#04x} or tombstone value")
                    append((key, seq, ts, None, None))
                    pos = p
                else:
                    pos = p + vlen
                    append((key, seq, ts, None, buf[p:pos]))
        except struct.error:
            raise CorruptionError(path, pos, "row runs past the end of the block") from None
        if pos != end:
            raise CorruptionError(path, end, "last row runs past the end of the block")
        return rows

    def _decode_ftts(self, buf: bytes, path: str) -> list[tuple]:
        rows: list[tuple] = []
        append = rows.append
        unpack_a = self.attrs.unpack_from
        asz = self.attrs.size
        pos = 0
        end = len(buf)
        try:
            klen = KEY_LEN.unpack_from(buf, 0)[0] if end >= 2 else 0
            whole = self._row_struct(klen)
            unpack_w = whole.unpack_from
            wsz = whole.size
            while pos < end:
                try:
                    kl, key, flags, ts, exp, seq, vlen = unpack_w(buf, pos)
                except struct.error:
                    kl = -1
                if kl == klen:
                    p = pos + wsz
                else:  # a key of another length (or a row shorter than the guess): field by field
                    p = pos + 2 + KEY_LEN.unpack_from(buf, pos)[0]
                    key = buf[pos + 2 : p]
                    flags, ts, exp, seq, vlen = unpack_a(buf, p)
                    p += asz
                if flags & ~3:
                    raise CorruptionError(path, pos, f"unknown row flag bits {flags:#04x}")
                if not flags & 2:
                    exp = None
                if flags & 1:
                    if vlen:
                        raise CorruptionError(path, pos, "tombstone with a non-empty value")
                    append((key, seq, ts, exp, None))
                    pos = p
                else:
                    pos = p + vlen
                    append((key, seq, ts, exp, buf[p:pos]))
        except struct.error:
            raise CorruptionError(path, pos, "row runs past the end of the block") from None
        if pos != end:
            raise CorruptionError(path, end, "last row runs past the end of the block")
        return rows

    def rows_array(self, buf: bytes) -> RowArray | None:
        """The rows of a row area (as `decode_block` takes it) as one numpy structured array, when they
        are all alike: one key length, one value length, no tombstone, in one of the two layouts this
        engine writes (db_bench's rows, and most fixed-size data). One view over the bytes, checked a
        column at a time: every row's key_len and value_len equal the first row's (so row i starts at i
        times the row size, as the row-by-row decoder finds it) and no flag bit is set but "has
        expire_ts". None for any other area: `decode_block` then decodes it (or names its fault). O(rows),
        in C."""
        feats = self.features
        end = len(buf)
        if (feats != _FTS and feats != _FTTS) or end < 2:
            return None
        klen = KEY_LEN.unpack_from(buf, 0)[0]
        at = 2 + klen + self.attrs_size
        if end < at + 4 or not klen:  # (an empty key is no valid key: left to decode_block)
            return None
        vlen = VALUE_LEN.unpack_from(buf, at)[0]
        dtype = array_dtype(klen, vlen, feats == _FTTS)
        if end % dtype.itemsize:
            return None
        import numpy as np

        a = np.frombuffer(buf, dtype)
        bad_flags = 0xFD if feats == _FTTS else 0xFF  # only "has expire_ts", and only with TimeToLive
        if (a["kl"] != klen).any() or (a["vl"] != vlen).any() or (a["flags"] & bad_flags).any():
            return None
        return RowArray(a, self)

    def rows_array_ragged(self, buf: bytes, starts: Any, nexts: Any) -> RowArray | None:
        """`rows_array` for a row area whose rows are alike but for tombstones (db_bench's rows with some
        deletes): one key length, every value of one length, a tombstone with no value. Row i starts at
        ``starts[i]`` and must end at ``nexts[i]`` (the next row's start, or its block's end: an int64
        numpy array each, from the blocks' offset arrays); every row's record of the alike layout is
        gathered (a tombstone's record runs into the next row: its value bytes are meaningless) into a
        `RowArray` with ``ragged`` set, which tells tombstones by their flag. None when the rows are not
        so (the checks of `decode_block`, column-wise: lengths, flag bits, each row ending where the next
        starts)."""
        feats = self.features
        n = len(starts)
        if (feats != _FTS and feats != _FTTS) or not n or len(buf) < 2:
            return None
        import numpy as np

        b = np.frombuffer(buf, np.uint8)
        klen = KEY_LEN.unpack_from(buf, 0)[0]
        head = 2 + klen + self.attrs_size  # a row's bytes before value_len
        if not klen or int(starts.min()) < 0 or int(starts.max()) + head + 4 > len(buf):
            return None
        live = np.flatnonzero((b[starts + 2 + klen] & 1) == 0)  # the flags byte follows the key
        if not len(live):
            return None
        vlen = VALUE_LEN.unpack_from(buf, int(starts[live[0]]) + head)[0]
        if not vlen or vlen > len(buf):  # (read at this key length: a row of another has any number here)
            return None
        dtype = array_dtype(klen, vlen, feats == _FTTS)
        size = dtype.itemsize
        from formats.log import byte_windows

        # a record at each start (a tombstone at the end may run past the buffer: then padded), one C gather
        src = buf if int(starts.max()) + size <= len(buf) else b"".join((buf, bytes(size)))
        a = np.frombuffer(byte_windows(src, size)[starts], dtype)
        flags = a["flags"]
        tomb = (flags & 1) != 0
        bad_flags = 0xFC if feats == _FTTS else 0xFE
        vl = a["vl"]
        if (
            (a["kl"] != klen).any()
            or (flags & bad_flags).any()
            or (vl != np.where(tomb, 0, vlen)).any()
            or (starts + (head + 4) + vl.astype(np.int64) != nexts).any()
        ):
            return None
        return RowArray(a, self, ragged=True)

    # -- point reads: one row whose key the caller already holds -------------------------------------
    def decode_version(self, buf: bytes, pos: int, key: bytes, default_seq: int | None = None) -> tuple | None:
        """The row whose key, equal to `key`, ends at `pos` (the row starts at ``pos - 2 - len(key)``).

        A point read found the key by an index and needs only this row: the layouts this engine writes
        get a short decoder (set per codec in ``__init__``). Returns None where `decode_from` would raise,
        so a caller re-reads the row with it to get the error that names the fault. O(1)."""
        try:
            return self.decode_from(buf, pos - 2 - len(key), "<block>", default_seq)[0]
        except CorruptionError:
            return None

    def decode(self, buf: bytes) -> tuple:
        """Decode a buffer holding exactly one row."""
        row, pos = self.decode_from(buf, 0)
        if pos != len(buf):
            raise CorruptionError("<bytes>", pos, f"{len(buf) - pos} trailing bytes after the row")
        return row

    def key_at(self, buf: bytes, pos: int) -> bytes:
        """The key of the row at `pos`, without decoding the rest (used by in-block binary search)."""
        (klen,) = KEY_LEN.unpack_from(buf, pos)
        return buf[pos + 2 : pos + 2 + klen]


def _fts_version(unpack: Callable[[bytes, int], tuple]) -> Callable[..., tuple | None]:
    """`RowCodec.decode_version` for the FTS layout, as a closure over its attrs unpacker (a point
    read's decode, so no attribute lookups)."""

    def version(buf: bytes, pos: int, key: bytes, default_seq: int | None = None) -> tuple | None:
        flags, ts, seq, vlen = unpack(buf, pos)
        pos += 21  # u8 flags, i64 ts, u64 seq, u32 value_len
        if flags:
            return (key, seq, ts, None, None) if flags == 1 and not vlen else None
        end = pos + vlen
        return (key, seq, ts, None, buf[pos:end]) if end <= len(buf) else None

    return version


def _ftts_version(unpack: Callable[[bytes, int], tuple]) -> Callable[..., tuple | None]:
    """`RowCodec.decode_version` for the FTTS layout (see `_fts_version`)."""

    def version(buf: bytes, pos: int, key: bytes, default_seq: int | None = None) -> tuple | None:
        flags, ts, exp, seq, vlen = unpack(buf, pos)
        pos += 29  # u8 flags, i64 ts, i64 expire_ts, u64 seq, u32 value_len
        if flags & ~3:
            return None
        if not flags & 2:
            exp = None
        if flags & 1:
            return (key, seq, ts, exp, None) if not vlen else None
        end = pos + vlen
        return (key, seq, ts, exp, buf[pos:end]) if end <= len(buf) else None

    return version


_FTS = (RowFeature.RowFlags, RowFeature.Timestamp, RowFeature.Seq)
_FTTS = (RowFeature.RowFlags, RowFeature.Timestamp, RowFeature.TimeToLive, RowFeature.Seq)
_CODECS: dict[tuple, RowCodec] = {}


def codec_for(version: int, features: Sequence[int] = ()) -> RowCodec:
    """A cached RowCodec for this layout."""
    k = (version, tuple(features))
    c = _CODECS.get(k)
    if c is None:
        c = _CODECS[k] = RowCodec(version, features)
    return c


def features_for(rows_have_ttl: bool, with_seq: bool = True) -> tuple[RowFeature, ...]:
    """The v1 feature set this engine writes: flags and ts always, TTL only when some row has one."""
    f = [RowFeature.RowFlags, RowFeature.Timestamp]
    if rows_have_ttl:
        f.append(RowFeature.TimeToLive)
    if with_seq:
        f.append(RowFeature.Seq)
    return tuple(f)

"""Rows of a data block as one numpy structured array: `RowCodec.rows_array` builds a `RowArray` when
every row of a row area is alike (one key length, one value length, no tombstone, in one of the two
layouts this engine writes), and the forward scan (`lsm.readpath`) and the streaming merge
(`compaction.stream`) take it a batch at a time instead of one tuple per row.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from formats.row import RowCodec

_DTYPES: dict[tuple[int, int, bool], Any] = {}


def array_dtype(klen: int, vlen: int, ttl: bool) -> Any:
    """The numpy record of one row of `RowCodec.rows_array` (packed, big-endian, as on disk). The key is
    there twice, over the same bytes: ``key`` (void: `.tolist()` gives the exact bytes) and ``skey``
    (a byte string of the key's width, for sorting and comparing in numpy: for strings of one width
    numpy's order and equality are the bytes' own; only its conversion to Python strips trailing NULs)."""
    k = (klen, vlen, ttl)
    dt = _DTYPES.get(k)
    if dt is None:
        import numpy as np

        names = ["kl", "key", "skey", "flags", "ts"] + (["exp"] if ttl else []) + ["seq", "vl", "val"]
        formats = [">u2", f"V{klen}", f"S{klen}", "u1", ">i8"] + ([">i8"] if ttl else []) + [">u8", ">u4", f"V{vlen}"]
        offsets = [0, 2, 2]
        at = 2 + klen
        for f in formats[3:]:
            offsets.append(at)
            at += np.dtype(f).itemsize
        dt = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": at})
        if len(_DTYPES) < 256:
            _DTYPES[k] = dt
    return dt


class RowArray:
    """Rows of one sorted source as a numpy structured array (`RowCodec.rows_array`): what a forward
    scan resolves a batch at a time in numpy (`lsm.readpath`), and what the streaming merge
    (`compaction.stream.merge_rounds`) cuts into rounds. `rows()` gives the row tuples `decode_block`
    gives for the same bytes, for any step that needs them."""

    __slots__ = ("arr", "codec", "ragged")

    def __init__(self, arr: Any, codec: RowCodec, ragged: bool = False) -> None:
        self.arr = arr
        self.codec = codec
        # rows gathered from a row area with tombstones (`RowCodec.rows_array_ragged`, for the compaction
        # only: the scan's arrays have none): flag bit 0 marks a tombstone, whose value bytes mean nothing
        self.ragged = ragged

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, s: slice) -> RowArray:
        return RowArray(self.arr[s], self.codec, self.ragged)

    def first_key(self) -> bytes:
        """The key of the first row."""
        return self.arr["key"][0].tobytes()

    def last_key(self) -> bytes:
        """The key of the last row."""
        return self.arr["key"][-1].tobytes()

    def keys(self) -> list[bytes]:
        """Every row's key."""
        return self.arr["key"].tolist()

    def max_seq(self) -> int:
        """The largest seq of the rows."""
        return int(self.arr["seq"].max())

    def min_expire_ts(self) -> int | None:
        """The smallest expire_ts of the rows that have one (None if none has)."""
        if "exp" not in self.arr.dtype.names:
            return None
        has = (self.arr["flags"] & 2) != 0  # "has expire_ts"
        return int(self.arr["exp"][has].min()) if has.any() else None

    def bisect_right(self, key: bytes, lo: int = 0) -> int:
        """The index after the last row with a key <= `key`, from `lo` (keys ascending). O(log rows)."""
        return bisect.bisect_right(self.arr["key"], key, lo, key=_void_bytes)

    def rows(self) -> list[tuple]:
        """The rows as tuples, exactly as `RowCodec.decode_block` decodes the same bytes."""
        if not self.ragged:
            return self.codec.decode_block(self.arr.tobytes())
        return record_rows(self.arr)


def record_rows(a: Any) -> list[tuple]:
    """The rows of records `a` (`array_dtype`, any widths) as tuples, telling tombstones and expire_ts by
    their flags (a tombstone's value bytes, and the expire_ts slot of a row without one, mean nothing)."""
    import numpy as np

    flags = a["flags"]
    values = np.array(a["val"].tolist(), object)
    values[(flags & 1) != 0] = None
    if "exp" in a.dtype.names:
        exps = np.array(a["exp"].tolist(), object)
        exps[(flags & 2) == 0] = None
        exp_list = exps.tolist()
    else:
        exp_list = [None] * len(a)
    return list(zip(a["key"].tolist(), a["seq"].tolist(), a["ts"].tolist(), exp_list, values.tolist(), strict=True))


def _void_bytes(v: Any) -> bytes:
    return v.tobytes()


__all__ = ["RowArray", "array_dtype", "record_rows"]

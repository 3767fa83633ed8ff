"""An SST's rows given as numpy records, as the columnar merge holds them: `SstWriter.extend_records`
checks them (`check_records`), and `SstWriter.finish` takes their figures (`record_figures`) and their
row stream (`record_stream`) from them with a few numpy passes, no Python object per row but each key.

A record is one row in the layout of `formats.row_array.array_dtype` (what `RowCodec.rows_array` reads
from a data block, so a block's records are its row area)::

    | u16 key_len | key | u8 flags | i64 ts | [i64 expire_ts] | u64 seq | u32 value_len | value |

big-endian, packed, one key length and one value length per array (``skey`` is the key again, as a byte
string numpy sorts). Flag bit 0 marks a tombstone, whose value bytes are ignored; bit 1 says the row has
an expire_ts, whose slot is ignored otherwise. ``key_len`` and ``value_len`` are ignored too: the stream
is written from the dtype's widths. That is the file's own row layout (`formats.row`, flags, ts,
[expire_ts,] seq), so an array of rows alike in the file's layout (every row with a value, the expire_ts
slot present exactly when the file has one) is its own row stream, used as it is; any other array is
copied once into that layout (a tombstone's value cut out, the expire_ts slot dropped or added, an
ignored slot zeroed): the bytes the row path writes for the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from formats.row import KNOWN_FLAG_BITS, MAX_KEY_LEN, MAX_VALUE_LEN, RowFlags
from formats.row_array import array_dtype

_TOMBSTONE = int(RowFlags.TOMBSTONE)
_HAS_EXP = int(RowFlags.HAS_EXPIRE_TS)


def is_records(a: Any) -> bool:
    """Whether `a` is a 1-d numpy array of records (`formats.row_array.array_dtype`, any widths)."""
    dtype = getattr(a, "dtype", None)
    if dtype is None or dtype.names is None or getattr(a, "ndim", 0) != 1 or not {"key", "val"} <= set(dtype.names):
        return False
    return dtype == array_dtype(dtype["key"].itemsize, dtype["val"].itemsize, "exp" in dtype.names)


def check_records(a: Any, last_key: bytes | None, last_seq: int | None) -> tuple[bool, bool]:
    """Whether records `a` (non-empty, `is_records`) can follow a row of `last_key`/`last_seq` as they are:
    a key of 1 to MAX_KEY_LEN bytes, values of at most MAX_VALUE_LEN, keys ascending and a key's versions
    by seq descending (across `last_key` too); and whether every key is distinct, after `last_key` too.
    Raises ValueError for flag bits the layout cannot hold. O(rows), in numpy."""
    import numpy as np

    dtype = a.dtype
    flags = a["flags"]
    allowed = KNOWN_FLAG_BITS if "exp" in dtype.names else _TOMBSTONE
    if (flags & np.uint8(0xFF ^ allowed)).any():
        raise ValueError(f"records with unknown row flag bits {int(np.bitwise_or.reduce(flags)):#04x}")
    if not 0 < dtype["key"].itemsize <= MAX_KEY_LEN or dtype["val"].itemsize > MAX_VALUE_LEN:
        return False, False
    seq = a["seq"]
    rises, same = key_steps(key_words(a["key"]))
    ordered = bool((rises | (same & (seq[1:] < seq[:-1]))).all())
    distinct = not same.any()
    if last_key is not None:
        first = a["key"][0].tobytes()
        if first == last_key:
            ordered = ordered and last_seq is not None and int(seq[0]) < last_seq
            distinct = False
        ordered = ordered and first >= last_key
    return ordered, distinct


def key_words(keys: Any) -> list[Any]:
    """Keys of one width (a numpy ``V<w>`` array, a record field too) as columns of unsigned 64-bit
    words, most significant first (the last padded with zero bytes): the keys' byte order is the order
    of these columns taken in turn, and numpy compares words many times faster than byte strings."""
    import numpy as np

    n = len(keys)
    width = keys.dtype.itemsize
    raw = np.ascontiguousarray(keys).view(np.uint8).reshape(n, width)
    if width % 8:
        padded = np.zeros((n, width + 8 - width % 8), np.uint8)
        padded[:, :width] = raw
        raw = padded
    words = raw.view(">u8").astype(np.uint64)
    return [words[:, c] for c in range(words.shape[1])]


def key_steps(words: list[Any]) -> tuple[Any, Any]:
    """From `key_words`, for each pair of adjacent keys: (whether the key rises, whether it repeats)."""
    rises = same = None
    for w in words:
        up, eq = w[1:] > w[:-1], w[1:] == w[:-1]
        if same is None:
            rises, same = up, eq
        else:
            rises |= same & up
            same &= eq
    return rises, same


def record_size(a: Any) -> Any:
    """Each record's share of `SstWriter.estimated_size`: key + value (none for a tombstone) + 33, int64."""
    import numpy as np

    vlen = a.dtype["val"].itemsize
    sizes = np.full(len(a), a.dtype["key"].itemsize + vlen + 33, np.int64)
    if vlen:
        sizes -= ((a["flags"] & _TOMBSTONE) != 0) * np.int64(vlen)
    return sizes


def record_figures(arrays: Sequence[Any]) -> dict[str, Any]:
    """The `SsTableInfo` figures of the rows of `arrays` (in order): num_rows, num_tombstones,
    num_expiring, key_bytes, value_bytes and the min/max of ts, seq and expire_ts (None where no row has
    one)."""
    import numpy as np

    n = tombs = expiring = key_bytes = value_bytes = 0
    ts: list[int] = []
    seqs: list[int] = []
    exps: list[int] = []
    for a in arrays:
        m = len(a)
        flags = a["flags"]
        t = int(np.count_nonzero(flags & _TOMBSTONE))
        n += m
        tombs += t
        key_bytes += m * a.dtype["key"].itemsize
        value_bytes += (m - t) * a.dtype["val"].itemsize
        ts += (int(a["ts"].min()), int(a["ts"].max()))
        seqs += (int(a["seq"].min()), int(a["seq"].max()))
        if "exp" in a.dtype.names:
            has = (flags & _HAS_EXP) != 0
            e = int(np.count_nonzero(has))
            if e:
                expiring += e
                present = a["exp"] if e == m else a["exp"][has]
                exps += (int(present.min()), int(present.max()))
    return {
        "num_rows": n,
        "num_tombstones": tombs,
        "num_expiring": expiring,
        "key_bytes": key_bytes,
        "value_bytes": value_bytes,
        "min_ts": min(ts),
        "max_ts": max(ts),
        "min_seq": min(seqs),
        "max_seq": max(seqs),
        "min_expire_ts": min(exps) if exps else None,
        "max_expire_ts": max(exps) if exps else None,
    }


def record_stream(arrays: Sequence[Any], ttl: bool, scratch: Scratch | None = None) -> tuple[Any, Any]:
    """The row stream of the rows of `arrays` in the file's layout (`ttl`: with the expire_ts slot), as
    the row path encodes them: (the stream as a numpy uint8 array, row i's offset in it as an int64
    array of n + 1 entries, the last its end). Several arrays' streams are joined in `scratch`'s
    ``"stream"`` buffer when one is given."""
    import numpy as np

    streams = []
    sizes = []
    for a in arrays:
        s, z = _one_stream(a, ttl)
        streams.append(s)
        sizes.append(z)
    starts = np.zeros(sum(map(len, sizes)) + 1, np.int64)
    np.cumsum(np.concatenate(sizes) if len(sizes) > 1 else sizes[0], out=starts[1:])
    if len(streams) == 1:
        return streams[0], starts
    out = None if scratch is None else scratch.get("stream", int(starts[-1]))
    return np.concatenate(streams, out=out), starts


class Scratch:
    """Byte buffers lent to the SST writers of one output (`compaction.output.SstOutput`), one per use,
    each grown to the largest size asked for and kept: a compaction writes one output file after
    another, and a buffer of a few MiB freed after each file is given back to the kernel by the
    allocator and faulted in again, page by page, for the next (a third of a full compaction's CPU was
    those page faults). Not for two writers at a time: an output writes its files one by one."""

    __slots__ = ("_buffers",)

    def __init__(self) -> None:
        self._buffers: dict[str, Any] = {}

    def get(self, name: str, size: int) -> Any:
        """A numpy uint8 array of `size` bytes (contents undefined), valid until the next `get` of `name`."""
        import numpy as np

        buf = self._buffers.get(name)
        if buf is None or len(buf) < size:
            buf = self._buffers[name] = np.empty(size + size // 8, np.uint8)  # room for a larger file
        return buf[:size]


def _one_stream(a: Any, ttl: bool) -> tuple[Any, Any]:
    """`record_stream` of one array: (stream, each row's size)."""
    import numpy as np

    dtype = a.dtype
    n = len(a)
    klen = dtype["key"].itemsize
    vlen = dtype["val"].itemsize
    in_ttl = "exp" in dtype.names
    flags = a["flags"]
    tomb = (flags & _TOMBSTONE) != 0 if vlen else None  # with no value bytes a tombstone's row is alike
    if tomb is not None and not tomb.any():
        tomb = None
    recs = a
    exp_ok = not in_ttl or not (a["exp"][(flags & _HAS_EXP) == 0]).any()  # ignored slots must read 0
    fit = in_ttl == ttl and exp_ok and (a["kl"] == klen).all()
    if not (fit and tomb is None and (a["vl"] == vlen).all() and a.flags.c_contiguous):
        recs = np.empty(n, array_dtype(klen, vlen, ttl))
        recs["kl"] = klen
        recs["key"] = a["key"]
        recs["flags"] = flags
        recs["ts"] = a["ts"]
        if ttl and not in_ttl:
            recs["exp"] = 0
        elif ttl:
            recs["exp"] = a["exp"] if exp_ok else np.where(flags & _HAS_EXP, a["exp"], 0)
        recs["seq"] = a["seq"]
        recs["vl"] = vlen if tomb is None else np.where(tomb, 0, vlen)
        recs["val"] = a["val"]
    size = recs.dtype.itemsize
    raw = np.frombuffer(recs, np.uint8)  # through the buffer: the records' bytes, in order
    if tomb is None:
        return raw, np.full(n, size, np.int64)
    keep = np.ones((n, size), np.bool_)
    keep[tomb, size - vlen :] = False  # a tombstone's row ends at its value_len
    return raw.reshape(n, size)[keep], np.where(tomb, size - vlen, size)


__all__ = [
    "Scratch",
    "check_records",
    "is_records",
    "key_steps",
    "key_words",
    "record_figures",
    "record_size",
    "record_stream",
]

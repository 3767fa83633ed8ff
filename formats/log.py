"""Partition log codec: the files of a `lsm.sources.PartitionedLog` (one append-only file per partition).

All integers are big-endian and fixed width. A partition file is a header followed by records::

    file   = | magic "LSMP" | u16 format_version (1 or 2) | record* |
    record = | u32 payload_len | u64 xxh3_64(payload) | u32 head_check | payload |
             head_check = low 32 bits of xxh3_64(the 12 bytes before it)
    payload = msgpack map (str keys, bytes as msgpack bin):
        "k"   bin              key, 1..65535 bytes (required)
        "v"   bin | nil        value; nil = delete (required)
        "ttl" int >= 0         time to live, ms (omitted: none)
        "ets" int              event timestamp, ms (omitted: none)
        "tx"  int | str        transaction id (omitted: none)
        "end" true             this record closes its transaction (omitted: false; needs "tx")
        "txe" map uint -> uint this record closes a transaction spanning partitions: its records per
                               partition, this one included (needs "tx"; never with "end"). Added
                               after the first release of version 1: a reader from before it refuses
                               such a record with FormatVersionError naming the field, never misreads it
    marker payload (format_version 2) = msgpack map of exactly one key:
        "adv" int              a progress marker: no later record of the partition has event_ts < adv

A record's offset is its index in the file (0, 1, 2, ...); it is not stored. The header checksum makes the
length trustworthy on its own, so reading needs no guessing (unlike a WAL without one):

- fewer than 16 bytes left, or a payload that runs past the end of the file: a torn tail, what a producer
  mid-append leaves (a reader sees a prefix of one write(2)). It is not yet a record; reading stops there
  and reads it once the rest arrives;
- a complete header whose `head_check` fails, or a complete payload whose checksum fails, or a payload
  that is not a well-formed map: corruption, reported at the record's byte offset. Never skipped.

Format version 2 adds the progress marker (`LogWriter.advance`). It occupies an offset, as Kafka's
control records do, but is no record: readers skip it; a consumer that ingests with source times reads
the partition's progress from it. A writer creates files at version 1 and rewrites the header's version
to 2 before it appends the file's first marker, so a reader that knows only version 1 refuses a file
holding a marker (`FormatVersionError`) instead of calling it corrupt, and still reads every other file.

Deliberate simplifications: no per-record offsets or timestamps (the index is the offset, the store's
commit ts is the time), no compression, no segment rolling (one file per partition grows forever).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack
import xxhash

from formats.errors import CorruptionError, FormatVersionError
from formats.row import MAX_KEY_LEN, check_key, check_value

# DO NOT CHANGE: stored on disk.
MAGIC = b"LSMP"
FORMAT_VERSION = 2  # the newest: files holding a progress marker
FORMAT_VERSIONS = (1, 2)  # what this code reads; a file is created at 1 (`encode_file_header`)
MARKER_VERSION = 2  # the version a file's header carries once it holds a progress marker
FILE_HEADER = struct.Struct(">4sH")
RECORD_HEADER = struct.Struct(">IQI")  # payload_len, xxh3_64(payload), head_check
_LEN_AND_SUM = struct.Struct(">IQ")
MAX_PAYLOAD = 0x7FFFFFFF
_FIELDS = frozenset(("k", "v", "ttl", "ets", "tx", "end", "txe"))
MAX_PARTITION = 2**64 - 1
_xxh3 = xxhash.xxh3_64_intdigest
_unpack_header = RECORD_HEADER.unpack_from
_unpackb = msgpack.unpackb


class LogEntry(NamedTuple):
    """One decoded record. `pos` is the byte offset of its header in the file, `end` the byte after it."""

    pos: int
    end: int
    key: bytes | None  # None: a progress marker (its time in event_ts)
    value: bytes | None
    ttl: int | None
    event_ts: int | None
    tx: int | str | None
    tx_end: bool | dict[int, int]


def encode_file_header(version: int = 1) -> bytes:
    """The bytes every partition file starts with (version 1 until the file holds a progress marker)."""
    return FILE_HEADER.pack(MAGIC, version)


def file_version(buf: bytes, path: str) -> int:
    """The format version of a partition file whose first bytes are `buf` (checked as `check_file_header`)."""
    check_file_header(buf, path)
    return FILE_HEADER.unpack_from(buf, 0)[1]


def check_file_header(buf: bytes, path: str) -> None:
    """Raise unless `buf` (at least `FILE_HEADER.size` bytes) is a partition file header this code reads."""
    if len(buf) < FILE_HEADER.size:
        raise CorruptionError(path, 0, "partition log file header is truncated")
    magic, version = FILE_HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptionError(path, 0, f"not a partition log file (magic {magic!r})")
    if version not in FORMAT_VERSIONS:
        raise FormatVersionError(path, f"partition log format version {version} is not supported")


def encode_record(
    key: bytes,
    value: bytes | None,
    ttl: int | None = None,
    event_ts: int | None = None,
    tx: int | str | None = None,
    tx_end: bool | dict[int, int] = False,
) -> bytes:
    """Encode one record (header and payload); raise TypeError/ValueError on fields the format cannot hold.

    `tx_end` True closes the record's transaction in its partition ("end"); a dict {partition: records}
    closes a transaction spanning partitions ("txe", `check_tx_counts`)."""
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
    if tx_end is not False and tx_end is not None:
        if tx is None:
            raise ValueError("tx_end needs a tx: only a transaction can be closed")
        if isinstance(tx_end, dict):
            d["txe"] = check_tx_counts(tx_end)
        elif tx_end is True:
            d["end"] = True
        else:
            raise TypeError(f"tx_end must be a bool or a dict {{partition: records}}, not {type(tx_end).__name__}")
    try:
        payload = msgpack.packb(d, use_bin_type=True)
    except (OverflowError, ValueError) as e:  # ints beyond 64 bits, strings too long
        raise ValueError(f"record cannot be encoded: {e}") from None
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"record payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    head = _LEN_AND_SUM.pack(len(payload), _xxh3(payload))
    return head + (_xxh3(head) & 0xFFFFFFFF).to_bytes(4, "big") + payload


def check_tx_counts(counts: object) -> dict[int, int]:
    """`counts` of an end marker, checked: a non-empty dict {partition (0..2**64-1): records (>= 0)};
    TypeError/ValueError otherwise. (That its own partition counts at least the marker itself is checked
    where the partition is known, `LogWriter.append`.)"""
    if type(counts) is not dict or not counts:
        raise ValueError(f"tx_end counts must be a non-empty dict {{partition: records}}, got {counts!r:.80}")
    for p, n in counts.items():
        if type(p) is not int or not 0 <= p <= MAX_PARTITION or type(n) is not int or n < 0:
            raise ValueError(f"tx_end counts must map partitions 0..2**64-1 to records >= 0, got {p!r}: {n!r}")
    return counts
def encode_marker(ts: int) -> bytes:
    """Encode one progress marker (header and payload): no later record of its partition has event_ts < ts.
    Only in a file whose header says `MARKER_VERSION` (`LogWriter.advance` sees to that)."""
    if type(ts) is not int:
        raise TypeError(f"a progress time is int ms, not {type(ts).__name__}")
    try:
        payload = msgpack.packb({"adv": ts}, use_bin_type=True)
    except (OverflowError, ValueError) as e:
        raise ValueError(f"progress time {ts} cannot be encoded: {e}") from None
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
    or None if it is torn (incomplete). File offsets are `base + pos`.

    Raises CorruptionError(path, offset) for a damaged record and FormatVersionError for a field this
    code does not know.
    """
    end = record_extent(buf, pos, base, path)  # both checksums
    if end is None:
        return None
    return (end, *_payload_fields(buf[pos + 16 : end], path, base + pos))


def _payload_fields(payload: bytes, path: str, at: int) -> tuple:
    """``(key, value, ttl, event_ts, tx, tx_end)`` of a checksummed payload; the general (msgpack) decoder.
    A progress marker decodes as key None with its time as event_ts (a `MARKER` entry).

    Raises CorruptionError(path, at) unless it is a well-formed record map."""
    try:
        d = _unpackb(payload, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several unrelated types for malformed input
        raise CorruptionError(path, at, f"malformed partition log record: {e}") from None
    if type(d) is dict and len(d) == 1 and "adv" in d:  # a progress marker (format version 2)
        if type(d["adv"]) is not int:
            raise CorruptionError(path, at, f"partition log progress marker has a bad time: {d!r}")
        return None, None, None, d["adv"], None, False
    if type(d) is not dict or "k" not in d or "v" not in d:
        raise CorruptionError(path, at, "partition log record is not a map with 'k' and 'v'")
    if len(d) > 2 and not d.keys() <= _FIELDS:
        unknown = sorted(map(str, d.keys() - _FIELDS))
        raise FormatVersionError(path, f"record at offset {at} has unknown fields {unknown}")
    key = d["k"]
    value = d["v"]
    if (
        type(key) is not bytes
        or not 0 < len(key) <= MAX_KEY_LEN
        or (value is not None and type(value) is not bytes)
    ):
        raise CorruptionError(path, at, f"partition log record has a bad key or value: {d!r}")
    if len(d) == 2:
        return key, value, None, None, None, False
    ttl, ets, tx, tx_end = d.get("ttl"), d.get("ets"), d.get("tx"), d.get("end", False)
    if "txe" in d:
        tx_end = d["txe"]
        try:
            if "end" in d:
                raise ValueError("both 'end' and 'txe'")
            check_tx_counts(tx_end)
        except ValueError as e:
            raise CorruptionError(path, at, f"partition log record has a bad transaction end: {e}") from None
    if (
        not (ttl is None or (type(ttl) is int and ttl >= 0))
        or not (ets is None or type(ets) is int)
        or not (tx is None or type(tx) in (int, str))
        or (tx_end is not True and tx_end is not False and type(tx_end) is not dict)
        or (tx_end and tx is None)
    ):
        raise CorruptionError(path, at, f"partition log record has fields of the wrong type: {d!r}")
    return key, value, ttl, ets, tx, tx_end


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


# The bulk readers below are the hot path of `lsm.sources.PartitionedLog`: one loop per buffer of
# back-to-back records with everything hoisted (as formats.row's block decoders), same checks and errors
# as `record_extent` / `decode_fields`.

_KEY_HEAD = struct.Struct(">IB")  # fixmap(2) fixstr "k" bin8, and the key's length: what packb writes
_VALUE_HEAD = struct.Struct(">HB")  # fixstr "v" and the value's type byte
_U16 = struct.Struct(">H")
_K_BIN8 = 0x82A16BC4
_V = 0xA176
_U32 = struct.Struct(">I")
_HEADER_DTYPE = [("len", ">u4"), ("sum", ">u8"), ("check", ">u4")]  # RECORD_HEADER as a numpy record
# XXH3's bitflips for 9..16-byte inputs: words 24^32 and 40^48 of its default secret (`_head_checks`)
_BITFLIP1 = 0x6782737BEA4239B9
_BITFLIP2 = 0xAF56BC3B0996523A
_GUESS_MIN, _GUESS_MAX = 64, 1 << 16  # records per guessed run of equal lengths (`_walk`)


def scan_records(
    buf: bytes, base: int, path: str, append: Callable[[int], object], payloads: bool = True
) -> int:
    """Verify the complete records of `buf` (back to back from index 0; file offset `base`): both
    checksums of each, or with `payloads` False the header checksum only (which is what makes the length,
    and so the next record's position, trustworthy: enough to count and locate records, not to read
    them). Call `append(file offset)` for each; return the index after the last complete one (where a
    torn tail, or the end, starts). Raises CorruptionError at the first damaged record. O(len(buf))."""
    if not payloads:
        positions, pos = scan_heads(buf, base, path)
        for _ in map(append, positions.tolist()):
            pass
        return pos
    unpack = _unpack_header
    xxh3 = _xxh3
    pos = 0
    n = len(buf)
    while pos + 16 <= n:
        length, check, head_check = unpack(buf, pos)
        if xxh3(buf[pos : pos + 12]) & 0xFFFFFFFF != head_check:
            raise CorruptionError(path, base + pos, "partition log record header checksum mismatch")
        end = pos + 16 + length
        if end > n:
            break
        if xxh3(buf[pos + 16 : end]) != check:
            raise CorruptionError(path, base + pos, "partition log record checksum mismatch")
        append(base + pos)
        pos = end
    return pos


def byte_windows(buf: bytes, width: int) -> Any:
    """Every `width`-byte window of `buf` (width > 0) as one numpy array of dtype ``V<width>``: item i
    is ``buf[i : i + width]``. A view, nothing copied; ``byte_windows(buf, w)[positions]`` gathers `w`
    bytes at each position in one C loop (an index matrix of ``positions[:, None] + range(w)`` costs
    about ten times as much)."""
    import numpy as np

    return np.ndarray((max(0, len(buf) - width + 1),), f"V{width}", buf, 0, (1,))


def _walk(buf: bytes) -> tuple[Any, int, bytes, Any]:
    """Follow the record lengths of `buf` (back to back from index 0): (the positions of the records
    whose 16-byte header lies in `buf`, as a numpy int64 array, the index after the last (past
    ``len(buf)`` when it is torn), their headers back to back, where each header's checksum fails). One
    Python step per record, except along runs of records of one length, which are guessed and checked a
    column at a time; the header checksums are compared on whole columns (`_head_checks`). A bad length
    sends the walk astray only after its own bad header, so the first failure is where a
    record-by-record reader fails."""
    import numpy as np

    n = len(buf)
    runs: list[Any] = []  # the positions found so far, as numpy arrays in order
    steps: list[int] = []  # positions found one step at a time since the last guessed run
    add = steps.append
    u32 = _U32.unpack_from
    lengths = byte_windows(buf, 4)  # a guessed run's length fields are gathered from here
    pos = 0
    window = _GUESS_MIN
    plain_steps = 0
    while pos + 16 <= n:
        stride = 16 + u32(buf, pos)[0]
        if plain_steps <= 0:
            # guess a run of records of this same length (fixed-size records are common) and check the
            # guess on a whole column of length fields: the positions are those the steps would take
            k = min(window, (n - pos) // stride)  # records of this length that fit whole
            if k > 1:
                guess = np.arange(pos, pos + k * stride, stride, dtype=np.int64)
                same = lengths[guess].view(">u4") == stride - 16
                j = k if same.all() else int(same.argmin())
                if steps:
                    runs.append(np.array(steps, np.int64))
                    steps.clear()
                runs.append(guess[:j])
                pos += j * stride
                if j == k:
                    window = min(2 * window, _GUESS_MAX)
                else:  # the length changed: step record by record for a while
                    window = _GUESS_MIN
                    plain_steps = _GUESS_MIN
                continue
        add(pos)
        pos += stride
        plain_steps -= 1
    if steps:
        runs.append(np.array(steps, np.int64))
    if not runs:
        return np.zeros(0, np.int64), 0, b"", np.zeros(0, bool)
    positions = runs[0] if len(runs) == 1 else np.concatenate(runs)
    heads = _heads(buf, positions)
    return positions, pos, heads, _head_checks(heads) != np.frombuffer(heads, _HEADER_DTYPE)["check"]


def scan_heads(buf: bytes, base: int, path: str) -> tuple[Any, int]:
    """`scan_records` with `payloads` False, for callers that keep positions in bulk: the file offsets of
    the complete records of `buf` (back to back from index 0; file offset `base`) as a numpy int64
    array, and the index after the last, with their header checksums checked (CorruptionError at the
    first bad one), not their payloads'. No Python object per record. O(len(buf))."""
    positions, pos, _heads_, bad = _walk(buf)
    if bad.any():
        raise CorruptionError(
            path, base + int(positions[int(bad.argmax())]), "partition log record header checksum mismatch"
        )
    if pos > len(buf):  # the last record is torn
        pos = int(positions[-1])
        positions = positions[:-1]
    return positions + base, pos


def _heads(buf: bytes, positions: Any) -> bytes:
    """The 16-byte headers of the records at `positions` (a numpy int64 array) of `buf`, back to back."""
    return byte_windows(buf, 16)[positions].tobytes()


def _head_checks(heads: bytes) -> Any:
    """For each 16-byte header of `heads`: the header checksum it should carry, the low 32 bits of
    xxh3_64 of its first 12 bytes, computed on whole numpy columns. XXH3's formula for inputs of 9 to 16
    bytes (the xxHash specification, XXH3_len_9to16_64b, default secret and seed 0) in wrapping uint64
    arithmetic, the 64x64 -> 128-bit product from 32-bit halves; a test holds it to `xxhash`."""
    import numpy as np

    u64 = np.uint64
    a = np.frombuffer(heads, np.uint8).reshape(-1, 16)
    lo = np.ascontiguousarray(a[:, 0:8]).view("<u8").ravel() ^ u64(_BITFLIP1)
    hi = np.ascontiguousarray(a[:, 4:12]).view("<u8").ravel() ^ u64(_BITFLIP2)
    m32, s32 = u64(0xFFFFFFFF), u64(32)
    a0, a1, b0, b1 = lo & m32, lo >> s32, hi & m32, hi >> s32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> s32) + (p10 & m32) + (p01 & m32)
    fold = ((mid << s32) | (p00 & m32)) ^ (p11 + (p10 >> s32) + (p01 >> s32) + (mid >> s32))
    acc = u64(12) + lo.byteswap() + hi + fold
    acc ^= acc >> u64(37)
    acc *= u64(0x165667919E3779F9)
    acc ^= acc >> s32
    return acc & m32


def decode_plain(buf: bytes, base: int, path: str) -> tuple[Any, Any, Any, Any] | None:
    """The records of `buf` (back to back from index 0 to its end; file offset `base`) as columns when
    every one is plain: a key and a value or a delete and nothing else, in the layout `encode_record`
    gives (the fast path of `decode_run_end`). Returns numpy int64 arrays ``(kstarts, kends, vstarts,
    vends)``: per record in order the spans of its key and value in `buf` (-1, -1 for a delete's value).
    Nothing is copied: a caller that resolves and sorts first copies each surviving key and value once,
    in its final order. Returns None when some record is not plain, or `buf` ends in a torn record: read
    it with `decode_run_end` then, which gives the records (or the error) record by record.

    Raises CorruptionError at the first damaged record (both checksums of every record are verified),
    as a record-by-record reader would. One Python step per record follows the length chain; the rest
    (header checksums, checksum comparisons, layout checks, spans) is done on whole columns with numpy,
    the payload checksums by one `map`. O(len(buf))."""
    import numpy as np

    n = len(buf)
    positions, pos, heads, bad_head = _walk(buf)
    m = len(positions)
    if not m:
        if n:
            return None
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    b = np.frombuffer(buf, np.uint8)
    p = positions
    h = np.frombuffer(heads, _HEADER_DTYPE)
    q = p + 16
    ends = q + h["len"].astype(np.int64)
    got_sum = np.fromiter(map(_xxh3, map(buf.__getitem__, map(slice, q.tolist(), ends.tolist()))), np.uint64, m)
    bad = bad_head | ((got_sum != h["sum"]) & (ends <= n))
    if bad.any():  # every record before it is sound, so a record-by-record reader stops there too
        i = int(bad.argmax())
        what = "header checksum" if bad_head[i] else "checksum"
        raise CorruptionError(path, base + int(positions[i]), f"partition log record {what} mismatch")
    if pos != n:  # a torn record at the end (or bytes too short for a header): not for this reader
        return None
    last = n - 1  # indexes are clipped to the buffer: a record too short for the layout fails `ok`
    # (a record too short for the tag fails `ok` below whatever is read here)
    tag = byte_windows(buf, 4)[np.minimum(q, n - 4)].view(">u4")
    klen = b[np.minimum(q + 4, last)].astype(np.int64)
    ke = q + 5 + klen
    v0 = b[np.minimum(ke, last)]
    v1 = b[np.minimum(ke + 1, last)]
    vtype = b[np.minimum(ke + 2, last)]
    l8 = b[np.minimum(ke + 3, last)].astype(np.int64)
    l16 = (l8 << 8) | b[np.minimum(ke + 4, last)]
    vs = np.where(vtype == 0xC4, ke + 4, ke + 5)
    vlen = np.where(vtype == 0xC4, l8, l16)
    ok = (h["len"] >= 9) & (tag == _K_BIN8) & (klen > 0) & (ke + 3 <= ends) & (v0 == 0xA1) & (v1 == 0x76)
    dele = vtype == 0xC0
    ok &= np.where(dele, ke + 3 == ends, ((vtype == 0xC4) | (vtype == 0xC5)) & (vs <= ends) & (vs + vlen == ends))
    if not ok.all():
        return None
    if dele.any():
        vs = np.where(dele, -1, vs)
        ends = np.where(dele, -1, ends)
    return q + 5, ke, vs, ends


def decode_run(
    buf: bytes, base: int, path: str, label: int, first: int, verify: bool = True
) -> tuple[list[tuple], bool]:
    """`decode_run_end` without the end position: (tuples, whether any has a tx)."""
    out, has_tx, _end = decode_run_end(buf, base, path, label, first, verify)
    return out, has_tx


def decode_run_end(
    buf: bytes, base: int, path: str, label: int, first: int, verify: bool = True
) -> tuple[list[tuple], bool, int]:
    """Decode the complete records of `buf` (back to back from index 0; file offset `base`), the first
    of which has offset `first`, into tuples ``(label, offset, key, value, ttl, event_ts, tx, tx_end)``
    (`label`: the caller's partition id). Stops at a torn tail (or a record cut by the end of `buf`).
    Returns (tuples, whether any has a tx or is a progress marker, the index into `buf` after the last
    complete record). A progress marker is the tuple ``(label, offset, None, None, None, ts, None, False)``
    (key None): it takes an offset, and every consumer of runs skips it as a record.

    With `verify` False the checksums are not checked again: only for bytes the caller verified (with
    `scan_records`) and knows unchanged since. A payload in the exact layout `encode_record` gives a
    key and a value and nothing else (bin8 key, nil/bin8/bin16 value) is parsed here; any other goes
    through msgpack and the full checks of `decode_fields`. Same results and errors either way. O(len(buf)).
    """
    out: list[tuple] = []
    append = out.append
    unpack = _unpack_header
    key_head = _KEY_HEAD.unpack_from
    value_head = _VALUE_HEAD.unpack_from
    u16 = _U16.unpack_from
    xxh3 = _xxh3
    has_tx = False
    off = first
    pos = 0
    n = len(buf)
    while pos + 16 <= n:
        length, check, head_check = unpack(buf, pos)
        if verify and xxh3(buf[pos : pos + 12]) & 0xFFFFFFFF != head_check:
            raise CorruptionError(path, base + pos, "partition log record header checksum mismatch")
        q = pos + 16
        end = q + length
        if end > n:
            break
        if verify and xxh3(buf[q:end]) != check:
            raise CorruptionError(path, base + pos, "partition log record checksum mismatch")
        if length >= 9:
            tag, klen = key_head(buf, q)
            if tag == _K_BIN8 and klen:
                ke = q + 5 + klen
                if ke + 3 <= end:
                    vtag, vtype = value_head(buf, ke)
                    if vtag == _V:
                        if vtype == 0xC4:
                            vs = ke + 4
                            if vs <= end and vs + buf[ke + 3] == end:
                                append((label, off, buf[q + 5 : ke], buf[vs:end], None, None, None, False))
                                off += 1
                                pos = end
                                continue
                        elif vtype == 0xC0:
                            if ke + 3 == end:
                                append((label, off, buf[q + 5 : ke], None, None, None, None, False))
                                off += 1
                                pos = end
                                continue
                        elif vtype == 0xC5:
                            vs = ke + 5
                            if vs <= end and vs + u16(buf, ke + 3)[0] == end:
                                append((label, off, buf[q + 5 : ke], buf[vs:end], None, None, None, False))
                                off += 1
                                pos = end
                                continue
        key, value, ttl, ets, tx, tx_end = _payload_fields(buf[q:end], path, base + pos)
        if tx is not None or key is None:  # a transaction, or a progress marker: not a simple run
            has_tx = True
        append((label, off, key, value, ttl, ets, tx, tx_end))
        off += 1
        pos = end
    return out, has_tx, pos


__all__ = [
    "FILE_HEADER",
    "FORMAT_VERSION",
    "MAGIC",
    "RECORD_HEADER",
    "LogEntry",
    "check_file_header",
    "decode_fields",
    "decode_plain",
    "decode_record",
    "decode_records",
    "decode_run",
    "decode_run_end",
    "encode_file_header",
    "encode_marker",
    "encode_record",
    "file_version",
    "FORMAT_VERSIONS",
    "MARKER_VERSION",
    "record_extent",
    "byte_windows",
    "check_tx_counts",
    "scan_heads",
    "scan_records",
]

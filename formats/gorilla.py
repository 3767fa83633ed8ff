"""Gorilla (delta-of-delta) codec for sequences of 64-bit integers.

Bit-level grammar (every field MSB first; the stream is zero-padded to a byte boundary)::

    stream   := count:32 [ first:64 { dod } ] pad
    count    := number of values, unsigned
    first    := the first value as a 64-bit pattern (u64, or i64 two's complement)
    dod      := '0'                          d == 0
              | '10'   d:7                   -63   <= d <= 63
              | '110'  d:9                   -255  <= d <= 255
              | '1110' d:12                  -2047 <= d <= 2047
              | '1111' d:32                  narrow mode: any other d in [-2**31, 2**31 - 1]
              | '1111' d:64                  wide mode: any other d
    pad      := '0' * (0..7)                 up to the next byte boundary; must be zero

There is one ``dod`` per value after the first. Each ``d`` is a two's complement delta-of-delta:
``delta[i] = v[i] - v[i-1]`` and ``d[i] = delta[i] - delta[i-1]`` with ``delta[0] = 0`` (so the first
``d`` is the plain delta between the first two values). Both subtractions wrap modulo 2**64 and the
result is read as a signed 64-bit integer, so any mix of u64 values, including 0 next to 2**64 - 1,
round-trips. A stream of zero values is just the 4-byte count; a stream of one value is 12 bytes.

The stream does not say whether it is narrow or wide, nor whether the values are signed: the container
that stores it does (the seq tracker's version byte, for example). Encoding in narrow mode a ``d`` that
needs more than 32 bits raises ``ValueError``; nothing is ever truncated. ``fits_narrow`` tells in
advance whether narrow mode is possible.

Signedness: the codec stores 64-bit patterns. ``encode(..., signed=False)`` accepts values in
``[0, 2**64)`` and ``encode(..., signed=True)`` values in ``[-2**63, 2**63)``; ``decode`` gives back the
same Python ints when called with the same ``signed`` flag (a u64 >= 2**63 is stored as the i64 with the
same bits and read back as the u64).

Implementation notes: encoding builds one string of '0'/'1' characters from precomputed codes for the
common small ``d`` and converts it with a single ``int(s, 2).to_bytes``; decoding turns the bytes into
such a string, splits it into codes with a regular expression (``findall`` over windows sized from the
codes still needed), maps the codes through a precomputed table, then rebuilds the values with
``itertools.accumulate``. Both are O(n) with no per-bit or per-value Python loop.

Deliberate simplifications: the count is limited to 2**32 - 1 values; a decoder accepts non-minimal
codes (for example a small ``d`` written with the 32-bit code) because they are still unambiguous.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Sequence
from itertools import accumulate
from operator import sub

from formats.errors import LsmError

__all__ = ["GorillaError", "encode", "decode", "fits_narrow"]

_MASK64 = (1 << 64) - 1
_SIGN64 = 1 << 63
_MAX_COUNT = (1 << 32) - 1

_COUNT = struct.Struct(">I")  # count:32
_HEADER = struct.Struct(">IQ")  # count:32 first:64

# (prefix, payload bits, largest |d|) for the short codes, shortest first.
_SHORT_CODES = (("10", 7, 63), ("110", 9, 255), ("1110", 12, 2047))
_SMALL = 2047

# One code; the bit string holds only '0' and '1', so '.' is any bit (spelled-out dots measure faster
# than counted repeats in CPython's engine). The last alternative, a lone '1', matches only where a code
# runs past the end of the bits: it keeps findall from skipping characters and marks the truncation.
_TOKEN_NARROW = re.compile(r"0|1(?:0.......|1(?:0.........|1(?:0............|1.{32})))|1")
_TOKEN_WIDE = re.compile(r"0|1(?:0.......|1(?:0.........|1(?:0............|1.{64})))|1")


class GorillaError(LsmError, ValueError):
    """A Gorilla stream is truncated, malformed or cannot be encoded as asked."""


class _EncodeTable(dict[int, str]):
    """d -> code string. Pre-filled for |d| <= 2047; the '1111' code is built on demand, not stored."""

    def __init__(self, wide: bool) -> None:
        super().__init__()
        self.wide = wide
        self[0] = "0"
        for d in range(-_SMALL, _SMALL + 1):
            if d == 0:
                continue
            for prefix, bits, limit in _SHORT_CODES:
                if -limit <= d <= limit:
                    self[d] = prefix + format(d & ((1 << bits) - 1), f"0{bits}b")
                    break

    def __missing__(self, d: int) -> str:
        d = _wrap64(d)
        if -_SMALL <= d <= _SMALL:
            return self[d]
        if self.wide:
            return "1111" + format(d & _MASK64, "064b")
        if not -(1 << 31) <= d < (1 << 31):
            raise ValueError(
                f"delta-of-delta {d} does not fit 32 bits; encode in wide mode (see fits_narrow)"
            )
        return "1111" + format(d & 0xFFFFFFFF, "032b")


_ENCODE_NARROW = _EncodeTable(wide=False)
_ENCODE_WIDE = _EncodeTable(wide=True)


class _TokenCache(dict[str, int]):
    """Token string -> d. Pre-filled with every short code; long codes are parsed on first sight."""

    def __missing__(self, token: str) -> int:
        bits = len(token) - 4  # only '1111' codes are not pre-filled
        value = int(token[4:], 2)
        if value >= 1 << (bits - 1):
            value -= 1 << bits
        return value


def _build_decode_cache() -> _TokenCache:
    cache = _TokenCache()
    cache["0"] = 0
    for prefix, bits, _limit in _SHORT_CODES:
        for raw in range(1 << bits):
            signed = raw - (1 << bits) if raw >= 1 << (bits - 1) else raw
            cache[prefix + format(raw, f"0{bits}b")] = signed
    return cache


_DECODE_CACHE = _build_decode_cache()


def _to_patterns(values: Iterable[int], signed: bool) -> list[int]:
    """Validate the range of every value and return its 64-bit pattern."""
    out = list(values)
    if not out:
        return out
    lo, hi = min(out), max(out)
    if signed:
        if lo < -_SIGN64 or hi >= _SIGN64:
            raise ValueError(f"signed values must be in [-2**63, 2**63), got range [{lo}, {hi}]")
        if lo < 0:
            return [v & _MASK64 for v in out]
        return out
    if lo < 0 or hi > _MASK64:
        raise ValueError(f"unsigned values must be in [0, 2**64), got range [{lo}, {hi}]")
    return out


def _delta_of_deltas(patterns: list[int]) -> list[int]:
    """Delta-of-deltas of a list of 64-bit patterns (one per value after the first), NOT yet wrapped.

    The subtractions run on unbounded ints; callers wrap a result to i64 with `_wrap64` when it leaves
    [-2047, 2047]. Wrapping commutes with subtraction, so this equals the modulo-2**64 definition.
    """
    deltas = list(map(sub, patterns[1:], patterns[:-1]))
    prev = [0]
    prev.extend(deltas[:-1])
    return list(map(sub, deltas, prev))


def _wrap64(d: int) -> int:
    """Read `d` modulo 2**64 as a signed 64-bit integer."""
    return ((d + _SIGN64) & _MASK64) - _SIGN64


def fits_narrow(values: Sequence[int]) -> bool:
    """True when every delta-of-delta of `values` fits 32 bits, i.e. narrow mode can encode them.

    Values may be signed or unsigned (only their 64-bit patterns matter). O(n).
    """
    if len(values) < 2:
        return True
    patterns = [v & _MASK64 for v in values] if min(values) < 0 else list(values)
    dods = _delta_of_deltas(patterns)
    lo, hi = min(dods), max(dods)
    if lo < -_SIGN64 or hi >= _SIGN64:
        dods = list(map(_wrap64, dods))
        lo, hi = min(dods), max(dods)
    return -(1 << 31) <= lo and hi < (1 << 31)


def encode(values: Sequence[int], wide: bool = False, *, signed: bool = False) -> bytes:
    """Encode `values` as one Gorilla stream (see the module docstring for the grammar).

    `signed` selects the accepted range: [0, 2**64) when False, [-2**63, 2**63) when True.
    In narrow mode (`wide=False`) a delta-of-delta outside [-2**31, 2**31) raises ValueError.
    O(n) time and space.
    """
    patterns = _to_patterns(values, signed)
    n = len(patterns)
    if n > _MAX_COUNT:
        raise ValueError(f"too many values for one stream: {n} > {_MAX_COUNT}")
    if n == 0:
        return _COUNT.pack(0)
    head = _HEADER.pack(n, patterns[0])
    if n == 1:
        return head
    table = _ENCODE_WIDE if wide else _ENCODE_NARROW
    bits = "".join(map(table.__getitem__, _delta_of_deltas(patterns)))
    return head + _bits_to_bytes(bits, (len(bits) + 7) // 8)


def _bits_to_bytes(bits: str, nbytes: int) -> bytes:
    """'0'/'1' string -> big-endian bytes, zero-padded on the right to `nbytes` bytes."""
    pad = nbytes * 8 - len(bits)
    return (int(bits, 2) << pad).to_bytes(nbytes, "big")


def decode(buf: bytes, offset: int = 0, wide: bool = False, *, signed: bool = False) -> tuple[list[int], int]:
    """Decode one Gorilla stream starting at `buf[offset]`.

    Returns the values and the offset just past the stream (after its padding). `wide` and `signed`
    must match what was used to encode. Raises GorillaError when the stream is truncated, when its
    padding bits are not zero, or when `offset` is outside the buffer. O(n) time and space.
    """
    mv = memoryview(buf)
    if offset < 0 or offset > len(mv):
        raise GorillaError(f"offset {offset} is outside a buffer of {len(mv)} bytes")
    if len(mv) - offset < _COUNT.size:
        raise GorillaError(
            f"truncated gorilla stream at offset {offset}: need 4 bytes of count, have {len(mv) - offset}"
        )
    (n,) = _COUNT.unpack_from(mv, offset)
    if n == 0:
        return [], offset + _COUNT.size
    if len(mv) - offset < _HEADER.size:
        raise GorillaError(
            f"truncated gorilla stream at offset {offset}: count {n} but no complete first value"
        )
    _, first = _HEADER.unpack_from(mv, offset)
    pos = offset + _HEADER.size
    if n == 1:
        return [_from_pattern(first, signed)], pos

    need = n - 1  # one code per value after the first
    max_code_bits = 68 if wide else 36
    avail = len(mv) - pos
    if avail * 8 < need:
        raise GorillaError(
            f"truncated gorilla stream at offset {offset}: {need} codes need at least {need} bits, "
            f"{avail * 8} available"
        )
    take = min(avail, (need * max_code_bits + 7) // 8)
    chunk = mv[pos : pos + take]
    bits = format(int.from_bytes(chunk, "big"), f"0{take * 8}b")
    found = _tokenize(_TOKEN_WIDE if wide else _TOKEN_NARROW, bits, need)
    if found is None:
        raise GorillaError(f"truncated gorilla stream at offset {offset}: fewer than {need} complete codes")
    tokens, nbits = found
    end_byte = (nbits + 7) // 8
    if bits[nbits : end_byte * 8].count("1"):
        raise GorillaError(f"gorilla stream at offset {offset}: non-zero padding bits")

    cache = _DECODE_CACHE
    dods = list(map(cache.__getitem__, tokens))
    # Sum on unbounded ints and wrap once at the end: wrapping commutes with addition.
    out = list(accumulate(accumulate(dods), initial=first))
    lo, hi = min(out), max(out)
    if signed:
        if lo < 0 or hi >= _SIGN64:
            out = [((v + _SIGN64) & _MASK64) - _SIGN64 for v in out]
    elif lo < 0 or hi > _MASK64:
        out = [v & _MASK64 for v in out]
    return out, pos + end_byte


def _tokenize(pattern: re.Pattern[str], bits: str, need: int) -> tuple[list[str], int] | None:
    """The first `need` codes of `bits` and the number of bits they take, or None when the bits run
    out first.

    findall scans windows sized so as not to run far past the end of this stream (the bits that follow
    may belong to another stream, where 1-bit codes would cost as much as real ones): the first window
    is `need` bits, the least the codes can take, and later ones are the codes still needed times the
    average code length seen so far. A window edge can only cut the last code of a window, which then
    shows up as a lone '1' token; it is dropped and rescanned in the next window.
    """
    tokens: list[str] = []
    pos, end = 0, len(bits)
    window = need
    while need > 0:
        stop = min(end, pos + max(window, 72))  # 72 > the longest code, so every window makes progress
        chunk = pattern.findall(bits, pos, stop)
        if "1" in chunk:
            if stop == end:
                if chunk.index("1") < need:
                    return None
            else:
                del chunk[chunk.index("1") :]
        del chunk[need:]
        tokens.extend(chunk)
        need -= len(chunk)
        consumed = sum(map(len, chunk))
        pos += consumed
        if need > 0 and stop == end:
            return None
        window = need * -(-consumed // len(chunk)) if chunk else need
    return tokens, pos


def _from_pattern(pattern: int, signed: bool) -> int:
    if signed and pattern >= _SIGN64:
        return pattern - (1 << 64)
    return pattern

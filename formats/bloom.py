"""Bloom filter over an SST's keys.

Layout (the filter block payload; the SST adds the block trailer with its checksum)::

    | u8 num_probes | u32 num_bits | bits: ceil(num_bits / 8) bytes |

Probes use double hashing over one 64-bit xxh3 hash of the key: ``h1 = h & 0xFFFFFFFF``,
``h2 = h >> 32``, probe i tests bit ``(h1 + i * h2) % num_bits``; bit b lives in byte ``b >> 3`` at
position ``b & 7`` (least significant first). ``num_probes = round(bits_per_key * ln 2)``, at least 1.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable
from typing import Any

import xxhash

HEADER = struct.Struct(">BI")
_hash = xxhash.xxh3_64_intdigest


_NUMPY_MIN_KEYS = 512  # below this the plain loop is as fast, and no caller pays for importing numpy


def _shape(num_keys: int, bits_per_key: int) -> tuple[int, int]:
    """(probes, bits) of a filter of `num_keys` keys."""
    return max(1, min(30, round(bits_per_key * math.log(2)))), max(64, num_keys * bits_per_key)


def build(keys: Iterable[bytes], bits_per_key: int = 10) -> bytes:
    """Build a filter for `keys` (O(n * probes)); the probes of a large filter are set with numpy, in one
    vectorised pass (the same bits, about ten times faster than a Python loop over the probes)."""
    hashes = list(map(_hash, keys))
    k, nbits = _shape(len(hashes), bits_per_key)
    if len(hashes) >= _NUMPY_MIN_KEYS:
        return HEADER.pack(k, nbits) + _bits_numpy(hashes, k, nbits)
    bits = bytearray((nbits + 7) // 8)
    for h in hashes:
        h1 = h & 0xFFFFFFFF
        h2 = h >> 32
        for i in range(k):
            b = (h1 + i * h2) % nbits
            bits[b >> 3] |= 1 << (b & 7)
    return HEADER.pack(k, nbits) + bytes(bits)


def build_hashed(hashes: Any, bits_per_key: int = 10) -> bytes:
    """`build` from the keys' xxh3_64 hashes as a numpy uint64 array (`formats.xxh3_numpy.key_hashes`,
    which hashes a column of keys without a bytes object per key): the same filter."""
    k, nbits = _shape(len(hashes), bits_per_key)
    return HEADER.pack(k, nbits) + _bits_numpy(hashes, k, nbits)


def _bits_numpy(hashes: Any, k: int, nbits: int) -> bytes:
    """The bit array of `build` computed with numpy: probe i is ``(h1 + i * h2) % nbits``, walked as
    `BloomFilter.may_contain` walks it (both terms reduced once, then one add and one conditional
    subtract per probe: two 64-bit divisions per key instead of one per probe; nbits < 2**62, so the
    int64 sums cannot overflow)."""
    import numpy as np

    h = np.asarray(hashes, dtype=np.uint64)
    n = np.uint64(nbits)
    at = ((h & np.uint64(0xFFFFFFFF)) % n).astype(np.int64)
    step = ((h >> np.uint64(32)) % n).astype(np.int64)
    marks = np.zeros(((nbits + 7) // 8) * 8, dtype=np.bool_)
    for i in range(k):
        marks[at] = True
        if i + 1 < k:
            at += step
            at -= nbits * (at >= nbits)
    return np.packbits(marks, bitorder="little").tobytes()


class BloomFilter:
    """A decoded filter; `may_contain` is O(probes)."""

    __slots__ = ("k", "nbits", "bits")

    def __init__(self, payload: bytes | memoryview) -> None:
        """`payload` is the filter block's payload: bytes, or a view (of a mapped file: the filter then
        keeps a view of its bits, which `release` lets go)."""
        if len(payload) < HEADER.size:
            raise ValueError("bloom filter payload too short")
        self.k, self.nbits = HEADER.unpack_from(payload, 0)
        if self.k == 0 or self.nbits == 0 or len(payload) - HEADER.size != (self.nbits + 7) // 8:
            raise ValueError("bloom filter header does not match its size")
        self.bits = payload[HEADER.size :]

    def release(self) -> None:
        """Let go of a view of the bits (a no-op for bytes); the filter is not used afterwards."""
        if type(self.bits) is memoryview:
            self.bits.release()

    def may_contain(self, key: bytes) -> bool:
        """False only if `key` was certainly not added (no false negatives).

        Walks the probes ``(h1 + i * h2) % num_bits`` incrementally (the same bits: both terms reduced
        mod num_bits once, then one add and one compare per probe) and returns at the first clear bit."""
        h = _hash(key)
        nbits = self.nbits
        b = (h & 0xFFFFFFFF) % nbits
        step = (h >> 32) % nbits
        bits = self.bits
        for _ in range(self.k):
            if not bits[b >> 3] >> (b & 7) & 1:
                return False
            b += step
            if b >= nbits:
                b -= nbits
        return True

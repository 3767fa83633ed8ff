"""xxh3_64 (seed 0, the default secret) of many keys of one width at once, in numpy: `key_hashes`.

The bloom filter of an SST (`formats.bloom`) hashes every key with `xxhash.xxh3_64_intdigest`; for keys
held as a numpy ``V<w>`` array (the SST writer's record path, `formats.sst_records`), one Python call and
one bytes object per key cost more than the rest of the filter. XXH3 hashes inputs of up to 128 bytes
with a few multiplications and shifts of 64-bit words read from the input and from its default secret,
so a column of keys of one width is hashed by the same steps over uint64 arrays (numpy's uint64
arithmetic wraps mod 2**64, as the C code's does). The 128-bit product of XXH3's ``mul128_fold64`` is
built from four 32x32-bit products. Widths 1-3, 4-8, 9-16 and 17-128 are XXH3's four short-input
paths; `key_hashes` returns None for any other width (the caller hashes key by key). A test holds every
width to `xxhash` on random keys.
"""

from __future__ import annotations

from typing import Any

# XXH3's default secret (``kSecret``), the first 128 of its 192 bytes: all inputs of up to 128 bytes read
_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
)
_PRIME64_1 = 0x9E3779B185EBCA87
_PRIME64_2 = 0xC2B2AE3D27D4EB4F
_PRIME64_3 = 0x165667B19E3779F9
_PRIME_MX1 = 0x165667919E3779F9
_PRIME_MX2 = 0x9FB21C651E98DF25
MAX_WIDTH = 128


def _secret64(at: int) -> int:
    return int.from_bytes(_SECRET[at : at + 8], "little")


def _secret32(at: int) -> int:
    return int.from_bytes(_SECRET[at : at + 4], "little")


def key_hashes(keys: Any) -> Any:
    """``xxh3_64_intdigest(key)`` of every key of `keys` (a numpy ``V<w>`` array, a record field too) as
    a uint64 array, or None when w is not in 1..128. O(n) numpy passes, no Python step per key."""
    import numpy as np

    n = len(keys)
    width = keys.dtype.itemsize
    if not 0 < width <= MAX_WIDTH:
        return None
    raw = np.ascontiguousarray(keys).view(np.uint8).reshape(n, width)
    u64 = np.uint64

    def le(at: int, size: int) -> Any:  # the little-endian word of `size` bytes at `at` of every key
        return np.ascontiguousarray(raw[:, at : at + size]).view(f"<u{size}")[:, 0].astype(u64)

    if width <= 3:
        combined = (
            (raw[:, 0].astype(u64) << u64(16))
            | (raw[:, width >> 1].astype(u64) << u64(24))
            | raw[:, width - 1].astype(u64)
            | u64(width << 8)
        )
        return _xxh64_avalanche(combined ^ u64(_secret32(0) ^ _secret32(4)))
    if width <= 8:
        keyed = (le(width - 4, 4) + (le(0, 4) << u64(32))) ^ u64(_secret64(8) ^ _secret64(16))
        return _rrmxmx(keyed, width)
    if width <= 16:
        lo = le(0, 8) ^ u64(_secret64(24) ^ _secret64(32))
        hi = le(width - 8, 8) ^ u64(_secret64(40) ^ _secret64(48))
        return _avalanche(u64(width) + lo.byteswap() + hi + _mul128_fold64(lo, hi))
    acc = np.full(n, (width * _PRIME64_1) % 2**64, u64)
    # pairs of 16-byte windows from both ends, as XXH3_len_17to128_64b reads them
    rounds = 1 + (width > 32) + (width > 64) + (width > 96)
    for r in range(rounds):
        acc += _mix16(le(16 * r, 8), le(16 * r + 8, 8), 32 * r)
        acc += _mix16(le(width - 16 * (r + 1), 8), le(width - 16 * (r + 1) + 8, 8), 32 * r + 16)
    return _avalanche(acc)


def _mix16(lo: Any, hi: Any, at: int) -> Any:
    import numpy as np

    return _mul128_fold64(lo ^ np.uint64(_secret64(at)), hi ^ np.uint64(_secret64(at + 8)))


def _mul128_fold64(a: Any, b: Any) -> Any:
    """The low 64 bits xor the high 64 bits of the 128-bit products a * b (XXH3_mul128_fold64)."""
    import numpy as np

    u64 = np.uint64
    low32 = u64(0xFFFFFFFF)
    a_lo, a_hi = a & low32, a >> u64(32)
    b_lo, b_hi = b & low32, b >> u64(32)
    lo_lo = a_lo * b_lo
    hi_lo = a_hi * b_lo
    lo_hi = a_lo * b_hi
    cross = (lo_lo >> u64(32)) + (hi_lo & low32) + lo_hi  # < 2**64: no carry is lost
    upper = (hi_lo >> u64(32)) + (cross >> u64(32)) + a_hi * b_hi
    lower = (cross << u64(32)) | (lo_lo & low32)
    return lower ^ upper


def _avalanche(h: Any) -> Any:
    import numpy as np

    u64 = np.uint64
    h = h ^ (h >> u64(37))
    h *= u64(_PRIME_MX1)
    return h ^ (h >> u64(32))


def _xxh64_avalanche(h: Any) -> Any:
    import numpy as np

    u64 = np.uint64
    h = h ^ (h >> u64(33))
    h *= u64(_PRIME64_2)
    h ^= h >> u64(29)
    h *= u64(_PRIME64_3)
    return h ^ (h >> u64(32))


def _rrmxmx(h: Any, width: int) -> Any:
    import numpy as np

    u64 = np.uint64
    h = h ^ (((h << u64(49)) | (h >> u64(15))) ^ ((h << u64(24)) | (h >> u64(40))))
    h *= u64(_PRIME_MX2)
    h ^= (h >> u64(35)) + u64(width)
    h *= u64(_PRIME_MX2)
    return h ^ (h >> u64(28))


__all__ = ["MAX_WIDTH", "key_hashes"]

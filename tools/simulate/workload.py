"""The deterministic workload generator: a spec's phases turned into one stream of timed operations.

Everything comes from one `random.Random(spec.seed)`, drawn in a fixed order, so the same spec and seed
give the same operations on every machine and every Python >= 3.11 (``random`` guarantees its sequence
for a given seed). The operations are generated once per spec into compact parallel arrays (about 30
bytes per operation) and every policy replays the same ones.

* Arrivals are a Poisson process: exponential gaps with mean ``1000 / ops_per_sec`` ms, rounded down to
  whole ms (several operations may share a millisecond). A phase with ``ops_per_sec = 0`` only lets
  time pass.
* Keys are ``b"key%012d" % index`` for an index in ``[0, keys)``: ``uniform``; ``zipfian`` (YCSB's
  generator after Gray et al., "Quickly generating billion-record synthetic databases", SIGMOD 1994,
  with skew ``zipf_theta``; ranks are scattered over the key space by a fixed bijection so the hot keys
  are not neighbours); ``latest`` (YCSB's "latest": every put inserts the next key of a counter that
  wraps at ``keys``, and deletes, gets and scans pick a recent key, the most recent the likeliest).
* Value sizes: constant, uniform in [min, max], or normal(mean, stddev) clamped at 0. Values are cut
  from one seeded random buffer.
* TTLs: each put draws one entry of the phase's TTL mix.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from array import array
from collections.abc import Iterator

from tools.simulate.spec import Phase, Spec

PUT, DELETE, GET, SCAN = 0, 1, 2, 3
OP_CODES = {"put": PUT, "delete": DELETE, "get": GET, "scan": SCAN}
OP_NAMES = {v: k for k, v in OP_CODES.items()}
NO_TTL = -1
_SCATTER = 2_654_435_761  # Knuth's multiplicative constant, a prime: rank -> key index is a bijection


def key_bytes(index: int) -> bytes:
    """The key of key index `index`."""
    return b"key%012d" % index


def key_index(key: bytes) -> int:
    """The key index of a `key_bytes` key (the order of the keys is that of the indexes)."""
    return int(key[3:])


@functools.lru_cache(maxsize=16)
def _zeta(n: int, theta: float) -> float:
    return sum(1.0 / (i**theta) for i in range(1, n + 1))


class Zipfian:
    """Ranks in [0, n) with P(rank r) proportional to 1 / (r + 1) ** theta (YCSB's ZipfianGenerator)."""

    def __init__(self, n: int, theta: float) -> None:
        self.n = n
        self.theta = theta
        self.zetan = _zeta(n, theta)
        zeta2 = _zeta(min(n, 2), theta)
        self.alpha = 1.0 / (1.0 - theta)
        self.eta = (1 - (2.0 / n) ** (1 - theta)) / (1 - zeta2 / self.zetan) if n > 2 else 1.0
        self.half_pow = 1 + 0.5**theta

    def rank(self, u: float) -> int:
        """The rank for a uniform draw `u` in [0, 1)."""
        uz = u * self.zetan
        if uz < 1.0:
            return 0
        if uz < self.half_pow:
            return min(1, self.n - 1)
        return min(self.n - 1, int(self.n * (self.eta * u - self.eta + 1) ** self.alpha))


@dataclasses.dataclass
class Ops:
    """Generated operations as parallel arrays, in time order."""

    t: array  # simulated ms of each operation
    op: array  # PUT / DELETE / GET / SCAN
    key: array  # key index
    vlen: array  # value bytes (puts)
    ttl: array  # ms, or NO_TTL (puts)
    end_ms: int  # the end of the last phase
    phase_ends: tuple[int, ...]  # simulated ms at which each phase ends
    pool: bytes  # value bytes are cut from here

    def __len__(self) -> int:
        return len(self.t)

    def value(self, i: int, n: int) -> bytes:
        """The value of `n` bytes for operation `i` (deterministic)."""
        off = (i * 7919) % (len(self.pool) - n + 1)
        return self.pool[off : off + n]

    def counts(self) -> dict[str, int]:
        """Operations by kind."""
        out = dict.fromkeys(OP_CODES, 0)
        for code in self.op:
            out[OP_NAMES[code]] += 1
        return out


def _max_value(ph: Phase) -> int:
    vs = ph.value_size
    if vs.distribution == "uniform":
        return vs.hi
    if vs.distribution == "normal":
        return int(vs.mean + 8 * vs.stddev) + 1
    return int(vs.mean)


def generate(spec: Spec) -> Ops:
    """All operations of `spec`, deterministically from `spec.seed`. O(operations)."""
    rng = random.Random(spec.seed)
    longest = max(_max_value(p) for p in spec.phases)
    pool = rng.randbytes(max(1 << 16, 2 * longest))
    ops = Ops(array("q"), array("b"), array("q"), array("l"), array("q"), 0, (), pool)
    zipf: Zipfian | None = None
    head = 0  # "latest": the next key a put inserts
    t0 = spec.start_ms
    ends = []
    n_keys = spec.keys
    for ph in spec.phases:
        end = t0 + ph.duration_ms
        ends.append(end)
        if ph.ops_per_sec > 0:
            if ph.key_distribution != "uniform" and zipf is None:
                zipf = Zipfian(n_keys, spec.zipf_theta)
            head = _phase_ops(ops, ph, rng, t0, end, n_keys, zipf, head)
        t0 = end
    ops.end_ms = t0
    ops.phase_ends = tuple(ends)
    return ops


def _phase_ops(
    ops: Ops, ph: Phase, rng: random.Random, t0: int, end: int, n_keys: int, zipf, head: int
) -> int:
    mean_gap = 1000.0 / ph.ops_per_sec
    cum_mix = _cumulative([(OP_CODES[name], f) for name, f in ph.mix])
    cum_ttl = _cumulative([(NO_TTL if ttl is None else ttl, f) for f, ttl in ph.ttl])
    vs = ph.value_size
    dist = ph.key_distribution
    expo, rand, randrange = rng.expovariate, rng.random, rng.randrange
    t_a, op_a, key_a, vlen_a, ttl_a = (
        ops.t.append,
        ops.op.append,
        ops.key.append,
        ops.vlen.append,
        ops.ttl.append,
    )
    t = float(t0)
    lam = 1.0 / mean_gap
    while True:
        t += expo(lam)
        if t >= end:
            return head
        code = _pick(cum_mix, rand())
        if dist == "uniform":
            k = randrange(n_keys)
        elif dist == "zipfian":
            k = (zipf.rank(rand()) * _SCATTER) % n_keys
        elif code == PUT:  # latest: a put inserts the next key
            k = head % n_keys
            head += 1
        else:
            k = (head - 1 - zipf.rank(rand())) % n_keys
        if code == PUT:
            if vs.distribution == "constant":
                vlen = int(vs.mean)
            elif vs.distribution == "uniform":
                vlen = randrange(vs.lo, vs.hi + 1)
            else:
                vlen = max(0, round(rng.gauss(vs.mean, vs.stddev)))
            ttl = _pick(cum_ttl, rand())
        else:
            vlen, ttl = 0, NO_TTL
        t_a(int(t))
        op_a(code)
        key_a(k)
        vlen_a(vlen)
        ttl_a(ttl)


def _cumulative(items: list[tuple[int, float]]) -> list[tuple[float, int]]:
    out, acc = [], 0.0
    for value, f in items:
        if f > 0:
            acc += f
            out.append((acc, value))
    out[-1] = (2.0, out[-1][1])  # rounding never falls off the end
    return out


def _pick(cum: list[tuple[float, int]], u: float) -> int:
    for edge, value in cum:
        if u < edge:
            return value
    return cum[-1][1]


def iter_ops(ops: Ops) -> Iterator[tuple[int, int, int, int, int]]:
    """(t, op, key index, value bytes, ttl) for every operation, in order."""
    return zip(ops.t, ops.op, ops.key, ops.vlen, ops.ttl, strict=True)


__all__ = [
    "Ops",
    "Zipfian",
    "generate",
    "iter_ops",
    "key_bytes",
    "key_index",
    "PUT",
    "DELETE",
    "GET",
    "SCAN",
    "NO_TTL",
]
